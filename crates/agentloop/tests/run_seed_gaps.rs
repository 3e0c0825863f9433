//! Issue 37 items 4-6 against the scripted model: stop conditions before the tools or after
//! the step, step events carrying the response and the provider's own events, the tool
//! iteration limit, hooks that see the history, and direct tool execution.

use std::sync::{Arc, Mutex};

use agentloop::run::{RunStopReason, ToolOutcome};
use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolResult, history};
use agentloop_testkit::{ScriptedModel, Turn};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Get the current weather for a city.
#[derive(Debug, Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn weather_tool(calls: Arc<Mutex<Vec<String>>>) -> Tool {
    Tool::function("get_weather", "Current weather", move |w: GetWeather| {
        let calls = calls.clone();
        async move {
            calls.lock().unwrap().push(w.city.clone());
            Ok::<_, String>(format!("18 °C in {}", w.city))
        }
    })
}

fn tool_use(id: &str, name: &str, input: serde_json::Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

fn results(blocks: impl IntoIterator<Item = ToolResult>) -> Message {
    Message::new(
        Role::User,
        blocks.into_iter().map(ContentBlock::ToolResult).collect(),
    )
}

/// Seed 001: "N tool iterations" are N rounds of tools and then the answer, so a model that
/// needs exactly N rounds gets to answer.
#[tokio::test]
async fn a_model_that_needs_exactly_n_tool_rounds_gets_to_answer() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::tool_call("get_weather", json!({"city": "Rome"})),
        Turn::text("Paris and Rome: 18 °C."),
    ]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .max_tool_iterations(2)
        .build();
    let result = agent.run("Weather?").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "Paris and Rome: 18 °C.");
    assert_eq!(result.turns, 3);
    assert_eq!(*seen.lock().unwrap(), ["Paris", "Rome"]);
    model.assert_complete();
}

/// After N rounds the model must answer: calls it still makes are answered as not run, and
/// the run stops with `max_tool_iterations` and a valid history.
#[tokio::test]
async fn calls_past_the_iteration_limit_are_answered_as_not_run() {
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("get_weather", json!({"city": format!("C{i}")}))
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .max_tool_iterations(1)
        .build();
    let result = agent.run("Loop").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
    assert_eq!(result.stop_reason.to_string(), "max_tool_iterations");
    assert_eq!(model.calls(), 2);
    assert_eq!(*seen.lock().unwrap(), ["C0"]);
    assert_eq!(result.tool_calls, 1);
    assert_eq!(
        result.messages,
        vec![
            Message::user("Loop"),
            Message::new(
                Role::Assistant,
                vec![tool_use("call_0_0", "get_weather", json!({"city": "C0"}))]
            ),
            results([ToolResult::text("call_0_0", "18 °C in C0")]),
            Message::new(
                Role::Assistant,
                vec![tool_use("call_1_0", "get_weather", json!({"city": "C1"}))]
            ),
            results([ToolResult::error(
                "call_1_0",
                "Error: the call to `get_weather` was not run: the run's limit of 1 tool \
                 iterations was reached"
            )]),
        ]
    );
    assert!(matches!(
        result.finished(),
        Err(agentloop::Error::Incomplete { reason }) if reason == "max_tool_iterations"
    ));
}

/// A limit of 0 lets the model answer but runs no tool.
#[tokio::test]
async fn zero_tool_iterations_make_one_model_call() {
    let model = ScriptedModel::new([Turn::tool_call("get_weather", json!({"city": "A"}))]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .max_tool_iterations(0)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
    assert_eq!(result.turns, 1);
    assert!(seen.lock().unwrap().is_empty());
    history::validate(&result.messages).unwrap();
    model.assert_complete();
}

/// A stored result from before the rename still reads.
#[test]
fn the_old_stop_reason_name_still_deserializes() {
    let reason: RunStopReason = serde_json::from_value(json!("max_turns")).unwrap();
    assert_eq!(reason, RunStopReason::MaxToolIterations);
    let limits: agentloop::run::Limits = serde_json::from_value(json!({
        "max_turns": 4, "max_tool_calls": null, "max_total_tokens": null,
        "invalid_argument_retries": 2
    }))
    .unwrap();
    assert_eq!(limits.max_tool_iterations, 4);
}

fn finish_tool(ran: Arc<Mutex<Vec<String>>>) -> Tool {
    Tool::function(
        "finish",
        "Give the final answer",
        move |_: serde_json::Map<String, serde_json::Value>| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push("finish".into());
                Ok::<_, String>("ok")
            }
        },
    )
}

