//! Stream chunks on arbitrary text, for both providers: neither decoder panics, and OpenAI's
//! hand-written chunk reader must agree with serde wherever it answers. The decoder checks that
//! itself in fuzz builds (`cfg(fuzzing)`) and panics on any disagreement; this target feeds
//! them single chunks so the fuzzer mutates chunk shapes directly instead of whole recorded
//! streams. Each line is one chunk of one stream, so later chunks are read after the header and
//! fragment the earlier ones left.
#![no_main]

use std::borrow::Cow;
use std::collections::VecDeque;

use agentloop::provider::anthropic::AnthropicDecoder;
use agentloop::provider::http::SseDecoder;
use agentloop::provider::openai::ChunkDecoder;
use agentloop::sse::SseEvent;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut openai = ChunkDecoder::new("fuzz");
    let mut anthropic = AnthropicDecoder::new();
    let mut events = VecDeque::new();
    for line in text.split('\n') {
        let event = SseEvent {
            event: "",
            data: Cow::Borrowed(line),
            id: None,
            retry: None,
        };
        let _ = openai.event(&event, &mut events);
        let _ = anthropic.event(&event, &mut events);
        events.clear();
    }
});
