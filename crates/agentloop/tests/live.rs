//! Against the real APIs. Every test is ignored by default and reads its key from the usual
//! environment variable; run one provider's with e.g.
//! `ANTHROPIC_API_KEY=... cargo test -p agentloop --test live anthropic -- --ignored`.
//!
//! | test | needs | model (override) |
//! | --- | --- | --- |
//! | `openai_*` | `OPENAI_API_KEY` | `gpt-4.1-mini` |
//! | `deepseek_*` | `DEEPSEEK_API_KEY` | `deepseek-v4-flash` |
//! | `anthropic_*` | `ANTHROPIC_API_KEY` | `claude-haiku-4-5` (`ANTHROPIC_MODEL`) |
//! | `gemini_*` | `GEMINI_API_KEY` | `gemini-2.5-flash` (`GEMINI_MODEL`); a Gemini 3 model also checks thought signatures going back |
//! | `vertex_*` | `VERTEX_ACCESS_TOKEN` (or `GOOGLE_ACCESS_TOKEN`, e.g. from `gcloud auth print-access-token`) and `GOOGLE_CLOUD_PROJECT` (`GOOGLE_CLOUD_LOCATION`, default `global`) | `gemini-2.5-flash` (`VERTEX_MODEL`) |
//! | `responses_*` | `OPENAI_API_KEY` (`OPENAI_BASE_URL`) | `gpt-5-mini` (`OPENAI_RESPONSES_MODEL`), a reasoning model, so the encrypted reasoning item goes back with `store: false` |
//! | `bedrock_*` | `AWS_REGION` and `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_BEARER_TOKEN_BEDROCK` or a `~/.aws/credentials` profile | `amazon.nova-lite-v1:0` (`BEDROCK_MODEL`); `BEDROCK_THINKING_MODEL` (a Claude model) for signed reasoning |
//!
//! Each provider's round trip is the same: a forced tool call answered whole and streamed, then
//! the streamed history with the tool's result sent back as it is, which the provider must
//! accept (reasoning items, signatures and all) and answer with text.

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::bedrock::{Bedrock, BedrockAuth, BedrockOptions};
use agentloop::provider::gemini::Gemini;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::provider::responses::{OpenAiResponses, ReasoningConfig, ResponsesOptions};
use agentloop::{
    Accumulator, ContentBlock, FunctionDefinition, Message, Provider, Request, StopReason,
    ToolChoice, ToolDefinition,
};
use futures::StreamExt;
use serde_json::json;

fn model(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.into())
}

/// "What is the weather in Paris?" with a `get_weather` tool the model must call.
fn weather_request(model: String, max_tokens: u32, strict: bool) -> Request {
    let mut request = Request::new(
        model,
        vec![Message::user("What is the weather in Paris? Use the tool.")],
    );
    request.max_tokens = Some(max_tokens);
    request.tools = vec![ToolDefinition::from(FunctionDefinition {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }),
        strict,
    })];
    request.tool_choice = Some(ToolChoice::tool("get_weather"));
    request
}

/// The call answered whole and streamed, then the streamed history sent back with the result.
async fn round_trip(provider: &impl Provider, mut request: Request) {
    let whole = provider.complete(&request).await.expect("a whole response");
    assert_eq!(whole.stop_reason, StopReason::ToolUse, "{whole:?}");
    let call = &whole.tool_uses()[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.input["city"].as_str().is_some(), "{:?}", call.input);
    assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);

    let mut stream = provider.stream(&request);
    let mut acc = Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event.expect("a stream event"));
    }
    let streamed = acc.finish();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.tool_uses()[0].name, "get_weather");

    request.tool_choice = None;
    let next = request
        .continue_from(&streamed)
        .tool_result(streamed.tool_uses()[0].id.clone(), "18 °C, cloudy");
    let answer = provider.complete(&next).await.expect("the second turn");
    assert!(
        answer
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty())),
        "{answer:?}"
    );
}

#[tokio::test]
#[ignore = "calls the real OpenAI API; needs OPENAI_API_KEY"]
async fn openai_tool_round_trip() {
    let openai = OpenAi::from_env().expect("set OPENAI_API_KEY");
    round_trip(&openai, weather_request("gpt-4.1-mini".into(), 200, true)).await;
}

