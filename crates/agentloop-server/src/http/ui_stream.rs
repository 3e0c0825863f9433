//! The same chat in the Vercel AI SDK's UI message stream protocol (v1), so frontends built on
//! `useChat` / `DefaultChatTransport` talk to agentloop unchanged.
//!
//! Protocol reference: the AI SDK documentation "Stream Protocols" (ai-sdk.dev, docs/ai-sdk-ui/
//! stream-protocol, section "Data Stream Protocol") and the `uiMessageChunkSchema` in the `ai`
//! package (packages/ai/src/ui-message-stream/ui-message-chunks.ts). Every chunk is an SSE
//! `data: <json>` event; the stream ends with `data: [DONE]`; the response carries
//! `x-vercel-ai-ui-message-stream: v1`. Only fields every version from 5 to 7 of the package
//! accepts are sent (version 5 rejects unknown fields); the approval chunks
//! (`tool-approval-request`, `tool-output-denied`), sent only for calls that need approval,
//! are those of versions 6 and 7.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use agentloop::run::{Decision, RunStopReason, ToolOutcome};
use agentloop::{
    ContentBlock, Message, Role, RunEvent, StreamEvent, ToolResult, ToolResultContent,
};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::chat::stream_headers;
use super::{ApiError, check_conversation_id};
use crate::chat::{self, ChatStart};
use crate::events::{ChatEvent, Frame};
use crate::runs::RunLog;
use crate::state::AppState;
use crate::store::title_from;

/// The header that marks a UI message stream.
pub(crate) const UI_STREAM_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The body `DefaultChatTransport` sends: the chat id, all its UI messages, and why.
#[derive(Debug, Deserialize)]
pub struct UiChatRequest {
    id: String,
    messages: Vec<UiMessage>,
    /// `submit-message` (default) or `regenerate-message`.
    #[serde(default)]
    trigger: Option<String>,
}

/// An AI SDK `UIMessage`; parts stay raw JSON because only some kinds matter here.
#[derive(Debug, Deserialize)]
pub struct UiMessage {
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

fn part_type(part: &Value) -> &str {
    part.get("type").and_then(Value::as_str).unwrap_or("")
}

fn str_field<'a>(part: &'a Value, name: &str) -> Option<&'a str> {
    part.get(name).and_then(Value::as_str)
}

/// A user UI message as a canonical message: its text parts and its image files.
fn user_message(message: &UiMessage) -> Option<Message> {
    let mut blocks = Vec::new();
    for part in &message.parts {
        match part_type(part) {
            "text" => {
                if let Some(text) = str_field(part, "text").filter(|t| !t.is_empty()) {
                    blocks.push(ContentBlock::text(text));
                }
            }
            "file" => {
                let media = str_field(part, "mediaType").unwrap_or("");
                if let (true, Some(url)) = (media.starts_with("image/"), str_field(part, "url")) {
                    blocks.push(image_block(media, url));
                }
            }
            _ => {}
        }
    }
    (!blocks.is_empty()).then(|| Message::new(Role::User, blocks))
}

fn image_block(media_type: &str, url: &str) -> ContentBlock {
    match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((_, data)) => ContentBlock::image_base64(media_type, data),
        None => ContentBlock::image_url(url),
    }
}

/// One step of an assistant UI message: its text and tool uses, and the tools' results.
#[derive(Default)]
struct StepBuilder {
    blocks: Vec<ContentBlock>,
    results: Vec<ToolResult>,
}

impl StepBuilder {
    fn flush(&mut self, history: &mut Vec<Message>) {
        let blocks = std::mem::take(&mut self.blocks);
        let results = std::mem::take(&mut self.results);
        if !blocks.is_empty() {
            // Text-only steps continue the assistant message before them.
            match history.last_mut() {
                Some(last)
                    if last.role == Role::Assistant
                        && !last
                            .content
                            .iter()
                            .any(|b| matches!(b, ContentBlock::ToolUse { .. })) =>
                {
                    last.content.extend(blocks);
                }
                _ => history.push(Message::new(Role::Assistant, blocks)),
            }
        }
        if !results.is_empty() {
            history.push(Message::tool_results(results));
        }
    }
}

