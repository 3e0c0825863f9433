//! Anthropic's native tools: typed constructors for the Messages API's server tools (web
//! search, code execution) and client tools (computer use, text editor, bash), and how a
//! [`NativeTool`] becomes a wire tool.
//!
//! Each constructor sets the tool's `type` (its version) in the arguments, so a saved request
//! says exactly what was sent; the beta header a version needs is added per call. Type strings,
//! names and betas follow Anthropic's tool docs (web search, code execution, computer use, text
//! editor, bash).
//!
//! ```
//! use agentloop::Agent;
//! use agentloop::provider::anthropic::tools::{self, CodeExecutionVersion, WebSearch};
//! # fn demo(claude: agentloop::provider::anthropic::Anthropic) {
//! let agent = Agent::builder(claude)
//!     .native_tool(tools::web_search(WebSearch { max_uses: Some(3), ..WebSearch::default() }))
//!     .native_tool(tools::code_execution(CodeExecutionVersion::V20250825))
//!     .native_tool(tools::bash()) // runs on your side: bind a handler to "bash"
//!     .build();
//! # }
//! ```

use serde_json::{Map, Value, json};

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::tool::{NativeTool, WEB_SEARCH as NEUTRAL_WEB_SEARCH};

/// The tools this module maps: id, the name the model calls it, the type sent by default.
const KNOWN: [(&str, &str, &str); 5] = [
    (WEB_SEARCH, "web_search", "web_search_20250305"),
    (CODE_EXECUTION, "code_execution", "code_execution_20250825"),
    (COMPUTER_USE, "computer", "computer_20250124"),
    (
        TEXT_EDITOR,
        "str_replace_based_edit_tool",
        "text_editor_20250728",
    ),
    (BASH, "bash", "bash_20250124"),
];

const WEB_SEARCH: &str = "anthropic.web_search";
const CODE_EXECUTION: &str = "anthropic.code_execution";
const COMPUTER_USE: &str = "anthropic.computer_use";
const TEXT_EDITOR: &str = "anthropic.text_editor";
const BASH: &str = "anthropic.bash";

/// Which computer use tool version to send: each model generation expects its own
/// (docs: "Always use the tool version that corresponds to your model version").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputerUseVersion {
    /// `computer_20250124` with beta `computer-use-2025-01-24`: Claude 4 models and Sonnet 3.7.
    #[default]
    V20250124,
    /// `computer_20251124` with beta `computer-use-2025-11-24`: Opus 4.5 and later models.
    V20251124,
}

impl ComputerUseVersion {
    const ALL: [Self; 2] = [Self::V20250124, Self::V20251124];

    /// The tool type string and the beta header value it needs.
    pub fn wire(self) -> (&'static str, &'static str) {
        match self {
            Self::V20250124 => ("computer_20250124", "computer-use-2025-01-24"),
            Self::V20251124 => ("computer_20251124", "computer-use-2025-11-24"),
        }
    }
}

/// Which code execution tool version to send (docs, "Code execution tool"); each needs models
/// that know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeExecutionVersion {
    /// `code_execution_20250522` with beta `code-execution-2025-05-22`: Python only (legacy).
    V20250522,
    /// `code_execution_20250825` with beta `code-execution-2025-08-25`: bash commands and file
    /// operations.
    #[default]
    V20250825,
    /// `code_execution_20260120`, generally available (no beta): keeps the sandbox's state
    /// (variables, imports) from one call to the next.
    V20260120,
}

impl CodeExecutionVersion {
    const ALL: [Self; 3] = [Self::V20250522, Self::V20250825, Self::V20260120];

    /// The tool type string and the beta header value it needs, if any.
    pub fn wire(self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::V20250522 => ("code_execution_20250522", Some("code-execution-2025-05-22")),
            Self::V20250825 => ("code_execution_20250825", Some("code-execution-2025-08-25")),
            Self::V20260120 => ("code_execution_20260120", None),
        }
    }
}

/// Settings of Anthropic's web search (`web_search_20250305`); the defaults search freely.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebSearch {
    /// Maximum searches per request.
    pub max_uses: Option<u32>,
    /// Only search these domains.
    pub allowed_domains: Vec<String>,
    /// Never search these domains.
    pub blocked_domains: Vec<String>,
    /// Approximate user location (`city`, `region`, `country`, `timezone`); `type` defaults
    /// to `approximate`, Anthropic's only kind.
    pub user_location: Option<Value>,
}

