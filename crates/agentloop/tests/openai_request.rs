//! OpenAI Chat Completions request bodies: golden files, the OpenAPI schema, and every mapping
//! rule of the canonical history.

mod common;

use std::sync::OnceLock;

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::tools::{self, WebSearch};
use agentloop::provider::openai::{OpenAi, OpenAiOptions, Preset, SystemRole, TokenLimitField};
use agentloop::{
    ContentBlock, Error, FunctionDefinition, Message, NativeTool, Request, Role, ToolChoice,
    ToolDefinition, ToolResult,
};
use serde_json::{Value, json};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/openai");
const SPEC: &str = "conformance/specs/openai-openapi.chat-completions-only.nullable-fixed.yaml";

fn provider(preset: Preset) -> OpenAi {
    let mut config = HttpConfig::new("http://127.0.0.1:9/v1");
    config.api_key = Some(ApiKey::new("sk-test"));
    OpenAi::from_preset(preset, config).unwrap()
}

fn with_options(options: OpenAiOptions) -> OpenAi {
    OpenAi::with_options(HttpConfig::new("http://127.0.0.1:9/v1"), options).unwrap()
}

fn body(provider: &OpenAi, request: &Request, stream: bool) -> Value {
    let bytes = provider.request_body(request, stream).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn golden(name: &str) -> Value {
    let path = format!("{GOLDEN}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn canonical_request_matches_the_golden_body() {
    let openai = provider(Preset::OpenAi);
    let request = common::canonical_request();
    assert_eq!(
        body(&openai, &request, false),
        golden("chat-completions.json")
    );
}

#[test]
fn canonical_streaming_request_matches_the_golden_body() {
    let openai = provider(Preset::OpenAi);
    let request = common::canonical_request();
    assert_eq!(
        body(&openai, &request, true),
        golden("chat-completions-stream.json")
    );
}

#[test]
fn canonical_request_for_groq_matches_the_golden_body() {
    let groq = provider(Preset::Groq);
    let request = common::canonical_request();
    assert_eq!(
        body(&groq, &request, true),
        golden("groq-chat-completions-stream.json")
    );
}

/// The spec's `CreateChatCompletionRequest`, compiled once (the spec is 2 MB of YAML).
fn request_validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let path = common::shared_path(SPEC);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let spec: Value =
            serde_yaml_ng::from_str(&widen_huge_integers(&text)).expect("the spec is YAML");
        let schema = json!({
            "$ref": "#/components/schemas/CreateChatCompletionRequest",
            "components": spec["components"],
        });
        jsonschema::validator_for(&schema).expect("the spec's schemas compile")
    })
}

/// The spec bounds `seed` with integers beyond 64 bits, which neither YAML reader here
/// accepts as integers; written as floats they read as any JSON reader would see them.
fn widen_huge_integers(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len() + 64);
    for line in yaml.lines() {
        let huge = line.rsplit_once(": ").is_some_and(|(_, value)| {
            let digits = value.strip_prefix('-').unwrap_or(value);
            digits.len() > 18
                && digits.bytes().all(|b| b.is_ascii_digit())
                && value.parse::<i64>().is_err()
        });
        out.push_str(line);
        if huge {
            out.push_str(".0");
        }
        out.push('\n');
    }
    out
}

fn spec_violations(body: &Value) -> Vec<String> {
    request_validator()
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn every_golden_body_validates_against_the_openapi_spec() {
    let mut checked = 0;
    for entry in std::fs::read_dir(GOLDEN).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let body: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let violations = spec_violations(&body);
            assert!(violations.is_empty(), "{}: {violations:#?}", path.display());
            checked += 1;
        }
    }
    assert_eq!(checked, 3);
}

#[test]
fn the_spec_check_rejects_a_broken_body() {
    // Without this, a validator that accepts everything would pass the test above.
    let mut broken = golden("chat-completions.json");
    broken["messages"][3]["role"] = json!("function_result");
    broken["tool_choice"] = json!("sometimes");
    assert!(
        spec_violations(&broken).len() >= 2,
        "{:?}",
        spec_violations(&broken)
    );
    assert!(!spec_violations(&json!({"model": "m", "messages": []})).is_empty());
}