/// DeepSeek's thinking mode with a tool: the second request only succeeds if the first
/// answer's reasoning goes back as `reasoning_content`.
#[tokio::test]
#[ignore = "calls the real DeepSeek API; needs DEEPSEEK_API_KEY"]
async fn deepseek_thinks_calls_a_tool_and_answers() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct GetWeather {
        /// City name.
        city: String,
    }
    let deepseek = OpenAi::preset("deepseek").expect("set DEEPSEEK_API_KEY");
    let agent = agentloop::Agent::builder(deepseek)
        .model("deepseek-v4-flash")
        .max_tool_iterations(3)
        .tool(agentloop::Tool::function(
            "get_weather",
            "Current weather for a city",
            |args: GetWeather| async move {
                Ok::<_, std::convert::Infallible>(format!("18 °C and sunny in {}", args.city))
            },
        ))
        .build();
    let result = agent
        .run("What is the weather in Paris? Use the tool, then answer in one sentence.")
        .await
        .expect("the run succeeds");
    assert!(result.tool_calls >= 1, "{result:?}");
    assert!(result.text().contains("18"), "{}", result.text());
}

#[tokio::test]
#[ignore = "calls the real Anthropic API; needs ANTHROPIC_API_KEY"]
async fn anthropic_tool_round_trip() {
    let anthropic = Anthropic::from_env().expect("set ANTHROPIC_API_KEY");
    let request = weather_request(model("ANTHROPIC_MODEL", "claude-haiku-4-5"), 300, false);
    round_trip(&anthropic, request).await;
}

#[tokio::test]
#[ignore = "calls the real Gemini API; needs GEMINI_API_KEY"]
async fn gemini_tool_round_trip() {
    let gemini = Gemini::from_env().expect("set GEMINI_API_KEY");
    let request = weather_request(model("GEMINI_MODEL", "gemini-2.5-flash"), 1024, false);
    round_trip(&gemini, request).await;
}

#[tokio::test]
#[ignore = "calls the real Vertex AI API; needs VERTEX_ACCESS_TOKEN and GOOGLE_CLOUD_PROJECT"]
async fn vertex_tool_round_trip() {
    let spec = format!("vertex/{}", model("VERTEX_MODEL", "gemini-2.5-flash"));
    let (vertex, model) = agentloop::provider::route::from_model(&spec, Default::default())
        .expect("set VERTEX_ACCESS_TOKEN and GOOGLE_CLOUD_PROJECT");
    round_trip(&vertex, weather_request(model, 1024, false)).await;
}

#[tokio::test]
#[ignore = "calls the real OpenAI Responses API; needs OPENAI_API_KEY"]
async fn responses_tool_round_trip_with_encrypted_reasoning() {
    let mut config = HttpConfig::new(model("OPENAI_BASE_URL", "https://api.openai.com/v1"));
    config.api_key = Some(ApiKey::from_env("OPENAI_API_KEY").expect("set OPENAI_API_KEY"));
    let openai = OpenAiResponses::with_options(
        config,
        ResponsesOptions {
            reasoning: Some(ReasoningConfig {
                effort: Some("low".into()),
                summary: Some("auto".into()),
            }),
            ..ResponsesOptions::default()
        },
    )
    .expect("a provider");
    let request = weather_request(model("OPENAI_RESPONSES_MODEL", "gpt-5-mini"), 2048, true);
    round_trip(&openai, request).await;
}

#[tokio::test]
#[ignore = "calls the real Bedrock runtime; needs AWS_REGION and AWS credentials"]
async fn bedrock_tool_round_trip() {
    let bedrock = Bedrock::from_env().expect("set AWS_REGION and AWS credentials");
    let request = weather_request(model("BEDROCK_MODEL", "amazon.nova-lite-v1:0"), 2048, false);
    round_trip(&bedrock, request).await;
}

#[tokio::test]
#[ignore = "calls the real Bedrock runtime; needs AWS_REGION, AWS credentials and BEDROCK_THINKING_MODEL"]
async fn bedrock_signed_reasoning_goes_back() {
    let Ok(thinking_model) = std::env::var("BEDROCK_THINKING_MODEL") else {
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
    .expect("a provider");
    // Extended thinking does not allow a forced tool choice.
    let mut request = weather_request(thinking_model, 2048, false);
    request.tool_choice = None;
    round_trip(&bedrock, request).await;
}
