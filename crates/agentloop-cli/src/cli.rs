//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Tool calling and agent loops for LLMs, from the terminal.
///
/// Runs a prompt through an agent loop: the model is called, the tools it asks for run, their
/// results go back, until the model answers. Works offline with a built-in mock model when no
/// model or API key is given.
#[derive(Debug, Parser)]
#[command(name = "agentloop", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one prompt to the end, streaming the answer and showing tool calls as they run.
    Run(RunArgs),
    /// Chat interactively (/clear, /history, /model NAME, /quit; Ctrl-C interrupts an answer).
    Chat(ModelArgs),
    /// Serve the chat API (SSE), the web page and stored conversations over HTTP.
    Serve(ServeArgs),
    /// List or check tool descriptor files.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Assemble a recorded SSE stream and print the response as JSON.
    Replay(ReplayArgs),
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
    /// Base URL of the provider's API (for local or compatible servers).
    #[arg(long)]
    pub base_url: Option<String>,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Directory of tool descriptor files (JSON or YAML) the model may use.
    #[arg(long, value_name = "DIR")]
    pub tools: Option<PathBuf>,
    /// Maximum model calls per prompt.
    #[arg(long, default_value_t = 10)]
    pub max_turns: u32,
    /// Maximum tool calls per prompt.
    #[arg(long)]
    pub max_tool_calls: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Sampling temperature.
    #[arg(long)]
    pub temperature: Option<f32>,
}

/// `agentloop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// The model and tools.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON document (final text, steps with tool calls and results, usage, stop
    /// reason) instead of the live display.
    #[arg(long)]
    pub json: bool,
}

/// `agentloop tools ...`.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the tools a directory defines.
    List {
        /// The directory (scanned recursively for .json, .yaml, .yml).
        dir: PathBuf,
    },
    /// Check every descriptor in a directory; exits non-zero with the problem on a bad file.
    Validate {
        /// The directory.
        dir: PathBuf,
    },
}

/// Stream formats `replay` understands.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// OpenAI Chat Completions chunks (also every OpenAI-compatible server).
    Openai,
    /// Anthropic Messages events.
    Anthropic,
}

/// `agentloop replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The stream's format.
    #[arg(long, value_enum)]
    pub format: Format,
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
    /// SQLite database for conversations.
    #[arg(long, value_name = "PATH", default_value = "agentloop.db")]
    pub db: PathBuf,
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
    /// for localhost, 127.0.0.1 and [::1] otherwise, against DNS rebinding). Repeatable;
    /// NAME:PORT matches that port only.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
    /// Let web pages from this origin (scheme://host[:port], or `*`) call the API, e.g. an AI
    /// SDK frontend on http://localhost:3000. Other origins are refused. Repeatable.
    #[arg(long, value_name = "URL")]
    pub cors_origin: Vec<String>,
}