fn finish_batch() -> ScriptedModel {
    ScriptedModel::new([Turn::tool_calls([
        ("get_weather", json!({"city": "Paris"})),
        ("finish", json!({"answer": "done"})),
        ("get_weather", json!({"city": "Rome"})),
    ])])
}

fn batch_message() -> Message {
    Message::new(
        Role::Assistant,
        vec![
            tool_use("call_0_0", "get_weather", json!({"city": "Paris"})),
            tool_use("call_0_1", "finish", json!({"answer": "done"})),
            tool_use("call_0_2", "get_weather", json!({"city": "Rome"})),
        ],
    )
}

/// Seed 000's `WithStopWhen` looks at the response before its tools run: a condition made to
/// act then stops the run without running any call of the batch, each answered as not run.
#[tokio::test]
async fn a_stop_condition_before_the_tools_runs_none_of_the_batch() {
    let model = finish_batch();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(ran.clone()))
        .tool(finish_tool(ran.clone()))
        .stop_when(agentloop::run::StopCondition::tool_called("finish").before_tools())
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::Custom("tool_called(finish)".into())
    );
    assert!(ran.lock().unwrap().is_empty());
    assert_eq!(result.tool_calls, 0);
    assert_eq!(result.turns, 1);
    let not_run = |id: &str, name: &str| {
        ToolResult::error(
            id,
            format!(
                "Error: the call to `{name}` was not run: the run stopped (stop condition \
                 `tool_called(finish)`)"
            ),
        )
    };
    assert_eq!(
        result.messages,
        vec![
            Message::user("go"),
            batch_message(),
            results([
                not_run("call_0_0", "get_weather"),
                not_run("call_0_1", "finish"),
                not_run("call_0_2", "get_weather"),
            ]),
        ]
    );
    assert!(
        result.steps[0]
            .outcomes
            .iter()
            .all(|o| matches!(o, ToolOutcome::Cancelled { .. }))
    );
    model.assert_complete();
}

/// The default moment is after the step: the whole batch runs, then the run stops.
#[tokio::test]
async fn a_stop_condition_after_the_step_runs_the_whole_batch_first() {
    for condition in [
        agentloop::run::StopCondition::tool_called("finish"),
        agentloop::run::StopCondition::tool_called("finish")
            .before_tools()
            .after_step(),
    ] {
        let model = finish_batch();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let agent = Agent::builder(model.clone())
            .tool(weather_tool(ran.clone()))
            .tool(finish_tool(ran.clone()))
            .stop_when(condition)
            .max_concurrency(1)
            .build();
        let result = agent.run("go").await.unwrap();
        assert_eq!(
            result.stop_reason,
            RunStopReason::Custom("tool_called(finish)".into())
        );
        assert_eq!(*ran.lock().unwrap(), ["Paris", "finish", "Rome"]);
        assert_eq!(result.tool_calls, 3);
        assert_eq!(
            result.messages,
            vec![
                Message::user("go"),
                batch_message(),
                results([
                    ToolResult::text("call_0_0", "18 °C in Paris"),
                    ToolResult::text("call_0_1", "ok"),
                    ToolResult::text("call_0_2", "18 °C in Rome"),
                ]),
            ]
        );
        model.assert_complete();
    }
}

fn events_json(events: &[agentloop::run::RunEvent]) -> Vec<serde_json::Value> {
    events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

/// The streamed run of a stopped batch: every call is ready, then gets its result event, then
/// the step's end.
#[tokio::test]
async fn a_streamed_stop_before_the_tools_reports_each_call_not_run() {
    use futures::StreamExt;
    let model = finish_batch();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(ran.clone()))
        .tool(finish_tool(ran.clone()))
        .stop_when(agentloop::run::StopCondition::tool_called("finish").before_tools())
        .build();
    let events: Vec<_> = agent.run_stream("go").collect().await;
    let kinds: Vec<String> = events
        .iter()
        .filter(|e| e.as_model().is_none())
        .map(|e| match e {
            agentloop::run::RunEvent::ToolCallReady { call } => {
                format!("tool_call_ready {}", call.id)
            }
            agentloop::run::RunEvent::ToolCallResult { id, outcome, .. } => {
                format!("tool_call_result {id} {}", outcome.kind())
            }
            other => other.kind().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "run_start",
            "step_start",
            "tool_call_ready call_0_0",
            "tool_call_ready call_0_1",
            "tool_call_ready call_0_2",
            "tool_call_result call_0_0 cancelled",
            "tool_call_result call_0_1 cancelled",
            "tool_call_result call_0_2 cancelled",
            "step_finish",
            "run_finish",
        ]
    );
    assert!(ran.lock().unwrap().is_empty());
}

