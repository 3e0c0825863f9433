//! Golden request bodies for Bedrock `Converse` / `ConverseStream`. The expected JSON files in
//! `tests/golden/bedrock/` were written from the Amazon Bedrock API reference; their sources
//! are listed in `tests/golden/bedrock/README.md`.

mod common;

use agentloop::provider::bedrock::{Bedrock, BedrockAuth, BedrockOptions};
use agentloop::provider::http::HttpConfig;
use agentloop::{
    ContentBlock, Error, FunctionDefinition, Message, NativeTool, Request, Role, ToolChoice,
    ToolDefinition, ToolResult,
};
use serde_json::{Value, json};

fn provider(options: BedrockOptions) -> Bedrock {
    Bedrock::with_options(
        HttpConfig::new("http://127.0.0.1:9"),
        "us-east-1",
        BedrockAuth::None,
        options,
    )
    .expect("provider")
}

fn body(provider: &Bedrock, request: &Request) -> Value {
    let bytes = provider.prepare(request).expect("request prepares");
    let value: Value = serde_json::from_slice(&bytes).expect("body is JSON");
    assert_eq!(value, provider.body(request).unwrap());
    value
}

fn assert_golden(actual: &Value, name: &str) {
    let path = format!(
        "{}/tests/golden/bedrock/{name}.json",
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
        &provider(BedrockOptions::default()),
        &common::canonical_request(),
    );
    assert_golden(&actual, "canonical");
}

#[test]
fn reasoning_server_tools_and_foreign_ids_go_back_in_bedrock_shape() {
    let mut request = Request::new(
        "us.anthropic.claude-sonnet-4-20250514-v1:0",
        vec![
            Message::user("How many r's are in strawberry?"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "Count them: s-t-r-a-w-b-e-r-r-y.".into(),
                        signature: Some("Ep0CCkgICxABGAIq".into()),
                        provider: Some("bedrock".into()),
                    },
                    // Another provider's reasoning cannot be checked by Bedrock: left out.
                    ContentBlock::Thinking {
                        thinking: "anthropic's own".into(),
                        signature: Some("sig-anthropic".into()),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::RedactedThinking {
                        data: "RXRrRUNrZ0lCeEFC".into(),
                        provider: Some("bedrock".into()),
                    },
                    ContentBlock::ToolUse {
                        id: "tooluse_1".into(),
                        name: "count".into(),
                        input: json!({"letter": "r"}),
                    },
                    ContentBlock::Native {
                        provider: "bedrock".into(),
                        value: json!({"toolUse": {"toolUseId": "tooluse_VQNZJRUFMoqZzszVsRd4og", "name": "nova_code_interpreter", "type": "server_tool_use", "input": {"snippet": "1+1"}}}),
                    },
                ],
            ),
            Message::tool_results([ToolResult::text("tooluse_1", "3")]),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "call_abc.1/x".into(),
                    name: "count".into(),
                    input: json!({}),
                }],
            ),
            Message::tool_results([ToolResult::text("call_abc.1/x", "3")]),
        ],
    );
    request.max_tokens = Some(2048);
    request.top_k = Some(40);
    request.tool_choice = Some(ToolChoice::Required);
    request.tools = vec![
        ToolDefinition::from(FunctionDefinition {
            name: "count".into(),
            description: "Count a letter".into(),
            input_schema: json!({"type": "object", "properties": {"letter": {"type": "string"}}}),
            strict: false,
        }),
        ToolDefinition::Native(NativeTool::new(
            "bedrock.nova_code_interpreter",
            Value::Null,
        )),
    ];
    let actual = body(
        &provider(BedrockOptions {
            thinking_budget: Some(1024),
        }),
        &request,
    );
    assert_golden(&actual, "thinking-history");
}

#[test]
fn tool_choices_map_to_converse_and_none_leaves_the_tools_out() {
    let bedrock = provider(BedrockOptions::default());
    let mut request = common::canonical_request();
    request.messages = vec![Message::user("hi")];
    for (choice, expected) in [
        (Some(ToolChoice::Auto), Some(json!({"auto": {}}))),
        (Some(ToolChoice::Required), Some(json!({"any": {}}))),
        (
            Some(ToolChoice::tool("get_weather")),
            Some(json!({"tool": {"name": "get_weather"}})),
        ),
        (None, None),
    ] {
        request.tool_choice = choice;
        let body = body(&bedrock, &request);
        assert_eq!(body["toolConfig"].get("toolChoice"), expected.as_ref());
        assert_eq!(body["toolConfig"]["tools"].as_array().unwrap().len(), 2);
    }
    request.tool_choice = Some(ToolChoice::None);
    assert!(body(&bedrock, &request).get("toolConfig").is_none());
    // With tool blocks in the history Bedrock requires the tool configuration: it stays.
    let mut with_history = common::canonical_request();
    with_history.tool_choice = Some(ToolChoice::None);
    let body = body(&bedrock, &with_history);
    assert!(body["toolConfig"].get("toolChoice").is_none());
    assert_eq!(body["toolConfig"]["tools"].as_array().unwrap().len(), 2);
}

#[test]
fn what_converse_cannot_take_is_refused_before_sending() {
    let bedrock = provider(BedrockOptions::default());
    let request = Request::new(
        "m",
        vec![Message::new(
            Role::User,
            vec![ContentBlock::image_url("https://example.com/a.png")],
        )],
    );
    assert!(matches!(
        bedrock.prepare(&request),
        Err(Error::Unsupported { ref provider, ref feature }) if provider == "bedrock" && feature.contains("by URL")
    ));
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::Native(NativeTool::web_search())];
    assert!(matches!(
        bedrock.prepare(&request),
        Err(Error::Unsupported { ref feature, .. }) if feature.contains("bedrock.<systemTool name>")
    ));
}

/// A schemars schema with `$schema` and `$ref`s goes out in Bedrock's dialect: refs inlined,
/// `$schema` dropped (Converse hands `inputSchema.json` to the model behind it as it is).
#[test]
fn tool_schemas_are_compiled_to_bedrock_s_dialect() {
    let bedrock = provider(BedrockOptions::default());
    let mut request = Request::new("m", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::from(FunctionDefinition {
        name: "book".into(),
        description: String::new(),
        input_schema: json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"when": {"$ref": "#/$defs/Slot"}},
            "required": ["when"],
            "$defs": {"Slot": {"type": "string", "format": "date-time"}}
        }),
        strict: false,
    })];
    let body = body(&bedrock, &request);
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"],
        json!({
            "type": "object",
            "properties": {"when": {"type": "string", "format": "date-time"}},
            "required": ["when"]
        })
    );
}
