//! OpenAI's built-in tools on the Responses API (web search, file search, code interpreter,
//! remote MCP, and any other by its `type`) as native tools. Their output items (search calls,
//! code runs, MCP listings and approval requests) come back as native blocks tagged
//! `openai-responses` and go back to OpenAI as they came.
//!
//! A native tool `openai.<type>` is sent as `{"type": "<type>", ...its arguments}` (API
//! reference, "Create a model response", `tools`), so a built-in tool without a constructor
//! here still works through [`NativeTool::new`]. The provider-neutral
//! [`NativeTool::web_search`] is `{"type": "web_search"}`.
//!
//! ```
//! use agentloop::provider::responses::tools;
//! assert_eq!(tools::code_interpreter().id(), "openai.code_interpreter");
//! let mcp = tools::mcp("docs", "https://mcp.example.com/sse");
//! assert_eq!(mcp.args()["require_approval"], "always");
//! ```

use serde_json::{Map, Value, json};

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::tool::{NativeTool, WEB_SEARCH};

/// Web search (`{"type": "web_search"}`); its `web_search_call` items and the answer's
/// `url_citation` annotations come back.
pub fn web_search() -> NativeTool {
    NativeTool::new("openai.web_search", Value::Null)
}

/// File search over vector stores (`{"type": "file_search", "vector_store_ids": [...]}`).
pub fn file_search(vector_store_ids: impl IntoIterator<Item = impl Into<String>>) -> NativeTool {
    let ids: Vec<String> = vector_store_ids.into_iter().map(Into::into).collect();
    NativeTool::new("openai.file_search", json!({ "vector_store_ids": ids }))
}

/// Python in a sandbox OpenAI runs (`{"type": "code_interpreter", "container": {"type":
/// "auto"}}`).
pub fn code_interpreter() -> NativeTool {
    NativeTool::new(
        "openai.code_interpreter",
        json!({"container": {"type": "auto"}}),
    )
}

/// A remote MCP server OpenAI calls (`{"type": "mcp", "server_label", "server_url",
/// "require_approval": "always"}`); change `require_approval` with [`NativeTool::new`] and
/// your own arguments. An approval request ends the response with an `mcp_approval_request`
/// native block.
pub fn mcp(server_label: impl Into<String>, server_url: impl Into<String>) -> NativeTool {
    NativeTool::new(
        "openai.mcp",
        json!({
            "server_label": server_label.into(),
            "server_url": server_url.into(),
            "require_approval": "always",
        }),
    )
}

/// `tool` as an entry of the body's `tools`.
pub(super) fn wire_tool(tool: &NativeTool) -> Result<Value> {
    let kind = if tool.id() == WEB_SEARCH {
        tool.check_neutral()?;
        "web_search"
    } else if let Some(kind) = tool.id().strip_prefix("openai.") {
        kind
    } else {
        return Err(Error::Unsupported {
            provider: PROVIDER_NAME.to_owned(),
            feature: format!(
                "{} (the Responses API takes OpenAI's built-in tools, openai.<type>, and web_search)",
                tool.feature()
            ),
        });
    };
    let mut out = Map::new();
    out.insert("type".into(), kind.into());
    if let Some(args) = tool.args_object()? {
        for (key, value) in args {
            out.insert(key.clone(), value.clone());
        }
    }
    // Chat Completions' web search nests the location (`{"type": "approximate",
    // "approximate": {...}}`); Responses takes it flat.
    if let Some(Value::Object(location)) = out.get_mut("user_location")
        && let Some(Value::Object(inner)) = location.remove("approximate")
    {
        location.extend(inner);
    }
    Ok(Value::Object(out))
}
