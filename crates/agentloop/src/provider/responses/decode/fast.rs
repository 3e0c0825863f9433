//! A hand-written reader for the events nearly every Responses stream is made of: the text,
//! refusal, reasoning and argument deltas, with `sequence_number`, `item_id`, `logprobs`,
//! `obfuscation` and other unknown members around them.
//!
//! serde's derived reading dispatches on every member and was the decoder's main cost; this
//! reads the same events in one pass. It answers `None` on anything rarer (an event carrying an
//! item, a response object or an error object, duplicate members, escaped keys, numbers where
//! strings belong, invalid JSON) and the caller falls back to serde. Where it answers, it
//! answers what serde would: debug builds and fuzzing check every event against serde.
//!
//! A text delta written as the API writes it (the documented member order, or the sorted order
//! many recorded streams have, no spacing) is read value by value: the fixed runs of keys and
//! punctuation between the values are each checked in one comparison ([`TEXT_DELTA`],
//! [`SORTED_TEXT_DELTA`]); any other event, order or spacing is read key by key.

use std::borrow::Cow;

use super::WireEvent;
use crate::provider::scan::{Layout, Scanner, first};

/// The type of the text deltas nearly every stream is made of.
const TEXT_DELTA_TYPE: &str = "response.output_text.delta";

/// A text delta as the Responses API documents and sends it, up to `sequence_number`'s
/// value; the fixed runs between the values follow, each checked in one comparison, and only
/// the values are read.
pub(super) const TEXT_DELTA: Layout =
    Layout::new(r#"{"type":"response.output_text.delta","sequence_number":"#);
const ITEM_ID: Layout = Layout::new(r#","item_id":"#);
const OUTPUT_INDEX: Layout = Layout::new(r#","output_index":"#);
const CONTENT_INDEX: Layout = Layout::new(r#","content_index":"#);
const DELTA: Layout = Layout::new(r#","delta":"#);
const LOGPROBS: Layout = Layout::new(r#","logprobs":[],"obfuscation":"#);

/// A text delta with its members in alphabetical order after `type`, as many recorded streams
/// have them, up to `content_index`'s value.
pub(super) const SORTED_TEXT_DELTA: Layout =
    Layout::new(r#"{"type":"response.output_text.delta","content_index":"#);
const SORTED_SEQUENCE: Layout = Layout::new(r#","sequence_number":"#);

/// Read one event, or `None` to let serde read it.
pub(super) fn read(data: &str) -> Option<WireEvent<'_>> {
    read_layout(data).or_else(|| {
        let mut event = Event::default();
        let mut s = Scanner::new(data);
        s.object(|s, key| event.member(s, key))?;
        s.finish()?;
        event.finish()
    })
}

/// Read a text delta in one of the layouts value by value, or `None` for any other event or
/// any departure from the layout, members after the layout's included (then [`read`] reads it
/// again key by key). The event is built once, where it is returned: it is a large value to
/// move.
#[inline]
fn read_layout(data: &str) -> Option<WireEvent<'_>> {
    let mut s = Scanner::new(data);
    let (output_index, delta) = if s.layout(&TEXT_DELTA).is_some() {
        text_delta(&mut s)?
    } else if s.layout(&SORTED_TEXT_DELTA).is_some() {
        sorted_text_delta(&mut s)?
    } else {
        return None;
    };
    s.expect(b'}')?;
    s.finish()?;
    Some(WireEvent {
        kind: Cow::Borrowed(TEXT_DELTA_TYPE),
        output_index: Some(output_index),
        summary_index: None,
        delta: Some(delta),
        arguments: None,
        item: None,
        response: None,
        error: None,
        code: None,
        message: None,
    })
}

/// The rest of a text delta that began with [`TEXT_DELTA`] (`sequence_number`'s value is
/// next), up to its closing brace: its output index and text. `sequence_number`, `item_id`
/// and `content_index` are only checked (serde skips them); a number other than a plain count
/// is left to serde.
fn text_delta<'a>(s: &mut Scanner<'a>) -> Option<(u64, Cow<'a, str>)> {
    s.count()?;
    s.layout(&ITEM_ID)?;
    s.skip()?;
    s.layout(&OUTPUT_INDEX)?;
    let output_index = s.count()?;
    s.layout(&CONTENT_INDEX)?;
    s.count()?;
    s.layout(&DELTA)?;
    let delta = s.string()?;
    s.layout(&LOGPROBS)?;
    s.skip()?;
    Some((output_index, delta))
}

/// [`text_delta`] for one that began with [`SORTED_TEXT_DELTA`] (`content_index`'s value is
/// next).
fn sorted_text_delta<'a>(s: &mut Scanner<'a>) -> Option<(u64, Cow<'a, str>)> {
    s.count()?;
    s.layout(&DELTA)?;
    let delta = s.string()?;
    s.layout(&ITEM_ID)?;
    s.skip()?;
    s.layout(&LOGPROBS)?;
    s.skip()?;
    s.layout(&OUTPUT_INDEX)?;
    let output_index = s.count()?;
    s.layout(&SORTED_SEQUENCE)?;
    s.count()?;
    Some((output_index, delta))
}

/// The members of an event read so far, each known one at most once (serde rejects a known
/// member given twice).
struct Event<'a> {
    event: WireEvent<'a>,
    kind: Option<Cow<'a, str>>,
    seen: [bool; 7],
}

impl Default for Event<'_> {
    fn default() -> Self {
        Self {
            event: WireEvent {
                kind: Cow::Borrowed(""),
                output_index: None,
                summary_index: None,
                delta: None,
                arguments: None,
                item: None,
                response: None,
                error: None,
                code: None,
                message: None,
            },
            kind: None,
            seen: [false; 7],
        }
    }
}

impl<'a> Event<'a> {
    /// The event, if it had its type.
    fn finish(mut self) -> Option<WireEvent<'a>> {
        self.event.kind = self.kind?;
        Some(self.event)
    }

    fn member(&mut self, s: &mut Scanner<'a>, key: &str) -> Option<()> {
        let (event, seen) = (&mut self.event, &mut self.seen);
        match key {
            "type" => {
                first(&mut seen[0])?;
                self.kind = Some(s.string()?);
            }
            "output_index" => {
                first(&mut seen[1])?;
                event.output_index = s.optional_count()?;
            }
            "summary_index" => {
                first(&mut seen[2])?;
                event.summary_index = s.optional_count()?;
            }
            "delta" => {
                first(&mut seen[3])?;
                event.delta = s.optional(Scanner::string)?;
            }
            "arguments" => {
                first(&mut seen[4])?;
                event.arguments = s.optional(Scanner::string)?;
            }
            "code" => {
                first(&mut seen[5])?;
                event.code = s.optional(Scanner::string)?;
            }
            "message" => {
                first(&mut seen[6])?;
                event.message = s.optional(Scanner::string)?;
            }
            // Raw members are rare and kept by serde.
            "item" | "response" | "error" => return None,
            _ => s.skip()?,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::scan::strategies::{one_of, recorded_streams, share_read, string};
    use crate::sse::{SseEvent, SseParser};
    use proptest::prelude::*;

    fn serde(data: &str) -> Option<WireEvent<'_>> {
        serde_json::from_str(data).ok()
    }

    #[test]
    fn reads_the_hot_events_and_leaves_the_rest_to_serde() {
        let delta = r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" The \"borrow\" checker","logprobs":[],"obfuscation":"kR2xQ7"}"#;
        let event = read(delta).expect("read");
        assert_eq!(Some(&event), serde(delta).as_ref());
        assert_eq!(event.delta.as_deref(), Some(" The \"borrow\" checker"));
        for rare in [
            r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"message"}}"#,
            r#"{"type":"response.completed","response":{"id":"r"}}"#,
            r#"{"type":"error","error":null}"#,
            r#"{"type":"a","type":"b"}"#,
            r#"{"type":"a","delta":5}"#,
            r#"{"typ\u0065":"a"}"#,
            r#"{"delta":"no type"}"#,
            r#"{"type":"a"} x"#,
            r#"["type"]"#,
        ] {
            assert!(read(rare).is_none(), "{rare}");
        }
    }

    proptest! {
        /// Wherever the reader answers, it answers what serde does.
        #[test]
        fn agrees_with_serde(
            members in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("type"), Just("delta"), Just("output_index"), Just("summary_index"),
                        Just("arguments"), Just("code"), Just("message"), Just("logprobs"),
                        Just("sequence_number"), Just("item"),
                    ],
                    prop_oneof![
                        Just("null".to_owned()),
                        Just("[]".to_owned()),
                        Just("-1".to_owned()),
                        Just("1.5".to_owned()),
                        Just("{\"a\":[1,{}]}".to_owned()),
                        (0u64..u64::MAX).prop_map(|n| n.to_string()),
                        ".{0,12}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
                    ],
                ),
                0..6,
            )
        ) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let data = format!("{{{}}}", body.join(","));
            if let Some(event) = read(&data) {
                let serde = serde(&data);
                prop_assert_eq!(Some(&event), serde.as_ref());
            }
        }
    }

    /// A text delta in (or near) one of the layouts: the documented member order or the
    /// sorted one, values and spacing sometimes bent out of them.
    fn delta_event() -> BoxedStrategy<String> {
        let count = || {
            prop_oneof![
                24 => (0u64..1000).prop_map(|n| n.to_string()),
                1 => Just("18446744073709551616".to_owned()),
                1 => Just("1.5".to_owned()),
                1 => Just("-1".to_owned()),
                1 => Just("null".to_owned()),
                1 => Just("01".to_owned()),
            ]
        };
        let text = || {
            prop_oneof![
                12 => "[a-zA-Z é\n\"]{0,10}"
                    .prop_map(|s| serde_json::to_string(&s).expect("a string")),
                4 => string().boxed(),
                1 => Just("null".to_owned()),
                1 => Just("5".to_owned()),
            ]
        };
        let logprobs = one_of(vec!["[]", "[]", "[]", "[{\"token\":\"a\"}]", "null"]);
        let end = one_of(vec![
            "}",
            "}",
            "}",
            "}",
            "}",
            "}",
            "} ",
            ",\"delta\":\"again\"}",
            ",\"x\":1}",
            ",\"item\":{}}",
            "",
        ]);
        (
            any::<bool>(),
            count(),
            text(),
            count(),
            count(),
            text(),
            logprobs,
            text(),
            end,
        )
            .prop_map(|(sorted, sequence, item, output, content, delta, logprobs, obfuscation, end)| {
                if sorted {
                    format!(r#"{{"type":"response.output_text.delta","content_index":{content},"delta":{delta},"item_id":{item},"logprobs":{logprobs},"obfuscation":{obfuscation},"output_index":{output},"sequence_number":{sequence}{end}"#)
                } else {
                    format!(r#"{{"type":"response.output_text.delta","sequence_number":{sequence},"item_id":{item},"output_index":{output},"content_index":{content},"delta":{delta},"logprobs":{logprobs},"obfuscation":{obfuscation}{end}"#)
                }
            })
            .boxed()
    }

    #[test]
    fn reads_text_deltas_in_both_layouts_value_by_value() {
        for hot in [
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" The \"borrow\" checker","logprobs":[],"obfuscation":"kR2xQ7"}"#,
            r#"{"type":"response.output_text.delta","content_index":0,"delta":"é\n","item_id":"msg_1","logprobs":[],"obfuscation":"k","output_index":3,"sequence_number":9}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"","logprobs":[],"obfuscation":"k"} "#,
        ] {
            let event = read_layout(hot).expect(hot);
            assert_eq!(Some(&event), serde(hot).as_ref(), "{hot}");
        }
        for other in [
            // Read key by key (or by serde): another order, spacing, a number serde reads
            // another way, a known member twice.
            r#"{"type":"response.output_text.delta","item_id":"msg_1","sequence_number":4,"output_index":0,"content_index":0,"delta":"a","logprobs":[],"obfuscation":"k"}"#,
            r#"{"type": "response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"a","logprobs":[],"obfuscation":"k"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4.5,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"a","logprobs":[],"obfuscation":"k"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"a","logprobs":[],"obfuscation":"k","delta":"b"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"","logprobs":[],"obfuscation":"k","extra":[1]}"#,
        ] {
            assert!(read_layout(other).is_none(), "{other}");
            assert_eq!(read(other).as_ref(), serde(other).as_ref(), "{other}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Wherever the layouts answer, they answer what serde does.
        #[test]
        fn the_layouts_agree_with_serde(data in delta_event()) {
            if let Some(event) = read_layout(&data) {
                let serde = serde(&data);
                prop_assert_eq!(Some(&event), serde.as_ref(), "{}", data);
            }
        }
    }

    /// The layouts' property test reaches the layouts.
    #[test]
    fn the_layout_test_reaches_the_layouts() {
        let share = share_read(delta_event(), |data| read_layout(data).is_some());
        assert!(
            share > 0.05,
            "only {share} of the generated deltas were read"
        );
    }

    /// Every recorded event the reader answers for is read as serde reads it, and the text
    /// deltas of the recordings take one of the layouts.
    #[test]
    fn recorded_text_deltas_take_the_layouts() {
        let folder = recorded_streams()
            .with_file_name("streams-batch2")
            .join("openai-responses");
        let mut events = Vec::new();
        for file in std::fs::read_dir(folder).expect("recordings") {
            let bytes = std::fs::read(file.expect("a recording").path()).expect("a recording");
            let mut parser = SseParser::new();
            let mut keep = |e: SseEvent<'_>| events.push(e.data.trim().to_owned());
            parser.feed(&bytes, &mut keep);
            parser.finish(&mut keep);
        }
        let mut in_layout = 0;
        for data in &events {
            if let Some(event) = read(data) {
                assert_eq!(Some(&event), serde(data).as_ref(), "{data}");
            }
            in_layout += usize::from(read_layout(data).is_some());
        }
        assert!(
            in_layout >= 600,
            "only {in_layout} of {} recorded events took a layout",
            events.len()
        );
    }
}
