//! Test helpers for agentloop: a scripted in-process model, and OpenAI-, Anthropic- and
//! Gemini-compatible servers on loopback with fault injection.

#![warn(missing_docs)]

pub mod demo;
#[cfg(feature = "mcp")]
pub mod mcp;
mod scripted;
pub mod server;
mod skip;
mod turn;

pub use scripted::ScriptedModel;
pub use server::{Fault, MockServer, MockServerBuilder, RecordedRequest, Wire, WriteMode};
// Benchmark plumbing, public for the CLI's mock server and the benchmarks, not for tests.
#[doc(hidden)]
pub use server::{PrerenderedServer, serve_prerendered, serve_prerendered_on};
// Test-log plumbing the workspace's own test suites share; not part of the testkit's API.
#[doc(hidden)]
pub use skip::skip;
pub use turn::{Pieces, Turn, TurnItem, split_pieces};
