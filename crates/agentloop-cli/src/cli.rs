//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit;

/// Tool calling and agent loops for LLMs, from the terminal.
///
/// Runs a prompt through an agent loop: the model is called, the tools it asks for run, their
/// results go back, until the model answers. Works offline with a built-in mock model when no
/// model or API key is given.
#[derive(Debug, Parser)]
#[command(name = "agentloop", version, about, long_about = None, after_help = exit::HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one prompt to the end, streaming the answer and showing tool calls as they run.
    #[command(after_help = exit::HELP)]
    Run(RunArgs),
    /// Chat interactively (/clear, /history, `/model NAME [BASE_URL]`, /quit; Ctrl-C interrupts an
    /// answer). On a terminal, lines can be edited and earlier prompts recalled with the arrows.
    /// A tool call that needs approval is asked about (y/n/e) before it runs.
    Chat(ModelArgs),
    /// Serve the chat API (SSE), the web page and stored conversations over HTTP.
    Serve(ServeArgs),
    /// List or check tool descriptor files.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Assemble a recorded SSE stream and print the response as JSON.
    Replay(ReplayArgs),
    /// Serve tools to other agents over MCP.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Durable runs in a SQLite file (started with `run --db PATH --run-id ID`).
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Serve OpenAI- and Anthropic-compatible mock endpoints that call a demo tool once, then answer.
    MockServer(MockServerArgs),
}

/// Which model to talk to, and how.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// The model as provider/model, e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5,
    /// ollama/qwen2.5, llamacpp/gemma, or `mock` for the built-in offline model.
    #[arg(long, env = "AGENTLOOP_MODEL")]
    pub model: Option<String>,
    /// Base URL of the provider's API (for local or compatible servers): an absolute http:// or
    /// https:// URL, e.g. http://127.0.0.1:8080/v1.
    #[arg(long, value_parser = parse_base_url)]
    pub base_url: Option<String>,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Tool descriptor file, or directory of them (JSON or YAML), the model may use.
    #[arg(long, value_name = "PATH")]
    pub tools: Option<PathBuf>,
    /// Rounds of tool calls per prompt, after which the model must answer (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tool_iterations: u32,
    /// Maximum tool calls per prompt.
    #[arg(long)]
    pub max_tool_calls: Option<u32>,
    /// Give up after this many seconds (a positive number; fractions allowed).
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,
    /// Sampling temperature.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Stop before a model call that would take the run's cost past this many US dollars
    /// (e.g. 0.50), by the built-in price table; a model without a price is not stopped.
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub max_cost: Option<agentloop::cost::Decimal>,
    /// Stop once the run used this many tokens, counted as the provider bills them, or before
    /// a call that would pass it.
    #[arg(long, value_name = "TOKENS")]
    pub max_total_tokens: Option<u64>,
    /// Keep every request within this many tokens of context (the model's own window, from
    /// the price table, when not given), clearing old tool results and then trimming the
    /// oldest turns when a request would not fit.
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
}

/// A budget in US dollars: a non-negative decimal.
fn parse_usd(text: &str) -> Result<agentloop::cost::Decimal, String> {
    let usd: agentloop::cost::Decimal = text
        .parse()
        .map_err(|_| format!("`{text}` is not an amount in US dollars, e.g. 0.50"))?;
    if usd.is_sign_negative() {
        return Err(format!("the budget must not be negative, got {text}"));
    }
    Ok(usd)
}

