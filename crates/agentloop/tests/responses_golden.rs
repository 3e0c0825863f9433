//! Golden request bodies for the OpenAI Responses API (`POST /v1/responses`). The expected
//! JSON in `tests/golden/openai-responses/` and below was written from OpenAI's API reference
//! ("Create a model response", the "Reasoning" guide's encrypted reasoning items, "Function
//! calling", "Structured Outputs"); sources in `tests/golden/openai-responses/README.md`.

mod common;

use std::sync::Arc;

use agentloop::provider::http::HttpConfig;
use agentloop::provider::responses::{
    OpenAiResponses, ReasoningConfig, ResponsesOptions, parse, tools,
};
use agentloop::{
    ContentBlock, Error, FunctionDefinition, Message, NativeTool, OutputFormat, Request, Role,
    ToolChoice, ToolDefinition, ToolResult,
};
use serde_json::{Value, json};

fn provider(options: ResponsesOptions) -> OpenAiResponses {
    OpenAiResponses::with_options(HttpConfig::new("http://127.0.0.1:9/v1"), options)
        .expect("provider")
}

fn body(provider: &OpenAiResponses, request: &Request) -> Value {
    let bytes = provider.prepare(request, true).expect("request prepares");
    let value: Value = serde_json::from_slice(&bytes).expect("body is JSON");
    assert_eq!(value, provider.body(request).unwrap());
    value
}

fn assert_golden(actual: &Value, name: &str) {
    let path = format!(
        "{}/tests/golden/openai-responses/{name}.json",
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
        &provider(ResponsesOptions::default()),
        &common::canonical_request(),
    );
    assert_golden(&actual, "canonical");
}

#[test]
fn the_whole_answer_request_has_no_stream_flag() {
    let provider = provider(ResponsesOptions::default());
    let bytes = provider
        .prepare(&common::canonical_request(), false)
        .unwrap();
    let value: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(value.get("stream").is_none(), "{value}");
}

fn reasoning_item(id: &str, blob: &str) -> String {
    json!({
        "id": id,
        "type": "reasoning",
        "encrypted_content": blob,
        "summary": [{"type": "summary_text", "text": "**Plan** the lookup"}]
    })
    .to_string()
}

/// Reasoning items go back as OpenAI sent them (the reasoning guide: with `store: false`, pass
/// the items with their `encrypted_content`); built-in tool items go back as input items;
/// other providers' reasoning and blocks are left out.
#[test]
fn reasoning_and_tool_items_go_back_as_they_came_and_foreign_ones_are_left_out() {
    let request = Request::new(
        "gpt-5",
        vec![
            Message::user("Capital of France, then search the web."),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Thinking {
                        thinking: "**Plan** the lookup".into(),
                        signature: Some(reasoning_item("rs_1", "gAAAA-1")),
                        provider: Some("openai-responses".into()),
                    },
                    ContentBlock::Native {
                        provider: "openai-responses".into(),
                        value: json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "capital of France"}}),
                    },
                    ContentBlock::text("Looking it up."),
                    ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "get_capital".into(),
                        input: json!({"country": "France"}),
                    },
                    // Cut off mid-arguments: the raw text goes back as it was.
                    ContentBlock::ToolUse {
                        id: "call_2".into(),
                        name: "get_capital".into(),
                        input: Value::String("{\"country\":\"Ita".into()),
                    },
                    ContentBlock::Thinking {
                        thinking: "Anthropic's reasoning".into(),
                        signature: Some("anthropic-sig".into()),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::RedactedThinking {
                        data: "opaque".into(),
                        provider: Some("anthropic".into()),
                    },
                    ContentBlock::Native {
                        provider: "gemini".into(),
                        value: json!({"executableCode": {"code": "print(1)"}}),
                    },
                    // No encrypted content (a server that stores): useless without `store`.
                    ContentBlock::Thinking {
                        thinking: "raw".into(),
                        signature: Some(
                            json!({"id": "rs_2", "type": "reasoning", "summary": []}).to_string(),
                        ),
                        provider: Some("openai-responses".into()),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::ToolResult(ToolResult::text("call_1", "Paris")),
                    ContentBlock::ToolResult(ToolResult::error("call_2", "invalid arguments")),
                ],
            ),
        ],
    );
    let expected = json!({
        "model": "gpt-5",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Capital of France, then search the web."}]},
            {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA-1", "summary": [{"type": "summary_text", "text": "**Plan** the lookup"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "capital of France"}},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Looking it up."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_capital", "arguments": "{\"country\":\"France\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_capital", "arguments": "{\"country\":\"Ita"},
            {"type": "function_call_output", "call_id": "call_1", "output": "Paris"},
            {"type": "function_call_output", "call_id": "call_2", "output": "Error: invalid arguments"}
        ],
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "stream": true
    });
    assert_eq!(
        body(&provider(ResponsesOptions::default()), &request),
        expected
    );

    // With `store`, the stored item is referenced by its id, and no encrypted content is asked
    // for.
    let stored = body(
        &provider(ResponsesOptions {
            store: true,
            ..ResponsesOptions::default()
        }),
        &request,
    );
    assert_eq!(stored["store"], true);
    assert!(stored.get("include").is_none());
    assert!(
        stored["input"]
            .as_array()
            .unwrap()
            .contains(&json!({"id": "rs_2", "type": "reasoning", "summary": []}))
    );
}