/// A finished tool part (`tool-<name>` or `dynamic-tool`) as a tool use and its result; parts
/// still waiting for output are left out (they would leave the history invalid).
fn tool_part(part: &Value) -> Option<(ContentBlock, ToolResult)> {
    let kind = part_type(part);
    let name = match kind.strip_prefix("tool-") {
        Some(name) => name,
        None if kind == "dynamic-tool" => str_field(part, "toolName")?,
        None => return None,
    };
    let id = str_field(part, "toolCallId")?;
    let result = match str_field(part, "state")? {
        "output-available" => {
            let content = match part.get("output") {
                Some(Value::String(text)) => text.clone(),
                Some(value) => value.to_string(),
                None => String::new(),
            };
            ToolResult::text(id, content)
        }
        "output-error" => ToolResult::error(id, str_field(part, "errorText").unwrap_or("error")),
        _ => return None,
    };
    let input = part.get("input").cloned().unwrap_or(json!({}));
    let tool_use = ContentBlock::ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    };
    Some((tool_use, result))
}

/// A whole UI conversation as a canonical history.
fn history_from_ui(messages: &[UiMessage]) -> Vec<Message> {
    let mut history = Vec::new();
    for message in messages {
        match message.role.as_str() {
            "user" => history.extend(user_message(message)),
            "assistant" => {
                let mut step = StepBuilder::default();
                for part in &message.parts {
                    match part_type(part) {
                        "step-start" => step.flush(&mut history),
                        "text" => {
                            if !step.results.is_empty() {
                                step.flush(&mut history);
                            }
                            if let Some(text) = str_field(part, "text").filter(|t| !t.is_empty()) {
                                step.blocks.push(ContentBlock::text(text));
                            }
                        }
                        _ => {
                            if let Some((tool_use, result)) = tool_part(part) {
                                step.blocks.push(tool_use);
                                step.results.push(result);
                            }
                        }
                    }
                }
                step.flush(&mut history);
            }
            // The server's own system prompt applies.
            _ => {}
        }
    }
    history
}

fn is_prompt(message: &Message) -> bool {
    message.role == Role::User
        && !message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

fn last_user_message(request: &UiChatRequest) -> Result<Message, ApiError> {
    request
        .messages
        .last()
        .filter(|m| m.role == "user")
        .and_then(user_message)
        .ok_or_else(|| ApiError::bad_request("the last message must be a user message with text"))
}

pub(crate) async fn post_ui_stream(
    State(state): State<AppState>,
    body: Result<Json<UiChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    check_conversation_id(&request.id)?;
    let regenerate = match request.trigger.as_deref() {
        None | Some("submit-message") => false,
        Some("regenerate-message") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown trigger `{other}`; expected `submit-message` or `regenerate-message`"
            )));
        }
    };
    if request
        .messages
        .last()
        .is_some_and(|m| m.role == "assistant")
    {
        return decide(&state, &request).await;
    }
    let start = match state.conversation(&request.id).await? {
        // The server's history is the faithful one (exact tool results, reasoning
        // signatures); the client only contributes the new prompt.
        Some(stored) => {
            let mut history = stored.messages;
            if regenerate {
                let last_prompt = history.iter().rposition(is_prompt).ok_or_else(|| {
                    ApiError::bad_request("the conversation has no user message to answer again")
                })?;
                history.truncate(last_prompt + 1);
                let stored = history.len();
                ChatStart {
                    conversation_id: request.id,
                    create: None,
                    history,
                    stored,
                    output_schema: None,
                }
            } else {
                let stored = history.len();
                history.push(last_user_message(&request)?);
                ChatStart {
                    conversation_id: request.id,
                    create: None,
                    history,
                    stored,
                    output_schema: None,
                }
            }
        }
        None => {
            last_user_message(&request)?;
            let history = history_from_ui(&request.messages);
            let title = history
                .iter()
                .find(|m| is_prompt(m))
                .map(|m| title_from(&m.text()))
                .unwrap_or_default();
            ChatStart {
                conversation_id: request.id,
                create: Some(title),
                history,
                stored: 0,
                output_schema: None,
            }
        }
    };
    let run = chat::start(&state, start).await?;
    Ok(ui_event_stream(&state, run))
}

