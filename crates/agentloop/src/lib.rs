//! # agentloop
//!
//! Tool calling and agent loops for LLMs. Define tools as Rust types and async functions, point
//! agentloop at a model, and run a loop that calls the model, runs the tools it asks for, feeds
//! the results back and stops at the answer or a limit — blocking or streamed — with a history
//! that is always valid to send again.
//!
//! ## Features
//!
//! `validation` (arguments checked against their JSON Schema with the `jsonschema` crate),
//! `registry` (which needs `validation`) and `mcp` are on by default. Without `validation`, a
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
//!
//! A descriptor has a `name`, a `description`, an `input_schema` (JSON Schema of the arguments;
//! `{"type": "object", "properties": {}}` when left out), an optional `output_schema` every
//! result must match, a `mode` saying how it runs, the section for that mode, and `timeout_ms`.
//! The modes: `function` (a handler bound in code with [`Registry::bind`]), `mock` (a
//! `response`, a minijinja `template` rendered with the arguments, or a `sequence` with
//! `on_exhausted: repeat_last | error`), `http` (`url`, `method` — POST by default —,
//! `headers` whose values may say `${ENV_VAR}`, `allowed_hosts`) and `mcp` (listed from a
//! server). `mode` can be left out when exactly one section is present. Multi-word keys may
//! also be written in camelCase (`inputSchema`, `outputSchema`, `timeoutMs`), and PromptKit's
//! `mockResponse`, `mockTemplate`, `endpoint` and `mode: live` are accepted too. A pack
//! bundles several tools with shared defaults ([`Registry::from_pack`]); the [`registry`]
//! module docs list the aliases and the pack format.
//!
//! ```yaml
//! # tools/weather.yaml: one tool per YAML document (separate several with `---`)
//! name: get_weather
//! description: Current weather for a city
//! input_schema:
//!   type: object
//!   properties:
//!     city: {type: string}
//!   required: [city]
//! output_schema: {type: object, required: [temp_c]}
//! mock:
//!   template: '{"city": {{ city | tojson }}, "temp_c": 18}'
//! timeout_ms: 5000
//! ```
//!
//! ```json
//! {
//!   "name": "lookup_order",
//!   "description": "Look up an order",
//!   "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
//!   "mode": "http",
//!   "http": {
//!     "url": "https://shop.example.com/api/orders/lookup",
//!     "headers": {"Authorization": "Bearer ${SHOP_TOKEN}"},
//!     "allowed_hosts": ["shop.example.com"]
//!   },
//!   "mock": {"response": {"id": 1, "state": "shipped"}},
//!   "timeout_ms": 10000
//! }
//! ```
//!
//! The manifest style puts the name in `metadata` and the descriptor in `spec`:
//!
//! ```yaml
//! apiVersion: agentloop/v1
//! kind: Tool
//! metadata: {name: deploy_status}
//! spec:
//!   description: Status of the latest deployment
//!   mock:
//!     sequence: [{status: pending}, {status: done}]
//!     on_exhausted: repeat_last
//! ```
//!
//! Loading one of them and calling it:
//!
//! ```
//! # #[cfg(feature = "registry")] {
//! use agentloop::registry::{Format, Registry, parse_descriptors};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let yaml = r#"
//! name: get_weather
//! input_schema:
//!   type: object
//!   properties: {city: {type: string}}
//!   required: [city]
//! mock:
//!   template: '{"city": {{ city | tojson }}, "temp_c": 18}'
//! "#;
//! let mut registry = Registry::new();
//! for descriptor in parse_descriptors(yaml, Format::Yaml, "weather.yaml")? {
//!     registry.add_descriptor(descriptor)?;
//! }
//! let output = registry.call("get_weather", serde_json::json!({"city": "Paris"})).await;
//! assert_eq!(output.unwrap().0.to_text(), r#"{"city":"Paris","temp_c":18}"#);
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! # }
//! ```
//!
//! Every load error names the file, the tool and the problem, with line and column where the
//! parser gives them (`tools/weather.yaml:7:13: tool `get_weather`: timeout_ms: invalid type:
//! string "soon", expected u64`).

#![warn(missing_docs)]

mod agent;
mod armed;
pub mod conversation;
mod deadline;
pub mod error;
#[cfg(feature = "registry")]
pub mod executor;
pub mod history;
pub mod message;
pub mod provider;
#[cfg(feature = "registry")]
pub mod registry;
pub mod run;
pub mod sse;
pub mod stream;
pub mod tool;

pub use agent::{Agent, AgentBuilder};
#[cfg(feature = "macros")]
pub use agentloop_macros::tool;
pub use error::{Error, Result, TimeoutKind};
pub use message::{
    CacheBreakpoint, CacheControl, CacheTarget, CacheTtl, ContentBlock, ImageSource, Message,
    Request, Response, Role, StopReason, ToolResult, ToolResultContent, Usage,
};
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
