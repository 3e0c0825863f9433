//! Against the real Bedrock runtime. Ignored by default; run with
//! `AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... cargo test -p agentloop
//! --test bedrock_live -- --ignored` (or `AWS_BEARER_TOKEN_BEDROCK`, or a `~/.aws/credentials`
//! profile; `BEDROCK_MODEL` picks the model, default `amazon.nova-lite-v1:0`;
//! `BEDROCK_THINKING_MODEL`, when set, also checks that a Claude model's signed reasoning goes
//! back the way Bedrock accepts it).

use agentloop::provider::bedrock::{Bedrock, BedrockAuth, BedrockOptions};
use agentloop::provider::http::HttpConfig;
use agentloop::{
    ContentBlock, FunctionDefinition, Message, Provider, Request, StopReason, ToolChoice,
    ToolDefinition,
};
use futures::StreamExt;
use serde_json::json;

fn request(model: String) -> Request {
    let mut request = Request::new(
        model,
        vec![Message::user("What is the weather in Paris? Use the tool.")],
    );
    request.max_tokens = Some(2048);
    request.tools = vec![ToolDefinition::from(FunctionDefinition {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }),
        strict: false,
    })];
    request
}

async fn round_trip(bedrock: &Bedrock, mut request: Request) {
    let whole = bedrock.complete(&request).await.expect("Converse");
    assert_eq!(whole.stop_reason, StopReason::ToolUse, "{whole:?}");
    let call = &whole.tool_uses()[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.input["city"].as_str().is_some(), "{:?}", call.input);
    assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);

    let mut stream = bedrock.stream(&request);
    let mut acc = agentloop::Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event.expect("ConverseStream event"));
    }
    let streamed = acc.finish();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.tool_uses()[0].name, "get_weather");

    // The history with the tool result (and any signed reasoning) must be accepted as it is.
    request.tool_choice = None;
    let next = request
        .continue_from(&streamed)
        .tool_result(streamed.tool_uses()[0].id.clone(), "18 °C, cloudy");
    let answer = bedrock.complete(&next).await.expect("second turn");
    assert!(
        answer
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
    );
}

#[tokio::test]
#[ignore = "calls the real Bedrock runtime"]
async fn live_tool_call_round_trip_streamed_and_not() {
    let bedrock = Bedrock::from_env().expect("set AWS_REGION and AWS credentials to run");
    let model = std::env::var("BEDROCK_MODEL").unwrap_or_else(|_| "amazon.nova-lite-v1:0".into());
    let mut request = request(model);
    request.tool_choice = Some(ToolChoice::tool("get_weather"));
    round_trip(&bedrock, request).await;
}

#[tokio::test]
#[ignore = "calls the real Bedrock runtime"]
async fn live_signed_reasoning_goes_back() {
    let Ok(model) = std::env::var("BEDROCK_THINKING_MODEL") else {
        eprintln!("skipped: set BEDROCK_THINKING_MODEL (a Claude model with extended thinking)");
        return;
    };
    let region = agentloop::provider::bedrock::region_from_env().expect("set AWS_REGION");
    let auth = BedrockAuth::from_env().expect("set AWS credentials");
    let bedrock = Bedrock::with_options(
        HttpConfig::new(agentloop::provider::bedrock::endpoint(&region)),
        region,
        auth,
        BedrockOptions {
            thinking_budget: Some(1024),
        },
    )
    .unwrap();
    round_trip(&bedrock, request(model)).await;
}
