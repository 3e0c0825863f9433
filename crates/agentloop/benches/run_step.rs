//! The run loop alone, with no network: an agent on the testkit's scripted model, which streams
//! realistic events from memory. What is left is the loop's own cost per step: request
//! bookkeeping, stream assembly, tool dispatch (validation, spawn, timeout), history and events.
//!
//! - `answer_step`: one model call that answers in 60 text deltas.
//! - `tool_step_then_answer`: the peer benchmark's workload (`benches/peers`): a `get_weather`
//!   call with its arguments in 8 fragments, the tool runs, then the 60-delta answer.
//!
//! Each is measured blocking (`Agent::run`) and streamed (`Agent::run_stream`, every event read).
//!
//! `run_layer`: the peer workload's two model calls replayed from memory (only the events'
//! clone per call), read by `Agent::run_stream` and by a loop written by hand over the provider
//! (assembly, tool call, history; the peer benchmark's `agentloop-provider`). Their difference
//! is what the run layer costs.

use std::hint::black_box;
use std::sync::Arc;

use agentloop::provider::{EventStream, Provider};
use agentloop::run::RunEvent;
use agentloop::stream::{Accumulator, StreamEvent};
use agentloop::{Agent, ContentBlock, Message, Request, Tool, ToolDefinition, ToolResult};
use agentloop_testkit::{ScriptedModel, Turn};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const PROMPT: &str = "What's the weather in Paris?";
const TOOL_NAME: &str = "get_weather";
const TOOL_DESCRIPTION: &str = "Current weather for a city";
/// Model calls per run, at most: the hand loop's bound, and the agent's `max_tool_iterations`
/// plus the call for the answer.
const MAX_TURNS: u32 = 4;

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

/// The tool's result.
fn weather(args: GetWeather) -> serde_json::Value {
    json!({"city": args.city, "temp_c": 18})
}

/// The model's first call: `get_weather` with its arguments in 8 fragments.
fn tool_call_turn() -> Turn {
    Turn::tool_call(TOOL_NAME, json!({"city": "Paris"})).with_argument_pieces(8)
}

/// The model's answer in 60 text deltas.
fn answer_turn(text: String) -> Turn {
    Turn::text(text).with_text_pieces(60)
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

fn agent(model: impl Provider) -> Agent {
    Agent::builder(model)
        .model("m")
        .max_tool_iterations(MAX_TURNS - 1)
        .tool(Tool::function(
            TOOL_NAME,
            TOOL_DESCRIPTION,
            |args: GetWeather| async move { Ok::<_, std::convert::Infallible>(weather(args)) },
        ))
        .build()
}

fn answer_agent() -> Agent {
    let text = answer();
    agent(ScriptedModel::from_fn(move |_, _| answer_turn(text.clone())).unrecorded())
}

fn tool_agent() -> Agent {
    let text = answer();
    agent(
        ScriptedModel::from_fn(move |request, _| {
            if answered_tool(request) {
                answer_turn(text.clone())
            } else {
                tool_call_turn()
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
            RunEvent::Model(StreamEvent::TextDelta { text: delta }) => text += delta.len(),
            RunEvent::Error { error } => panic!("the scripted run failed: {error}"),
            _ => {}
        }
    }
    text
}

/// The peer workload's two model calls, replayed: the tool call, then (once the history holds
/// its result) the answer.
struct Replay {
    tool_call: Vec<StreamEvent>,
    answer: Vec<StreamEvent>,
}

impl Replay {
    fn new() -> Self {
        Self {
            tool_call: tool_call_turn().events(0),
            answer: answer_turn(answer()).events(1),
        }
    }
}

impl Provider for Replay {
    fn name(&self) -> &str {
        "replay"
    }

    fn stream(&self, request: &Request) -> EventStream {
        let events = if answered_tool(request) {
            &self.answer
        } else {
            &self.tool_call
        };
        Box::pin(futures::stream::iter(events.clone().into_iter().map(Ok)))
    }
}

/// The run, written by hand over the provider: what `benches/peers`' `agentloop-provider` does.
async fn hand_loop(provider: &Replay, tool: &ToolDefinition) -> usize {
    let mut request = Request::new("m", vec![Message::user(PROMPT)]);
    request.tools.push(tool.clone());
    for _ in 0..MAX_TURNS {
        let mut events = provider.stream(&request);
        let mut acc = Accumulator::new();
        let mut text = 0;
        while let Some(event) = events.next().await {
            let event = event.expect("replayed events are not errors");
            if let StreamEvent::TextDelta { text: delta } = &event {
                text += delta.len();
            }
            acc.push(&event);
        }
        let response = acc.finish();
        let calls = response.tool_uses();
        if calls.is_empty() {
            return text;
        }
        request.messages.push(response.to_message());
        let results = calls.iter().map(|call| {
            let args: GetWeather = call.parse().expect("the replayed arguments parse");
            ToolResult::json(&call.id, &weather(args)).expect("a JSON value serializes")
        });
        request.messages.push(Message::tool_results(results));
    }
    panic!("the replay did not answer within {MAX_TURNS} model calls")
}

fn bench_run_layer(c: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let replay = Arc::new(Replay::new());
    let agent = agent(Arc::clone(&replay));
    let tool = ToolDefinition::from(
        &Tool::from_type::<GetWeather>()
            .with_name(TOOL_NAME)
            .with_description(TOOL_DESCRIPTION),
    );
    assert_eq!(runtime.block_on(streamed(&agent)), answer().len());
    assert_eq!(runtime.block_on(hand_loop(&replay, &tool)), answer().len());
    let mut group = c.benchmark_group("run_layer");
    group.bench_function("agent_run_stream", |b| {
        b.iter(|| runtime.block_on(streamed(black_box(&agent))))
    });
    group.bench_function("hand_loop", |b| {
        b.iter(|| runtime.block_on(hand_loop(black_box(&replay), black_box(&tool))))
    });
    group.finish();
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
    bench_run_layer(c, &runtime);
}

criterion_group!(benches, bench);
criterion_main!(benches);
