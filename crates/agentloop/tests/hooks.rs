//! Hooks with the scripted model: after-response and stop hooks, several hooks at one point
//! (order, chained rewrites, first block wins), and tool hooks in streamed runs.

use std::sync::{Arc, Mutex};

use agentloop::run::{
    Hooks, PromptDecision, RunEvent, RunStopReason, StopCondition, ToolDecision, ToolOutcome,
    WithHistory,
};
use agentloop::{Agent, ContentBlock, Error, Message, Tool, ToolResultContent};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Get the current weather for a city.
#[derive(Debug, Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

type Log = Arc<Mutex<Vec<String>>>;

fn new_log() -> Log {
    Arc::default()
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// A weather tool that logs each call it runs.
fn weather_tool(log: &Log) -> Tool {
    let log = log.clone();
    Tool::function("get_weather", "Current weather", move |w: GetWeather| {
        log.lock().unwrap().push(format!("tool {}", w.city));
        async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) }
    })
}

/// Hooks that log every response and the stop, each entry naming the hook.
fn observing_hooks(log: &Log) -> Hooks {
    let (on_response, on_stop) = (log.clone(), log.clone());
    Hooks::new()
        .after_response(move |response| {
            let tools: Vec<String> = response.tool_uses().into_iter().map(|c| c.name).collect();
            on_response.lock().unwrap().push(format!(
                "after_response {} {:?} {tools:?} {}",
                response.stop_reason,
                response.text(),
                response.usage.total_tokens()
            ));
            async {}
        })
        .on_stop(move |info| {
            on_stop.lock().unwrap().push(format!(
                "on_stop {} turns={} tool_calls={} tokens={}",
                info.reason,
                info.turns,
                info.tool_calls,
                info.usage.total_tokens()
            ));
            async {}
        })
}

fn two_step_model() -> ScriptedModel {
    ScriptedModel::new([
        Turn::text("Looking.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .with_usage(10, 2),
        Turn::text("18 °C in Paris.").with_usage(20, 3),
    ])
}

const TWO_STEP_LOG: [&str; 4] = [
    r#"after_response tool_use "Looking." ["get_weather"] 12"#,
    "tool Paris",
    r#"after_response end_turn "18 °C in Paris." [] 23"#,
    "on_stop end_turn turns=2 tool_calls=1 tokens=35",
];

#[tokio::test]
async fn after_response_sees_each_response_before_its_tools_and_on_stop_sees_the_end() {
    let log = new_log();
    let agent = Agent::builder(two_step_model())
        .tool(weather_tool(&log))
        .hooks(observing_hooks(&log))
        .build();
    let result = agent.run("Weather?").await.unwrap();
    assert_eq!(result.text(), "18 °C in Paris.");
    assert_eq!(entries(&log), TWO_STEP_LOG);
}

#[tokio::test]
async fn after_response_and_on_stop_run_the_same_in_a_streamed_run() {
    let log = new_log();
    let agent = Agent::builder(two_step_model())
        .tool(weather_tool(&log))
        .hooks(observing_hooks(&log))
        .build();
    let mut stream = agent.run_stream("Weather?");
    // The stop hook has run by the time `run_finish` is handed out.
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { .. } = event {
            assert_eq!(entries(&log), TWO_STEP_LOG);
        }
    }
    assert_eq!(entries(&log), TWO_STEP_LOG);
}

/// What ends a run, its turns, a stop condition, and the log expected.
type StopCase = (
    &'static str,
    Vec<Turn>,
    Option<StopCondition>,
    Vec<&'static str>,
);

