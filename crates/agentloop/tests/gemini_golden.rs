//! Golden request bodies for Gemini `generateContent`. The expected JSON files in
//! `tests/golden/gemini/` were written from the Gemini API reference; their sources are listed
//! in `tests/golden/gemini/README.md`.

mod common;

use agentloop::provider::gemini::{Gemini, GeminiOptions, ThinkingConfig, tools};
use agentloop::provider::http::HttpConfig;
use agentloop::{
    ContentBlock, Error, FunctionDefinition, Message, NativeTool, Request, Role, ToolDefinition,
    ToolResult,
};
use serde_json::{Value, json};

fn provider(options: GeminiOptions) -> Gemini {
    Gemini::with_options(HttpConfig::new("http://127.0.0.1:9"), options).expect("provider")
}

fn body(provider: &Gemini, request: &Request) -> Value {
    let bytes = provider.prepare(request).expect("request prepares");
    let value: Value = serde_json::from_slice(&bytes).expect("body is JSON");
    assert_eq!(value, provider.body(request).unwrap());
    value
}

fn assert_golden(actual: &Value, name: &str) {
    let path = format!(
        "{}/tests/golden/gemini/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let expected: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        actual == &expected,
        "{name}.json differs\nexpected: {}\nactual:   {}",
        serde_json::to_string_pretty(&expected).unwrap_or_default(),
        serde_json::to_string_pretty(actual).unwrap_or_default(),
    );
}

#[test]
fn canonical_request() {
    let actual = body(
        &provider(GeminiOptions::default()),
        &common::canonical_request(),
    );
    assert_golden(&actual, "canonical");
}

fn thinking(text: &str, signature: &str, provider: &str) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: text.into(),
        signature: Some(signature.into()),
        provider: Some(provider.into()),
    }
}

fn native(value: Value) -> ContentBlock {
    ContentBlock::Native {
        provider: "gemini".into(),
        value,
    }
}

#[test]
fn signatures_go_back_on_their_parts_and_foreign_history_gets_the_stand_in() {
    let request = Request::new(
        "gemini-3-pro-preview",
        vec![
            Message::user("Book the cheapest flight to Lisbon."),
            Message::new(
                Role::Assistant,
                vec![
                    thinking("**Planning** the search", "sig-on-text", "gemini"),
                    ContentBlock::text("Searching."),
                    thinking("", "sig-on-call", "gemini"),
                    ContentBlock::ToolUse {
                        id: "gemini_call_r1_0".into(),
                        name: "search_flights".into(),
                        input: json!({"to": "LIS"}),
                    },
                    ContentBlock::ToolUse {
                        id: "gemini_call_r1_1".into(),
                        name: "search_flights".into(),
                        input: json!({"to": "OPO"}),
                    },
                    native(json!({
                        "executableCode": {"language": "PYTHON", "code": "print(min([120, 95]))"},
                        "thoughtSignature": "sig-kept-in-part"
                    })),
                    native(
                        json!({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "95\n"}}),
                    ),
                    native(
                        json!({"groundingMetadata": {"webSearchQueries": ["flights to Lisbon"]}}),
                    ),
                    thinking("Anthropic's own reasoning", "anthropic-sig", "anthropic"),
                    thinking("", "sig-trailing", "gemini"),
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::ToolResult(ToolResult::text(
                        "gemini_call_r1_0",
                        r#"{"price":95}"#,
                    )),
                    ContentBlock::ToolResult(ToolResult::text("gemini_call_r1_1", "no flights")),
                    ContentBlock::text("Go ahead."),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    thinking("I will book it.", "anthropic-sig-2", "anthropic"),
                    ContentBlock::ToolUse {
                        id: "toolu_01".into(),
                        name: "book".into(),
                        input: json!({"flight": "TP123"}),
                    },
                ],
            ),
            Message::tool_results([ToolResult::text("toolu_01", "booked")]),
        ],
    );
    let options = GeminiOptions {
        thinking: Some(ThinkingConfig {
            include_thoughts: true,
            budget: None,
            level: Some("high".into()),
        }),
    };
    assert_golden(&body(&provider(options), &request), "thinking_history");
}

#[test]
fn gemini_2_models_get_no_stand_in_signature() {
    let mut request = common::canonical_request();
    request.model = "gemini-2.5-flash".into();
    let actual = body(&provider(GeminiOptions::default()), &request);
    assert!(!actual.to_string().contains("thoughtSignature"), "{actual}");
}

