//! # agentloop
//!
//! Tool calling and agent loops for LLMs. Define tools as Rust types and async functions, point
//! agentloop at a model, and run a loop that calls the model, runs the tools it asks for, feeds
//! the results back and stops at the answer or a limit — blocking or streamed — with a history
//! that is always valid to send again.
//!
//! ## The loop
//!
//! An [`Agent`] holds a model (any [`Provider`]), its tools and the run's limits. A run sends
//! the prompt; when the model asks for tools, it checks their arguments against the tools'
//! schemas, runs them (in parallel, each with a timeout), sends the results back and asks
//! again, until the model answers or a limit stops it. Here the model is the testkit's
//! scripted one, which plays its turns in order, so the example runs offline:
//!
//! ```
//! use agentloop::{Agent, Tool};
//! use agentloop_testkit::{ScriptedModel, Turn};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Get the current weather for a city.
//! #[derive(Deserialize, JsonSchema)]
//! struct GetWeather {
//!     /// City name, e.g. "Paris".
//!     city: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), agentloop::Error> {
//! let model = ScriptedModel::new([
//!     Turn::tool_call("get_weather", serde_json::json!({"city": "Paris"})),
//!     Turn::text("It is 18 °C in Paris."),
//! ]);
//! let agent = Agent::builder(model)
//!     .system("You are a concise weather assistant.")
//!     .tool(Tool::function("get_weather", "Current weather for a city", |w: GetWeather| {
//!         async move { Ok::<_, std::io::Error>(format!("18 °C in {}", w.city)) }
//!     }))
//!     .build();
//!
//! let result = agent.run("What's the weather in Paris?").await?;
//! assert_eq!(result.text(), "It is 18 °C in Paris.");
//! // The prompt, the tool call, its result and the answer: ready to send again.
//! assert_eq!(result.messages.len(), 4);
//! # Ok(()) }
//! ```
//!
//! For a real model, `Agent::from_model("openai/gpt-4o")` (or `anthropic/...`, `gemini/...`,
//! `vertex/...`, `bedrock/...`, `openai-responses/...`, `xai/...`, any OpenAI-compatible server) takes the key from the environment; [`Agent::run_stream`] yields
//! the run's [`RunEvent`]s as they happen.
//!
//! ## The main types
//!
//! - [`Agent`] and [`AgentBuilder`]: a model, tools, a system prompt and [`RunOptions`] (limits,
//!   timeouts, hooks, stop conditions); each run returns a [`RunResult`] (the answer, the steps,
//!   the usage, the history).
//! - [`Tool`]: a definition and what runs it ([`Tool::function`] for typed async functions);
//!   [`NativeTool`] for the tools a provider runs or defines.
//! - [`Provider`]: one model behind one trait; [`provider::openai`], [`provider::anthropic`],
//!   [`provider::gemini`], [`provider::responses`] and `provider::bedrock` (feature `bedrock`)
//!   speak the wire formats, and every provider streams normalized
//!   [`StreamEvent`]s.
//! - [`Message`], [`Request`], [`Response`]: the canonical history, the same for every provider.
//! - [`run`]: the loop as a serializable state machine ([`run::Machine`]) and its driver, hooks
//!   and events; tools that need a person's approval pause a run as a [`run::PausedRun`] that
//!   [`Agent::resume`] continues with the decisions.
//! - Durable runs: [`Agent::run_durable`] (streamed: [`Agent::run_durable_stream`])
//!   checkpoints a run in a [`run::RunStore`] (SQLite with the `sqlite` feature, Postgres with
//!   `postgres`) and [`Agent::resume_run`] ([`Agent::resume_run_stream`]) continues it after a
//!   crash or a failed model call, running every tool once; the [`run::RunStore`] docs give
//!   the exact semantics.
//! - [`conversation`]: a chat kept across turns, with tool calls run automatically or by hand.
//! - [`output`]: typed answers, [`Agent::run_output`] returning a checked `T` after the tools.
//! - [`cost`]: what each step and run cost, and a cost budget; [`context`]: requests kept
//!   within the model's context window (clearing, trimming or summarizing older history).
//! - [`telemetry`]: every run's `tracing` spans after the OpenTelemetry GenAI conventions
//!   (`invoke_agent`, `chat`, `execute_tool`), exported over OTLP with the `otel` feature.
//!
//! ## Features
//!
//! `validation` (arguments checked against their JSON Schema with the `jsonschema` crate),
//! `registry` (which needs `validation`), `mcp`, `mcp-server` and `prices` are on by default; `sqlite` (a durable-run
//! store, [`run::RunStore`]) is not, since it compiles SQLite's C sources into the binary, nor
//! is `postgres` (a durable-run store for many workers), nor `otel` (OTLP export of the
//! runs' spans and metrics, `telemetry::init_from_env`). Without `validation`, a
//! typed tool's arguments are checked by deserializing them into its type, with serde's
//! message as the one violation, and a raw schema's arguments are not checked; the binary
//! leaves out `jsonschema` and its regex engines.
//!
//! ## Tool files and the registry
//!
//! With the `registry` feature (on by default), tools can also be described as data and
//! loaded into a [`Registry`]: from JSON or YAML files, `kind: Tool` manifests, or a whole
//! directory ([`Registry::load_dir`]); from MCP servers (feature `mcp`, also on by default); and
//! from Rust ([`Registry::register`]). `registry.tools()` gives the run loop ordinary [`Tool`]s.
//! The [`registry`] module describes the descriptor format, the modes, packs and PromptKit's
//! spellings. The other way round, [`mcp_server`] (feature `mcp-server`) serves a registry's
//! tools to any MCP client.

#![warn(missing_docs)]

mod agent;
pub mod context;
pub mod conversation;
pub mod cost;
pub mod error;
#[cfg(feature = "registry")]
pub mod executor;
pub mod history;
#[cfg(feature = "mcp-server")]
pub mod mcp_server;
pub mod message;
pub mod output;
pub mod provider;
#[cfg(feature = "registry")]
pub mod registry;
pub mod run;
pub mod sse;
pub mod stream;
pub mod telemetry;
pub mod tool;

pub use agent::{Agent, AgentBuilder};
#[cfg(feature = "macros")]
pub use agentloop_macros::tool;
pub use error::{Error, Result, TimeoutKind};
pub use message::{
    CacheBreakpoint, CacheControl, CacheTarget, CacheTtl, ContentBlock, ImageSource, Message,
    OutputFormat, Request, Response, Role, StopReason, ToolResult, ToolResultContent, Usage,
};
pub use output::{Output, OutputStrategy, Typed};
pub use provider::{EventStream, Provider};
#[cfg(feature = "registry")]
pub use registry::{Registry, ToolDescriptor};
pub use run::{RunEvent, RunOptions, RunResult, RunStopReason};
pub use stream::{Accumulator, StreamEvent};
pub use tool::{
    FunctionDefinition, NativeTool, Tool, ToolCall, ToolChoice, ToolContext, ToolDefinition,
    ToolError, ToolHandler, ToolOutput,
};

/// What `#[tool]`'s generated code names, so that a crate using it needs no serde or schemars
/// of its own. Not API.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
}

#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
