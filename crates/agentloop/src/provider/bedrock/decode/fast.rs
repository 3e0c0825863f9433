//! A hand-written reader for `contentBlockDelta` payloads, nearly every frame of a stream:
//! text, reasoning and tool-input deltas with their `"p"` padding.
//!
//! serde's derived reading dispatches on every member and was the decoder's main cost; this
//! reads the same payloads in one pass. It answers `None` on anything rarer (a tool result,
//! duplicate members, escaped keys, numbers where strings belong, invalid JSON) and the caller
//! falls back to serde. Where it answers, it answers what serde would: debug builds and fuzzing
//! check every payload against serde.

use super::{Delta, DeltaEvent, ReasoningDelta, ToolUseDelta};
use crate::provider::scan::{Scanner, first, null_only};

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
    use crate::provider::scan::strategies::{members, plain_value};
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
}
