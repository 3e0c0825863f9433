//! Durable runs (issue 39 items 4-5): checkpoints in a `RunStore` after every state change that
//! matters, optimistic versions, and "every tool once" when a run resumes after its process
//! stopped. One suite, run against every store (the SQLite one with the `sqlite` feature).
//!
//! A crash is simulated in-process here: the store keeps the nth save (or refuses it) and then
//! never answers, like a process killed right after (or during) that write; the run's future is
//! dropped and a fresh agent resumes. `tests/durable_crash.rs` kills real processes.

use std::sync::{Arc, Mutex};

use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::openai::OpenAi;
use agentloop::run::{
    Checkpoint, Decision, MemoryStore, RunStatus, RunStore, RunSummary, ToolOutcome,
};
use agentloop::{Agent, Error, Role, Tool, ToolContext, ToolOutput, history};
use agentloop_testkit::server::{Fault, MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A save as the store saw it: the version written, the status, and the machine's history
/// and step counts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Saved {
    version: u64,
    status: RunStatus,
    messages: usize,
    steps: usize,
}

/// How the simulated process dies at a save.
#[derive(Clone, Copy)]
enum Crash {
    /// After the nth save (1-based) was written.
    After(usize),
    /// During the nth save: it is not written.
    During(usize),
}

/// A store that records each save and can stop the run at one (see [`Crash`]).
#[derive(Clone)]
struct Recording<S> {
    inner: S,
    saves: Arc<Mutex<Vec<Saved>>>,
    crash: Option<Crash>,
    crashed: Arc<Notify>,
}

impl<S: RunStore + Clone> Recording<S> {
    fn new(inner: S, crash: Option<Crash>) -> Self {
        Self {
            inner,
            saves: Arc::default(),
            crash,
            crashed: Arc::default(),
        }
    }

    fn saves(&self) -> Vec<Saved> {
        self.saves.lock().unwrap().clone()
    }
}

impl<S: RunStore + Clone> RunStore for Recording<S> {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, agentloop::Result<Option<Checkpoint>>> {
        self.inner.load(run_id)
    }

    fn save<'a>(
        &'a self,
        run_id: &'a str,
        read: u64,
        status: RunStatus,
        state: String,
    ) -> BoxFuture<'a, agentloop::Result<u64>> {
        Box::pin(async move {
            let nth = self.saves.lock().unwrap().len() + 1;
            if let Some(Crash::During(at)) = self.crash
                && at == nth
            {
                self.crashed.notify_one();
                return std::future::pending().await;
            }
            let machine = Checkpoint {
                version: 0,
                status,
                state: state.clone(),
            }
            .machine()
            .unwrap();
            let version = self.inner.save(run_id, read, status, state).await?;
            self.saves.lock().unwrap().push(Saved {
                version,
                status,
                messages: machine.messages().len(),
                steps: machine.steps().len(),
            });
            if let Some(Crash::After(at)) = self.crash
                && at == nth
            {
                self.crashed.notify_one();
                return std::future::pending().await;
            }
            Ok(version)
        })
    }

    fn list(&self) -> BoxFuture<'_, agentloop::Result<Vec<RunSummary>>> {
        self.inner.list()
    }
}

/// Idempotency keys in the order the tools ran.
type Log = Arc<Mutex<Vec<String>>>;

/// A tool that logs its idempotency key and answers `<name> done`.
fn logging_tool(name: &'static str, log: &Log, idempotent: bool) -> Tool {
    let log = log.clone();
    Tool::from_schema(name, "Logs its call", json!({"type": "object"}))
        .unwrap()
        .with_handler(move |ctx: ToolContext, _input: Value| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(ctx.idempotency_key());
                Ok(ToolOutput::text(format!("{} done", ctx.tool_name)))
            }
        })
        .with_idempotent(idempotent)
}

/// The model: two calls (`a` idempotent, `b` not) in its first answer, then text. It answers
/// by the history it is sent, so a call issued again gets the same answer.
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|request, _| {
        let answered = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        match answered {
            0 => Turn::tool_calls([("a", json!({})), ("b", json!({}))]).with_ids(["c1", "c2"]),
            _ => Turn::text("Done."),
        }
    })
}

/// The agent definition every process of a run shares; tools run one at a time, so the saves
/// come in a fixed order.
fn agent(model: ScriptedModel, log: &Log) -> Agent {
    Agent::builder(model)
        .model("m")
        .tool(logging_tool("a", log, true))
        .tool(logging_tool("b", log, false))
        .max_concurrency(1)
        .build()
}

fn saved(version: u64, status: RunStatus, messages: usize, steps: usize) -> Saved {
    Saved {
        version,
        status,
        messages,
        steps,
    }
}