#[test]
fn bodies_built_from_varied_requests_validate_against_the_spec() {
    let openai = provider(Preset::OpenAi);
    let mut request = common::canonical_request();
    request.model = "o3-mini".into();
    request.tool_choice = Some(ToolChoice::Required);
    request.metadata = Some(json!({"session": "s1"}));
    request.top_p = Some(0.9);
    request
        .tools
        .push(ToolDefinition::Native(tools::web_search(WebSearch {
            user_location: Some(json!({"city": "Paris", "country": "FR"})),
            search_context_size: Some("low".into()),
        })));
    if let ToolDefinition::Function(f) = &mut request.tools[0] {
        std::sync::Arc::make_mut(f).strict = true;
    }
    request.messages.push(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse {
            id: "call_x".into(),
            name: "search_hotels".into(),
            input: json!({"city": "Paris"}),
        }],
    ));
    request
        .messages
        .push(Message::tool_results([ToolResult::blocks(
            "call_x",
            vec![
                ContentBlock::text("two hotels"),
                ContentBlock::image_url("https://example.invalid/a.png"),
            ],
        )]));
    for stream in [false, true] {
        let body = body(&openai, &request, stream);
        assert_eq!(body["messages"][0]["role"], "developer");
        let violations = spec_violations(&body);
        assert!(violations.is_empty(), "{violations:#?}\n{body:#}");
    }
}

fn tool(name: &str, schema: Value, strict: bool) -> ToolDefinition {
    ToolDefinition::from(FunctionDefinition {
        name: name.into(),
        description: String::new(),
        input_schema: schema,
        strict,
    })
}

#[test]
fn strict_tools_get_the_strict_shape_and_others_are_inlined() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "place": {"$ref": "#/$defs/Place"},
            "days": {"type": "integer"}
        },
        "required": ["place"],
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    });
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.tools = vec![
        tool("strict", schema.clone(), true),
        tool("loose", schema, false),
    ];
    let body = body(&provider(Preset::OpenAi), &request, false);
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "strict", "strict": true, "parameters": {
            "type": "object",
            "properties": {
                "place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false},
                "days": {"type": ["integer", "null"]}
            },
            "required": ["place", "days"],
            "additionalProperties": false
        }}})
    );
    assert_eq!(
        body["tools"][1],
        json!({"type": "function", "function": {"name": "loose", "parameters": {
            "type": "object",
            "properties": {
                "place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "days": {"type": "integer"}
            },
            "required": ["place"]
        }}})
    );
}

#[test]
fn tool_choice_modes() {
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.tools = vec![tool(
        "t",
        json!({"type": "object", "properties": {}}),
        false,
    )];
    let openai = provider(Preset::OpenAi);
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
        (
            ToolChoice::tool("t"),
            json!({"type": "function", "function": {"name": "t"}}),
        ),
    ] {
        request.tool_choice = Some(choice);
        assert_eq!(body(&openai, &request, false)["tool_choice"], wire);
    }
}

#[test]
fn tool_choice_and_parallel_calls_need_tools() {
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.tool_choice = Some(ToolChoice::Required);
    request.parallel_tool_calls = Some(true);
    let body = body(&provider(Preset::OpenAi), &request, false);
    assert_eq!(
        body,
        json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn extensions_are_merged_last_and_overwrite() {
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.temperature = Some(0.2);
    let mut extensions = serde_json::Map::new();
    extensions.insert("temperature".into(), json!(1));
    extensions.insert("store".into(), json!(true));
    extensions.insert("stream_options".into(), json!({"include_usage": false}));
    request.extensions = Some(extensions);
    let bytes = provider(Preset::OpenAi)
        .request_body(&request, true)
        .unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert_eq!(text.matches("\"temperature\"").count(), 1, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({
            "model": "gpt-4.1",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": true,
            "temperature": 1,
            "store": true,
            "stream_options": {"include_usage": false}
        })
    );
}

#[test]
fn invalid_tool_input_is_sent_back_as_its_raw_text() {
    let request = Request::new(
        "gpt-4.1",
        vec![
            Message::user("go"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "t".into(),
                        input: Value::String("{\"city\": \"Par".into()),
                    },
                    ContentBlock::ToolUse {
                        id: "c2".into(),
                        name: "t".into(),
                        input: json!([1, "two"]),
                    },
                ],
            ),
            Message::tool_results([
                ToolResult::error("c1", "invalid arguments"),
                ToolResult::error("c2", "Error: not an object"),
            ]),
        ],
    );
    let body = body(&provider(Preset::OpenAi), &request, false);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{\"city\": \"Par"}},
                {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "[1,\"two\"]"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "Error: invalid arguments"},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: not an object"}
        ])
    );
}