/// The decisions in an assistant UI message: its tool parts the user answered
/// (`approval-responded`, with `approval: {id, approved, reason?}`), by call id.
fn approval_responses(message: &UiMessage) -> Vec<(String, Decision)> {
    message
        .parts
        .iter()
        .filter(|part| str_field(part, "state") == Some("approval-responded"))
        .filter_map(|part| {
            let id = str_field(part, "toolCallId")?;
            let approval = part.get("approval")?;
            let decision = if approval.get("approved")?.as_bool()? {
                Decision::Approve
            } else {
                let reason = str_field(approval, "reason").filter(|r| !r.trim().is_empty());
                Decision::deny(reason.unwrap_or("the user denied this call"))
            };
            Some((id.to_owned(), decision))
        })
        .collect()
}

/// The `useChat` request after `addToolApprovalResponse`: the chat's paused answer goes on
/// with the decisions, streamed as the continuation of the same assistant message.
async fn decide(state: &AppState, request: &UiChatRequest) -> Result<Response, ApiError> {
    let decisions = request
        .messages
        .last()
        .map(approval_responses)
        .unwrap_or_default();
    if decisions.is_empty() {
        return Err(ApiError::bad_request(
            "the last message is an assistant message without approval responses; \
             send a user message, or decide the calls waiting for approval",
        ));
    }
    let run = chat::active_in(state, &request.id)
        .await?
        .filter(|run| run.is_paused())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                format!("no answer of chat `{}` waits for approval", request.id),
            )
        })?;
    chat::resume(state, run.clone(), decisions)
        .await
        .map_err(|e| super::chat::resume_error(&run.message_id, e))?;
    Ok(ui_event_stream(state, run))
}

/// `GET /v1/chat/ui-stream/{chat_id}/stream`: the AI SDK's resume request. Replays the running
/// answer of the chat from its start (the transport's default `resumeStreamIsReplay`), or
/// answers 204 when none is running.
pub(crate) async fn resume(State(state): State<AppState>, Path(chat_id): Path<String>) -> Response {
    // On a shared database the answer may run on another server: it is followed from there.
    let active = match chat::active_in(&state, &chat_id).await {
        Ok(active) => active,
        Err(e) => return ApiError::from(e).into_response(),
    };
    match active {
        // A paused answer has nothing to stream until the client decides.
        Some(run) if !run.is_paused() && !run.is_finished() => ui_event_stream(&state, run),
        _ => StatusCode::NO_CONTENT.into_response(),
    }
}

/// The UI stream of the answer's latest part: from its start, or from the resume that began
/// it (then as the continuation of the same assistant message), to its end or its next pause.
fn ui_event_stream(state: &AppState, run: Arc<RunLog>) -> Response {
    let mut headers = stream_headers(&run);
    headers.insert(
        HeaderName::from_static(UI_STREAM_HEADER),
        HeaderValue::from_static("v1"),
    );
    let segment = run.segment();
    let mut translator = UiTranslator {
        decided: segment.decided,
        ..UiTranslator::default()
    };
    let mut queue = VecDeque::new();
    if segment.start > 0 {
        translator.frame(
            &Frame::Start {
                conversation_id: run.conversation_id.clone(),
                message_id: run.message_id.clone(),
            },
            &mut queue,
        );
    }
    let frames = Box::pin(run.follow(segment.start));
    let chunks = futures::stream::unfold(
        (frames, translator, queue, false),
        |(mut frames, mut translator, mut queue, mut done)| async move {
            loop {
                if let Some(data) = queue.pop_front() {
                    let event = Ok::<_, Infallible>(Event::default().data(data));
                    return Some((event, (frames, translator, queue, done)));
                }
                if done {
                    return None;
                }
                match frames.next().await {
                    Some((_, frame)) => {
                        translator.frame(&frame, &mut queue);
                        // The client answers a pause with a new request carrying the decisions.
                        if matches!(*frame, Frame::Paused) {
                            translator.end(&mut queue);
                            done = true;
                        }
                    }
                    None => {
                        translator.end(&mut queue);
                        done = true;
                    }
                }
            }
        },
    );
    let keep_alive = KeepAlive::new()
        .interval(state.config().keep_alive)
        .text("keep-alive");
    (headers, Sse::new(chunks).keep_alive(keep_alive)).into_response()
}