/// The results of the history's tool-result message: (call id, text, is_error).
fn tool_results(messages: &[agentloop::Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            agentloop::ContentBlock::ToolResult(r) => {
                Some((r.tool_use_id.clone(), r.content.to_text(), r.is_error))
            }
            _ => None,
        })
        .collect()
}

/// Run `r1` until the store's crash, drop it, and resume it with a fresh agent (a new
/// process's). Returns the resumed result, the first and second processes' tool logs.
async fn crash_and_resume<S: RunStore + Clone>(
    store: S,
    crash: Crash,
) -> (
    agentloop::RunResult,
    Vec<String>,
    Vec<String>,
    ScriptedModel,
) {
    let recording = Recording::new(store.clone(), Some(crash));
    let first_log = Log::default();
    let run = agent(model(), &first_log).run_durable("r1", "Go", &recording);
    tokio::select! {
        result = run => panic!("the run ended before its crash: {result:?}"),
        () = recording.crashed.notified() => {}
    }
    let second_log = Log::default();
    let second_model = model();
    let result = agent(second_model.clone(), &second_log)
        .resume_run("r1", &store)
        .await
        .unwrap();
    history::validate(&result.messages).unwrap();
    let first = first_log.lock().unwrap().clone();
    let second = second_log.lock().unwrap().clone();
    (result, first, second, second_model)
}

const INTERRUPTED: &str = "Error: the call to `b` was interrupted: it was running when the \
    process running the run stopped, and it is not marked idempotent, so it was not run again; \
    it may or may not have taken effect";

async fn checkpoints_follow_every_state_change<S: RunStore + Clone>(store: S) {
    let recording = Recording::new(store.clone(), None);
    let log = Log::default();
    let result = agent(model(), &log)
        .run_durable("r1", "Go", &recording)
        .await
        .unwrap();
    assert_eq!(result.text(), "Done.");
    assert_eq!(*log.lock().unwrap(), ["r1/c1", "r1/c2"]);
    use RunStatus::{Done, Running};
    assert_eq!(
        recording.saves(),
        [
            saved(1, Running, 1, 0), // started
            saved(2, Running, 2, 1), // the response recorded and its tools started
            saved(3, Running, 2, 1), // c1's outcome
            saved(4, Running, 3, 1), // c2's outcome and the step closed
            saved(5, Done, 4, 2),    // the answer
        ]
    );
    let last = store.load("r1").await.unwrap().unwrap();
    assert_eq!((last.version, last.status), (5, Done));
    assert_eq!(last.machine().unwrap().messages(), &result.messages[..]);
    assert_eq!(
        store.list().await.unwrap(),
        [RunSummary {
            run_id: "r1".into(),
            version: 5,
            status: Done
        }]
    );
}

async fn a_stale_writer_is_refused_and_a_run_id_is_taken_once<S: RunStore + Clone>(store: S) {
    let log = Log::default();
    agent(model(), &log)
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();

    let stale = store
        .save("r1", 3, RunStatus::Running, "{}".into())
        .await
        .unwrap_err();
    assert!(
        matches!(&stale, Error::StaleCheckpoint { run_id, expected: 3, found: 5 } if run_id == "r1"),
        "{stale:?}"
    );
    assert_eq!(store.load("r1").await.unwrap().unwrap().version, 5);

    let again = agent(model(), &log)
        .run_durable("r1", "Go", &store)
        .await
        .unwrap_err();
    assert!(
        matches!(
            again,
            Error::StaleCheckpoint {
                expected: 0,
                found: 5,
                ..
            }
        ),
        "{again:?}"
    );
    let missing = agent(model(), &log)
        .resume_run("r2", &store)
        .await
        .unwrap_err();
    assert!(matches!(&missing, Error::RunNotFound { run_id } if run_id == "r2"));
    assert_eq!(
        missing.to_string(),
        "no run `r2` in the store; start it with Agent::run_durable"
    );
}

async fn a_recorded_outcome_never_runs_again<S: RunStore + Clone>(store: S) {
    // Killed after c1's outcome was saved: c1 is not run again; c2, started as far as the
    // store knows and not idempotent, is interrupted.
    let (result, first, second, model) = crash_and_resume(store, Crash::After(3)).await;
    assert_eq!(first, ["r1/c1"]);
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(
        tool_results(&result.messages),
        [
            ("c1".into(), "a done".into(), false),
            ("c2".into(), INTERRUPTED.into(), true)
        ]
    );
    assert!(matches!(
        result.steps[0].outcomes[1],
        ToolOutcome::Interrupted { .. }
    ));
    assert_eq!(result.text(), "Done.");
    assert_eq!(result.tool_calls, 2);
    assert_eq!(model.calls(), 1);
}

