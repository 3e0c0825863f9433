//! A hand-written reader for the chunks nearly every Gemini stream is made of: one candidate
//! whose parts are text or thoughts (with their signatures), usage, model version and response
//! id, with unknown members (`role`, `createTime`, `promptTokensDetails`, ...) around them.
//!
//! serde's derived reading dispatches on every member and reads each part twice (raw, then as
//! text); this reads the same chunks in one pass. It answers `None` on anything rarer (a
//! function call or other part kind, grounding, safety ratings, prompt feedback, an error,
//! duplicate members, escaped keys, numbers where strings belong, invalid JSON) and the caller
//! falls back to serde. Where it answers, it answers what serde would: debug builds and fuzzing
//! check every chunk against serde.

use std::borrow::Cow;

use super::{
    UsageCounts, WireCandidate, WireChunk, WireContent, WirePart, WireTextPart, WireUsage,
};
use crate::provider::scan::{Scanner, first, null_only};

/// Read one chunk, or `None` to let serde read it.
pub(super) fn read(data: &str) -> Option<WireChunk<'_>> {
    let mut s = Scanner::new(data);
    let mut chunk = WireChunk {
        candidates: None,
        usage_metadata: None,
        model_version: None,
        response_id: None,
        error: None,
        prompt_feedback: None,
    };
    let mut seen = [false; 6];
    s.object(|s, key| {
        match key {
            "candidates" => {
                first(&mut seen[0])?;
                chunk.candidates = s.optional(candidates)?;
            }
            "usageMetadata" => {
                first(&mut seen[1])?;
                chunk.usage_metadata = s.optional(usage)?.map(WireUsage);
            }
            "modelVersion" => {
                first(&mut seen[2])?;
                chunk.model_version = s.optional(Scanner::string)?;
            }
            "responseId" => {
                first(&mut seen[3])?;
                chunk.response_id = s.optional(Scanner::string)?;
            }
            "error" => null_only(s, &mut seen[4])?,
            "promptFeedback" => null_only(s, &mut seen[5])?,
            _ => s.skip()?,
        }
        Some(())
    })?;
    s.finish()?;
    Some(chunk)
}

fn candidates<'a>(s: &mut Scanner<'a>) -> Option<Vec<WireCandidate<'a>>> {
    let mut all = Vec::with_capacity(1);
    s.array(|s| {
        all.push(candidate(s)?);
        Some(())
    })?;
    Some(all)
}

fn candidate<'a>(s: &mut Scanner<'a>) -> Option<WireCandidate<'a>> {
    let mut candidate = WireCandidate {
        content: None,
        finish_reason: None,
        finish_message: None,
        index: None,
        grounding_metadata: None,
        safety_ratings: None,
    };
    let mut seen = [false; 6];
    s.object(|s, key| {
        match key {
            "content" => {
                first(&mut seen[0])?;
                candidate.content = s.optional(content)?;
            }
            "finishReason" => {
                first(&mut seen[1])?;
                candidate.finish_reason = s.optional(Scanner::string)?;
            }
            "finishMessage" => {
                first(&mut seen[2])?;
                candidate.finish_message = s.optional(Scanner::string)?.map(Cow::into_owned);
            }
            "index" => {
                first(&mut seen[3])?;
                candidate.index = s.optional_count()?;
            }
            "groundingMetadata" => null_only(s, &mut seen[4])?,
            "safetyRatings" => null_only(s, &mut seen[5])?,
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(candidate)
}

fn content<'a>(s: &mut Scanner<'a>) -> Option<WireContent<'a>> {
    let mut parts = None;
    let mut seen = false;
    s.object(|s, key| {
        if key == "parts" {
            first(&mut seen)?;
            parts = s.optional(|s| {
                let mut all = Vec::with_capacity(1);
                s.array(|s| {
                    all.push(WirePart::Text(text_part(s)?));
                    Some(())
                })?;
                Some(all)
            })?;
        } else {
            s.skip()?;
        }
        Some(())
    })?;
    Some(WireContent { parts })
}

