//! A hand-written reader for `contentBlockDelta` payloads, nearly every frame of a stream:
//! text, reasoning and tool-input deltas with their `"p"` padding.
//!
//! serde's derived reading dispatches on every member and was the decoder's main cost; this
//! reads the same payloads in one pass. It answers `None` on anything rarer (a tool result,
//! duplicate members, escaped keys, numbers where strings belong, invalid JSON) and the caller
//! falls back to serde. Where it answers, it answers what serde would: debug builds and fuzzing
//! check every payload against serde.
//!
//! A text delta written as Bedrock writes it (`{"contentBlockIndex":0,"delta":{"text":"..."},
//! "p":"..."}`, that member order, no spacing) is read from the frame's bytes by
//! [`read_text_layout`]: its fixed runs of keys and punctuation are each checked in one
//! comparison, only the text is checked as UTF-8, and the padding is passed over once.

use super::{Delta, DeltaEvent, ReasoningDelta, ToolUseDelta};
use crate::provider::scan::{Scanner, first, null_only, starts_with, string_body};

/// How Bedrock begins a `contentBlockDelta` payload, up to the block index.
pub(super) const INDEX: &[u8] = br#"{"contentBlockIndex":"#;
/// Between the block index and a text delta's text.
const TEXT: &[u8] = br#","delta":{"text":""#;
/// Between the text and the padding's value.
const PADDING: &[u8] = br#"},"p":""#;

/// Read a text delta written in Bedrock's layout from the payload's bytes, or `None` to let
/// [`read`] (or serde) read it. The payload need not be known to be UTF-8: the text is
/// checked here, and the padding must be ASCII (serde would not look at it).
#[inline]
pub(super) fn read_text_layout(payload: &[u8]) -> Option<DeltaEvent<'_>> {
    if !starts_with(payload, INDEX) {
        return None;
    }
    let (index, at) = count(payload, INDEX.len())?;
    if !starts_with(payload.get(at..)?, TEXT) {
        return None;
    }
    let (text, at) = string_body(payload, at + TEXT.len())?;
    let rest = payload.get(at..)?;
    if rest != b"}}" {
        let padding = rest.strip_prefix(PADDING)?.strip_suffix(b"\"}")?;
        // Plain ASCII without escapes: serde skips it as a string without decoding it.
        if !padding
            .iter()
            .all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
        {
            return None;
        }
    }
    Some(DeltaEvent {
        index,
        delta: Some(Delta {
            text: Some(text),
            tool_use: None,
            reasoning: None,
            tool_result: None,
        }),
    })
}

/// A plain non-negative integer at `at` that fits in a `u64`, as serde reads one, and the
/// index after it.
fn count(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let digits = bytes.get(at..)?.iter().take_while(|b| b.is_ascii_digit());
    let mut value: u64 = 0;
    let mut len = 0;
    for &b in digits {
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        len += 1;
    }
    if len == 0 || (len > 1 && bytes.get(at) == Some(&b'0')) {
        return None;
    }
    Some((value, at + len))
}