async fn an_idempotent_tool_cut_off_runs_again<S: RunStore + Clone>(store: S) {
    // Killed while c1's outcome was being saved: c1 ran but nothing says so, and `a` is
    // idempotent, so it runs again with the same key; c2 is interrupted.
    let (result, first, second, _) = crash_and_resume(store, Crash::During(3)).await;
    assert_eq!(first, ["r1/c1"]);
    assert_eq!(second, ["r1/c1"]);
    assert_eq!(
        tool_results(&result.messages),
        [
            ("c1".into(), "a done".into(), false),
            ("c2".into(), INTERRUPTED.into(), true)
        ]
    );
}

async fn a_steps_last_outcome_is_saved_with_its_close<S: RunStore + Clone>(store: S) {
    // Killed while c2's outcome was being saved, in one write with the step's close: c2 ran
    // but nothing says so, and `b` is not idempotent, so it is interrupted; c1 does not run
    // again and the model is not called again for the first step.
    let (result, first, second, model) = crash_and_resume(store, Crash::During(4)).await;
    assert_eq!(first, ["r1/c1", "r1/c2"]);
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(
        tool_results(&result.messages),
        [
            ("c1".into(), "a done".into(), false),
            ("c2".into(), INTERRUPTED.into(), true)
        ]
    );
    assert_eq!(result.text(), "Done.");
    assert_eq!(model.calls(), 1);
}

async fn a_model_call_in_flight_is_issued_again<S: RunStore + Clone>(store: S) {
    // Killed during the answer's call (after the step closed): the call is issued again and
    // no tool runs again.
    let (result, first, second, model) = crash_and_resume(store, Crash::During(5)).await;
    assert_eq!(first, ["r1/c1", "r1/c2"]);
    assert!(second.is_empty());
    assert_eq!(model.calls(), 1);
    assert_eq!(model.last_request().unwrap().messages.len(), 3);
    assert_eq!(
        tool_results(&result.messages),
        [
            ("c1".into(), "a done".into(), false),
            ("c2".into(), "b done".into(), false)
        ]
    );
    assert_eq!(result.text(), "Done.");
    assert_eq!(result.turns, 2);
}

async fn a_finished_run_resumes_as_it_ended<S: RunStore + Clone>(store: S) {
    let log = Log::default();
    let done = agent(model(), &log)
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();
    let model = model();
    let again = agent(model.clone(), &log)
        .resume_run("r1", &store)
        .await
        .unwrap();
    assert_eq!(again.messages, done.messages);
    assert_eq!(model.calls(), 0);
    assert_eq!(log.lock().unwrap().len(), 2);
}

async fn a_paused_run_is_decided_in_the_store<S: RunStore + Clone>(store: S) {
    // Both calls need approval: the run pauses; deciding one keeps it paused (and saved);
    // deciding the other runs them and finishes the run.
    let log = Log::default();
    let approving = |log: &Log, model: ScriptedModel| {
        Agent::builder(model)
            .model("m")
            .tool(logging_tool("a", log, true).with_approval_required(true))
            .tool(logging_tool("b", log, false).with_approval_required(true))
            .build()
    };
    let paused = approving(&log, model())
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();
    assert_eq!(
        paused.stop_reason,
        agentloop::RunStopReason::AwaitingApproval
    );
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!(saved.status, RunStatus::Paused);

    let partly = approving(&log, model())
        .decide_run("r1", [("c1", Decision::Approve)], &store)
        .await
        .unwrap();
    assert_eq!(
        partly.stop_reason,
        agentloop::RunStopReason::AwaitingApproval
    );
    assert_eq!(partly.pending_approvals.len(), 1);
    assert_eq!(partly.pending_approvals[0].id, "c2");
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!(saved.status, RunStatus::Paused);
    assert_eq!(saved.machine().unwrap().pending_approvals().len(), 1);
    assert!(log.lock().unwrap().is_empty());

    let done = approving(&log, model())
        .decide_run("r1", [("c2", Decision::deny("not now"))], &store)
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
    assert_eq!(*log.lock().unwrap(), ["r1/c1"]);
    assert_eq!(
        tool_results(&done.messages),
        [
            ("c1".into(), "a done".into(), false),
            (
                "c2".into(),
                "Error: the call to `b` was denied: not now".into(),
                true
            )
        ]
    );
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().status,
        RunStatus::Done
    );
    let wrong = approving(&log, model())
        .decide_run("r1", [("c2", Decision::Approve)], &store)
        .await
        .unwrap_err();
    assert!(matches!(wrong, Error::InvalidDecision { .. }), "{wrong:?}");
}

