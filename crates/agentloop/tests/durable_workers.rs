//! Two worker processes on one Postgres database (issue 39, acceptance): each a real process
//! (this test binary run again with `DURABLE_WORKER` set) with a `PostgresStore` of its own, a
//! 300 ms lease kept alive by heartbeat, and the testkit's OpenAI wire server. One worker
//! starts a run; the other waits to claim it. Killed with SIGKILL while a tool runs, the first
//! loses its lease; the second claims the run once the lease expired and finishes it, with no
//! recorded tool run again. Stopped with SIGSTOP instead, and continued after the second one
//! finished the run, the first worker's late save is refused with `Error::StaleCheckpoint`.
//!
//! Needs `AGENTLOOP_TEST_POSTGRES` (CI starts a server; without it, a skip notice).
//!
//! OpenAI Chat Completions shapes (served by the testkit): an assistant message's `tool_calls`
//! answered by `{"role": "tool", "tool_call_id", "content"}` messages
//! (https://platform.openai.com/docs/guides/function-calling).
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::{PostgresStore, RunStatus, RunStore};
use agentloop::{Agent, ContentBlock, Message, Tool, ToolContext, ToolOutput, history};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

const CHILD: &str = "DURABLE_WORKER";
const LEASE: Duration = Duration::from_millis(300);

/// The model's answers by step: `a` (idempotent), then `b` (not), then the answer.
fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("a", json!({})).with_ids(["s0a"]),
        Turn::tool_call("b", json!({})).with_ids(["s1b"]),
        Turn::text("All done."),
    ]
}

/// A tool that appends its idempotency key to `log` (its side effect), then takes `after`:
/// `b` outlasts the lease, which only the heartbeat keeps, and is where the worker is killed.
fn logging_tool(name: &'static str, log: PathBuf, idempotent: bool, after: Duration) -> Tool {
    Tool::from_schema(name, "Has a side effect", json!({"type": "object"}))
        .unwrap()
        .with_handler(move |ctx: ToolContext, _input: Value| {
            let log = log.clone();
            async move {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                file.write_all(format!("{}\n", ctx.idempotency_key()).as_bytes())
                    .unwrap();
                drop(file);
                tokio::time::sleep(after).await;
                Ok(ToolOutput::text(format!("{} ran", ctx.tool_name)))
            }
        })
        .with_idempotent(idempotent)
}

/// A worker: `start` runs `run_id` from its start; `claim` waits (at most 15 s) to claim a
/// run whose lease expired and resumes it. Either writes how its run ended to `<role>.json`.
async fn worker(dir: &Path, role: &str, run_id: &str, url: &str) {
    let name = format!("{role}-{}", std::process::id());
    let store = PostgresStore::connect(url, name, LEASE).await.unwrap();
    if role == "claim" {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(claimed) = store.claim().await.unwrap() {
                assert_eq!(claimed, run_id);
                break;
            }
            assert!(Instant::now() < deadline, "no run to claim in 15 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The model's answers from the step the checkpoint stands at: a fresh process has a
    // fresh server.
    let step = match store.load(run_id).await.unwrap() {
        Some(checkpoint) => checkpoint.machine().unwrap().steps().len(),
        None => 0,
    };
    let server = MockServer::start(Wire::OpenAi, turns().into_iter().skip(step))
        .await
        .unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let log = dir.join("tools.log");
    let agent = Agent::builder_shared(Arc::new(OpenAi::new(config).unwrap()))
        .model("gpt-test")
        .tool(logging_tool("a", log.clone(), true, Duration::ZERO))
        .tool(logging_tool("b", log, false, Duration::from_millis(1500)))
        .build();
    let result = if role == "claim" {
        let _heartbeat = store.keep_alive(run_id);
        agent.resume_run(run_id, &store).await
    } else {
        // The first save, which takes the lease, comes long before the first heartbeat.
        let _heartbeat = store.keep_alive(run_id);
        agent.run_durable(run_id, "Go", &store).await
    }
    .unwrap();
    let ended = json!({
        "stop_reason": result.stop_reason.as_str(),
        "error_kind": result.error.as_ref().map(agentloop::Error::kind),
        "error": result.error.as_ref().map(ToString::to_string),
        "messages": result.messages,
    });
    std::fs::write(dir.join(format!("{role}.json")), ended.to_string()).unwrap();
}

#[test]
fn durable_worker() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return; // Only runs as a child of the test below.
    };
    let var = |name: &str| std::env::var(name).unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(worker(
            Path::new(&dir),
            &var("DURABLE_WORKER_ROLE"),
            &var("DURABLE_WORKER_RUN"),
            &var("DURABLE_WORKER_POSTGRES"),
        ));
}

