//! The conversation client with the scripted model: manual and automatic tool modes,
//! interruption, prompt hooks, history editing, one-shot queries.

use std::sync::Arc;
use std::time::Duration;

use agentloop::conversation::{Conversation, QueryOptions, ToolExecution, query};
use agentloop::run::{Hooks, PromptDecision, RunEvent, RunStopReason};
use agentloop::{Agent, ContentBlock, Error, Role, StreamEvent, Tool, ToolResult, history};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Look up a city's weather.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    city: String,
}

fn agent(model: &ScriptedModel) -> Agent {
    Agent::builder(model.clone())
        .model("m")
        .tool(Tool::function(
            "get_weather",
            "weather",
            |w: GetWeather| async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) },
        ))
        .build()
}

#[tokio::test]
async fn manual_mode_hands_tool_calls_to_the_caller() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ]),
        Turn::text("Paris 18, Rome 20."),
    ]);
    let mut chat = Conversation::new(&agent(&model)).with_tool_execution(ToolExecution::Manual);
    let result = chat.send("Weather?").await.unwrap().finish().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::AwaitingToolResults);
    let pending = chat.pending_tool_calls();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[0].input, json!({"city": "Paris"}));

    // Sending again, or resuming with a result missing, is a clear error, not a bad request.
    let error = chat.send("hello?").await.unwrap_err();
    assert!(error.to_string().contains("still need results"), "{error}");
    chat.add_tool_result(ToolResult::text("call_0_1", "20 °C"))
        .unwrap();
    let error = chat.resume().unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid history: tool calls [\"call_0_0\"] have no result yet"
    );
    let error = chat
        .add_tool_result(ToolResult::text("nope", "x"))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no pending tool call has id `nope`"),
        "{error}"
    );

    chat.add_tool_result(ToolResult::text("call_0_0", "18 °C"))
        .unwrap();
    let result = chat.resume().unwrap().finish().await.unwrap();
    assert_eq!(result.text(), "Paris 18, Rome 20.");
    model.assert_complete();
    // Results are in call order in one user message, whatever order they were added in.
    let second = &model.requests()[1];
    let ids: Vec<&str> = second.messages[2]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_0_0", "call_0_1"]);
    history::validate(&chat.history()).unwrap();
    assert_eq!(chat.history().len(), 4);
}

#[tokio::test]
async fn automatic_mode_runs_chained_tool_rounds() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::tool_call("get_weather", json!({"city": "Rome"})),
        Turn::text("Both are mild."),
    ]);
    let mut chat = Conversation::new(&agent(&model));
    let mut reply = chat.send("Weather in Paris then Rome?").await.unwrap();
    let mut results = Vec::new();
    let mut text = String::new();
    while let Some(event) = reply.next().await {
        match event {
            RunEvent::ToolCallResult { result, .. } => results.push(result.content.to_text()),
            RunEvent::Model(StreamEvent::TextDelta { text: t }) => text.push_str(&t),
            _ => {}
        }
    }
    assert_eq!(results, ["Paris: 18 °C", "Rome: 18 °C"]);
    assert_eq!(text, "Both are mild.");
    assert_eq!(chat.history().len(), 6);
    history::validate(&chat.history()).unwrap();
    model.assert_complete();
}

#[tokio::test]
async fn automatic_mode_iteration_limit() {
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("get_weather", json!({"city": format!("C{i}")}))
    });
    let mut chat =
        Conversation::new(&agent(&model)).with_tool_execution(ToolExecution::Automatic {
            max_tool_iterations: 3,
        });
    let result = chat.send("loop").await.unwrap().finish().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
    // Three rounds of tools, then the call that should have answered.
    assert_eq!(model.calls(), 4);
    assert_eq!(result.tool_calls, 3);
    history::validate(&chat.history()).unwrap();
    // The conversation goes on from a valid history: prompt, 4 calls with their results.
    let result = chat.send("stop now").await.unwrap().finish().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::MaxToolIterations);
    assert_eq!(model.requests()[4].messages.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn interrupt_stops_a_long_stream_promptly_and_the_next_send_works() {
    let long_text = "word ".repeat(30);
    let model = ScriptedModel::new([
        Turn::text(long_text.clone()).with_chunk_delay(Duration::from_secs(1)),
        Turn::text("short answer"),
    ]);
    let mut chat = Conversation::new(&agent(&model));
    let handle = chat.interrupt_handle();
    let mut reply = chat.send("Tell me a long story").await.unwrap();
    // The first delta arrives, then we interrupt from another task.
    let first = reply.next().await;
    assert!(matches!(first, Some(RunEvent::RunStart)));
    let interrupter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        handle.interrupt();
    });
    let started = tokio::time::Instant::now();
    let mut finish = None;
    while let Some(event) = reply.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    interrupter.await.unwrap();
    let result = finish.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(
        started.elapsed() <= Duration::from_millis(1600),
        "{:?}",
        started.elapsed()
    );
    let history = chat.history();
    history::validate(&history).unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].role, Role::Assistant);
    assert!(long_text.starts_with(&history[1].text()));

    let result = chat
        .send("Shorter please")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(result.text(), "short answer");
    assert_eq!(chat.history().len(), 4);
}

