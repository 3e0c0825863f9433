//! What checkpoints cost: the client CPU of one scripted multi-step run (three steps of one
//! `get_weather` call each, arguments in 8 fragments, then a 155-word answer in 60 deltas: the
//! peer benchmark's workload, three times over) with no store (`Agent::run`) and durably
//! (`Agent::run_durable`) in a `MemoryStore`, a `SqliteStore` (a file on disk, WAL) and, when
//! `AGENTLOOP_TEST_POSTGRES` names a server, a `PostgresStore`. No network: the model is the
//! testkit's scripted one, so the figures are the run loop's own cost plus the checkpoints'.
//!
//! CPU is the process's (`CLOCK_PROCESS_CPUTIME_ID`: every thread, SQLite's blocking-pool
//! thread included; not the Postgres server's). Each round runs every store's batch in turn,
//! the order rotating; the table gives each store's median over the rounds, per run and per
//! checkpoint over the no-store run.
//!
//! ```text
//! cargo bench -p agentloop --features sqlite,postgres --bench durable
//! DURABLE_BENCH_RUNS=2000 DURABLE_BENCH_ROUNDS=7 taskset -c 1 target/release/deps/durable-* --bench
//! ```

use std::time::Duration;

use agentloop::run::{MemoryStore, RunStore, SqliteStore};
use agentloop::{Agent, ContentBlock, Request, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
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

fn agent() -> Agent {
    let text = answer();
    let model = ScriptedModel::from_fn(move |request, _| match CITIES.get(answered(request)) {
        Some(city) => Turn::tool_call("get_weather", json!({"city": city})).with_argument_pieces(8),
        None => Turn::text(text.clone()).with_text_pieces(60),
    })
    .unrecorded();
    Agent::builder(model)
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

/// `runs` runs on `store`; the CPU time they took.
async fn batch(agent: &Agent, store: &Store, round: usize, runs: usize) -> Duration {
    let started = cpu();
    for n in 0..runs {
        let id = format!("run-{round}-{n}");
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

fn main() {
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
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
    let agent = agent();

    // Checkpoints per run, from a durable run's last version.
    let checkpoints = runtime.block_on(async {
        let store = MemoryStore::new();
        one_run(&agent, "count", &store).await;
        store.load("count").await.unwrap().unwrap().version
    });
    // Warm-up: caches, the SQLite file's pages, Postgres's plans.
    for store in &stores {
        runtime.block_on(batch(&agent, store, usize::MAX, runs.div_ceil(10)));
    }
    let mut taken: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    for round in 0..rounds {
        for at in 0..stores.len() {
            let at = (at + round) % stores.len();
            let took = runtime.block_on(batch(&agent, &stores[at], round, runs));
            taken[at].push(took.as_secs_f64() * 1e6 / runs as f64);
        }
    }
    let per_run: Vec<f64> = taken.into_iter().map(median).collect();
    println!("{runs} runs x {rounds} rounds, {checkpoints} checkpoints per durable run; medians\n");
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
}
