//! End to end against a real model: llama.cpp's OpenAI-compatible server with Gemma 3 270M.
//!
//! `.ci/real-model.sh run -- cargo test --workspace --test real_model` starts the server and sets
//! `AGENTLOOP_REAL_MODEL_URL`; without it every test prints a notice and passes. The model is
//! small: prompts are explicit, temperature is 0, and the assertions are on structure and on
//! values the tools produced, never on wording.

use std::sync::{Arc, Mutex};

use agentloop::conversation::{Conversation, ToolExecution};
use agentloop::output::{Output, OutputStrategy};
use agentloop::provider::route::{self, RouteOptions};
use agentloop::run::{RunEvent, RunStopReason};
use agentloop::{Agent, Message, StopReason, StreamEvent, Tool, ToolResult};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const PROMPT: &str = "What is the weather in Paris? Use the tool.";

fn server_url() -> Option<String> {
    match std::env::var("AGENTLOOP_REAL_MODEL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            agentloop_testkit::skip(
                "real-model test: AGENTLOOP_REAL_MODEL_URL is not set (CI runs it in its real-model stage, through .ci/real-model.sh)",
            );
            None
        }
    }
}

/// Get the current weather for a city
#[derive(Debug, Deserialize, JsonSchema)]
struct GetWeather {
    city: String,
}

fn agent(url: &str, calls: Arc<Mutex<Vec<String>>>) -> Agent {
    let (provider, model) = route::from_model(
        "llamacpp/gemma",
        RouteOptions {
            base_url: Some(url.to_owned()),
            ..RouteOptions::default()
        },
    )
    .expect("the llamacpp preset resolves");
    Agent::builder_shared(provider)
        .model(model)
        .temperature(0.0)
        .max_tool_iterations(2)
        .tool(Tool::function(
            "get_weather",
            "Get the current weather for a city",
            move |w: GetWeather| {
                let calls = calls.clone();
                async move {
                    calls.lock().unwrap().push(w.city.clone());
                    Ok::<_, String>(json!({"temperature_c": 18}))
                }
            },
        ))
        .build()
}

fn check_weather_run(result: &agentloop::RunResult, calls: &[String]) {
    assert_eq!(
        calls,
        ["Paris"],
        "the handler ran once with the typed input"
    );
    assert_eq!(result.stop_reason, RunStopReason::EndTurn, "{result:?}");
    assert_eq!(result.tool_calls, 1);
    let call = &result.steps[0].tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.parse::<GetWeather>().unwrap().city, "Paris");
    assert!(!result.steps[0].tool_results[0].is_error);
    assert!(
        result.text().contains("18"),
        "the answer uses the tool's value: {:?}",
        result.text()
    );
    agentloop::history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn run_loop_blocking_with_a_typed_tool() {
    let Some(url) = server_url() else { return };
    let calls = Arc::new(Mutex::new(Vec::new()));
    let result = agent(&url, calls.clone()).run(PROMPT).await.unwrap();
    check_weather_run(&result, &calls.lock().unwrap());
}

#[tokio::test]
async fn run_loop_streaming_with_a_typed_tool() {
    let Some(url) = server_url() else { return };
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut stream = agent(&url, calls.clone()).run_stream(PROMPT);
    let mut deltas = 0;
    let mut argument_fragments = 0;
    let mut result = None;
    while let Some(event) = stream.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { .. }) => deltas += 1,
            RunEvent::Model(StreamEvent::ToolCallDelta { .. }) => argument_fragments += 1,
            RunEvent::RunFinish { result: r } => result = Some(r),
            _ => {}
        }
    }
    let result = result.expect("the run finished");
    check_weather_run(&result, &calls.lock().unwrap());
    assert!(
        argument_fragments > 1,
        "arguments were streamed in fragments"
    );
    assert!(deltas > 1, "the answer was streamed");
}

#[tokio::test]
async fn conversation_in_manual_mode() {
    let Some(url) = server_url() else { return };
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut chat =
        Conversation::new(&agent(&url, calls.clone())).with_tool_execution(ToolExecution::Manual);
    let first = chat.send(PROMPT).await.unwrap().finish().await.unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingToolResults);
    let pending = chat.pending_tool_calls();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].parse::<GetWeather>().unwrap().city, "Paris");
    chat.add_tool_result(ToolResult::text(&pending[0].id, r#"{"temperature_c":18}"#))
        .unwrap();
    let second = chat.resume().unwrap().finish().await.unwrap();
    assert_eq!(second.stop_reason, RunStopReason::EndTurn);
    assert!(second.text().contains("18"), "{:?}", second.text());
    assert!(
        calls.lock().unwrap().is_empty(),
        "manual mode runs no handler"
    );
    agentloop::history::validate(&chat.history()).unwrap();
}

#[tokio::test]
async fn without_tools_the_answer_is_plain_text() {
    let Some(url) = server_url() else { return };
    let (provider, model) = route::from_model(
        "llamacpp/gemma",
        RouteOptions {
            base_url: Some(url),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    let agent = Agent::builder_shared(provider)
        .model(model)
        .temperature(0.0)
        .build();
    let result = agent.run("Say hello.").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.response.stop_reason, StopReason::EndTurn);
    assert!(result.response.tool_uses().is_empty());
    assert!(!result.text().trim().is_empty());
    assert_eq!(result.turns, 1);
}

/// A country's capital, as a typed answer.
#[derive(Debug, Deserialize, JsonSchema)]
struct Capital {
    /// The capital city.
    city: String,
}

/// A typed answer by the native strategy: `response_format` with a JSON schema, which
/// llama.cpp turns into a grammar that constrains the sampling (its server README,
/// "`response_format`: ... `{"type": "json_schema", "schema": {...}}`"), so even this small
/// base model answers JSON of the shape asked. The value is checked like any typed answer;
/// what it says is not asserted. One worked example comes first: without it the base model
/// starts with whitespace the grammar allows and the server's newline stop cuts it there.
#[tokio::test]
async fn a_typed_answer_through_the_json_schema_grammar() {
    let Some(url) = server_url() else { return };
    let (provider, model) = route::from_model(
        "llamacpp/gemma",
        RouteOptions {
            base_url: Some(url),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    let agent = Agent::builder_shared(provider)
        .model(model)
        .temperature(0.0)
        .build();
    let typed = agent
        .run_output_with(
            vec![
                Message::user("What is the capital of Italy? Answer in JSON."),
                Message::assistant(r#"{"city": "Rome"}"#),
                Message::user("What is the capital of France? Answer in JSON."),
            ],
            Output::<Capital>::new().with_strategy(OutputStrategy::Native),
        )
        .await
        .unwrap();
    assert_eq!(typed.result.stop_reason, RunStopReason::EndTurn);
    assert!(!typed.value.city.trim().is_empty(), "{typed:?}");
    assert!(typed.result.response.tool_uses().is_empty());
}
