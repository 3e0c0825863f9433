//! Crash recovery, the real thing (issue 39 item 5): a child process (this test binary run
//! again with `DURABLE_CRASH_CHILD` set) runs a durable agent on a SQLite store against the
//! testkit's OpenAI wire server, with tools that append their idempotency key to a file. The
//! parent kills it with SIGKILL at seeded random moments (during a model call, during a tool,
//! between steps), starts it again, and it resumes, until the run finishes. Then: the history
//! equals an uninterrupted run's except for calls answered as interrupted, which are calls of
//! the tool not marked idempotent; no tool ran again after its outcome was recorded; a
//! non-idempotent call ran at most once; the history is valid.
//!
//! OpenAI Chat Completions shapes (served by the testkit): an assistant message's `tool_calls`
//! answered by `{"role": "tool", "tool_call_id", "content"}` messages
//! (https://platform.openai.com/docs/guides/function-calling).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
#[cfg(feature = "postgres")]
use agentloop::run::PostgresStore;
use agentloop::run::{RunStore, SqliteStore};
use agentloop::{Agent, ContentBlock, Message, Tool, ToolContext, ToolOutput, history};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const CHILD: &str = "DURABLE_CRASH_CHILD";
const RUN_ID: &str = "crash-run";
/// The Postgres database the child's store is in (the SQLite file in its directory otherwise).
#[cfg(feature = "postgres")]
const CHILD_POSTGRES: &str = "DURABLE_CRASH_POSTGRES";

/// The model's answers by step: parallel calls, a single call, a mix, then the answer. `a` is
/// idempotent, `b` is not.
fn turns() -> Vec<Turn> {
    let slow = |turn: Turn| {
        turn.with_delay(Duration::from_millis(8))
            .with_chunk_delay(Duration::from_millis(3))
    };
    vec![
        slow(
            Turn::tool_calls([("a", json!({"n": 1})), ("b", json!({"n": 2}))])
                .with_ids(["s0a", "s0b"]),
        ),
        slow(Turn::tool_call("b", json!({"n": 3})).with_ids(["s1b"])),
        slow(
            Turn::tool_calls([
                ("a", json!({"n": 4})),
                ("b", json!({"n": 5})),
                ("a", json!({"n": 6})),
            ])
            .with_ids(["s2a", "s2b", "s2c"]),
        ),
        slow(Turn::text("All done.")),
    ]
}

/// A tool that waits, appends its idempotency key to `log` (its side effect), and waits again:
/// a kill can land before the effect, or after it and before the outcome is recorded.
fn logging_tool(name: &'static str, log: PathBuf, idempotent: bool) -> Tool {
    Tool::from_schema(name, "Has a side effect", json!({"type": "object"}))
        .unwrap()
        .with_handler(move |ctx: ToolContext, _input: Value| {
            let log = log.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(12)).await;
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                // One write of the whole line: a kill cannot leave half of it.
                file.write_all(format!("{}\n", ctx.idempotency_key()).as_bytes())
                    .unwrap();
                drop(file);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(ToolOutput::text(format!("{} ran", ctx.tool_name)))
            }
        })
        .with_idempotent(idempotent)
}

