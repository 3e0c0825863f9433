//! `streamGenerateContent?alt=sse` chunks → normalized [`StreamEvent`]s.
//!
//! Every SSE event is a whole `GenerateContentResponse` (Gemini API reference,
//! "models.streamGenerateContent"): the first candidate's `content.parts` carry this chunk's
//! text, `thought` summaries, `functionCall`s and tool parts; `finishReason` may come more than
//! once (code execution sends an intermediate `STOP`), so the message ends with the body, not
//! with the first finish reason. Text chunks, most of a stream, are read in one pass by
//! `fast`; other chunks of the documented shape by borrowed structs; anything else through a
//! [`Value`]: Google adds fields often, and a lenient reader must not fail on one it has not
//! seen.
//!
//! Quirks handled here, each seen in a recording (`shared/conformance/streams-batch2/gemini`):
//! - `thoughtSignature` sits on whatever part it signs (a thought, the first answer text, the
//!   first function call, an empty text part). It becomes a [`StreamEvent::ThinkingSignature`]
//!   right before that part's content, so the accumulator keeps it on a reasoning block just
//!   ahead of the part, where the request builder puts it back.
//! - Function calls without an `id` (before Gemini 3) get a stable synthesized one
//!   ([`SYNTHETIC_ID_PREFIX`]), which the request builder leaves out again.
//! - Vertex AI streams arguments as `partialArgs` (`jsonPath` + typed value, strings in
//!   pieces) under `willContinue`, closed by an empty `functionCall` or by the next part.
//! - `executableCode`, `codeExecutionResult`, `toolCall`/`toolResponse` and any other part
//!   kind come out whole as native blocks; a candidate's non-empty `groundingMetadata` and an
//!   abnormal finish's `finishMessage` (e.g. `MALFORMED_FUNCTION_CALL`) come out as native
//!   blocks at the end.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::message::{StopReason, Usage};
use crate::provider::http::{SseDecoder, excerpt};
use crate::provider::scan;
use crate::sse::SseEvent;
use crate::stream::StreamEvent;

mod fast;

/// Tool-call ids this crate made up for Gemini calls that came without one. The request
/// builder leaves such ids out, so Gemini sees the calls as it sent them.
pub const SYNTHETIC_ID_PREFIX: &str = "gemini_call_";

/// The Gemini stream decoder (one per response).
#[derive(Debug, Default)]
pub struct GeminiDecoder {
    started: bool,
    response_id: Option<String>,
    calls: usize,
    open_call: Option<StreamedCall>,
    finish: Option<Finish>,
    grounding: Option<Value>,
    usage: Option<Usage>,
    ended: bool,
}

/// A call whose arguments Vertex streams as `partialArgs`.
#[derive(Debug)]
struct StreamedCall {
    index: usize,
    args: Value,
}

#[derive(Debug)]
struct Finish {
    reason: String,
    message: Option<String>,
    /// Why a safety stop happened (`safetyRatings`, with `blocked: true` on the culprit).
    ratings: Option<Value>,
}

