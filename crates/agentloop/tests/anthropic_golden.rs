//! Golden request bodies for the Anthropic Messages API. The expected JSON files in
//! `tests/golden/anthropic/` were written from the API reference; their sources are listed in
//! `tests/golden/anthropic/README.md`.

mod common;

use agentloop::provider::anthropic::tools::{
    self, CodeExecutionVersion, ComputerUseVersion, WebSearch,
};
use agentloop::provider::anthropic::{Anthropic, AnthropicOptions, ForeignThinking};
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::{
    CacheControl, CacheTarget, CacheTtl, ContentBlock, Error, FunctionDefinition, Message,
    NativeTool, Request, Role, ToolChoice, ToolDefinition, ToolResult,
};
use serde_json::{Value, json};

fn provider(options: AnthropicOptions) -> Anthropic {
    Anthropic::with_options(HttpConfig::new("http://127.0.0.1:9"), options).expect("provider")
}

fn body(provider: &Anthropic, request: &Request, stream: bool) -> Value {
    let wire = provider.prepare(request, stream).expect("request prepares");
    serde_json::from_slice(&wire.body).expect("body is JSON")
}

fn golden(name: &str) -> Value {
    let path = format!(
        "{}/tests/golden/anthropic/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn assert_golden(actual: &Value, name: &str) {
    let expected = golden(name);
    assert!(
        actual == &expected,
        "{name}.json differs\nexpected: {}\nactual:   {}",
        serde_json::to_string_pretty(&expected).unwrap_or_default(),
        serde_json::to_string_pretty(actual).unwrap_or_default(),
    );
}

#[test]
fn canonical_request_not_streamed() {
    let actual = body(
        &provider(AnthropicOptions::default()),
        &common::canonical_request(),
        false,
    );
    assert_golden(&actual, "canonical");
}

#[test]
fn canonical_request_streamed() {
    let actual = body(
        &provider(AnthropicOptions::default()),
        &common::canonical_request(),
        true,
    );
    assert_golden(&actual, "canonical_stream");
}

fn replay_request() -> Request {
    Request::new(
        "claude-sonnet-4-5",
        vec![
            Message::user("Find the cheapest flight to Lisbon and book it."),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "I should search first.".into(),
                        signature: Some("sig-anthropic".into()),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::RedactedThinking {
                        data: "opaque-anthropic".into(),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::Thinking {
                        thinking: "OpenAI reasoning about fares.".into(),
                        signature: Some("encrypted-openai".into()),
                        provider: Some("openai".into()),
                    },
                    ContentBlock::RedactedThinking {
                        data: "opaque-openai".into(),
                        provider: Some("openai".into()),
                    },
                    ContentBlock::Thinking {
                        thinking: "Signed, from before tagging.".into(),
                        signature: Some("sig-untagged".into()),
                        provider: None,
                    },
                    ContentBlock::Thinking {
                        thinking: "Cut off before its signature.".into(),
                        signature: None,
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::Native {
                        provider: "anthropic".into(),
                        value: json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "cheap flights Lisbon"}}),
                    },
                    ContentBlock::Native {
                        provider: "anthropic".into(),
                        value: json!({
                            "type": "web_search_tool_result",
                            "tool_use_id": "srvtoolu_1",
                            "content": [{"type": "web_search_result", "title": "Flights", "url": "https://flights.example", "encrypted_content": "EqgfCioIARgB", "page_age": null}]
                        }),
                    },
                    ContentBlock::Native {
                        provider: "openai".into(),
                        value: json!({"type": "web_search_call", "id": "ws_1", "status": "completed"}),
                    },
                    ContentBlock::text("The cheapest is TP1234."),
                    ContentBlock::ToolUse {
                        id: "toolu_book".into(),
                        name: "book_flight".into(),
                        input: json!({"flight": "TP1234"}),
                    },
                ],
            ),
            Message::tool_results([ToolResult::text("toolu_book", "booked")]),
        ],
    )
}

#[test]
fn thinking_is_kept_for_anthropic_and_dropped_for_other_providers() {
    let actual = body(
        &provider(AnthropicOptions::default()),
        &replay_request(),
        false,
    );
    assert_golden(&actual, "thinking_kept");
}

#[test]
fn thinking_anthropic_cannot_verify_can_go_as_text() {
    let options = AnthropicOptions {
        foreign_thinking: ForeignThinking::AsText,
        ..AnthropicOptions::default()
    };
    let actual = body(&provider(options), &replay_request(), false);
    assert_golden(&actual, "thinking_as_text");
}

