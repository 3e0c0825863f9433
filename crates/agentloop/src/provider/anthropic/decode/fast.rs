//! A hand-written reader for `content_block_delta` events, nearly every event of a stream:
//! text, tool input, thinking and signature deltas.
//!
//! serde's derived reading dispatches on every member and builds an event struct around each
//! delta; this takes a delta written as the Messages API writes it (its member order, no
//! spacing but the padding before its last brace) in one pass with the shared scanner, only the
//! index and the value read. Anything else (other spacing or order, an extra member, another
//! delta kind, a value that is not a string, an escaped key, invalid JSON) gives `None` and the
//! caller reads the event with serde. Where it answers, it answers what serde would: debug
//! builds and fuzzing check every delta against serde.

use std::borrow::Cow;

use super::DeltaField;
use crate::provider::scan::Scanner;

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
    pub(super) fn into_event(self) -> super::WireEvent<'a> {
        let mut delta = super::WireDelta {
            kind: Some(self.field.kind().into()),
            ..super::WireDelta::default()
        };
        let slot = match self.field {
            DeltaField::Text => &mut delta.text,
            DeltaField::PartialJson => &mut delta.partial_json,
            DeltaField::Thinking => &mut delta.thinking,
            DeltaField::Signature => &mut delta.signature,
            DeltaField::Compaction => &mut delta.content,
        };
        *slot = Some(self.value);
        super::WireEvent {
            kind: "content_block_delta".into(),
            index: Some(self.index),
            delta: Some(delta),
            ..super::WireEvent::default()
        }
    }
}

/// The event's members before the index, as the API writes them.
const HEAD: &str = r#"{"type":"content_block_delta","index":"#;

/// The members between the index and the delta's kind.
const DELTA: &str = r#","delta":{"type":""#;