/// One chunk of the UI message stream: the chunks of `uiMessageChunkSchema` the server sends,
/// with the fields every version from 5 to 7 accepts.
#[derive(Debug, Serialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
enum UiChunk<'a> {
    Start {
        message_id: &'a str,
    },
    StartStep,
    TextStart {
        id: &'a str,
    },
    TextDelta {
        id: &'a str,
        delta: &'a str,
    },
    TextEnd {
        id: &'a str,
    },
    ReasoningStart {
        id: &'a str,
    },
    ReasoningDelta {
        id: &'a str,
        delta: &'a str,
    },
    ReasoningEnd {
        id: &'a str,
    },
    ToolInputStart {
        tool_call_id: &'a str,
        tool_name: &'a str,
    },
    ToolInputDelta {
        tool_call_id: &'a str,
        input_text_delta: &'a str,
    },
    ToolInputAvailable {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
    },
    ToolOutputAvailable {
        tool_call_id: &'a str,
        output: Value,
    },
    ToolOutputError {
        tool_call_id: &'a str,
        error_text: String,
    },
    /// A call waits for the user's approval (AI SDK 6 and later). The approval id is the
    /// call id: the client sends it back with its decision.
    ToolApprovalRequest {
        approval_id: &'a str,
        tool_call_id: &'a str,
    },
    /// The user denied the call (AI SDK 6 and later).
    ToolOutputDenied {
        tool_call_id: &'a str,
    },
    FinishStep,
    Error {
        error_text: &'a str,
    },
    Finish {
        #[serde(skip_serializing_if = "Option::is_none")]
        finish_reason: Option<FinishReason>,
    },
}

/// The AI SDK's `finishReason` (the values all versions accept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    Error,
    Other,
}

impl From<&RunStopReason> for FinishReason {
    fn from(reason: &RunStopReason) -> Self {
        match reason {
            RunStopReason::EndTurn | RunStopReason::Custom(_) => Self::Stop,
            RunStopReason::MaxTokens => Self::Length,
            RunStopReason::MaxToolIterations
            | RunStopReason::MaxToolCalls
            | RunStopReason::TokenBudget
            | RunStopReason::CostBudget
            | RunStopReason::RepeatedInvalidCall(_) => Self::ToolCalls,
            RunStopReason::InvalidOutput => Self::Other,
            RunStopReason::Error => Self::Error,
            RunStopReason::Timeout
            | RunStopReason::Cancelled
            | RunStopReason::AwaitingToolResults
            | RunStopReason::AwaitingApproval => Self::Other,
        }
    }
}