fn native_tools_request() -> Request {
    let mut request = Request::new(
        "claude-sonnet-4-5",
        vec![Message::user("Look around and fix the build.")],
    );
    request.max_tokens = Some(2048);
    request.tools = vec![
        ToolDefinition::Native(tools::web_search(WebSearch {
            max_uses: Some(3),
            allowed_domains: vec!["docs.rs".into(), "crates.io".into()],
            user_location: Some(
                json!({"city": "Lisbon", "country": "PT", "timezone": "Europe/Lisbon"}),
            ),
            ..WebSearch::default()
        })),
        ToolDefinition::Native(tools::web_search(WebSearch {
            blocked_domains: vec!["example.com".into()],
            ..WebSearch::default()
        })),
        ToolDefinition::Native(tools::code_execution(CodeExecutionVersion::default())),
        ToolDefinition::Native(tools::computer_use(
            ComputerUseVersion::default(),
            1024,
            768,
            Some(1),
        )),
        ToolDefinition::Native(tools::text_editor()),
        ToolDefinition::Native(tools::bash()),
    ];
    request
}

#[test]
fn native_tools_with_their_type_strings_and_beta_header() {
    let anthropic = provider(AnthropicOptions::default());
    let request = native_tools_request();
    assert_golden(&body(&anthropic, &request, false), "native_tools");
    let wire = anthropic.prepare(&request, false).expect("prepares");
    assert_eq!(
        wire.headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok()),
        Some("code-execution-2025-08-25,computer-use-2025-01-24")
    );
}

#[test]
fn generally_available_tools_need_no_beta_header() {
    let mut request = native_tools_request();
    request.tools.retain(|tool| {
        !matches!(
            tool,
            ToolDefinition::Native(native)
                if ["anthropic.code_execution", "anthropic.computer_use"].contains(&native.id())
        )
    });
    let wire = provider(AnthropicOptions::default())
        .prepare(&request, true)
        .expect("prepares");
    assert!(wire.headers.is_empty(), "{:?}", wire.headers);
}

#[test]
fn the_newer_computer_tool_and_configured_betas_are_combined() {
    let mut config = HttpConfig::new("http://127.0.0.1:9");
    config.headers = vec![(
        "Anthropic-Beta".into(),
        "context-1m-2025-08-07, code-execution-2025-08-25".into(),
    )];
    let anthropic = Anthropic::new(config).expect("provider");
    let mut request = native_tools_request();
    request.tools[3] = ToolDefinition::Native(tools::computer_use(
        ComputerUseVersion::V20251124,
        1024,
        768,
        Some(1),
    ));
    let wire = anthropic.prepare(&request, false).expect("prepares");
    // The per-call header replaces the configured one, so it repeats it (once).
    assert_eq!(
        wire.headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok()),
        Some("context-1m-2025-08-07,code-execution-2025-08-25,computer-use-2025-11-24")
    );
    let body: Value = serde_json::from_slice(&wire.body).expect("JSON");
    assert_eq!(body["tools"][3]["type"], "computer_20251124");
}

