//! A non-streamed Messages API response → canonical [`Response`].

use serde::Deserialize;
use serde_json::{Map, Value};

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::message::{ContentBlock, Response, StopReason, Usage};

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
    #[serde(default)]
    container: Option<Value>,
}

/// Token counts as Anthropic reports them. Every field is optional: `message_delta` carries
/// only what changed, and a present value (even 0) replaces the earlier one.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) output_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overwrite the counts this report carries.
    pub(super) fn apply_to(&self, usage: &mut Usage) {
        let fields = [
            (self.input_tokens, &mut usage.input_tokens),
            (self.output_tokens, &mut usage.output_tokens),
            (
                self.cache_creation_input_tokens,
                &mut usage.cache_write_tokens,
            ),
            (self.cache_read_input_tokens, &mut usage.cache_read_tokens),
        ];
        for (reported, slot) in fields {
            if let Some(count) = reported {
                *slot = count;
            }
        }
    }
}

pub(super) fn parse(value: Value) -> Result<Response> {
    if !value.is_object() {
        return Err(Error::parse(
            "Anthropic response",
            "expected a JSON object (a Message)",
        ));
    }
    // Some gateways answer 200 with an error body.
    if value.get("type").and_then(Value::as_str) == Some("error") {
        let error = value.get("error");
        let field = |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str);
        return Err(Error::Api {
            provider: PROVIDER_NAME.to_owned(),
            status: 200,
            error_type: field("type").map(str::to_owned),
            message: field("message")
                .unwrap_or("error without a message")
                .to_owned(),
        });
    }
    let wire: WireResponse =
        serde_json::from_value(value).map_err(|e| Error::parse("Anthropic response", e))?;
    let mut content: Vec<ContentBlock> = Vec::with_capacity(wire.content.len());
    for value in wire.content {
        let caller = match &value {
            Value::Object(map) if map.get("type").and_then(Value::as_str) == Some("tool_use") => {
                let id = map.get("id").and_then(Value::as_str).unwrap_or_default();
                map.get("caller")
                    .and_then(|caller| caller_note(id, caller.clone()))
            }
            _ => None,
        };
        content.push(block(value));
        content.extend(caller.map(native));
    }
    if let Some(container) = wire.container.filter(|c| !c.is_null()) {
        content.push(native(container_note(container)));
    }
    let mut usage = Usage::default();
    wire.usage.apply_to(&mut usage);
    let stop_reason = match wire.stop_reason {
        Some(name) => StopReason::from_name(&name),
        None if content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. })) =>
        {
            StopReason::ToolUse
        }
        None => StopReason::EndTurn,
    };
    Ok(Response {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason,
        usage,
    })
}

/// One content block. Text, client tool use and reasoning become canonical blocks; anything
/// else (server tool use, search results, MCP blocks, ...) is kept verbatim to round-trip.
/// Citations on text blocks are not kept.
pub(super) fn block(value: Value) -> ContentBlock {
    let Value::Object(mut map) = value else {
        return native(value);
    };
    let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "text" => match take_string(&mut map, "text") {
            Some(text) => ContentBlock::Text { text },
            None => native(Value::Object(map)),
        },
        "tool_use" => ContentBlock::ToolUse {
            id: take_string(&mut map, "id").unwrap_or_default(),
            name: take_string(&mut map, "name").unwrap_or_default(),
            input: map
                .shift_remove("input")
                .filter(|input| !input.is_null())
                .unwrap_or_else(|| Value::Object(Map::new())),
        },
        "thinking" => ContentBlock::Thinking {
            thinking: take_string(&mut map, "thinking").unwrap_or_default(),
            signature: take_string(&mut map, "signature").filter(|s| !s.is_empty()),
            provider: Some(PROVIDER_NAME.to_owned()),
        },
        "redacted_thinking" => match take_string(&mut map, "data") {
            Some(data) => ContentBlock::RedactedThinking {
                data,
                provider: Some(PROVIDER_NAME.to_owned()),
            },
            None => native(Value::Object(map)),
        },
        _ => native(Value::Object(map)),
    }
}

/// The annotation that keeps a client call's `caller` (programmatic tool calling: the code
/// execution call that made it), or `None` for a call Claude made directly, the default.
/// Annotations have no `type`: they are not blocks, and the request never sends them as such.
pub(super) fn caller_note(tool_use_id: &str, caller: Value) -> Option<Value> {
    if caller.is_null() || caller.get("type").and_then(Value::as_str) == Some("direct") {
        return None;
    }
    let mut note = Map::new();
    note.insert("caller".to_owned(), caller);
    note.insert("tool_use_id".to_owned(), tool_use_id.into());
    Some(Value::Object(note))
}