#[tokio::test]
async fn on_stop_names_every_way_a_run_ends_and_after_response_skips_failed_calls() {
    let overloaded = || {
        Turn::error(Error::Overloaded {
            provider: "scripted".into(),
            message: "busy".into(),
        })
    };
    let call = || Turn::tool_call("get_weather", json!({"city": "Rome"}));
    let cases: Vec<StopCase> = vec![
        (
            "a failed model call",
            vec![call(), overloaded()],
            None,
            vec![
                r#"after_response tool_use "" ["get_weather"] 15"#,
                "tool Rome",
                // `turns` counts the responses: the failed call gave none.
                "on_stop error turns=1 tool_calls=1 tokens=15",
            ],
        ),
        (
            "the tool-iteration limit",
            vec![call(), call()],
            None,
            vec![
                r#"after_response tool_use "" ["get_weather"] 15"#,
                "tool Rome",
                // One round of tools, then the answer's call: its tool call is not run.
                r#"after_response tool_use "" ["get_weather"] 15"#,
                "on_stop max_tool_iterations turns=2 tool_calls=1 tokens=30",
            ],
        ),
        (
            "a stop condition",
            vec![call()],
            Some(StopCondition::tool_called("get_weather")),
            vec![
                r#"after_response tool_use "" ["get_weather"] 15"#,
                "tool Rome",
                "on_stop custom (tool_called(get_weather)) turns=1 tool_calls=1 tokens=15",
            ],
        ),
    ];
    for (what, turns, condition, expected) in cases {
        let log = new_log();
        let mut builder = Agent::builder(ScriptedModel::new(turns))
            .tool(weather_tool(&log))
            .hooks(observing_hooks(&log))
            .max_tool_iterations(1);
        if let Some(condition) = condition {
            builder = builder.stop_when(condition);
        }
        builder.build().run("go").await.unwrap();
        assert_eq!(entries(&log), expected, "{what}");
    }

    // Cancelled before the first call: no response, and the stop hook still hears of it.
    let log = new_log();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let agent = Agent::builder(ScriptedModel::new([]))
        .hooks(observing_hooks(&log))
        .build();
    let result = agent
        .with_options(|o| o.cancel = Some(cancel))
        .run(vec![Message::user("go")])
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert_eq!(
        entries(&log),
        ["on_stop cancelled turns=0 tool_calls=0 tokens=0"]
    );

    // A prompt blocked by its hook never starts the run: no stop hook either.
    let log = new_log();
    let agent = Agent::builder(ScriptedModel::new([]))
        .hooks(observing_hooks(&log).on_prompt(|_| async { PromptDecision::Block("no".into()) }))
        .build();
    assert!(matches!(
        agent.run("go").await,
        Err(Error::HookBlocked { .. })
    ));
    assert_eq!(entries(&log), Vec::<String>::new());
}

#[tokio::test]
async fn several_prompt_hooks_run_in_order_chain_rewrites_and_the_first_block_wins() {
    let log = new_log();
    let hook = |name: &'static str, decision: fn(&str) -> PromptDecision| {
        let log = log.clone();
        move |message: WithHistory<Message>| {
            let text = message.text();
            log.lock().unwrap().push(format!("{name} saw {text:?}"));
            let decision = decision(&text);
            async move { decision }
        }
    };
    let model = ScriptedModel::new([Turn::text("ok")]);
    let agent = Agent::builder(model.clone())
        .hooks(
            Hooks::new()
                .on_prompt(hook("first", |t| {
                    PromptDecision::Replace(Message::user(format!("{t} +1")))
                }))
                .on_prompt(hook("second", |_| PromptDecision::Continue))
                .on_prompt(hook("third", |t| {
                    PromptDecision::Replace(Message::user(format!("{t} +3")))
                })),
        )
        .build();
    agent.run("hi").await.unwrap();
    assert_eq!(
        entries(&log),
        [
            r#"first saw "hi""#,
            r#"second saw "hi +1""#,
            r#"third saw "hi +1""#
        ]
    );
    assert_eq!(model.requests()[0].messages, [Message::user("hi +1 +3")]);

    log.lock().unwrap().clear();
    let model = ScriptedModel::new([]);
    let agent = Agent::builder(model.clone())
        .hooks(
            Hooks::new()
                .on_prompt(hook("first", |_| PromptDecision::Continue))
                .on_prompt(hook("second", |_| {
                    PromptDecision::Block("second says no".into())
                }))
                .on_prompt(hook("third", |_| {
                    PromptDecision::Block("third says no".into())
                })),
        )
        .build();
    let error = agent.run("hi").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        Error::HookBlocked {
            hook: "prompt".into(),
            reason: "second says no".into()
        }
        .to_string()
    );
    assert_eq!(entries(&log), [r#"first saw "hi""#, r#"second saw "hi""#]);
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn several_tool_hooks_chain_their_rewrites_and_the_first_block_wins() {
    let log = new_log();
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Pariss"})),
            ("get_weather", json!({"city": "Oslo"})),
        ]),
        Turn::text("ok"),
    ]);
    let (l1, l2, l3, l4, l5) = (
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
    );
    let hooks = Hooks::new()
        .before_tool(move |call| {
            l1.lock().unwrap().push(format!("before 1 {}", call.input));
            async move {
                if call.input["city"] == "Pariss" {
                    ToolDecision::ModifyInput(json!({"city": "Paris"}))
                } else {
                    ToolDecision::Continue
                }
            }
        })
        .before_tool(move |call| {
            l2.lock().unwrap().push(format!("before 2 {}", call.input));
            async move {
                match call.input["city"].as_str() {
                    Some("Paris") => ToolDecision::ModifyInput(json!({"city": "Paris, FR"})),
                    _ => ToolDecision::Block("no travel to Oslo".into()),
                }
            }
        })
        .before_tool(move |call| {
            l3.lock().unwrap().push(format!("before 3 {}", call.input));
            async move { ToolDecision::Block("the third hook never decides".into()) }
        })
        .after_tool(move |_, outcome| {
            l4.lock()
                .unwrap()
                .push(format!("after 1 {}", outcome.kind()));
            async move {
                match outcome {
                    ToolOutcome::Completed { content, .. } => ToolOutcome::Completed {
                        structured: None,
                        content: ToolResultContent::Text(format!("{} [1]", content.to_text())),
                    },
                    other => other,
                }
            }
        })
        .after_tool(move |_, outcome| {
            l5.lock().unwrap().push(format!("after 2 {outcome:?}"));
            async move {
                match outcome {
                    ToolOutcome::Completed { content, .. } => ToolOutcome::Completed {
                        structured: None,
                        content: ToolResultContent::Text(format!("{} [2]", content.to_text())),
                    },
                    other => other,
                }
            }
        });
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(&log))
        .hooks(hooks)
        // One call after the other, so the log's order is fixed.
        .max_concurrency(1)
        .build();
    agent.run("go").await.unwrap();
    assert_eq!(
        entries(&log),
        [
            r#"before 1 {"city":"Pariss"}"#,
            r#"before 2 {"city":"Paris"}"#,
            r#"before 3 {"city":"Paris, FR"}"#,
            // The third hook blocks the first call: every hook had its say before it.
            "after 1 denied",
            r#"after 2 Denied { reason: "the third hook never decides" }"#,
            r#"before 1 {"city":"Oslo"}"#,
            r#"before 2 {"city":"Oslo"}"#,
            "after 1 denied",
            r#"after 2 Denied { reason: "no travel to Oslo" }"#,
        ]
    );
}