/// A part with no member but `text`, `thought` and `thoughtSignature` (serde's
/// `deny_unknown_fields`); any other is left to serde.
fn text_part<'a>(s: &mut Scanner<'a>) -> Option<WireTextPart<'a>> {
    let mut text = None;
    let mut thought = None;
    let mut thought_signature = None;
    let mut seen = [false; 3];
    s.object(|s, key| {
        match key {
            "text" => {
                first(&mut seen[0])?;
                text = Some(s.string()?);
            }
            "thought" => {
                first(&mut seen[1])?;
                thought = s.optional(|s| match s.peek()? {
                    b't' => s.literal("true").map(|()| true),
                    b'f' => s.literal("false").map(|()| false),
                    _ => None,
                })?;
            }
            "thoughtSignature" => {
                first(&mut seen[2])?;
                thought_signature = s.optional(Scanner::string)?;
            }
            _ => return None,
        }
        Some(())
    })?;
    Some(WireTextPart {
        text: text?,
        thought,
        thought_signature,
    })
}

fn usage(s: &mut Scanner<'_>) -> Option<UsageCounts> {
    let mut counts = UsageCounts::default();
    let mut seen = [false; 6];
    s.object(|s, key| {
        let (slot, at) = match key {
            "promptTokenCount" => (&mut counts.prompt, 0),
            "candidatesTokenCount" => (&mut counts.candidates, 1),
            "thoughtsTokenCount" => (&mut counts.thoughts, 2),
            "toolUsePromptTokenCount" => (&mut counts.tool_use_prompt, 3),
            "cachedContentTokenCount" => (&mut counts.cached, 4),
            "totalTokenCount" => (&mut counts.total, 5),
            _ => return s.skip(),
        };
        first(&mut seen[at])?;
        *slot = s.optional_count()?;
        Some(())
    })?;
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::scan::strategies::{array, members, plain_value};
    use proptest::prelude::*;

    fn serde(data: &str) -> Option<WireChunk<'_>> {
        serde_json::from_str(data).ok()
    }

    #[test]
    fn reads_text_chunks_and_leaves_the_rest_to_serde() {
        let text = r#"{"candidates": [{"content": {"parts": [{"text": " The \"borrow\"","thoughtSignature": "s"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 1200,"candidatesTokenCount": 4,"totalTokenCount": 1616,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1200}],"thoughtsTokenCount": 412},"modelVersion": "gemini-2.5-pro","responseId": "ftnJaMmAMcm-qtsPwvCCoAo"}"#;
        let chunk = read(text).expect("read");
        assert_eq!(Some(&chunk), serde(text).as_ref());
        let finish = r#"{"candidates": [{"content": {"parts": [{"text": ""}]},"finishReason": "STOP","finishMessage": "done","index": 0}],"error": null}"#;
        assert_eq!(read(finish).as_ref(), serde(finish).as_ref());
        assert!(read(finish).is_some());
        for rare in [
            r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}}]}}]}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "a","thought": 1}]}}]}"#,
            r#"{"candidates": [{"groundingMetadata": {}}]}"#,
            r#"{"error": {"code": 503}}"#,
            r#"{"promptFeedback": {"blockReason": "SAFETY"}}"#,
            r#"{"usageMetadata": {"promptTokenCount": "5"}}"#,
            r#"{"responseId": "a", "responseId": "b"}"#,
            r#"[{"candidates": []}]"#,
        ] {
            assert!(read(rare).is_none(), "{rare}");
        }
    }

    fn chunk() -> BoxedStrategy<String> {
        let part = members(
            &["text", "thought", "thoughtSignature", "functionCall"],
            plain_value(),
        );
        let content = members(&["parts", "role"], array(part).boxed());
        let candidate = members(
            &[
                "content",
                "finishReason",
                "finishMessage",
                "index",
                "safetyRatings",
                "other",
            ],
            content,
        );
        let usage = members(
            &[
                "promptTokenCount",
                "thoughtsTokenCount",
                "totalTokenCount",
                "x",
            ],
            plain_value(),
        );
        members(
            &[
                "candidates",
                "usageMetadata",
                "modelVersion",
                "responseId",
                "error",
                "promptFeedback",
            ],
            prop_oneof![array(candidate), usage].boxed(),
        )
    }

    proptest! {
        /// Wherever the reader answers, it answers what serde does.
        #[test]
        fn agrees_with_serde(data in chunk()) {
            if let Some(chunk) = read(&data) {
                let serde = serde(&data);
                prop_assert_eq!(Some(&chunk), serde.as_ref());
            }
        }
    }
}