/// `agentloop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt, or `-` to read it from standard input.
    pub prompt: String,
    /// The model and tools.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document (final text, steps with tool calls and results, usage, stop
    /// reason) instead of the live display.
    #[arg(long)]
    pub json: bool,
    /// Ask before running a tool call that needs approval (a descriptor's `needs_approval:
    /// true`): answer y (run it), n (do not run it; the model is told) or e (edit its input as
    /// JSON) on standard input. Without --approve or --yes such a call stops the run (exit
    /// code 5).
    #[arg(long, conflicts_with = "yes")]
    pub approve: bool,
    /// Approve every tool call that needs approval, without asking.
    #[arg(long)]
    pub yes: bool,
    /// Run durably: checkpoint the run in this SQLite file after every step and tool, so that
    /// `agentloop runs resume ID` continues it after a crash. Needs --run-id; the answer is
    /// printed at the end rather than streamed.
    #[arg(long, value_name = "PATH", requires = "run_id")]
    pub db: Option<PathBuf>,
    /// The durable run's id (with --db); a run id is used once per file.
    #[arg(long, value_name = "ID", requires = "db")]
    pub run_id: Option<String>,
    /// Answer with JSON following this JSON Schema file (a typed answer): the answer is
    /// checked, sent back to the model with what is wrong until it passes or the retry budget
    /// runs out (exit code 3), and printed alone on stdout (with --json, as `output`). A run
    /// that pauses for approval (--approve) goes on checking against the schema.
    #[arg(long, value_name = "FILE.json", conflicts_with = "db")]
    pub output_schema: Option<PathBuf>,
}

/// `agentloop runs ...`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List the durable runs in a file: id, status (running, paused, done) and checkpoint
    /// version, tab-separated, one run a line.
    List {
        /// The SQLite file.
        #[arg(long, value_name = "PATH")]
        db: PathBuf,
    },
    /// Print a durable run's last checkpoint as JSON: its id, status, version and history.
    Show {
        /// The run's id.
        id: String,
        /// The SQLite file.
        #[arg(long, value_name = "PATH")]
        db: PathBuf,
    },
    /// Continue a durable run from its last checkpoint to its end, with the --model and --tools
    /// it was started with. A tool call cut off by a crash runs again only if its tool is
    /// idempotent; otherwise the model is told it was interrupted.
    Resume(ResumeArgs),
}

/// `agentloop runs resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run's id.
    pub id: String,
    /// The SQLite file.
    #[arg(long, value_name = "PATH")]
    pub db: PathBuf,
    /// The model and tools (the run's own).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document, as `run --json` does.
    #[arg(long)]
    pub json: bool,
}

/// `agentloop tools ...`.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the tools a descriptor file or directory defines.
    List {
        /// A descriptor file, or a directory (scanned recursively for .json, .yaml, .yml).
        path: PathBuf,
    },
    /// Check descriptors: every problem is reported with its file, and the exit code is 1 on
    /// any problem, and on a file or directory that defines no tool.
    Validate {
        /// A descriptor file, or a directory (scanned recursively for .json, .yaml, .yml).
        path: PathBuf,
    },
}

/// `agentloop mcp ...`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve every tool of a descriptor file or directory as an MCP server, with its input and
    /// output schemas: over stdin/stdout (the default), or over streamable HTTP at
    /// `http://ADDR/mcp` with --addr. Speaks MCP 2024-11-05 to 2025-11-25 (initialize
    /// handshake) and the stateless 2026-07-28.
    Serve(McpServeArgs),
}

/// `agentloop mcp serve`.
#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// A descriptor file, a directory of them, or a pack.
    #[arg(long, value_name = "PATH")]
    pub tools: PathBuf,
    /// Speak MCP on stdin/stdout (the default; nothing else is written to stdout).
    #[arg(long, conflicts_with = "addr")]
    pub stdio: bool,
    /// Serve streamable HTTP on this loopback address, e.g. 127.0.0.1:3001 (port 0 picks a free
    /// one; the endpoint's URL is printed on stdout).
    #[arg(long, value_name = "IP:PORT")]
    pub addr: Option<std::net::SocketAddr>,
}

/// Stream formats `replay` understands.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// OpenAI Chat Completions chunks (also every OpenAI-compatible server).
    Openai,
    /// Anthropic Messages events.
    Anthropic,
    /// Gemini `streamGenerateContent?alt=sse` chunks (Gemini API and Vertex AI).
    Gemini,
    /// Bedrock `ConverseStream` bodies (binary event-stream frames, or one decoded
    /// `{"<event-type>": payload}` object per line).
    Bedrock,
    /// OpenAI Responses API events (`--format openai-responses`).
    OpenaiResponses,
}