/// Seed 000's step-complete event carries the step's response.
#[tokio::test]
async fn step_finish_carries_the_steps_whole_response() {
    use agentloop::run::RunEvent;
    use futures::StreamExt;
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(10, 2),
        Turn::text("Sunny.").with_usage(20, 3),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .build();
    let events: Vec<RunEvent> = agent.run_stream("Weather?").collect().await;
    let finishes: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::StepFinish {
                step,
                stop_reason,
                usage,
                response,
            } => Some((*step, stop_reason.clone(), *usage, (**response).clone())),
            _ => None,
        })
        .collect();
    let Some(RunEvent::RunFinish { result }) = events.last() else {
        panic!("the run did not finish: {events:?}");
    };
    assert_eq!(finishes.len(), 2);
    for ((step, stop_reason, usage, response), recorded) in finishes.iter().zip(&result.steps) {
        assert_eq!(*step, recorded.index);
        assert_eq!(response, &recorded.response);
        assert_eq!(*stop_reason, recorded.response.stop_reason);
        assert_eq!(*usage, recorded.response.usage);
    }
    assert_eq!(finishes[0].3.tool_uses()[0].input, json!({"city": "Paris"}));
    assert_eq!(finishes[1].3.text(), "Sunny.");
    // Serialized, the event carries it too.
    let json = serde_json::to_value(events.iter().rev().nth(1).unwrap()).unwrap();
    assert_eq!(json["type"], "step_finish");
    assert_eq!(
        json["response"]["content"],
        json!([{"type": "text", "text": "Sunny."}])
    );
}

/// A streamed run shows every event of the model call's stream as it came, under its own
/// `type`, between the step's start and finish.
#[tokio::test]
async fn the_model_calls_events_come_as_they_are() {
    use futures::StreamExt;
    let turn = || Turn::text("Sunny and mild").with_usage(20, 3);
    let expected_model = turn().events(0);
    // message_start, three text pieces, usage and message_stop.
    assert_eq!(expected_model.len(), 6);

    let model = ScriptedModel::new([turn()]);
    let agent = Agent::builder(model.clone()).build();
    let events: Vec<_> = agent.run_stream("Weather?").collect().await;
    let mut expected = vec![
        json!({"type": "run_start"}),
        json!({"type": "step_start", "step": 0}),
    ];
    expected.extend(
        expected_model
            .iter()
            .map(|e| serde_json::to_value(e).unwrap()),
    );
    let json = events_json(&events);
    assert_eq!(json.len(), expected.len() + 2, "{json:#?}");
    assert_eq!(json[..expected.len()], expected[..]);
    assert_eq!(json[expected.len()]["type"], "step_finish");
    assert_eq!(json[expected.len() + 1]["type"], "run_finish");
    let models: Vec<_> = events
        .iter()
        .filter_map(|e| e.as_model())
        .cloned()
        .collect();
    assert_eq!(models, expected_model);
    let text: String = events.iter().filter_map(|e| e.text_delta()).collect();
    assert_eq!(text, "Sunny and mild");
}

