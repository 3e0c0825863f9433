//! Throughput of SSE parsing plus OpenAI Responses stream decoding and assembly, on a text
//! stream and a parallel function-call stream shaped as OpenAI sends them (`event:` lines equal
//! to the data's `type`, `sequence_number`, `item_id`, `obfuscation` and empty `logprobs` on
//! every text delta, as in the recordings of conformance/streams-batch2/openai-responses).

use std::collections::VecDeque;
use std::hint::black_box;

use agentloop::provider::http::SseDecoder;
use agentloop::provider::responses::ResponsesDecoder;
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

const RESPONSE: &str = r#"{"id":"resp_0b1c2d3e4f","object":"response","created_at":1765552659,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"metadata":{}}"#;

fn event(kind: &str, body: &str, sequence: usize) -> String {
    format!(
        "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{sequence},{body}}}\n\n"
    )
}

fn completed(sequence: usize) -> String {
    let done = RESPONSE.replace(r#""status":"in_progress""#, r#""status":"completed""#).replace(
        r#""usage":null"#,
        r#""usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":0},"output_tokens":1600,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2800}"#,
    );
    event(
        "response.completed",
        &format!("\"response\":{done}"),
        sequence,
    )
}

/// 400 text deltas of a few words each, framed by the item and response events.
fn text_stream() -> Vec<String> {
    let item = "\"item_id\":\"msg_0b1c2d3e4f5a6b7c8d9e\",\"output_index\":0";
    let mut events = vec![
        event("response.created", &format!("\"response\":{RESPONSE}"), 0),
        event(
            "response.in_progress",
            &format!("\"response\":{RESPONSE}"),
            1,
        ),
        event(
            "response.output_item.added",
            r#""output_index":0,"item":{"id":"msg_0b1c2d3e4f5a6b7c8d9e","type":"message","status":"in_progress","content":[],"role":"assistant"}"#,
            2,
        ),
        event(
            "response.content_part.added",
            &format!(
                r#"{item},"content_index":0,"part":{{"type":"output_text","annotations":[],"logprobs":[],"text":""}}"#
            ),
            3,
        ),
    ];
    for i in 0..400 {
        let text: String = (0..4).map(|j| WORDS[(i * 4 + j) % WORDS.len()]).collect();
        events.push(event(
            "response.output_text.delta",
            &format!(
                r#"{item},"content_index":0,"delta":"{text}","logprobs":[],"obfuscation":"kR2xQ7""#
            ),
            i + 4,
        ));
    }
    events.push(event(
        "response.output_item.done",
        r#""output_index":0,"item":{"id":"msg_0b1c2d3e4f5a6b7c8d9e","type":"message","status":"completed","content":[],"role":"assistant"}"#,
        404,
    ));
    events.push(completed(405));
    events
}

/// 40 parallel calls with nested arguments in 4 deltas each.
fn tool_stream() -> Vec<String> {
    let mut events = vec![event(
        "response.created",
        &format!("\"response\":{RESPONSE}"),
        0,
    )];
    for i in 0..40 {
        let n = events.len();
        events.push(event(
            "response.output_item.added",
            &format!(r#""output_index":{i},"item":{{"id":"fc_{i:020}","type":"function_call","status":"in_progress","arguments":"","call_id":"call_{i:024}","name":"edit_file"}}"#),
            n,
        ));
        let arguments = format!(
            r#"{{\"path\":\"src/module_{i}.rs\",\"line\":{i},\"content\":\"fn line_{i}() {{ println!(\\\"{i}\\\"); }}\"}}"#
        );
        let quarter = arguments.len() / 4;
        let mut rest = arguments.as_str();
        while !rest.is_empty() {
            let mut cut = quarter.min(rest.len()).max(1);
            // Never split an escape.
            while cut < rest.len() && rest.as_bytes()[cut - 1] == b'\\' {
                cut += 1;
            }
            let (piece, tail) = rest.split_at(cut);
            rest = tail;
            let n = events.len();
            events.push(event(
                "response.function_call_arguments.delta",
                &format!(r#""item_id":"fc_{i:020}","output_index":{i},"delta":"{piece}","obfuscation":"x1""#),
                n,
            ));
        }
        let n = events.len();
        events.push(event(
            "response.output_item.done",
            &format!(r#""output_index":{i},"item":{{"id":"fc_{i:020}","type":"function_call","status":"completed","arguments":"{arguments}","call_id":"call_{i:024}","name":"edit_file"}}"#),
            n,
        ));
    }
    let n = events.len();
    events.push(completed(n));
    events
}

/// Parse, decode and assemble one stream fed as `chunks`.
fn assemble(chunks: &[&[u8]]) -> Response {
    let mut parser = SseParser::new();
    let mut decoder = ResponsesDecoder::new();
    let mut out = VecDeque::new();
    let mut acc = Accumulator::new();
    for chunk in chunks {
        parser.feed(black_box(chunk), |event| {
            if let Err(e) = decoder.event(&event, &mut out) {
                panic!("{e}: {}", event.data);
            }
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

    let mut group = c.benchmark_group(format!("responses_{name}_{}_events", events.len()));
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
    let text = text_stream();
    let tools = tool_stream();
    // The fixtures must assemble to what they say, or the numbers measure an error path.
    let stream = text.concat();
    let response = assemble(&[stream.as_bytes()]);
    assert!(response.text().starts_with(" The borrow checker ensures"));
    let stream = tools.concat();
    let response = assemble(&[stream.as_bytes()]);
    assert_eq!(response.tool_uses().len(), 40);
    assert!(response.tool_uses().iter().all(|c| c.input.is_object()));
    bench_stream(c, "text", &text);
    bench_stream(c, "tool_use", &tools);
}

criterion_group!(benches, bench);
criterion_main!(benches);
