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
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
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
                .remove("input")
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
    match map.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            // Not a string: put it back so a Native fallback stays verbatim.
            map.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}