/// Seed 001's hooks receive the conversation history: the prompt, response, tool and stop
/// hooks each see it as it stands at their point.
#[tokio::test]
async fn hooks_see_the_history_at_their_point() {
    use agentloop::run::{Hooks, PromptDecision, ToolDecision};
    type Seen = Arc<Mutex<Vec<(String, Vec<Message>)>>>;
    let seen: Seen = Arc::default();
    let log = |seen: &Seen, point: &str, messages: &[Message]| {
        seen.lock()
            .unwrap()
            .push((point.to_owned(), messages.to_vec()));
    };
    let (s1, s2, s3, s4, s5) = (
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
    );
    let hooks = Hooks::new()
        .on_prompt(move |prompt| {
            log(&s1, &format!("prompt {}", prompt.text()), &prompt.messages);
            async { PromptDecision::Continue }
        })
        .after_response(move |response| {
            log(
                &s2,
                &format!("response {:?}", response.stop_reason),
                &response.messages,
            );
            async {}
        })
        .before_tool(move |call| {
            log(&s3, &format!("before {}", call.name), &call.messages);
            async { ToolDecision::Continue }
        })
        .after_tool(move |call, outcome| {
            log(&s4, &format!("after {}", call.id), &call.messages);
            async move { outcome }
        })
        .on_stop(move |stop| {
            log(&s5, &format!("stop {}", stop.reason), &stop.messages);
            async {}
        });
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("18 °C."),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .hooks(hooks)
        .build();
    let earlier = vec![
        Message::user("Hi"),
        Message::new(Role::Assistant, vec![ContentBlock::text("Hello!")]),
    ];
    let mut messages = earlier.clone();
    messages.push(Message::user("Weather?"));
    let result = agent.run(messages.clone()).await.unwrap();

    let call = Message::new(
        Role::Assistant,
        vec![tool_use(
            "call_0_0",
            "get_weather",
            json!({"city": "Paris"}),
        )],
    );
    let mut with_call = messages.clone();
    with_call.push(call);
    let mut with_result = with_call.clone();
    with_result.push(results([ToolResult::text("call_0_0", "18 °C in Paris")]));
    let expected = vec![
        ("prompt Weather?".to_owned(), earlier),
        ("response ToolUse".into(), messages),
        ("before get_weather".into(), with_call.clone()),
        ("after call_0_0".into(), with_call),
        ("response EndTurn".into(), with_result),
        ("stop end_turn".into(), result.messages.clone()),
    ];
    assert_eq!(*seen.lock().unwrap(), expected);
}

/// Seed 001 runs a tool directly (`tool.execute(input)`): the schema is checked, the timeout
/// applies, and every failure is a typed error.
#[tokio::test(start_paused = true)]
async fn a_tool_executes_directly_with_its_schema_checked_and_typed_errors() {
    use agentloop::{Error, TimeoutKind, ToolOutput};
    use std::time::Duration;
    let tool = weather_tool(Default::default());
    assert_eq!(
        tool.execute(json!({"city": "Oslo"})).await.unwrap(),
        ToolOutput::text("18 °C in Oslo")
    );

    let error = tool.execute(json!({"town": "Oslo"})).await.unwrap_err();
    assert!(
        matches!(&error, Error::ToolArgumentParse { tool, .. } if tool == "get_weather"),
        "{error:?}"
    );
    assert!(error.to_string().contains("city"), "{error}");
    let error = tool.execute(json!("Oslo")).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "arguments for tool `get_weather` do not match its input: the arguments must be a JSON \
         object, got \"Oslo\""
    );

    let failing = Tool::function(
        "fail",
        "always fails",
        |_: serde_json::Map<String, serde_json::Value>| async { Err::<String, _>("disk full") },
    );
    let error = failing.execute(json!({})).await.unwrap_err();
    assert!(matches!(&error, Error::ToolExecution { tool, message }
        if tool == "fail" && message == "disk full"));
    assert_eq!(error.kind(), "tool_execution");
    assert_eq!(error.to_string(), "tool `fail` failed: disk full");

    let definition_only =
        Tool::from_schema("plan", "no handler", json!({"type": "object"})).unwrap();
    let error = definition_only.execute(json!({})).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "tool `plan` failed: it has no handler; attach one with `Tool::handler` to run it"
    );

    let slow = Tool::function(
        "slow",
        "sleeps",
        |_: serde_json::Map<String, serde_json::Value>| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, String>("late")
        },
    )
    .with_timeout(Duration::from_millis(50));
    let error = slow.execute(json!(null)).await.unwrap_err();
    assert!(matches!(
        error,
        Error::Timeout { kind: TimeoutKind::Tool, after } if after == Duration::from_millis(50)
    ));

    let panicking = Tool::function(
        "boom",
        "panics",
        |_: serde_json::Map<String, serde_json::Value>| async {
            if true {
                panic!("kaboom");
            }
            Ok::<_, String>("never")
        },
    );
    let error = panicking.execute(json!({})).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "tool `boom` failed: the tool panicked: kaboom"
    );
}
