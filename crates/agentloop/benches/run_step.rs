//! The run loop alone, with no network: an agent on the testkit's scripted model, which streams
//! realistic events from memory. What is left is the loop's own cost per step: request
//! bookkeeping, stream assembly, tool dispatch (validation, spawn, timeout), history and events.
//!
//! - `answer_step`: one model call that answers in 60 text deltas.
//! - `tool_step_then_answer`: the peer benchmark's workload (`benches/peers`): a `get_weather`
//!   call with its arguments in 8 fragments, the tool runs, then the 60-delta answer.
//!
//! Each is measured blocking (`Agent::run`) and streamed (`Agent::run_stream`, every event read).

use std::hint::black_box;

use agentloop::run::RunEvent;
use agentloop::{Agent, ContentBlock, Request, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const PROMPT: &str = "What's the weather in Paris?";

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. Paris
    city: String,
}

/// A 155-word answer, as the peer benchmark's server sends.
fn answer() -> String {
    let words = "It is mild in Paris today with light wind from the west and a few clouds";
    let mut text = String::new();
    for word in words.split(' ').cycle().take(155) {
        text.push_str(word);
        text.push(' ');
    }
    text
}

/// Has the conversation had a tool result yet?
fn answered_tool(request: &Request) -> bool {
    request.messages.iter().any(|message| {
        message
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolResult(_)))
    })
}

fn agent(model: ScriptedModel) -> Agent {
    Agent::builder(model)
        .model("m")
        .max_turns(4)
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |args: GetWeather| async move {
                Ok::<_, std::convert::Infallible>(json!({"city": args.city, "temp_c": 18}))
            },
        ))
        .build()
}

fn answer_agent() -> Agent {
    let text = answer();
    agent(
        ScriptedModel::from_fn(move |_, _| Turn::text(text.clone()).with_text_pieces(60))
            .unrecorded(),
    )
}

fn tool_agent() -> Agent {
    let text = answer();
    agent(
        ScriptedModel::from_fn(move |request, _| {
            if answered_tool(request) {
                Turn::text(text.clone()).with_text_pieces(60)
            } else {
                Turn::tool_call("get_weather", json!({"city": "Paris"})).with_argument_pieces(8)
            }
        })
        .unrecorded(),
    )
}

async fn blocking(agent: &Agent) -> usize {
    let result = agent.run(PROMPT).await.expect("the scripted run succeeds");
    result.text().len()
}

async fn streamed(agent: &Agent) -> usize {
    let mut events = agent.run_stream(PROMPT);
    let mut text = 0;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::TextDelta { text: delta } => text += delta.len(),
            RunEvent::Error { error } => panic!("the scripted run failed: {error}"),
            _ => {}
        }
    }
    text
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("run_loop_scripted");
    for (name, agent) in [
        ("answer_step", answer_agent()),
        ("tool_step_then_answer", tool_agent()),
    ] {
        // A run that does not reach the answer would measure something else.
        assert_eq!(runtime.block_on(blocking(&agent)), answer().len());
        assert!(runtime.block_on(streamed(&agent)) >= answer().len());
        group.bench_function(format!("{name}/run"), |b| {
            b.iter(|| runtime.block_on(blocking(black_box(&agent))))
        });
        group.bench_function(format!("{name}/run_stream"), |b| {
            b.iter(|| runtime.block_on(streamed(black_box(&agent))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
