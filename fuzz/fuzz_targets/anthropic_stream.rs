//! An Anthropic Messages stream on arbitrary bytes: SSE parser → `AnthropicDecoder` →
//! `Accumulator` never panics, and where the network splits the body does not change the
//! events (the body fed whole and fed in pieces decode to the same events and error). Built
//! with `--cfg fuzzing`, the decoder also holds every delta its fast path reads to serde's
//! reading of the same event (the seeds' recorded deltas take that path).
#![no_main]

use std::collections::VecDeque;

use agentloop::provider::anthropic::AnthropicDecoder;
use agentloop::provider::http::SseDecoder;
use agentloop::sse::SseParser;
use agentloop::{Accumulator, StreamEvent};
use libfuzzer_sys::fuzz_target;

/// Decodes `body` fed in pieces of `split` bytes: the events, and the error text if any.
fn decode(body: &[u8], split: usize) -> (Vec<StreamEvent>, Option<String>) {
    let mut parser = SseParser::new();
    let mut decoder = AnthropicDecoder::new();
    let mut events = VecDeque::new();
    let mut error = None;
    let mut on_event = |event: agentloop::sse::SseEvent<'_>| {
        if error.is_none() {
            if let Err(e) = decoder.event(&event, &mut events) {
                error = Some(e.to_string());
            }
        }
    };
    for piece in body.chunks(split) {
        parser.feed(piece, &mut on_event);
    }
    parser.finish(&mut on_event);
    if error.is_none() {
        if let Err(e) = decoder.end(&mut events) {
            error = Some(e.to_string());
        }
    }
    (events.into(), error)
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the network split size, so the fuzzer explores splits too.
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let (events, error) = decode(body, usize::from(split % 32) + 1);
    let whole = decode(body, body.len().max(1));
    assert_eq!(
        (&events, &error),
        (&whole.0, &whole.1),
        "the split changed the decoded stream"
    );
    let mut accumulator = Accumulator::new();
    for event in &events {
        accumulator.push(event);
    }
    let response = accumulator.finish();
    for call in response.tool_uses() {
        let _ = call.input.to_string();
    }
});
