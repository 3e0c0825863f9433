//! Google Gemini (`models.generateContent` and `models.streamGenerateContent?alt=sse`), on
//! the Gemini API (Google AI Studio, an API key) or on Vertex AI (a bearer token and
//! project/location URLs).
//!
//! Wire shapes follow the Gemini API reference (ai.google.dev/api: "Generating content",
//! "Function calling", "Thinking", "Thought signatures", "Code execution", "Grounding with
//! Google Search") and Vertex AI's `publishers/google/models` endpoints. The request side is
//! in `request`, tools in [`tools`], the stream decoder in [`GeminiDecoder`].
//!
//! What needs care:
//! - **Thought signatures.** Gemini signs parts (a function call, the first answer text, an
//!   empty text part) and Gemini 3 answers 400 when a model turn's first function call comes
//!   back without its signature. A signature is kept as a reasoning block (tagged `gemini`)
//!   just before the part it signs, and put back on that part. A history from another
//!   provider has none: its first call per turn gets the documented stand-in
//!   [`SKIP_SIGNATURE`]. Reasoning from other providers is left out.
//! - **Call ids.** Gemini 3 sends `functionCall.id`; earlier models do not, and get stable
//!   synthesized ids ([`SYNTHETIC_ID_PREFIX`]) that are left out again on the way back.
//! - **Tool choice** is `toolConfig.functionCallingConfig` (`AUTO`, `ANY`, `NONE`, `ANY` with
//!   `allowedFunctionNames` for one tool). Gemini has no switch for parallel calls, so
//!   [`Request::parallel_tool_calls`] is not sent; nor are cache breakpoints (Gemini caches
//!   implicitly, or through `cachedContent`, an extension field).
//! - **Finish reasons**: `STOP` (tool use when the answer has calls), `MAX_TOKENS`, the safety
//!   family as a refusal, anything else (e.g. `MALFORMED_FUNCTION_CALL`) as
//!   [`StopReason::Other`](crate::StopReason::Other) in lower case with its `finishMessage`
//!   kept in a native block.
//! - **Usage**: thought tokens count as output and tool-use prompt tokens as input; the
//!   cached part of the prompt is `cache_read_tokens` (and, as with OpenAI, included in input).
//! - **Typed answers** ([`crate::output`]) are native (`responseJsonSchema`) on Gemini 3 and
//!   later, which take it beside function declarations; earlier models refuse that pair, so
//!   they answer by the final-answer tool ([`Provider::output_strategy_for`]).
//!
//! ```no_run
//! # fn main() -> agentloop::Result<()> {
//! use agentloop::provider::gemini::Gemini;
//! let gemini = Gemini::from_env()?; // GEMINI_API_KEY or GOOGLE_API_KEY
//! # Ok(()) }
//! ```

mod decode;
mod request;
pub mod tools;

use std::collections::VecDeque;

use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::message::{Request, Response};
use crate::output::OutputStrategy;
use crate::provider::http::{self, ApiKey, HttpConfig, Transport};
use crate::provider::{EventStream, Provider};
use crate::stream::Accumulator;

pub use decode::{GeminiDecoder, SYNTHETIC_ID_PREFIX};
pub use request::SKIP_SIGNATURE;

/// The provider name, used in errors and to tag reasoning and native blocks.
pub const PROVIDER_NAME: &str = "gemini";
/// The name of the Vertex AI flavour (same wire, other URLs and auth).
pub const VERTEX_PROVIDER_NAME: &str = "vertex";
/// Where the Gemini API lives unless configured otherwise.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
/// The API version path the Gemini API is called with.
pub const API_VERSION: &str = "v1beta";
/// The environment variables holding the key, in the order they are read.
pub const API_KEY_ENVS: [&str; 2] = ["GEMINI_API_KEY", "GOOGLE_API_KEY"];
/// The environment variable that overrides the Gemini API base URL.
pub const BASE_URL_ENV: &str = "GEMINI_BASE_URL";
/// The environment variables holding a Vertex AI access token (e.g. from
/// `gcloud auth print-access-token`), in the order they are read.
pub const VERTEX_TOKEN_ENVS: [&str; 2] = ["VERTEX_ACCESS_TOKEN", "GOOGLE_ACCESS_TOKEN"];
/// The environment variable holding the Google Cloud project for Vertex AI.
pub const VERTEX_PROJECT_ENV: &str = "GOOGLE_CLOUD_PROJECT";
/// The environment variable holding the Vertex AI location (default `global`).
pub const VERTEX_LOCATION_ENV: &str = "GOOGLE_CLOUD_LOCATION";

