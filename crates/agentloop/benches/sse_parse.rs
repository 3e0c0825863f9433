//! Throughput of the SSE parser on a realistic OpenAI chat-completions stream.

use std::hint::black_box;

use agentloop::sse::SseParser;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const WORDS: [&str; 12] = [
    "I'm", " unable", " to", " provide", " real", "-time", " weather", " updates", ",", " but",
    " you", " can",
];

/// ~60 `data: {json}\n\n` events shaped like a gpt-4o stream, one per entry.
fn openai_events() -> Vec<String> {
    const HEAD: &str = r#"{"id":"chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL","object":"chat.completion.chunk","created":1727346168,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":"#;
    let mut events = vec![format!(
        "data: {HEAD}{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )];
    for i in 0..56 {
        let word = WORDS[i % WORDS.len()];
        events.push(format!(
            "data: {HEAD}{{\"content\":\"{word}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    events.push(format!(
        "data: {HEAD}{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}]}}\n\n"
    ));
    events.push(r#"data: {"id":"chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL","object":"chat.completion.chunk","created":1727346168,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":30,"total_tokens":44,"completion_tokens_details":{"reasoning_tokens":0}}}"#.to_owned() + "\n\n");
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// Parses the chunks as one stream; returns a checksum so nothing is elided.
fn run(parser: &mut SseParser, chunks: &[&[u8]]) -> usize {
    let mut sum = 0;
    for chunk in chunks {
        parser.feed(black_box(chunk), |e| sum += e.data.len() + e.event.len());
    }
    parser.finish(|e| sum += e.data.len());
    sum
}

fn bench(c: &mut Criterion) {
    let events = openai_events();
    let stream = events.concat();
    let per_event: Vec<&[u8]> = events.iter().map(|e| e.as_bytes()).collect();
    let pieces: Vec<&[u8]> = stream.as_bytes().chunks(7).collect();
    let expected = run(&mut SseParser::new(), &[stream.as_bytes()]);
    assert_eq!(run(&mut SseParser::new(), &per_event), expected);
    assert_eq!(run(&mut SseParser::new(), &pieces), expected);

    let mut group = c.benchmark_group(format!("openai_{}_events", events.len()));
    group.throughput(Throughput::Bytes(stream.len() as u64));
    let mut parser = SseParser::new();
    group.bench_function("one_slice", |b| {
        b.iter(|| run(&mut parser, &[stream.as_bytes()]))
    });
    group.bench_function("chunk_per_event", |b| {
        b.iter(|| run(&mut parser, &per_event))
    });
    group.bench_function("7_byte_pieces", |b| b.iter(|| run(&mut parser, &pieces)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
