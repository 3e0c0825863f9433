//! What checkpoints cost: the client CPU of one multi-step run (three steps of one
//! `get_weather` call each, arguments in 8 fragments, then a 155-word answer in 60 deltas: the
//! peer benchmark's workload, three times over) with no store (`Agent::run`) and durably
//! (`Agent::run_durable`) in a `MemoryStore`, a `SqliteStore` (a file on disk, WAL) and, when
//! `AGENTLOOP_TEST_POSTGRES` names a server, a `PostgresStore`. Two tables, one per model:
//!
//! - **scripted**: the testkit's scripted model, no network, so the figures are the run loop's
//!   own cost plus the checkpoints' (the floor: nothing else hides a checkpoint's cost);
//! - **HTTP**: an OpenAI-compatible provider streaming from the testkit's pre-rendered wire
//!   server over loopback, in a child process (this binary re-executed with `--serve`), as a
//!   user's run talks to a real provider: the client's HTTP and decoding are in the figures.
//!
//! CPU is this process's (`CLOCK_PROCESS_CPUTIME_ID`: every thread, SQLite's thread included;
//! not the server child's, nor the Postgres server's). Each round runs every store's batch in
//! turn, the order rotating; a table gives each store's median over the rounds, per run and
//! per checkpoint over the no-store run.
//!
//! ```text
//! cargo bench -p agentloop --features sqlite,postgres --bench durable
//! DURABLE_BENCH_RUNS=2000 DURABLE_BENCH_ROUNDS=7 taskset -c 1 target/release/deps/durable-* --bench
//! ```

use std::process::Stdio;
use std::time::Duration;

use agentloop::provider::openai::OpenAi;
use agentloop::run::{MemoryStore, RunStore, SqliteStore};
use agentloop::{Agent, AgentBuilder, ContentBlock, Request, Tool};
use agentloop_testkit::{MockServer, ScriptedModel, Turn, Wire};
use nix::time::{ClockId, clock_gettime};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const CITIES: [&str; 3] = ["Paris", "Lyon", "Nice"];

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

/// How many tool results the history holds.
fn answered(request: &Request) -> usize {
    request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult(_)))
        .count()
}

/// The model's turn once `done` tool results are in the history.
fn turn(done: usize) -> Turn {
    match CITIES.get(done) {
        Some(city) => Turn::tool_call("get_weather", json!({"city": city})).with_argument_pieces(8),
        None => Turn::text(answer()).with_text_pieces(60),
    }
}

/// The agent on the scripted model.
fn scripted() -> Agent {
    let model = ScriptedModel::from_fn(|request, _| turn(answered(request))).unrecorded();
    with_tool(Agent::builder(model))
}

/// The agent on an OpenAI-compatible server at `base_url`.
fn over_http(base_url: &str) -> Agent {
    with_tool(Agent::builder(OpenAi::compatible(base_url).unwrap()))
}

fn with_tool(builder: AgentBuilder) -> Agent {
    builder
        .model("m")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |args: GetWeather| async move {
                Ok::<_, std::convert::Infallible>(json!({"city": args.city, "temp_c": 18}))
            },
        ))
        .build()
}

/// Where a batch's runs go.
#[derive(Clone)]
enum Store {
    None,
    Memory(MemoryStore),
    Sqlite(SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(agentloop::run::PostgresStore),
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Self::None => "no store (`Agent::run`)",
            Self::Memory(_) => "`MemoryStore`",
            Self::Sqlite(_) => "`SqliteStore` (file, WAL)",
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => "`PostgresStore` (loopback)",
        }
    }
}

async fn one_run<S: RunStore + Clone>(agent: &Agent, id: &str, store: &S) {
    let result = agent.run_durable(id, "Weather?", store).await.unwrap();
    assert!(result.error.is_none(), "{:?}", result.error);
}

/// `runs` runs on `store`; the CPU time they took. Run ids start with `prefix`.
async fn batch(agent: &Agent, store: &Store, prefix: &str, runs: usize) -> Duration {
    let started = cpu();
    for n in 0..runs {
        let id = format!("{prefix}-{n}");
        match store {
            Store::None => {
                let result = agent.run("Weather?").await.unwrap();
                assert!(result.error.is_none());
            }
            Store::Memory(s) => one_run(agent, &id, s).await,
            Store::Sqlite(s) => one_run(agent, &id, s).await,
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => one_run(agent, &id, s).await,
        }
    }
    cpu() - started
}

