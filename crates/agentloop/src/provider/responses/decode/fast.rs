//! A hand-written reader for the events nearly every Responses stream is made of: the text,
//! refusal, reasoning and argument deltas, with `sequence_number`, `item_id`, `logprobs`,
//! `obfuscation` and other unknown members around them.
//!
//! serde's derived reading dispatches on every member and was the decoder's main cost; this
//! reads the same events in one pass. It answers `None` on anything rarer (an event carrying an
//! item, a response object or an error object, duplicate members, escaped keys, numbers where
//! strings belong, invalid JSON) and the caller falls back to serde. Where it answers, it
//! answers what serde would: debug builds and fuzzing check every event against serde.

use super::WireEvent;
use crate::provider::scan::{Scanner, first};

/// Read one event, or `None` to let serde read it.
pub(super) fn read(data: &str) -> Option<WireEvent<'_>> {
    let mut s = Scanner::new(data);
    let mut kind = None;
    let mut event = WireEvent {
        kind: Default::default(),
        output_index: None,
        summary_index: None,
        delta: None,
        arguments: None,
        item: None,
        response: None,
        error: None,
        code: None,
        message: None,
    };
    let mut seen = [false; 7];
    s.object(|s, key| {
        match key {
            "type" => {
                first(&mut seen[0])?;
                kind = Some(s.string()?);
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
    })?;
    s.finish()?;
    event.kind = kind?;
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