fn history_from_another_provider() -> Request {
    Request::new(
        "gpt-4.1",
        vec![
            Message::user("Weather?"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "The user wants weather.".into(),
                        signature: Some("sig".into()),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::RedactedThinking {
                        data: "opaque".into(),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::Native {
                        provider: "anthropic".into(),
                        value: json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}),
                    },
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolUse {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris"}),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("Also, be brief."),
                    ContentBlock::ToolResult(ToolResult::blocks(
                        "toolu_1",
                        vec![
                            ContentBlock::text("18 °C"),
                            ContentBlock::image_base64("image/png", "AAAA"),
                        ],
                    )),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Thinking {
                    thinking: "Only thinking here.".into(),
                    signature: None,
                    provider: Some("anthropic".into()),
                }],
            ),
        ],
    )
}

#[test]
fn a_history_from_another_provider_maps_to_openai_shape() {
    let body = body(
        &provider(Preset::OpenAi),
        &history_from_another_provider(),
        false,
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18 °C"},
            {"role": "user", "content": [
                {"type": "text", "text": "Images returned by tool call toolu_1:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "Also, be brief."}
            ]}
        ])
    );
}

#[test]
fn thinking_can_be_sent_as_text() {
    let mut options = Preset::OpenAi.options();
    options.thinking_as_text = true;
    let body = body(
        &with_options(options),
        &history_from_another_provider(),
        false,
    );
    assert_eq!(
        body["messages"][1]["content"],
        "<thinking>The user wants weather.</thinking>Checking."
    );
    assert_eq!(
        body["messages"][4],
        json!({"role": "assistant", "content": "<thinking>Only thinking here.</thinking>"})
    );
}

/// DeepSeek's thinking mode answers 400 ("The reasoning_content in the thinking mode must be
/// passed back to the API") when an assistant message of a turn with tool calls comes back
/// without its `reasoning_content` (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls").
/// Reasoning from any provider goes there, and a message without any gets `""`, so a history
/// started elsewhere can continue on DeepSeek.
#[test]
fn deepseek_gets_every_assistant_message_back_with_its_reasoning_content() {
    let mut request = history_from_another_provider();
    request.model = "deepseek-v4-flash".into();
    request.messages.push(Message::user("And tomorrow?"));
    request.messages.push(Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking {
                thinking: "Tomorrow: ".into(),
                signature: None,
                provider: Some("deepseek".into()),
            },
            ContentBlock::Thinking {
                thinking: "call again.".into(),
                signature: None,
                provider: Some("deepseek".into()),
            },
            ContentBlock::ToolUse {
                id: "call_2".into(),
                name: "get_weather".into(),
                input: json!({"city": "Paris", "day": "tomorrow"}),
            },
        ],
    ));
    request.messages.push(Message::new(
        Role::User,
        vec![ContentBlock::ToolResult(ToolResult::text(
            "call_2", "20 °C",
        ))],
    ));
    request.messages.push(Message::assistant(
        "20 °C tomorrow, from a model that did not think.",
    ));
    let deepseek = body(&provider(Preset::DeepSeek), &request, true);
    assert_eq!(
        deepseek["messages"],
        json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking.", "reasoning_content": "The user wants weather.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18 °C"},
            {"role": "user", "content": [
                {"type": "text", "text": "Images returned by tool call toolu_1:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "Also, be brief."}
            ]},
            {"role": "assistant", "content": "", "reasoning_content": "Only thinking here."},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "assistant", "content": null, "reasoning_content": "Tomorrow: call again.", "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"day\":\"tomorrow\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_2", "content": "20 °C"},
            {"role": "assistant", "content": "20 °C tomorrow, from a model that did not think.", "reasoning_content": ""}
        ])
    );
    // The other presets never send the field.
    for preset in Preset::ALL.into_iter().filter(|p| *p != Preset::DeepSeek) {
        let other = body(&provider(preset), &request, true).to_string();
        assert!(!other.contains("reasoning_content"), "{preset}: {other}");
    }
}

