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
    let content: Vec<ContentBlock> = wire.content.into_iter().map(block).collect();
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
