//! Chat Completions streaming: `chat.completion.chunk` events into normalized stream events.
//!
//! Chunks are read into borrowed, lenient structs: by a hand-written reader for the common
//! shapes (`fast`), and by serde for everything else. Tool calls are keyed by the wire `index`
//! (or, when a server omits it, by id continuity) and get 0-based positions in the order they
//! first appear, so a stream whose first index is 1 still yields call 0.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;

use super::wire::{Arguments, Count, Str, Text, WireError, WireUsage, XGroq, stop_reason};
use crate::error::{Error, Result};
use crate::message::{StopReason, Usage};
use crate::provider::http::SseDecoder;
use crate::sse::SseEvent;
use crate::stream::StreamEvent;

mod fast;

#[derive(Deserialize, Debug, Clone, PartialEq)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Str<'a>,
    #[serde(borrow, default)]
    model: Str<'a>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: WireUsage,
    #[serde(default)]
    x_groq: Option<XGroq>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
struct Choice<'a> {
    #[serde(default)]
    index: Count,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Str<'a>,
}

#[derive(Deserialize, Debug, Default, Clone, PartialEq)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(borrow, default)]
    refusal: Str<'a>,
    #[serde(borrow, default)]
    reasoning_content: Str<'a>,
    /// OpenRouter, Groq and vLLM name it `reasoning`; used only when `reasoning_content` is
    /// absent, since some servers send both with the same text.
    #[serde(borrow, default)]
    reasoning: Str<'a>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Count,
    #[serde(borrow, default)]
    id: Str<'a>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Str<'a>,
    #[serde(borrow, default)]
    arguments: Arguments<'a>,
}

/// One tool call being assembled.
#[derive(Debug)]
struct Call {
    /// The wire `index`, when the server sent one.
    wire_index: Option<u64>,
    id: String,
    name: String,
    /// Arguments that arrived before the start event could be emitted.
    pending: String,
    started: bool,
    ended: bool,
}

/// Decodes an OpenAI-style Chat Completions stream (OpenAI and every compatible server).
///
/// Feed it SSE events (see [`SseDecoder`]); it emits `MessageStart` once, text, reasoning and
/// tool-call events as they arrive, `ToolCallEnd` for every call when the finish reason
/// arrives, and `Usage` plus `MessageStop` when the stream ends (`data: [DONE]`, or the body
/// ending after a finish reason). A body that ends with neither is
/// [`Error::IncompleteStream`]; an error object in a chunk or an `event: error` is
/// [`Error::Stream`], after whatever the same chunk carried.
#[derive(Debug)]
pub struct ChunkDecoder {
    provider: String,
    started: bool,
    /// `[DONE]` arrived or the stream failed: later events are ignored.
    done: bool,
    finish: Option<StopReason>,
    refused: bool,
    usage: Option<Usage>,
    /// A top-level `usage` was seen, so `x_groq.usage` is no longer consulted.
    top_level_usage: bool,
    calls: Vec<Call>,
    /// The last chunk's leading members, which the next chunk most likely repeats.
    header: fast::Header,
}

