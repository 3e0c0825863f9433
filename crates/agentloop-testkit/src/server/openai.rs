//! The OpenAI Chat Completions wire: `chat.completion.chunk` SSE streams, `chat.completion`
//! bodies and `{"error": {...}}` errors.
//!
//! Shapes follow OpenAI's OpenAPI spec v2.3.0 (`CreateChatCompletionStreamResponse`,
//! `CreateChatCompletionResponse`, `ChatCompletionStreamOptions`, `Error`; in
//! `shared/conformance/specs/` beside the repository) and the recordings
//! conformance/streams/openai/text-basic.sse (role chunk, one `content` per chunk, `finish_reason`
//! chunk with an empty delta, usage chunk with `choices: []`, `data: [DONE]`) and
//! parallel-tool-calls-2.sse (role-only first chunk, a start chunk per call with `id`, `type`,
//! `name` and empty `arguments`, then `{index, function: {arguments}}` fragments).
//! `reasoning_content` deltas follow conformance/streams/deepseek/reasoning-then-content.sse.

use agentloop::{StopReason, Usage};
use bytes::Bytes;
use serde::Serialize;

use super::render::{CREATED, Shape, json_bytes, sse_frame};
use super::wire_error::{ErrorKind, WireError};
use crate::turn::{Turn, TurnItem, split_pieces};

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageOut>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// Absent, `null` (`Some(None)`) or text.
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDelta<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Serialize)]
struct PromptTokensDetails {
    cached_tokens: u64,
}

impl From<&Usage> for UsageOut {
    fn from(usage: &Usage) -> Self {
        Self {
            prompt_tokens: usage.input_tokens,
            completion_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens(),
            prompt_tokens_details: (usage.cache_read_tokens > 0).then_some(PromptTokensDetails {
                cached_tokens: usage.cache_read_tokens,
            }),
        }
    }
}

/// The response id for a turn.
fn response_id(shape: &Shape<'_>) -> String {
    format!("chatcmpl-mock-{}", shape.turn_index)
}

/// The `finish_reason` for a stop reason.
fn finish_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::Refusal => "content_filter",
        StopReason::Other(other) => other,
    }
}

/// Writes the chunks of one response, which share id, timestamp and model.
struct Chunks<'a> {
    id: &'a str,
    model: &'a str,
    frames: Vec<Bytes>,
}

impl Chunks<'_> {
    fn push(&mut self, delta: Delta<'_>, finish_reason: Option<&str>) {
        let choice = [ChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason,
        }];
        self.push_chunk(&choice, None);
    }

    fn push_chunk(&mut self, choices: &[ChunkChoice<'_>], usage: Option<UsageOut>) {
        let chunk = Chunk {
            id: self.id,
            object: "chat.completion.chunk",
            created: CREATED,
            model: self.model,
            choices,
            usage,
        };
        self.frames.push(sse_frame(None, &chunk));
    }
}

/// The SSE events of a streamed answer, one frame each, ending with `data: [DONE]`.
pub(super) fn stream(turn: &Turn, shape: &Shape<'_>) -> Vec<Bytes> {
    let id = response_id(shape);
    let mut chunks = Chunks {
        id: &id,
        model: shape.model,
        frames: Vec::new(),
    };
    let starts_with_text = matches!(turn.items.first(), Some(TurnItem::Text(_)));
    chunks.push(
        Delta {
            role: Some("assistant"),
            content: Some(starts_with_text.then_some("")),
            ..Delta::default()
        },
        None,
    );
    let calls = turn.resolved_calls(shape.turn_index);
    let mut call_index = 0;
    for item in &turn.items {
        match item {
            TurnItem::Text(text) => {
                for piece in split_pieces(text, turn.pieces.text) {
                    chunks.push(
                        Delta {
                            content: Some(Some(&piece)),
                            ..Delta::default()
                        },
                        None,
                    );
                }
            }
            TurnItem::Thinking { text, .. } => {
                // Chat Completions has no reasoning signature: only the text travels.
                for piece in split_pieces(text, turn.pieces.thinking) {
                    chunks.push(
                        Delta {
                            reasoning_content: Some(&piece),
                            ..Delta::default()
                        },
                        None,
                    );
                }
            }
            TurnItem::ToolCall { .. } => {
                let index = call_index;
                call_index += 1;
                let Some((id, name, arguments)) = calls.get(index) else {
                    continue;
                };
                let start = ToolCallDelta {
                    index,
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(name),
                        arguments: "",
                    },
                };
                chunks.push(
                    Delta {
                        tool_calls: Some([start]),
                        ..Delta::default()
                    },
                    None,
                );
                for piece in split_pieces(arguments, turn.pieces.arguments) {
                    let fragment = ToolCallDelta {
                        index,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: &piece,
                        },
                    };
                    chunks.push(
                        Delta {
                            tool_calls: Some([fragment]),
                            ..Delta::default()
                        },
                        None,
                    );
                }
            }
        }
    }
    let stop = turn.effective_stop_reason();
    chunks.push(Delta::default(), Some(finish_reason(&stop)));
    if shape.include_usage {
        chunks.push_chunk(&[], Some(UsageOut::from(&turn.usage)));
    }
    let mut frames = chunks.frames;
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoice<'a>; 1],
    usage: UsageOut,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    message: ResponseMessage<'a>,
    logprobs: Option<()>,
    finish_reason: &'a str,
}