/// An agent on the testkit's OpenAI wire server, with fast retries.
fn wire_agent(server: &MockServer, log: &Log) -> Agent {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    config.retry = RetryPolicy {
        max_retries: 2,
        initial_backoff: std::time::Duration::from_millis(2),
        ..RetryPolicy::default()
    };
    Agent::builder_shared(Arc::new(OpenAi::new(config).unwrap()))
        .model("gpt-test")
        .tool(logging_tool("a", log, true))
        .tool(logging_tool("b", log, false))
        .max_concurrency(1)
        .build()
}

/// The script of [`model`] for the wire server.
fn wire_turns() -> Vec<Turn> {
    vec![
        Turn::tool_calls([("a", json!({})), ("b", json!({}))]).with_ids(["c1", "c2"]),
        Turn::text("Done."),
    ]
}

async fn a_failed_model_call_leaves_the_run_resumable<S: RunStore + Clone>(store: S) {
    // The first call gets a 500 on every attempt (the first and two retries): the run ends
    // with the error, and its checkpoint, marked failed, is the run's start, from which
    // resume_run issues the call again.
    let server = MockServer::start(Wire::OpenAi, wire_turns()).await.unwrap();
    server.inject(Fault::ServerError, 3);
    let log = Log::default();
    let failed = wire_agent(&server, &log)
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();
    assert_eq!(failed.stop_reason, agentloop::RunStopReason::Error);
    assert!(
        matches!(failed.error, Some(Error::Api { status: 500, .. })),
        "{:?}",
        failed.error
    );
    assert_eq!(server.calls(), 3);
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!((saved.version, saved.status), (2, RunStatus::Failed));
    let machine = saved.machine().unwrap();
    assert_eq!(machine.messages().len(), 1);
    assert!(machine.steps().is_empty());
    assert!(!machine.is_done());

    let done = wire_agent(&server, &log)
        .resume_run("r1", &store)
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
    assert!(done.error.is_none());
    assert_eq!(*log.lock().unwrap(), ["r1/c1", "r1/c2"]);
    assert_eq!(server.calls(), 5);
    history::validate(&done.messages).unwrap();
    server.assert_complete();
    let last = store.load("r1").await.unwrap().unwrap();
    assert_eq!(last.status, RunStatus::Done);
}

async fn a_model_call_cut_off_after_tools_is_issued_again<S: RunStore + Clone>(store: S) {
    // The answer's stream is cut after its headers (a disconnect is not retried once the
    // response started): the run ends with the error after its tools ran; resuming issues the
    // answer's call again and runs no tool again.
    let mut turns = wire_turns();
    turns[1] = Turn::text("Done.").with_fault(Fault::Disconnect { after_bytes: 0 });
    let server = MockServer::start(Wire::OpenAi, turns).await.unwrap();
    let log = Log::default();
    let failed = wire_agent(&server, &log)
        .run_durable_stream("r1", "Go", &store)
        .into_result()
        .await
        .unwrap();
    assert_eq!(failed.stop_reason, agentloop::RunStopReason::Error);
    assert!(failed.error.is_some());
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!(saved.status, RunStatus::Failed);
    assert_eq!(saved.machine().unwrap().steps().len(), 1);

    server.push_turn(Turn::text("Done."));
    let done = wire_agent(&server, &log)
        .resume_run("r1", &store)
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
    assert_eq!(*log.lock().unwrap(), ["r1/c1", "r1/c2"]);
    assert_eq!(
        tool_results(&done.messages),
        [
            ("c1".into(), "a done".into(), false),
            ("c2".into(), "b done".into(), false)
        ]
    );
    history::validate(&done.messages).unwrap();
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().status,
        RunStatus::Done
    );
}

