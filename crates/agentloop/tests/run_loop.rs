//! The run loop end to end with the scripted model: tools, limits, failures, hooks, streaming.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentloop::run::{
    Hooks, PromptDecision, RunEvent, RunStopReason, StopCondition, ToolDecision, ToolOutcome,
};
use agentloop::{
    Agent, ContentBlock, Error, Message, Role, StreamEvent, TimeoutKind, Tool, ToolChoice,
    ToolResultContent, history,
};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

/// Get the current weather for a city.
#[derive(Debug, Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn weather_tool(calls: Arc<std::sync::Mutex<Vec<String>>>) -> Tool {
    Tool::function("get_weather", "Current weather", move |w: GetWeather| {
        let calls = calls.clone();
        async move {
            calls.lock().unwrap().push(w.city.clone());
            Ok::<_, String>(json!({"city": w.city, "temperature_c": 18}))
        }
    })
}

/// The results of the tool-result message at `index` of a request's messages.
/// The text of a streamed run's deltas, in order.
fn text_deltas(events: &[RunEvent]) -> String {
    events.iter().filter_map(RunEvent::text_delta).collect()
}

fn results_in(message: &Message) -> Vec<(String, String, bool)> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => {
                Some((r.tool_use_id.clone(), r.content.to_text(), r.is_error))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn one_tool_call_then_answer() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(20, 8),
        Turn::text("It is 18 °C in Paris.").with_usage(40, 9),
    ]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .model("m")
        .tool(weather_tool(seen.clone()))
        .build();

    let result = agent.run("Weather in Paris?").await.unwrap();

    assert_eq!(*seen.lock().unwrap(), vec!["Paris".to_owned()]);
    assert_eq!(result.text(), "It is 18 °C in Paris.");
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.turns, 2);
    assert_eq!(result.tool_calls, 1);
    assert_eq!(result.usage.input_tokens, 60);
    assert_eq!(result.usage.output_tokens, 17);
    model.assert_complete();

    let second = &model.requests()[1];
    assert_eq!(second.messages.len(), 3);
    assert_eq!(
        second.messages[1].content,
        vec![ContentBlock::ToolUse {
            id: "call_0_0".into(),
            name: "get_weather".into(),
            input: json!({"city": "Paris"}),
        }]
    );
    assert_eq!(
        results_in(&second.messages[2]),
        vec![(
            "call_0_0".into(),
            r#"{"city":"Paris","temperature_c":18}"#.into(),
            false
        )]
    );
    // The tool definition went to the model with the derived schema.
    let tools = &model.requests()[0].tools;
    assert_eq!(tools.len(), 1);
    history::validate(&result.messages).unwrap();
    assert_eq!(result.messages.len(), 4);
}

/// A run's future owns what it needs, so it outlives the agent and can be spawned; and it stays
/// small, as every run in flight holds one.
#[tokio::test]
async fn a_run_future_outlives_its_agent_and_stays_small() {
    let model = ScriptedModel::new([Turn::text("Hello.")]);
    let agent = Agent::builder(model.clone()).model("m").build();
    let run = agent.run("Hi");
    drop(agent);
    let size = std::mem::size_of_val(&run);
    // Room for the run's own cancellation token and the usage's reasoning count on top of
    // 2 KiB.
    assert!(size <= 2120, "a run's future is {size} bytes");

    let result = tokio::spawn(run).await.unwrap().unwrap();

    assert_eq!(result.text(), "Hello.");
    model.assert_complete();
}

#[tokio::test]
async fn three_chained_calls_then_text() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(10, 1),
        Turn::tool_call("get_weather", json!({"city": "Rome"})).with_usage(20, 2),
        Turn::tool_call("get_weather", json!({"city": "Oslo"})).with_usage(30, 3),
        Turn::text("Done.").with_usage(40, 4),
    ]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .build();
    let result = agent.run("Three cities").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["Paris", "Rome", "Oslo"]);
    assert_eq!(result.steps.len(), 4);
    assert_eq!(result.turns, 4);
    assert_eq!(result.tool_calls, 3);
    assert_eq!(result.usage.input_tokens, 100);
    assert_eq!(result.usage.output_tokens, 10);
    let summed: agentloop::Usage = result.steps.iter().map(|s| s.response.usage).sum();
    assert_eq!(summed, result.usage);
    for (i, step) in result.steps.iter().enumerate() {
        assert_eq!(step.index, i);
        assert_eq!(step.tool_results.len(), step.tool_calls.len());
    }
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    history::validate(&result.messages).unwrap();
    model.assert_complete();
}

#[tokio::test]
async fn a_model_that_never_stops_hits_max_tool_iterations() {
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("get_weather", json!({"city": format!("C{i}")}))
    });
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .max_tool_iterations(10)
        .build();
    let result = agent.run("Loop forever").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
    // Ten rounds of tools, then one more call for the answer.
    assert_eq!(model.calls(), 11);
    assert_eq!(result.turns, 11);
    // The calls of that last response are answered as not run: every tool use has a result.
    assert_eq!(result.tool_calls, 10);
    assert_eq!(seen.lock().unwrap().len(), 10);
    history::validate(&result.messages).unwrap();
    assert!(result.clone().finished().is_err());
    assert!(matches!(
        result.finished(),
        Err(Error::Incomplete { reason }) if reason == "max_tool_iterations"
    ));
}

