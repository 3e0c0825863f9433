//! Executors: what runs a registry tool. Each one implements [`ToolHandler`], so a descriptor
//! becomes an ordinary [`crate::Tool`] that the run loop uses unchanged.
//!
//! - [`FunctionExecutor`]: an in-process handler;
//! - [`MockExecutor`]: canned answers (static, template, scripted sequence);
//! - [`HttpExecutor`]: the arguments as a JSON request to an endpoint;
//! - `McpExecutor` (feature `mcp`): a tool of a connected MCP server.
//!
//! [`ToolHandler`]: crate::ToolHandler

mod function;
mod http;
#[cfg(feature = "mcp")]
pub(crate) mod mcp;
#[cfg(feature = "mcp")]
pub mod mcp_oauth;
mod mock;

use serde_json::Value;

use crate::message::ToolResultContent;
use crate::tool::{ToolError, ToolOutput, Violation, schema};

pub use function::FunctionExecutor;
pub use http::HttpExecutor;
pub(crate) use http::http_client;
#[cfg(feature = "mcp")]
pub use mcp::{McpExecutor, McpHttp, McpProtocol, McpServerInfo, McpStdio};
#[cfg(feature = "mcp")]
pub use mcp_oauth::McpOAuth;
pub use mock::MockExecutor;

/// A tool's output schema, compiled once, checked against every successful result.
pub(crate) struct OutputCheck {
    tool: String,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputCheck")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl OutputCheck {
    /// Check that `schema` is a valid JSON Schema and compile it.
    pub(crate) fn compile(tool: &str, schema: &Value) -> Result<Self, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err(format!(
                "the output schema must be a JSON Schema object, got `{schema}`"
            ));
        }
        jsonschema::meta::validate(schema).map_err(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("the output schema is not a valid JSON Schema at {at}: {e}")
        })?;
        let validator = schema::compile(schema)
            .map_err(|e| format!("the output schema does not compile: {e}"))?;
        Ok(Self {
            tool: tool.to_owned(),
            validator,
        })
    }

    /// `Ok` when `value` matches; otherwise the error result listing each violation.
    pub(crate) fn check(&self, value: &Value) -> Result<(), ToolError> {
        schema::violations(&self.validator, value).map_err(|violations| {
            ToolError::Failed(output_violations_text(&self.tool, &violations))
        })
    }

    /// Check a handler's output: text that parses as JSON is checked as that JSON, other
    /// text as a JSON string.
    pub(crate) fn check_output(&self, output: &ToolOutput) -> Result<(), ToolError> {
        let text = match &output.0 {
            ToolResultContent::Text(text) => text.clone(),
            blocks @ ToolResultContent::Blocks(_) => blocks.to_text(),
        };
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        self.check(&value)
    }
}

fn output_violations_text(tool: &str, violations: &[Violation]) -> String {
    let mut text = format!("the result of tool `{tool}` does not match its output schema:");
    for v in violations {
        text.push_str("\n- ");
        text.push_str(&v.to_string());
    }
    text
}
