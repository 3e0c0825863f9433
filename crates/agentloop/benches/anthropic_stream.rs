//! Throughput of SSE parsing plus Anthropic stream decoding and assembly, on a realistic text
//! stream and a tool-use stream (shapes as the Messages API sends them, with pings and the
//! full usage object).

use std::collections::VecDeque;
use std::hint::black_box;

use agentloop::provider::anthropic::AnthropicDecoder;
use agentloop::provider::http::SseDecoder;
use agentloop::sse::SseParser;
use agentloop::{Accumulator, Response};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const WORDS: [&str; 16] = [
    " The",
    " borrow",
    " checker",
    " ensures",
    " that",
    " references",
    " never",
    " outlive",
    " the",
    " data",
    " they",
    " point",
    " to",
    ",",
    " and\\n",
    " \\\"safety\\\"",
];

fn event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start() -> String {
    event(
        "message_start",
        r#"{"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","id":"msg_01QC4g3HwBThD4BaNtBckFDJ","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}"#,
    )
}

fn text_deltas(index: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            // Anthropic sends a few words per delta.
            let text: String = (0..3).map(|j| WORDS[(i * 3 + j) % WORDS.len()]).collect();
            event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":"{text}"}}}}"#
                ),
            )
        })
        .collect()
}

fn finish(stop_reason: &str, output_tokens: u32) -> Vec<String> {
    vec![
        event(
            "message_delta",
            &format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{output_tokens}}}}}"#
            ),
        ),
        event("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

/// ~400 text deltas in one block, with pings.
fn text_stream() -> Vec<String> {
    let mut events = vec![
        message_start(),
        event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        event("ping", r#"{"type": "ping"}"#),
    ];
    for (i, delta) in text_deltas(0, 400).into_iter().enumerate() {
        events.push(delta);
        if i % 100 == 99 {
            events.push(event("ping", r#"{"type": "ping"}"#));
        }
    }
    events.push(event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    events.extend(finish("end_turn", 1100));
    events
}

/// A short text, then two tool calls whose arguments come in ~120 fragments each.
fn tool_stream() -> Vec<String> {
    let mut events = vec![
        message_start(),
        event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
    ];
    events.extend(text_deltas(0, 10));
    events.push(event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    for (index, id) in [
        (1, "toolu_01NRLabsLyVHZPKxbKvkfSMn"),
        (2, "toolu_01EKqbqmZrGRXy18eN7m9kvY"),
    ] {
        events.push(event(
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"write_file","input":{{}}}}}}"#
            ),
        ));
        let mut arguments = String::from(r#"{"path": "src/main.rs", "lines": ["#);
        for line in 0..80 {
            arguments.push_str(&format!(
                r#""fn line_{line}() {{ println!(\"{line}\"); }}","#
            ));
        }
        arguments.push_str(r#""// end"]}"#);
        let chars: Vec<char> = arguments.chars().collect();
        for piece in chars.chunks(40) {
            let piece: String = piece.iter().collect();
            let partial = serde_json::to_string(&piece).expect("string");
            events.push(event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"input_json_delta","partial_json":{partial}}}}}"#
                ),
            ));
        }
        events.push(event(
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        ));
    }
    events.extend(finish("tool_use", 2400));
    events
}

/// Parse, decode and assemble one stream fed as `chunks`.
fn assemble(chunks: &[&[u8]]) -> Response {
    let mut parser = SseParser::new();
    let mut decoder = AnthropicDecoder::new();
    let mut out = VecDeque::new();
    let mut acc = Accumulator::new();
    for chunk in chunks {
        parser.feed(black_box(chunk), |event| {
            decoder.event(&event, &mut out).expect("decodes");
        });
        for event in out.drain(..) {
            acc.push(&event);
        }
    }
    parser.finish(|event| {
        decoder.event(&event, &mut out).expect("decodes");
    });
    decoder.end(&mut out).expect("complete");
    for event in out.drain(..) {
        acc.push(&event);
    }
    acc.finish()
}

fn parse_only(chunks: &[&[u8]]) -> usize {
    let mut parser = SseParser::new();
    let mut sum = 0;
    for chunk in chunks {
        parser.feed(black_box(chunk), |e| sum += e.data.len());
    }
    parser.finish(|e| sum += e.data.len());
    sum
}

fn bench_stream(c: &mut Criterion, name: &str, events: &[String]) {
    let stream = events.concat();
    let per_event: Vec<&[u8]> = events.iter().map(|e| e.as_bytes()).collect();
    // Network reads rarely line up with events; 1.4 kB is about one TLS record of payload.
    let records: Vec<&[u8]> = stream.as_bytes().chunks(1400).collect();
    let whole = assemble(&[stream.as_bytes()]);
    assert_eq!(assemble(&per_event), whole);
    assert_eq!(assemble(&records), whole);

    let mut group = c.benchmark_group(format!("anthropic_{name}_{}_events", events.len()));
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("sse_parse_only", |b| b.iter(|| parse_only(&records)));
    group.bench_function("assemble_1400_byte_reads", |b| {
        b.iter(|| assemble(&records))
    });
    group.bench_function("assemble_chunk_per_event", |b| {
        b.iter(|| assemble(&per_event))
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    bench_stream(c, "text", &text_stream());
    bench_stream(c, "tool_use", &tool_stream());
}

criterion_group!(benches, bench);
criterion_main!(benches);
