//! Test helpers for agentloop: a scripted in-process model, and OpenAI- and Anthropic-compatible
//! servers on loopback with fault injection.

#![warn(missing_docs)]

pub mod demo;
#[cfg(feature = "mcp")]
pub mod mcp;
mod scripted;
pub mod server;
mod skip;
mod turn;

pub use scripted::ScriptedModel;
pub use server::{
    Fault, MockServer, MockServerBuilder, PrerenderedServer, RecordedRequest, Wire, WriteMode,
    serve_prerendered, serve_prerendered_on,
};
pub use skip::skip;
pub use turn::{Pieces, Turn, TurnItem, split_pieces};