#[test]
fn other_providers_tools_are_unsupported_by_id() {
    let anthropic = provider(AnthropicOptions::default());
    for (tool, feature) in [
        (
            NativeTool::new("openai.file_search", json!({"vector_store_ids": ["vs_1"]})),
            "native tool openai.file_search",
        ),
        (
            NativeTool::new("xai.x_search", Value::Null),
            "native tool xai.x_search",
        ),
        (
            agentloop::provider::openai::tools::web_search(Default::default()),
            "native tool openai.web_search",
        ),
        // An Anthropic tool this version does not map (yet).
        (
            NativeTool::new("anthropic.web_fetch", json!({"max_uses": 1})),
            "native tool anthropic.web_fetch",
        ),
    ] {
        let mut request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
        request.tools = vec![ToolDefinition::Native(tool)];
        match anthropic.prepare(&request, false) {
            Err(Error::Unsupported {
                provider,
                feature: f,
            }) => {
                assert_eq!(provider, "anthropic");
                // File search's message goes on to say what to do (tests/native_tools.rs).
                assert!(f.starts_with(feature), "{f}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

fn shaping_request() -> Request {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"place": {"$ref": "#/$defs/Place"}},
        "required": ["place"],
        "$defs": {
            "Place": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }
        }
    });
    let mut extensions = serde_json::Map::new();
    extensions.insert("temperature".into(), json!(1.0));
    extensions.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2048}),
    );
    Request {
        model: "claude-haiku-4-5".into(),
        system: Some("Be brief.".into()),
        messages: vec![
            Message::system("Answer in French."),
            Message::user("Hi"),
            Message::new(
                Role::User,
                vec![ContentBlock::image_url("https://example.com/cat.png")],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text(""),
                    ContentBlock::ToolUse {
                        id: "toolu_bad".into(),
                        name: "lookup".into(),
                        // Invalid arguments are kept in the history as their raw text.
                        input: json!("{\"place\": "),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("And this too."),
                    ContentBlock::ToolResult(ToolResult::blocks(
                        "toolu_bad",
                        vec![
                            ContentBlock::text("partial result"),
                            ContentBlock::text(""),
                            ContentBlock::image_base64("image/png", "iVBORw0KGgo="),
                        ],
                    )),
                ],
            ),
            Message::system("Never guess prices."),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Thinking {
                    thinking: "openai-only reasoning".into(),
                    signature: None,
                    provider: Some("openai".into()),
                }],
            ),
            Message::user("Continue."),
        ],
        max_tokens: None,
        temperature: Some(0.2),
        top_p: Some(0.9),
        top_k: Some(40),
        stop_sequences: vec![],
        tools: vec![ToolDefinition::from(FunctionDefinition {
            name: "lookup".into(),
            description: String::new(),
            input_schema: schema,
            strict: true,
        })],
        tool_choice: None,
        parallel_tool_calls: Some(false),
        metadata: Some(json!({"user_id": "user-42", "trace_id": "abc"})),
        extensions: Some(extensions),
        cache: Vec::new(),
        output: None,
    }
}

#[test]
fn history_is_shaped_into_what_anthropic_accepts() {
    let options = AnthropicOptions {
        default_max_tokens: 8000,
        ..AnthropicOptions::default()
    };
    let actual = body(&provider(options), &shaping_request(), false);
    assert_golden(&actual, "history_shaping");
}

#[test]
fn tool_choice_variants() {
    let anthropic = provider(AnthropicOptions::default());
    let mut request = common::canonical_request();
    let cases = [
        (Some(ToolChoice::Auto), None, json!({"type": "auto"})),
        (Some(ToolChoice::Required), None, json!({"type": "any"})),
        (
            Some(ToolChoice::Required),
            Some(false),
            json!({"type": "any", "disable_parallel_tool_use": true}),
        ),
        (Some(ToolChoice::None), Some(false), json!({"type": "none"})),
        (
            Some(ToolChoice::tool("get_weather")),
            Some(true),
            json!({"type": "tool", "name": "get_weather"}),
        ),
        (None, Some(true), Value::Null),
        (None, None, Value::Null),
    ];
    for (choice, parallel, expected) in cases {
        request.tool_choice = choice.clone();
        request.parallel_tool_calls = parallel;
        let actual = body(&anthropic, &request, false);
        assert_eq!(
            actual.get("tool_choice").cloned().unwrap_or(Value::Null),
            expected,
            "{choice:?} {parallel:?}"
        );
    }
    // Without tools, no tool_choice at all, whatever was asked: Anthropic answers 400 to
    // "tool_choice may only be specified while providing tools" (a step whose active tools
    // were narrowed to none on an agent with a required choice, say).
    request.tools.clear();
    for choice in [
        None,
        Some(ToolChoice::Auto),
        Some(ToolChoice::Required),
        Some(ToolChoice::None),
        Some(ToolChoice::tool("get_weather")),
    ] {
        for parallel in [None, Some(false), Some(true)] {
            request.tool_choice = choice.clone();
            request.parallel_tool_calls = parallel;
            assert!(
                body(&anthropic, &request, false)
                    .get("tool_choice")
                    .is_none(),
                "{choice:?} {parallel:?}"
            );
        }
    }
}

#[test]
fn debug_output_never_shows_the_key() {
    let mut config = HttpConfig::new("https://api.anthropic.com");
    config.api_key = Some(ApiKey::new("sk-ant-api03-very-secret"));
    config.headers = vec![("x-api-key".into(), "sk-ant-api03-header-secret".into())];
    let anthropic = Anthropic::new(config).expect("provider");
    for shown in [format!("{anthropic:?}"), format!("{anthropic:#?}")] {
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(!shown.contains("header-secret"), "{shown}");
        assert!(shown.contains("api.anthropic.com"), "{shown}");
    }
}

