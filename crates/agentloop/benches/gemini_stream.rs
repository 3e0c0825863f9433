//! Throughput of SSE parsing plus Gemini stream decoding and assembly, on a text stream and a
//! parallel function-call stream shaped as the Gemini API sends them (every chunk a whole
//! `GenerateContentResponse` with usage, model version and response id; `\r\n\r\n` framing).

use std::collections::VecDeque;
use std::hint::black_box;

use agentloop::provider::gemini::GeminiDecoder;
use agentloop::provider::http::SseDecoder;
use agentloop::sse::SseParser;
use agentloop::{Accumulator, Response};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const WORDS: [&str; 12] = [
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
];

fn chunk(parts: &str, finish: Option<&str>, output: usize) -> String {
    let finish = finish
        .map(|f| format!(",\"finishReason\": \"{f}\""))
        .unwrap_or_default();
    format!(
        "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{parts}],\"role\": \"model\"}}{finish},\"index\": 0}}],\"usageMetadata\": {{\"promptTokenCount\": 1200,\"candidatesTokenCount\": {output},\"totalTokenCount\": {},\"promptTokensDetails\": [{{\"modality\": \"TEXT\",\"tokenCount\": 1200}}],\"thoughtsTokenCount\": 412}},\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"ftnJaMmAMcm-qtsPwvCCoAo\"}}\r\n\r\n",
        1200 + output + 412
    )
}

/// 400 chunks of a few words each, as Gemini streams long answers.
fn text_stream() -> Vec<String> {
    let mut events = Vec::new();
    for i in 0..400 {
        let text: String = (0..4).map(|j| WORDS[(i * 4 + j) % WORDS.len()]).collect();
        events.push(chunk(&format!("{{\"text\": \"{text}\"}}"), None, i * 4));
    }
    events.push(chunk("{\"text\": \"\"}", Some("STOP"), 1600));
    events
}

/// Signed reasoning, then 40 parallel calls with nested arguments, one per chunk.
fn tool_stream() -> Vec<String> {
    let mut events = vec![chunk(
        "{\"text\": \"**Planning** the edits\",\"thought\": true}",
        None,
        0,
    )];
    for i in 0..40 {
        let signature = if i == 0 {
            ",\"thoughtSignature\": \"CiQBjz1rX+z7CAOCNB0aLI7ypObFNPY+MRlb2NP1K12YF4ii184KZgGPPWtf8hWSKLNch1ghUKZUmYaaRmvoMXkZVop6kweQzDMWIG7n\""
        } else {
            ""
        };
        events.push(chunk(
            &format!(
                "{{\"functionCall\": {{\"name\": \"edit_file\",\"args\": {{\"path\": \"src/module_{i}.rs\",\"line\": {i},\"content\": \"fn line_{i}() {{ println!(\\\"{i}\\\"); }}\"}}}}{signature}}}"
            ),
            None,
            i * 30,
        ));
    }
    events.push(chunk("{\"text\": \"\"}", Some("STOP"), 1200));
    events
}

/// Parse, decode and assemble one stream fed as `chunks`.
fn assemble(chunks: &[&[u8]]) -> Response {
    let mut parser = SseParser::new();
    let mut decoder = GeminiDecoder::new();
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

fn bench_stream(c: &mut Criterion, name: &str, events: &[String]) {
    let stream = events.concat();
    let per_event: Vec<&[u8]> = events.iter().map(|e| e.as_bytes()).collect();
    // Network reads rarely line up with events; 1.4 kB is about one TLS record of payload.
    let records: Vec<&[u8]> = stream.as_bytes().chunks(1400).collect();
    let whole = assemble(&[stream.as_bytes()]);
    assert_eq!(assemble(&per_event), whole);
    assert_eq!(assemble(&records), whole);

    let mut group = c.benchmark_group(format!("gemini_{name}_{}_events", events.len()));
    group.throughput(Throughput::Bytes(stream.len() as u64));
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
