//! Provider limits on the number of tools, checked before anything is sent, and what the xAI
//! preset sends for Grok.
//!
//! Limits relied on (function tools in `tools`, per request):
//! - OpenAI: 128. Chat Completions reference, `tools`: "A max of 128 functions are supported"
//!   (openai/openai-openapi, `CreateChatCompletionRequest.tools`).
//! - Groq: 128. Groq's API reference, same wording (groq/groq-python,
//!   `CompletionCreateParams.tools`: "A max of 128 functions are supported").
//! - xAI: 200. xAI function calling guide (docs.x.ai/docs/guides/function-calling): "You can
//!   call a maximum of 200 tools with function calling".
//! - Anthropic, Cerebras, DeepSeek and the local servers document no count, so none is
//!   enforced for them.

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::openai::{OpenAi, Preset};
use agentloop::{
    Error, FunctionDefinition, Message, NativeTool, Provider, Request, ToolDefinition,
    stream::collect,
};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::json;
use std::sync::Arc;

fn tools(n: usize) -> Vec<ToolDefinition> {
    (0..n)
        .map(|i| {
            ToolDefinition::Function(Arc::new(FunctionDefinition {
                name: format!("tool_{i}"),
                description: String::new(),
                input_schema: json!({"type": "object", "properties": {}}),
                strict: false,
            }))
        })
        .collect()
}

fn request(n: usize) -> Request {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.tools = tools(n);
    request
}

fn config(server: &MockServer) -> HttpConfig {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-limit-test"));
    config.retry = RetryPolicy::none();
    config
}

fn assert_limit(error: Error, provider: &str, limit: usize, count: usize) {
    match &error {
        Error::LimitExceeded {
            provider: p,
            what,
            limit: l,
            count: c,
        } => {
            assert_eq!(
                (p.as_str(), what.as_str(), *l, *c),
                (provider, "tools", limit, count)
            );
            let message = error.to_string();
            assert!(
                message.contains(&limit.to_string()) && message.contains(&count.to_string()),
                "{message}"
            );
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn too_many_tools_fail_before_any_request_is_made() {
    for (preset, limit) in [
        (Preset::OpenAi, 128),
        (Preset::Groq, 128),
        (Preset::Xai, 200),
    ] {
        let server = MockServer::start(Wire::OpenAi, [Turn::text("ok"), Turn::text("ok")])
            .await
            .unwrap();
        let provider = OpenAi::from_preset(preset, config(&server)).unwrap();
        let over = request(limit + 1);
        assert_limit(
            provider.complete(&over).await.unwrap_err(),
            preset.name(),
            limit,
            limit + 1,
        );
        assert_limit(
            collect(provider.stream(&over)).await.unwrap_err(),
            preset.name(),
            limit,
            limit + 1,
        );
        assert!(server.requests().is_empty(), "{preset}: a request was sent");
        // Exactly at the limit is fine.
        provider.complete(&request(limit)).await.unwrap();
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn native_tools_outside_the_tools_array_do_not_count() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("ok")])
        .await
        .unwrap();
    let provider = OpenAi::from_preset(Preset::OpenAi, config(&server)).unwrap();
    let mut request = request(128);
    // Sent as `web_search_options`, not as an entry of `tools`.
    request
        .tools
        .push(ToolDefinition::Native(NativeTool::web_search()));
    provider.complete(&request).await.unwrap();
    assert_eq!(
        server.requests()[0].body["tools"].as_array().map(Vec::len),
        Some(128)
    );
}

#[tokio::test]
async fn services_without_a_documented_limit_send_every_tool() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("ok")])
        .await
        .unwrap();
    let provider = OpenAi::from_preset(Preset::Compatible, config(&server)).unwrap();
    provider.complete(&request(300)).await.unwrap();
    let server = MockServer::start(Wire::Anthropic, [Turn::text("ok")])
        .await
        .unwrap();
    let anthropic = Anthropic::new(config(&server)).unwrap();
    anthropic.complete(&request(300)).await.unwrap();
    assert_eq!(
        server.requests()[0].body["tools"].as_array().map(Vec::len),
        Some(300)
    );
}

/// Seed 002 names Grok's switch `parallel_function_calling`. xAI's own API definition
/// (xai-org/xai-proto, `GetCompletionsRequest.parallel_tool_calls`: "If set to false, the model
/// can perform maximum one tool call per response. Default to true.") and its OpenAI-compatible
/// Chat Completions take `parallel_tool_calls`; no xAI reference we found lists
/// `parallel_function_calling`, so the xAI preset sends `parallel_tool_calls`, as for OpenAI.
#[test]
fn grok_takes_parallel_tool_calls() {
    let provider = OpenAi::from_preset(Preset::Xai, HttpConfig::new("http://127.0.0.1:9")).unwrap();
    let mut request = request(1);
    request.model = "grok-4".into();
    request.parallel_tool_calls = Some(false);
    let body: serde_json::Value =
        serde_json::from_slice(&provider.request_body(&request, false).unwrap()).unwrap();
    assert_eq!(body["parallel_tool_calls"], json!(false));
    assert!(body.get("parallel_function_calling").is_none(), "{body}");
}

/// xAI's server-side tools (web search, X search, code execution, collections search) run in
/// its Responses API only: its comparison page (docs.x.ai/developers/model-capabilities/text/
/// comparison) lists Chat Completions, now deprecated, as "Function calling only" for agentic
/// tools, and Live Search (`search_parameters`) was retired. So on the xAI preset they stay a
/// clear `Unsupported` naming xAI instead of a body xAI would refuse.
#[test]
fn grok_server_tools_are_unsupported_on_chat_completions() {
    let provider = OpenAi::from_preset(Preset::Xai, HttpConfig::new("http://127.0.0.1:9")).unwrap();
    for tool in [
        NativeTool::web_search(),
        NativeTool::new("xai.web_search", json!({})),
        NativeTool::new("xai.x_search", json!({"allowed_x_handles": ["rustlang"]})),
        NativeTool::new("xai.code_execution", serde_json::Value::Null),
    ] {
        let name = format!("native tool {}", tool.id());
        let mut request = Request::new("grok-4", vec![Message::user("hi")]);
        request.tools = vec![ToolDefinition::Native(tool)];
        match provider.request_body(&request, false) {
            Err(Error::Unsupported { provider, feature }) => {
                assert_eq!(provider, "xai");
                assert!(feature.starts_with(&name), "{feature}");
            }
            other => panic!("{name}: expected Unsupported, got {other:?}"),
        }
    }
}
