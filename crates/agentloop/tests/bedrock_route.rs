//! Routing `bedrock/<modelId>`: region and Bedrock API key from options (or the environment),
//! the unknown-prefix error listing it, secrets redacted.

use agentloop::Provider;
use agentloop::provider::http::ApiKey;
use agentloop::provider::route::{self, RouteOptions};

const KEY: &str = "ABSK-SECRET-bedrock-key";

#[test]
fn the_bedrock_prefix_routes_to_the_bedrock_provider_with_the_model_id_whole() {
    let (provider, model) = route::from_model(
        "bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            region: Some("eu-west-1".into()),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        (provider.name(), model.as_str()),
        ("bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0")
    );
}

#[test]
fn the_unknown_prefix_error_lists_bedrock() {
    let error = route::from_model("nope/model", RouteOptions::default())
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("gemini, vertex, bedrock"),
        "{error}"
    );
}

#[test]
fn the_bedrock_api_key_never_shows_in_debug() {
    let (provider, _) = route::from_model(
        "bedrock/amazon.nova-lite-v1:0",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            region: Some("us-east-1".into()),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    let bedrock = agentloop::provider::bedrock::Bedrock::new(
        agentloop::provider::http::HttpConfig::new(
            "https://bedrock-runtime.us-east-1.amazonaws.com",
        ),
        "us-east-1",
        agentloop::provider::bedrock::BedrockAuth::Bearer(ApiKey::new(KEY)),
    )
    .unwrap();
    let shown = format!("{bedrock:?}");
    assert!(shown.contains("bedrock-runtime.us-east-1"), "{shown}");
    assert!(!shown.contains("SECRET"), "the key leaked into: {shown}");
    assert_eq!(provider.name(), "bedrock");
}
