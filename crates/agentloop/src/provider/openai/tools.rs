//! Native tools on Chat Completions: OpenAI's web search (`web_search_options`, for search
//! models such as `gpt-4o-search-preview`) is the only one that API has. OpenAI's other tools
//! (file search, code interpreter) and xAI's (web and X search, code execution, collections
//! search) exist only in Responses APIs, so they, and every other provider's tools, are
//! [`Error::Unsupported`] naming the service and the tool id.
//!
//! ```
//! use agentloop::provider::openai::tools::{self, WebSearch};
//! let search = tools::web_search(WebSearch {
//!     search_context_size: Some("high".into()),
//!     ..WebSearch::default()
//! });
//! assert_eq!(search.id(), "openai.web_search");
//! ```

use serde::Serialize;
use serde_json::{Map, Value};

use super::{OpenAiOptions, Preset};
use crate::error::{Error, Result};
use crate::tool::{NativeTool, WEB_SEARCH as NEUTRAL_WEB_SEARCH};

const WEB_SEARCH: &str = "openai.web_search";

/// Settings of OpenAI's web search (`web_search_options` in `POST /chat/completions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebSearch {
    /// `low`, `medium` or `high`: how much context the search gathers.
    pub search_context_size: Option<String>,
    /// Approximate user location (`city`, `country`, `region`, `timezone`); a bare object is
    /// wrapped as `{"type": "approximate", "approximate": {...}}`, OpenAI's shape.
    pub user_location: Option<Value>,
}

/// Web search on OpenAI search models (id `openai.web_search`); its arguments are the
/// `web_search_options` object.
pub fn web_search(settings: WebSearch) -> NativeTool {
    let mut args = Map::new();
    if let Some(size) = settings.search_context_size {
        args.insert("search_context_size".into(), size.into());
    }
    if let Some(location) = settings.user_location {
        let location = if location.get("type").is_some() {
            location
        } else {
            serde_json::json!({"type": "approximate", "approximate": location})
        };
        args.insert("user_location".into(), location);
    }
    NativeTool::new(WEB_SEARCH, Value::Object(args))
}

/// The body's `web_search_options`: the tool's arguments, `{}` for none.
#[derive(Serialize)]
#[serde(transparent)]
pub(super) struct WebSearchOptions<'a>(&'a Map<String, Value>);

static NO_OPTIONS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

/// `tool` as `web_search_options`, or why this service cannot take it.
pub(super) fn web_search_options<'a>(
    tool: &'a NativeTool,
    options: &OpenAiOptions,
) -> Result<WebSearchOptions<'a>> {
    let unsupported = |why: &str| Error::Unsupported {
        provider: options.name.clone(),
        feature: format!("{}{why}", tool.feature()),
    };
    let id = tool.id();
    if options.web_search && (id == WEB_SEARCH || id == NEUTRAL_WEB_SEARCH) {
        if id == NEUTRAL_WEB_SEARCH {
            tool.check_neutral()?;
        }
        return Ok(WebSearchOptions(tool.args_object()?.unwrap_or(&NO_OPTIONS)));
    }
    let own = id.split_once('.').map(|(provider, _)| provider) == Some(options.preset.name());
    Err(match options.preset {
        // xAI's docs ("Comparison with Chat Completions API"): its server-side tools run in
        // its Responses API only, and Live Search (`search_parameters`) was retired.
        Preset::Xai if own || id == NEUTRAL_WEB_SEARCH => unsupported(
            " on Chat Completions (xAI offers its server-side tools, web and X search, code \
             execution and collections search, only in its Responses API; Live Search via \
             `search_parameters` was retired)",
        ),
        // openai-openapi `CreateChatCompletionRequest`: function tools and
        // `web_search_options` only; `file_search` and `code_interpreter` are Responses tools.
        Preset::OpenAi if own => {
            unsupported(" on Chat Completions (OpenAI offers it only in the Responses API)")
        }
        _ => unsupported(""),
    })
}