async fn a_cancelled_run_is_over_in_the_store<S: RunStore + Clone>(store: S) {
    // Cancelling is the caller ending the run: c1's failure is a recorded outcome, c2, cut
    // off by the cancel, is answered as not run, and the store keeps the run as over, which
    // resume_run returns as it ended (dropping the run's future instead leaves it resumable).
    let log = Log::default();
    let started = Arc::new(Notify::new());
    let failing = Tool::from_schema("a", "Fails", json!({"type": "object"}))
        .unwrap()
        .with_handler(|_ctx: ToolContext, _input: Value| async move {
            Err::<ToolOutput, _>(agentloop::ToolError::Failed("no such order".into()))
        });
    let hanging = {
        let started = started.clone();
        Tool::from_schema("b", "Hangs", json!({"type": "object"}))
            .unwrap()
            .with_handler(move |_ctx: ToolContext, _input: Value| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<Result<ToolOutput, agentloop::ToolError>>().await
                }
            })
    };
    let make = |model: ScriptedModel| {
        Agent::builder(model)
            .model("m")
            .tool(failing.clone())
            .tool(hanging.clone())
            .max_concurrency(1)
            .build()
    };
    let token = tokio_util::sync::CancellationToken::new();
    let run = make(model())
        .with_options(|o| o.cancel = Some(token.clone()))
        .run_durable("r1", "Go", &store);
    let run = tokio::spawn(run);
    started.notified().await;
    token.cancel();
    let cancelled = run.await.unwrap().unwrap();
    assert_eq!(cancelled.stop_reason, agentloop::RunStopReason::Cancelled);
    let expected = [
        ("c1".to_owned(), "Error: no such order".to_owned(), true),
        (
            "c2".to_owned(),
            "Error: the call to `b` was not run: the run was cancelled".to_owned(),
            true,
        ),
    ];
    assert_eq!(tool_results(&cancelled.messages), expected);
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!(saved.status, RunStatus::Done);
    assert_eq!(saved.machine().unwrap().messages(), &cancelled.messages[..]);

    let model = model();
    let again = make(model.clone()).resume_run("r1", &store).await.unwrap();
    assert_eq!(again.stop_reason, agentloop::RunStopReason::Cancelled);
    assert_eq!(tool_results(&again.messages), expected);
    assert_eq!(model.calls(), 0);
    assert!(log.lock().unwrap().is_empty());
}

/// The events of a stream, as JSON, but `run_finish` (whose result holds timings): the
/// events and the result's history.
async fn events_of(stream: agentloop::run::RunStream) -> (Vec<Value>, Vec<agentloop::Message>) {
    use futures::StreamExt;
    let mut events = Vec::new();
    let mut messages = Vec::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            agentloop::RunEvent::RunFinish { result } => messages = result.messages,
            other => events.push(serde_json::to_value(&other).unwrap()),
        }
    }
    (events, messages)
}

async fn a_durable_stream_has_a_plain_streams_events_and_the_blocking_checkpoints<
    S: RunStore + Clone,
>(
    store: S,
) {
    let log = Log::default();
    let (plain, plain_messages) = events_of(agent(model(), &log).run_stream("Go")).await;
    let recording = Recording::new(store.clone(), None);
    let durable_log = Log::default();
    let (durable, messages) =
        events_of(agent(model(), &durable_log).run_durable_stream("r1", "Go", &recording)).await;
    assert_eq!(durable, plain);
    assert_eq!(messages, plain_messages);
    assert_eq!(*durable_log.lock().unwrap(), ["r1/c1", "r1/c2"]);

    // The blocking form's saves, one for one.
    let blocking = Recording::new(store.clone(), None);
    agent(model(), &Log::default())
        .run_durable("r2", "Go", &blocking)
        .await
        .unwrap();
    assert_eq!(recording.saves(), blocking.saves());
    assert_eq!(recording.saves().len(), 5);
}

async fn a_dropped_durable_stream_resumes_from_its_checkpoint<S: RunStore + Clone>(store: S) {
    use futures::StreamExt;
    let (plain, plain_messages) = events_of(agent(model(), &Log::default()).run_stream("Go")).await;

    // Dropped when the answer's step starts: its checkpoint is the closed first step.
    let log = Log::default();
    let mut stream = agent(model(), &log).run_durable_stream("r1", "Go", &store);
    loop {
        match stream.next().await.expect("the stream ended before step 1") {
            agentloop::RunEvent::StepStart { step: 1 } => break,
            _ => continue,
        }
    }
    drop(stream);
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!((saved.version, saved.status), (4, RunStatus::Running));

    // A fresh agent's stream goes on from there: `run_start`, then the plain stream's events
    // from step 1 on; no tool runs again.
    let model = model();
    let (resumed, messages) =
        events_of(agent(model.clone(), &log).resume_run_stream("r1", &store)).await;
    let from = plain
        .iter()
        .position(|e| e["type"] == "step_start" && e["step"] == 1)
        .unwrap();
    let mut expected = vec![plain[0].clone()];
    expected.extend_from_slice(&plain[from..]);
    assert_eq!(expected[0]["type"], "run_start");
    // The fresh model numbers its messages from 0 again.
    let without_ids = |events: Vec<Value>| -> Vec<Value> {
        events
            .into_iter()
            .map(|mut e| {
                if let Some(e) = e.as_object_mut() {
                    e.remove("id");
                }
                if let Some(response) = e.get_mut("response").and_then(Value::as_object_mut) {
                    response.remove("id");
                }
                e
            })
            .collect()
    };
    assert_eq!(without_ids(resumed), without_ids(expected));
    assert_eq!(messages, plain_messages);
    assert_eq!(model.calls(), 1);
    assert_eq!(*log.lock().unwrap(), ["r1/c1", "r1/c2"]);
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().status,
        RunStatus::Done
    );

    // A run the store does not have ends the stream with the error.
    let (events, _) = events_of(agent(model.clone(), &log).resume_run_stream("r9", &store)).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "error");
}

