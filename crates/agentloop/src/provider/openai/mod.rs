//! OpenAI Chat Completions (`POST /chat/completions`), and every server that speaks it: xAI,
//! Cerebras, Groq, DeepSeek, Ollama, vLLM, LM Studio, llama.cpp, or any other base URL.
//!
//! ```no_run
//! # async fn demo() -> agentloop::Result<()> {
//! use agentloop::provider::openai::OpenAi;
//! use agentloop::{Message, Provider, Request};
//!
//! let openai = OpenAi::from_env()?; // OPENAI_API_KEY, optional OPENAI_BASE_URL
//! let groq = OpenAi::preset("groq")?; // GROQ_API_KEY
//! let local = OpenAi::compatible("http://localhost:8000/v1")?;
//! let answer = openai
//!     .complete(&Request::new("gpt-4.1", vec![Message::user("Hello")]))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! How the canonical history maps to this wire format:
//! - `system` (and system messages) → a `system` message, or `developer` for OpenAI reasoning
//!   models (o-series, gpt-5), where it replaces `system` ([`SystemRole`]).
//! - Tool results → one `tool` message each, right after the assistant message. OpenAI has no
//!   error flag, so an `is_error` result's text is prefixed with `Error: ` (unless it already
//!   starts with "error"). Images a tool returned follow in a user message.
//! - Tool-use input that was not valid JSON (kept as a JSON string) is sent back as that raw
//!   text.
//! - Reasoning blocks (from any provider) and other providers' native blocks are dropped;
//!   [`OpenAiOptions::thinking_as_text`] sends reasoning as `<thinking>` text instead.
//! - Native tools: web search ([`tools::web_search`] or the provider-neutral one) maps to
//!   `web_search_options` (OpenAI search models); OpenAI's and xAI's other tools exist only in
//!   Responses APIs, so they, and every other native tool, are [`Error::Unsupported`].
//! - Parallel calls: `parallel_tool_calls`, which xAI takes too (the `parallel_function_calling`
//!   name some clients send for Grok is not in xAI's API definition).
//! - Tool counts past a service's documented limit ([`Preset::max_tools`]) fail before sending.
//! - Prompt-cache breakpoints ([`Request::cache`]) are left out: these services cache on their
//!   own.

mod decode;
mod request;
pub(crate) use request::parameters as function_parameters;
mod response;
pub mod tools;
mod wire;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use crate::error::{Error, Result};
use crate::message::{Request, Response};
use crate::provider::http::{self, ApiKey, HttpConfig, Transport};
use crate::provider::{EventStream, Provider};

pub use decode::ChunkDecoder;
pub use response::{parse_completion, parse_completion_bytes};

/// The endpoint path, relative to the base URL.
const PATH: &str = "/chat/completions";

/// A known OpenAI-compatible service: its name, base URL, key variable and quirks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// OpenAI itself (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).
    OpenAi,
    /// xAI Grok (`XAI_API_KEY`).
    Xai,
    /// Cerebras (`CEREBRAS_API_KEY`).
    Cerebras,
    /// Groq (`GROQ_API_KEY`).
    Groq,
    /// DeepSeek (`DEEPSEEK_API_KEY`). Its thinking mode (on by default) answers 400 unless
    /// every assistant message after a tool call carries its `reasoning_content`, so this
    /// preset sends reasoning back ([`OpenAiOptions::reasoning_content`]).
    DeepSeek,
    /// A local Ollama server (no key).
    Ollama,
    /// A vLLM server (no key).
    Vllm,
    /// A local LM Studio server (no key).
    LmStudio,
    /// A llama.cpp `llama-server` (no key).
    LlamaCpp,
    /// Any other server that speaks Chat Completions (`OPENAI_API_KEY` if set).
    Compatible,
}

impl Preset {
    /// Every preset, in the order they are listed in errors.
    pub const ALL: [Preset; 10] = [
        Self::OpenAi,
        Self::Xai,
        Self::Cerebras,
        Self::Groq,
        Self::DeepSeek,
        Self::Ollama,
        Self::Vllm,
        Self::LmStudio,
        Self::LlamaCpp,
        Self::Compatible,
    ];

