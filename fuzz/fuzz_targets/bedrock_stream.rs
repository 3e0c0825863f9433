//! A Bedrock `ConverseStream` body on arbitrary bytes: event-stream framing → `BedrockDecoder`
//! → `Accumulator` never panics, and where the network splits the body does not change the
//! events. Raw bytes rarely get past the frames' CRCs, so half the inputs are first wrapped
//! into valid frames (the fuzzer then explores the payloads and event types).
#![no_main]

use std::collections::VecDeque;

use agentloop::provider::bedrock::{BedrockDecoder, eventstream};
use agentloop::provider::http::BodyDecoder;
use agentloop::{Accumulator, StreamEvent};
use libfuzzer_sys::fuzz_target;

const KINDS: [&str; 8] = [
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
    "throttlingException",
    "modelStreamErrorException",
];

/// Decodes `body` fed in pieces of `split` bytes: the events, and the error text if any.
fn decode(body: &[u8], split: usize) -> (Vec<StreamEvent>, Option<String>) {
    let mut decoder = BedrockDecoder::new();
    let mut events = VecDeque::new();
    let mut all = Vec::new();
    for piece in body.chunks(split) {
        let mut rest = piece;
        while !rest.is_empty() {
            match decoder.feed_until(rest, &mut events) {
                Ok(read) => {
                    assert!(read > 0 || !events.is_empty(), "no progress");
                    rest = &rest[read..];
                    all.extend(events.drain(..));
                }
                Err(e) => {
                    all.extend(events.drain(..));
                    return (all, Some(e.to_string()));
                }
            }
        }
    }
    let error = decoder.finish(&mut events).err().map(|e| e.to_string());
    all.extend(events.drain(..));
    (all, error)
}

/// `data` as frames: records separated by 0xFF, each a kind byte and a payload.
fn framed(data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for record in data.split(|b| *b == 0xFF) {
        let Some((&kind, payload)) = record.split_first() else {
            continue;
        };
        let kind = KINDS[usize::from(kind) % KINDS.len()];
        body.extend(if kind.ends_with("Exception") {
            eventstream::exception(kind, payload)
        } else {
            eventstream::event(kind, payload)
        });
    }
    body
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the network split size and whether the rest is framed first.
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let body = if first & 0x80 != 0 {
        framed(rest)
    } else {
        rest.to_vec()
    };
    let (events, error) = decode(&body, usize::from(first % 32) + 1);
    let whole = decode(&body, body.len().max(1));
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
    let _ = agentloop::provider::replay::assemble(
        agentloop::provider::replay::WireFormat::Bedrock,
        &body,
    );
});