/// Read one `contentBlockDelta` payload (the frame's bytes as text), or `None` to let serde
/// read it.
pub(super) fn read(data: &str) -> Option<DeltaEvent<'_>> {
    let mut s = Scanner::new(data);
    let mut index = None;
    let mut delta = None;
    let mut seen = [false; 2];
    s.object(|s, key| {
        match key {
            "contentBlockIndex" => {
                first(&mut seen[0])?;
                index = Some(s.count()?);
            }
            "delta" => {
                first(&mut seen[1])?;
                delta = s.optional(read_delta)?;
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    s.finish()?;
    Some(DeltaEvent {
        index: index.unwrap_or_default(),
        delta,
    })
}

fn read_delta<'a>(s: &mut Scanner<'a>) -> Option<Delta<'a>> {
    let mut delta = Delta {
        text: None,
        tool_use: None,
        reasoning: None,
        tool_result: None,
    };
    let mut seen = [false; 4];
    s.object(|s, key| {
        match key {
            "text" => {
                first(&mut seen[0])?;
                delta.text = s.optional(Scanner::string)?;
            }
            "toolUse" => {
                first(&mut seen[1])?;
                delta.tool_use = s.optional(|s| {
                    let mut input = None;
                    let mut seen = false;
                    s.object(|s, key| {
                        if key == "input" {
                            first(&mut seen)?;
                            input = s.optional(Scanner::string)?;
                            Some(())
                        } else {
                            s.skip()
                        }
                    })?;
                    Some(ToolUseDelta { input })
                })?;
            }
            "reasoningContent" => {
                first(&mut seen[2])?;
                delta.reasoning = s.optional(read_reasoning)?;
            }
            "toolResult" => null_only(s, &mut seen[3])?,
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(delta)
}

fn read_reasoning<'a>(s: &mut Scanner<'a>) -> Option<ReasoningDelta<'a>> {
    let mut reasoning = ReasoningDelta {
        text: None,
        signature: None,
        redacted: None,
    };
    let mut seen = [false; 3];
    s.object(|s, key| {
        let (slot, at) = match key {
            "text" => (&mut reasoning.text, 0),
            "signature" => (&mut reasoning.signature, 1),
            "redactedContent" => (&mut reasoning.redacted, 2),
            _ => return s.skip(),
        };
        first(&mut seen[at])?;
        *slot = s.optional(Scanner::string)?;
        Some(())
    })?;
    Some(reasoning)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::bedrock::eventstream;
    use crate::provider::scan::strategies::{
        members, one_of, plain_value, recorded_streams, share_read, string,
    };
    use proptest::prelude::*;

    fn serde(data: &str) -> Option<DeltaEvent<'_>> {
        serde_json::from_str(data).ok()
    }

    #[test]
    fn reads_the_hot_deltas_and_leaves_the_rest_to_serde() {
        for hot in [
            r#"{"contentBlockIndex":0,"delta":{"text":" The \"borrow\""},"p":"abcdefg"}"#,
            r#"{"contentBlockIndex":3,"delta":{"toolUse":{"input":"{\"a\":"}},"p":"ab"}"#,
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Hm","signature":null}}}"#,
            r#"{"delta":null}"#,
        ] {
            let event = read(hot).expect(hot);
            assert_eq!(Some(&event), serde(hot).as_ref(), "{hot}");
        }
        for rare in [
            r#"{"contentBlockIndex":0,"delta":{"toolResult":[{"text":"x"}]}}"#,
            r#"{"contentBlockIndex":-1,"delta":{"text":"x"}}"#,
            r#"{"contentBlockIndex":null,"delta":{"text":"x"}}"#,
            r#"{"contentBlockIndex":0,"delta":{"text":5}}"#,
            r#"{"contentBlockIndex":0,"contentBlockIndex":1}"#,
            r#"{"contentBlockIndex":0} trailing"#,
        ] {
            assert!(read(rare).is_none(), "{rare}");
        }
        // Bytes that are not UTF-8 never reach the reader; serde reads them (it skips an
        // unknown member's bytes unchecked).
        let payload = b"{\"p\":\"\xff\"}";
        assert!(serde_json::from_slice::<DeltaEvent<'_>>(payload).is_ok());
        let mut out = std::collections::VecDeque::new();
        super::super::BedrockDecoder::new()
            .event("contentBlockDelta", payload, &mut out)
            .expect("read by serde");
    }

    fn payload() -> BoxedStrategy<String> {
        let inner = members(
            &["input", "text", "signature", "redactedContent", "x"],
            plain_value(),
        );
        let delta = members(
            &["text", "toolUse", "reasoningContent", "toolResult", "p"],
            inner,
        );
        members(&["contentBlockIndex", "delta", "p"], delta)
    }

    proptest! {
        /// Wherever the reader answers, it answers what serde does.
        #[test]
        fn agrees_with_serde(data in payload()) {
            if let Some(event) = read(&data) {
                let serde = serde(&data);
                prop_assert_eq!(Some(&event), serde.as_ref());
            }
        }
    }

    /// A text delta in Bedrock's layout, sometimes bent out of it (spacing, another member
    /// order, a number serde reads another way, padding that is not plain, trailing bytes).
    fn text_layout() -> BoxedStrategy<String> {
        (
            one_of(vec![
                "0",
                "3",
                "7",
                "12",
                "00",
                "-1",
                "1.0",
                "18446744073709551615",
                "18446744073709551616",
            ]),
            string(),
            one_of(vec![
                r#"}"#,
                r#","p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345"}"#,
                r#","p":"abc"}"#,
                r#","p":"abcdefg"}"#,
                r#","p":"abcdefghijklmnopqrstuvwxyzABCD"}"#,
                r#","p":"a"}"#,
                r#","p":""}"#,
                r#","p":"a\"b"}"#,
                r#","p":"é"}"#,
                r#","p":5}"#,
                r#","p":"a","p":"b"}"#,
                r#","x":1}"#,
                r#", "p":"a"}"#,
                r#","p":"a"} "#,
                r#","p":"a"}}"#,
                r#""#,
            ]),
            // The layout's own shapes weigh more, so that a good share of the cases reach it.
            one_of(vec![
                "",
                "",
                "",
                "",
                r#","text":"again""#,
                r#","toolUse":null"#,
            ]),
        )
            .prop_map(|(index, text, end, more)| {
                format!(r#"{{"contentBlockIndex":{index},"delta":{{"text":{text}{more}}}{end}"#)
            })
            .boxed()
    }

    fn serde_slice(data: &[u8]) -> Option<DeltaEvent<'_>> {
        serde_json::from_slice(data).ok()
    }

    #[test]
    fn reads_text_deltas_in_bedrock_layout_from_bytes() {
        for hot in [
            r#"{"contentBlockIndex":0,"delta":{"text":" The borrow"},"p":"abcdefg"}"#,
            r#"{"contentBlockIndex":2,"delta":{"text":"a\n\"b\" \u00e9"},"p":"ab"}"#,
            r#"{"contentBlockIndex":0,"delta":{"text":""}}"#,
            r#"{"contentBlockIndex":18446744073709551615,"delta":{"text":"é"},"p":""}"#,
        ] {
            let event = read_text_layout(hot.as_bytes()).expect(hot);
            assert_eq!(Some(&event), serde(hot).as_ref(), "{hot}");
        }
        for rare in [
            &br#"{"contentBlockIndex":0,"delta":{"text":"\xff"},"p":"a"}"#[..],
            br#"{"contentBlockIndex":0,"delta":{"text":"a"},"p":"\xff"}"#,
            br#"{"contentBlockIndex":0,"delta":{"text":"a"},"p":"a"} "#,
            br#"{"contentBlockIndex":01,"delta":{"text":"a"}}"#,
            br#"{"contentBlockIndex":0,"delta":{"text":"a","text":"b"}}"#,
            br#"{"contentBlockIndex":0,"delta":{"text":"\ud800"}}"#,
            br#"{"contentBlockIndex": 0,"delta":{"text":"a"}}"#,
        ] {
            assert!(read_text_layout(rare).is_none(), "{rare:?}");
        }
        // The headers compared whole are the ones Bedrock sends (and the testkit writes).
        let frame = eventstream::event("contentBlockDelta", b"{}");
        let (frame, _) = eventstream::parse(&frame).unwrap().unwrap();
        assert_eq!(frame.headers(), super::super::DELTA_HEADERS);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Wherever the layout reader answers, it answers what serde does with the bytes.
        #[test]
        fn the_text_layout_agrees_with_serde(data in text_layout()) {
            if let Some(event) = read_text_layout(data.as_bytes()) {
                let serde = serde_slice(data.as_bytes());
                prop_assert_eq!(Some(&event), serde.as_ref(), "{}", data);
            }
        }
    }

    /// The layout's property test reaches the layout.
    #[test]
    fn the_text_layout_test_reaches_the_layout() {
        let share = share_read(text_layout(), |data| {
            read_text_layout(data.as_bytes()).is_some()
        });
        assert!(
            share > 0.05,
            "only {share} of the generated deltas were read"
        );
    }

    /// The recorded streams' delta frames: every one the layout reader answers for is read as
    /// serde reads it, and their text deltas take the layout.
    #[test]
    fn recorded_text_deltas_take_the_layout() {
        let folder = recorded_streams()
            .with_file_name("streams-batch2")
            .join("bedrock");
        let (mut deltas, mut in_layout) = (0, 0);
        for file in std::fs::read_dir(folder).expect("recordings") {
            let path = file.expect("a recording").path();
            if path.extension().is_none_or(|e| e != "eventstream") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("a recording");
            let mut rest = &bytes[..];
            while let Some((frame, len)) = eventstream::parse(rest).expect("a frame") {
                rest = &rest[len..];
                if frame.headers() != super::super::DELTA_HEADERS {
                    continue;
                }
                deltas += 1;
                if let Some(event) = read_text_layout(frame.payload) {
                    assert_eq!(Some(&event), serde_slice(frame.payload).as_ref());
                    in_layout += 1;
                }
            }
        }
        assert!(
            in_layout >= 10 && deltas >= in_layout,
            "only {in_layout} of {deltas} recorded delta frames took the layout"
        );
    }
}