/// Web search run by Anthropic (id `anthropic.web_search`).
pub fn web_search(settings: WebSearch) -> NativeTool {
    let mut args = Map::new();
    args.insert("type".into(), KNOWN[0].2.into());
    if let Some(max_uses) = settings.max_uses {
        args.insert("max_uses".into(), max_uses.into());
    }
    if !settings.allowed_domains.is_empty() {
        args.insert("allowed_domains".into(), json!(settings.allowed_domains));
    }
    if !settings.blocked_domains.is_empty() {
        args.insert("blocked_domains".into(), json!(settings.blocked_domains));
    }
    if let Some(mut location) = settings.user_location {
        if let Value::Object(map) = &mut location {
            map.entry("type").or_insert_with(|| "approximate".into());
        }
        args.insert("user_location".into(), location);
    }
    NativeTool::new(WEB_SEARCH, Value::Object(args))
}

/// Sandboxed code execution run by Anthropic (id `anthropic.code_execution`).
pub fn code_execution(version: CodeExecutionVersion) -> NativeTool {
    NativeTool::new(CODE_EXECUTION, json!({"type": version.wire().0}))
}

/// Computer use (id `anthropic.computer_use`): the model drives a screen you provide, so you
/// run its calls: bind a handler to `computer`.
pub fn computer_use(
    version: ComputerUseVersion,
    display_width: u32,
    display_height: u32,
    display_number: Option<u32>,
) -> NativeTool {
    let mut args = json!({
        "type": version.wire().0,
        "display_width_px": display_width,
        "display_height_px": display_height,
    });
    if let (Some(number), Value::Object(map)) = (display_number, &mut args) {
        map.insert("display_number".into(), number.into());
    }
    NativeTool::new(COMPUTER_USE, args).client_side(KNOWN[2].1)
}

/// The text editor for Claude 4 models (`text_editor_20250728`, id `anthropic.text_editor`):
/// you run its commands: bind a handler to `str_replace_based_edit_tool`.
pub fn text_editor() -> NativeTool {
    NativeTool::new(TEXT_EDITOR, json!({"type": KNOWN[3].2})).client_side(KNOWN[3].1)
}

/// A shell the model drives (`bash_20250124`, id `anthropic.bash`): you run its commands:
/// bind a handler to `bash`.
pub fn bash() -> NativeTool {
    NativeTool::new(BASH, json!({"type": KNOWN[4].2})).client_side(KNOWN[4].1)
}

/// The beta header a tool type needs, if any. A type this crate does not know is sent
/// without one: add its beta to the configured `anthropic-beta` header.
fn beta(kind: &str) -> Option<&'static str> {
    let computer = ComputerUseVersion::ALL
        .iter()
        .map(|v| v.wire())
        .find(|(k, _)| *k == kind)
        .map(|(_, beta)| beta);
    computer.or_else(|| {
        CodeExecutionVersion::ALL
            .iter()
            .map(|v| v.wire())
            .find(|(k, _)| *k == kind)
            .and_then(|(_, beta)| beta)
    })
}

/// `tool` as a Messages API tool: `type` and `name`, then its arguments (which may pick
/// another `type`, i.e. version). The betas it needs go into `betas`.
pub(super) fn wire(tool: &NativeTool, betas: &mut Vec<&'static str>) -> Result<Value> {
    let (name, kind) = if tool.id() == NEUTRAL_WEB_SEARCH {
        tool.check_neutral()?;
        (KNOWN[0].1, KNOWN[0].2)
    } else if let Some((_, name, kind)) = KNOWN.iter().find(|(id, ..)| *id == tool.id()) {
        (*name, *kind)
    } else {
        return Err(unsupported(tool));
    };
    let mut wire = Map::new();
    wire.insert("type".into(), kind.into());
    wire.insert("name".into(), tool.client_name().unwrap_or(name).into());
    if let Some(args) = tool.args_object()? {
        wire.extend(args.iter().map(|(key, value)| (key.clone(), value.clone())));
    }
    if let Some(beta) = wire.get("type").and_then(Value::as_str).and_then(beta)
        && !betas.contains(&beta)
    {
        betas.push(beta);
    }
    Ok(Value::Object(wire))
}

fn unsupported(tool: &NativeTool) -> Error {
    let feature = if tool.id().ends_with(".file_search") {
        format!(
            "{} (the Messages API has no vector-store search; give the model a function tool \
             that queries your store)",
            tool.feature()
        )
    } else {
        tool.feature()
    };
    Error::Unsupported {
        provider: PROVIDER_NAME.to_owned(),
        feature,
    }
}