/// The child: start or resume the run, serving the model's answers from the step the
/// checkpoint stands at (a fresh process has a fresh server), and write the final history.
async fn child(dir: &Path) {
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var(CHILD_POSTGRES) {
        // A worker of its own, whose lease on the run lasts 150 ms: the next process waits
        // for the killed one's lease to expire, then claims the run.
        let worker = format!("worker-{}", std::process::id());
        let store = PostgresStore::connect(&url, worker, Duration::from_millis(150))
            .await
            .unwrap();
        if store.load(RUN_ID).await.unwrap().is_some() {
            for _ in 0..400 {
                let status = store.load(RUN_ID).await.unwrap().unwrap().status;
                if status != agentloop::run::RunStatus::Running
                    || store.claim().await.unwrap().is_some()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        return child_on(dir, store).await;
    }
    child_on(dir, SqliteStore::open(dir.join("runs.db")).unwrap()).await;
}

/// [`child`] on one store.
async fn child_on<S: RunStore + Clone>(dir: &Path, store: S) {
    let checkpoint = store.load(RUN_ID).await.unwrap();
    let step = match &checkpoint {
        Some(c) => c.machine().unwrap().steps().len(),
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
        .tool(logging_tool("a", log.clone(), true))
        .tool(logging_tool("b", log, false))
        .build();
    let result = match checkpoint {
        None => agent.run_durable(RUN_ID, "Go", &store).await,
        Some(_) => agent.resume_run(RUN_ID, &store).await,
    }
    .unwrap();
    assert!(result.error.is_none(), "{:?}", result.error);
    std::fs::write(
        dir.join("result.json"),
        serde_json::to_string(&result.messages).unwrap(),
    )
    .unwrap();
}

#[test]
fn durable_crash_child() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return; // Only runs as the child of `killed_runs_recover_...`.
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(child(Path::new(&dir)));
}

fn spawn_child(dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "durable_crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, dir)
        .envs(
            std::fs::read_to_string(dir.join("postgres-url"))
                .ok()
                .map(|url| ("DURABLE_CRASH_POSTGRES", url)),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Run the child to the end without a kill; the time it took.
fn uninterrupted(dir: &Path) -> Duration {
    let started = Instant::now();
    let status = spawn_child(dir).wait().unwrap();
    assert!(status.success());
    started.elapsed()
}

fn read_history(dir: &Path) -> Vec<Message> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap()
}

fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("tools.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What the checkpoint says: the call ids whose outcome it records (closed steps' results,
/// and outcomes of the open step recorded one by one), the calls that had started without a
/// recorded outcome, and its phase.
fn recorded(dir: &Path) -> (BTreeSet<String>, BTreeSet<String>, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let loaded = runtime.block_on(async {
        #[cfg(feature = "postgres")]
        if let Ok(url) = std::fs::read_to_string(dir.join("postgres-url")) {
            killed_worker_gone(&url).await;
            let store = PostgresStore::connect(&url, "observer", Duration::from_millis(150))
                .await
                .unwrap();
            return store.load(RUN_ID).await;
        }
        let store = SqliteStore::open(dir.join("runs.db")).unwrap();
        store.load(RUN_ID).await
    });
    let Some(checkpoint) = loaded.unwrap() else {
        return (BTreeSet::new(), BTreeSet::new(), "none".into());
    };
    let state: Value = serde_json::from_str(&checkpoint.state).unwrap();
    let machine = &state["machine"];
    let mut ids = BTreeSet::new();
    for step in machine["steps"].as_array().unwrap() {
        for result in step["tool_results"].as_array().unwrap() {
            ids.insert(result["tool_use_id"].as_str().unwrap().to_owned());
        }
    }
    if let Some(settled) = machine["phase"]["held"]["settled"].as_array() {
        for pair in settled {
            ids.insert(pair[0]["id"].as_str().unwrap().to_owned());
        }
    }
    let phase = machine["phase"]["phase"].as_str().unwrap_or("?").to_owned();
    let mut started = BTreeSet::new();
    if phase == "awaiting_tools" {
        for call in machine["phase"]["run"].as_array().unwrap() {
            started.insert(call["id"].as_str().unwrap().to_owned());
        }
    }
    let phase = if phase == "ready" && machine["steps"].as_array().unwrap().is_empty() {
        "start".to_owned()
    } else {
        phase
    };
    (ids, started, phase)
}

/// Wait until no backend but ours is connected to the run's database: a SIGKILLed worker's
/// backend still commits a statement it had received before it sees the socket closed, so a
/// checkpoint read before then could be older than what the next worker resumes from.
#[cfg(feature = "postgres")]
async fn killed_worker_gone(url: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for _ in 0..500 {
        let others: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if others == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the killed worker's connection to {url} stayed open for 5 s");
}

/// Tool results by call id: (text, is_error).
fn results(messages: &[Message]) -> BTreeMap<String, (String, bool)> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => {
                Some((r.tool_use_id.clone(), (r.content.to_text(), r.is_error)))
            }
            _ => None,
        })
        .collect()
}

/// The tool each call id belongs to (ids are `s<step><letter>`; the script says which).
fn tool_of(id: &str) -> &'static str {
    match id {
        "s0a" | "s2a" | "s2c" => "a",
        _ => "b",
    }
}

#[test]
fn killed_runs_recover_with_every_tool_once() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    crash_suite(&|_| {});
}

/// The same against Postgres, each process a worker of its own that claims the run once the
/// killed one's lease expired; a skip notice without `AGENTLOOP_TEST_POSTGRES` (CI sets it).
#[cfg(feature = "postgres")]
#[test]
fn killed_postgres_workers_recover_with_every_tool_once() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(
            "Postgres crash test: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)",
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
    let (base, _) = server.rsplit_once('/').unwrap();
    let stamp = std::process::id();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    // A database per run, its URL in the run's directory for the processes.
    crash_suite(&|dir| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let db = format!("agentloop_crash_{stamp}_{n}");
        runtime
            .block_on(client.batch_execute(&format!("CREATE DATABASE {db}")))
            .unwrap();
        std::fs::write(dir.join("postgres-url"), format!("{base}/{db}")).unwrap();
    });
}

