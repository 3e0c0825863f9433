//! Routing `gemini/<model>` and `vertex/<model>`: keys from the usual environment variables or
//! options, Vertex project and location from options or the environment, secrets redacted.

use agentloop::Provider;
use agentloop::provider::gemini::{Gemini, GeminiOptions, VertexLocation};
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::route::{self, RouteOptions};

const KEY: &str = "AIza-SECRET-gemini-key";

#[test]
fn gemini_and_vertex_prefixes_route_to_the_gemini_provider() {
    let (provider, model) = route::from_model(
        "gemini/gemini-2.5-flash",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        (provider.name(), model.as_str()),
        ("gemini", "gemini-2.5-flash")
    );

    let (provider, model) = route::from_model(
        "vertex/gemini-3-pro-preview",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            project: Some("my-project".into()),
            location: Some("europe-west4".into()),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        (provider.name(), model.as_str()),
        ("vertex", "gemini-3-pro-preview")
    );
}

#[test]
fn keys_and_tokens_never_show_in_debug() {
    let mut config = HttpConfig::new("http://127.0.0.1:9");
    config.api_key = Some(ApiKey::new(KEY));
    let api = Gemini::new(config.clone()).unwrap();
    let location = VertexLocation {
        project: "my-project".into(),
        location: "europe-west4".into(),
    };
    assert_eq!(
        location.base_url(),
        "https://europe-west4-aiplatform.googleapis.com"
    );
    let vertex = Gemini::vertex(config, location, GeminiOptions::default()).unwrap();
    for shown in [format!("{api:?}"), format!("{vertex:?}")] {
        assert!(shown.contains("127.0.0.1"), "{shown}");
        assert!(!shown.contains("SECRET"), "the key leaked into: {shown}");
    }
}

#[test]
fn vertex_without_a_project_says_what_to_set() {
    // Reads the environment only; the variable is not set in CI.
    if std::env::var_os("GOOGLE_CLOUD_PROJECT").is_some() {
        return;
    }
    let error = route::from_model(
        "vertex/gemini-2.5-pro",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            ..RouteOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        error.to_string().contains("GOOGLE_CLOUD_PROJECT"),
        "{error}"
    );
}

#[test]
fn the_unknown_prefix_error_lists_gemini_and_vertex() {
    let error = route::from_model("bard/x", RouteOptions::default())
        .err()
        .unwrap();
    let text = error.to_string();
    assert!(text.contains("gemini") && text.contains("vertex"), "{text}");
}
