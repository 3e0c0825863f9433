//! The Anthropic Messages API (`POST /v1/messages`), streamed and not.
//!
//! Wire shapes follow the Messages API reference for `anthropic-version: 2023-06-01`, as read
//! in the Claude platform docs (platform.claude.com/docs: "Messages", "Streaming Messages",
//! "Extended thinking", "How to implement tool use", the web search / code execution /
//! computer use / text editor / bash tool pages, and "Errors").
//!
//! The canonical model is already shaped like Anthropic's content blocks, so the mapping is
//! mostly direct. What needs care: thinking blocks only go back to the provider that signed
//! them, system messages inside the history fold into `system`, roles must alternate, and
//! native tools need their versioned type strings and beta headers: [`tools`] builds them
//! (`anthropic.*` ids, plus the provider-neutral web search); any other native tool is
//! [`Error::Unsupported`].
//!
//! Prompt caching: [`Request::cache`] breakpoints become `cache_control` on the last tool, the
//! last system block (the system prompt is then sent as text blocks), a message's block, or the
//! top level (automatic caching). More than four placed breakpoints is
//! [`Error::LimitExceeded`], before anything is sent; usage reports the cache reads and writes.
//!
//! Blocks Anthropic makes that have no canonical kind (server tool calls and results, MCP
//! blocks, `compaction`) are kept as [`ContentBlock::Native`](crate::ContentBlock::Native) and
//! sent back unchanged, so server-side compaction ("Compaction") keeps working across turns.
//! Programmatic tool calling: a client call's `caller` and the code execution `container`
//! follow the call as native annotations (objects without a `type`), never sent as blocks: the
//! request puts `caller` back on its `tool_use` and names the last assistant turn's container.

mod decode;
pub(crate) mod models;
mod request;
mod response;
pub mod tools;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::{Error, Result};
use crate::message::{Request, Response};
use crate::provider::http::{self, ApiKey, HttpConfig, Transport};
use crate::provider::{EventStream, Provider};

pub use decode::AnthropicDecoder;

/// The provider name, used in errors and to tag reasoning blocks.
pub const PROVIDER_NAME: &str = "anthropic";
/// Where the API lives unless configured otherwise.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version sent in `anthropic-version` (the only stable version to date).
pub const API_VERSION: &str = "2023-06-01";
/// The environment variable holding the key.
pub const API_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// The environment variable that overrides the base URL.
pub const BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";

const MESSAGES_PATH: &str = "/v1/messages";
const BETA_HEADER: &str = "anthropic-beta";
const VERSION_HEADER: &str = "anthropic-version";

/// What to do with reasoning blocks Anthropic cannot verify (made by another provider, or
/// missing their signature). Sending them as thinking blocks would be rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForeignThinking {
    /// Leave them out (the default).
    #[default]
    Drop,
    /// Send their text as plain text blocks, so the model still sees the reasoning.
    AsText,
}

/// Anthropic-specific settings (the connection settings are in [`HttpConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicOptions {
    /// `max_tokens` is required by Anthropic; this is sent when the request has none
    /// (default 4096).
    pub default_max_tokens: u32,
    /// What to do with reasoning blocks Anthropic cannot verify.
    pub foreign_thinking: ForeignThinking,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        Self {
            default_max_tokens: 4096,
            foreign_thinking: ForeignThinking::Drop,
        }
    }
}

/// A request ready to send: the serialized body and the headers this call needs beyond the
/// configured ones (`anthropic-beta` for native tools). Useful to inspect what would be sent.
#[derive(Debug, Clone)]
pub struct WireRequest {
    /// The JSON body.
    pub body: Bytes,
    /// Per-call headers.
    pub headers: HeaderMap,
}