#[tokio::test]
async fn with_options_changes_one_copy_and_run_takes_a_prompt_or_a_history() {
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("get_weather", json!({"city": format!("C{i}")}))
    });
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .max_tool_iterations(3)
        .build();
    let short = agent.with_options(|o| o.limits.max_tool_iterations = 1);
    let history = vec![
        Message::user("Weather?"),
        Message::assistant("Which city?"),
        Message::user("Any"),
    ];
    let result = short.run(history.clone()).await.unwrap();
    assert_eq!(result.turns, 2);
    assert_eq!(result.messages[..3], history[..]);
    // The agent it was copied from keeps its own limit.
    assert_eq!(agent.options().limits.max_tool_iterations, 3);
    let result = agent.run(String::from("Weather?")).await.unwrap();
    assert_eq!(result.turns, 4);
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
}

#[tokio::test]
async fn max_tool_calls_answers_the_extra_calls_and_stops() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})),
        Turn::tool_calls([
            ("get_weather", json!({"city": "B"})),
            ("get_weather", json!({"city": "C"})),
        ]),
    ]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .max_tool_calls(2)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolCalls);
    assert_eq!(*seen.lock().unwrap(), ["A", "B"]);
    assert_eq!(result.tool_calls, 2);
    let last = result.steps.last().unwrap();
    assert!(
        matches!(&last.outcomes[1], ToolOutcome::Cancelled { reason } if reason.contains("limit of 2 tool calls"))
    );
    assert!(last.tool_results[1].is_error);
    history::validate(&result.messages).unwrap();
    model.assert_complete();
}

#[tokio::test]
async fn max_total_tokens_stops_before_the_call_that_would_pass_it() {
    // 70 tokens spent, and the next request (the prompt, the call, its result and the tool's
    // definition) is estimated at more than the 30 left: the second call is not made.
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})).with_usage(60, 10),
        Turn::tool_call("get_weather", json!({"city": "B"})).with_usage(60, 10),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .max_total_tokens(100)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::TokenBudget);
    assert_eq!(result.usage.total_tokens(), 70);
    assert_eq!(result.turns, 1);
    assert_eq!(model.calls(), 1);
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn max_total_tokens_stops_after_the_step_that_reaches_it() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})).with_usage(90, 10),
        Turn::text("never asked"),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .max_total_tokens(100)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::TokenBudget);
    assert_eq!(result.usage.total_tokens(), 100);
    // The step's calls were answered: the history is valid to send again.
    assert_eq!(result.messages.len(), 3);
    history::validate(&result.messages).unwrap();
    assert_eq!(model.calls(), 1);
}

fn slow_tool(name: &str, delay: Duration, log: Arc<std::sync::Mutex<Vec<String>>>) -> Tool {
    let label = name.to_owned();
    Tool::from_schema(name, "slow", json!({"type": "object", "properties": {}}))
        .unwrap()
        .with_handler(
            move |_ctx: agentloop::ToolContext, _input: serde_json::Value| {
                let log = log.clone();
                let label = label.clone();
                async move {
                    tokio::time::sleep(delay).await;
                    log.lock().unwrap().push(label.clone());
                    Ok(agentloop::ToolOutput::text(format!("{label} done")))
                }
            },
        )
}

/// The run's deadline ends a stream whose chunks keep coming, at the deadline, with the text
/// so far kept.
#[tokio::test(start_paused = true)]
async fn run_timeout_ends_a_stream_mid_answer() {
    let model =
        ScriptedModel::new([
            Turn::text("one two three four five six seven eight nine ten")
                .with_text_pieces(10)
                .with_chunk_delay(Duration::from_secs(1)),
        ]);
    let agent = Agent::builder(model.clone())
        .timeout(Duration::from_millis(3500))
        .build();
    let started = Instant::now();
    let result = agent.run_stream("go").into_result().await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(3500));
    assert_eq!(result.stop_reason, RunStopReason::Timeout);
    // The answer so far ends the history.
    let last = result.messages.last().unwrap();
    assert_eq!(last.role, Role::Assistant);
    let text = last.text();
    assert!(
        !text.is_empty() && "one two three four five six seven eight nine ten".starts_with(&text),
        "{text:?}"
    );
    assert!(text.len() < 20, "{text:?}");
    history::validate(&result.messages).unwrap();
}

#[tokio::test(start_paused = true)]
async fn run_timeout_stops_with_a_valid_history() {
    let model = ScriptedModel::new([Turn::tool_call("slow", json!({}))]);
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(slow_tool("slow", Duration::from_secs(60), log.clone()))
        .tool_timeout(Duration::from_secs(120))
        .timeout(Duration::from_secs(5))
        .build();
    let started = Instant::now();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Timeout);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(log.lock().unwrap().is_empty());
    let step = &result.steps[0];
    assert!(
        matches!(&step.outcomes[0], ToolOutcome::Cancelled { reason } if reason == "the run timed out")
    );
    history::validate(&result.messages).unwrap();
}