/// The suite against one store: `$make` is a future of `Some(store)`, or `None` when the
/// store is not available here (it printed a skip notice).
macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            #[tokio::test]
            async fn checkpoints_follow_every_state_change() {
                let Some(store) = $make.await else { return };
                super::checkpoints_follow_every_state_change(store).await;
            }

            #[tokio::test]
            async fn a_stale_writer_is_refused_and_a_run_id_is_taken_once() {
                let Some(store) = $make.await else { return };
                super::a_stale_writer_is_refused_and_a_run_id_is_taken_once(store).await;
            }

            #[tokio::test]
            async fn a_recorded_outcome_never_runs_again() {
                let Some(store) = $make.await else { return };
                super::a_recorded_outcome_never_runs_again(store).await;
            }

            #[tokio::test]
            async fn an_idempotent_tool_cut_off_runs_again() {
                let Some(store) = $make.await else { return };
                super::an_idempotent_tool_cut_off_runs_again(store).await;
            }

            #[tokio::test]
            async fn a_steps_last_outcome_is_saved_with_its_close() {
                let Some(store) = $make.await else { return };
                super::a_steps_last_outcome_is_saved_with_its_close(store).await;
            }

            #[tokio::test]
            async fn a_model_call_in_flight_is_issued_again() {
                let Some(store) = $make.await else { return };
                super::a_model_call_in_flight_is_issued_again(store).await;
            }

            #[tokio::test]
            async fn a_paused_run_is_decided_in_the_store() {
                let Some(store) = $make.await else { return };
                super::a_paused_run_is_decided_in_the_store(store).await;
            }

            #[tokio::test]
            async fn a_finished_run_resumes_as_it_ended() {
                let Some(store) = $make.await else { return };
                super::a_finished_run_resumes_as_it_ended(store).await;
            }

            #[tokio::test]
            async fn a_failed_model_call_leaves_the_run_resumable() {
                let Some(store) = $make.await else { return };
                super::a_failed_model_call_leaves_the_run_resumable(store).await;
            }

            #[tokio::test]
            async fn a_model_call_cut_off_after_tools_is_issued_again() {
                let Some(store) = $make.await else { return };
                super::a_model_call_cut_off_after_tools_is_issued_again(store).await;
            }

            #[tokio::test]
            async fn a_cancelled_run_is_over_in_the_store() {
                let Some(store) = $make.await else { return };
                super::a_cancelled_run_is_over_in_the_store(store).await;
            }

            #[tokio::test]
            async fn a_durable_stream_has_a_plain_streams_events_and_the_blocking_checkpoints() {
                let Some(store) = $make.await else { return };
                super::a_durable_stream_has_a_plain_streams_events_and_the_blocking_checkpoints(
                    store,
                )
                .await;
            }

            #[tokio::test]
            async fn a_dropped_durable_stream_resumes_from_its_checkpoint() {
                let Some(store) = $make.await else { return };
                super::a_dropped_durable_stream_resumes_from_its_checkpoint(store).await;
            }
        }
    };
}

suite!(memory, async { Some(MemoryStore::new()) });

#[cfg(feature = "sqlite")]
fn sqlite_store() -> agentloop::run::SqliteStore {
    // The directory outlives the test: a test's store is small, and the OS cleans /tmp.
    let dir = tempfile::tempdir().unwrap().keep();
    agentloop::run::SqliteStore::open(dir.join("runs.db")).unwrap()
}

#[cfg(feature = "sqlite")]
suite!(sqlite, async { Some(sqlite_store()) });

/// A store in a fresh database of the Postgres server `AGENTLOOP_TEST_POSTGRES` names
/// (`postgres://postgres@127.0.0.1:PORT/postgres`; CI starts one), or a skip notice.
#[cfg(feature = "postgres")]
async fn postgres_store(worker: &str) -> Option<agentloop::run::PostgresStore> {
    let url = postgres_database().await?;
    Some(postgres_worker(&url, worker).await)
}

#[cfg(feature = "postgres")]
async fn postgres_worker(url: &str, worker: &str) -> agentloop::run::PostgresStore {
    agentloop::run::PostgresStore::connect(url, worker, std::time::Duration::from_millis(300))
        .await
        .unwrap()
}

/// The URL of a fresh database, or `None` after a skip notice.
#[cfg(feature = "postgres")]
async fn postgres_database() -> Option<String> {
    let Ok(url) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(
            "Postgres run store: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)",
        );
        return None;
    };
    let db = format!("agentloop_test_{}", rand_suffix());
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    Some(format!("{base}/{db}"))
}