/// The Anthropic Messages API provider.
///
/// ```no_run
/// # fn main() -> agentloop::Result<()> {
/// use agentloop::provider::anthropic::Anthropic;
/// let claude = Anthropic::from_env()?; // ANTHROPIC_API_KEY, optional ANTHROPIC_BASE_URL
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Anthropic {
    transport: Transport,
    options: AnthropicOptions,
    /// `anthropic-beta` values from the configured headers: a per-call beta header replaces
    /// the configured one, so it must repeat them.
    configured_betas: Vec<String>,
    /// `/v1/messages`, or `/messages` when the base URL already ends with `/v1`.
    messages_path: &'static str,
}

impl Anthropic {
    /// A provider for `config` with default options. The base URL is the API root
    /// (`https://api.anthropic.com`); one ending in `/v1` works too.
    pub fn new(config: HttpConfig) -> Result<Self> {
        Self::with_options(config, AnthropicOptions::default())
    }

    /// A provider for `config` with `options`.
    pub fn with_options(mut config: HttpConfig, options: AnthropicOptions) -> Result<Self> {
        let has_version = config
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(VERSION_HEADER));
        if !has_version {
            config
                .headers
                .push((VERSION_HEADER.to_owned(), API_VERSION.to_owned()));
        }
        let configured_betas = config
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(BETA_HEADER))
            .flat_map(|(_, value)| value.split(','))
            .map(str::trim)
            .filter(|beta| !beta.is_empty())
            .map(str::to_owned)
            .collect();
        let auth = match &config.api_key {
            Some(key) => vec![(
                HeaderName::from_static("x-api-key"),
                HeaderValue::from_str(key.expose()).map_err(|_| {
                    Error::config("the Anthropic API key contains characters not allowed in an HTTP header; check ANTHROPIC_API_KEY")
                })?,
            )],
            // No key: a gateway in front of the API may add it.
            None => Vec::new(),
        };
        // The API root is the convention (`ANTHROPIC_BASE_URL`), but a base URL copied from an
        // OpenAI-style setup often ends in `/v1`: accept both rather than call `/v1/v1/...`.
        let messages_path = if config.base_url.trim_end_matches('/').ends_with("/v1") {
            "/messages"
        } else {
            MESSAGES_PATH
        };
        let transport = Transport::new(PROVIDER_NAME, config, auth, map_error)?;
        Ok(Self {
            transport,
            options,
            configured_betas,
            messages_path,
        })
    }

    /// A provider configured from the environment: the key from `ANTHROPIC_API_KEY` and the
    /// base URL from `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`).
    pub fn from_env() -> Result<Self> {
        let key = ApiKey::from_env(API_KEY_ENV).ok_or_else(|| {
            Error::config(format!(
                "{API_KEY_ENV} is not set; export your Anthropic API key or build the provider with Anthropic::new(HttpConfig)"
            ))
        })?;
        let base_url = std::env::var(BASE_URL_ENV)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let mut config = HttpConfig::new(base_url);
        config.api_key = Some(key);
        Self::new(config)
    }

    /// The Anthropic-specific options.
    pub fn options(&self) -> &AnthropicOptions {
        &self.options
    }

    /// The connection settings.
    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    /// Serialize `request` the way it would be sent (with `stream: true` when `stream`).
    pub fn prepare(&self, request: &Request, stream: bool) -> Result<WireRequest> {
        let built = request::build(
            request,
            &self.options,
            stream,
            self.transport.body_size(),
            self.transport.rendered_tools(),
        )?;
        let mut headers = HeaderMap::new();
        if !built.betas.is_empty() {
            let mut betas: Vec<&str> = self.configured_betas.iter().map(String::as_str).collect();
            for beta in built.betas {
                if !betas.contains(&beta) {
                    betas.push(beta);
                }
            }
            let value = HeaderValue::from_str(&betas.join(","))
                .map_err(|e| Error::config(format!("invalid anthropic-beta header: {e}")))?;
            headers.insert(HeaderName::from_static(BETA_HEADER), value);
        }
        Ok(WireRequest {
            body: built.body,
            headers,
        })
    }
}

