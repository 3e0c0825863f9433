//! The OpenAI provider type: names, secrets in Debug output, non-streamed parsing (its live
//! checks are in `live.rs`).

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::{OpenAi, Preset, parse_completion};
use agentloop::{ContentBlock, Error, Message, Provider, Request, StopReason};
use serde_json::json;

const KEY: &str = "sk-proj-very-secret-0123456789";

#[test]
fn debug_output_never_contains_the_key() {
    let mut config = HttpConfig::new("https://api.openai.com/v1");
    config.api_key = Some(ApiKey::new(KEY));
    config.headers = vec![("api-key".into(), format!("{KEY}-azure"))];
    let openai = OpenAi::new(config.clone()).unwrap();
    for text in [
        format!("{openai:?}"),
        format!("{openai:#?}"),
        format!("{config:?}"),
        format!("{:?}", openai.config()),
        format!("{:?}", config.api_key),
    ] {
        assert!(!text.contains("very-secret"), "{text}");
    }
    // The header's name is still there to help debugging.
    assert!(format!("{config:?}").contains("api-key"));
}

#[test]
fn each_preset_is_named_after_itself() {
    for preset in Preset::ALL {
        let provider =
            OpenAi::from_preset(preset, HttpConfig::new("http://127.0.0.1:9/v1")).unwrap();
        assert_eq!(provider.name(), preset.name());
        assert_eq!(Preset::from_name(preset.name()), Some(preset));
    }
    let compatible = OpenAi::compatible("http://127.0.0.1:9/v1").unwrap();
    assert_eq!(compatible.name(), "openai-compatible");
    assert_eq!(compatible.config().base_url, "http://127.0.0.1:9/v1");
}

#[test]
fn a_renamed_provider_reports_its_own_name_in_errors() {
    let mut options = Preset::Compatible.options();
    options.name = "deepseek".into();
    let provider = OpenAi::with_options(HttpConfig::new("http://127.0.0.1:9/v1"), options).unwrap();
    assert_eq!(provider.name(), "deepseek");
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.tools = vec![agentloop::ToolDefinition::Native(
        agentloop::provider::anthropic::tools::bash(),
    )];
    assert!(matches!(
        provider.request_body(&request, false),
        Err(Error::Unsupported { provider, .. }) if provider == "deepseek"
    ));
}

#[test]
fn a_key_that_cannot_be_a_header_is_a_config_error() {
    let mut config = HttpConfig::new("https://api.openai.com/v1");
    config.api_key = Some(ApiKey::new("sk-bad\nkey"));
    let error = OpenAi::new(config).unwrap_err();
    assert!(
        matches!(&error, Error::Config { message } if !message.contains("sk-bad")),
        "{error:?}"
    );
}

#[test]
fn non_streamed_refusal() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6}
    });
    let response = parse_completion(&body, "openai").unwrap();
    assert_eq!(
        response.content,
        vec![ContentBlock::text("I can't help with that.")]
    );
    assert_eq!(response.stop_reason, StopReason::Refusal);
}

#[test]
fn non_streamed_finish_reasons_and_lenient_shapes() {
    let body = json!({
        "id": "x", "model": "mistral-large",
        "choices": [{"finish_reason": "length", "message": {
            "content": [{"type": "text", "text": "Par"}, {"type": "text", "text": "tial"}],
            "tool_calls": [{"id": "", "function": {"name": "f", "arguments": {"a": 1}}}]
        }}],
        "usage": null
    });
    let response = parse_completion(&body, "mistral").unwrap();
    assert_eq!(response.text(), "Partial");
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    let calls = response.tool_uses();
    assert!(
        calls[0].id.starts_with("call_"),
        "a missing id is made up: {}",
        calls[0].id
    );
    assert_eq!(calls[0].input, json!({"a": 1}));
    assert_eq!(response.usage, agentloop::Usage::default());

    let filtered = json!({"choices": [{"index": 0, "finish_reason": "content_filter", "message": {"content": ""}}]});
    assert_eq!(
        parse_completion(&filtered, "openai").unwrap().stop_reason,
        StopReason::Other("content_filter".into())
    );
    let invalid_args = json!({"choices": [{"message": {"tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "{\"a\": tru"}}
    ]}}]});
    let response = parse_completion(&invalid_args, "openai").unwrap();
    assert_eq!(response.tool_uses()[0].input, json!("{\"a\": tru"));
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn non_streamed_errors() {
    let error = parse_completion(
        &json!({"error": {"message": "Provider returned error", "code": 502}}),
        "openrouter",
    )
    .unwrap_err();
    assert!(
        matches!(&error, Error::Api { provider, status: 200, error_type: Some(t), message }
            if provider == "openrouter" && t == "502" && message == "Provider returned error"),
        "{error:?}"
    );
    let error = parse_completion(&json!({"id": "x", "choices": []}), "openai").unwrap_err();
    assert!(
        matches!(&error, Error::Parse { what, .. } if what == "openai response"),
        "{error:?}"
    );
    let error = parse_completion(&json!({"choices": "nope"}), "openai").unwrap_err();
    assert!(matches!(error, Error::Parse { .. }), "{error:?}");
}