#[cfg(feature = "postgres")]
fn rand_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{nanos}", std::process::id())
}

#[cfg(feature = "postgres")]
suite!(postgres, postgres_store("w1"));

#[tokio::test]
async fn outside_a_durable_run_the_idempotency_key_is_the_call_id() {
    let log = Log::default();
    agent(model(), &log).run("Go").await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["c1", "c2"]);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_store_keeps_runs_in_one_wal_file_that_another_store_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = agentloop::run::SqliteStore::open(&path).unwrap();
    let log = Log::default();
    let done = agent(model(), &log)
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();
    // WAL mode keeps a write-ahead log next to the database while it is open.
    assert!(dir.path().join("runs.db-wal").exists());

    let reopened = agentloop::run::SqliteStore::open(&path).unwrap();
    let checkpoint = reopened.load("r1").await.unwrap().unwrap();
    assert_eq!(checkpoint.version, 5);
    assert_eq!(checkpoint.machine().unwrap().messages(), &done.messages[..]);
    let stale = reopened
        .save("r1", 4, RunStatus::Done, checkpoint.state.clone())
        .await
        .unwrap_err();
    assert!(matches!(
        stale,
        Error::StaleCheckpoint {
            expected: 4,
            found: 5,
            ..
        }
    ));
}

/// The store writes on a thread of its own, not on Tokio's blocking pool: any executor can
/// await it.
#[cfg(feature = "sqlite")]
#[test]
fn a_sqlite_store_is_awaited_outside_a_tokio_runtime() {
    let store = sqlite_store();
    futures::executor::block_on(async {
        assert_eq!(
            store
                .save("r1", 0, RunStatus::Running, "{}".into())
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .save("r1", 1, RunStatus::Done, "[]".into())
                .await
                .unwrap(),
            2
        );
        let checkpoint = store.load("r1").await.unwrap().unwrap();
        assert_eq!(
            (checkpoint.version, checkpoint.status),
            (2, RunStatus::Done)
        );
        assert_eq!(checkpoint.state, "[]");
        assert_eq!(store.list().await.unwrap().len(), 1);
    });
}

/// A save that finds the store's connection free is written on the caller's thread: it is
/// done when first polled, with no hand-off to the store's thread.
#[cfg(feature = "sqlite")]
#[test]
fn a_sqlite_save_on_a_free_connection_is_done_when_first_polled() {
    use futures::FutureExt;
    let store = sqlite_store();
    let saved = store
        .save("r1", 0, RunStatus::Running, "{}".into())
        .now_or_never();
    assert!(matches!(saved, Some(Ok(1))), "{saved:?}");
    let stale = store
        .save("r1", 0, RunStatus::Running, "{}".into())
        .now_or_never();
    assert!(
        matches!(
            stale,
            Some(Err(Error::StaleCheckpoint {
                expected: 0,
                found: 1,
                ..
            }))
        ),
        "{stale:?}"
    );
}

/// A save that finds the file locked by another process's write waits for the lock on the
/// store's thread, never on the caller's, and is written once the lock is let go.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_save_waits_for_another_processs_lock_off_the_callers_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = agentloop::run::SqliteStore::open(&path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut save = std::pin::pin!(store.save("r1", 0, RunStatus::Running, "{}".into()));
    assert!(futures::poll!(save.as_mut()).is_pending());
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(save.await.unwrap(), 1);
    assert_eq!(store.load("r1").await.unwrap().unwrap().version, 1);
}