/// The annotation that keeps the code execution container a message ran in (`{id,
/// expires_at}`); the next request names it so a programmatic call's results reach it.
pub(super) fn container_note(container: Value) -> Value {
    let mut note = Map::new();
    note.insert("container".to_owned(), container);
    Value::Object(note)
}

/// A decoder annotation ([`caller_note`], [`container_note`]) rather than a block.
pub(super) fn is_note(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| !map.contains_key("type"))
}

fn native(value: Value) -> ContentBlock {
    ContentBlock::Native {
        provider: PROVIDER_NAME.to_owned(),
        value,
    }
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> Option<String> {
    match map.shift_remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            // Not a string: put it back so a Native fallback stays verbatim.
            map.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_messages_response_becomes_canonical_blocks() {
        // Shape from the Messages API reference and the extended thinking / web search pages.
        let wire = json!({
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "thinking", "thinking": "Let me search.", "signature": "EqQB"},
                {"type": "redacted_thinking", "data": "EmwK"},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "rust"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Rust is", "citations": [{"type": "web_search_result_location", "url": "https://rust-lang.org"}]},
                {"type": "tool_use", "id": "toolu_1", "name": "save", "input": {"note": "rust"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {
                "input_tokens": 2095,
                "output_tokens": 503,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 1800,
                "server_tool_use": {"web_search_requests": 1}
            }
        });
        let response = parse(wire).expect("parses");
        assert_eq!(response.id, "msg_01");
        assert_eq!(response.model, "claude-sonnet-4-5-20250929");
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 2095,
                output_tokens: 503,
                cache_read_tokens: 1800,
                cache_write_tokens: 0,
                reasoning_tokens: 0,
            }
        );
        let anthropic = || Some(PROVIDER_NAME.to_owned());
        assert_eq!(
            response.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "Let me search.".into(),
                    signature: Some("EqQB".into()),
                    provider: anthropic(),
                },
                ContentBlock::RedactedThinking {
                    data: "EmwK".into(),
                    provider: anthropic(),
                },
                ContentBlock::Native {
                    provider: PROVIDER_NAME.into(),
                    value: json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "rust"}}),
                },
                ContentBlock::Native {
                    provider: PROVIDER_NAME.into(),
                    value: json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
                },
                ContentBlock::text("Rust is"),
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "save".into(),
                    input: json!({"note": "rust"}),
                },
            ]
        );
    }

    #[test]
    fn a_programmatic_call_keeps_its_caller_and_the_container() {
        // "Programmatic tool calling": the client call names the code execution call that
        // made it; the message names the container the code runs in.
        let response = parse(json!({
            "id": "msg_02",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "rollDie", "input": {"player": "p1"},
                 "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}},
                {"type": "tool_use", "id": "toolu_2", "name": "rollDie", "input": {"player": "p2"},
                 "caller": {"type": "direct"}}
            ],
            "container": {"id": "container_1", "expires_at": "2025-12-20T05:33:37Z"},
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 0, "output_tokens": 0}
        }))
        .expect("parses");
        let call = |id: &str, player: &str| ContentBlock::ToolUse {
            id: id.into(),
            name: "rollDie".into(),
            input: json!({ "player": player }),
        };
        assert_eq!(
            response.content,
            vec![
                call("toolu_1", "p1"),
                native(json!({
                    "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"},
                    "tool_use_id": "toolu_1"
                })),
                call("toolu_2", "p2"),
                native(
                    json!({"container": {"id": "container_1", "expires_at": "2025-12-20T05:33:37Z"}})
                ),
            ]
        );
    }

    #[test]
    fn missing_fields_and_odd_blocks_do_not_fail() {
        let response = parse(json!({
            "content": [
                {"type": "text"},
                {"type": "tool_use", "id": "t", "name": "f"},
                "not an object"
            ],
            "stop_reason": null,
            "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": null}
        }))
        .expect("parses");
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.usage.input_tokens, 3);
        assert_eq!(
            response.content,
            vec![
                ContentBlock::Native {
                    provider: PROVIDER_NAME.into(),
                    value: json!({"type": "text"}),
                },
                ContentBlock::ToolUse {
                    id: "t".into(),
                    name: "f".into(),
                    input: json!({}),
                },
                ContentBlock::Native {
                    provider: PROVIDER_NAME.into(),
                    value: json!("not an object"),
                },
            ]
        );
        assert!(matches!(parse(json!([])), Err(Error::Parse { .. })));
        assert!(matches!(
            parse(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
            Err(Error::Api { status: 200, error_type: Some(t), .. }) if t == "overloaded_error"
        ));
    }
}
