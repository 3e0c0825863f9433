//! Against the real API. Ignored by default; run with
//! `ANTHROPIC_API_KEY=... cargo test -p agentloop --test anthropic_live -- --ignored`
//! (`ANTHROPIC_MODEL` picks the model, default `claude-haiku-4-5`).

use agentloop::provider::anthropic::Anthropic;
use agentloop::{
    ContentBlock, FunctionDefinition, Message, Provider, Request, StopReason, ToolChoice,
    ToolDefinition,
};
use futures::StreamExt;
use serde_json::json;

fn request() -> Request {
    let model = std::env::var("ANTHROPIC_MODEL").unwrap_or_else(|_| "claude-haiku-4-5".into());
    let mut request = Request::new(
        model,
        vec![Message::user("What is the weather in Paris? Use the tool.")],
    );
    request.max_tokens = Some(300);
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
    request.tool_choice = Some(ToolChoice::tool("get_weather"));
    request
}

fn provider() -> Anthropic {
    Anthropic::from_env().expect("set ANTHROPIC_API_KEY to run the live tests")
}

#[tokio::test]
#[ignore = "calls the real Anthropic API"]
async fn live_tool_call_round_trip_streamed_and_not() {
    let anthropic = provider();
    let request = request();

    let whole = anthropic.complete(&request).await.expect("complete");
    assert_eq!(whole.stop_reason, StopReason::ToolUse);
    let call = &whole.tool_uses()[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.input["city"].as_str().is_some(), "{:?}", call.input);
    assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);

    let mut stream = anthropic.stream(&request);
    let mut acc = agentloop::Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event.expect("stream event"));
    }
    let streamed = acc.finish();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.tool_uses()[0].name, "get_weather");

    // The history with the tool result must be accepted as it is.
    let next = Request {
        tool_choice: None,
        ..request
    }
    .continue_from(&streamed)
    .tool_result(streamed.tool_uses()[0].id.clone(), "18 °C, cloudy");
    let answer = anthropic.complete(&next).await.expect("second turn");
    assert!(
        answer
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
    );
}