/// `finished()` turns a timeout into a typed `Error::Timeout` naming which one fired (the
/// run's or the step's) and its length, for blocking and streamed runs alike.
#[tokio::test(start_paused = true)]
async fn a_timed_out_run_finishes_as_a_typed_timeout_naming_its_kind() {
    let slow_answer = || {
        Turn::text("one two three four")
            .with_text_pieces(4)
            .with_chunk_delay(Duration::from_secs(2))
    };
    for streamed in [false, true] {
        // The run's deadline (5 s) comes before the step's (10 s)...
        let run_limited = Agent::builder(ScriptedModel::new([slow_answer()]))
            .timeout(Duration::from_secs(5))
            .with_options(|o| o.step_timeout = Some(Duration::from_secs(10)))
            .build();
        // ...and the step's (3 s) before the run's (60 s).
        let step_limited = Agent::builder(ScriptedModel::new([slow_answer()]))
            .timeout(Duration::from_secs(60))
            .with_options(|o| o.step_timeout = Some(Duration::from_secs(3)))
            .build();
        for (agent, kind, after) in [
            (run_limited, TimeoutKind::Run, 5),
            (step_limited, TimeoutKind::Step, 3),
        ] {
            let result = if streamed {
                agent.run_stream("go").into_result().await.unwrap()
            } else {
                agent.run("go").await.unwrap()
            };
            assert_eq!(result.stop_reason, RunStopReason::Timeout);
            match result.finished() {
                Err(Error::Timeout { kind: k, after: a }) => {
                    assert_eq!((k, a), (kind, Duration::from_secs(after)), "{streamed}")
                }
                other => panic!("streamed {streamed}: expected a {kind} timeout, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn custom_stop_condition() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})),
        Turn::tool_call("get_weather", json!({"city": "B"})),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .stop_when(StopCondition::new("two calls", |m| m.tool_calls() >= 2))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::Custom("two calls".into())
    );
    assert_eq!(result.turns, 2);
    model.assert_complete();

    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})),
        Turn::tool_call("finish", json!({})),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .tool(Tool::function(
            "finish",
            "done",
            |_: serde_json::Map<String, serde_json::Value>| async { Ok::<_, String>("ok") },
        ))
        .stop_when(StopCondition::tool_called("finish"))
        .stop_when(StopCondition::new("never", |_| false))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::Custom("tool_called(finish)".into())
    );
    assert_eq!(result.tool_calls, 2);
    model.assert_complete();
}

#[tokio::test(start_paused = true)]
async fn cancellation_mid_tool_keeps_history_valid() {
    let model = ScriptedModel::new([Turn::tool_calls([("slow", json!({})), ("fast", json!({}))])]);
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(slow_tool("slow", Duration::from_secs(10), log.clone()))
        .tool(slow_tool("fast", Duration::from_secs(1), log.clone()))
        .build();
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = agent.options().cancel_token(cancel.clone());
    let trigger = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        cancel.cancel();
    });
    let result = agent
        .with_options(|o| *o = options)
        .run(vec![Message::user("go")])
        .await
        .unwrap();
    trigger.await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(*log.lock().unwrap(), ["fast"]);
    let step = &result.steps[0];
    assert_eq!(step.outcomes.len(), 2);
    assert!(
        step.outcomes
            .iter()
            .all(|o| matches!(o, ToolOutcome::Cancelled { .. }))
    );
    history::validate(&result.messages).unwrap();
    assert_eq!(result.tool_calls, 0);
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Empty {}

#[tokio::test(start_paused = true)]
async fn failing_tools_become_error_results_and_the_run_goes_on() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("fails", json!({})),
            ("panics", json!({})),
            ("hangs", json!({})),
            ("nope", json!({})),
            ("get_weather", json!({"town": 3})),
        ]),
        Turn::text("Sorry."),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(Tool::function("fails", "", |_: Empty| async {
            Err::<String, _>("disk full")
        }))
        .tool(Tool::function("panics", "", |_: Empty| async {
            if true {
                panic!("boom");
            }
            Ok::<String, String>(String::new())
        }))
        .tool(
            Tool::function("hangs", "", |_: Empty| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, String>("late")
            })
            .with_timeout(Duration::from_secs(2)),
        )
        .tool(weather_tool(Default::default()))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    let kinds: Vec<&str> = result.steps[0].outcomes.iter().map(|o| o.kind()).collect();
    assert_eq!(
        kinds,
        [
            "failed",
            "failed",
            "timed_out",
            "unknown_tool",
            "invalid_arguments"
        ]
    );
    let results = results_in(&model.requests()[1].messages[2]);
    let ids: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        ids,
        ["call_0_0", "call_0_1", "call_0_2", "call_0_3", "call_0_4"]
    );
    assert!(results.iter().all(|r| r.2), "all are errors: {results:?}");
    assert_eq!(results[0].1, "Error: disk full");
    assert_eq!(results[1].1, "Error: the tool panicked: boom");
    assert_eq!(results[2].1, "Error: tool `hangs` timed out after 2.0s");
    assert_eq!(
        results[3].1,
        "Error: there is no tool named `nope`; available tools: fails, panics, hangs, get_weather"
    );
    assert!(
        results[4]
            .1
            .starts_with("Error: invalid arguments for tool `get_weather`:")
    );
    assert!(
        results[4].1.contains("\"city\" is a required property"),
        "{}",
        results[4].1
    );
    model.assert_complete();
}

/// How many tasks are alive on the runtime, as the tool sees it.
fn task_count_tool(name: &str) -> Tool {
    Tool::function(name, "", |_: Empty| async {
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        Ok::<_, String>(format!("{alive} tasks"))
    })
}