impl GeminiDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in one whole `GenerateContentResponse` (a stream chunk, or the body of a
    /// non-streamed call).
    pub fn chunk(&mut self, chunk: &Value, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        let Some(object) = chunk.as_object() else {
            // `streamGenerateContent` without `alt=sse` answers one JSON array of chunks.
            if let Some(items) = chunk.as_array() {
                for item in items {
                    self.chunk(item, out)?;
                }
            }
            return Ok(());
        };
        if let Some(error) = object.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        self.start(text("responseId"), text("modelVersion"), out);
        if let Some(candidate) = first_candidate(object) {
            if let Some(parts) = candidate
                .pointer("/content/parts")
                .and_then(Value::as_array)
            {
                for part in parts {
                    self.part(part, out);
                }
            }
            if let Some(grounding) = candidate.get("groundingMetadata")
                && grounding.as_object().is_some_and(|g| !g.is_empty())
            {
                self.grounding = Some(grounding.clone());
            }
            if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
                self.finish = Some(Finish {
                    reason: reason.to_owned(),
                    message: candidate
                        .get("finishMessage")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    ratings: candidate.get("safetyRatings").cloned(),
                });
            }
        }
        if let Some(reason) = object
            .get("promptFeedback")
            .and_then(|f| f.get("blockReason"))
            .and_then(Value::as_str)
        {
            // The prompt itself was blocked: there is no candidate to finish.
            self.finish.get_or_insert(Finish {
                reason: "PROMPT_BLOCKED".to_owned(),
                message: Some(format!("the prompt was blocked ({reason})")),
                ratings: object
                    .get("promptFeedback")
                    .and_then(|f| f.get("safetyRatings"))
                    .cloned(),
            });
        }
        if let Some(metadata) = object.get("usageMetadata") {
            let count = |key: &str| metadata.get(key).and_then(Value::as_u64);
            self.usage(
                UsageCounts {
                    prompt: count("promptTokenCount"),
                    candidates: count("candidatesTokenCount"),
                    thoughts: count("thoughtsTokenCount"),
                    tool_use_prompt: count("toolUsePromptTokenCount"),
                    cached: count("cachedContentTokenCount"),
                    total: count("totalTokenCount"),
                },
                out,
            );
        }
        Ok(())
    }

    /// The first chunk starts the message.
    fn start(
        &mut self,
        response_id: Option<&str>,
        model: Option<&str>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        if self.started {
            return;
        }
        self.started = true;
        self.response_id = response_id.map(str::to_owned);
        out.push_back(StreamEvent::MessageStart {
            id: response_id.unwrap_or_default().to_owned(),
            model: model.unwrap_or_default().to_owned(),
        });
    }

    fn usage(&mut self, counts: UsageCounts, out: &mut VecDeque<StreamEvent>) {
        let Some(usage) = counts.usage() else {
            return;
        };
        if self.usage != Some(usage) {
            out.push_back(StreamEvent::Usage { usage });
        }
        self.usage = Some(usage);
    }

    /// A text part: answer text, or a thought summary when `thought`.
    fn text_part(
        &mut self,
        text: &str,
        thought: bool,
        signature: Option<&str>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        self.close_call(out);
        let signature = signature.filter(|s| !s.is_empty());
        if thought {
            if !text.is_empty() {
                out.push_back(StreamEvent::ThinkingDelta {
                    text: text.to_owned(),
                });
            }
            push_signature(signature, out);
        } else {
            push_signature(signature, out);
            if !text.is_empty() {
                out.push_back(StreamEvent::TextDelta {
                    text: text.to_owned(),
                });
            }
        }
    }

    /// The documented chunk shape, read into borrowed structs.
    fn typed(&mut self, chunk: &WireChunk<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if let Some(error) = chunk.error {
            let error: Value = serde_json::from_str(error.get()).unwrap_or(Value::Null);
            return Err(stream_error(&error));
        }
        self.start(
            chunk.response_id.as_deref(),
            chunk.model_version.as_deref(),
            out,
        );
        let candidate = chunk
            .candidates
            .iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        if let Some(candidate) = candidate {
            for part in candidate
                .content
                .iter()
                .flat_map(|c| c.parts.iter().flatten())
            {
                match part {
                    WirePart::Text(part) => self.text_part(
                        &part.text,
                        part.thought == Some(true),
                        part.thought_signature.as_deref(),
                        out,
                    ),
                    // Calls and the rarer kinds go through a Value; a `RawValue` is valid JSON.
                    WirePart::Other(raw) => {
                        let part: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                        self.part(&part, out);
                    }
                }
            }
            if let Some(raw) = candidate.grounding_metadata {
                let grounding: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
                if grounding.as_object().is_some_and(|g| !g.is_empty()) {
                    self.grounding = Some(grounding);
                }
            }
            if let Some(reason) = &candidate.finish_reason {
                self.finish = Some(Finish {
                    reason: reason.clone().into_owned(),
                    message: candidate.finish_message.clone(),
                    ratings: candidate
                        .safety_ratings
                        .and_then(|raw| serde_json::from_str(raw.get()).ok()),
                });
            }
        }
        if let Some(raw) = chunk.prompt_feedback {
            let feedback: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            if let Some(reason) = feedback.get("blockReason").and_then(Value::as_str) {
                self.finish.get_or_insert(Finish {
                    reason: "PROMPT_BLOCKED".to_owned(),
                    message: Some(format!("the prompt was blocked ({reason})")),
                    ratings: feedback.get("safetyRatings").cloned(),
                });
            }
        }
        if let Some(usage) = &chunk.usage_metadata {
            self.usage(usage.counts(), out);
        }
        Ok(())
    }

    fn part(&mut self, part: &Value, out: &mut VecDeque<StreamEvent>) {
        let Some(part) = part.as_object() else {
            return;
        };
        let signature = part
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(call) = part.get("functionCall") {
            self.function_call(call, signature, out);
            return;
        }
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            self.text_part(text, thought, signature, out);
            return;
        }
        self.close_call(out);
        let only_metadata = part
            .keys()
            .all(|key| matches!(key.as_str(), "thoughtSignature" | "thought"));
        if only_metadata {
            push_signature(signature, out);
            return;
        }
        // Code execution, server tool parts, inline data: kept whole (with their signature)
        // so they go back to Gemini exactly as they came.
        out.push_back(StreamEvent::NativeBlock {
            provider: PROVIDER_NAME.to_owned(),
            value: Value::Object(part.clone()),
        });
    }

    fn function_call(
        &mut self,
        call: &Value,
        signature: Option<&str>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let will_continue = call.get("willContinue").and_then(Value::as_bool) == Some(true);
        let Some(name) = name else {
            // A continuation of the call whose arguments are streaming (or a stray piece).
            if let Some(open) = &mut self.open_call {
                apply_partial_args(&mut open.args, call.get("partialArgs"));
                if !will_continue {
                    self.close_call(out);
                }
            }
            return;
        };
        self.close_call(out);
        push_signature(signature, out);
        let index = self.calls;
        self.calls += 1;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| synthetic_id(self.response_id.as_deref(), index));
        out.push_back(StreamEvent::ToolCallStart {
            index,
            id,
            name: name.to_owned(),
        });
        let mut args = match call.get("args") {
            Some(Value::Object(args)) => Value::Object(args.clone()),
            // Not Gemini's shape, but text is kept as the call's raw arguments (the run loop
            // answers them as invalid) rather than dropped.
            Some(Value::String(raw)) if !will_continue => {
                out.push_back(StreamEvent::ToolCallDelta {
                    index,
                    arguments: raw.clone(),
                });
                out.push_back(StreamEvent::ToolCallEnd { index });
                return;
            }
            _ => Value::Object(Map::new()),
        };
        apply_partial_args(&mut args, call.get("partialArgs"));
        if will_continue {
            self.open_call = Some(StreamedCall { index, args });
        } else {
            finish_call(index, &args, out);
        }
    }

    fn close_call(&mut self, out: &mut VecDeque<StreamEvent>) {
        if let Some(open) = self.open_call.take() {
            finish_call(open.index, &open.args, out);
        }
    }

    fn stop_reason(&self) -> StopReason {
        let Some(finish) = &self.finish else {
            return StopReason::EndTurn;
        };
        match finish.reason.as_str() {
            // Gemini says STOP after function calls too.
            "STOP" | "FINISH_REASON_UNSPECIFIED" if self.calls > 0 => StopReason::ToolUse,
            "STOP" | "FINISH_REASON_UNSPECIFIED" => StopReason::EndTurn,
            "MAX_TOKENS" => StopReason::MaxTokens,
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
            | "PROMPT_BLOCKED" => StopReason::Refusal,
            other => StopReason::Other(other.to_ascii_lowercase()),
        }
    }
}

