//! Load and soak over real HTTP (a bench binary, not a timed test).
//!
//! The workload is one agent run: the model streams a `get_weather` call (arguments in 8
//! fragments), the typed tool runs, the result goes back, and the model streams a 155-word
//! answer in 60 deltas plus usage. The server is the testkit's pre-rendered server in a child
//! process (this same binary re-executed), so the resident memory sampled here is the client's.
//!
//! 1. load: `--concurrent N` (10,000) streaming runs started at once; every one must finish
//!    with the full answer and exactly one tool call.
//! 2. soak: `--sequential N` (100,000) streaming runs one after another, resident memory
//!    sampled every `--sample-every N` (10,000); it must stay flat (the last sample within
//!    `--flat-mib` (2 MiB) of the first).
//!
//! ```text
//! cargo bench -p agentloop --bench soak -- [--wire openai|anthropic] [--write-mode event|body]
//!     [--concurrent 10000] [--sequential 100000] [--sample-every 10000] [--flat-mib 2]
//! ```
//!
//! Exits non-zero if any run fails or memory grows. Needs ~2 file descriptors per run in
//! flight (raise `ulimit -n` above 10,000 for the default load).

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::RunEvent;
use agentloop::{Agent, StreamEvent, Tool};
use agentloop_testkit::{MockServer, Turn, Wire, WriteMode};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};

const PROMPT: &str = "What's the weather in Paris?";
const ARGUMENTS: &str = r#"{"city":"Paris"}"#;
const ANSWER: &str = "Paris is mild today, with a high of eighteen degrees and a low of eleven. The morning starts under a thin layer of cloud that breaks up before noon, leaving a bright and breezy afternoon. A light wind comes from the west at about fifteen kilometres per hour, so the air feels a little cooler along the river. There is no rain in the forecast until late on Thursday, when a weak front may bring a few showers overnight. Humidity stays near sixty percent and visibility is excellent, which makes it a good day for a walk through the Luxembourg Gardens or along the quays of the Seine. If you plan to be out after sunset, take a light jacket: temperatures drop quickly once the sun goes down, and the terraces will feel chilly by nine. Tomorrow looks much the same, with a little more sunshine and a high of nineteen degrees by the afternoon.";

/// Times the tool ran for Paris; any other city is a failure.
static PARIS_CALLS: AtomicU64 = AtomicU64::new(0);
static OTHER_CALLS: AtomicU64 = AtomicU64::new(0);

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. Paris
    city: String,
}

struct Options {
    wire: Wire,
    mode: WriteMode,
    concurrent: usize,
    sequential: usize,
    sample_every: usize,
    flat_mib: f64,
    serve: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        wire: Wire::OpenAi,
        mode: WriteMode::PerEvent,
        concurrent: 10_000,
        sequential: 100_000,
        sample_every: 10_000,
        flat_mib: 2.0,
        serve: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            // cargo bench passes --bench to harness-less benches.
            "--bench" => {}
            "--serve" => options.serve = true,
            "--wire" => {
                options.wire = match value()?.as_str() {
                    "openai" => Wire::OpenAi,
                    "anthropic" => Wire::Anthropic,
                    "gemini" => Wire::Gemini,
                    "bedrock" => Wire::Bedrock,
                    "openai-responses" => Wire::Responses,
                    other => {
                        return Err(format!(
                            "unknown wire {other:?} (openai|anthropic|gemini|bedrock)"
                        ));
                    }
                }
            }
            "--write-mode" => {
                options.mode = match value()?.as_str() {
                    "event" => WriteMode::PerEvent,
                    "body" => WriteMode::WholeBody,
                    other => return Err(format!("unknown write mode {other:?} (event|body)")),
                }
            }
            "--concurrent" => options.concurrent = number(&value()?)?,
            "--sequential" => options.sequential = number(&value()?)?,
            "--sample-every" => options.sample_every = number::<usize>(&value()?)?.max(1),
            "--flat-mib" => options.flat_mib = number(&value()?)?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|e| format!("{text:?}: {e}"))
}