    /// The name used in model routing strings and returned by [`Provider::name`].
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Xai => "xai",
            Self::Cerebras => "cerebras",
            Self::Groq => "groq",
            Self::DeepSeek => "deepseek",
            Self::Ollama => "ollama",
            Self::Vllm => "vllm",
            Self::LmStudio => "lmstudio",
            Self::LlamaCpp => "llamacpp",
            Self::Compatible => "openai-compatible",
        }
    }

    /// The preset called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The service's base URL (`None` for [`Preset::Compatible`], which needs one given).
    ///
    /// Sources: each service's OpenAI-compatibility docs (platform.openai.com, docs.x.ai,
    /// inference-docs.cerebras.ai, console.groq.com/docs/openai, api-docs.deepseek.com,
    /// docs.ollama.com/api/openai-compatibility,
    /// vLLM's `vllm serve` default port 8000, lmstudio.ai/docs/api/openai-api, llama.cpp
    /// `llama-server` default port 8080).
    pub fn default_base_url(self) -> Option<&'static str> {
        Some(match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Xai => "https://api.x.ai/v1",
            Self::Cerebras => "https://api.cerebras.ai/v1",
            Self::Groq => "https://api.groq.com/openai/v1",
            Self::DeepSeek => "https://api.deepseek.com",
            Self::Ollama => "http://localhost:11434/v1",
            Self::Vllm => "http://localhost:8000/v1",
            Self::LmStudio => "http://localhost:1234/v1",
            Self::LlamaCpp => "http://localhost:8080/v1",
            Self::Compatible => return None,
        })
    }

    /// The environment variable holding the key, if the service takes one.
    pub fn api_key_var(self) -> Option<&'static str> {
        match self {
            Self::OpenAi | Self::Compatible => Some("OPENAI_API_KEY"),
            Self::Xai => Some("XAI_API_KEY"),
            Self::Cerebras => Some("CEREBRAS_API_KEY"),
            Self::Groq => Some("GROQ_API_KEY"),
            Self::DeepSeek => Some("DEEPSEEK_API_KEY"),
            Self::Ollama | Self::Vllm | Self::LmStudio | Self::LlamaCpp => None,
        }
    }

    /// Whether a request without a key is certain to fail (hosted services).
    pub fn requires_key(self) -> bool {
        matches!(
            self,
            Self::OpenAi | Self::Xai | Self::Cerebras | Self::Groq | Self::DeepSeek
        )
    }

    /// The most function tools the service takes in one request, where its API reference
    /// gives a number: 128 for OpenAI and Groq ("A max of 128 functions are supported"), 200
    /// for xAI (its function calling guide). A request with more fails with
    /// [`Error::LimitExceeded`] before it is sent.
    pub fn max_tools(self) -> Option<usize> {
        match self {
            Self::OpenAi | Self::Groq => Some(128),
            Self::Xai => Some(200),
            _ => None,
        }
    }

    /// The request options this service needs.
    pub fn options(self) -> OpenAiOptions {
        let openai = self == Self::OpenAi;
        OpenAiOptions {
            name: self.name().to_owned(),
            preset: self,
            token_limit: if openai {
                TokenLimitField::ByModel
            } else {
                TokenLimitField::MaxTokens
            },
            system_role: if openai {
                SystemRole::ByModel
            } else {
                SystemRole::System
            },
            top_k: matches!(self, Self::Vllm | Self::LmStudio | Self::LlamaCpp),
            stream_usage: true,
            metadata: matches!(self, Self::OpenAi | Self::Compatible),
            web_search: openai,
            thinking_as_text: false,
            reasoning_content: self == Self::DeepSeek,
            sampling_by_model: openai,
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which field carries `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLimitField {
    /// `max_tokens`: what compatible servers read (deprecated by OpenAI, and refused by its
    /// reasoning models).
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI documents for every current model.
    MaxCompletionTokens,
    /// By OpenAI model family: `max_tokens` for the older chat models (gpt-3.5, gpt-4,
    /// gpt-4-turbo, gpt-4o), `max_completion_tokens` for the rest (o-series, gpt-4.1, gpt-5,
    /// and anything newer).
    ByModel,
}

impl TokenLimitField {
    /// The field name for `model`.
    pub fn key(self, model: &str) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
            Self::ByModel if is_legacy_chat_model(model) => "max_tokens",
            Self::ByModel => "max_completion_tokens",
        }
    }
}

/// Which role carries the system prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemRole {
    /// `system`.
    System,
    /// `developer`, which replaces `system` for OpenAI reasoning models.
    Developer,
    /// `developer` for OpenAI reasoning models (o-series, gpt-5 family), `system` otherwise.
    ByModel,
}

impl SystemRole {
    /// The role name for `model`.
    pub fn role(self, model: &str) -> &'static str {
        match self {
            Self::System => "system",
            Self::Developer => "developer",
            Self::ByModel if is_reasoning_model(model) => "developer",
            Self::ByModel => "system",
        }
    }
}

/// Whether `base_url` is DeepSeek's API (`https://api.deepseek.com`, with or without `/v1`).
fn is_deepseek(base_url: &str) -> bool {
    reqwest::Url::parse(base_url)
        .ok()
        .and_then(|url| {
            url.host_str()
                .map(|host| host.eq_ignore_ascii_case("api.deepseek.com"))
        })
        .unwrap_or(false)
}

fn is_legacy_chat_model(model: &str) -> bool {
    ["gpt-3.5", "gpt-4o", "chatgpt-4o", "gpt-4-"]
        .iter()
        .any(|prefix| model.starts_with(prefix))
        || model == "gpt-4"
}

/// Reasoning models that refuse `temperature` and `top_p` (only the default is accepted).
pub(crate) fn refuses_sampling(model: &str) -> bool {
    is_reasoning_model(model) && !model.starts_with("gpt-5-chat")
}

/// Reasoning models that refuse `stop` (400 "Unsupported parameter"): `o3` and `o4-mini` as
/// OpenAI's API reference says, the gpt-5 family but its chat model, and the first o1
/// previews. `o1` and `o3-mini` take it.
pub(crate) fn refuses_stop(model: &str) -> bool {
    let base = model.split_once('-').map_or(model, |(base, _)| base);
    (base == "o3" && !model.starts_with("o3-mini"))
        || base == "o4"
        || model.starts_with("o1-mini")
        || model.starts_with("o1-preview")
        || (refuses_sampling(model) && model.starts_with("gpt-5"))
}

fn is_reasoning_model(model: &str) -> bool {
    let bytes = model.as_bytes();
    (bytes.first() == Some(&b'o') && bytes.get(1).is_some_and(u8::is_ascii_digit))
        || model.starts_with("gpt-5")
}

/// Per-service request knobs; [`Preset::options`] gives each preset's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiOptions {
    /// What [`Provider::name`] returns (and errors name).
    pub name: String,
    /// The service, for quirks that depend on it (native tools).
    pub preset: Preset,
    /// Which field carries `max_tokens`.
    pub token_limit: TokenLimitField,
    /// Which role carries the system prompt.
    pub system_role: SystemRole,
    /// Send `top_k` (vLLM, LM Studio and llama.cpp read it; elsewhere it is left out with a
    /// warning).
    pub top_k: bool,
    /// Ask for usage at the end of streams (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Send `metadata`. OpenAI accepts it only with `"store": true`, which we never turn on
    /// for you: put it in `extensions` if you want stored completions.
    pub metadata: bool,
    /// Map web search native tools (`openai.web_search`, `web_search`) to
    /// `web_search_options` (OpenAI search models).
    pub web_search: bool,
    /// Send reasoning blocks of the history as `<thinking>` text instead of dropping them.
    pub thinking_as_text: bool,
    /// Send the reasoning of each assistant message back as `reasoning_content`, the field
    /// DeepSeek streams it in (`""` for a message without any). DeepSeek's thinking mode
    /// answers 400 without it on the assistant messages of a turn that called tools, and
    /// ignores it on the others. Takes precedence over `thinking_as_text` for the reasoning.
    pub reasoning_content: bool,
    /// Leave out `temperature` and `top_p` (with a warning) for OpenAI reasoning models
    /// (o-series, gpt-5 family except `gpt-5-chat`), which answer 400 "Unsupported parameter"
    /// to them; likewise `stop` for those of them that refuse it (`o3`, `o4-mini`, the gpt-5
    /// family). Set them in `extensions` to send them anyway.
    pub sampling_by_model: bool,
}

/// A Chat Completions provider: OpenAI or a compatible server.
#[derive(Debug, Clone)]
pub struct OpenAi {
    transport: Transport,
    options: OpenAiOptions,
}

impl OpenAi {
    /// OpenAI with an explicit configuration.
    pub fn new(config: HttpConfig) -> Result<Self> {
        Self::with_options(config, Preset::OpenAi.options())
    }

    /// Any service with explicit configuration and options.
    pub fn with_options(config: HttpConfig, options: OpenAiOptions) -> Result<Self> {
        let mut auth = Vec::new();
        if let Some(key) = &config.api_key {
            let value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    Error::config(format!(
                        "the {} API key contains characters that cannot be sent in a header",
                        options.name
                    ))
                })?;
            auth.push((AUTHORIZATION, value));
        }
        let transport = Transport::new(options.name.clone(), config, auth, map_error)?;
        Ok(Self { transport, options })
    }

    /// A preset with explicit configuration (nothing is read from the environment).
    /// [`Preset::Compatible`] pointed at DeepSeek's API sends reasoning back as the
    /// [`Preset::DeepSeek`] preset does, since DeepSeek refuses tool turns without it.
    pub fn from_preset(preset: Preset, config: HttpConfig) -> Result<Self> {
        let mut options = preset.options();
        if preset == Preset::Compatible && is_deepseek(&config.base_url) {
            options.reasoning_content = true;
        }
        Self::with_options(config, options)
    }

    /// OpenAI configured from `OPENAI_API_KEY` and, if set, `OPENAI_BASE_URL`. The key is
    /// required unless the base URL points elsewhere.
    pub fn from_env() -> Result<Self> {
        Self::preset("openai")
    }

    /// A preset by name (`openai`, `xai`, `cerebras`, `groq`, `deepseek`, `ollama`, `vllm`,
    /// `lmstudio`, `llamacpp`, `openai-compatible`), configured from its environment variables.
    /// `openai-compatible` takes its base URL from `OPENAI_BASE_URL`.
    pub fn preset(name: &str) -> Result<Self> {
        let config = preset_config(name, |var| std::env::var(var).ok())?;
        let preset = Preset::from_name(name).ok_or_else(|| unknown_preset(name))?;
        Self::from_preset(preset, config)
    }

    /// Any Chat Completions server at `base_url` (which includes the `/v1`-style prefix),
    /// named `openai-compatible`; `OPENAI_API_KEY` is sent if set.
    pub fn compatible(base_url: impl Into<String>) -> Result<Self> {
        let mut config = HttpConfig::new(base_url);
        config.api_key = ApiKey::from_env("OPENAI_API_KEY");
        Self::from_preset(Preset::Compatible, config)
    }

    /// The request options.
    pub fn options(&self) -> &OpenAiOptions {
        &self.options
    }

    /// The connection settings.
    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    /// The exact body this provider sends for `request`.
    pub fn request_body(&self, request: &Request, stream: bool) -> Result<Bytes> {
        request::build(
            request,
            &self.options,
            stream,
            self.transport.body_size(),
            self.transport.rendered_tools(),
        )
    }
}