/// `agentloop replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The stream's format (default: recognised from the stream; a given format that does not
    /// match the stream is an error).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The recorded stream, or `-` for standard input.
    pub file: PathBuf,
}

/// `agentloop mock-server`.
#[derive(Debug, Args)]
pub struct MockServerArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 8089)]
    pub port: u16,
}

/// `agentloop serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on: IP:PORT or HOST:PORT (port 0 picks a free one). Without a token,
    /// only loopback addresses are accepted (see --insecure-no-auth).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// The model and tools.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Give the model file skills (read, list, write, search) confined to this directory.
    #[arg(long, value_name = "DIR")]
    pub sandbox: Option<PathBuf>,
    /// Where conversations are stored: an SQLite file, or a Postgres URL
    /// (`postgres://user[:password]@host[:port]/dbname`, no TLS) that several servers can share
    /// behind a load balancer. The schema is created or migrated at start.
    #[arg(long, value_name = "PATH|URL", default_value = "agentloop.db")]
    pub db: String,
    /// With a Postgres --db: how long, in milliseconds, this server's lease on an answer it
    /// runs lasts (renewed every third of it). When a server dies, another takes its answers
    /// over once their leases expire.
    #[arg(long, value_name = "MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub answer_lease_ms: u64,
    /// Require this bearer token on /v1 (default: the AGENTLOOP_TOKEN environment variable).
    /// Other local users can read it in `ps`: prefer --token-file or the variable. An empty
    /// token is an error.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Read the bearer token from this file (its trailing newline is ignored; an empty file is
    /// an error).
    #[arg(long, value_name = "PATH", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Serve a non-loopback address without a token, e.g. behind a proxy that authenticates.
    /// Anyone who can reach the address can read every conversation and chat.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Without a token, also answer requests whose Host is this name (the page is only served
    /// for localhost, 127.0.0.1 and `[::1]` otherwise, against DNS rebinding). Repeatable;
    /// NAME:PORT matches that port only.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
    /// Let web pages from this origin (`scheme://host[:port]`, or `*`) call the API, e.g. an AI
    /// SDK frontend on http://localhost:3000. Other origins are refused. Repeatable.
    #[arg(long, value_name = "URL")]
    pub cors_origin: Vec<String>,
    /// Accept `/` or the home directory as the --sandbox (refused otherwise: the model could
    /// read and rewrite every file there). A sandbox holding the --db database or the --tools
    /// directory is always refused.
    #[arg(long)]
    pub allow_broad_sandbox: bool,
    /// Which tool calls wait for the chat's user to approve them: `all` (every call), `none`
    /// (the server asks for nothing itself: the --sandbox's write_file runs without asking), or
    /// tool names, comma-separated (those too). Tools whose descriptor says
    /// `"needs_approval": true` always ask. Default: those and the --sandbox's write_file.
    #[arg(long, value_name = "all|none|NAME,...")]
    pub approve_tools: Option<String>,
}

/// `--base-url`: an absolute http(s) URL with a host, checked before any request is made.
pub fn parse_base_url(value: &str) -> Result<String, String> {
    const EXPECTED: &str =
        "expected an absolute http:// or https:// URL, e.g. http://127.0.0.1:8080/v1";
    let url = value.trim();
    let lower = url.to_ascii_lowercase();
    let Some(rest) = ["http://", "https://"]
        .iter()
        .find_map(|scheme| lower.starts_with(scheme).then(|| &url[scheme.len()..]))
    else {
        return Err(EXPECTED.to_owned());
    };
    if url.chars().any(char::is_whitespace) {
        return Err(format!("contains white space; {EXPECTED}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return Err(format!("has an unclosed `[`; {EXPECTED}")),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Err(format!("has no host; {EXPECTED}"));
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("has an invalid port `{port}`; {EXPECTED}"));
    }
    Ok(url.to_owned())
}

/// `--timeout`: a positive, finite number of seconds.
pub fn parse_timeout(value: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "expected a positive number of seconds, e.g. 30 or 0.5";
    let secs: f64 = value.trim().parse().map_err(|_| EXPECTED.to_owned())?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(EXPECTED.to_owned());
    }
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| EXPECTED.to_owned())
}