fn weather_tool(name: &str) -> ToolDefinition {
    ToolDefinition::Function(std::sync::Arc::new(FunctionDefinition {
        name: name.into(),
        description: format!("The {name} tool"),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        strict: false,
    }))
}

/// Tools, system and messages each carrying a breakpoint. Sources: Anthropic's prompt caching
/// guide (platform.claude.com/docs/en/build-with-claude/prompt-caching: `cache_control`
/// `{"type": "ephemeral"}` on tools, system text blocks and message content blocks, "up to 4
/// cache breakpoints", `ttl` `"5m"` | `"1h"`) and the Messages API types in anthropics/
/// anthropic-sdk-python (`CacheControlEphemeralParam {type: "ephemeral", ttl?: "5m" | "1h"}`,
/// top-level `cache_control` for automatic caching; `system` as `str | Iterable[TextBlockParam]`).
fn cache_request() -> Request {
    let mut request = Request::new(
        "claude-sonnet-4-5",
        vec![
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("Here is the handbook: ..."),
                    ContentBlock::text("What is the weather in Paris?"),
                ],
            ),
            Message::system("Answer in French."),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Let me check."),
                    ContentBlock::text(""),
                    ContentBlock::ToolUse {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris"}),
                    },
                ],
            ),
            Message::tool_results([ToolResult::text("toolu_1", "18 °C")]),
        ],
    )
    .cache_at(
        CacheTarget::Tools,
        CacheControl::with_ttl(CacheTtl::OneHour),
    )
    .cache_at(
        CacheTarget::System,
        CacheControl::with_ttl(CacheTtl::OneHour),
    )
    // The empty text is not sent: the mark goes back to "Let me check.".
    .cache_at(
        CacheTarget::Message {
            message: 2,
            block: Some(1),
        },
        CacheControl::with_ttl(CacheTtl::FiveMinutes),
    )
    .cache_at(CacheTarget::LastMessage, CacheControl::ephemeral());
    request.system = Some("You are a weather assistant.".into());
    request.max_tokens = Some(1024);
    request.tools = vec![weather_tool("get_forecast"), weather_tool("get_weather")];
    request
}

#[test]
fn cache_breakpoints_on_tools_system_and_messages() {
    let actual = body(
        &provider(AnthropicOptions::default()),
        &cache_request(),
        false,
    );
    assert_golden(&actual, "prompt_cache");
}

#[test]
fn automatic_caching_is_a_top_level_cache_control() {
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("Hi")])
        .cache_at(CacheTarget::Automatic, CacheControl::ephemeral());
    let actual = body(&provider(AnthropicOptions::default()), &request, false);
    assert_eq!(
        actual,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "cache_control": {"type": "ephemeral"}
        })
    );
}

#[test]
fn a_fifth_cache_breakpoint_is_refused_before_sending() {
    let request = cache_request().cache_at(
        CacheTarget::Message {
            message: 0,
            block: None,
        },
        CacheControl::ephemeral(),
    );
    match provider(AnthropicOptions::default()).prepare(&request, false) {
        Err(Error::LimitExceeded {
            provider,
            what,
            limit,
            count,
        }) => {
            assert_eq!(
                (provider.as_str(), what.as_str(), limit, count),
                ("anthropic", "cache breakpoints", 4, 5)
            );
        }
        other => panic!("expected LimitExceeded, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn breakpoints_with_nothing_to_mark_are_left_out_and_not_counted() {
    // No tools, no system, a message whose only block is not sent: none of these count, so
    // five breakpoints still fit the limit of four.
    let request = Request::new(
        "claude-sonnet-4-5",
        vec![
            Message::new(Role::Assistant, vec![ContentBlock::text("")]),
            Message::user("Hi"),
        ],
    )
    .cache_at(CacheTarget::Tools, CacheControl::ephemeral())
    .cache_at(CacheTarget::System, CacheControl::ephemeral())
    .cache_at(
        CacheTarget::Message {
            message: 0,
            block: None,
        },
        CacheControl::ephemeral(),
    )
    .cache_at(CacheTarget::LastMessage, CacheControl::ephemeral())
    .cache_at(
        CacheTarget::Message {
            message: 1,
            block: Some(0),
        },
        CacheControl::ephemeral(),
    );
    let actual = body(&provider(AnthropicOptions::default()), &request, false);
    assert_eq!(
        actual["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
        ]}])
    );
    assert!(actual.get("system").is_none() && actual.get("tools").is_none());
}