/// The rest of each streamed delta's members up to its value, with the field the value
/// belongs to.
const KINDS: [(&str, DeltaField); 4] = [
    (r#"text_delta","text":"#, DeltaField::Text),
    (
        r#"input_json_delta","partial_json":"#,
        DeltaField::PartialJson,
    ),
    (r#"thinking_delta","thinking":"#, DeltaField::Thinking),
    (r#"signature_delta","signature":"#, DeltaField::Signature),
];

/// A delta event exactly as the API writes it: the same bytes every time but the index, the
/// value and the padding before the closing braces, so the rest is checked as a whole instead
/// of key by key.
#[inline]
pub(super) fn compact_delta(data: &str) -> Option<Delta<'_>> {
    if !data.starts_with(HEAD) {
        return None;
    }
    let mut s = Scanner::inside_object(data, HEAD.len());
    let index = s.count()?;
    s.literal(DELTA)?;
    let field = KINDS
        .iter()
        .find_map(|&(members, field)| s.literal(members).map(|()| field))?;
    let value = s.string()?;
    // The API pads some events with spaces before their last brace.
    s.expect(b'}')?;
    s.expect(b'}')?;
    s.finish()?;
    Some(Delta {
        index,
        field,
        value,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::super::{AnthropicDecoder, WireEvent};
    use super::*;
    use crate::provider::http::SseDecoder;
    use crate::provider::scan::strategies::{
        Keys, mangled, one_of, recorded_streams, share_read, text,
    };
    use crate::sse::{SseEvent, SseParser};

    fn serde(data: &str) -> Option<WireEvent<'_>> {
        serde_json::from_str(data).ok()
    }

    fn read(data: &str) -> Option<WireEvent<'_>> {
        compact_delta(data).map(Delta::into_event)
    }

    #[test]
    fn reads_deltas_without_copying() {
        let data = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        let delta = compact_delta(data).expect("read");
        assert!(matches!(delta.value, Cow::Borrowed("Hello")));
        assert_eq!((delta.index, delta.field), (0, DeltaField::Text));
        assert_eq!(read(data), serde(data));

        for data in [
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}"#,
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"thinking_delta","thinking":"Let me \"see\" \u00e9\ud83d\ude00"}}  "#,
            r#"{"type":"content_block_delta","index":18446744073709551615,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":""}}"#,
            // Padded as in `thinking-signature-padded.sse`.
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"This"}       }"#,
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"} \n\t\r}\n",
        ] {
            assert!(compact_delta(data).is_some(), "{data}");
            assert_eq!(read(data), serde(data), "{data}");
        }
    }

    #[test]
    fn leaves_everything_else_to_serde() {
        for data in [
            // Other spacing, order or members, another kind, a value that is not a string.
            r#"{"type": "content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"index":0,"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"text":"a","type":"text_delta"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","x":1}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"},"x":1}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"s"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}"#,
            r#"{"type":"content_block_delta","index":null,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","t\u0065xt":"a"}}"#,
            r#"{"type":"ping"}"#,
        ] {
            assert!(compact_delta(data).is_none(), "{data}");
            assert!(serde(data).is_some(), "{data}");
        }
        for invalid in [
            r#"{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":1.0,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":18446744073709551616,"delta":{"type":"text_delta","text":"a"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\x"}}"#,
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\u{1}\"}}",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}} x"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}"#,
        ] {
            assert!(compact_delta(invalid).is_none(), "{invalid}");
            assert!(serde(invalid).is_none(), "{invalid}");
        }
    }

    /// The events and the result a decoder gives for `events` (name, data): as it reads them
    /// (deltas taken by the fast path), and with every event serde reads dispatched whole.
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
            let whole_result = if whole.finished {
                Ok(())
            } else {
                match serde(data) {
                    Some(wire) => whole.dispatch(name, wire, data, &mut whole_out),
                    None => whole.event(&event, &mut whole_out),
                }
            };
            fast_log.extend(fast_out.drain(..).map(|e| format!("{e:?}")));
            fast_log.push(format!("{fast_result:?}"));
            whole_log.extend(whole_out.drain(..).map(|e| format!("{e:?}")));
            whole_log.push(format!("{whole_result:?}"));
        }
        [fast_log, whole_log]
    }

    /// Every recorded Messages stream (both batches: compaction, code execution and
    /// programmatic calls are in the second) decodes to the same events whether its deltas take
    /// the fast path or are read whole by serde, and most recorded deltas take it.
    #[test]
    fn recorded_streams_decode_the_same_as_whole_events() {
        let mut deltas = 0;
        let batch2 = recorded_streams().with_file_name("streams-batch2");
        let files = [recorded_streams(), batch2]
            .into_iter()
            .flat_map(|streams| std::fs::read_dir(streams.join("anthropic")).expect("recordings"));
        for file in files {
            let path = file.expect("a recording").path();
            let bytes = std::fs::read(&path).expect("a recording");
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
            deltas > 100,
            "only {deltas} recorded deltas took the fast path"
        );
    }

    const KEYS: Keys = Keys(&[
        "type",
        "index",
        "delta",
        "text",
        "partial_json",
        "thinking",
        "signature",
        "content",
        "typ\\u0065",
        "other",
    ]);

    /// A string value for a delta: plain, escaped, unicode, invalid escapes, lone surrogates,
    /// control characters, `null`.
    fn value() -> BoxedStrategy<String> {
        prop_oneof![
            4 => text(),
            2 => ".{0,12}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
            1 => KEYS.value(),
        ]
        .boxed()
    }

    /// Delta events, mostly as the API writes them, with other kinds, key orders, spacing and
    /// extra members mixed in.
    fn delta_event() -> impl Strategy<Value = String> {
        let kind = one_of(vec![
            "text_delta",
            "input_json_delta",
            "thinking_delta",
            "signature_delta",
            "citations_delta",
            "compaction_delta",
            "text",
        ]);
        let field = one_of(vec![
            "text",
            "partial_json",
            "thinking",
            "signature",
            "content",
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
        let index =
            prop_oneof![3 => one_of(vec!["0", "12"]), 1 => one_of(vec!["null", "-1", "1.0"])];
        // The API's order, the delta's kind after its value, the index last, an extra member in
        // the delta or the event, the API's padding.
        let layout = prop_oneof![3 => Just(0usize), 2 => Just(5), 3 => 1usize..5];
        let event = (index, pair, value(), layout, KEYS.value()).prop_map(
            |(index, (kind, field), value, layout, extra)| {
                let delta = match layout {
                    1 => format!(r#"{{"{field}":{value},"type":"{kind}"}}"#),
                    3 => format!(r#"{{"type":"{kind}","{field}":{value},"other":{extra}}}"#),
                    _ => format!(r#"{{"type":"{kind}","{field}":{value}}}"#),
                };
                match layout {
                    2 => format!(r#"{{"type":"content_block_delta","delta":{delta},"index":{index}}}"#),
                    4 => format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta},"other":{extra}}}"#),
                    5 => format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}      }}"#),
                    _ => format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
                }
            },
        );
        mangled(event, vec![" ", "\n", ",", "}", "\"", ":", "0", "\\"])
    }

    #[test]
    fn generated_deltas_often_take_the_fast_path() {
        let share = share_read(delta_event(), |data| compact_delta(data).is_some());
        assert!(
            share > 0.05,
            "only {share} of generated deltas took the fast path"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Wherever the fast path answers, serde reads the same event.
        #[test]
        fn agrees_with_serde(data in delta_event()) {
            if let Some(fast) = read(&data) {
                prop_assert_eq!(Some(fast), serde(&data), "{}", data);
            }
        }

        /// After a text, a tool and a thinking block start, generated deltas decode to the
        /// same events (and errors) as whole events read by serde.
        #[test]
        fn deltas_decode_as_whole_events_do(deltas in prop::collection::vec(delta_event(), 1..8)) {
            let starts = [
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_start","index":12,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"compaction","content":null}}"#,
            ];
            let events: Vec<(String, String)> = starts
                .iter()
                .map(|data| data.to_string())
                .chain(deltas)
                .chain([r#"{"type":"message_stop"}"#.to_owned()])
                .map(|data| ("content_block_delta".to_owned(), data))
                .collect();
            let [fast, whole] = decoded_both_ways(&events);
            prop_assert_eq!(fast, whole);
        }
    }
}