/// Thinking settings (`generationConfig.thinkingConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThinkingConfig {
    /// Stream thought summaries as reasoning (`includeThoughts`).
    pub include_thoughts: bool,
    /// Token budget (`thinkingBudget`; Gemini 2.5: 0 turns thinking off, -1 is dynamic).
    pub budget: Option<i32>,
    /// Effort level (`thinkingLevel`, Gemini 3: `minimal`, `low`, `medium`, `high`).
    pub level: Option<String>,
}

/// Gemini-specific settings (the connection settings are in [`HttpConfig`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GeminiOptions {
    /// Thinking settings; `None` leaves the model's default.
    pub thinking: Option<ThinkingConfig>,
}

/// Where a Vertex AI model lives. The token is the [`HttpConfig::api_key`] (sent as a bearer
/// token), so `Debug` never shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexLocation {
    /// The Google Cloud project id.
    pub project: String,
    /// The region (`us-central1`, ...) or `global`.
    pub location: String,
}

impl VertexLocation {
    /// The regional endpoint for this location (`https://aiplatform.googleapis.com` for
    /// `global`).
    pub fn base_url(&self) -> String {
        if self.location == "global" {
            "https://aiplatform.googleapis.com".to_owned()
        } else {
            format!("https://{}-aiplatform.googleapis.com", self.location)
        }
    }
}

#[derive(Debug, Clone)]
enum Flavour {
    /// The Gemini API: `/<version>/models/<model>:<method>`; the version is left out when the
    /// base URL already ends with one.
    Api { version: Option<&'static str> },
    /// Vertex AI: `/v1/projects/<p>/locations/<l>/publishers/google/models/<model>:<method>`.
    Vertex(VertexLocation),
}

/// The Gemini provider (Gemini API or Vertex AI).
#[derive(Debug, Clone)]
pub struct Gemini {
    transport: Transport,
    options: GeminiOptions,
    flavour: Flavour,
}

impl Gemini {
    /// A Gemini API provider for `config` (base URL `https://generativelanguage.googleapis.com`
    /// or one ending in `/v1beta`; the key is sent as `x-goog-api-key`).
    pub fn new(config: HttpConfig) -> Result<Self> {
        Self::with_options(config, GeminiOptions::default())
    }

    /// A Gemini API provider for `config` with `options`.
    pub fn with_options(config: HttpConfig, options: GeminiOptions) -> Result<Self> {
        let auth = match &config.api_key {
            Some(key) => vec![(
                HeaderName::from_static("x-goog-api-key"),
                header_value(key, "GEMINI_API_KEY")?,
            )],
            None => Vec::new(),
        };
        let base = config.base_url.trim_end_matches('/');
        let version = if base.ends_with("/v1beta") || base.ends_with("/v1") {
            None
        } else {
            Some(API_VERSION)
        };
        let transport = Transport::new(PROVIDER_NAME, config, auth, map_error)?;
        Ok(Self {
            transport,
            options,
            flavour: Flavour::Api { version },
        })
    }

    /// A Vertex AI provider: `config.api_key` is the OAuth access token (sent as
    /// `Authorization: Bearer`), `config.base_url` the endpoint (see
    /// [`VertexLocation::base_url`]; a loopback test server works too).
    pub fn vertex(
        config: HttpConfig,
        location: VertexLocation,
        options: GeminiOptions,
    ) -> Result<Self> {
        if location.project.trim().is_empty() || location.location.trim().is_empty() {
            return Err(Error::config(format!(
                "Vertex AI needs a project and a location: set {VERTEX_PROJECT_ENV} (and {VERTEX_LOCATION_ENV}, default global)"
            )));
        }
        let auth = match &config.api_key {
            Some(token) => {
                let value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| {
                        Error::config(
                            "the Vertex AI access token contains characters not allowed in an HTTP header; check VERTEX_ACCESS_TOKEN",
                        )
                    })?;
                vec![(reqwest::header::AUTHORIZATION, value)]
            }
            None => Vec::new(),
        };
        let transport = Transport::new(VERTEX_PROVIDER_NAME, config, auth, map_error)?;
        Ok(Self {
            transport,
            options,
            flavour: Flavour::Vertex(location),
        })
    }