#[tokio::test]
async fn chained_tool_rewrites_reach_the_handler_and_after_hooks_chain_their_outcomes() {
    let log = new_log();
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Pariss"})),
        Turn::text("ok"),
    ]);
    let hooks = Hooks::new()
        .before_tool(|_| async { ToolDecision::ModifyInput(json!({"city": "Paris"})) })
        .before_tool(|call| async move {
            let city = call.input["city"].as_str().unwrap_or_default().to_owned();
            ToolDecision::ModifyInput(json!({"city": format!("{city}, FR")}))
        })
        .before_tool(|_| async { ToolDecision::Continue })
        .after_tool(|_, outcome| async move {
            ToolOutcome::Completed {
                structured: None,
                content: ToolResultContent::Text(format!("{} [1]", text_of(&outcome))),
            }
        })
        .after_tool(|_, outcome| async move {
            ToolOutcome::Completed {
                structured: None,
                content: ToolResultContent::Text(format!("{} [2]", text_of(&outcome))),
            }
        });
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(&log))
        .hooks(hooks)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(entries(&log), ["tool Paris, FR"]);
    assert_eq!(
        result.steps[0].outcomes,
        [ToolOutcome::Completed {
            structured: None,
            content: ToolResultContent::Text("Paris, FR: 18 °C [1] [2]".into())
        }]
    );
    let sent = &model.requests()[1].messages[2].content[0];
    assert!(
        matches!(sent, ContentBlock::ToolResult(r) if r.content.to_text() == "Paris, FR: 18 °C [1] [2]"),
        "{sent:?}"
    );
}

fn text_of(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Completed { content, .. } => content.to_text(),
        other => other.kind().to_owned(),
    }
}