impl SseDecoder for GeminiDecoder {
    fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        // Chunks of the documented shape are read into borrowed structs; anything else (a
        // field of another type, an array of chunks) goes through a `Value`, which reads every
        // shape the same way, only slower.
        let mut chunk = WireChunk::default();
        if fast::read_into(data, &mut chunk).is_some() {
            scan::check(data, &chunk);
            return self.typed(&chunk, out);
        }
        if let Ok(chunk) = serde_json::from_str::<WireChunk<'_>>(data) {
            return self.typed(&chunk, out);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            Error::parse(
                "Gemini stream chunk",
                format!("{e}; the chunk began: {}", excerpt(data.as_bytes())),
            )
        })?;
        self.chunk(&chunk, out)
    }

    fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        self.close_call(out);
        let Some(finish) = &self.finish else {
            return Err(Error::IncompleteStream {
                message: "the Gemini stream ended before a candidate had a finishReason; the answer may be cut short, so send the request again".to_owned(),
            });
        };
        self.ended = true;
        if let Some(grounding) = self.grounding.take() {
            let mut value = Map::new();
            value.insert("groundingMetadata".into(), grounding);
            out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: Value::Object(value),
            });
        }
        let abnormal = !matches!(
            finish.reason.as_str(),
            "STOP" | "MAX_TOKENS" | "FINISH_REASON_UNSPECIFIED"
        );
        if abnormal {
            let mut value = Map::new();
            value.insert("finishReason".into(), finish.reason.clone().into());
            if let Some(message) = &finish.message {
                value.insert("finishMessage".into(), message.clone().into());
            }
            if let Some(ratings) = &finish.ratings {
                value.insert("safetyRatings".into(), ratings.clone());
            }
            out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: Value::Object(value),
            });
        }
        out.push_back(StreamEvent::MessageStop {
            stop_reason: self.stop_reason(),
        });
        Ok(())
    }
}