/// Kill, restart and check runs until enough kills landed; `prepare` sets up each run's
/// directory (the baseline's too) before its first process.
fn crash_suite(prepare: &dyn Fn(&Path)) {
    let root = tempfile::tempdir().unwrap();
    let baseline_dir = root.path().join("baseline");
    std::fs::create_dir(&baseline_dir).unwrap();
    prepare(&baseline_dir);
    let took = uninterrupted(&baseline_dir);
    let baseline = read_history(&baseline_dir);
    history::validate(&baseline).unwrap();
    assert_eq!(log_lines(&baseline_dir).len(), 6);

    // Seeded runs until at least 50 kills landed (a kill that comes after its run finished
    // does not count), at least 10 runs.
    const MIN_KILLS: usize = 50;
    const KILLS_PER_RUN: usize = 5;
    let mut kills = 0;
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    let mut interrupted_seen = 0;
    for seed in 0.. {
        if kills >= MIN_KILLS && seed >= 10 {
            break;
        }
        assert!(seed < 60, "only {kills} kills landed in 60 runs");
        let mut rng = StdRng::seed_from_u64(seed);
        let dir = root.path().join(format!("run-{seed}"));
        std::fs::create_dir(&dir).unwrap();
        prepare(&dir);
        // Keys whose outcome a checkpoint recorded, with how many log lines there were then.
        let mut recorded_at: Vec<(BTreeSet<String>, usize)> = Vec::new();
        // Calls cut off while running: interrupted if of `b`, run again if of `a`.
        let mut cut_off = BTreeSet::new();
        let mut landed = 0;
        let mut attempts = 0;
        while landed < KILLS_PER_RUN {
            attempts += 1;
            assert!(
                attempts < 50,
                "seed {seed}: the run kept finishing before its kill"
            );
            let mut process = spawn_child(&dir);
            // Somewhere in what is left of the run, start-up included.
            let at = rng.random_range(0..took.as_millis() as u64);
            std::thread::sleep(Duration::from_millis(at));
            if process.try_wait().unwrap().is_some() {
                // It finished first: start over on a fresh run dir is not needed, the
                // finished run resumes as it ended; count no kill.
                break;
            }
            process.kill().unwrap(); // SIGKILL on Unix
            process.wait().unwrap();
            landed += 1;
            kills += 1;
            let (ids, started, phase) = recorded(&dir);
            cut_off.extend(started);
            *phases.entry(phase).or_default() += 1;
            recorded_at.push((ids, log_lines(&dir).len()));
        }
        // The last process runs to the end.
        let status = spawn_child(&dir).wait().unwrap();
        assert!(status.success(), "seed {seed}: the resumed run failed");

        let history = read_history(&dir);
        history::validate(&history).unwrap();
        let log = log_lines(&dir);

        // No tool ran after a checkpoint recorded its outcome.
        for (ids, lines_then) in &recorded_at {
            for later in &log[*lines_then..] {
                let id = later.rsplit('/').next().unwrap();
                assert!(
                    !ids.contains(id),
                    "seed {seed}: {later} ran again after its outcome was recorded"
                );
            }
        }
        // Every key is this run's; a non-idempotent call ran at most once.
        let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
        for line in &log {
            let (run, id) = line.split_once('/').unwrap();
            assert_eq!(run, RUN_ID);
            *runs.entry(id).or_default() += 1;
        }
        for (id, count) in &runs {
            if tool_of(id) == "b" {
                assert_eq!(*count, 1, "seed {seed}: {id} of `b` ran {count} times");
            }
        }

        // Exactly the calls of `b` cut off while running are interrupted.
        let got = results(&history);
        let interrupted: BTreeSet<String> = got
            .iter()
            .filter(|(_, (text, _))| text.contains("was interrupted"))
            .map(|(id, _)| id.clone())
            .collect();
        let cut_off_b: BTreeSet<String> = cut_off
            .into_iter()
            .filter(|id| tool_of(id) == "b")
            .collect();
        assert_eq!(interrupted, cut_off_b, "seed {seed}: interrupted calls");

        // The history is the uninterrupted one, but for calls of `b` answered as interrupted.
        let mut expected = baseline.clone();
        for (id, (text, is_error)) in &got {
            if text.starts_with("Error: the call to `b` was interrupted") {
                assert!(*is_error);
                assert_eq!(tool_of(id), "b", "seed {seed}: idempotent {id} interrupted");
                interrupted_seen += 1;
                for message in &mut expected {
                    for block in &mut message.content {
                        if let ContentBlock::ToolResult(r) = block
                            && r.tool_use_id == *id
                        {
                            *r = agentloop::ToolResult::error(id, text.clone());
                        }
                    }
                }
            } else {
                // A call answered normally ran (at least once).
                assert!(
                    runs.contains_key(id.as_str()),
                    "seed {seed}: {id} never ran"
                );
            }
        }
        assert_eq!(
            serde_json::to_value(&history).unwrap(),
            serde_json::to_value(&expected).unwrap(),
            "seed {seed}: the history differs from the uninterrupted run's"
        );
    }
    eprintln!(
        "durable crash test: {kills} kills by checkpoint phase {phases:?}, {interrupted_seen} interrupted calls"
    );
    // The kills landed in every kind of moment: before anything was saved, between steps or
    // during a model call (phase ready), and while tools ran (awaiting_tools).
    for phase in ["start", "ready", "awaiting_tools"] {
        assert!(
            phases.contains_key(phase),
            "no kill landed in phase {phase}: {phases:?}"
        );
    }
}
