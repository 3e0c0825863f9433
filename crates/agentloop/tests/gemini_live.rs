//! Against the real Gemini API. Ignored by default; run with
//! `GEMINI_API_KEY=... cargo test -p agentloop --test gemini_live -- --ignored`
//! (`GEMINI_MODEL` picks the model, default `gemini-2.5-flash`). With a Gemini 3 model this
//! also checks that thought signatures go back the way Gemini accepts them.

use agentloop::provider::gemini::Gemini;
use agentloop::{
    ContentBlock, FunctionDefinition, Message, Provider, Request, StopReason, ToolChoice,
    ToolDefinition,
};
use futures::StreamExt;
use serde_json::json;

fn request() -> Request {
    let model = std::env::var("GEMINI_MODEL").unwrap_or_else(|_| "gemini-2.5-flash".into());
    let mut request = Request::new(
        model,
        vec![Message::user("What is the weather in Paris? Use the tool.")],
    );
    request.max_tokens = Some(1024);
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

#[tokio::test]
#[ignore = "calls the real Gemini API"]
async fn live_tool_call_round_trip_streamed_and_not() {
    let gemini = Gemini::from_env().expect("set GEMINI_API_KEY to run the live tests");
    let request = request();

    let whole = gemini.complete(&request).await.expect("complete");
    assert_eq!(whole.stop_reason, StopReason::ToolUse);
    let call = &whole.tool_uses()[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.input["city"].as_str().is_some(), "{:?}", call.input);
    assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);

    let mut stream = gemini.stream(&request);
    let mut acc = agentloop::Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event.expect("stream event"));
    }
    let streamed = acc.finish();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.tool_uses()[0].name, "get_weather");

    // The history with the tool result (and any signature) must be accepted as it is.
    let next = Request {
        tool_choice: None,
        ..request
    }
    .continue_from(&streamed)
    .tool_result(streamed.tool_uses()[0].id.clone(), "18 °C, cloudy");
    let answer = gemini.complete(&next).await.expect("second turn");
    assert!(
        answer
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
    );
}