impl Provider for Anthropic {
    /// The final-answer tool: structured outputs (`output_config.format`) are for Claude 4.5
    /// and later only, which [`Self::output_strategy_for`] picks them for by the model's name;
    /// [`crate::Output::with_strategy`] chooses either for any model.
    fn output_strategy(&self) -> crate::output::OutputStrategy {
        crate::output::OutputStrategy::Tool
    }

    /// Structured outputs on Claude 4.5 and later, the final-answer tool before them.
    fn output_strategy_for(&self, request: &Request) -> crate::output::OutputStrategy {
        if models::takes_structured_output(&request.model) {
            crate::output::OutputStrategy::Native
        } else {
            self.output_strategy()
        }
    }

    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn stream(&self, request: &Request) -> EventStream {
        match self.prepare(request, true) {
            Ok(wire) => self.transport.post_stream(
                self.messages_path,
                wire.body,
                wire.headers,
                AnthropicDecoder::new,
            ),
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let prepared = self.prepare(request, false);
        let transport = self.transport.clone();
        let path = self.messages_path;
        Box::pin(async move {
            let wire = prepared?;
            let value = transport.post_json(path, wire.body, wire.headers).await?;
            response::parse(value)
        })
    }
}

/// [`http::map_error`] fits Anthropic's `{"type":"error","error":{"type","message"}}` body.
/// One exception: a 429 whose `error.details.error_code` is `enforced_spend_limit_reached`
/// is a monthly spend cap, not a rate limit, and retrying cannot succeed until the cap
/// resets (docs: "Errors" / "Rate limits").
fn map_error(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error {
    if status == 429 {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        let code = error
            .and_then(|e| e.pointer("/details/error_code"))
            .and_then(serde_json::Value::as_str);
        if code == Some("enforced_spend_limit_reached") {
            let message = error
                .and_then(|e| e.get("message"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or("the organization reached its monthly spend limit");
            return Error::Api {
                provider: provider.to_owned(),
                status,
                error_type: Some("enforced_spend_limit_reached".to_owned()),
                message: message.to_owned(),
            };
        }
    }
    http::map_error(provider, status, headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spend_cap_429_is_not_retryable_but_a_rate_limit_is() {
        let headers = HeaderMap::new();
        let cap = br#"{"type":"error","error":{"type":"rate_limit_error","message":"cap reached","details":{"error_code":"enforced_spend_limit_reached"}}}"#;
        let error = map_error(PROVIDER_NAME, 429, &headers, cap);
        assert!(!error.is_retryable());
        assert!(matches!(
            &error,
            Error::Api { status: 429, error_type: Some(t), message, .. }
                if t == "enforced_spend_limit_reached" && message == "cap reached"
        ));

        let limit =
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
        let error = map_error(PROVIDER_NAME, 429, &headers, limit);
        assert!(error.is_retryable());
        assert!(matches!(error, Error::RateLimited { .. }));
    }

    #[test]
    fn documented_statuses_map_to_their_variants() {
        let headers = HeaderMap::new();
        let body = |kind: &str| {
            format!(
                r#"{{"type":"error","error":{{"type":"{kind}","message":"m"}},"request_id":"req_1"}}"#
            )
        };
        let cases: [(u16, &str, &str); 8] = [
            (400, "invalid_request_error", "invalid_request"),
            (401, "authentication_error", "auth"),
            (403, "permission_error", "auth"),
            (404, "not_found_error", "invalid_request"),
            (413, "request_too_large", "invalid_request"),
            (429, "rate_limit_error", "rate_limited"),
            (500, "api_error", "api"),
            (529, "overloaded_error", "overloaded"),
        ];
        for (status, kind, expected) in cases {
            let error = map_error(PROVIDER_NAME, status, &headers, body(kind).as_bytes());
            assert_eq!(error.kind(), expected, "{status} {kind}: {error}");
        }
    }
}
