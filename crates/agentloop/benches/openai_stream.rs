//! Throughput of a whole OpenAI stream: SSE parsing, chunk decoding and assembly into a
//! `Response`, on a gpt-4o-shaped text stream and a parallel tool-call stream.

use std::collections::VecDeque;
use std::hint::black_box;

use agentloop::provider::http::SseDecoder;
use agentloop::provider::openai::ChunkDecoder;
use agentloop::sse::SseParser;
use agentloop::stream::Accumulator;
use agentloop::{Response, StopReason};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const HEAD: &str = r#"{"id":"chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL","object":"chat.completion.chunk","created":1727346168,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":"#;
const USAGE: &str = r#"data: {"id":"chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL","object":"chat.completion.chunk","created":1727346168,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":30,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#;

fn event(delta: &str, finish: &str) -> String {
    format!("data: {HEAD}{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n")
}

/// 60 events: role chunk, 56 content chunks (one with an escaped quote, as real text has),
/// finish chunk, usage chunk, `[DONE]`.
fn text_stream() -> String {
    const WORDS: [&str; 12] = [
        "I'm",
        " unable",
        " to",
        " provide",
        " real",
        "-time",
        " weather",
        " updates",
        ",",
        " but",
        " you",
        " \\\"can\\\"",
    ];
    let mut out = event(
        r#"{"role":"assistant","content":"","refusal":null}"#,
        "null",
    );
    for i in 0..56 {
        out.push_str(&event(
            &format!("{{\"content\":\"{}\"}}", WORDS[i % WORDS.len()]),
            "null",
        ));
    }
    out.push_str(&event("{}", "\"stop\""));
    out.push_str(USAGE);
    out.push_str("\n\ndata: [DONE]\n\n");
    out
}

/// Three parallel calls whose arguments arrive in 6-byte fragments, interleaved.
fn tool_stream() -> String {
    let arguments = [
        r#"{"city":"San Francisco","country":"US","units":"celsius"}"#,
        r#"{"ticker":"AAPL","exchange":"NASDAQ","window":"1d"}"#,
        r#"{"query":"hotels near the Louvre","max_price":250,"nights":2}"#,
    ];
    let names = ["get_weather", "get_stock_price", "search_hotels"];
    let mut out = event(r#"{"role":"assistant","content":null}"#, "null");
    for (i, name) in names.iter().enumerate() {
        out.push_str(&event(
            &format!(
                r#"{{"tool_calls":[{{"index":{i},"id":"call_{i}xYz0123456789abcdef","type":"function","function":{{"name":"{name}","arguments":""}}}}]}}"#
            ),
            "null",
        ));
    }
    let fragments: Vec<Vec<String>> = arguments
        .iter()
        .map(|a| {
            a.as_bytes()
                .chunks(6)
                .map(|c| String::from_utf8_lossy(c).replace('"', "\\\""))
                .collect()
        })
        .collect();
    let longest = fragments.iter().map(Vec::len).max().unwrap_or(0);
    for step in 0..longest {
        for (i, pieces) in fragments.iter().enumerate() {
            if let Some(piece) = pieces.get(step) {
                out.push_str(&event(
                    &format!(
                        r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":"{piece}"}}}}]}}"#
                    ),
                    "null",
                ));
            }
        }
    }
    out.push_str(&event("{}", "\"tool_calls\""));
    out.push_str(USAGE);
    out.push_str("\n\ndata: [DONE]\n\n");
    out
}

/// Parse, decode and assemble one stream delivered in `chunks`.
fn assemble(chunks: &[&[u8]]) -> Response {
    let mut parser = SseParser::new();
    let mut decoder = ChunkDecoder::new("openai");
    let mut events = VecDeque::new();
    let mut acc = Accumulator::new();
    for chunk in chunks {
        parser.feed(black_box(chunk), |e| {
            decoder.event(&e, &mut events).expect("valid stream");
        });
        for event in events.drain(..) {
            acc.push(&event);
        }
    }
    parser.finish(|e| decoder.event(&e, &mut events).expect("valid stream"));
    decoder.end(&mut events).expect("complete stream");
    for event in events.drain(..) {
        acc.push(&event);
    }
    acc.finish()
}

fn bench(c: &mut Criterion) {
    for (name, stream) in [("text", text_stream()), ("tool_calls", tool_stream())] {
        let whole = [stream.as_bytes()];
        // Network-sized pieces that split events anywhere.
        let pieces: Vec<&[u8]> = stream.as_bytes().chunks(512).collect();
        let expected = assemble(&whole);
        assert_eq!(assemble(&pieces), expected);
        let stop = if name == "text" {
            StopReason::EndTurn
        } else {
            assert_eq!(expected.tool_uses().len(), 3);
            StopReason::ToolUse
        };
        assert_eq!(expected.stop_reason, stop);

        let events = stream.matches("data: ").count();
        let mut group = c.benchmark_group(format!("openai_assemble_{name}_{events}_events"));
        group.throughput(Throughput::Bytes(stream.len() as u64));
        group.bench_function("one_slice", |b| b.iter(|| assemble(&whole)));
        group.bench_function("512_byte_pieces", |b| b.iter(|| assemble(&pieces)));
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