impl ChunkDecoder {
    /// A decoder whose errors name `provider`.
    pub fn new(provider: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            started: false,
            done: false,
            finish: None,
            refused: false,
            usage: None,
            top_level_usage: false,
            calls: Vec::new(),
            header: fast::Header::default(),
        }
    }

    fn ensure_started(&mut self, out: &mut VecDeque<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                id: String::new(),
                model: String::new(),
            });
        }
    }

    fn chunk(&mut self, chunk: Chunk<'_>, out: &mut VecDeque<StreamEvent>) {
        if !self.started && (chunk.id.non_empty().is_some() || chunk.model.non_empty().is_some()) {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                id: chunk.id.non_empty().unwrap_or_default().to_owned(),
                model: chunk.model.non_empty().unwrap_or_default().to_owned(),
            });
        }
        if let Some(usage) = chunk.usage.0 {
            self.usage = Some(usage);
            self.top_level_usage = true;
        } else if !self.top_level_usage
            && let Some(usage) = chunk.x_groq.and_then(|x| x.usage.0)
        {
            self.usage = Some(usage);
        }
        // Only the first choice is assembled; n > 1 streams interleave the others.
        for choice in chunk.choices.into_iter().flatten() {
            if choice.index.0.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            // `""` and `null` mean "not finished" and never erase a finish seen earlier.
            if let Some(reason) = choice.finish_reason.non_empty()
                && self.finish.is_none()
            {
                self.finish = Some(stop_reason(reason));
                self.end_calls(out);
            }
        }
    }

    /// A fragment chunk's choices, as [`Self::chunk`] would take them: one choice, no finish
    /// reason. The piece's text is moved into its event, not copied.
    fn piece(&mut self, piece: fast::Piece<'_>, out: &mut VecDeque<StreamEvent>) {
        if piece.choice().0.unwrap_or(0) != 0 {
            return;
        }
        let fast::Piece { field, value } = piece;
        let event: fn(String) -> StreamEvent = match field {
            fast::FragmentField::Content { .. } => |text| StreamEvent::TextDelta { text },
            fast::FragmentField::ReasoningContent { .. }
            | fast::FragmentField::Reasoning { .. } => |text| StreamEvent::ThinkingDelta { text },
            fast::FragmentField::Arguments { call, .. } => {
                self.ensure_started(out);
                // A nameless piece: only the call it belongs to and its arguments matter, so it
                // skips being wrapped in a `ToolCallDelta` and taken apart again.
                let position = self.slot(call.0, None);
                return self.arguments(position, Some(value), out);
            }
        };
        if !value.is_empty() {
            self.ensure_started(out);
            out.push_back(event(value.into_owned()));
        }
    }

    /// A whole chunk's delta. Its strings are moved into their events: one with escapes was
    /// decoded into a `String` already.
    fn delta(&mut self, delta: Delta<'_>, out: &mut VecDeque<StreamEvent>) {
        let non_empty =
            |text: Option<Cow<'_, str>>| text.filter(|text| !text.is_empty()).map(Cow::into_owned);
        let reasoning = if delta.reasoning_content.is_present() {
            delta.reasoning_content.0
        } else {
            delta.reasoning.0
        };
        if let Some(text) = non_empty(reasoning) {
            self.ensure_started(out);
            out.push_back(StreamEvent::ThinkingDelta { text });
        }
        if let Some(text) = non_empty(delta.content.0) {
            self.ensure_started(out);
            out.push_back(StreamEvent::TextDelta { text });
        }
        if let Some(text) = non_empty(delta.refusal.0) {
            self.ensure_started(out);
            self.refused = true;
            out.push_back(StreamEvent::TextDelta { text });
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.ensure_started(out);
            self.tool_call(call, out);
        }
    }

    /// Which call a delta belongs to: its wire index, unless it brings a different id (some
    /// servers reuse one index for every call); without an index, the latest call unless the
    /// delta brings a new id. Two calls are never merged silently.
    fn slot(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        let differs = |call: &Call| id.is_some_and(|id| !call.id.is_empty() && call.id != id);
        let found = match index {
            Some(index) => self
                .calls
                .iter()
                .rposition(|c| c.wire_index == Some(index))
                .filter(|&at| !differs(&self.calls[at])),
            None => self
                .calls
                .len()
                .checked_sub(1)
                .filter(|&at| !differs(&self.calls[at])),
        };
        found.unwrap_or_else(|| {
            self.calls.push(Call {
                wire_index: index,
                id: String::new(),
                name: String::new(),
                pending: String::new(),
                started: false,
                ended: false,
            });
            self.calls.len() - 1
        })
    }

    fn tool_call(&mut self, delta: ToolCallDelta<'_>, out: &mut VecDeque<StreamEvent>) {
        let id = delta.id.non_empty();
        let position = self.slot(delta.index.0, id);
        let (name, arguments) = match delta.function {
            Some(f) => (f.name.0, f.arguments.0),
            None => (None, None),
        };
        let name = name.as_deref().filter(|name| !name.is_empty());
        let call = &mut self.calls[position];
        // Empty or repeated ids and names in continuation chunks never overwrite real ones.
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_owned();
        }
        if let Some(name) = name
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        self.arguments(position, arguments, out);
    }

    /// The call at `position` takes an argument piece (an event once it started, kept until
    /// then), and starts once it has an id and a name. The piece is moved into its event: one
    /// with escapes (nearly all of them) was decoded into a `String` already.
    fn arguments(
        &mut self,
        position: usize,
        arguments: Option<Cow<'_, str>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if let Some(arguments) = arguments.filter(|arguments| !arguments.is_empty()) {
            if call.started {
                out.push_back(StreamEvent::ToolCallDelta {
                    index: position,
                    arguments: arguments.into_owned(),
                });
            } else {
                call.pending.push_str(&arguments);
            }
        }
        if !call.started && !call.id.is_empty() && !call.name.is_empty() {
            start_call(call, position, out);
        }
    }

    /// Start calls still waiting for an id or name, and end every open call.
    fn end_calls(&mut self, out: &mut VecDeque<StreamEvent>) {
        for (position, call) in self.calls.iter_mut().enumerate() {
            if !call.started {
                if call.id.is_empty() {
                    call.id = super::wire::synthesized_call_id();
                }
                start_call(call, position, out);
            }
            if !call.ended {
                call.ended = true;
                out.push_back(StreamEvent::ToolCallEnd { index: position });
            }
        }
    }

    /// The response is complete: close calls, report usage and the stop reason.
    fn complete(&mut self, out: &mut VecDeque<StreamEvent>) {
        self.ensure_started(out);
        self.end_calls(out);
        if let Some(usage) = self.usage {
            out.push_back(StreamEvent::Usage { usage });
        }
        let stop_reason = if self.refused {
            StopReason::Refusal
        } else if let Some(reason) = self.finish.take() {
            reason
        } else if self.calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        };
        out.push_back(StreamEvent::MessageStop { stop_reason });
    }

    /// The provider reported an error: hand out what was assembled, then the error.
    fn fail(&mut self, error: WireError, out: &mut VecDeque<StreamEvent>) -> Error {
        self.done = true;
        if self.finish.is_some() || self.refused {
            self.complete(out);
        } else {
            self.end_calls(out);
            if let Some(usage) = self.usage {
                out.push_back(StreamEvent::Usage { usage });
            }
        }
        Error::Stream {
            provider: self.provider.clone(),
            error_type: error.kind,
            message: error.message,
        }
    }
}