/// Saves that arrive together are committed together; each is still checked on its own: of
/// two first saves of a run, one wins and the other is stale, and nothing else is lost. They
/// queue up on the store's thread while another process holds the file's write lock.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_saves_that_arrive_together_each_keep_their_version_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = agentloop::run::SqliteStore::open(&path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let ids: Vec<String> = (0..40).map(|n| format!("r{}", n / 2)).collect();
    let saves = ids
        .iter()
        .map(|id| store.save(id, 0, RunStatus::Running, format!("{{\"id\":\"{id}\"}}")));
    let mut saves = std::pin::pin!(futures::future::join_all(saves));
    assert!(futures::poll!(saves.as_mut()).is_pending());
    other.execute_batch("COMMIT").unwrap();
    let saved = saves.await;
    for pair in saved.chunks(2) {
        let won = pair.iter().filter(|s| matches!(s, Ok(1))).count();
        let stale = pair
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    Err(Error::StaleCheckpoint {
                        expected: 0,
                        found: 1,
                        ..
                    })
                )
            })
            .count();
        assert_eq!((won, stale), (1, 1), "{pair:?}");
    }
    let runs = store.list().await.unwrap();
    assert_eq!(runs.len(), 20);
    for run in runs {
        let checkpoint = store.load(&run.run_id).await.unwrap().unwrap();
        assert_eq!(checkpoint.version, 1);
        assert_eq!(checkpoint.state, format!("{{\"id\":\"{}\"}}", run.run_id));
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_worker_that_stops_loses_its_run_to_another_and_cannot_write() {
    let Some(url) = postgres_database().await else {
        return;
    };
    let first = postgres_worker(&url, "w1").await;
    let second = postgres_worker(&url, "w2").await;

    // w1 stops right after its tools' start was saved (version 2), holding the lease.
    let stalled = Recording::new(first.clone(), Some(Crash::After(2)));
    let log = Log::default();
    let run = agent(model(), &log).run_durable("r1", "Go", &stalled);
    tokio::select! {
        result = run => panic!("the run ended before its crash: {result:?}"),
        () = stalled.crashed.notified() => {}
    }
    assert_eq!(
        second.claim().await.unwrap(),
        None,
        "w1's lease still holds"
    );

    // Its lease expires; w2 takes the run and finishes it.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(second.claim().await.unwrap().as_deref(), Some("r1"));
    assert_eq!(second.claim().await.unwrap(), None, "a run is claimed once");
    assert!(!first.heartbeat("r1").await.unwrap(), "w1 lost the lease");
    // w1's late write, on the version it read, is refused even before w2 wrote: the claim
    // moved the version on.
    let late = first
        .save("r1", 2, RunStatus::Running, "{}".into())
        .await
        .unwrap_err();
    assert!(
        matches!(
            late,
            Error::StaleCheckpoint {
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{late:?}"
    );
    let second_log = Log::default();
    let done = agent(model(), &second_log)
        .resume_run("r1", &second)
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
    // c1 (idempotent) runs again; c2 had started as far as the store knows.
    assert_eq!(*second_log.lock().unwrap(), ["r1/c1"]);
    history::validate(&done.messages).unwrap();

    let last = second.load("r1").await.unwrap().unwrap();
    assert_eq!(last.status, RunStatus::Done);
    assert_eq!(last.machine().unwrap().messages(), &done.messages[..]);
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_heartbeat_keeps_a_postgres_lease_past_its_expiry() {
    let Some(url) = postgres_database().await else {
        return;
    };
    let first = postgres_worker(&url, "w1").await;
    let second = postgres_worker(&url, "w2").await;
    let stalled = Recording::new(first.clone(), Some(Crash::After(2)));
    let log = Log::default();
    let run = agent(model(), &log).run_durable("r1", "Go", &stalled);
    let heartbeat = first.keep_alive("r1");
    tokio::select! {
        result = run => panic!("the run ended before its stall: {result:?}"),
        () = stalled.crashed.notified() => {}
    }
    // Twice the 300 ms lease: the heartbeat keeps it.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(second.claim().await.unwrap(), None);
    drop(heartbeat);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(second.claim().await.unwrap().as_deref(), Some("r1"));
}

#[tokio::test]
async fn a_paused_run_is_decided_in_the_store_as_a_stream() {
    let store = MemoryStore::new();
    let log = Log::default();
    let approving = |log: &Log, model: ScriptedModel| {
        Agent::builder(model)
            .model("m")
            .tool(logging_tool("a", log, true).with_approval_required(true))
            .tool(logging_tool("b", log, false).with_approval_required(true))
            .build()
    };
    let paused = approving(&log, model())
        .run_durable("r1", "Go", &store)
        .await
        .unwrap();
    assert_eq!(
        paused.stop_reason,
        agentloop::RunStopReason::AwaitingApproval
    );
    let (events, messages) = events_of(approving(&log, model()).decide_run_stream(
        "r1",
        [("c1", Decision::Approve), ("c2", Decision::deny("not now"))],
        &store,
    ))
    .await;
    let results: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_result")
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["c1", "c2"]);
    assert_eq!(events[0]["type"], "run_start");
    assert_eq!(*log.lock().unwrap(), ["r1/c1"]);
    assert_eq!(
        tool_results(&messages),
        [
            ("c1".into(), "a done".into(), false),
            (
                "c2".into(),
                "Error: the call to `b` was denied: not now".into(),
                true
            )
        ]
    );
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().status,
        RunStatus::Done
    );
    // A decision that no longer applies ends the stream with the error; nothing runs.
    let (events, _) = events_of(approving(&log, model()).decide_run_stream(
        "r1",
        [("c2", Decision::Approve)],
        &store,
    ))
    .await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "error");
    assert_eq!(*log.lock().unwrap(), ["r1/c1"]);
}