#[tokio::test(start_paused = true)]
async fn a_lone_tool_call_runs_on_the_runs_task_and_keeps_every_failure_mode() {
    // One call per step, then a step with two calls at once.
    let model = ScriptedModel::new([
        Turn::tool_call("instant", json!({})),
        Turn::tool_call("panics_at_once", json!({})),
        Turn::tool_call("panics_later", json!({})),
        Turn::tool_call("sleeps", json!({})),
        Turn::tool_call("hangs", json!({})),
        Turn::tool_calls([("instant", json!({})), ("also_instant", json!({}))]),
        Turn::text("done"),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(task_count_tool("instant"))
        .tool(task_count_tool("also_instant"))
        .tool(Tool::function("panics_at_once", "", |_: Empty| async {
            if true {
                panic!("at once");
            }
            Ok::<String, String>(String::new())
        }))
        .tool(Tool::function("panics_later", "", |_: Empty| async {
            tokio::task::yield_now().await;
            if true {
                panic!("later");
            }
            Ok::<String, String>(String::new())
        }))
        .tool(Tool::function("sleeps", "", |_: Empty| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, String>("awake")
        }))
        .tool(
            Tool::function("hangs", "", |_: Empty| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, String>("late")
            })
            .with_timeout(Duration::from_secs(2)),
        )
        .max_tool_iterations(10)
        .build();
    let started = Instant::now();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    // 1 s of sleeping plus the 2 s timeout, on the paused clock.
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    let texts: Vec<Vec<String>> = result
        .steps
        .iter()
        .map(|step| {
            step.tool_results
                .iter()
                .map(|r| r.content.to_text())
                .collect()
        })
        .collect();
    assert_eq!(
        texts,
        [
            // Alone, the tool ran on the run's own task: nothing was spawned.
            vec!["0 tasks".to_owned()],
            vec!["Error: the tool panicked: at once".to_owned()],
            vec!["Error: the tool panicked: later".to_owned()],
            vec!["awake".to_owned()],
            vec!["Error: tool `hangs` timed out after 2.0s".to_owned()],
            // Side by side, each call has a task of its own.
            vec!["2 tasks".to_owned(), "1 tasks".to_owned()],
            vec![],
        ]
    );
    history::validate(&result.messages).unwrap();
    model.assert_complete();
}

#[tokio::test]
async fn the_largest_timeouts_mean_no_timeout() {
    let model = ScriptedModel::new([
        Turn::tool_call("waits", json!({})),
        Turn::text("done"),
        Turn::tool_call("waits", json!({})),
        Turn::text("done"),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(Tool::function("waits", "", |_: Empty| async {
            tokio::task::yield_now().await;
            Ok::<_, String>("waited")
        }))
        .tool_timeout(Duration::MAX)
        .timeout(Duration::MAX)
        .with_options(|o| {
            o.step_timeout = Some(Duration::MAX);
        })
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.steps[0].tool_results[0].content.to_text(), "waited");
    assert_eq!(result.text(), "done");
    let mut events = agent.run_stream("again");
    let mut finished = None;
    while let Some(event) = events.next().await {
        if let RunEvent::RunFinish { result } = event {
            finished = Some(result);
        }
    }
    let finished = finished.unwrap();
    assert_eq!(finished.text(), "done");
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_one_runs_tools_one_after_another() {
    // Three 300 ms tools: side by side by default, two at a time, then one at a time.
    for (limit, expected) in [(None, 300), (Some(2), 600), (Some(1), 900)] {
        let model = ScriptedModel::new([
            Turn::tool_calls([("a", json!({})), ("b", json!({})), ("c", json!({}))]),
            Turn::text("ok"),
        ]);
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut builder = Agent::builder(model.clone())
            .tool(slow_tool("a", Duration::from_millis(300), log.clone()))
            .tool(slow_tool("b", Duration::from_millis(300), log.clone()))
            .tool(slow_tool("c", Duration::from_millis(300), log.clone()));
        if let Some(limit) = limit {
            builder = builder.max_concurrency(limit);
        }
        let agent = builder.build();
        let started = Instant::now();
        let result = agent.run("go").await.unwrap();
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(expected),
            "max_concurrency {limit:?}"
        );
        let texts: Vec<String> = result.steps[0]
            .tool_results
            .iter()
            .map(|r| r.content.to_text())
            .collect();
        assert_eq!(texts, ["a done", "b done", "c done"]);
        let ids = results_in(&model.requests()[1].messages[2]);
        assert_eq!(
            ids.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
            ["call_0_0", "call_0_1", "call_0_2"]
        );
    }
}

#[tokio::test]
async fn invalid_arguments_are_reported_with_paths_and_retries_are_bounded() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": 1})),
        Turn::tool_call("get_weather", json!({"town": "x"})),
        Turn::tool_call("get_weather", json!({"city": ["x"]})),
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("18 °C"),
    ]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(*seen.lock().unwrap(), ["Paris"]);
    let requests = model.requests();
    let first = &results_in(&requests[1].messages[2])[0].1;
    assert_eq!(
        first,
        "Error: invalid arguments for tool `get_weather`:\n- /city: 1 is not of type \"string\"\nFix the arguments and call the tool again (retry 1 of 2)."
    );
    let second = &results_in(&requests[2].messages[4])[0].1;
    assert!(
        second.contains("- /: \"city\" is a required property"),
        "{second}"
    );
    assert!(second.ends_with("(retry 2 of 2)."), "{second}");
    let third = &results_in(&requests[3].messages[6])[0].1;
    assert!(
        third.contains("- /city: [\"x\"] is not of type \"string\""),
        "{third}"
    );
    assert!(
        third.ends_with("No retries left for `get_weather`: do not call it again in this run."),
        "{third}"
    );
    model.assert_complete();
}

#[tokio::test]
async fn the_same_invalid_call_twice_stops_the_run() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": 1})),
        Turn::tool_call("get_weather", json!({"city": 1})),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::RepeatedInvalidCall("get_weather".into())
    );
    history::validate(&result.messages).unwrap();
    model.assert_complete();
}