fn push_signature(signature: Option<&str>, out: &mut VecDeque<StreamEvent>) {
    if let Some(signature) = signature {
        out.push_back(StreamEvent::ThinkingSignature {
            signature: signature.to_owned(),
        });
    }
}

fn finish_call(index: usize, args: &Value, out: &mut VecDeque<StreamEvent>) {
    out.push_back(StreamEvent::ToolCallDelta {
        index,
        arguments: args.to_string(),
    });
    out.push_back(StreamEvent::ToolCallEnd { index });
}

/// The candidate this crate reads: index 0 (a missing index means 0; several candidates are
/// only sent when `candidateCount` asks for them, which requests from this crate never do).
fn first_candidate(object: &Map<String, Value>) -> Option<&Value> {
    object
        .get("candidates")?
        .as_array()?
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

/// A stable id for the `index`-th call of a response: the same chunks always give the same
/// ids, and the response id keeps them apart across a conversation's turns.
fn synthetic_id(response_id: Option<&str>, index: usize) -> String {
    match response_id {
        Some(id) if !id.is_empty() => {
            let clean: String = id
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            format!("{SYNTHETIC_ID_PREFIX}{clean}_{index}")
        }
        _ => format!("{SYNTHETIC_ID_PREFIX}{index}"),
    }
}

/// The counts of a `usageMetadata`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageCounts {
    #[serde(default, rename = "promptTokenCount")]
    prompt: Option<u64>,
    #[serde(default, rename = "candidatesTokenCount")]
    candidates: Option<u64>,
    #[serde(default, rename = "thoughtsTokenCount")]
    thoughts: Option<u64>,
    #[serde(default, rename = "toolUsePromptTokenCount")]
    tool_use_prompt: Option<u64>,
    #[serde(default, rename = "cachedContentTokenCount")]
    cached: Option<u64>,
    #[serde(default, rename = "totalTokenCount")]
    total: Option<u64>,
}

