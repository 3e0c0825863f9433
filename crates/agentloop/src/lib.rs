//! # agentloop
//!
//! Tool calling and agent loops for LLMs. Define tools as Rust types and async functions, point
//! agentloop at a model, and run a loop that calls the model, runs the tools it asks for, feeds
//! the results back and stops at the answer or a limit — blocking or streamed — with a history
//! that is always valid to send again.

#![warn(missing_docs)]

mod agent;
pub mod conversation;
pub mod error;
pub mod history;
pub mod message;
pub mod provider;
pub mod run;
pub mod sse;
pub mod stream;
pub mod tool;

pub use agent::{Agent, AgentBuilder};
pub use error::{Error, Result, TimeoutKind};
pub use message::{
    ContentBlock, ImageSource, Message, Request, Response, Role, StopReason, ToolResult,
    ToolResultContent, Usage,
};
pub use provider::{EventStream, Provider};
pub use run::{RunEvent, RunOptions, RunResult, RunStopReason};
pub use stream::{Accumulator, StreamEvent};
pub use tool::{
    FunctionDefinition, NativeTool, Tool, ToolCall, ToolChoice, ToolContext, ToolDefinition,
    ToolError, ToolHandler, ToolOutput,
};

#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