#[tokio::test]
async fn a_blocked_prompt_names_the_reason_and_adds_nothing() {
    let model = ScriptedModel::new([Turn::text("ok")]);
    let agent = Agent::builder(model.clone())
        .hooks(Hooks::new().on_prompt(|m| async move {
            if m.text().contains("password") {
                PromptDecision::Block("prompts must not contain secrets".into())
            } else {
                PromptDecision::Continue
            }
        }))
        .build();
    let mut chat = Conversation::new(&agent);
    let error = chat.send("my password is hunter2").await.unwrap_err();
    assert!(
        matches!(&error, Error::HookBlocked { reason, .. } if reason == "prompts must not contain secrets")
    );
    assert!(chat.history().is_empty());
    assert_eq!(model.calls(), 0);
    chat.send("hello").await.unwrap().finish().await.unwrap();
    assert_eq!(chat.history().len(), 2);
}

#[tokio::test]
async fn a_send_refused_for_pending_calls_does_not_run_the_prompt_hook() {
    let model = ScriptedModel::new([Turn::tool_call("get_weather", json!({"city": "Paris"}))]);
    let prompts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = prompts.clone();
    let agent = Agent::builder(model.clone())
        .tool(Tool::function(
            "get_weather",
            "weather",
            |w: GetWeather| async move { Ok::<_, String>(w.city) },
        ))
        .hooks(Hooks::new().on_prompt(move |_| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { PromptDecision::Continue }
        }))
        .build();
    let mut chat = Conversation::new(&agent).with_tool_execution(ToolExecution::Manual);
    chat.send("Weather?").await.unwrap().finish().await.unwrap();
    assert_eq!(prompts.load(std::sync::atomic::Ordering::SeqCst), 1);
    let error = chat.send("hello?").await.unwrap_err();
    assert!(error.to_string().contains("still need results"), "{error}");
    assert_eq!(
        prompts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the hook ran for a send that was refused"
    );
}

#[tokio::test]
async fn history_can_be_read_edited_and_cleared() {
    let model = ScriptedModel::new([Turn::text("one"), Turn::text("two")]);
    let mut chat = Conversation::new(&agent(&model));
    chat.send("first").await.unwrap().finish().await.unwrap();
    chat.edit_history(|h| h.truncate(1));
    chat.send("second").await.unwrap().finish().await.unwrap();
    assert_eq!(model.requests()[1].messages.len(), 2);
    assert!(chat.tool("get_weather").is_some());
    assert!(chat.tool("nope").is_none());
    chat.clear();
    assert!(chat.history().is_empty());

    // An invalid edited history is refused before anything is sent.
    chat.edit_history(|h| {
        h.push(agentloop::Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "x".into(),
                name: "t".into(),
                input: json!({}),
            }],
        ))
    });
    let error = chat.send("hi").await.unwrap_err();
    assert!(matches!(error, Error::InvalidHistory { .. }), "{error}");
}

#[tokio::test]
async fn a_dropped_reply_leaves_the_history_as_before() {
    let model = ScriptedModel::new([Turn::text("never read"), Turn::text("read")]);
    let mut chat = Conversation::new(&agent(&model));
    let reply = chat.send("first").await.unwrap();
    drop(reply);
    assert!(chat.history().is_empty());
    chat.send("second").await.unwrap().finish().await.unwrap();
    assert_eq!(chat.history().len(), 2);
}

#[tokio::test]
async fn query_is_one_shot() {
    let model = ScriptedModel::new([Turn::text("42")]);
    let options = QueryOptions {
        model: "m".into(),
        system: Some("Answer briefly.".into()),
        ..QueryOptions::default()
    };
    let result = query(Arc::new(model.clone()), "6 × 7?", options)
        .into_result()
        .await
        .unwrap();
    assert_eq!(result.text(), "42");
    assert_eq!(
        model.requests()[0].system.as_deref(),
        Some("Answer briefly.")
    );
}
