//! Assemble a recorded SSE stream (a captured response body) into a [`Response`] with the same
//! parser and decoders the live providers use: for debugging, conformance tests and
//! `agentloop replay`.
//!
//! ```
//! use agentloop::provider::replay::{WireFormat, assemble};
//! let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
//! let replayed = assemble(WireFormat::OpenAi, body);
//! assert_eq!(replayed.response.text(), "Hi");
//! assert!(replayed.error.is_none());
//! ```

use std::collections::VecDeque;

use super::anthropic::AnthropicDecoder;
use super::http::SseDecoder;
use super::openai::ChunkDecoder;
use crate::error::Error;
use crate::message::Response;
use crate::sse::SseParser;
use crate::stream::{Accumulator, StreamEvent};

/// A wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI Chat Completions chunks (and every compatible server).
    OpenAi,
    /// Anthropic Messages events.
    Anthropic,
}

/// What a recorded stream assembles to.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// Everything assembled (up to the error, if one came).
    pub response: Response,
    /// The error the stream reported or ended with.
    pub error: Option<Error>,
}

/// Assemble `body`, a whole recorded stream.
pub fn assemble(format: WireFormat, body: &[u8]) -> Replayed {
    match format {
        WireFormat::OpenAi => run(ChunkDecoder::new("openai"), "openai", body),
        WireFormat::Anthropic => run(AnthropicDecoder::new(), "anthropic", body),
    }
}

fn run<D: SseDecoder>(mut decoder: D, provider: &str, body: &[u8]) -> Replayed {
    let mut parser = SseParser::new();
    let mut events: VecDeque<StreamEvent> = VecDeque::new();
    let mut acc = Accumulator::new();
    let mut error = None;
    let mut handle = |event: crate::sse::SseEvent<'_>| {
        if error.is_none()
            && let Err(e) = decoder.event(&event, &mut events)
        {
            error = Some(e);
        }
    };
    parser.feed(body, &mut handle);
    parser.finish(&mut handle);
    if error.is_none()
        && let Err(e) = decoder.end(&mut events)
    {
        error = Some(e);
    }
    for event in &events {
        acc.push(event);
    }
    acc.set_provider(provider);
    Replayed {
        response: acc.finish(),
        error,
    }
}