#[derive(Serialize)]
struct ResponseMessage<'a> {
    role: &'static str,
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCallOut<'a>>,
    refusal: Option<()>,
}

#[derive(Serialize)]
struct ToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// Concatenates the texts of the items `pick` selects; `None` when there are none.
fn joined(turn: &Turn, pick: impl Fn(&TurnItem) -> Option<&str>) -> Option<String> {
    let mut parts = turn.items.iter().filter_map(pick).peekable();
    parts.peek()?;
    Some(parts.collect())
}

/// The `chat.completion` body of a non-streamed answer.
pub(super) fn body(turn: &Turn, shape: &Shape<'_>) -> Bytes {
    let id = response_id(shape);
    let calls = turn.resolved_calls(shape.turn_index);
    let stop = turn.effective_stop_reason();
    let completion = Completion {
        id: &id,
        object: "chat.completion",
        created: CREATED,
        model: shape.model,
        choices: [CompletionChoice {
            index: 0,
            message: ResponseMessage {
                role: "assistant",
                content: joined(turn, |item| match item {
                    TurnItem::Text(text) => Some(text),
                    _ => None,
                }),
                reasoning_content: joined(turn, |item| match item {
                    TurnItem::Thinking { text, .. } => Some(text),
                    _ => None,
                }),
                tool_calls: calls
                    .iter()
                    .map(|(id, name, arguments)| ToolCallOut {
                        id,
                        kind: "function",
                        function: FunctionOut { name, arguments },
                    })
                    .collect(),
                refusal: None,
            },
            logprobs: None,
            finish_reason: finish_reason(&stop),
        }],
        usage: UsageOut::from(&turn.usage),
    };
    json_bytes(&completion)
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<()>,
    code: Option<&'a str>,
}

fn error_envelope(error: &WireError) -> ErrorEnvelope<'_> {
    // Types and codes as OpenAI sends them: a 429 is `{"type": "requests", "code":
    // "rate_limit_exceeded"}`, a bad key `invalid_request_error` with `invalid_api_key`.
    let (kind, code) = match &error.kind {
        ErrorKind::InvalidRequest | ErrorKind::Permission => ("invalid_request_error", None),
        ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::NotFound => ("invalid_request_error", Some("not_found")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal | ErrorKind::Overloaded => ("server_error", None),
        ErrorKind::Timeout => ("timeout", None),
        ErrorKind::Named(name) => (name.as_str(), None),
    };
    ErrorEnvelope {
        error: ErrorObject {
            message: &error.message,
            kind,
            param: None,
            code,
        },
    }
}

/// The status OpenAI answers an error with; it has no 529 and says 503 when overloaded.
pub(super) fn status(error: &WireError) -> u16 {
    error.status.unwrap_or(match error.kind {
        ErrorKind::InvalidRequest | ErrorKind::Named(_) => 400,
        ErrorKind::Authentication => 401,
        ErrorKind::Permission => 403,
        ErrorKind::NotFound => 404,
        ErrorKind::RateLimit => 429,
        ErrorKind::Internal => 500,
        ErrorKind::Overloaded => 503,
        ErrorKind::Timeout => 504,
    })
}

/// The error body of a failed call.
pub(super) fn error_body(error: &WireError) -> Bytes {
    json_bytes(&error_envelope(error))
}

/// An error reported inside a 200 stream: a chunk holding only `error`, as OpenAI-compatible
/// servers send it (conformance/streams/openrouter/comments-and-error-in-chunk.sse).
pub(super) fn error_frame(error: &WireError) -> Bytes {
    sse_frame(None, &error_envelope(error))
}

/// A chunk cut off in the middle of its JSON.
pub(super) fn malformed_frame(shape: &Shape<'_>) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"trunc\n\n",
        response_id(shape)
    ))
}