#[test]
fn tool_choices_map_to_function_calling_modes() {
    use agentloop::ToolChoice;
    let cases = [
        (ToolChoice::Auto, json!({"mode": "AUTO"})),
        (ToolChoice::Required, json!({"mode": "ANY"})),
        (ToolChoice::None, json!({"mode": "NONE"})),
    ];
    for (choice, expected) in cases {
        let mut request = Request::new("gemini-2.5-flash", vec![Message::user("hi")]);
        request.tool_choice = Some(choice);
        let actual = body(&provider(GeminiOptions::default()), &request);
        assert_eq!(actual["toolConfig"]["functionCallingConfig"], expected);
    }
}

#[test]
fn native_tools_and_unsupported_ones() {
    let mut request = Request::new("gemini-2.5-flash", vec![Message::user("hi")]);
    request.tools = vec![
        ToolDefinition::Native(tools::google_search()),
        ToolDefinition::Native(tools::code_execution()),
        ToolDefinition::Native(tools::url_context()),
        ToolDefinition::Native(tools::file_search(["fileSearchStores/abc"])),
        ToolDefinition::Native(NativeTool::web_search()),
    ];
    let actual = body(&provider(GeminiOptions::default()), &request);
    assert_eq!(
        actual["tools"],
        json!([
            {"googleSearch": {}},
            {"codeExecution": {}},
            {"urlContext": {}},
            {"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/abc"]}},
            {"googleSearch": {}}
        ])
    );
    request.tools = vec![ToolDefinition::Native(NativeTool::new(
        "anthropic.bash",
        Value::Null,
    ))];
    let error = provider(GeminiOptions::default())
        .prepare(&request)
        .unwrap_err();
    assert!(matches!(error, Error::Unsupported { ref provider, .. } if provider == "gemini"));
    assert!(
        error.to_string().contains("gemini.google_search"),
        "{error}"
    );
}

/// `FunctionDeclaration.parametersJsonSchema` (Gemini API reference): "The schema must
/// describe an object where the properties are the parameters to the function."
#[test]
fn a_schema_gemini_cannot_take_is_refused_before_sending() {
    let mut request = Request::new("gemini-2.5-flash", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::from(FunctionDefinition {
        name: "tags".into(),
        description: "Takes a bare array".into(),
        input_schema: json!({"type": "array", "items": {"type": "string"}}),
        strict: false,
    })];
    let error = provider(GeminiOptions::default())
        .prepare(&request)
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidToolSchema { tool, message } if tool == "tags" && message.contains("object schema")),
        "{error:?}"
    );
}

#[test]
fn a_result_for_a_call_that_is_not_in_the_history_is_refused() {
    let request = Request::new(
        "gemini-2.5-flash",
        vec![Message::tool_results([ToolResult::text("call_gone", "42")])],
    );
    let error = provider(GeminiOptions::default())
        .prepare(&request)
        .unwrap_err();
    assert!(matches!(error, Error::InvalidHistory { .. }), "{error:?}");
    assert!(error.to_string().contains("call_gone"), "{error}");
}

/// Tool schemas go in Gemini's subset (`parametersJsonSchema` takes only some keywords:
/// ai.google.dev/api/generate-content, `GenerationConfig.responseJsonSchema`): `$ref`s
/// inlined, `oneOf` as `anyOf`, unknown keywords dropped; a recursive one is refused before
/// sending, naming the tool and the path.
#[test]
fn tool_schemas_are_compiled_to_gemini_s_subset_and_recursion_is_refused() {
    let tool = |schema: Value| {
        ToolDefinition::from(FunctionDefinition {
            name: "plan".into(),
            description: String::new(),
            input_schema: schema,
            strict: false,
        })
    };
    let mut request = Request::new("gemini-2.5-flash", vec![Message::user("Hi")]);
    request.tools = vec![tool(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "step": {"$ref": "#/$defs/Step"},
            "code": {"type": "string", "pattern": "^[A-Z]+$", "minLength": 2, "default": "AB"}
        },
        "$defs": {"Step": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}
    }))];
    let body = body(&provider(GeminiOptions::default()), &request);
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
        json!({
            "type": "object",
            "properties": {
                "step": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "code": {"type": "string"}
            }
        })
    );
    request.tools = vec![tool(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}
    }))];
    let error = provider(GeminiOptions::default())
        .prepare(&request)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tool `plan` has an invalid input schema: `$ref` at /properties/children/items/$ref has no \
         equivalent in Gemini's schema subset; Gemini cannot take it (give a recursive type a \
         fixed depth)"
    );
}
