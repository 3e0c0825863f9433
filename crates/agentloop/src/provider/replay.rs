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
use super::gemini::GeminiDecoder;
use super::http::SseDecoder;
use super::openai::ChunkDecoder;
use super::responses::ResponsesDecoder;
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
    /// Gemini `streamGenerateContent?alt=sse` chunks (Gemini API and Vertex AI).
    Gemini,
    /// Bedrock `ConverseStream` bodies: binary event-stream frames, or the decoded form with
    /// one `{"<event-type>": payload}` JSON object per line.
    #[cfg(feature = "bedrock")]
    Bedrock,
    /// OpenAI Responses API events (and compatible servers').
    OpenAiResponses,
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
        WireFormat::Gemini => gemini(body),
        #[cfg(feature = "bedrock")]
        WireFormat::Bedrock => bedrock(body),
        WireFormat::OpenAiResponses => run(
            ResponsesDecoder::new(),
            super::responses::PROVIDER_NAME,
            body,
        ),
    }
}

/// Frames through the Bedrock decoder as the transport feeds them; a body that starts with
/// `{` is the decoded form, one event per line.
#[cfg(feature = "bedrock")]
fn bedrock(body: &[u8]) -> Replayed {
    use super::bedrock::{BedrockDecoder, PROVIDER_NAME};
    use super::http::BodyDecoder;
    let mut decoder = BedrockDecoder::new();
    let mut events = VecDeque::new();
    let result = if body.trim_ascii_start().starts_with(b"{") {
        bedrock_lines(&mut decoder, body, &mut events)
    } else {
        let mut rest = body;
        let mut result = Ok(());
        while !rest.is_empty() {
            match decoder.feed_until(rest, &mut events) {
                Ok(read) => rest = &rest[read..],
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        result
    };
    let error = result.and_then(|()| decoder.finish(&mut events)).err();
    let mut acc = Accumulator::new();
    for event in &events {
        acc.push(event);
    }
    acc.set_provider(PROVIDER_NAME);
    Replayed {
        response: acc.finish(),
        error,
    }
}

/// The decoded form of a Bedrock stream: each line one `{"<event-type>": payload}`, the form
/// AWS SDKs log and recordings keep beside the binary body.
#[cfg(feature = "bedrock")]
pub fn bedrock_lines(
    decoder: &mut super::bedrock::BedrockDecoder,
    body: &[u8],
    events: &mut VecDeque<StreamEvent>,
) -> crate::Result<()> {
    for line in body.split(|b| *b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let value: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
            .map_err(|e| Error::parse("a decoded Bedrock event line", e))?;
        for (kind, payload) in value {
            let payload = serde_json::to_vec(&payload)
                .map_err(|e| Error::parse("a decoded Bedrock event line", e))?;
            decoder.event(&kind, &payload, events)?;
        }
    }
    Ok(())
}

/// Gemini error bodies are plain JSON even when labelled `text/event-stream` (a 404 on the
/// streaming method): a body that is one JSON value rather than SSE is read whole.
fn gemini(body: &[u8]) -> Replayed {
    let trimmed = body.trim_ascii_start();
    if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") {
        let mut acc = Accumulator::new();
        let error = match serde_json::from_slice::<serde_json::Value>(trimmed) {
            Ok(value) => {
                let mut decoder = GeminiDecoder::new();
                let mut events = VecDeque::new();
                let result = decoder
                    .chunk(&value, &mut events)
                    .and_then(|()| decoder.end(&mut events));
                for event in &events {
                    acc.push(event);
                }
                result.err()
            }
            Err(e) => Some(Error::parse("Gemini response body", e)),
        };
        acc.set_provider(super::gemini::PROVIDER_NAME);
        return Replayed {
            response: acc.finish(),
            error,
        };
    }
    run(GeminiDecoder::new(), super::gemini::PROVIDER_NAME, body)
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
