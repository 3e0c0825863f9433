//! Test helpers for agentloop: a scripted in-process model, and OpenAI- and Anthropic-compatible
//! servers on loopback with fault injection.

#![warn(missing_docs)]

pub mod demo;
#[cfg(feature = "mcp")]
pub mod mcp;
mod scripted;
mod turn;

pub use scripted::ScriptedModel;
pub use turn::{Pieces, Turn, TurnItem, split_pieces};