#[tokio::test]
async fn several_step_hooks_apply_in_order_and_later_ones_see_earlier_edits() {
    let log = new_log();
    let model = ScriptedModel::new([Turn::text("ok")]);
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let hooks = Hooks::new()
        .prepare_step(move |mut step| {
            l1.lock().unwrap().push(format!(
                "prepare 1 step {} {} {:?}",
                step.step, step.request.model, step.request.system
            ));
            async move {
                step.request.model = "model-1".into();
                step.request.system = Some("system 1".into());
                step.request
            }
        })
        .prepare_step(move |mut step| {
            l2.lock().unwrap().push(format!(
                "prepare 2 {} {:?}",
                step.request.model, step.request.system
            ));
            async move {
                step.request.system = Some("system 2".into());
                step.request.temperature = Some(0.5);
                step.request
            }
        })
        .prepare_step(move |mut step| {
            l3.lock()
                .unwrap()
                .push(format!("prepare 3 {:?}", step.request.temperature));
            async move {
                step.request.max_tokens = Some(64);
                step.request
            }
        });
    let agent = Agent::builder(model.clone())
        .model("base-model")
        .system("base system")
        .hooks(hooks)
        .build();
    agent.run("go").await.unwrap();
    assert_eq!(
        entries(&log),
        [
            r#"prepare 1 step 0 base-model Some("base system")"#,
            r#"prepare 2 model-1 Some("system 1")"#,
            "prepare 3 Some(0.5)",
        ]
    );
    let sent = &model.requests()[0];
    assert_eq!(
        (
            sent.model.as_str(),
            sent.system.as_deref(),
            sent.temperature,
            sent.max_tokens
        ),
        ("model-1", Some("system 2"), Some(0.5), Some(64))
    );
}

#[tokio::test]
async fn several_observing_hooks_all_run_in_the_order_they_were_added() {
    let log = new_log();
    let model = ScriptedModel::new([Turn::text("ok")]);
    let push = |entry: &'static str| {
        let log = log.clone();
        move || log.lock().unwrap().push(entry.to_owned())
    };
    let (r1, r2, s1, s2) = (
        push("after_response 1"),
        push("after_response 2"),
        push("on_stop 1"),
        push("on_stop 2"),
    );
    let agent = Agent::builder(model)
        .hooks(
            Hooks::new()
                .after_response(move |_| {
                    r1();
                    async {}
                })
                .on_stop(move |_| {
                    s1();
                    async {}
                })
                .after_response(move |_| {
                    r2();
                    async {}
                })
                .on_stop(move |_| {
                    s2();
                    async {}
                }),
        )
        .build();
    agent.run("go").await.unwrap();
    assert_eq!(
        entries(&log),
        [
            "after_response 1",
            "after_response 2",
            "on_stop 1",
            "on_stop 2"
        ]
    );
}

#[tokio::test]
async fn tool_hooks_rewrite_block_and_replace_in_a_streamed_run() {
    let log = new_log();
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Pariss"})),
            ("get_weather", json!({"city": "Oslo"})),
        ])
        .with_ids(["a", "b"]),
        Turn::text("ok"),
    ]);
    let hooks = Hooks::new()
        .before_tool(|call| async move {
            match call.input["city"].as_str() {
                Some("Pariss") => ToolDecision::ModifyInput(json!({"city": "Paris"})),
                _ => ToolDecision::Block("no travel to Oslo".into()),
            }
        })
        .after_tool(|call, outcome| async move {
            match outcome {
                ToolOutcome::Completed { content, .. } => ToolOutcome::Completed {
                    structured: None,
                    content: ToolResultContent::Text(format!(
                        "{} (asked: {})",
                        content.to_text(),
                        call.input["city"]
                    )),
                },
                other => other,
            }
        });
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(&log))
        .hooks(hooks)
        .build();
    let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
    let tool_events: Vec<String> = events
        .iter()
        .filter_map(|event| match event {
            RunEvent::ToolCallReady { call } => Some(format!("ready {} {}", call.id, call.input)),
            RunEvent::ToolCallResult {
                id,
                outcome,
                result,
                ..
            } => Some(format!(
                "result {id} {} {:?} error={}",
                outcome.kind(),
                result.content.to_text(),
                result.is_error
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        tool_events,
        [
            // The events carry the model's call; the handler ran with the rewritten input.
            r#"ready a {"city":"Pariss"}"#,
            r#"ready b {"city":"Oslo"}"#,
            r#"result a completed "Paris: 18 °C (asked: \"Pariss\")" error=false"#,
            r#"result b denied "Error: the call to `get_weather` was denied: no travel to Oslo" error=true"#,
        ]
    );
    assert_eq!(entries(&log), ["tool Paris"]);
    let RunEvent::RunFinish { result } = events.last().unwrap() else {
        panic!("the last event is {:?}", events.last());
    };
    assert_eq!(result.text(), "ok");
    // What the model got back is what the events said.
    let sent: Vec<String> = model.requests()[1].messages[2]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.content.to_text()),
            _ => None,
        })
        .collect();
    assert_eq!(
        sent,
        [
            r#"Paris: 18 °C (asked: "Pariss")"#,
            "Error: the call to `get_weather` was denied: no travel to Oslo"
        ]
    );
}
