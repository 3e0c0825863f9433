//! Throughput of Bedrock `ConverseStream` decoding and assembly (event-stream framing with its
//! CRCs, then the decoder and the accumulator), on a text stream and a tool-use stream shaped
//! as Bedrock sends them (every payload with its `"p"` padding, as in the recordings).

use std::collections::VecDeque;
use std::hint::black_box;

use agentloop::provider::bedrock::{BedrockDecoder, eventstream};
use agentloop::provider::http::BodyDecoder;
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

const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fn padding(i: usize) -> &'static str {
    &PADDING[..(i * 7) % PADDING.len()]
}

fn frame(kind: &str, payload: String) -> Vec<u8> {
    eventstream::event(kind, payload.as_bytes())
}

fn end(frames: &mut Vec<Vec<u8>>, stop: &str) {
    frames.push(frame(
        "messageStop",
        format!("{{\"p\":\"{}\",\"stopReason\":\"{stop}\"}}", padding(3)),
    ));
    frames.push(frame(
        "metadata",
        format!(
            "{{\"metrics\":{{\"latencyMs\":1999}},\"p\":\"{}\",\"usage\":{{\"inputTokens\":1200,\"outputTokens\":1600,\"serverToolUsage\":{{}},\"totalTokens\":2800}}}}",
            padding(5)
        ),
    ));
}

/// 400 deltas of a few words each, as Bedrock streams long answers.
fn text_stream() -> Vec<Vec<u8>> {
    let mut frames = vec![frame(
        "messageStart",
        format!("{{\"p\":\"{}\",\"role\":\"assistant\"}}", padding(1)),
    )];
    for i in 0..400 {
        let text: String = (0..4).map(|j| WORDS[(i * 4 + j) % WORDS.len()]).collect();
        frames.push(frame(
            "contentBlockDelta",
            format!(
                "{{\"contentBlockIndex\":0,\"delta\":{{\"text\":\"{text}\"}},\"p\":\"{}\"}}",
                padding(i)
            ),
        ));
    }
    frames.push(frame(
        "contentBlockStop",
        "{\"contentBlockIndex\":0,\"p\":\"abc\"}".to_owned(),
    ));
    end(&mut frames, "end_turn");
    frames
}

/// Signed reasoning, then 40 tool uses with nested arguments in 3 input deltas each.
fn tool_stream() -> Vec<Vec<u8>> {
    let mut frames = vec![
        frame("messageStart", "{\"role\":\"assistant\"}".to_owned()),
        frame(
            "contentBlockDelta",
            "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"Planning the edits\"}}}".to_owned(),
        ),
        frame(
            "contentBlockDelta",
            "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"signature\":\"Eu0CCkgIBxABGAIqQJDccbDQkr81n7QjZ0Fi43umSvw0YvnGkMPEpaGAa2btYHyWw06KhwckvsnKzpKcxiRJT35meoG4\"}}}".to_owned(),
        ),
        frame("contentBlockStop", "{\"contentBlockIndex\":0}".to_owned()),
    ];
    for i in 1..=40 {
        frames.push(frame(
            "contentBlockStart",
            format!(
                "{{\"contentBlockIndex\":{i},\"p\":\"{}\",\"start\":{{\"toolUse\":{{\"name\":\"edit_file\",\"toolUseId\":\"tooluse_{i:020}\"}}}}}}",
                padding(i)
            ),
        ));
        let input = format!(
            "{{\"path\":\"src/module_{i}.rs\",\"line\":{i},\"content\":\"fn line_{i}() {{ println!(\\\"{i}\\\"); }}\"}}"
        );
        let json = serde_json::to_string(&input).expect("a string");
        let json = &json[1..json.len() - 1];
        let third = json.len() / 3;
        // Cut only between characters that are not part of an escape.
        let mut cuts = vec![0];
        for target in [third, 2 * third] {
            let mut at = target;
            while json.as_bytes()[at - 1] == b'\\' {
                at += 1;
            }
            cuts.push(at);
        }
        cuts.push(json.len());
        for piece in cuts.windows(2) {
            frames.push(frame(
                "contentBlockDelta",
                format!(
                    "{{\"contentBlockIndex\":{i},\"delta\":{{\"toolUse\":{{\"input\":\"{}\"}}}},\"p\":\"{}\"}}",
                    &json[piece[0]..piece[1]],
                    padding(i + 1)
                ),
            ));
        }
        frames.push(frame(
            "contentBlockStop",
            format!("{{\"contentBlockIndex\":{i}}}"),
        ));
    }
    end(&mut frames, "tool_use");
    frames
}

/// Decode and assemble one stream fed as `chunks`.
fn assemble(chunks: &[&[u8]]) -> Response {
    let mut decoder = BedrockDecoder::new();
    let mut out = VecDeque::new();
    let mut acc = Accumulator::new();
    for chunk in chunks {
        let mut rest = black_box(*chunk);
        while !rest.is_empty() {
            let read = decoder.feed_until(rest, &mut out).expect("decodes");
            rest = &rest[read..];
            for event in out.drain(..) {
                acc.push(&event);
            }
        }
    }
    decoder.finish(&mut out).expect("complete");
    for event in out.drain(..) {
        acc.push(&event);
    }
    acc.finish()
}

fn bench_stream(c: &mut Criterion, name: &str, frames: &[Vec<u8>]) {
    let stream = frames.concat();
    let per_event: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    // Network reads rarely line up with frames; 1.4 kB is about one TLS record of payload.
    let records: Vec<&[u8]> = stream.chunks(1400).collect();
    let whole = assemble(&[stream.as_slice()]);
    assert_eq!(assemble(&per_event), whole);
    assert_eq!(assemble(&records), whole);

    let mut group = c.benchmark_group(format!("bedrock_{name}_{}_frames", frames.len()));
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("assemble_1400_byte_reads", |b| {
        b.iter(|| assemble(&records))
    });
    group.bench_function("assemble_frame_per_read", |b| {
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