#[test]
fn reasoning_content_takes_precedence_over_thinking_as_text() {
    let mut options = Preset::Compatible.options();
    options.thinking_as_text = true;
    options.reasoning_content = true;
    let body = body(
        &with_options(options),
        &history_from_another_provider(),
        false,
    );
    assert_eq!(body["messages"][1]["content"], "Checking.");
    assert_eq!(
        body["messages"][1]["reasoning_content"],
        "The user wants weather."
    );
}

#[test]
fn the_deepseek_preset() {
    let preset = Preset::from_name("deepseek").unwrap();
    assert_eq!(preset, Preset::DeepSeek);
    assert_eq!(preset.default_base_url(), Some("https://api.deepseek.com"));
    assert_eq!(preset.api_key_var(), Some("DEEPSEEK_API_KEY"));
    assert!(preset.requires_key());
    let options = preset.options();
    assert!(options.reasoning_content);
    // The generic preset pointed at DeepSeek does the same; pointed elsewhere it does not.
    for (url, replays) in [
        ("https://api.deepseek.com", true),
        ("https://API.DeepSeek.com/v1", true),
        ("https://api.deepseek.com.example.org/v1", false),
        ("http://127.0.0.1:9/v1", false),
    ] {
        let compatible = OpenAi::compatible(url).unwrap();
        assert_eq!(compatible.options().reasoning_content, replays, "{url}");
        assert_eq!(agentloop::Provider::name(&compatible), "openai-compatible");
    }
    assert_eq!(options.token_limit, TokenLimitField::MaxTokens);
    assert_eq!(options.system_role, SystemRole::System);
    assert!(!options.top_k && !options.metadata && !options.web_search);
}

#[test]
fn system_messages_and_roles() {
    let mut request = Request::new(
        "gpt-5-mini",
        vec![Message::system("Be terse."), Message::user("hi")],
    );
    request.system = Some("You help.".into());
    let openai = provider(Preset::OpenAi);
    assert_eq!(
        body(&openai, &request, false)["messages"],
        json!([
            {"role": "developer", "content": "You help."},
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "hi"}
        ])
    );
    let mut options = Preset::Xai.options();
    assert_eq!(options.system_role, SystemRole::System);
    options.system_role = SystemRole::Developer;
    request.model = "grok-4".into();
    assert_eq!(
        body(&with_options(options), &request, false)["messages"][0]["role"],
        "developer"
    );
}

#[test]
fn token_limit_field_by_preset_and_model() {
    let mut request = Request::new("gpt-4o", vec![Message::user("hi")]);
    request.max_tokens = Some(64);
    let has = |provider: &OpenAi, request: &Request, key: &str| {
        let body = body(provider, request, false);
        body.get(key) == Some(&json!(64))
    };
    assert!(has(&provider(Preset::OpenAi), &request, "max_tokens"));
    request.model = "o4-mini".into();
    assert!(has(
        &provider(Preset::OpenAi),
        &request,
        "max_completion_tokens"
    ));
    for preset in [
        Preset::Xai,
        Preset::Cerebras,
        Preset::Groq,
        Preset::Ollama,
        Preset::Vllm,
    ] {
        assert!(has(&provider(preset), &request, "max_tokens"), "{preset}");
    }
    let mut options = Preset::Cerebras.options();
    options.token_limit = TokenLimitField::MaxCompletionTokens;
    assert!(has(
        &with_options(options),
        &request,
        "max_completion_tokens"
    ));
}

#[test]
fn top_k_only_where_the_server_reads_it() {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.top_k = Some(40);
    for preset in [Preset::Vllm, Preset::LmStudio, Preset::LlamaCpp] {
        assert_eq!(
            body(&provider(preset), &request, false)["top_k"],
            40,
            "{preset}"
        );
    }
    for preset in [
        Preset::OpenAi,
        Preset::Xai,
        Preset::Groq,
        Preset::Cerebras,
        Preset::Ollama,
    ] {
        assert_eq!(
            body(&provider(preset), &request, false).get("top_k"),
            None,
            "{preset}"
        );
    }
}