#[test]
fn a_decoded_reasoning_item_round_trips_into_the_next_request() {
    // A whole response (non-streamed `POST /responses`), as the API reference shows it.
    let response = parse(&json!({
        "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
        "output": [
            {"id": "rs_9", "type": "reasoning", "encrypted_content": "gAAAA-9", "summary": [{"type": "summary_text", "text": "Think"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "f", "arguments": "{}", "status": "completed"}
        ],
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 15}}
    }))
    .unwrap();
    assert_eq!(response.stop_reason.as_str(), "tool_use");
    assert_eq!(response.usage.cache_read_tokens, 4);
    let request = Request::new(
        "gpt-5",
        vec![
            Message::user("go"),
            Message::new(Role::Assistant, response.content),
        ],
    );
    let input = body(&provider(ResponsesOptions::default()), &request)["input"].clone();
    assert_eq!(
        input,
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"id": "rs_9", "type": "reasoning", "encrypted_content": "gAAAA-9", "summary": [{"type": "summary_text", "text": "Think"}]},
            {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"}
        ])
    );
}

#[test]
fn tool_choices_reasoning_and_typed_answers() {
    let mut request = Request::new("gpt-5", vec![Message::user("hi")]);
    let reasoning = ResponsesOptions {
        reasoning: Some(ReasoningConfig {
            effort: Some("low".into()),
            summary: Some("auto".into()),
        }),
        ..ResponsesOptions::default()
    };
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
    ] {
        request.tool_choice = Some(choice);
        assert_eq!(
            body(&provider(reasoning.clone()), &request)["tool_choice"],
            wire
        );
    }
    // Reasoning models refuse sampling settings: left out.
    request.temperature = Some(0.2);
    request.output = Some(Box::new(OutputFormat {
        name: "answer".into(),
        schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        strict: true,
    }));
    let value = body(&provider(reasoning), &request);
    assert_eq!(
        value["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert!(value.get("temperature").is_none());
    assert_eq!(
        value["text"],
        json!({"format": {
            "type": "json_schema",
            "name": "answer",
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false},
            "strict": true
        }})
    );
}

#[test]
fn strict_functions_take_the_strict_dialect() {
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::Function(Arc::new(FunctionDefinition {
        name: "lookup".into(),
        description: String::new(),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}),
        strict: true,
    }))];
    let value = body(&provider(ResponsesOptions::default()), &request);
    assert_eq!(
        value["tools"],
        json!([{
            "type": "function",
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": ["integer", "null"]}},
                "required": ["q", "n"],
                "additionalProperties": false
            },
            "strict": true
        }])
    );
}