/// A tool's text output as the value a frontend expects: JSON objects and arrays (what typed
/// tools return) are passed parsed, other text as a string.
fn output_value(content: &ToolResultContent) -> Value {
    match content {
        ToolResultContent::Text(text) => {
            let trimmed = text.trim_start();
            if (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(value) = serde_json::from_str(text)
            {
                return value;
            }
            Value::String(text.clone())
        }
        ToolResultContent::Blocks(blocks) => json!(blocks),
    }
}

/// Turns the run's frames into UI message chunks (as JSON text), tracking which text or
/// reasoning part is open, whether a step is, and the step's call ids by the model's index
/// (its argument fragments name the call by index).
#[derive(Debug, Default)]
struct UiTranslator {
    open_text: Option<String>,
    open_reasoning: Option<String>,
    step_open: bool,
    parts: usize,
    calls: Vec<String>,
    finish_reason: Option<FinishReason>,
    /// The calls the user decided on before this part of the answer: their denials are
    /// `tool-output-denied` (a hook's refusal stays an error).
    decided: Vec<String>,
    /// Of a stored log: tool results came, so the next model output begins a new step.
    after_tools: bool,
}

impl FinishReason {
    /// The finish reason of a `message_end`'s `stop_reason` (see [`From<&RunStopReason>`]).
    fn from_name(stop_reason: &str) -> Self {
        match stop_reason {
            "end_turn" => Self::Stop,
            "max_tokens" => Self::Length,
            "error" => Self::Error,
            "max_tool_iterations" | "max_tool_calls" | "token_budget" | "cost_budget" => {
                Self::ToolCalls
            }
            other if other.starts_with("repeated_invalid_call") => Self::ToolCalls,
            _ => Self::Other,
        }
    }
}

impl UiTranslator {
    fn push(queue: &mut VecDeque<String>, chunk: &UiChunk<'_>) {
        // A chunk of strings and JSON values always serializes.
        if let Ok(text) = serde_json::to_string(chunk) {
            queue.push_back(text);
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.parts += 1;
        format!("{prefix}_{}", self.parts)
    }

    fn close_text(&mut self, queue: &mut VecDeque<String>) {
        if let Some(id) = self.open_text.take() {
            Self::push(queue, &UiChunk::TextEnd { id: &id });
        }
    }

    fn close_reasoning(&mut self, queue: &mut VecDeque<String>) {
        if let Some(id) = self.open_reasoning.take() {
            Self::push(queue, &UiChunk::ReasoningEnd { id: &id });
        }
    }

    fn close_parts(&mut self, queue: &mut VecDeque<String>) {
        self.close_text(queue);
        self.close_reasoning(queue);
    }

    fn finish_step(&mut self, queue: &mut VecDeque<String>) {
        self.close_parts(queue);
        if self.step_open {
            self.step_open = false;
            Self::push(queue, &UiChunk::FinishStep);
        }
    }

    fn text_delta(&mut self, text: &str, queue: &mut VecDeque<String>) {
        self.close_reasoning(queue);
        if self.open_text.is_none() {
            let id = self.next_id("text");
            Self::push(queue, &UiChunk::TextStart { id: &id });
            self.open_text = Some(id);
        }
        if let Some(id) = &self.open_text {
            Self::push(queue, &UiChunk::TextDelta { id, delta: text });
        }
    }

    fn reasoning_delta(&mut self, text: &str, queue: &mut VecDeque<String>) {
        self.close_text(queue);
        if self.open_reasoning.is_none() {
            let id = self.next_id("reasoning");
            Self::push(queue, &UiChunk::ReasoningStart { id: &id });
            self.open_reasoning = Some(id);
        }
        if let Some(id) = &self.open_reasoning {
            Self::push(queue, &UiChunk::ReasoningDelta { id, delta: text });
        }
    }

    /// Before model output of a stored log: a step is open, a new one after tool results
    /// (the log has no step events).
    fn replayed_step(&mut self, queue: &mut VecDeque<String>) {
        if std::mem::take(&mut self.after_tools) {
            self.finish_step(queue);
        }
        if !self.step_open {
            self.step_open = true;
            Self::push(queue, &UiChunk::StartStep);
        }
    }

    /// An event of a stored log (an answer another server runs, or one restored after a
    /// restart) as the UI stream showed the run events it was recorded from.
    fn replayed(&mut self, event: &ChatEvent, queue: &mut VecDeque<String>) {
        match event {
            ChatEvent::MessageStart { message_id, .. } => {
                Self::push(queue, &UiChunk::Start { message_id });
            }
            ChatEvent::TextDelta { text } => {
                self.replayed_step(queue);
                self.text_delta(text, queue);
            }
            ChatEvent::ThinkingDelta { text } => {
                self.replayed_step(queue);
                self.reasoning_delta(text, queue);
            }
            ChatEvent::ToolCallStart {
                id,
                name,
                arguments,
            } => {
                self.replayed_step(queue);
                self.close_parts(queue);
                Self::push(
                    queue,
                    &UiChunk::ToolInputStart {
                        tool_call_id: id,
                        tool_name: name,
                    },
                );
                Self::push(
                    queue,
                    &UiChunk::ToolInputAvailable {
                        tool_call_id: id,
                        tool_name: name,
                        input: arguments,
                    },
                );
            }
            ChatEvent::ApprovalRequested { id, .. } => {
                Self::push(
                    queue,
                    &UiChunk::ToolApprovalRequest {
                        approval_id: id,
                        tool_call_id: id,
                    },
                );
            }
            ChatEvent::ToolCallResult {
                id,
                content,
                is_error,
            } => {
                self.after_tools = true;
                let chunk = if *is_error {
                    UiChunk::ToolOutputError {
                        tool_call_id: id,
                        error_text: content.to_text(),
                    }
                } else {
                    UiChunk::ToolOutputAvailable {
                        tool_call_id: id,
                        output: output_value(content),
                    }
                };
                Self::push(queue, &chunk);
            }
            ChatEvent::MessageEnd { stop_reason, .. } => {
                self.finish_step(queue);
                self.finish_reason = Some(FinishReason::from_name(stop_reason));
            }
            ChatEvent::Error { message } => {
                self.close_parts(queue);
                self.finish_reason = Some(FinishReason::Error);
                Self::push(
                    queue,
                    &UiChunk::Error {
                        error_text: message,
                    },
                );
            }
            ChatEvent::Output { .. } => {}
        }
    }

    fn frame(&mut self, frame: &Frame, queue: &mut VecDeque<String>) {
        match frame {
            Frame::Start { message_id, .. } => {
                Self::push(queue, &UiChunk::Start { message_id });
            }
            Frame::Run(event) => self.run_event(event, queue),
            Frame::End { stop_reason, .. } => {
                self.finish_step(queue);
                self.finish_reason = Some(stop_reason.into());
            }
            Frame::Replayed(event) => self.replayed(event, queue),
            Frame::Hidden => {}
            Frame::Paused => {
                self.finish_step(queue);
                self.finish_reason = Some((&RunStopReason::AwaitingApproval).into());
            }
            Frame::Failed { message } => {
                self.close_parts(queue);
                self.finish_reason = Some(FinishReason::Error);
                Self::push(
                    queue,
                    &UiChunk::Error {
                        error_text: message,
                    },
                );
            }
        }
    }

    fn run_event(&mut self, event: &RunEvent, queue: &mut VecDeque<String>) {
        match event {
            RunEvent::StepStart { .. } => {
                // A step inferred from a stored log before it (a restored answer) ends here.
                self.after_tools = false;
                if self.step_open {
                    self.finish_step(queue);
                }
                self.close_parts(queue);
                self.calls.clear();
                self.step_open = true;
                Self::push(queue, &UiChunk::StartStep);
            }
            RunEvent::Model(StreamEvent::TextDelta { text }) => self.text_delta(text, queue),
            RunEvent::Model(StreamEvent::ThinkingDelta { text }) => {
                self.reasoning_delta(text, queue)
            }
            RunEvent::Model(StreamEvent::ToolCallStart { index, id, name }) => {
                self.close_parts(queue);
                if self.calls.len() <= *index {
                    self.calls.resize(*index + 1, String::new());
                }
                if let Some(slot) = self.calls.get_mut(*index) {
                    slot.clone_from(id);
                }
                Self::push(
                    queue,
                    &UiChunk::ToolInputStart {
                        tool_call_id: id,
                        tool_name: name,
                    },
                );
            }
            RunEvent::Model(StreamEvent::ToolCallDelta { index, arguments }) => {
                if let Some(id) = self.calls.get(*index).filter(|id| !id.is_empty()) {
                    Self::push(
                        queue,
                        &UiChunk::ToolInputDelta {
                            tool_call_id: id,
                            input_text_delta: arguments,
                        },
                    );
                }
            }
            RunEvent::ToolCallReady { call } => {
                self.close_parts(queue);
                Self::push(
                    queue,
                    &UiChunk::ToolInputAvailable {
                        tool_call_id: &call.id,
                        tool_name: &call.name,
                        input: &call.input,
                    },
                );
            }
            RunEvent::ApprovalRequested(pending) => {
                Self::push(
                    queue,
                    &UiChunk::ToolApprovalRequest {
                        approval_id: &pending.id,
                        tool_call_id: &pending.id,
                    },
                );
            }
            RunEvent::ToolCallResult { id, outcome, .. }
                if matches!(outcome, ToolOutcome::Denied { .. }) && self.decided.contains(id) =>
            {
                Self::push(queue, &UiChunk::ToolOutputDenied { tool_call_id: id });
            }
            RunEvent::ToolCallResult { id, result, .. } => {
                let chunk = if result.is_error {
                    UiChunk::ToolOutputError {
                        tool_call_id: id,
                        error_text: result.content.to_text(),
                    }
                } else {
                    UiChunk::ToolOutputAvailable {
                        tool_call_id: id,
                        output: output_value(&result.content),
                    }
                };
                Self::push(queue, &chunk);
            }
            RunEvent::StepFinish { .. } => self.finish_step(queue),
            _ => {}
        }
    }

    fn end(&mut self, queue: &mut VecDeque<String>) {
        self.close_parts(queue);
        Self::push(
            queue,
            &UiChunk::Finish {
                finish_reason: self.finish_reason,
            },
        );
        queue.push_back("[DONE]".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ui(value: Value) -> Vec<UiMessage> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ui_messages_with_tool_parts_become_a_valid_history() {
        let messages = ui(json!([
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Weather in Paris?"}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool-get_weather", "toolCallId": "call_1", "state": "output-available",
                 "input": {"city": "Paris"}, "output": {"temp": 18}},
                {"type": "tool-get_weather", "toolCallId": "call_2", "state": "input-streaming",
                 "input": {"city": "Pa"}},
                {"type": "step-start"},
                {"type": "text", "text": "It is 18 °C."}
            ]},
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Thanks"}]}
        ]));
        let history = history_from_ui(&messages);
        assert_eq!(
            history,
            vec![
                Message::user("Weather in Paris?"),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::text("Let me look."),
                        ContentBlock::ToolUse {
                            id: "call_1".into(),
                            name: "get_weather".into(),
                            input: json!({"city": "Paris"})
                        }
                    ]
                ),
                Message::tool_results([ToolResult::text("call_1", r#"{"temp":18}"#)]),
                Message::assistant("It is 18 °C."),
                Message::user("Thanks"),
            ]
        );
        agentloop::history::validate(&history).unwrap();
    }

    #[test]
    fn text_after_a_tool_without_step_marker_starts_a_new_step() {
        let messages = ui(json!([
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "c1",
                 "state": "output-error", "input": {}, "errorText": "boom"},
                {"type": "text", "text": "Sorry."}
            ]}
        ]));
        let history = history_from_ui(&messages);
        assert_eq!(history.len(), 4);
        assert_eq!(
            history[2],
            Message::tool_results([ToolResult::error("c1", "boom")])
        );
        assert_eq!(history[3], Message::assistant("Sorry."));
    }

    #[test]
    fn json_text_outputs_are_passed_as_values() {
        assert_eq!(
            output_value(&ToolResultContent::Text(r#"{"a":1}"#.into())),
            json!({"a": 1})
        );
        assert_eq!(
            output_value(&ToolResultContent::Text("18 °C".into())),
            json!("18 °C")
        );
        assert_eq!(
            output_value(&ToolResultContent::Text("{not json".into())),
            json!("{not json")
        );
    }
}
