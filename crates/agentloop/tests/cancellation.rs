//! Cancellation belongs to a run: every run has its own token, so cancelling one run (through
//! its stream's handle or the token passed for it) leaves the other runs of the same agent,
//! concurrent or later, untouched.

use std::sync::Arc;
use std::time::Duration;

use agentloop::conversation::Conversation;
use agentloop::run::{RunEvent, RunResult, RunStopReason, RunStream, ToolOutcome};
use agentloop::{Agent, Message, Tool, history};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the model says to `prompt`, in six deltas one second apart.
fn answer(prompt: &str) -> String {
    format!("{prompt} ").repeat(6)
}

/// A model that answers each run by its prompt, slowly, so runs can overlap.
fn slow_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request, _| {
        let prompt = request
            .messages
            .last()
            .map(Message::text)
            .unwrap_or_default();
        Turn::text(answer(&prompt))
            .with_text_pieces(6)
            .with_chunk_delay(Duration::from_secs(1))
    })
}

/// Read a streamed run to its end: its result and when it ended.
async fn finish(mut stream: RunStream) -> (RunResult, Instant) {
    let mut result = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result: finished } = event {
            result = Some(*finished);
        }
    }
    (result.expect("the run finishes"), Instant::now())
}

fn assert_interrupted(result: &RunResult, prompt: &str) {
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    history::validate(&result.messages).unwrap();
    // The history keeps what was said before the cancel.
    let said = result
        .messages
        .last()
        .map(Message::text)
        .unwrap_or_default();
    assert!(
        !said.is_empty() && said.len() < answer(prompt).len() && answer(prompt).starts_with(&said),
        "{said:?}"
    );
}

fn assert_complete(result: &RunResult, prompt: &str) {
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    history::validate(&result.messages).unwrap();
    assert_eq!(result.text(), answer(prompt));
}

#[tokio::test(start_paused = true)]
async fn cancelling_one_streamed_run_leaves_a_concurrent_run_untouched() {
    let agent = Agent::builder(slow_model()).build();
    let a = agent.run_stream("a");
    let b = agent.run_stream("b");
    let handle = a.cancel_handle();
    let started = Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        handle.cancel();
    });
    let ((a, a_ended), (b, b_ended)) = tokio::join!(finish(a), finish(b));
    canceller.await.unwrap();
    assert_interrupted(&a, "a");
    assert!(a_ended - started <= Duration::from_millis(2600), "promptly");
    assert_complete(&b, "b");
    assert!(
        b_ended - started >= Duration::from_secs(5),
        "b ran to its end"
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_one_blocking_run_leaves_a_concurrent_run_untouched() {
    let agent = Agent::builder(slow_model()).build();
    let token = CancellationToken::new();
    let a = tokio::spawn(
        agent
            .with_options(|o| o.cancel = Some(token.clone()))
            .run(vec![Message::user("a")]),
    );
    let b = tokio::spawn(agent.run("b"));
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    token.cancel();
    let a = a.await.unwrap().unwrap();
    assert!(started.elapsed() <= Duration::from_millis(2600), "promptly");
    assert_interrupted(&a, "a");
    assert_complete(&b.await.unwrap().unwrap(), "b");
}

#[tokio::test(start_paused = true)]
async fn a_run_started_after_another_was_cancelled_runs_normally() {
    let agent = Agent::builder(slow_model()).build();
    let mut first = agent.run_stream("a");
    // Cancelled once it has said something.
    while let Some(event) = first.next().await {
        if event.text_delta().is_some() {
            first.cancel();
            break;
        }
    }
    let (first, _) = finish(first).await;
    assert_interrupted(&first, "a");

    assert_complete(&agent.run("b").await.unwrap(), "b");
    let (streamed, _) = finish(agent.run_stream("c")).await;
    assert_complete(&streamed, "c");
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Empty {}

#[tokio::test(start_paused = true)]
async fn the_handle_stops_a_run_from_another_task_mid_tool_with_a_valid_history() {
    let model = ScriptedModel::new([Turn::tool_call("slow", json!({})), Turn::text("never")]);
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = {
        let ran = ran.clone();
        Tool::function("slow", "Takes ten seconds", move |_: Empty| {
            let ran = ran.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, String>("done")
            }
        })
    };
    let agent = Agent::builder(model.clone()).tool(slow).build();
    let stream = agent.run_stream("go");
    let handle = stream.cancel_handle();
    let started = Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        handle.cancel();
    });
    let (result, ended) = finish(stream).await;
    canceller.await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(ended - started <= Duration::from_millis(3100), "promptly");
    assert!(matches!(
        result.steps[0].outcomes[..],
        [ToolOutcome::Cancelled { .. }]
    ));
    history::validate(&result.messages).unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "the tool was stopped"
    );
    assert_eq!(model.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_token_set_on_the_agent_stops_every_run_but_a_run_handle_stops_only_its_run() {
    let all = CancellationToken::new();
    let agent = Agent::builder(slow_model())
        .options(agentloop::run::RunOptions::default().cancel_token(all.clone()))
        .build();

    // A run's own handle: only that run.
    let a = agent.run_stream("a");
    let b = agent.run_stream("b");
    let handle = a.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        handle.cancel();
    });
    let ((a, _), (b, _)) = tokio::join!(finish(a), finish(b));
    assert_interrupted(&a, "a");
    assert_complete(&b, "b");
    assert!(!all.is_cancelled());

    // The agent's token: every run of the agent.
    let c = agent.run_stream("c");
    let d = tokio::spawn(agent.run("d"));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        all.cancel();
    });
    let (c, _) = finish(c).await;
    assert_interrupted(&c, "c");
    assert_interrupted(&d.await.unwrap().unwrap(), "d");
}

#[tokio::test(start_paused = true)]
async fn interrupting_one_conversation_leaves_another_on_the_same_agent_untouched() {
    let agent = Agent::builder(slow_model()).build();
    let mut one = Conversation::new(&agent);
    let mut two = Conversation::new(&agent);
    let interrupt = one.interrupt_handle();
    let first = one.send("a").await.unwrap();
    let second = two.send("b").await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        interrupt.interrupt();
    });
    let (first, second) = tokio::join!(first.finish(), second.finish());
    assert_interrupted(&first.unwrap(), "a");
    assert_complete(&second.unwrap(), "b");
    history::validate(&one.history()).unwrap();
    assert_eq!(two.history().len(), 2);

    // The interrupted conversation goes on normally.
    let again = one.send("c").await.unwrap().finish().await.unwrap();
    assert_complete(&again, "c");
    assert_eq!(one.history().len(), 4);
}
