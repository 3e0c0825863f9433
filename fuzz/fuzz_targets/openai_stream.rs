//! An OpenAI-style stream on arbitrary bytes: SSE parser → `ChunkDecoder` → `Accumulator`
//! never panics, whatever the chunks hold and wherever the network splits them.
#![no_main]

use std::collections::VecDeque;

use agentloop::Accumulator;
use agentloop::provider::http::SseDecoder;
use agentloop::provider::openai::ChunkDecoder;
use agentloop::sse::SseParser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the network split size, so the fuzzer explores splits too.
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let mut parser = SseParser::new();
    let mut decoder = ChunkDecoder::new("fuzz");
    let mut events = VecDeque::new();
    let mut failed = false;
    let mut decode = |event: agentloop::sse::SseEvent<'_>| {
        if !failed && decoder.event(&event, &mut events).is_err() {
            failed = true;
        }
    };
    for piece in body.chunks(usize::from(split % 32) + 1) {
        parser.feed(piece, &mut decode);
    }
    parser.finish(&mut decode);
    if !failed {
        let _ = decoder.end(&mut events);
    }
    let mut accumulator = Accumulator::new();
    for event in &events {
        accumulator.push(event);
    }
    let response = accumulator.finish();
    // Whatever arrived, the response's tool calls carry parsed JSON input.
    for call in response.tool_uses() {
        let _ = call.input.to_string();
    }
});
