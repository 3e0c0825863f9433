//! The SSE parser on arbitrary bytes: never panics, and any split of the input gives the same
//! events as feeding it whole or byte by byte, or stopping after every event and feeding the
//! rest (`feed_until`, as the stream reader does).
#![no_main]

use std::ops::ControlFlow;

use agentloop::sse::{SseEvent, SseParser};
use libfuzzer_sys::fuzz_target;

type Owned = (String, String, Option<String>, Option<u64>);

fn own(e: SseEvent<'_>) -> Owned {
    (
        e.event.to_owned(),
        e.data.into_owned(),
        e.id.map(str::to_owned),
        e.retry,
    )
}

fn parse(chunks: &[&[u8]]) -> Vec<Owned> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, |e| out.push(own(e)));
    }
    parser.finish(|e| out.push(own(e)));
    out
}

/// Like `parse`, but stopping after every event and feeding what was left.
fn parse_stopping(chunks: &[&[u8]]) -> Vec<Owned> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        let mut rest = *chunk;
        loop {
            let mut events = 0;
            let read = parser.feed_until(rest, |e| {
                events += 1;
                out.push(own(e));
                ControlFlow::Break(())
            });
            assert!(events <= 1, "an event was handed out after a break");
            assert!(events == 1 || read == rest.len(), "stopped without a break");
            rest = &rest[read..];
            if rest.is_empty() {
                break;
            }
        }
    }
    parser.finish(|e| out.push(own(e)));
    out
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the split size, so the fuzzer explores splits too.
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let whole = parse(&[body]);
    let size = usize::from(split % 16) + 1;
    let pieces: Vec<&[u8]> = body.chunks(size).collect();
    assert_eq!(whole, parse(&pieces));
    assert_eq!(whole, parse_stopping(&pieces));
    // Byte by byte, every line is held over from earlier chunks, so no event is read whole
    // from its chunk: the line-by-line path checks the one that reads events whole. Only the
    // first KiB: the corpus holds recorded streams of 256 KiB, and one call per byte over all
    // of them slowed the target to about 700 executions a second.
    let head = &body[..body.len().min(1024)];
    let bytes: Vec<&[u8]> = head.chunks(1).collect();
    assert_eq!(parse(&[head]), parse(&bytes));
});