#[test]
fn a_breakpoint_past_the_history_is_an_error() {
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("Hi")]).cache_at(
        CacheTarget::Message {
            message: 3,
            block: None,
        },
        CacheControl::ephemeral(),
    );
    let error = provider(AnthropicOptions::default())
        .prepare(&request, false)
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidHistory { message } if message.contains("message 3")),
        "{error:?}"
    );
}

/// A strict tool goes in Anthropic's strict dialect (`strict: true`, objects closed, the value
/// bounds it refuses left to our validation: "JSON Schema limitations" in
/// platform.claude.com/docs/en/build-with-claude/structured-outputs); one whose shape strict
/// mode would change (a map) goes without `strict`, as written.
#[test]
fn strict_tools_are_sent_in_the_strict_dialect_where_it_keeps_the_schema() {
    let tool = |name: &str, schema: Value| {
        ToolDefinition::from(FunctionDefinition {
            name: name.into(),
            description: String::new(),
            input_schema: schema,
            strict: true,
        })
    };
    let bounded = json!({"type": "object", "properties": {
        "days": {"type": "integer", "minimum": 1}
    }});
    let map = json!({"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}}
    }});
    let mut request = Request::new("claude-sonnet-4-5", vec![Message::user("Hi")]);
    request.tools = vec![
        tool(
            "weather",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        tool("forecast", bounded),
        tool("label", map.clone()),
    ];
    let body = body(&provider(AnthropicOptions::default()), &request, false);
    assert_eq!(
        body["tools"],
        json!([
            {
                "name": "weather",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "additionalProperties": false
                },
                "strict": true
            },
            {
                "name": "forecast",
                "input_schema": {
                    "type": "object",
                    "properties": {"days": {"type": "integer"}},
                    "additionalProperties": false
                },
                "strict": true
            },
            {"name": "label", "input_schema": map}
        ])
    );
}

/// A turn as the decoder assembles it from the batch-2 recordings (see
/// `anthropic_conformance.rs`): a compaction block, a code execution call, a client call made
/// from the code (`caller`) and the container the code ran in, then the call's result.
fn programmatic_continuation() -> Request {
    let anthropic = |value: Value| ContentBlock::Native {
        provider: "anthropic".into(),
        value,
    };
    Request::new(
        "claude-sonnet-4-6",
        vec![
            Message::user("Play the dice game until someone wins 3 rounds."),
            Message::new(
                Role::Assistant,
                vec![
                    anthropic(
                        json!({"type": "compaction", "content": "The user wants a dice game."}),
                    ),
                    ContentBlock::text("Let me play it out."),
                    anthropic(json!({
                        "type": "server_tool_use",
                        "id": "srvtoolu_01",
                        "name": "code_execution",
                        "input": {"code": "await rollDie(player='player1')"},
                        "caller": {"type": "direct"}
                    })),
                    ContentBlock::ToolUse {
                        id: "toolu_01".into(),
                        name: "rollDie".into(),
                        input: json!({"player": "player1"}),
                    },
                    anthropic(json!({
                        "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_01"},
                        "tool_use_id": "toolu_01"
                    })),
                    anthropic(json!({
                        "container": {"id": "container_01", "expires_at": "2025-12-20T05:33:35.789626Z"}
                    })),
                ],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult(ToolResult::text("toolu_01", "6"))],
            ),
        ],
    )
}

/// "Compaction": the compaction block goes back unchanged, the API drops what came before
/// it. "Programmatic tool calling": the client `tool_use` goes back with its `caller`, the
/// result answers it, and the request names the `container` the code runs in.
#[test]
fn compaction_caller_and_container_go_back_as_anthropic_sent_them() {
    let actual = body(
        &provider(AnthropicOptions::default()),
        &programmatic_continuation(),
        true,
    );
    assert_golden(&actual, "programmatic_continuation");
}

#[test]
fn a_container_set_by_extension_wins_and_annotations_stay_out_of_other_turns() {
    let mut request = programmatic_continuation();
    let mut extensions = serde_json::Map::new();
    extensions.insert("container".into(), json!("container_mine"));
    request.extensions = Some(extensions);
    let actual = body(&provider(AnthropicOptions::default()), &request, false);
    assert_eq!(actual["container"], "container_mine");
    // Without a container in the last assistant turn, no container is named.
    let mut request = programmatic_continuation();
    request
        .messages
        .push(Message::assistant("Player 1 rolled a 6."));
    request.messages.push(Message::user("Again?"));
    let actual = body(&provider(AnthropicOptions::default()), &request, false);
    assert!(actual.get("container").is_none(), "{actual}");
}
