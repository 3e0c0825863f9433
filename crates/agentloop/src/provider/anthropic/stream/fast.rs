//! A hand-written reader for the events of a Messages stream: `message_start`,
//! `content_block_start`, `content_block_delta` (text, thinking, tool input),
//! `content_block_stop`, `message_delta`, `ping` and `message_stop`.
//!
//! serde's derived reading dispatches on every field and would be the decoder's main cost; this
//! reads those events in one pass with no per-field dispatch. It answers `None` on anything
//! else (an `error` object, a number where a string belongs, a duplicate field, an escaped key,
//! invalid JSON) and the caller falls back to serde. Where it answers, it answers what serde
//! would: debug builds and fuzzing check every event against serde, and
//! `tests::agrees_with_serde` does so over generated events.
//!
//! A delta written the API's way is read by [`compact_delta`] into a small [`Delta`] the decoder
//! takes as it is; any other event by [`any_event`].

use std::borrow::Cow;

use super::{StartBlock, StartMessage, WireDelta, WireEvent};
use crate::provider::anthropic::response::WireUsage;
use crate::provider::scan::{Scanner, Seen, null_only};

/// Read one event as serde would, or `None` to let serde read it.
#[cfg(test)]
pub(super) fn read(data: &str) -> Option<WireEvent<'_>> {
    compact_delta(data)
        .map(Delta::into_event)
        .or_else(|| any_event(data))
}

/// A `content_block_delta` event: the block's index, the delta's kind and its value.
#[derive(Debug, Clone)]
pub(super) struct Delta<'a> {
    pub(super) index: u64,
    pub(super) field: DeltaField,
    pub(super) value: Cow<'a, str>,
}

impl<'a> Delta<'a> {
    /// The event as serde reads it.
    #[cfg(any(test, debug_assertions, fuzzing))]
    pub(super) fn into_event(self) -> WireEvent<'a> {
        let mut delta = WireDelta {
            kind: Some(self.field.kind().into()),
            ..WireDelta::default()
        };
        let slot = match self.field {
            DeltaField::Text => &mut delta.text,
            DeltaField::PartialJson => &mut delta.partial_json,
            DeltaField::Thinking => &mut delta.thinking,
            DeltaField::Signature => &mut delta.signature,
        };
        *slot = Some(self.value);
        WireEvent {
            kind: "content_block_delta".into(),
            index: Some(self.index),
            delta: Some(delta),
            ..WireEvent::default()
        }
    }
}

/// The members of a delta event, in the order and spacing the Messages API sends them, up to
/// the delta's value; with the field that value belongs to.
const COMPACT_DELTAS: [(&str, DeltaField); 4] = [
    (r#"text_delta","text":"#, DeltaField::Text),
    (
        r#"input_json_delta","partial_json":"#,
        DeltaField::PartialJson,
    ),
    (r#"thinking_delta","thinking":"#, DeltaField::Thinking),
    (r#"signature_delta","signature":"#, DeltaField::Signature),
];

/// The delta kinds the decoder streams, by the field that carries their value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeltaField {
    Text,
    PartialJson,
    Thinking,
    Signature,
}

impl DeltaField {
    /// The delta's `type`.
    #[cfg(any(test, debug_assertions, fuzzing))]
    pub(super) fn kind(self) -> &'static str {
        match self {
            DeltaField::Text => "text_delta",
            DeltaField::PartialJson => "input_json_delta",
            DeltaField::Thinking => "thinking_delta",
            DeltaField::Signature => "signature_delta",
        }
    }

    /// The kind that `type` names, if the decoder streams it.
    pub(super) fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            "text_delta" => Some(DeltaField::Text),
            "input_json_delta" => Some(DeltaField::PartialJson),
            "thinking_delta" => Some(DeltaField::Thinking),
            "signature_delta" => Some(DeltaField::Signature),
            _ => None,
        }
    }
}