fn spawn_worker(dir: &Path, role: &str, run_id: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "durable_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, dir)
        .env("DURABLE_WORKER_ROLE", role)
        .env("DURABLE_WORKER_RUN", run_id)
        .env("DURABLE_WORKER_POSTGRES", url)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("tools.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Wait (at most 15 s) until `key`'s tool has had its side effect.
fn wait_for_tool(dir: &Path, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !log_lines(dir).iter().any(|line| line == key) {
        assert!(Instant::now() < deadline, "{key} never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ended(dir: &Path, role: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{role}.json"))).unwrap())
        .unwrap()
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Tool results by call id: (text, is_error), in history order.
fn results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => {
                Some((r.tool_use_id.clone(), r.content.to_text(), r.is_error))
            }
            _ => None,
        })
        .collect()
}

/// Check the run the claiming worker finished: `s0a`'s recorded outcome kept, `s1b` (cut off
/// while running, not idempotent) interrupted, every tool run once, the answer given, and the
/// store's last checkpoint that history.
fn check_finished(
    dir: &Path,
    run_id: &str,
    store: &PostgresStore,
    runtime: &tokio::runtime::Runtime,
) {
    let claimed = ended(dir, "claim");
    assert_eq!(claimed["stop_reason"], "end_turn", "{claimed}");
    let messages: Vec<Message> = serde_json::from_value(claimed["messages"].clone()).unwrap();
    history::validate(&messages).unwrap();
    assert_eq!(
        results(&messages),
        [
            ("s0a".to_owned(), "a ran".to_owned(), false),
            (
                "s1b".to_owned(),
                "Error: the call to `b` was interrupted: it was running when the process \
                 running the run stopped, and it is not marked idempotent, so it was not run \
                 again; it may or may not have taken effect"
                    .to_owned(),
                true
            ),
        ]
    );
    let Some(ContentBlock::Text { text }) = messages.last().and_then(|m| m.content.first()) else {
        panic!("no answer: {messages:?}");
    };
    assert_eq!(text, "All done.");
    // No tool ran twice: neither the recorded `s0a` nor the interrupted `s1b`.
    assert_eq!(
        log_lines(dir),
        [format!("{run_id}/s0a"), format!("{run_id}/s1b")]
    );
    let last = runtime.block_on(store.load(run_id)).unwrap().unwrap();
    assert_eq!(last.status, RunStatus::Done);
    assert_eq!(last.machine().unwrap().messages(), &messages[..]);
}

#[test]
fn a_killed_worker_loses_its_run_to_another_and_a_stale_one_cannot_write() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(
            "Postgres workers test: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)",
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, connection) = runtime
        .block_on(tokio_postgres::connect(&server, tokio_postgres::NoTls))
        .unwrap();
    runtime.spawn(connection);
    let db = format!("agentloop_workers_{}", std::process::id());
    runtime
        .block_on(client.batch_execute(&format!("CREATE DATABASE {db}")))
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    let url = format!("{base}/{db}");
    let observer = runtime
        .block_on(PostgresStore::connect(&url, "observer", LEASE))
        .unwrap();
    let root = tempfile::tempdir().unwrap();

    // SIGKILL: the first worker dies while `b` runs; the second claims the run after the
    // lease expired and finishes it.
    let dir = root.path().join("killed");
    std::fs::create_dir(&dir).unwrap();
    let mut first = spawn_worker(&dir, "start", "job-killed", &url);
    let mut second = spawn_worker(&dir, "claim", "job-killed", &url);
    wait_for_tool(&dir, "job-killed/s1b");
    first.kill().unwrap(); // SIGKILL on Unix
    first.wait().unwrap();
    assert!(second.wait().unwrap().success(), "the second worker failed");
    assert!(!dir.join("start.json").exists());
    check_finished(&dir, "job-killed", &observer, &runtime);

    // SIGSTOP: the first worker stalls while `b` runs and loses the run the same way; let go
    // after the second one finished, its tool ends and its save is refused.
    let dir = root.path().join("stalled");
    std::fs::create_dir(&dir).unwrap();
    let mut first = spawn_worker(&dir, "start", "job-stalled", &url);
    let mut second = spawn_worker(&dir, "claim", "job-stalled", &url);
    wait_for_tool(&dir, "job-stalled/s1b");
    signal(&first, nix::sys::signal::Signal::SIGSTOP);
    let finished = second.wait();
    signal(&first, nix::sys::signal::Signal::SIGCONT);
    assert!(finished.unwrap().success(), "the second worker failed");
    let done = runtime
        .block_on(observer.load("job-stalled"))
        .unwrap()
        .unwrap();
    assert!(first.wait().unwrap().success(), "the first worker failed");
    let stale = ended(&dir, "start");
    assert_eq!(stale["stop_reason"], "error", "{stale}");
    assert_eq!(stale["error_kind"], "stale_checkpoint", "{stale}");
    let message = stale["error"].as_str().unwrap();
    assert!(
        message.starts_with("the checkpoint of run `job-stalled` moved on: this writer read version 4 but the store holds version"),
        "{message}"
    );
    // The late writer changed nothing: the store still holds the second worker's run.
    let after = runtime
        .block_on(observer.load("job-stalled"))
        .unwrap()
        .unwrap();
    assert_eq!(after, done);
    check_finished(&dir, "job-stalled", &observer, &runtime);
}