    /// A Gemini API provider from the environment: the key from `GEMINI_API_KEY` (or
    /// `GOOGLE_API_KEY`), the base URL from `GEMINI_BASE_URL` (default the public API).
    pub fn from_env() -> Result<Self> {
        let key = API_KEY_ENVS
            .iter()
            .find_map(|var| ApiKey::from_env(var))
            .ok_or_else(|| {
                Error::config(
                    "GEMINI_API_KEY (or GOOGLE_API_KEY) is not set; export your Gemini API key or build the provider with Gemini::new(HttpConfig)",
                )
            })?;
        let mut config =
            HttpConfig::new(env(BASE_URL_ENV).unwrap_or_else(|| DEFAULT_BASE_URL.into()));
        config.api_key = Some(key);
        Self::new(config)
    }

    /// The Gemini-specific options.
    pub fn options(&self) -> &GeminiOptions {
        &self.options
    }

    /// The connection settings.
    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    /// The request body as it would be sent (the same for streamed and whole answers: Gemini
    /// picks by the method in the URL).
    pub fn prepare(&self, request: &Request) -> Result<bytes::Bytes> {
        request::build(request, &self.options, self.transport.body_size())
    }

    /// The body as JSON, for inspection and golden tests.
    pub fn body(&self, request: &Request) -> Result<Value> {
        request::body(request, &self.options)
    }

    /// The path (and query) of `method` for `model`.
    pub fn path(&self, model: &str, stream: bool) -> String {
        let method = if stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        // A model given as `models/<name>` (as the API lists them) works as well.
        let model = model.strip_prefix("models/").unwrap_or(model);
        match &self.flavour {
            Flavour::Api { version: Some(v) } => format!("/{v}/models/{model}:{method}"),
            Flavour::Api { version: None } => format!("/models/{model}:{method}"),
            Flavour::Vertex(VertexLocation { project, location }) => format!(
                "/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}"
            ),
        }
    }
}

fn header_value(key: &ApiKey, var: &str) -> Result<HeaderValue> {
    HeaderValue::from_str(key.expose()).map_err(|_| {
        Error::config(format!(
            "the Gemini API key contains characters not allowed in an HTTP header; check {var}"
        ))
    })
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

impl Provider for Gemini {
    fn name(&self) -> &str {
        match self.flavour {
            Flavour::Api { .. } => PROVIDER_NAME,
            Flavour::Vertex(_) => VERTEX_PROVIDER_NAME,
        }
    }

    /// Native (`responseJsonSchema`) on Gemini 3 and later, which combine structured output
    /// with function calling ("Structured outputs with tools" in the structured-output guide);
    /// the final-answer tool on earlier models, which refuse a JSON response type beside
    /// function declarations, and on model names without a version (`gemini-flash-latest`).
    fn output_strategy_for(&self, request: &Request) -> OutputStrategy {
        if major_version(&request.model).is_some_and(|major| major >= 3) {
            OutputStrategy::Native
        } else {
            OutputStrategy::Tool
        }
    }

    fn stream(&self, request: &Request) -> EventStream {
        match self.prepare(request) {
            Ok(body) => self.transport.post_stream(
                &self.path(&request.model, true),
                body,
                HeaderMap::new(),
                GeminiDecoder::new,
            ),
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let prepared = self.prepare(request);
        let transport = self.transport.clone();
        let path = self.path(&request.model, false);
        Box::pin(async move {
            let body = prepared?;
            let value = transport.post_json(&path, body, HeaderMap::new()).await?;
            parse(&value)
        })
    }
}

/// A whole `GenerateContentResponse` → [`Response`], through the stream decoder (one chunk).
fn parse(value: &Value) -> Result<Response> {
    let mut decoder = GeminiDecoder::new();
    let mut events = VecDeque::new();
    decoder.chunk(value, &mut events)?;
    crate::provider::http::SseDecoder::end(&mut decoder, &mut events)?;
    let mut acc = Accumulator::new();
    for event in &events {
        acc.push(event);
    }
    acc.set_provider(PROVIDER_NAME);
    Ok(acc.finish())
}

/// Errors come as `{"error": {"code", "message", "status"}}` (Google's `google.rpc.Status`);
/// `status` (`NOT_FOUND`, `RESOURCE_EXHAUSTED`, ...) is the error type. The body is read as
/// JSON whatever the content type says: a 404 on the streaming method is labelled
/// `text/event-stream` yet holds plain JSON.
pub(crate) fn map_error(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    // The streaming method may wrap it in an array or an SSE `data:` line.
    let parsed = parsed.or_else(|| {
        let text = std::str::from_utf8(body).ok()?;
        let data = text.trim().strip_prefix("data:")?;
        serde_json::from_str(data.trim()).ok()
    });
    let error = parsed.as_ref().and_then(|v| match v {
        Value::Array(items) => items.first().and_then(|i| i.get("error")),
        other => other.get("error"),
    });
    let Some(error) = error else {
        return http::map_error(provider, status, headers, body);
    };
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| http::excerpt(body), str::to_owned);
    let error_type = error
        .get("status")
        .and_then(Value::as_str)
        .map(str::to_owned);
    http::error_for_status(
        http::ErrorParts {
            provider,
            status,
            error_type,
            message,
            retry_after: http::retry_after(headers).or_else(|| retry_delay(error)),
        },
        false,
    )
}

/// The wait a `google.rpc.RetryInfo` detail asks for (`"retryDelay": "7s"`, a protobuf
/// Duration in seconds), which Gemini sends with `RESOURCE_EXHAUSTED` instead of a header.
fn retry_delay(error: &Value) -> Option<std::time::Duration> {
    error
        .get("details")?
        .as_array()?
        .iter()
        .find(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
        })?
        .get("retryDelay")?
        .as_str()?
        .strip_suffix('s')?
        .parse::<f64>()
        .ok()
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
}