/// OpenAI's reasoning models answer 400 "Unsupported parameter: 'temperature' is not
/// supported with this model" (likewise `top_p`); their chat sibling and compatible servers
/// take both.
#[test]
fn sampling_is_left_out_for_openai_reasoning_models() {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.temperature = Some(0.25);
    request.top_p = Some(0.5);
    let sampling = |preset: Preset, model: &str, request: &mut Request| {
        request.model = model.into();
        let body = body(&provider(preset), request, false);
        (body.get("temperature").cloned(), body.get("top_p").cloned())
    };
    let sent = (Some(json!(0.25)), Some(json!(0.5)));
    for model in ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1"] {
        assert_eq!(
            sampling(Preset::OpenAi, model, &mut request),
            (None, None),
            "{model}"
        );
    }
    for model in ["gpt-4.1", "gpt-4o", "gpt-5-chat-latest", "omni-moderation"] {
        assert_eq!(
            sampling(Preset::OpenAi, model, &mut request),
            sent,
            "{model}"
        );
    }
    for preset in [Preset::Compatible, Preset::Vllm, Preset::Groq] {
        assert_eq!(sampling(preset, "o3-mini", &mut request), sent, "{preset}");
    }
    // Extensions still win.
    request.extensions = Some(serde_json::Map::from_iter([(
        "temperature".to_owned(),
        json!(1),
    )]));
    request.model = "o3".into();
    let body = body(&provider(Preset::OpenAi), &request, false);
    assert_eq!(body["temperature"], 1);
    assert_eq!(body.get("top_p"), None);
}

/// `stop` is "not supported with latest reasoning models `o3` and `o4-mini`" (OpenAI's API
/// reference, `StopConfiguration` in openai-openapi), and the gpt-5 family answers the same
/// 400; `o1`, `o3-mini` and the chat models take it.
#[test]
fn stop_is_left_out_for_reasoning_models_that_refuse_it() {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.stop_sequences = vec!["END".into()];
    let stop = |preset: Preset, model: &str, request: &mut Request| {
        request.model = model.into();
        body(&provider(preset), request, false).get("stop").cloned()
    };
    for model in [
        "o3",
        "o3-2025-04-16",
        "o3-pro",
        "o4-mini",
        "o4-mini-2025-04-16",
        "o1-mini",
        "o1-preview",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5.1",
    ] {
        assert_eq!(stop(Preset::OpenAi, model, &mut request), None, "{model}");
    }
    for model in [
        "o1",
        "o3-mini",
        "o3-mini-2025-01-31",
        "gpt-4.1",
        "gpt-4o",
        "gpt-5-chat-latest",
        "o30-custom",
    ] {
        assert_eq!(
            stop(Preset::OpenAi, model, &mut request),
            Some(json!(["END"])),
            "{model}"
        );
    }
    for preset in [Preset::Compatible, Preset::Vllm, Preset::Groq] {
        assert_eq!(
            stop(preset, "o3", &mut request),
            Some(json!(["END"])),
            "{preset}"
        );
    }
    // Extensions still win.
    request.extensions = Some(serde_json::Map::from_iter([(
        "stop".to_owned(),
        json!(["HALT"]),
    )]));
    request.model = "o3".into();
    assert_eq!(
        body(&provider(Preset::OpenAi), &request, false)["stop"],
        json!(["HALT"])
    );
}

#[test]
fn metadata_only_for_openai_and_generic_servers() {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.metadata = Some(json!({"user_id": "u1"}));
    for preset in [Preset::OpenAi, Preset::Compatible] {
        assert_eq!(
            body(&provider(preset), &request, false)["metadata"],
            json!({"user_id": "u1"})
        );
    }
    assert_eq!(
        body(&provider(Preset::Groq), &request, false).get("metadata"),
        None
    );
}