/// A delta event exactly as the API writes it: the same bytes every time but the index and the
/// value, so they are checked as a whole instead of key by key. Anything else (other spacing,
/// order or fields) is read by [`any_event`].
pub(super) fn compact_delta(data: &str) -> Option<Delta<'_>> {
    const HEAD: &str = r#"{"type":"content_block_delta","index":"#;
    if !data.starts_with(HEAD) {
        return None;
    }
    let mut s = Scanner::inside_object(data, HEAD.len());
    let index = s.count()?;
    s.literal(r#","delta":{"type":""#)?;
    let field = COMPACT_DELTAS
        .iter()
        .find_map(|&(members, field)| s.literal(members).map(|()| field))?;
    let value = s.string()?;
    s.literal("}}")?;
    s.finish()?;
    Some(Delta {
        index,
        field,
        value,
    })
}

/// Any event whose members are all known shapes, in any order, with `null`s and unknown fields.
pub(super) fn any_event(data: &str) -> Option<WireEvent<'_>> {
    let mut event = WireEvent::default();
    let mut seen = Seen::default();
    let mut s = Scanner::new(data);
    s.object(|s, key| {
        match key {
            "type" => {
                seen.first(0)?;
                event.kind = s.string()?;
            }
            "index" => {
                seen.first(1)?;
                event.index = s.optional_count()?;
            }
            "delta" => {
                seen.first(2)?;
                event.delta = s.optional(delta)?;
            }
            "message" => {
                seen.first(3)?;
                event.message = s.optional(message)?.map(Box::new);
            }
            "content_block" => {
                seen.first(4)?;
                event.content_block = s.optional(start_block)?.map(Box::new);
            }
            "usage" => {
                seen.first(5)?;
                event.usage = s.optional(usage)?.map(Box::new);
            }
            // `null` if present at all; an error object is left to serde.
            "error" => null_only(s, &mut seen, 6)?,
            _ => s.skip()?,
        }
        Some(())
    })?;
    s.finish()?;
    Some(event)
}

/// `content_block_start`'s block. One of the kinds the decoder takes apart, with its `type`
/// first as the API writes it, is read member by member; any other block is read whole.
fn start_block<'a>(s: &mut Scanner<'a>) -> Option<StartBlock<'a>> {
    let mark = s.mark();
    if let Some(block) = known_block(s) {
        return Some(block);
    }
    s.rewind(mark);
    s.value().map(StartBlock::from_value)
}

/// The kinds of block [`known_block`] reads.
#[derive(Debug, Clone, Copy)]
enum BlockKind {
    Text,
    Thinking,
    RedactedThinking,
    ToolUse,
}

/// A block whose first member is `type` naming one of [`BlockKind`], read as
/// [`StartBlock::from_value`] reads it; `None` for anything else, including a member it uses
/// that is not a string or is given twice (the caller then reads the block whole).
fn known_block<'a>(s: &mut Scanner<'a>) -> Option<StartBlock<'a>> {
    let mut kind = None;
    // The kind's string members in the order of its `StartBlock` fields, and a call's input.
    let mut texts: [Option<Cow<'a, str>>; 2] = [None, None];
    let mut input = None;
    let mut seen = Seen::default();
    s.object(|s, key| {
        let Some(kind) = kind else {
            if key != "type" {
                return None;
            }
            kind = Some(match s.string()?.as_ref() {
                "text" => BlockKind::Text,
                "thinking" => BlockKind::Thinking,
                "redacted_thinking" => BlockKind::RedactedThinking,
                "tool_use" => BlockKind::ToolUse,
                _ => return None,
            });
            return Some(());
        };
        let slot = match (kind, key) {
            (BlockKind::Text, "text")
            | (BlockKind::Thinking, "thinking")
            | (BlockKind::RedactedThinking, "data")
            | (BlockKind::ToolUse, "id") => 0,
            (BlockKind::Thinking, "signature") | (BlockKind::ToolUse, "name") => 1,
            (BlockKind::ToolUse, "input") => {
                seen.first(2)?;
                input = Some(s.value()?);
                return Some(());
            }
            // A second `type`: the last one names the block.
            (_, "type") => return None,
            // Read, not skipped: serde reads the block into a `Value`, and a value rejects more
            // than skipping does (a lone surrogate, a number out of range).
            _ => return s.value().map(drop),
        };
        seen.first(slot)?;
        texts[usize::from(slot)] = s.optional_string()?;
        Some(())
    })?;
    let [first, second] = texts;
    Some(match kind? {
        BlockKind::Text => StartBlock::Text { text: first },
        BlockKind::Thinking => StartBlock::Thinking {
            thinking: first,
            signature: second,
        },
        BlockKind::RedactedThinking => StartBlock::RedactedThinking { data: first },
        BlockKind::ToolUse => StartBlock::ToolUse {
            id: first,
            name: second,
            input,
        },
    })
}

