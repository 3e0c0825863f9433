//! Against the real OpenAI Responses API. Ignored by default; run with
//! `OPENAI_API_KEY=... cargo test -p agentloop --test responses_live -- --ignored`
//! (`OPENAI_RESPONSES_MODEL` picks the model, default `gpt-5-mini`, a reasoning model, so the
//! encrypted reasoning item goes back with `store: false` the way OpenAI accepts it).

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::responses::{OpenAiResponses, ReasoningConfig, ResponsesOptions};
use agentloop::{
    ContentBlock, FunctionDefinition, Message, Provider, Request, StopReason, ToolChoice,
    ToolDefinition,
};
use futures::StreamExt;
use serde_json::json;

fn request() -> Request {
    let model = std::env::var("OPENAI_RESPONSES_MODEL").unwrap_or_else(|_| "gpt-5-mini".into());
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
        strict: true,
    })];
    request.tool_choice = Some(ToolChoice::tool("get_weather"));
    request
}

fn provider() -> OpenAiResponses {
    let key = ApiKey::from_env("OPENAI_API_KEY").expect("set OPENAI_API_KEY to run the live tests");
    let mut config = HttpConfig::new(
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".into()),
    );
    config.api_key = Some(key);
    OpenAiResponses::with_options(
        config,
        ResponsesOptions {
            reasoning: Some(ReasoningConfig {
                effort: Some("low".into()),
                summary: Some("auto".into()),
            }),
            ..ResponsesOptions::default()
        },
    )
    .expect("provider")
}

#[tokio::test]
#[ignore = "calls the real OpenAI Responses API"]
async fn live_tool_call_round_trip_streamed_and_not() {
    let openai = provider();
    let request = request();

    let whole = openai.complete(&request).await.expect("complete");
    assert_eq!(whole.stop_reason, StopReason::ToolUse);
    let call = &whole.tool_uses()[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.input["city"].as_str().is_some(), "{:?}", call.input);
    assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);

    let mut stream = openai.stream(&request);
    let mut acc = agentloop::Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event.expect("stream event"));
    }
    let streamed = acc.finish();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.tool_uses()[0].name, "get_weather");

    // The history with the reasoning item and the tool result must be accepted as it is
    // (nothing is stored at OpenAI).
    let next = Request {
        tool_choice: None,
        ..request
    }
    .continue_from(&streamed)
    .tool_result(streamed.tool_uses()[0].id.clone(), "18 °C, cloudy");
    let answer = openai.complete(&next).await.expect("second turn");
    assert!(
        answer
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
    );
}