#[test]
fn web_search_maps_to_web_search_options() {
    let mut request = Request::new("gpt-4o-search-preview", vec![Message::user("news?")]);
    request.tools = vec![ToolDefinition::Native(tools::web_search(WebSearch {
        user_location: Some(json!({"city": "Paris", "country": "FR"})),
        search_context_size: Some("high".into()),
    }))];
    request.tool_choice = Some(ToolChoice::Auto);
    let body = body(&provider(Preset::OpenAi), &request, false);
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-search-preview",
            "messages": [{"role": "user", "content": "news?"}],
            "web_search_options": {
                "search_context_size": "high",
                "user_location": {"type": "approximate", "approximate": {"city": "Paris", "country": "FR"}}
            }
        })
    );
}

#[test]
fn two_web_searches_are_an_error_not_the_last_one_winning() {
    let mut request = Request::new("gpt-4o-search-preview", vec![Message::user("news?")]);
    let high = tools::web_search(WebSearch {
        search_context_size: Some("high".into()),
        ..WebSearch::default()
    });
    request.tools = vec![
        ToolDefinition::Native(NativeTool::web_search()),
        ToolDefinition::Native(high),
    ];
    match provider(Preset::OpenAi).request_body(&request, false) {
        Err(Error::Config { message }) => assert!(
            message.contains("two web_search tools") && message.contains("keep one"),
            "{message}"
        ),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

fn unsupported(preset: Preset, tool: NativeTool) -> String {
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::Native(tool)];
    match provider(preset).request_body(&request, false) {
        Err(Error::Unsupported { provider, feature }) => {
            assert_eq!(provider, preset.name());
            feature
        }
        other => panic!("{preset}: expected Unsupported, got {other:?}"),
    }
}

#[test]
fn other_native_tools_are_unsupported_with_a_clear_message() {
    let file_search = NativeTool::new("openai.file_search", json!({"vector_store_ids": ["vs_1"]}));
    assert!(unsupported(Preset::OpenAi, file_search.clone()).contains("only in the Responses API"));
    assert_eq!(
        unsupported(Preset::Groq, file_search),
        "native tool openai.file_search"
    );
    let x_search = NativeTool::new("xai.x_search", Value::Null);
    let message = unsupported(Preset::Xai, x_search);
    assert!(
        message.starts_with("native tool xai.x_search") && message.contains("Responses API"),
        "{message}"
    );
    assert!(unsupported(Preset::Xai, NativeTool::web_search()).contains("Live Search"));
    assert_eq!(
        unsupported(Preset::Groq, NativeTool::web_search()),
        "native tool web_search"
    );
    // OpenAI's own search on a server without `web_search_options`.
    assert_eq!(
        unsupported(Preset::Groq, tools::web_search(WebSearch::default())),
        "native tool openai.web_search"
    );
    // Another provider's tools are refused by id, the client-side ones too.
    use agentloop::provider::anthropic::tools as anthropic;
    for tool in [
        anthropic::code_execution(Default::default()),
        anthropic::bash(),
        anthropic::text_editor(),
        anthropic::computer_use(Default::default(), 1024, 768, None),
        anthropic::web_search(Default::default()),
    ] {
        let feature = format!("native tool {}", tool.id());
        assert_eq!(unsupported(Preset::OpenAi, tool), feature);
    }
}

#[test]
fn compatible_presets_stream_usage_can_be_turned_off() {
    let mut options = Preset::LlamaCpp.options();
    options.stream_usage = false;
    let request = Request::new("m", vec![Message::user("hi")]);
    let body = body(&with_options(options), &request, true);
    assert_eq!(
        body,
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
    );
}

/// Every strict schema of the golden table (`tests/golden/openai_strict/`) as a strict tool
/// and as a `response_format`: the bodies validate against the spec.
#[test]
fn strict_tools_and_response_formats_validate_against_the_spec() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/openai_strict");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let schema = golden["schema"].clone();
        let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
        request.tools = vec![tool("t", schema.clone(), true)];
        request.output = Some(Box::new(agentloop::OutputFormat {
            name: "answer".into(),
            schema,
            strict: true,
        }));
        let body = body(&provider(Preset::OpenAi), &request, false);
        let strict = golden["compiled"].get("strict").is_some();
        assert_eq!(
            body["response_format"]["json_schema"]["strict"] == true,
            strict
        );
        let violations = spec_violations(&body);
        assert!(violations.is_empty(), "{}: {violations:#?}", path.display());
        checked += 1;
    }
    assert!(checked >= 15, "{checked}");
}