#[tokio::test]
async fn prepare_step_forces_a_choice_then_restricts_tools() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("done"),
    ]);
    let hooks = Hooks::new().prepare_step(|mut step| async move {
        if step.step == 0 {
            step.request.tool_choice = Some(ToolChoice::tool("get_weather"));
        } else {
            step.request.retain_tools(&["finish"]);
            step.request.system = Some("Now summarize.".into());
            step.request.model = "small-model".into();
        }
        step.request
    });
    let agent = Agent::builder(model.clone())
        .model("big-model")
        .tool(weather_tool(Default::default()))
        .tool(Tool::function("finish", "done", |_: Empty| async {
            Ok::<_, String>("ok")
        }))
        .hooks(hooks)
        .build();
    agent.run("go").await.unwrap();
    let requests = model.requests();
    assert_eq!(
        requests[0].tool_choice,
        Some(ToolChoice::tool("get_weather"))
    );
    assert_eq!(requests[0].tools.len(), 2);
    assert_eq!(requests[0].model, "big-model");
    assert_eq!(requests[1].tool_choice, None);
    let names: Vec<_> = requests[1]
        .tools
        .iter()
        .filter_map(|t| t.function_name())
        .collect();
    assert_eq!(names, ["finish"]);
    assert_eq!(requests[1].system.as_deref(), Some("Now summarize."));
    assert_eq!(requests[1].model, "small-model");
}

#[tokio::test]
async fn prompt_hooks_rewrite_or_block() {
    let model = ScriptedModel::new([Turn::text("hi")]);
    let agent = Agent::builder(model.clone())
        .hooks(Hooks::new().on_prompt(|m| async move {
            PromptDecision::Replace(Message::user(format!("{} (rewritten)", m.text())))
        }))
        .build();
    agent.run("hello").await.unwrap();
    assert_eq!(model.requests()[0].messages[0].text(), "hello (rewritten)");

    let model = ScriptedModel::new([]);
    let agent = Agent::builder(model.clone())
        .hooks(Hooks::new().on_prompt(|_| async { PromptDecision::Block("no swearing".into()) }))
        .build();
    let error = agent.run("darn").await.unwrap_err();
    assert_eq!(error.to_string(), "blocked by the prompt hook: no swearing");
    assert_eq!(model.calls(), 0);

    // Streamed, a blocked prompt is one error event and the end: no run_start, no model call.
    let events: Vec<RunEvent> = agent.run_stream("darn").collect().await;
    assert!(
        matches!(
            &events[..],
            [RunEvent::Error { error: Error::HookBlocked { hook, reason } }]
                if hook == "prompt" && reason == "no swearing"
        ),
        "{events:?}"
    );
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn a_streamed_run_rewrites_its_prompt_and_a_resumed_one_does_not() {
    let model = ScriptedModel::new([Turn::text("hi"), Turn::text("again")]);
    let rewrite = || {
        Hooks::new().on_prompt(|m| async move {
            PromptDecision::Replace(Message::user(format!("{} (rewritten)", m.text())))
        })
    };
    let agent = Agent::builder(model.clone()).hooks(rewrite()).build();
    let events: Vec<RunEvent> = agent.run_stream("hello").collect().await;
    assert!(matches!(events.first(), Some(RunEvent::RunStart)));
    assert!(matches!(events.last(), Some(RunEvent::RunFinish { .. })));
    assert_eq!(model.requests()[0].messages[0].text(), "hello (rewritten)");

    // A saved machine continues as it was: its prompt was seen when its run started.
    let request = agentloop::Request {
        model: "m".into(),
        messages: vec![Message::user("resumed")],
        ..Default::default()
    };
    let machine = agentloop::run::Machine::new(request, Default::default());
    let options = agentloop::run::RunOptions::new().hooks(rewrite());
    let result =
        agentloop::run::run_machine(Arc::new(model.clone()), machine, vec![], options).await;
    assert_eq!(result.text(), "again");
    assert_eq!(model.requests()[1].messages[0].text(), "resumed");
}

#[tokio::test]
async fn tool_hooks_rewrite_block_and_replace() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Pariss"})),
            ("delete_all", json!({})),
        ]),
        Turn::text("ok"),
    ]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let deleted = Arc::new(AtomicUsize::new(0));
    let d = deleted.clone();
    let after_saw = Arc::new(std::sync::Mutex::new(Vec::new()));
    let after = after_saw.clone();
    let hooks = Hooks::new()
        .before_tool(|call| async move {
            match call.name.as_str() {
                "get_weather" => ToolDecision::ModifyInput(json!({"city": "Paris"})),
                "delete_all" => ToolDecision::Block("destructive tools need approval".into()),
                _ => ToolDecision::Continue,
            }
        })
        .after_tool(move |call, outcome| {
            after
                .lock()
                .unwrap()
                .push((call.name.clone(), call.input.clone()));
            async move {
                if call.name == "get_weather" {
                    ToolOutcome::Completed {
                        structured: None,
                        content: ToolResultContent::Text("replaced by hook".into()),
                    }
                } else {
                    outcome
                }
            }
        })
        .prepare_step(|mut step| async move {
            step.request.temperature = Some(0.0);
            step.request
        });
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(seen.clone()))
        .tool(Tool::function("delete_all", "", move |_: Empty| {
            let d = d.clone();
            async move {
                d.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>("deleted")
            }
        }))
        .hooks(hooks)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["Paris"]);
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    let results = results_in(&model.requests()[1].messages[2]);
    assert_eq!(
        results[0],
        ("call_0_0".into(), "replaced by hook".into(), false)
    );
    assert_eq!(
        results[1],
        (
            "call_0_1".into(),
            "Error: the call to `delete_all` was denied: destructive tools need approval".into(),
            true
        )
    );
    // The history keeps the model's original arguments.
    assert!(
        matches!(&result.messages[1].content[0], ContentBlock::ToolUse { input, .. } if input == &json!({"city": "Pariss"}))
    );
    assert!(model.requests().iter().all(|r| r.temperature == Some(0.0)));
    // After-tool hooks see the call as the model made it, not the rewritten input the handler
    // ran with (the handler takes its input by value only when no after-tool hook needs it).
    // The calls run side by side, so the order the hooks ran in is not fixed.
    let mut after_saw = after_saw.lock().unwrap().clone();
    after_saw.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        after_saw,
        [
            ("delete_all".to_owned(), json!({})),
            ("get_weather".to_owned(), json!({"city": "Pariss"})),
        ]
    );
}