impl UsageCounts {
    /// [`Usage`]; `None` when no count is present (Vertex sends `trafficType` alone on
    /// intermediate chunks, which must not reset the counts).
    ///
    /// Thought tokens are billed as output and tool-use prompt tokens as input, so they are
    /// added there; `promptTokenCount` already includes the cached tokens, like OpenAI's
    /// `prompt_tokens`.
    fn usage(self) -> Option<Usage> {
        let all = [
            self.prompt,
            self.candidates,
            self.thoughts,
            self.tool_use_prompt,
            self.cached,
            self.total,
        ];
        if all.iter().all(Option::is_none) {
            return None;
        }
        Some(Usage {
            input_tokens: self.prompt.unwrap_or(0) + self.tool_use_prompt.unwrap_or(0),
            output_tokens: self.candidates.unwrap_or(0) + self.thoughts.unwrap_or(0),
            cache_read_tokens: self.cached.unwrap_or(0),
            cache_write_tokens: 0,
            reasoning_tokens: self.thoughts.unwrap_or(0),
        })
    }
}

/// The chunk members the decoder reads; the rare or nested ones stay raw until used.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<WireCandidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default, borrow)]
    model_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prompt_feedback: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCandidate<'a> {
    #[serde(default, borrow)]
    content: Option<WireContent<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    finish_message: Option<String>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    grounding_metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    safety_ratings: Option<&'a RawValue>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct WireContent<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<WirePart<'a>>>,
}

/// A part: plain text or a thought, or any other kind kept raw for the `Value` reader.
#[derive(Debug)]
enum WirePart<'a> {
    Text(WireTextPart<'a>),
    Other(&'a RawValue),
}

impl<'de: 'a, 'a> Deserialize<'de> for WirePart<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(deserializer)?;
        Ok(match serde_json::from_str::<WireTextPart<'de>>(raw.get()) {
            Ok(part) => WirePart::Text(part),
            Err(_) => WirePart::Other(raw),
        })
    }
}

/// A plain text or thought part; any other member makes it a part for the `Value` reader.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WireTextPart<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    thought_signature: Option<Cow<'a, str>>,
}

/// Raw members compare by their text (what [`fast::read`] is checked against serde with).
fn raw_text(raw: Option<&RawValue>) -> Option<&str> {
    raw.map(RawValue::get)
}

impl PartialEq for WireChunk<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.candidates == other.candidates
            && self.usage_metadata == other.usage_metadata
            && self.model_version == other.model_version
            && self.response_id == other.response_id
            && raw_text(self.error) == raw_text(other.error)
            && raw_text(self.prompt_feedback) == raw_text(other.prompt_feedback)
    }
}

impl PartialEq for WireCandidate<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.content == other.content
            && self.finish_reason == other.finish_reason
            && self.finish_message == other.finish_message
            && self.index == other.index
            && raw_text(self.grounding_metadata) == raw_text(other.grounding_metadata)
            && raw_text(self.safety_ratings) == raw_text(other.safety_ratings)
    }
}

impl PartialEq for WirePart<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (WirePart::Text(a), WirePart::Text(b)) => a == b,
            (WirePart::Other(a), WirePart::Other(b)) => a.get() == b.get(),
            _ => false,
        }
    }
}

/// `usageMetadata`, read through [`UsageCounts`] (its other members are skipped).
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(transparent)]
struct WireUsage(UsageCounts);

impl WireUsage {
    fn counts(&self) -> UsageCounts {
        self.0
    }
}

/// A mid-stream (or whole-body) `{"error": {"code", "message", "status"}}`. `UNAVAILABLE`
/// (503) is the in-stream twin of the HTTP 503 overload and typed as one.
pub(super) fn stream_error(error: &Value) -> Error {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let error_type = error
        .get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| error.get("code").map(|c| c.to_string()));
    let code = error.get("code").and_then(Value::as_u64);
    if error_type.as_deref() == Some("UNAVAILABLE") || code == Some(503) {
        return Error::Overloaded {
            provider: PROVIDER_NAME.to_owned(),
            message,
        };
    }
    Error::Stream {
        provider: PROVIDER_NAME.to_owned(),
        error_type,
        message,
    }
}