/// `message_start`'s message: its id, model and usage (the rest is skipped, as serde skips it).
fn message<'a>(s: &mut Scanner<'a>) -> Option<StartMessage<'a>> {
    let mut message = StartMessage {
        id: None,
        model: None,
        usage: None,
    };
    let mut seen = Seen::default();
    s.object(|s, key| {
        match key {
            "id" => {
                seen.first(0)?;
                message.id = s.optional_string()?;
            }
            "model" => {
                seen.first(1)?;
                message.model = s.optional_string()?;
            }
            "usage" => {
                seen.first(2)?;
                message.usage = s.optional(usage)?;
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(message)
}

/// A usage object: the four counts the decoder keeps (others, such as `server_tool_use` or
/// `cache_creation`, are skipped).
fn usage(s: &mut Scanner<'_>) -> Option<WireUsage> {
    let mut usage = WireUsage::default();
    let mut seen = Seen::default();
    s.object(|s, key| {
        let (field, target) = match key {
            "input_tokens" => (0, &mut usage.input_tokens),
            "output_tokens" => (1, &mut usage.output_tokens),
            "cache_creation_input_tokens" => (2, &mut usage.cache_creation_input_tokens),
            "cache_read_input_tokens" => (3, &mut usage.cache_read_input_tokens),
            _ => return s.skip(),
        };
        seen.first(field)?;
        *target = s.optional_count()?;
        Some(())
    })?;
    Some(usage)
}

fn delta<'a>(s: &mut Scanner<'a>) -> Option<WireDelta<'a>> {
    let mut delta = WireDelta::default();
    let mut seen = Seen::default();
    s.object(|s, key| {
        let (field, target) = match key {
            "type" => (0, &mut delta.kind),
            "text" => (1, &mut delta.text),
            "partial_json" => (2, &mut delta.partial_json),
            "thinking" => (3, &mut delta.thinking),
            "signature" => (4, &mut delta.signature),
            "stop_reason" => (5, &mut delta.stop_reason),
            _ => return s.skip(),
        };
        seen.first(field)?;
        *target = s.optional_string()?;
        Some(())
    })?;
    Some(delta)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::super::AnthropicDecoder;
    use super::*;
    use crate::provider::http::SseDecoder;
    use crate::provider::scan::strategies::{
        Keys, fields, mangled, one_of, recorded_streams, share_read, text,
    };
    use crate::sse::{SseEvent, SseParser};

    fn serde(data: &str) -> Option<WireEvent<'_>> {
        serde_json::from_str(data).ok()
    }

    #[test]
    fn reads_deltas_without_copying() {
        let data = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        let event = read(data).unwrap();
        assert_eq!(Some(&event), serde(data).as_ref());
        assert_eq!(event.index, Some(0));
        let delta = event.delta.unwrap();
        assert!(matches!(delta.text, Some(Cow::Borrowed("Hello"))));
        assert_eq!(delta.kind.as_deref(), Some("text_delta"));

        let data = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}"#;
        let event = read(data).unwrap();
        assert_eq!(Some(&event), serde(data).as_ref());
        assert_eq!(
            event.delta.unwrap().partial_json.as_deref(),
            Some(r#"{"city": "Par"#)
        );

        for data in [
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type": "ping"}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"content_block_delta","index":null,"delta":null,"usage":null}"#,
            r#"{"index":2,"extra":{"a":[1,2.5,"x"]}}"#,
        ] {
            assert_eq!(read(data), serde(data), "{data}");
            assert!(read(data).is_some(), "{data}");
        }
    }

    /// The start events and `message_delta`, as the API writes them (usage objects with the
    /// nested members it has added over time), are read as serde reads them.
    #[test]
    fn reads_starts_and_message_deltas() {
        let start = r#"{"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","id":"msg_01QC","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}"#;
        let event = read(start).unwrap();
        assert_eq!(Some(&event), serde(start).as_ref());
        let message = event.message.unwrap();
        assert!(matches!(message.id, Some(Cow::Borrowed("msg_01QC"))));
        assert_eq!(message.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        let usage = message.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (Some(1200), Some(1))
        );
        assert_eq!(
            (
                usage.cache_creation_input_tokens,
                usage.cache_read_input_tokens
            ),
            (Some(0), Some(5))
        );

        let block = r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"units":["c",1.5,null]}}}"#;
        let event = read(block).unwrap();
        assert_eq!(Some(&event), serde(block).as_ref());
        assert_eq!(
            event.content_block.map(|b| *b),
            Some(StartBlock::ToolUse {
                id: Some(Cow::Borrowed("toolu_01")),
                name: Some(Cow::Borrowed("get_weather")),
                input: Some(serde_json::json!({"units": ["c", 1.5, null]})),
            })
        );

        let delta = r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":null,"output_tokens":89,"server_tool_use":{"web_search_requests":1}}}"#;
        let event = read(delta).unwrap();
        assert_eq!(Some(&event), serde(delta).as_ref());
        assert_eq!(
            event.delta.unwrap().stop_reason.as_deref(),
            Some("tool_use")
        );
        let usage = event.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (None, Some(89)));

        for data in [
            r#"{"type":"message_start","message":{"id":null,"model":"m","usage":null}}"#,
            r#"{"type":"message_start","message":{}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":"text"}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{}}"#,
        ] {
            assert_eq!(read(data), serde(data), "{data}");
            assert!(read(data).is_some(), "{data}");
        }
    }

    /// The blocks the API writes are read member by member, without a `Value` built; any other
    /// block (another kind, `type` not first, a member of the wrong type or given twice) is
    /// read whole, and both ways agree with serde.
    #[test]
    fn known_blocks_are_read_member_by_member() {
        let block = |json: &str| {
            let mut s = Scanner::new(json);
            let known = known_block(&mut s).filter(|_| s.finish().is_some());
            let mut s = Scanner::new(json);
            let read = start_block(&mut s).filter(|_| s.finish().is_some());
            let serde = serde_json::from_str::<StartBlock<'_>>(json).ok();
            assert_eq!(read, serde, "{json}");
            known.is_some()
        };
        for known in [
            r#"{"type":"text","text":""}"#,
            r#"{"type":"text","text":"Hi","citations":[]}"#,
            r#"{"type":"thinking","thinking":"","signature":"EqQB"}"#,
            r#"{"type":"redacted_thinking","data":"EmwKAhgB"}"#,
            r#"{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}"#,
            r#"{"type":"tool_use","input":{"city":"Paris"},"name":null,"caller":{"type":"direct"}}"#,
            r#"{"type":"text"}"#,
        ] {
            assert!(block(known), "{known} not read member by member");
        }
        for whole in [
            r#"{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}}"#,
            r#"{"text":"Hi","type":"text"}"#,
            r#"{"type":"text","text":7}"#,
            r#"{"type":"text","text":"a","text":"b"}"#,
            r#"{"type":"text","type":"thinking","thinking":"x"}"#,
            r#"{"type":"tool_use","input":{},"input":{"a":1}}"#,
            r#"{"type":"text","text":"Hi","other":"\ud800"}"#,
            r#"{"type":"text","text":"Hi","other":1e999}"#,
            r#"{"type":null}"#,
            r#"{}"#,
            r#""text""#,
        ] {
            assert!(!block(whole), "{whole} read member by member");
        }
    }

    #[test]
    fn leaves_rare_shapes_to_serde() {
        for data in [
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":["text_delta"]}"#,
            r#"{"typ\u0065":"ping"}"#,
            // serde reads a struct from an array of its fields, too.
            r#"{"type":"message_start","message":["msg_1","m",null]}"#,
            r#"{"type":"message_delta","usage":[1,2]}"#,
            r#"{"type":"content_block_start","content_block":{"typ\u0065":"text"}}"#,
        ] {
            assert_eq!(read(data), None, "{data}");
            assert!(serde(data).is_some(), "{data}");
        }
        for invalid in [
            r#"{"type":"ping","type":"ping"}"#,
            r#"{"type":"content_block_delta","delta":{"text":"a","text":"b"}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":1,"output_tokens":2}}"#,
            r#"{"type":"message_start","message":{"id":"a","id":"b"}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":1.0}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":-1}}"#,
            r#"{"type":"message_start","message":{"model":7}}"#,
            r#"{"type":"message_start","message":"m"}"#,
            r#"{"type":"content_block_start","content_block":{"type":"text",}}"#,
            r#"{"type":null}"#,
            r#"{"index":-1}"#,
            r#"{"index":1.5}"#,
            r#"{"delta":{"text":7}}"#,
            r#"{"type":"ping"} x"#,
            r#"{"type":"ping",}"#,
            "",
        ] {
            assert_eq!(read(invalid), None, "{invalid}");
            assert!(serde(invalid).is_none(), "{invalid}");
        }
    }

    /// Every event of the recorded Anthropic streams: the fast reader agrees with serde
    /// wherever it answers, and it answers for every event but an error.
    #[test]
    fn recorded_streams_agree_and_take_the_fast_path() {
        let streams = recorded_streams().join("anthropic");
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        for file in std::fs::read_dir(&streams).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
                let data = data.trim();
                let Some(expected) = serde(data) else {
                    continue;
                };
                match read(data) {
                    Some(event) => assert_eq!(event, expected, "{data}"),
                    None => assert_eq!(expected.kind, "error", "left to serde: {data}"),
                }
                *kinds.entry(expected.kind.into_owned()).or_default() += 1;
            }
        }
        for kind in ["message_start", "content_block_start", "message_delta"] {
            assert!(kinds.get(kind).is_some_and(|&n| n > 3), "{kind}: {kinds:?}");
        }
        assert!(kinds["content_block_delta"] > 50, "{kinds:?}");
    }

    /// The events and the result a decoder gives for `events` (name, data): as it reads them
    /// (deltas taken as they are), and with every event serde reads dispatched whole.
    fn decoded_both_ways(events: &[(String, String)]) -> [Vec<String>; 2] {
        let mut fast = AnthropicDecoder::new();
        let mut whole = AnthropicDecoder::new();
        let (mut fast_out, mut whole_out) = (VecDeque::new(), VecDeque::new());
        let (mut fast_log, mut whole_log) = (Vec::new(), Vec::new());
        for (name, data) in events {
            let event = SseEvent {
                event: name,
                data: Cow::Borrowed(data),
                id: None,
                retry: None,
            };
            let fast_result = fast.event(&event, &mut fast_out);
            let whole_result = match serde(data) {
                Some(wire) => whole.dispatch(name, wire, data, &mut whole_out),
                None => whole.event(&event, &mut whole_out),
            };
            fast_log.extend(fast_out.drain(..).map(|e| format!("{e:?}")));
            fast_log.push(format!("{fast_result:?}"));
            whole_log.extend(whole_out.drain(..).map(|e| format!("{e:?}")));
            whole_log.push(format!("{whole_result:?}"));
        }
        [fast_log, whole_log]
    }

    /// Every recorded Messages stream decodes to the same events whether its deltas are taken
    /// as they are or as whole events.
    #[test]
    fn recorded_streams_decode_the_same_as_whole_events() {
        let mut deltas = 0;
        for file in std::fs::read_dir(recorded_streams().join("anthropic")).unwrap() {
            let path = file.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let mut events = Vec::new();
            let mut parser = SseParser::new();
            let mut keep = |e: SseEvent<'_>| events.push((e.event.to_owned(), e.data.into_owned()));
            parser.feed(&bytes, &mut keep);
            parser.finish(&mut keep);
            deltas += events
                .iter()
                .filter(|(_, data)| compact_delta(data).is_some())
                .count();
            let [fast, whole] = decoded_both_ways(&events);
            assert_eq!(fast, whole, "{}", path.display());
        }
        assert!(
            deltas > 40,
            "only {deltas} recorded deltas written the API's way"
        );
    }

    const KEYS: Keys = Keys(&[
        "type",
        "index",
        "delta",
        "message",
        "content_block",
        "usage",
        "error",
        "text",
        "partial_json",
        "thinking",
        "signature",
        "stop_reason",
        "id",
        "model",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "typ\\u0065",
        "other",
    ]);

    /// A usage object (or `null`), its counts sometimes out of `u64`'s reach.
    fn usage() -> BoxedStrategy<String> {
        let count = || {
            prop_oneof![
                4 => one_of(vec!["0", "1200", "null"]),
                1 => one_of(vec!["1.0", "-1", "18446744073709551616"]),
            ]
            .boxed()
        };
        let usage = fields(vec![
            KEYS.field("input_tokens", count()),
            KEYS.field("output_tokens", count()),
            KEYS.field("cache_creation_input_tokens", count()),
            KEYS.field("cache_read_input_tokens", count()),
            KEYS.field("other", KEYS.value()),
        ]);
        prop_oneof![4 => usage, 1 => Just("null".to_owned())].boxed()
    }

    /// `message_start`'s message (or `null`).
    fn message() -> BoxedStrategy<String> {
        let message = fields(vec![
            KEYS.field("id", text()),
            KEYS.field("model", text()),
            KEYS.field("usage", usage()),
            KEYS.field("other", KEYS.value()),
        ]);
        prop_oneof![4 => message, 1 => Just("null".to_owned())].boxed()
    }

    /// The events with objects in them, in the API's member order, their values generated.
    fn start_event() -> impl Strategy<Value = String> {
        let start = (text(), text(), usage(), KEYS.value()).prop_map(|(id, model, usage, other)| {
            format!(
                r#"{{"type":"message_start","message":{{"model":{model},"id":{id},"type":"message","content":{other},"usage":{usage}}}}}"#
            )
        });
        let block = KEYS.value().prop_map(|b| {
            format!(r#"{{"type":"content_block_start","index":0,"content_block":{b}}}"#)
        });
        let plain = (
            one_of(vec!["text", "thinking", "redacted_thinking", "tool_use", "image"]),
            one_of(vec!["text", "thinking", "signature", "data", "id", "name", "type"]),
            text(),
            KEYS.value(),
        )
            .prop_map(|(kind, key, value, other)| {
                format!(
                    r#"{{"type":"content_block_start","index":2,"content_block":{{"type":"{kind}","{key}":{value},"other":{other}}}}}"#
                )
            });
        let tool = (text(), KEYS.value()).prop_map(|(name, input)| {
            format!(
                r#"{{"type":"content_block_start","index":1,"content_block":{{"type":"tool_use","id":"toolu_1","name":{name},"input":{input}}}}}"#
            )
        });
        let delta = (text(), usage()).prop_map(|(reason, usage)| {
            format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":{reason},"stop_sequence":null}},"usage":{usage}}}"#
            )
        });
        mangled(
            prop_oneof![2 => start, 1 => block, 1 => plain, 1 => tool, 1 => delta],
            vec![" ", "\n", ",", "}", "\"", ":", "0"],
        )
    }

    fn event() -> impl Strategy<Value = String> {
        let kind = one_of(vec![
            "\"content_block_delta\"",
            "\"content_block_stop\"",
            "\"ping\"",
            "\"message_stop\"",
            "\"message_delta\"",
            "\"message_start\"",
            "\"content_block_start\"",
        ]);
        let delta = fields(vec![
            KEYS.field(
                "type",
                one_of(vec!["\"text_delta\"", "\"input_json_delta\"", "null"]),
            ),
            KEYS.field("text", text()),
            KEYS.field("partial_json", text()),
            KEYS.field("thinking", text()),
            KEYS.field("signature", text()),
            KEYS.field("stop_reason", text()),
            KEYS.field("other", KEYS.value()),
        ]);
        fields(vec![
            KEYS.field("type", kind),
            KEYS.field("index", one_of(vec!["0", "1", "7", "null"])),
            KEYS.field("delta", delta.boxed()),
            KEYS.field("usage", usage()),
            KEYS.field("message", message()),
            KEYS.field("content_block", KEYS.value()),
            KEYS.field("error", one_of(vec!["null"])),
            KEYS.field("other", KEYS.value()),
        ])
    }

    fn mangled_event() -> impl Strategy<Value = String> {
        mangled(event(), vec![" ", "\n", ",", "}", "\"", ":"])
    }

    #[test]
    fn generated_events_often_take_the_fast_path() {
        let share = share_read(mangled_event(), |data| read(data).is_some());
        assert!(share > 0.2, "only {share} of generated events read");
    }

    #[test]
    fn generated_start_events_often_take_the_fast_path() {
        let with = |has: fn(&WireEvent<'_>) -> bool| {
            share_read(start_event(), |data| read(data).as_ref().is_some_and(has))
        };
        let message = with(|e| e.message.as_ref().is_some_and(|m| m.usage.is_some()));
        let block = with(|e| e.content_block.is_some());
        let usage = with(|e| e.usage.is_some());
        for (what, share) in [("message", message), ("block", block), ("usage", usage)] {
            assert!(
                share > 0.01,
                "only {share} of generated events read a {what}"
            );
        }
    }

    /// Delta events as the API writes them, with other kinds, fields and values mixed in.
    fn compact_event() -> impl Strategy<Value = String> {
        let kind = one_of(vec![
            "text_delta",
            "input_json_delta",
            "thinking_delta",
            "signature_delta",
            "citations_delta",
            "text",
        ]);
        let field = one_of(vec![
            "text",
            "partial_json",
            "thinking",
            "signature",
            "type",
        ]);
        let matching = prop::sample::select(vec![
            ("text_delta", "text"),
            ("input_json_delta", "partial_json"),
            ("thinking_delta", "thinking"),
            ("signature_delta", "signature"),
        ])
        .prop_map(|(kind, field)| (kind.to_owned(), field.to_owned()));
        let pair = prop_oneof![3 => matching, 1 => (kind, field)];
        let value = prop_oneof![4 => text(), 1 => KEYS.value()];
        let index =
            prop_oneof![3 => one_of(vec!["0", "12"]), 1 => one_of(vec!["null", "-1", "1.0"])];
        let event = (index, pair, value).prop_map(|(index, (kind, field), value)| {
            format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{kind}","{field}":{value}}}}}"#
            )
        });
        mangled(event, vec![" ", "\n", ",", "}", "\"", ":", "0"])
    }

    #[test]
    fn compact_deltas_take_the_shortcut() {
        let data = r#"{"type":"content_block_delta","index":3,"delta":{"type":"thinking_delta","thinking":"Let me \"see\""}}  "#;
        let event = compact_delta(data).unwrap().into_event();
        assert_eq!(Some(&event), any_event(data).as_ref());
        assert_eq!(Some(&event), serde(data).as_ref());
        assert_eq!(
            event.delta.unwrap().thinking.as_deref(),
            Some("Let me \"see\"")
        );
        let share = share_read(compact_event(), |data| compact_delta(data).is_some());
        assert!(
            share > 0.05,
            "only {share} of generated deltas took the shortcut"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn compact_deltas_read_as_any_event_reads_them(data in compact_event()) {
            if let Some(compact) = compact_delta(&data).map(Delta::into_event) {
                let general = any_event(&data);
                prop_assert_eq!(Some(&compact), general.as_ref(), "{}", data);
                prop_assert_eq!(Some(compact), serde(&data), "{}", data);
            }
        }

        /// After a text and a tool block start, generated deltas decode as whole events do.
        #[test]
        fn deltas_decode_as_whole_events_do(deltas in prop::collection::vec(compact_event(), 1..8)) {
            let starts = [
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_start","index":12,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#,
            ];
            let events: Vec<(String, String)> = starts
                .iter()
                .map(|data| data.to_string())
                .chain(deltas)
                .map(|data| ("content_block_delta".to_owned(), data))
                .collect();
            let [fast, whole] = decoded_both_ways(&events);
            prop_assert_eq!(fast, whole);
        }

        #[test]
        fn start_events_agree_with_serde(data in start_event()) {
            if let Some(fast) = read(&data) {
                let serde = serde_json::from_str::<WireEvent<'_>>(&data);
                prop_assert!(matches!(&serde, Ok(event) if *event == fast), "{data}: fast {fast:?}, serde {serde:?}");
            }
        }

        #[test]
        fn agrees_with_serde(data in mangled_event()) {
            if let Some(fast) = read(&data) {
                let serde = serde_json::from_str::<WireEvent<'_>>(&data);
                prop_assert!(matches!(&serde, Ok(event) if *event == fast), "{data}: fast {fast:?}, serde {serde:?}");
            }
        }
    }
}
