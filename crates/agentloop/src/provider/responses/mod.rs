//! The OpenAI Responses API (`POST /responses`, streamed or whole), and servers that speak it
//! (OpenRouter, GitHub Copilot, ... through a base URL).
//!
//! Route to it with `openai-responses/<model>`, or `openai/<model>` with
//! [`RouteOptions::responses`](crate::provider::route::RouteOptions::responses);
//! `openai/<model>` alone stays on Chat Completions, which every OpenAI-compatible server
//! speaks.
//!
//! What needs care:
//! - **Reasoning is kept, not stored at OpenAI.** Requests say `store: false` and ask for
//!   `include: ["reasoning.encrypted_content"]` ([`ResponsesOptions`]). A reasoning item
//!   becomes a reasoning block tagged `openai-responses`: its text is the summary, its
//!   signature the whole item as OpenAI sent it (JSON: id, `encrypted_content`, summary), which
//!   goes back verbatim in the next request. Reasoning from other providers is left out here,
//!   and other providers leave this provider's out.
//! - **Built-in tools** (web search, file search, code interpreter, remote MCP, see [`tools`])
//!   come back as output items, kept whole as native blocks and sent back as input items.
//! - **Strict functions**: `strict` is always sent, since Responses makes a function strict
//!   when it is left out; a strict tool gets OpenAI's strict schema shape where that keeps what
//!   the schema accepts (as on Chat Completions), typed answers use `text.format`.
//! - **Left out**: stop sequences and `top_k` (the API has neither), sampling settings for
//!   reasoning models (they refuse them), `metadata` unless `store` is on.
//! - **Stop reasons**: `response.incomplete` with `max_output_tokens` is
//!   [`StopReason::MaxTokens`](crate::StopReason::MaxTokens), a refusal
//!   [`StopReason::Refusal`](crate::StopReason::Refusal); `error` events and `response.failed`
//!   are errors typed by their code.
//!
//! ```no_run
//! # fn main() -> agentloop::Result<()> {
//! use agentloop::provider::responses::OpenAiResponses;
//! let openai = OpenAiResponses::from_env()?; // OPENAI_API_KEY, optional OPENAI_BASE_URL
//! # Ok(()) }
//! ```

mod decode;
mod request;
pub mod tools;

use std::collections::VecDeque;

use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::message::{Request, Response};
use crate::output::OutputStrategy;
use crate::provider::http::{self, ApiKey, HttpConfig, Transport};
use crate::provider::{EventStream, Provider};
use crate::stream::Accumulator;

pub use decode::ResponsesDecoder;

/// The provider name, used in routing, errors and to tag reasoning and native blocks.
pub const PROVIDER_NAME: &str = "openai-responses";
/// Where OpenAI's API lives unless configured otherwise.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The environment variable holding the key.
pub const API_KEY_ENV: &str = "OPENAI_API_KEY";
/// The environment variable that overrides the base URL.
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";
/// The endpoint path, relative to the base URL.
const PATH: &str = "/responses";

/// Reasoning settings (`reasoning`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasoningConfig {
    /// `minimal`, `low`, `medium` or `high` (`None`: the model's default).
    pub effort: Option<String>,
    /// Ask for a reasoning summary: `auto`, `concise` or `detailed`.
    pub summary: Option<String>,
}

/// Responses-specific settings (the connection settings are in [`HttpConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesOptions {
    /// Let OpenAI keep responses (`store`). Off by default: the history lives with you, and
    /// reasoning travels as encrypted content.
    pub store: bool,
    /// Ask for reasoning as `encrypted_content` when not storing (on by default), so it can be
    /// sent back.
    pub encrypted_reasoning: bool,
    /// Reasoning settings; `None` leaves the model's default.
    pub reasoning: Option<ReasoningConfig>,
}

impl Default for ResponsesOptions {
    fn default() -> Self {
        Self {
            store: false,
            encrypted_reasoning: true,
            reasoning: None,
        }
    }
}

/// The OpenAI Responses API provider.
#[derive(Debug, Clone)]
pub struct OpenAiResponses {
    transport: Transport,
    options: ResponsesOptions,
}

impl OpenAiResponses {
    /// A provider for `config` (base URL with the `/v1`-style prefix; the key is sent as a
    /// bearer token).
    pub fn new(config: HttpConfig) -> Result<Self> {
        Self::with_options(config, ResponsesOptions::default())
    }

    /// A provider for `config` with `options`.
    pub fn with_options(config: HttpConfig, options: ResponsesOptions) -> Result<Self> {
        let mut auth = Vec::new();
        if let Some(key) = &config.api_key {
            let value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    Error::config(format!(
                        "the OpenAI API key contains characters that cannot be sent in a header; check {API_KEY_ENV}"
                    ))
                })?;
            auth.push((AUTHORIZATION, value));
        }
        let transport = Transport::new(PROVIDER_NAME, config, auth, http::map_error)?;
        Ok(Self { transport, options })
    }

    /// OpenAI from `OPENAI_API_KEY` and, if set, `OPENAI_BASE_URL` (a server elsewhere may
    /// need no key).
    pub fn from_env() -> Result<Self> {
        let base_url = std::env::var(BASE_URL_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let key = ApiKey::from_env(API_KEY_ENV);
        if key.is_none() && base_url.is_none() {
            return Err(Error::config(
                "OPENAI_API_KEY is not set; export your OpenAI API key or build the provider with OpenAiResponses::new(HttpConfig)",
            ));
        }
        let mut config = HttpConfig::new(base_url.unwrap_or_else(|| DEFAULT_BASE_URL.into()));
        config.api_key = key;
        Self::new(config)
    }

    /// The Responses-specific options.
    pub fn options(&self) -> &ResponsesOptions {
        &self.options
    }

    /// The connection settings.
    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    /// The body as it would be sent, streamed (`"stream": true`) or not.
    pub fn prepare(&self, request: &Request, stream: bool) -> Result<bytes::Bytes> {
        request::build(request, &self.options, stream, self.transport.body_size())
    }

    /// The streamed request's body as JSON, for inspection and golden tests.
    pub fn body(&self, request: &Request) -> Result<Value> {
        request::body(request, &self.options, true)
    }
}

impl Provider for OpenAiResponses {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn output_strategy(&self) -> OutputStrategy {
        OutputStrategy::Native
    }

    fn stream(&self, request: &Request) -> EventStream {
        match self.prepare(request, true) {
            Ok(body) => {
                self.transport
                    .post_stream(PATH, body, HeaderMap::new(), ResponsesDecoder::new)
            }
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let prepared = self.prepare(request, false);
        let transport = self.transport.clone();
        Box::pin(async move {
            let body = prepared?;
            let value = transport.post_json(PATH, body, HeaderMap::new()).await?;
            parse(&value)
        })
    }
}

/// A whole response object → [`Response`], through the stream decoder.
pub fn parse(value: &Value) -> Result<Response> {
    let mut decoder = ResponsesDecoder::new();
    let mut events = VecDeque::new();
    decoder.response(value, &mut events)?;
    let mut acc = Accumulator::new();
    for event in &events {
        acc.push(event);
    }
    acc.set_provider(PROVIDER_NAME);
    Ok(acc.finish())
}