fn start_call(call: &mut Call, position: usize, out: &mut VecDeque<StreamEvent>) {
    call.started = true;
    out.push_back(StreamEvent::ToolCallStart {
        index: position,
        id: call.id.clone(),
        name: call.name.clone(),
    });
    if !call.pending.is_empty() {
        out.push_back(StreamEvent::ToolCallDelta {
            index: position,
            arguments: std::mem::take(&mut call.pending),
        });
    }
}

impl SseDecoder for ChunkDecoder {
    fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        // JSON's whitespace is all ASCII; `trim` would decode characters from both ends.
        let data = event.data.trim_ascii();
        if event.event == "error" {
            let error = match serde_json::from_str::<serde_json::Value>(data) {
                Ok(value) => WireError::from_value(value.get("error").unwrap_or(&value)),
                Err(_) => WireError {
                    kind: None,
                    message: crate::provider::http::excerpt(data.as_bytes()),
                },
            };
            return Err(self.fail(error, out));
        }
        if data == "[DONE]" {
            self.done = true;
            self.complete(out);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        // Once the response has started, a chunk that is only a fragment needs no chunk built.
        if self.started
            && let Some(piece) = fast::read_fragment(data, &mut self.header)
        {
            #[cfg(any(debug_assertions, fuzzing))]
            crate::provider::scan::check_against_serde(
                data,
                &fast::fragment_chunk(data, &self.header, piece.clone()),
            );
            self.piece(piece, out);
            return Ok(());
        }
        let (mut chunk, piece) = match fast::read_next(data, &mut self.header) {
            Some(read) => {
                #[cfg(any(debug_assertions, fuzzing))]
                crate::provider::scan::check_against_serde(data, &read.clone().into_chunk());
                read.into_parts()
            }
            None => {
                let chunk = serde_json::from_str::<Chunk<'_>>(data).map_err(|e| {
                    Error::parse(
                        format!("{} stream chunk", self.provider),
                        format!(
                            "{e} in `{}`",
                            crate::provider::http::excerpt(data.as_bytes())
                        ),
                    )
                })?;
                (chunk, None)
            }
        };
        let error = chunk.error.take();
        self.chunk(chunk, out);
        if let Some(piece) = piece {
            self.piece(piece, out);
        }
        match error {
            Some(error) => Err(self.fail(error, out)),
            None => Ok(()),
        }
    }

    fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        // Ollama and llama.cpp may close the body after the finish chunk without `[DONE]`.
        if self.finish.is_some() {
            self.complete(out);
            return Ok(());
        }
        Err(Error::IncompleteStream {
            message: format!(
                "the {} stream ended before the response was complete (no finish_reason and no [DONE])",
                self.provider
            ),
        })
    }
}