fn cpu() -> Duration {
    let now = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).unwrap();
    Duration::new(now.tv_sec() as u64, now.tv_nsec() as u32)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The child process (`--serve`): the pre-rendered OpenAI server playing the workload, its
/// base URL on stdout, until killed.
async fn serve() {
    let turns = (0..=CITIES.len()).map(turn);
    let server = MockServer::prerendered(Wire::OpenAi, turns).await.unwrap();
    println!("{}", server.base_url());
    std::future::pending::<()>().await;
}

/// The server child, killed when dropped, and its base URL.
fn spawn_server() -> (ChildGuard, String) {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .arg("--serve")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut url = String::new();
    std::io::BufReader::new(stdout).read_line(&mut url).unwrap();
    (ChildGuard(child), url.trim().to_owned())
}

struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Measure every store with `agent` and print the table.
fn table(
    runtime: &tokio::runtime::Runtime,
    title: &str,
    agent: &Agent,
    stores: &[Store],
    runs: usize,
    rounds: usize,
) {
    // Checkpoints per run, from a durable run's last version.
    let checkpoints = runtime.block_on(async {
        let store = MemoryStore::new();
        one_run(agent, "count", &store).await;
        store.load("count").await.unwrap().unwrap().version
    });
    // Warm-up: caches, connections, the SQLite file's pages, Postgres's plans.
    for store in stores {
        runtime.block_on(batch(
            agent,
            store,
            &format!("{title}-warm"),
            runs.div_ceil(10),
        ));
    }
    let mut taken: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    for round in 0..rounds {
        for at in 0..stores.len() {
            let at = (at + round) % stores.len();
            let prefix = format!("{title}-{round}");
            let took = runtime.block_on(batch(agent, &stores[at], &prefix, runs));
            taken[at].push(took.as_secs_f64() * 1e6 / runs as f64);
        }
    }
    let per_run: Vec<f64> = taken.into_iter().map(median).collect();
    println!(
        "{title}: {runs} runs x {rounds} rounds, {checkpoints} checkpoints per durable run; medians\n"
    );
    println!("| store | CPU µs / run | × no store | CPU µs / checkpoint |");
    println!("|---|---:|---:|---:|");
    for (store, us) in stores.iter().zip(&per_run) {
        let extra = match store {
            Store::None => "".to_owned(),
            _ => format!("{:.1}", (us - per_run[0]) / checkpoints as f64),
        };
        println!(
            "| {} | {us:.1} | {:.2} | {extra} |",
            store.name(),
            us / per_run[0]
        );
    }
    println!();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|a| a == "--serve") {
        runtime.block_on(serve());
        return;
    }
    // `cargo test --benches` runs this with `--test`: once, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick {
        5
    } else {
        env("DURABLE_BENCH_RUNS", 1000)
    };
    let rounds = if quick {
        1
    } else {
        env("DURABLE_BENCH_ROUNDS", 5)
    };
    let dir = tempfile::tempdir().unwrap();
    // Postgres joins when the feature and a database are there.
    #[cfg_attr(not(feature = "postgres"), expect(unused_mut))]
    let mut stores = vec![
        Store::None,
        Store::Memory(MemoryStore::new()),
        Store::Sqlite(SqliteStore::open(dir.path().join("runs.db")).unwrap()),
    ];
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("AGENTLOOP_TEST_POSTGRES") {
        let store = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let db = format!("agentloop_bench_{}", std::process::id());
            client
                .batch_execute(&format!("CREATE DATABASE {db}"))
                .await
                .unwrap();
            let (base, _) = url.rsplit_once('/').unwrap();
            agentloop::run::PostgresStore::connect(
                &format!("{base}/{db}"),
                "bench",
                Duration::from_secs(30),
            )
            .await
            .unwrap()
        });
        stores.push(Store::Postgres(store));
    }
    table(&runtime, "scripted", &scripted(), &stores, runs, rounds);
    let (_server, base_url) = spawn_server();
    let http = over_http(&base_url);
    table(&runtime, "http", &http, &stores, runs, rounds);
}