#[tokio::test]
async fn run_stream_emits_the_exact_event_sequence() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(10, 2),
        Turn::text("Sunny and mild").with_usage(20, 3),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .build();
    let events: Vec<RunEvent> = agent.run_stream("Weather?").collect().await;
    for event in &events {
        assert_eq!(serde_json::to_value(event).unwrap()["type"], event.kind());
    }
    let names: Vec<String> = events
        .iter()
        .map(|e| match e {
            RunEvent::RunStart => "run_start".into(),
            RunEvent::StepStart { step } => format!("step_start {step}"),
            RunEvent::Model(StreamEvent::TextDelta { text }) => format!("text {text}"),
            RunEvent::Model(StreamEvent::ToolCallStart { index, id, name }) => {
                format!("call_start {index} {id} {name}")
            }
            RunEvent::Model(StreamEvent::ToolCallDelta { index, arguments }) => {
                format!("call_delta {index} {arguments}")
            }
            RunEvent::Model(StreamEvent::MessageStart { id, model }) => {
                format!("message_start {id} {model}")
            }
            RunEvent::Model(StreamEvent::Usage { usage }) => {
                format!("usage {}", usage.total_tokens())
            }
            RunEvent::Model(StreamEvent::MessageStop { stop_reason }) => {
                format!("message_stop {stop_reason}")
            }
            RunEvent::Model(other) => other.kind().to_owned(),
            RunEvent::ToolCallReady { call } => format!("ready {} {}", call.id, call.input),
            RunEvent::ToolCallResult { id, result, .. } => {
                format!("result {id} {}", result.content.to_text())
            }
            RunEvent::ApprovalRequested(pending) => format!("approval {}", pending.id),
            RunEvent::StepFinish {
                step,
                stop_reason,
                usage,
                ..
            } => {
                format!("step_finish {step} {stop_reason} {}", usage.total_tokens())
            }
            RunEvent::Error { error } => format!("error {error}"),
            RunEvent::RunFinish { result } => format!("run_finish {}", result.stop_reason),
            RunEvent::PartialOutput { value } => format!("partial_output {value}"),
            RunEvent::Output { value } => format!("output {value}"),
        })
        .collect();
    let args = json!({"city": "Paris"}).to_string();
    // The model call's own events come as they are, between the run's step events.
    let mut expected = vec![
        "run_start".to_owned(),
        "step_start 0".into(),
        "message_start msg_0 scripted".into(),
        "call_start 0 call_0_0 get_weather".into(),
    ];
    expected.extend(
        agentloop_testkit::split_pieces(&args, 4)
            .iter()
            .map(|p| format!("call_delta 0 {p}")),
    );
    expected.extend([
        "tool_call_end".to_owned(),
        "usage 12".into(),
        "message_stop tool_use".into(),
        r#"ready call_0_0 {"city":"Paris"}"#.into(),
        r#"result call_0_0 {"city":"Paris","temperature_c":18}"#.into(),
        "step_finish 0 tool_use 12".into(),
        "step_start 1".into(),
        "message_start msg_1 scripted".into(),
    ]);
    expected.extend(
        agentloop_testkit::split_pieces("Sunny and mild", 3)
            .iter()
            .map(|p| format!("text {p}")),
    );
    expected.extend([
        "usage 23".into(),
        "message_stop end_turn".into(),
        "step_finish 1 end_turn 23".into(),
        "run_finish end_turn".into(),
    ]);
    assert_eq!(
        expected.len(),
        23,
        "four argument fragments and three text deltas"
    );
    assert_eq!(names, expected);
}

/// Each call's events by id: the model's start and fragments, ready, result.
fn call_sequences(events: &[RunEvent]) -> Vec<(String, Vec<String>)> {
    let mut by_id: Vec<(String, Vec<String>)> = Vec::new();
    let mut ids_by_index: Vec<String> = Vec::new();
    let mut push = |id: &str, line: String| match by_id.iter_mut().find(|(i, _)| i == id) {
        Some((_, lines)) => lines.push(line),
        None => by_id.push((id.to_owned(), vec![line])),
    };
    for event in events {
        match event {
            RunEvent::StepStart { .. } => ids_by_index.clear(),
            RunEvent::Model(StreamEvent::ToolCallStart { id, .. }) => {
                push(id, "start".into());
                ids_by_index.push(id.clone());
            }
            RunEvent::Model(StreamEvent::ToolCallDelta { index, .. }) => {
                push(&ids_by_index[*index], "delta".into())
            }
            RunEvent::ToolCallReady { call } => push(&call.id, format!("ready {}", call.input)),
            RunEvent::ToolCallResult { id, outcome, .. } => {
                push(id, format!("result {}", outcome.kind()))
            }
            _ => {}
        }
    }
    by_id
}