/// Apply Vertex's `partialArgs` (`[{jsonPath, stringValue|numberValue|boolValue|nullValue,
/// willContinue}]`) to `args`. A string piece for a path that already holds a string extends
/// it: long strings arrive in pieces.
fn apply_partial_args(args: &mut Value, partial: Option<&Value>) {
    let Some(pieces) = partial.and_then(Value::as_array) else {
        return;
    };
    for piece in pieces {
        let Some(path) = piece.get("jsonPath").and_then(Value::as_str) else {
            continue;
        };
        let Some(segments) = parse_path(path) else {
            continue;
        };
        let value = if let Some(text) = piece.get("stringValue").and_then(Value::as_str) {
            Value::String(text.to_owned())
        } else if let Some(number) = piece.get("numberValue").filter(|v| v.is_number()) {
            number.clone()
        } else if let Some(flag) = piece.get("boolValue").and_then(Value::as_bool) {
            Value::Bool(flag)
        } else if piece.get("nullValue").is_some() {
            Value::Null
        } else {
            continue;
        };
        let Some(slot) = slot(args, &segments) else {
            continue;
        };
        match (slot, value) {
            (Value::String(existing), Value::String(more)) => existing.push_str(&more),
            (slot, value) => *slot = value,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// `$.a.b[3]['c d']` → segments; `None` for a path this reader does not understand.
fn parse_path(path: &str) -> Option<Vec<Segment>> {
    let mut rest = path.strip_prefix('$')?;
    let mut segments = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return None;
            }
            segments.push(Segment::Key(after[..end].to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']')?;
            let inner = &after[..close];
            let quoted = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            match quoted {
                Some(key) => segments.push(Segment::Key(key.to_owned())),
                None => {
                    let index: usize = inner.trim().parse().ok()?;
                    // A runaway index would make a huge array: arguments are never that long.
                    if index > 10_000 {
                        return None;
                    }
                    segments.push(Segment::Index(index));
                }
            }
            rest = &after[close + 1..];
        } else {
            return None;
        }
    }
    Some(segments)
}

/// The value at `segments` under `root`, creating objects and arrays on the way; `None` when
/// the path crosses a value of another kind.
fn slot<'a>(root: &'a mut Value, segments: &[Segment]) -> Option<&'a mut Value> {
    let mut current = root;
    for segment in segments {
        current = match segment {
            Segment::Key(key) => {
                if current.is_null() {
                    *current = Value::Object(Map::new());
                }
                current
                    .as_object_mut()?
                    .entry(key.clone())
                    .or_insert(Value::Null)
            }
            Segment::Index(index) => {
                if current.is_null() {
                    *current = Value::Array(Vec::new());
                }
                let items = current.as_array_mut()?;
                if items.len() <= *index {
                    items.resize(index + 1, Value::Null);
                }
                &mut items[*index]
            }
        };
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Thinking tokens (`thoughtsTokenCount`) are output, and counted apart as reasoning, in
    /// every reader (ai.google.dev/api/generate-content, `UsageMetadata`).
    #[test]
    fn thoughts_are_output_and_reasoning() {
        let chunk = r#"{"candidates": [{"content": {"parts": [{"text": "ok"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 12,"candidatesTokenCount": 4,"totalTokenCount": 428,"thoughtsTokenCount": 412},"modelVersion": "gemini-2.5-pro","responseId": "r1"}"#;
        let expected = Usage {
            input_tokens: 12,
            output_tokens: 416,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            reasoning_tokens: 412,
        };
        // The typed reader, and the value reader (a count it does not know in another place).
        let odd = chunk.replace(
            r#""responseId": "r1""#,
            r#""responseId": "r1", "extra": [1]"#,
        );
        for data in [chunk.to_owned(), odd] {
            let mut decoder = GeminiDecoder::new();
            let mut out = VecDeque::new();
            let event = SseEvent {
                event: "",
                data: data.clone().into(),
                id: None,
                retry: None,
            };
            decoder.event(&event, &mut out).unwrap();
            decoder.end(&mut out).unwrap();
            assert!(
                out.contains(&StreamEvent::Usage { usage: expected }),
                "{data}: {out:?}"
            );
        }
    }

    #[test]
    fn documented_chunks_take_the_typed_reader_and_odd_ones_the_value_reader() {
        let typical = r#"{"candidates": [{"content": {"parts": [{"text": "Hi","thoughtSignature": "s"}],"role": "model"},"index": 0,"citationMetadata": {}}],"usageMetadata": {"promptTokenCount": 5,"trafficType": "ON_DEMAND","promptTokensDetails": [{"modality": "TEXT","tokenCount": 5}]},"modelVersion": "gemini-3-flash-preview","createTime": "2026-03-21T18:11:55.919086Z","responseId": "r1"}"#;
        let chunk: WireChunk<'_> = serde_json::from_str(typical).expect("typed");
        assert_eq!(
            chunk.usage_metadata.map(|u| u.counts().prompt),
            Some(Some(5))
        );
        assert!(
            serde_json::from_str::<WireTextPart<'_>>(r#"{"text": "Hi","thoughtSignature": "s"}"#)
                .is_ok()
        );
        assert!(
            serde_json::from_str::<WireTextPart<'_>>(r#"{"text": "x","functionCall": {}}"#)
                .is_err()
        );
        // A count as a string is not the documented shape: the Value reader takes it (and
        // ignores the count) rather than failing the chunk.
        assert!(
            serde_json::from_str::<WireChunk<'_>>(
                r#"{"usageMetadata": {"promptTokenCount": "5"}}"#
            )
            .is_err()
        );
        let mut decoder = GeminiDecoder::new();
        let mut out = VecDeque::new();
        let event = SseEvent {
            event: "",
            data: r#"{"candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": "5", "candidatesTokenCount": 2}}"#.into(),
            id: None,
            retry: None,
        };
        decoder.event(&event, &mut out).unwrap();
        decoder.end(&mut out).unwrap();
        assert!(out.contains(&StreamEvent::TextDelta { text: "ok".into() }));
        assert!(out.contains(&StreamEvent::Usage {
            usage: Usage {
                input_tokens: 0,
                output_tokens: 2,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
                reasoning_tokens: 0
            }
        }));
    }

    #[test]
    fn a_null_error_member_is_no_error_in_either_reader() {
        let chunk =
            json!({"error": null, "candidates": [{"content": {"parts": [{"text": "ok"}]}}]});
        let mut out = VecDeque::new();
        GeminiDecoder::new().chunk(&chunk, &mut out).unwrap();
        let event = SseEvent {
            event: "",
            data: chunk.to_string().into(),
            id: None,
            retry: None,
        };
        let mut typed = VecDeque::new();
        GeminiDecoder::new().event(&event, &mut typed).unwrap();
        assert_eq!(out, typed);
        assert!(out.contains(&StreamEvent::TextDelta { text: "ok".into() }));
    }

    #[test]
    fn paths_parse_and_fill_nested_values() {
        assert_eq!(
            parse_path("$.recipe.ingredients[6]['name']"),
            Some(vec![
                Segment::Key("recipe".into()),
                Segment::Key("ingredients".into()),
                Segment::Index(6),
                Segment::Key("name".into()),
            ])
        );
        assert_eq!(parse_path("recipe"), None);
        assert_eq!(parse_path("$..x"), None);
        assert_eq!(parse_path("$[99999999]"), None);
        let mut args = json!({});
        apply_partial_args(
            &mut args,
            Some(&json!([
                {"jsonPath": "$.steps[1]", "stringValue": "Boil", "willContinue": true},
                {"jsonPath": "$.steps[1]", "stringValue": " water"},
                {"jsonPath": "$.n", "numberValue": 0.5},
                {"jsonPath": "$.ok", "boolValue": true},
                {"jsonPath": "$.steps.bad", "stringValue": "ignored: steps is an array"},
            ])),
        );
        assert_eq!(
            args,
            json!({"steps": [null, "Boil water"], "n": 0.5, "ok": true})
        );
    }
}