/// The major version in a Gemini model name (`gemini-3.1-pro-preview`, `models/gemini-3-flash`
/// → 3); `None` for names without one (`gemini-flash-latest`) or other models.
fn major_version(model: &str) -> Option<u32> {
    let name = model.rsplit('/').next().unwrap_or(model);
    let rest = name.strip_prefix("gemini-")?;
    let digits = rest.split(['.', '-']).next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_404_labelled_event_stream_with_a_json_body_is_an_invalid_request() {
        // Recording error-404-plain-json-body-on-event-stream.sse (rig cassette).
        let body = br#"{"error":{"code":404,"message":"models/nope is not found for API version v1beta","status":"NOT_FOUND"}}"#;
        let error = map_error(PROVIDER_NAME, 404, &HeaderMap::new(), body);
        assert!(matches!(
            &error,
            Error::InvalidRequest { status: 404, error_type: Some(t), message, .. }
                if t == "NOT_FOUND" && message.starts_with("models/nope")
        ));
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_429_without_retry_after_takes_the_wait_from_retry_info() {
        // google.rpc.RetryInfo in the error details, as Gemini sends with RESOURCE_EXHAUSTED.
        let body = br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7.5s"}]}}"#;
        let error = map_error(PROVIDER_NAME, 429, &HeaderMap::new(), body);
        assert!(
            matches!(error, Error::RateLimited { retry_after: Some(d), .. } if d == std::time::Duration::from_millis(7500)),
            "{error:?}"
        );
    }

    #[test]
    fn rate_limits_and_overload_are_retryable() {
        let body = br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#;
        assert!(map_error(PROVIDER_NAME, 429, &HeaderMap::new(), body).is_retryable());
        let body = br#"[{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}]"#;
        let error = map_error(PROVIDER_NAME, 503, &HeaderMap::new(), body);
        assert!(matches!(error, Error::Overloaded { ref message, .. } if message == "busy"));
    }

    #[test]
    fn paths_for_the_api_and_vertex() {
        let api = Gemini::new(HttpConfig::new("http://127.0.0.1:9")).unwrap();
        assert_eq!(
            api.path("gemini-2.5-flash", true),
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        let versioned = Gemini::new(HttpConfig::new("http://127.0.0.1:9/v1beta/")).unwrap();
        assert_eq!(
            versioned.path("models/gemini-2.5-flash", false),
            "/models/gemini-2.5-flash:generateContent"
        );
        let vertex = Gemini::vertex(
            HttpConfig::new("http://127.0.0.1:9"),
            VertexLocation {
                project: "p1".into(),
                location: "us-central1".into(),
            },
            GeminiOptions::default(),
        )
        .unwrap();
        assert_eq!(
            vertex.path("gemini-3-pro-preview", false),
            "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-3-pro-preview:generateContent"
        );
        assert_eq!(vertex.name(), "vertex");
    }
}