/// Calls answered without running (the iteration limit reached, a stop condition checked
/// before the tools) get the same events as calls that run: ready, then their result.
#[tokio::test]
async fn calls_answered_without_running_are_ready_then_answered_in_the_stream() {
    let once = |input: &str| {
        let mut lines = vec!["start".to_owned()];
        lines.extend(std::iter::repeat_n("delta".to_owned(), 4));
        lines.push(format!("ready {input}"));
        lines
    };
    // max_tool_iterations(1): the second response's calls are answered as not run.
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::tool_calls([
            ("get_weather", json!({"city": "Rome"})),
            ("get_weather", json!({"city": "Oslo"})),
        ]),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .max_tool_iterations(1)
        .build();
    let events: Vec<RunEvent> = agent.run_stream("Weather?").collect().await;
    let with = |mut lines: Vec<String>, result: &str| {
        lines.push(format!("result {result}"));
        lines
    };
    assert_eq!(
        call_sequences(&events),
        [
            (
                "call_0_0".to_owned(),
                with(once(r#"{"city":"Paris"}"#), "completed")
            ),
            (
                "call_1_0".to_owned(),
                with(once(r#"{"city":"Rome"}"#), "cancelled")
            ),
            (
                "call_1_1".to_owned(),
                with(once(r#"{"city":"Oslo"}"#), "cancelled")
            ),
        ]
    );

    // A stop condition checked before the tools: the call is answered, not run.
    let model = ScriptedModel::new([Turn::tool_call("get_weather", json!({"city": "Paris"}))]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .stop_when(StopCondition::tool_called("get_weather").before_tools())
        .build();
    let events: Vec<RunEvent> = agent.run_stream("Weather?").collect().await;
    assert_eq!(
        call_sequences(&events),
        [(
            "call_0_0".to_owned(),
            with(once(r#"{"city":"Paris"}"#), "cancelled")
        )]
    );

    // Manual tool mode: the calls are ready for the caller, who answers them.
    let model = ScriptedModel::new([Turn::tool_call("get_weather", json!({"city": "Paris"}))]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .with_options(|o| o.limits.manual_tools = true)
        .build();
    let events: Vec<RunEvent> = agent.run_stream("Weather?").collect().await;
    assert_eq!(
        call_sequences(&events),
        [("call_0_0".to_owned(), once(r#"{"city":"Paris"}"#))]
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_cancels_the_run() {
    let model = ScriptedModel::new([Turn::tool_call("slow", json!({})), Turn::text("never")]);
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = Agent::builder(model.clone())
        .tool(slow_tool("slow", Duration::from_secs(5), log.clone()))
        .build();
    let mut stream = agent.run_stream("go");
    while let Some(event) = stream.next().await {
        if matches!(event, RunEvent::ToolCallReady { .. }) {
            break;
        }
    }
    drop(stream);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(log.lock().unwrap().is_empty(), "the tool was aborted");
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn tools_without_arguments_work_streamed_and_blocking() {
    for streamed in [false, true] {
        let model = ScriptedModel::new([Turn::tool_call_raw("now", ""), Turn::text("noon")]);
        let agent = Agent::builder(model.clone())
            .tool(Tool::function("now", "time", |_: Empty| async {
                Ok::<_, String>("12:00")
            }))
            .build();
        let result = if streamed {
            agent.run_stream("time?").into_result().await.unwrap()
        } else {
            agent.run("time?").await.unwrap()
        };
        assert_eq!(result.steps[0].tool_results[0].content.to_text(), "12:00");
        assert!(!result.steps[0].tool_results[0].is_error);
        assert_eq!(result.text(), "noon");
    }
}

#[tokio::test]
async fn a_model_error_ends_the_run_with_the_error() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::error(Error::Overloaded {
            provider: "scripted".into(),
            message: "busy".into(),
        }),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Error);
    assert!(matches!(result.error, Some(Error::Overloaded { .. })));
    history::validate(&result.messages).unwrap();
    assert_eq!(result.messages.last().unwrap().role, Role::User);
    let error = result.finished().unwrap_err();
    assert_eq!(error.to_string(), "scripted is overloaded: busy");
}

/// First-chunk and idle timeouts are the transport's (`HttpConfig`, tested in
/// `provider::http` and over HTTP in `openai_http.rs`); the run adds its own and the step's.
#[tokio::test(start_paused = true)]
async fn a_step_timeout_stops_a_slow_model_call() {
    // Step: the second step's model call takes too long.
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "A"})),
        Turn::text("slow").with_delay(Duration::from_secs(30)),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .with_options(|o| o.step_timeout = Some(Duration::from_secs(5)))
        .build();
    let started = Instant::now();
    let result = agent.run("go").await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(result.stop_reason, RunStopReason::Timeout);
    assert_eq!(result.turns, 1);
    history::validate(&result.messages).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stop_mid_stream_ends_the_events_there_and_keeps_their_text() {
    let full = "one two three four five six seven eight";
    let model = ScriptedModel::new([Turn::text(full).with_chunk_delay(Duration::from_secs(1))]);
    let agent = Agent::builder(model.clone())
        .with_options(|o| o.step_timeout = Some(Duration::from_millis(2500)))
        .build();
    let started = Instant::now();
    let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
    assert_eq!(started.elapsed(), Duration::from_millis(2500));

    let (first, rest) = events.split_first().unwrap();
    assert!(matches!(first, RunEvent::RunStart));
    assert!(matches!(rest[0], RunEvent::StepStart { step: 0 }));
    let Some((RunEvent::RunFinish { result }, middle)) = rest[1..].split_last() else {
        panic!("the last event is not run_finish: {events:?}");
    };
    let streamed: String = middle
        .iter()
        .filter(|event| {
            !matches!(
                event,
                RunEvent::Model(StreamEvent::MessageStart { .. } | StreamEvent::Usage { .. })
            )
        })
        .map(|event| match event.text_delta() {
            Some(text) => text,
            None => {
                panic!("only the model's text comes between step start and the stop: {event:?}")
            }
        })
        .collect();
    assert!(
        !streamed.is_empty() && streamed.len() < full.len(),
        "{streamed:?}"
    );
    assert!(full.starts_with(&streamed), "{streamed:?}");

    assert_eq!(result.stop_reason, RunStopReason::Timeout);
    history::validate(&result.messages).unwrap();
    assert_eq!(result.messages.len(), 2);
    assert_eq!(result.messages[1].role, Role::Assistant);
    assert_eq!(result.messages[1].text(), streamed);
}

/// A waker whose every clone is a new allocation, so `Waker::will_wake` never recognizes a
/// clone of it (tokio's `block_on` waker behaves so in release builds, where its borrowed and
/// owned forms have different vtables). Wake-ups go to `task`.
fn unrecognizable(task: &std::task::Waker) -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable, Waker};

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);

    fn raw(task: Waker) -> RawWaker {
        RawWaker::new(Box::into_raw(Box::new(task)).cast(), &VTABLE)
    }
    // SAFETY (all four): `data` is always a pointer from `Box::into_raw(Box<Waker>)` in `raw`,
    // owned by exactly one `RawWaker`, and `wake` and `drop` are its last use.
    unsafe fn clone(data: *const ()) -> RawWaker {
        raw(unsafe { &*data.cast::<Waker>() }.clone())
    }
    unsafe fn wake(data: *const ()) {
        unsafe { Box::from_raw(data.cast::<Waker>().cast_mut()) }.wake();
    }
    unsafe fn wake_by_ref(data: *const ()) {
        unsafe { &*data.cast::<Waker>() }.wake_by_ref();
    }
    unsafe fn drop(data: *const ()) {
        std::mem::drop(unsafe { Box::from_raw(data.cast::<Waker>().cast_mut()) });
    }
    // SAFETY: the vtable's functions uphold the `RawWaker` contract as described above.
    unsafe { Waker::from_raw(raw(task.clone())) }
}

#[test]
fn a_stream_whose_task_waker_is_never_recognized_still_finishes() {
    // Each poll must return even when the stream cannot tell that the task polling it is the
    // one it knew: a stream that polled its driver again whenever it looked woken spun forever
    // inside one poll.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let model = ScriptedModel::new([
            Turn::tool_call("get_weather", json!({"city": "A"})),
            Turn::text("one two three four").with_text_pieces(4),
        ]);
        let agent = Agent::builder(model)
            .tool(weather_tool(Default::default()))
            .build();
        let mut run = agent.run_stream("go");
        let events: Vec<RunEvent> = runtime.block_on(
            futures::stream::poll_fn(|cx| {
                let waker = unrecognizable(cx.waker());
                run.poll_next_unpin(&mut std::task::Context::from_waker(&waker))
            })
            .collect(),
        );
        let _ = done.send(events);
    });
    let events = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the run's stream returned from every poll and ended");
    assert_eq!(text_deltas(&events), "one two three four");
    let Some(RunEvent::RunFinish { result }) = events.last() else {
        panic!("the last event is not run_finish: {events:?}");
    };
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "one two three four");
}

#[tokio::test]
async fn interrupted_streams_keep_partial_text_only() {
    let model = ScriptedModel::new([Turn::text("Hello there, friend")
        .then_tool_call("get_weather", json!({"city": "A"}))
        .fail_after(
            3,
            Error::IncompleteStream {
                message: "connection reset".into(),
            },
        )]);
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Default::default()))
        .build();
    let result = agent.run_stream("go").into_result().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Error);
    assert!(matches!(result.error, Some(Error::IncompleteStream { .. })));
    history::validate(&result.messages).unwrap();
}

/// Ask a helper agent, streaming its answer.
#[derive(Debug, Deserialize, JsonSchema)]
struct Ask {
    /// The question.
    question: String,
}

#[tokio::test]
async fn a_run_streamed_inside_a_tool_keeps_its_events_apart_from_the_outer_run() {
    // The inner model pauses between chunks, so the inner stream is polled many times from
    // inside the outer run's poll, each time with the outer run's events half made.
    let inner_model = ScriptedModel::new([
        Turn::text("inner answer, in pieces").with_chunk_delay(Duration::from_millis(2))
    ]);
    let inner_events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&inner_events);
    let ask = Tool::function("ask", "Ask a helper", move |a: Ask| {
        let (model, seen) = (inner_model.clone(), Arc::clone(&seen));
        async move {
            let helper = Agent::builder(model).build();
            let mut events = helper.run_stream(a.question);
            let mut text = String::new();
            while let Some(event) = events.next().await {
                if let Some(delta) = event.text_delta() {
                    text.push_str(delta);
                }
                seen.lock().unwrap().push(event.kind());
            }
            Ok::<_, String>(text)
        }
    });
    let outer_model = ScriptedModel::new([
        Turn::tool_call("ask", json!({"question": "what?"})),
        Turn::text("outer answer").with_chunk_delay(Duration::from_millis(1)),
    ]);
    let agent = Agent::builder(outer_model).tool(ask).build();

    let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
    let names: Vec<&str> = events.iter().map(RunEvent::kind).collect();
    assert_eq!(text_deltas(&events), "outer answer");
    assert_eq!(names.iter().filter(|n| **n == "run_start").count(), 1);
    assert_eq!(names.last(), Some(&"run_finish"));
    let Some(RunEvent::ToolCallResult { result, .. }) = events
        .iter()
        .find(|e| matches!(e, RunEvent::ToolCallResult { .. }))
    else {
        panic!("no tool result in {names:?}");
    };
    assert_eq!(result.content.to_text(), "inner answer, in pieces");

    let inner = inner_events.lock().unwrap().clone();
    assert_eq!(inner.first(), Some(&"run_start"));
    assert_eq!(inner.last(), Some(&"run_finish"));
    assert_eq!(inner.iter().filter(|n| **n == "run_start").count(), 1);
}