fn unknown_preset(name: &str) -> Error {
    let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
    Error::config(format!(
        "unknown OpenAI-compatible preset `{name}`; known presets: {}",
        known.join(", ")
    ))
}

/// The configuration of preset `name` from the environment (`env` looks a variable up).
fn preset_config(name: &str, env: impl Fn(&str) -> Option<String>) -> Result<HttpConfig> {
    let preset = Preset::from_name(name).ok_or_else(|| unknown_preset(name))?;
    let env = |var: &str| env(var).filter(|v| !v.trim().is_empty());
    let base_override = match preset {
        Preset::OpenAi | Preset::Compatible => env("OPENAI_BASE_URL"),
        _ => None,
    };
    let base_url = match (base_override.as_deref(), preset.default_base_url()) {
        (Some(url), _) | (None, Some(url)) => url.to_owned(),
        (None, None) => {
            return Err(Error::config(
                "the openai-compatible preset needs a base URL: set OPENAI_BASE_URL or use OpenAi::compatible(url)",
            ));
        }
    };
    let mut config = HttpConfig::new(base_url);
    config.api_key = preset.api_key_var().and_then(&env).map(ApiKey::new);
    if config.api_key.is_none() && preset.requires_key() && base_override.is_none() {
        let var = preset.api_key_var().unwrap_or("the API key variable");
        return Err(Error::config(format!(
            "{var} is not set: the {preset} preset needs an API key (or configure one explicitly with HttpConfig)"
        )));
    }
    Ok(config)
}