#[test]
fn built_in_tools_are_typed_entries_and_other_providers_tools_are_refused() {
    let mut request = Request::new("gpt-5", vec![Message::user("hi")]);
    request.tools = vec![
        ToolDefinition::Native(NativeTool::web_search()),
        ToolDefinition::Native(tools::file_search(["vs_1"])),
        ToolDefinition::Native(tools::code_interpreter()),
        ToolDefinition::Native(tools::mcp("docs", "https://mcp.example.com/sse")),
        ToolDefinition::Native(agentloop::provider::openai::tools::web_search(
            agentloop::provider::openai::tools::WebSearch {
                search_context_size: Some("low".into()),
                user_location: Some(json!({"country": "FR"})),
            },
        )),
    ];
    let value = body(&provider(ResponsesOptions::default()), &request);
    assert_eq!(
        value["tools"],
        json!([
            {"type": "web_search"},
            {"type": "file_search", "vector_store_ids": ["vs_1"]},
            {"type": "code_interpreter", "container": {"type": "auto"}},
            {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example.com/sse", "require_approval": "always"},
            {"type": "web_search", "search_context_size": "low", "user_location": {"type": "approximate", "country": "FR"}}
        ])
    );
    request.tools = vec![ToolDefinition::Native(
        agentloop::provider::anthropic::tools::bash(),
    )];
    let error = provider(ResponsesOptions::default())
        .prepare(&request, true)
        .unwrap_err();
    assert!(
        matches!(&error, Error::Unsupported { provider, feature }
            if provider == "openai-responses" && feature.contains("anthropic.bash")),
        "{error:?}"
    );
}

/// Citations kept from an answer (the decoder's `annotations` note after the text) are for
/// the application: the continuing request's `input` has the assistant text as the
/// reference's `output_text` message and no item for them.
#[test]
fn kept_citations_are_not_sent_back_as_items() {
    let request = Request::new(
        "gpt-5",
        vec![
            Message::user("Tallest mountain in Alberta?"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Mount Columbia."),
                    ContentBlock::Native {
                        provider: "openai-responses".into(),
                        value: json!({
                            "annotations": [{"type": "url_citation", "start_index": 0, "end_index": 15, "title": "Britannica", "url": "https://www.britannica.com/place/Mount-Columbia"}],
                            "content_index": 0,
                            "item_id": "msg_1"
                        }),
                    },
                ],
            ),
            Message::user("How high?"),
        ],
    );
    let actual = body(&provider(ResponsesOptions::default()), &request);
    assert_eq!(
        actual["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "Tallest mountain in Alberta?"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Mount Columbia."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "How high?"}]}
        ])
    );
}

/// Server-side compaction. OpenAI's "Context management" guide
/// (developers.openai.com/api/docs/guides/context-management): a create request with
/// `context_management: [{"type": "compaction", "compact_threshold": n}]` makes the server
/// compact once the rendered input passes `n`, and the stream carries an encrypted
/// `compaction` output item (`ResponseCompactionItem`: `type`, `id`, `encrypted_content`,
/// optional `created_by`) that the next request's `input` carries back with the other output
/// items.
#[test]
fn server_side_compaction_is_requested_and_its_item_goes_back_as_it_came() {
    use agentloop::context::responses_compaction;
    use agentloop::provider::replay::{WireFormat, assemble};

    let compaction = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-compacted", "created_by": "server"});
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}]});
    let events = [
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "model": "gpt-5"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "compaction", "id": "cmp_1"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": compaction}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Done."}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": message}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "model": "gpt-5",
            "usage": {"input_tokens": 900, "output_tokens": 3}}}),
    ];
    let stream: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    let replayed = assemble(WireFormat::OpenAiResponses, stream.as_bytes());
    assert!(replayed.error.is_none(), "{:?}", replayed.error);
    assert_eq!(
        replayed.response.content,
        vec![
            ContentBlock::Native {
                provider: "openai-responses".into(),
                value: compaction,
            },
            ContentBlock::text("Done."),
        ]
    );

    let mut request = Request::new(
        "gpt-5",
        vec![
            Message::user("Read the whole repository."),
            Message::new(Role::Assistant, replayed.response.content),
            Message::user("Now fix the bug."),
        ],
    );
    responses_compaction(&mut request, Some(200_000));
    assert_golden(
        &body(&provider(ResponsesOptions::default()), &request),
        "compaction",
    );
    responses_compaction(&mut request, None);
    assert_eq!(
        body(&provider(ResponsesOptions::default()), &request)["context_management"],
        json!([{"type": "compaction"}])
    );
}
