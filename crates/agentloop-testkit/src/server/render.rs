//! From a scripted turn (plus faults) to a [`Reply`] on one wire.

use axum::http::HeaderValue;
use bytes::Bytes;
use serde::Serialize;

use super::fault::{Fault, WriteMode};
use super::reply::Reply;
use super::wire_error::{Played, WireError, play};
use super::{Wire, anthropic, bedrock, gemini, openai, responses};
use crate::turn::Turn;

/// The `created` timestamp of every OpenAI response (2025-01-01T00:00:00Z), fixed so bodies are
/// reproducible byte for byte.
pub(crate) const CREATED: u64 = 1_735_689_600;

/// What a request asked for, as far as the answer's shape goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape<'a> {
    pub wire: Wire,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    pub model: &'a str,
    /// Which scripted turn answers: numbers the response and tool-call ids.
    pub turn_index: usize,
}

/// One SSE frame: an optional `event:` line, one `data:` line, a blank line.
pub(crate) fn sse_frame(event: Option<&str>, data: &impl Serialize) -> Bytes {
    let json = json_vec(data);
    let mut frame = Vec::with_capacity(json.len() + 32);
    if let Some(event) = event {
        frame.extend_from_slice(b"event: ");
        frame.extend_from_slice(event.as_bytes());
        frame.push(b'\n');
    }
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(&json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

pub(crate) fn json_bytes(data: &impl Serialize) -> Bytes {
    Bytes::from(json_vec(data))
}

fn json_vec(data: &impl Serialize) -> Vec<u8> {
    // The wire structs hold only strings, numbers and JSON values, which always serialize; if
    // that ever changed the client would get a string naming the problem, not a dead server.
    serde_json::to_vec(data)
        .unwrap_or_else(|e| format!("\"mock server could not serialize: {e}\"").into_bytes())
}

/// An error status with the wire's error body and retry headers.
pub(crate) fn error_reply(wire: Wire, error: &WireError) -> Reply {
    let (status, body) = match wire {
        Wire::OpenAi | Wire::Responses => (openai::status(error), openai::error_body(error)),
        Wire::Anthropic => (anthropic::status(error), anthropic::error_body(error)),
        Wire::Gemini => (gemini::status(error), gemini::error_body(error)),
        Wire::Bedrock => (bedrock::status(error), bedrock::error_body(error)),
    };
    let mut reply = Reply::json(status, body);
    if wire == Wire::Bedrock
        && let Ok(value) = HeaderValue::from_str(&bedrock::error_type(error))
    {
        reply.headers.insert("x-amzn-errortype", value);
    }
    if let Some(secs) = error.retry_after_secs {
        reply.headers.insert("retry-after", HeaderValue::from(secs));
    }
    if let Some(ms) = error.retry_after_ms {
        reply
            .headers
            .insert("retry-after-ms", HeaderValue::from(ms));
    }
    reply
}

/// How a 200 answer ends early.
enum Cut {
    ErrorEvent(WireError),
    Disconnect,
}

/// The reply to a request answered by `turn`, disturbed by the turn's faults and `extra` (a
/// server-wide fault for this request).
pub(crate) fn render(
    turn: &Turn,
    shape: &Shape<'_>,
    extra: Option<&Fault>,
    mode: WriteMode,
) -> Reply {
    let faults: Vec<&Fault> = turn.faults.iter().chain(extra).collect();
    let rejection = faults.iter().find_map(|f| WireError::from_fault(f));
    let mut reply = match (rejection, &turn.error) {
        (Some(error), _) => error_reply(shape.wire, &error),
        (None, Some(error)) => match play(error) {
            Played::Reject(error) => error_reply(shape.wire, &error),
            Played::ErrorEvent(error) => {
                answer(turn, shape, &faults, Some((0, Cut::ErrorEvent(error))))
            }
            Played::Disconnect => answer(turn, shape, &faults, Some((0, Cut::Disconnect))),
        },
        (None, None) => answer(turn, shape, &faults, earliest_cut(turn, &faults)),
    };
    disturb(&mut reply, Some(turn), &faults, mode);
    reply
}

/// The first place the turn's stream is cut (by `fail_after` or an error-event fault).
fn earliest_cut(turn: &Turn, faults: &[&Fault]) -> Option<(usize, Cut)> {
    let scripted = turn.fail_after_events.as_ref().map(|(after, error)| {
        let cut = match play(error) {
            Played::Disconnect => Cut::Disconnect,
            // Once events have gone out the status is 200: any error arrives as an event.
            Played::Reject(error) | Played::ErrorEvent(error) => Cut::ErrorEvent(error),
        };
        (*after, cut)
    });
    let injected = faults.iter().find_map(|f| match f {
        Fault::ErrorEvent { after_events } => Some((
            *after_events,
            Cut::ErrorEvent(WireError::midstream_default()),
        )),
        _ => None,
    });
    match (scripted, injected) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The turn's answer in the requested shape, cut and corrupted as the faults say.
fn answer(turn: &Turn, shape: &Shape<'_>, faults: &[&Fault], cut: Option<(usize, Cut)>) -> Reply {
    let malformed_after = faults.iter().filter_map(|f| match f {
        Fault::MalformedChunk { after_events } => Some(*after_events),
        _ => None,
    });
    if !shape.stream {
        return match cut {
            // A non-streamed answer has no events: it fails the way the provider would have.
            Some((_, Cut::ErrorEvent(error))) => error_reply(shape.wire, &error),
            cut => {
                let body = match shape.wire {
                    Wire::OpenAi => openai::body(turn, shape),
                    Wire::Anthropic => anthropic::body(turn, shape),
                    Wire::Gemini => gemini::body(turn, shape),
                    Wire::Bedrock => bedrock::body(turn, shape),
                    Wire::Responses => responses::body(turn, shape),
                };
                let half = body.len() / 2;
                let mut reply = Reply::json(200, body);
                if malformed_after.count() > 0 {
                    reply.writes = reply.writes.iter().map(|w| w.slice(..half)).collect();
                }
                if let Some((after, _)) = cut {
                    // Cut before any event: nothing of the body goes out.
                    reply.disconnect_after(if after == 0 { 0 } else { half });
                }
                reply
            }
        };
    }
    let mut frames = match shape.wire {
        Wire::OpenAi => openai::stream(turn, shape),
        Wire::Anthropic => anthropic::stream(turn, shape),
        Wire::Gemini => gemini::stream(turn, shape),
        Wire::Bedrock => bedrock::stream(turn, shape),
        Wire::Responses => responses::stream(turn, shape),
    };
    let mut disconnect = false;
    if let Some((after, cut)) = cut {
        frames.truncate(after);
        match cut {
            Cut::ErrorEvent(error) => frames.push(match shape.wire {
                Wire::OpenAi => openai::error_frame(&error),
                Wire::Anthropic => anthropic::error_frame(&error),
                Wire::Gemini => gemini::error_frame(&error),
                Wire::Bedrock => bedrock::error_frame(&error),
                Wire::Responses => responses::error_frame(&error),
            }),
            Cut::Disconnect => disconnect = true,
        }
    }
    let mut positions: Vec<usize> = malformed_after.collect();
    // Insert from the back so each position still counts the original events.
    positions.sort_unstable_by(|a, b| b.cmp(a));
    for after in positions {
        let bad = match shape.wire {
            Wire::OpenAi => openai::malformed_frame(shape),
            Wire::Anthropic => anthropic::malformed_frame(),
            Wire::Gemini => gemini::malformed_frame(),
            Wire::Bedrock => bedrock::malformed_frame(),
            Wire::Responses => responses::malformed_frame(),
        };
        frames.insert(after.min(frames.len()), bad);
    }
    let mut reply = Reply::event_stream(frames);
    if shape.wire == Wire::Bedrock {
        reply.headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.amazon.eventstream"),
        );
    }
    if disconnect {
        let len = reply.body_len();
        reply.disconnect_after(len);
    }
    reply
}

/// Apply what changes how any reply is delivered: the turn's delays, then the faults' delays,
/// byte cuts and write splits.
pub(crate) fn disturb(reply: &mut Reply, turn: Option<&Turn>, faults: &[&Fault], mode: WriteMode) {
    if let Some(turn) = turn {
        reply.delay += turn.delay.unwrap_or_default();
        reply.write_delay = reply.write_delay.max(turn.chunk_delay.unwrap_or_default());
    }
    let mut one_byte = false;
    for fault in faults {
        match fault {
            Fault::Delay(delay) => reply.delay += *delay,
            Fault::SlowChunks(delay) => reply.write_delay = reply.write_delay.max(*delay),
            Fault::Disconnect { after_bytes } => reply.disconnect_after(*after_bytes),
            Fault::OneByteWrites => one_byte = true,
            _ => {}
        }
    }
    if one_byte {
        reply.split_into_bytes();
    } else if mode == WriteMode::WholeBody {
        reply.merge_writes();
    }
}

/// Delays and write splitting for replies that have no turn (rejections by a server-wide fault,
/// errors of the server itself).
pub(crate) fn disturb_alone(reply: &mut Reply, fault: Option<&Fault>, mode: WriteMode) {
    let faults: Vec<&Fault> = fault.into_iter().collect();
    disturb(reply, None, &faults, mode);
}