fn wire_arg(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAi => "openai",
        Wire::Anthropic => "anthropic",
        Wire::Gemini => "gemini",
        Wire::Bedrock => "bedrock",
        Wire::Responses => "openai-responses",
    }
}

fn mode_arg(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::WholeBody => "body",
        _ => "event",
    }
}

/// The child process: serve the workload until killed.
async fn serve(options: &Options) -> ExitCode {
    let turns = [
        Turn::tool_call_raw("get_weather", ARGUMENTS)
            .with_argument_pieces(8)
            .with_usage(120, 18),
        Turn::text(ANSWER).with_text_pieces(60).with_usage(160, 210),
    ];
    match MockServer::builder(options.wire)
        .turns(turns)
        .write_mode(options.mode)
        .start_prerendered()
        .await
    {
        Ok(server) => {
            println!("{}", server.base_url());
            std::future::pending::<ExitCode>().await
        }
        Err(e) => {
            eprintln!("soak server: cannot listen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the server child and returns it with its base URL.
async fn spawn_server(options: &Options) -> Result<(tokio::process::Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut child = tokio::process::Command::new(exe)
        .args(["--serve", "--wire", wire_arg(options.wire)])
        .args(["--write-mode", mode_arg(options.mode)])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the server child: {e}"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or("the server child has no stdout")?;
    let url = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .map_err(|e| format!("reading the server's URL: {e}"))?
        .ok_or("the server child exited before printing its URL")?;
    Ok((child, url))
}

fn agent(wire: Wire, base_url: &str) -> Result<Agent, String> {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move {
            let counter = if args.city == "Paris" {
                &PARIS_CALLS
            } else {
                &OTHER_CALLS
            };
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(
                serde_json::json!({"city": args.city, "temperature_c": 18, "conditions": "clear"}),
            )
        },
    );
    let builder = match wire {
        Wire::OpenAi => Agent::builder(OpenAi::compatible(base_url).map_err(|e| e.to_string())?),
        Wire::Anthropic => {
            let mut config = HttpConfig::new(base_url);
            config.api_key = Some(ApiKey::new("soak"));
            Agent::builder(Anthropic::new(config).map_err(|e| e.to_string())?)
        }
        Wire::Gemini => {
            let mut config = HttpConfig::new(base_url);
            config.api_key = Some(ApiKey::new("soak"));
            Agent::builder(
                agentloop::provider::gemini::Gemini::new(config).map_err(|e| e.to_string())?,
            )
        }
        Wire::Bedrock => {
            use agentloop::provider::bedrock::{Bedrock, BedrockAuth};
            let auth = BedrockAuth::Bearer(ApiKey::new("soak"));
            Agent::builder(
                Bedrock::new(HttpConfig::new(base_url), "us-east-1", auth)
                    .map_err(|e| e.to_string())?,
            )
        }
        Wire::Responses => {
            let mut config = HttpConfig::new(base_url);
            config.api_key = Some(ApiKey::new("soak"));
            Agent::builder(
                agentloop::provider::responses::OpenAiResponses::new(config)
                    .map_err(|e| e.to_string())?,
            )
        }
    };
    Ok(builder
        .model("mock-model")
        .max_tool_iterations(3)
        .tool(tool)
        .build())
}

/// One streamed run; `Ok` only when the final step's text is the whole answer.
async fn one_run(agent: &Agent) -> Result<(), String> {
    let mut events = agent.run_stream(PROMPT);
    let mut text = String::new();
    while let Some(event) = events.next().await {
        match event {
            RunEvent::StepStart { .. } => text.clear(),
            RunEvent::Model(StreamEvent::TextDelta { text: delta }) => text.push_str(&delta),
            RunEvent::Error { error } => return Err(error.to_string()),
            RunEvent::RunFinish { result } => {
                result.finished().map_err(|e| e.to_string())?;
                return if text == ANSWER {
                    Ok(())
                } else {
                    Err(format!("wrong answer ({} bytes)", text.len()))
                };
            }
            _ => {}
        }
    }
    Err("the events ended without run_finish".into())
}

/// Resident and peak resident memory in MiB, from /proc/self/status.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Checks the tool ran exactly `runs` times, for Paris only, since the last reset.
fn check_tool_calls(runs: usize) -> Result<(), String> {
    let (paris, other) = (
        PARIS_CALLS.swap(0, Ordering::Relaxed),
        OTHER_CALLS.swap(0, Ordering::Relaxed),
    );
    if paris == runs as u64 && other == 0 {
        Ok(())
    } else {
        Err(format!(
            "the tool ran {paris}x for Paris and {other}x otherwise, expected {runs}x for Paris"
        ))
    }
}

async fn load(agent: Arc<Agent>, runs: usize) -> Result<(), String> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|_| {
            let agent = Arc::clone(&agent);
            tokio::spawn(async move { one_run(&agent).await })
        })
        .collect();
    let (mut ok, mut first_error) = (0usize, None);
    for task in tasks {
        match task.await {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(format!("a run's task failed: {e}"));
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (rss, peak) = memory_mib();
    println!(
        "load: {ok}/{runs} concurrent streaming runs ok in {elapsed:.2}s ({:.0} runs/s); \
         client RSS {rss:.1} MiB after, peak {peak:.1} MiB",
        runs as f64 / elapsed
    );
    if let Some(e) = first_error {
        return Err(format!("load: first failure: {e}"));
    }
    check_tool_calls(runs).map_err(|e| format!("load: {e}"))
}

async fn soak(agent: &Agent, runs: usize, every: usize, flat_mib: f64) -> Result<(), String> {
    let started = Instant::now();
    let mut samples = Vec::new();
    println!("soak: {runs} sequential streaming runs, RSS sampled every {every}");
    println!("| runs | RSS MiB | runs/s since last sample |");
    println!("|---:|---:|---:|");
    let mut last = Instant::now();
    for done in 1..=runs {
        one_run(agent)
            .await
            .map_err(|e| format!("soak: run {done} failed: {e}"))?;
        if done % every == 0 || done == runs {
            let (rss, _) = memory_mib();
            let rate = (done - samples.last().map_or(0, |(n, _)| *n)) as f64
                / last.elapsed().as_secs_f64();
            println!("| {done} | {rss:.1} | {rate:.0} |");
            samples.push((done, rss));
            last = Instant::now();
        }
    }
    check_tool_calls(runs).map_err(|e| format!("soak: {e}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let (first, last) = match (samples.first(), samples.last()) {
        (Some((_, first)), Some((_, last))) => (*first, *last),
        _ => return Ok(()),
    };
    let max = samples.iter().map(|(_, rss)| *rss).fold(f64::MIN, f64::max);
    println!(
        "soak: {runs} runs in {elapsed:.1}s; RSS first sample {first:.1} MiB, last {last:.1} MiB, \
         max {max:.1} MiB (growth {:+.2} MiB, allowed {flat_mib} MiB)",
        last - first
    );
    if last - first > flat_mib {
        return Err(format!(
            "soak: resident memory grew by {:.2} MiB over {runs} runs",
            last - first
        ));
    }
    Ok(())
}

async fn client(options: &Options) -> Result<(), String> {
    let (_server, base_url) = spawn_server(options).await?;
    let agent = Arc::new(agent(options.wire, &base_url)?);
    println!(
        "wire {}, write mode {}, server {base_url}",
        wire_arg(options.wire),
        mode_arg(options.mode)
    );
    if options.concurrent > 0 {
        load(Arc::clone(&agent), options.concurrent).await?;
    }
    if options.sequential > 0 {
        soak(
            &agent,
            options.sequential,
            options.sample_every,
            options.flat_mib,
        )
        .await?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    if options.serve {
        return runtime.block_on(serve(&options));
    }
    match runtime.block_on(client(&options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