/// OpenAI's error bodies fit the shared mapping; one case needs care: a 429 for an exhausted
/// quota (`insufficient_quota`) is not a rate limit and retrying cannot help.
fn map_error(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error {
    match http::map_error(provider, status, headers, body) {
        Error::RateLimited { message, .. } if status == 429 && is_quota_error(body) => Error::Api {
            provider: provider.to_owned(),
            status,
            error_type: Some("insufficient_quota".to_owned()),
            message,
        },
        other => other,
    }
}

fn is_quota_error(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            let is =
                |key: &str| error.get(key).and_then(|t| t.as_str()) == Some("insufficient_quota");
            Some(is("type") || is("code"))
        })
        .unwrap_or(false)
}

impl Provider for OpenAi {
    /// Structured outputs (`response_format`), strict where the schema allows.
    fn output_strategy(&self) -> crate::output::OutputStrategy {
        crate::output::OutputStrategy::Native
    }

    fn name(&self) -> &str {
        &self.options.name
    }

    fn stream(&self, request: &Request) -> EventStream {
        match self.request_body(request, true) {
            Ok(body) => self.transport.post_stream(PATH, body, HeaderMap::new(), {
                let name = self.options.name.clone();
                move || ChunkDecoder::new(name.clone())
            }),
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let body = self.request_body(request, false);
        let transport = self.transport.clone();
        let name = self.options.name.clone();
        Box::pin(async move {
            let bytes = transport.post_bytes(PATH, body?, HeaderMap::new()).await?;
            response::parse_completion_bytes(&bytes, &name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn hosted_presets_read_their_key_and_url() {
        for (name, var, url) in [
            ("openai", "OPENAI_API_KEY", "https://api.openai.com/v1"),
            ("xai", "XAI_API_KEY", "https://api.x.ai/v1"),
            ("cerebras", "CEREBRAS_API_KEY", "https://api.cerebras.ai/v1"),
            ("groq", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
            ("deepseek", "DEEPSEEK_API_KEY", "https://api.deepseek.com"),
        ] {
            let config = preset_config(name, env_of(&[(var, "sk-test")])).unwrap();
            assert_eq!(config.base_url, url);
            assert_eq!(config.api_key.as_ref().map(ApiKey::expose), Some("sk-test"));
            let missing = preset_config(name, env_of(&[])).unwrap_err().to_string();
            assert!(missing.contains(var), "{missing}");
        }
    }

    #[test]
    fn local_presets_need_no_key() {
        for (name, url) in [
            ("ollama", "http://localhost:11434/v1"),
            ("vllm", "http://localhost:8000/v1"),
            ("lmstudio", "http://localhost:1234/v1"),
            ("llamacpp", "http://localhost:8080/v1"),
        ] {
            let config = preset_config(name, env_of(&[("OPENAI_API_KEY", "sk-x")])).unwrap();
            assert_eq!(config.base_url, url);
            assert!(
                config.api_key.is_none(),
                "{name} must not borrow OpenAI's key"
            );
        }
    }

    #[test]
    fn openai_base_url_override_makes_the_key_optional() {
        let config = preset_config(
            "openai",
            env_of(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]),
        )
        .unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:9/v1");
        assert!(config.api_key.is_none());
    }

    #[test]
    fn compatible_preset_needs_a_base_url() {
        let err = preset_config("openai-compatible", env_of(&[])).unwrap_err();
        assert!(err.to_string().contains("OPENAI_BASE_URL"), "{err}");
        let config = preset_config(
            "openai-compatible",
            env_of(&[("OPENAI_BASE_URL", "http://h/v1"), ("OPENAI_API_KEY", "k")]),
        )
        .unwrap();
        assert_eq!(config.base_url, "http://h/v1");
        assert_eq!(config.api_key.as_ref().map(ApiKey::expose), Some("k"));
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let err = preset_config("mistral", env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`mistral`"), "{err}");
        for preset in Preset::ALL {
            assert!(err.contains(preset.name()), "{err}");
        }
    }

    #[test]
    fn model_families() {
        let by_model = TokenLimitField::ByModel;
        for model in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4",
            "gpt-4-turbo",
            "gpt-3.5-turbo",
            "chatgpt-4o-latest",
        ] {
            assert_eq!(by_model.key(model), "max_tokens", "{model}");
            assert_eq!(SystemRole::ByModel.role(model), "system", "{model}");
        }
        for model in ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"] {
            assert_eq!(by_model.key(model), "max_completion_tokens", "{model}");
            assert_eq!(SystemRole::ByModel.role(model), "developer", "{model}");
        }
        assert_eq!(by_model.key("gpt-4.1"), "max_completion_tokens");
        assert_eq!(SystemRole::ByModel.role("gpt-4.1"), "system");
        assert_eq!(SystemRole::ByModel.role("omni-moderation"), "system");
    }

    #[test]
    fn quota_errors_are_not_retried() {
        let body = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let error = map_error("openai", 429, &HeaderMap::new(), body);
        assert!(!error.is_retryable(), "{error:?}");
        assert!(matches!(error, Error::Api { status: 429, .. }));
        let limited = map_error(
            "openai",
            429,
            &HeaderMap::new(),
            br#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
        );
        assert!(matches!(limited, Error::RateLimited { .. }));
    }
}
