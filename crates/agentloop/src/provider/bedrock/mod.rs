//! AWS Bedrock through the Converse API: `ConverseStream` (`POST
//! /model/{modelId}/converse-stream`, an AWS event-stream body) and `Converse` (`POST
//! /model/{modelId}/converse`, one JSON answer). Behind the `bedrock` feature (default on).
//!
//! Wire shapes follow the Bedrock API reference ("Converse", "ConverseStream",
//! "ConverseStreamOutput", "ContentBlockDelta", "ReasoningContentBlockDelta",
//! "MessageStopEvent", "TokenUsage"). The request side is in `request`, the event-stream
//! framing in [`eventstream`], the stream decoder in [`BedrockDecoder`].
//!
//! - **Auth**: SigV4 (service `bedrock`, through `aws-sigv4`) with keys from
//!   `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` or the shared
//!   credentials file (`~/.aws/credentials`, profile `AWS_PROFILE` or `default`); or a Bedrock
//!   API key (`AWS_BEARER_TOKEN_BEDROCK`), sent as a bearer token without signing. Secrets
//!   never show in `Debug`.
//! - **Region** from `AWS_REGION` / `AWS_DEFAULT_REGION` or [`Bedrock::new`]'s argument; the
//!   endpoint is `https://bedrock-runtime.<region>.amazonaws.com` unless the
//!   [`HttpConfig`] names another.
//! - **Reasoning** (`reasoningContent`: text with its signature, or redacted bytes) is kept as
//!   a reasoning block tagged `bedrock` and sent back as it came; reasoning from other
//!   providers is left out. Claude's extended thinking is turned on with
//!   [`BedrockOptions::thinking_budget`].
//! - **Tool choice** is `toolConfig.toolChoice` (`auto`, `any`, `tool`); Converse has no
//!   "none", so [`ToolChoice::None`](crate::ToolChoice::None) leaves the tools out unless the
//!   history already uses them (Bedrock then requires them).
//! - **Stop reasons**: `end_turn`, `tool_use`, `max_tokens`, `stop_sequence` map to ours;
//!   `guardrail_intervened` and `content_filtered` are refusals, with the raw reason kept in
//!   a native block, as is any reason this version does not know.
//! - **Usage**: `inputTokens` excludes the cache, which is `cacheReadInputTokens` and
//!   `cacheWriteInputTokens` (as with Anthropic).
//! - **Errors**: HTTP errors by status and `x-amzn-ErrorType`; exceptions sent as frames
//!   mid-stream (`throttlingException`, `serviceUnavailableException`,
//!   `modelStreamErrorException`, ...) typed the same way, so rate limits and overload are
//!   retryable like every provider's; `modelStreamErrorException` ("Retry your request") is
//!   a retryable 424, and any of them before content sends the call again (see
//!   [`crate::provider::http::Transport::post_stream`]).
//!
//! ```no_run
//! # fn main() -> agentloop::Result<()> {
//! use agentloop::provider::bedrock::Bedrock;
//! let bedrock = Bedrock::from_env()?; // AWS_REGION and AWS keys, or AWS_BEARER_TOKEN_BEDROCK
//! # Ok(()) }
//! ```

mod decode;
pub mod eventstream;
mod request;

use std::collections::VecDeque;
use std::time::SystemTime;

use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::message::{Request, Response};
use crate::provider::http::{self, ApiKey, HttpConfig, Transport};
use crate::provider::{EventStream, Provider};
use crate::stream::Accumulator;

pub use decode::BedrockDecoder;

/// The provider name, used in errors and to tag reasoning and native blocks.
pub const PROVIDER_NAME: &str = "bedrock";
/// The SigV4 service name of the Bedrock runtime.
pub const SIGNING_SERVICE: &str = "bedrock";
/// The environment variables holding the region, in the order they are read.
pub const REGION_ENVS: [&str; 2] = ["AWS_REGION", "AWS_DEFAULT_REGION"];
/// The environment variable holding a Bedrock API key (a bearer token; no SigV4 then).
pub const BEARER_TOKEN_ENV: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// The environment variable that overrides the endpoint.
pub const BASE_URL_ENV: &str = "BEDROCK_BASE_URL";

/// The Bedrock runtime endpoint of `region`.
pub fn endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// AWS access keys for SigV4. `Debug` shows the key id only.
#[derive(Clone)]
pub struct AwsCredentials {
    /// The access key id (`AKIA...` or `ASIA...`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: ApiKey,
    /// The session token of temporary credentials.
    pub session_token: Option<ApiKey>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl AwsCredentials {
    /// Keys from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`.
    pub fn from_env() -> Option<Self> {
        let id = env("AWS_ACCESS_KEY_ID")?;
        let secret = ApiKey::from_env("AWS_SECRET_ACCESS_KEY")?;
        Some(Self {
            access_key_id: id,
            secret_access_key: secret,
            session_token: ApiKey::from_env("AWS_SESSION_TOKEN"),
        })
    }

    /// Keys of `profile` in the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
    /// `~/.aws/credentials`).
    pub fn from_profile(profile: &str) -> Option<Self> {
        let path = env("AWS_SHARED_CREDENTIALS_FILE")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|home| std::path::Path::new(&home).join(".aws/credentials"))
            })?;
        let text = std::fs::read_to_string(path).ok()?;
        Self::from_ini(&text, profile)
    }

    /// Keys of `profile` in the text of a credentials file (INI: `[profile]`, then
    /// `aws_access_key_id = ...` lines).
    pub fn from_ini(text: &str, profile: &str) -> Option<Self> {
        let mut in_profile = false;
        let (mut id, mut secret, mut token) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                in_profile = name.trim() == profile;
                continue;
            }
            if !in_profile {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().to_owned();
            match key.trim() {
                "aws_access_key_id" => id = Some(value),
                "aws_secret_access_key" => secret = Some(value),
                "aws_session_token" => token = Some(value),
                _ => {}
            }
        }
        Some(Self {
            access_key_id: id.filter(|v| !v.is_empty())?,
            secret_access_key: ApiKey::new(secret.filter(|v| !v.is_empty())?),
            session_token: token.filter(|v| !v.is_empty()).map(ApiKey::new),
        })
    }

    /// Keys from the environment, else from the shared credentials file's profile
    /// (`AWS_PROFILE`, else `default`).
    pub fn load() -> Option<Self> {
        Self::from_env().or_else(|| {
            Self::from_profile(&env("AWS_PROFILE").unwrap_or_else(|| "default".to_owned()))
        })
    }
}

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum BedrockAuth {
    /// SigV4 with AWS keys.
    SigV4(AwsCredentials),
    /// A Bedrock API key, sent as `Authorization: Bearer` (no signing).
    Bearer(ApiKey),
    /// Nothing (a proxy that signs, or a test server).
    None,
}

impl BedrockAuth {
    /// A Bedrock API key from `AWS_BEARER_TOKEN_BEDROCK`, else AWS keys from the environment
    /// or the shared credentials file.
    pub fn from_env() -> Option<Self> {
        ApiKey::from_env(BEARER_TOKEN_ENV)
            .map(Self::Bearer)
            .or_else(|| AwsCredentials::load().map(Self::SigV4))
    }
}

/// Bedrock-specific settings (the connection settings are in [`HttpConfig`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BedrockOptions {
    /// Claude's extended thinking with this token budget
    /// (`additionalModelRequestFields.thinking`); `None` leaves the model's default.
    pub thinking_budget: Option<u32>,
}

/// The Bedrock provider (Converse API).
#[derive(Debug, Clone)]
pub struct Bedrock {
    transport: Transport,
    options: BedrockOptions,
    region: String,
    credentials: Option<AwsCredentials>,
    /// The `host` header the signature covers (with the port when the URL has one).
    host: String,
}

impl Bedrock {
    /// A provider for `region` at `config.base_url` (see [`endpoint`]), authenticated by
    /// `auth` (`config.api_key` is not used: the auth says what is sent).
    pub fn new(config: HttpConfig, region: impl Into<String>, auth: BedrockAuth) -> Result<Self> {
        Self::with_options(config, region, auth, BedrockOptions::default())
    }

    /// [`Self::new`] with `options`.
    pub fn with_options(
        mut config: HttpConfig,
        region: impl Into<String>,
        auth: BedrockAuth,
        options: BedrockOptions,
    ) -> Result<Self> {
        let region = region.into();
        if region.trim().is_empty() {
            return Err(Error::config(
                "Bedrock needs a region: set AWS_REGION (or AWS_DEFAULT_REGION) or pass one",
            ));
        }
        let url = reqwest::Url::parse(&config.base_url).map_err(|e| {
            Error::config(format!(
                "the Bedrock base URL `{}` does not parse: {e}",
                config.base_url
            ))
        })?;
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => {
                return Err(Error::config(format!(
                    "the Bedrock base URL `{}` has no host",
                    config.base_url
                )));
            }
        };
        let (credentials, auth_headers) = match auth {
            BedrockAuth::SigV4(credentials) => (Some(credentials), Vec::new()),
            BedrockAuth::Bearer(token) => {
                let value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| {
                        Error::config(format!(
                            "the Bedrock API key contains characters not allowed in an HTTP header; check {BEARER_TOKEN_ENV}"
                        ))
                    })?;
                config.api_key = Some(token);
                (None, vec![(reqwest::header::AUTHORIZATION, value)])
            }
            BedrockAuth::None => (None, Vec::new()),
        };
        let transport = Transport::new(PROVIDER_NAME, config, auth_headers, map_error)?;
        Ok(Self {
            transport,
            options,
            region,
            credentials,
            host,
        })
    }

    /// A provider from the environment: the region from `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`), the auth from [`BedrockAuth::from_env`], the endpoint from
    /// `BEDROCK_BASE_URL` (default the region's).
    pub fn from_env() -> Result<Self> {
        let region = region_from_env().ok_or_else(|| {
            Error::config(
                "AWS_REGION (or AWS_DEFAULT_REGION) is not set; export the region your Bedrock models are in",
            )
        })?;
        let auth = BedrockAuth::from_env().ok_or_else(|| {
            Error::config(format!(
                "no AWS credentials: set {BEARER_TOKEN_ENV} (a Bedrock API key), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
            ))
        })?;
        let base = env(BASE_URL_ENV).unwrap_or_else(|| endpoint(&region));
        Self::new(HttpConfig::new(base), region, auth)
    }

    /// The Bedrock-specific options.
    pub fn options(&self) -> &BedrockOptions {
        &self.options
    }

    /// The connection settings.
    pub fn config(&self) -> &HttpConfig {
        self.transport.config()
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The request body as it would be sent (the same for `Converse` and `ConverseStream`).
    pub fn prepare(&self, request: &Request) -> Result<bytes::Bytes> {
        request::build(request, &self.options, self.transport.body_size())
    }

    /// The body as JSON, for inspection and golden tests.
    pub fn body(&self, request: &Request) -> Result<Value> {
        request::body(request, &self.options)
    }

    /// The path of `Converse` (or `ConverseStream` when `stream`) for `model`, whose id is
    /// percent-encoded (ids and ARNs hold `:` and `/`).
    pub fn path(&self, model: &str, stream: bool) -> String {
        let method = if stream {
            "converse-stream"
        } else {
            "converse"
        };
        format!("/model/{}/{method}", encode_path_segment(model))
    }

    /// The SigV4 headers (`authorization`, `x-amz-date`, `x-amz-security-token`) for a POST
    /// of `body` to `path` at `time`; none without AWS keys.
    pub fn sign(&self, path: &str, body: &[u8], time: SystemTime) -> Result<HeaderMap> {
        let Some(credentials) = &self.credentials else {
            return Ok(HeaderMap::new());
        };
        let url = format!(
            "{}{}",
            self.transport.config().base_url.trim_end_matches('/'),
            path
        );
        sign_request(
            credentials,
            &self.region,
            SIGNING_SERVICE,
            &url,
            &self.host,
            body,
            time,
        )
    }

    fn prepared(
        &self,
        request: &Request,
        stream: bool,
    ) -> Result<(String, bytes::Bytes, HeaderMap)> {
        let body = self.prepare(request)?;
        let path = self.path(&request.model, stream);
        let mut headers = self.sign(&path, &body, SystemTime::now())?;
        if stream {
            headers.insert(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/vnd.amazon.eventstream"),
            );
        }
        Ok((path, body, headers))
    }
}

/// SigV4 headers for a POST of `body` to `url` (already percent-encoded) with `host`.
pub fn sign_request(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    url: &str,
    host: &str,
    body: &[u8],
    time: SystemTime,
) -> Result<HeaderMap> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity = aws_credential_types::Credentials::new(
        credentials.access_key_id.clone(),
        credentials.secret_access_key.expose().to_owned(),
        credentials
            .session_token
            .as_ref()
            .map(|t| t.expose().to_owned()),
        None,
        "agentloop",
    )
    .into();
    let signing_error = |e: &dyn std::fmt::Display| {
        Error::config(format!("could not sign the Bedrock request: {e}"))
    };
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let signable = SignableRequest::new(
        "POST",
        url,
        [("host", host)].into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| signing_error(&e))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| signing_error(&e))?
        .into_parts();
    let mut headers = HeaderMap::new();
    for (name, value) in instructions.headers() {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| signing_error(&e))?;
        let mut value = HeaderValue::from_str(value).map_err(|e| signing_error(&e))?;
        if name == reqwest::header::AUTHORIZATION || name.as_str() == "x-amz-security-token" {
            value.set_sensitive(true);
        }
        headers.insert(name, value);
    }
    Ok(headers)
}

/// RFC 3986 percent-encoding of everything but unreserved characters.
fn encode_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The region from `AWS_REGION` or `AWS_DEFAULT_REGION`.
pub fn region_from_env() -> Option<String> {
    REGION_ENVS.iter().find_map(|var| env(var))
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

impl Provider for Bedrock {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    /// `outputConfig.textFormat` for the Claudes that take it (4.5 and later, by the model
    /// id), the final-answer tool for every other model: Converse's structured output is for
    /// some models only.
    fn output_strategy_for(&self, request: &Request) -> crate::output::OutputStrategy {
        if crate::provider::anthropic::models::takes_structured_output(&request.model) {
            crate::output::OutputStrategy::Native
        } else {
            self.output_strategy()
        }
    }

    fn stream(&self, request: &Request) -> EventStream {
        match self.prepared(request, true) {
            Ok((path, body, headers)) => {
                self.transport
                    .post_body_stream(&path, body, headers, BedrockDecoder::new)
            }
            Err(error) => futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let prepared = self.prepared(request, false);
        let transport = self.transport.clone();
        Box::pin(async move {
            let (path, body, headers) = prepared?;
            let value = transport.post_json(&path, body, headers).await?;
            parse(&value)
        })
    }
}

/// A whole `Converse` answer → [`Response`], through the stream decoder: each content block
/// is replayed as the start, delta and stop events `ConverseStream` would have sent.
pub fn parse(value: &Value) -> Result<Response> {
    let mut decoder = BedrockDecoder::new();
    let mut events = VecDeque::new();
    let mut feed = |kind: &str, payload: Value, events: &mut VecDeque<_>| {
        decoder.event(kind, payload.to_string().as_bytes(), events)
    };
    feed("messageStart", json!({"role": "assistant"}), &mut events)?;
    let blocks = value
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        if let Some(text) = block.get("text") {
            feed(
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"text": text}}),
                &mut events,
            )?;
        } else if let Some(reasoning) = block.get("reasoningContent") {
            let delta = match (
                reasoning.get("reasoningText"),
                reasoning.get("redactedContent"),
            ) {
                (Some(text), _) => json!({
                    "text": text.get("text").cloned().unwrap_or_default(),
                    "signature": text.get("signature"),
                }),
                (None, Some(data)) => json!({"redactedContent": data}),
                (None, None) => continue,
            };
            feed(
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"reasoningContent": delta}}),
                &mut events,
            )?;
        } else if let Some(tool) = block.get("toolUse").and_then(Value::as_object) {
            let mut start = tool.clone();
            let input = start.remove("input").unwrap_or_else(|| json!({}));
            feed(
                "contentBlockStart",
                json!({"contentBlockIndex": index, "start": {"toolUse": start}}),
                &mut events,
            )?;
            feed(
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": input.to_string()}}}),
                &mut events,
            )?;
        } else if let Some(result) = block.get("toolResult").and_then(Value::as_object) {
            let mut start = result.clone();
            let content = start.remove("content").unwrap_or_else(|| json!([]));
            feed(
                "contentBlockStart",
                json!({"contentBlockIndex": index, "start": {"toolResult": start}}),
                &mut events,
            )?;
            feed(
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"toolResult": content}}),
                &mut events,
            )?;
        } else {
            // A block kind without a streamed form here (citations, ...) is kept whole.
            events.push_back(crate::stream::StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: block.clone(),
            });
            continue;
        }
        feed(
            "contentBlockStop",
            json!({"contentBlockIndex": index}),
            &mut events,
        )?;
    }
    let mut stop = json!({"stopReason": value.get("stopReason").cloned().unwrap_or_else(|| "end_turn".into())});
    if let Some(fields) = value.get("additionalModelResponseFields") {
        stop["additionalModelResponseFields"] = fields.clone();
    }
    feed("messageStop", stop, &mut events)?;
    feed(
        "metadata",
        json!({"usage": value.get("usage").cloned().unwrap_or_else(|| json!({}))}),
        &mut events,
    )?;
    decoder.end(&mut events)?;
    let mut acc = Accumulator::new();
    for event in &events {
        acc.push(event);
    }
    acc.set_provider(PROVIDER_NAME);
    Ok(acc.finish())
}

/// Errors come as `{"message": "..."}` with the error's name in the `x-amzn-ErrorType` header
/// (`ThrottlingException:http://...`), or in the body's `__type`. The status decides the
/// kind: 429 throttling is a rate limit, 503 overload, 400/404 invalid requests, 403 auth.
pub(crate) fn map_error(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("message").or_else(|| v.get("Message")))
        .and_then(Value::as_str)
        .map_or_else(|| http::excerpt(body), str::to_owned);
    let error_type = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|t| t.split(':').next().unwrap_or(t).to_owned())
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|v| v.get("__type"))
                .and_then(Value::as_str)
                .map(|t| t.rsplit('#').next().unwrap_or(t).to_owned())
        });
    let overloaded = error_type.as_deref() == Some("ServiceUnavailableException");
    http::error_for_status(
        http::ErrorParts {
            provider,
            status,
            error_type,
            message,
            retry_after: http::retry_after(headers),
        },
        overloaded,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_and_unavailable_are_retryable_and_validation_is_not() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amzn-errortype",
            HeaderValue::from_static(
                "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            ),
        );
        let error = map_error(
            PROVIDER_NAME,
            429,
            &headers,
            br#"{"message":"Too many requests, please wait before trying again."}"#,
        );
        assert!(
            matches!(&error, Error::RateLimited { message, .. } if message.starts_with("Too many requests")),
            "{error:?}"
        );
        assert!(error.is_retryable());
        let error = map_error(
            PROVIDER_NAME,
            503,
            &HeaderMap::new(),
            br#"{"message":"busy"}"#,
        );
        assert!(matches!(error, Error::Overloaded { .. }));
        let error = map_error(
            PROVIDER_NAME,
            400,
            &HeaderMap::new(),
            br#"{"__type":"com.amazon.coral.validate#ValidationException","message":"bad"}"#,
        );
        assert!(
            matches!(&error, Error::InvalidRequest { error_type: Some(t), .. } if t == "ValidationException"),
            "{error:?}"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn paths_encode_the_model_id() {
        let bedrock = Bedrock::new(
            HttpConfig::new("http://127.0.0.1:9"),
            "us-east-1",
            BedrockAuth::None,
        )
        .unwrap();
        assert_eq!(
            bedrock.path("us.anthropic.claude-sonnet-4-20250514-v1:0", true),
            "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream"
        );
        assert_eq!(
            bedrock.path("arn:aws:bedrock:us-east-1:123:inference-profile/x", false),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fx/converse"
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let credentials = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: ApiKey::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: Some(ApiKey::new("session-secret")),
        };
        let bedrock = Bedrock::new(
            HttpConfig::new("http://127.0.0.1:9"),
            "us-east-1",
            BedrockAuth::SigV4(credentials.clone()),
        )
        .unwrap();
        let text = format!("{bedrock:?} {:?}", BedrockAuth::SigV4(credentials));
        assert!(
            !text.contains("EXAMPLEKEY") && !text.contains("session-secret"),
            "{text}"
        );
        let bearer = Bedrock::new(
            HttpConfig::new("http://127.0.0.1:9"),
            "us-east-1",
            BedrockAuth::Bearer(ApiKey::new("bedrock-api-key-secret")),
        )
        .unwrap();
        assert!(!format!("{bearer:?}").contains("bedrock-api-key-secret"));
    }

    #[test]
    fn a_profile_is_read_from_a_credentials_file() {
        let text = "[default]\naws_access_key_id = AKIA1\naws_secret_access_key = s1\n\n[work]\n# comment\naws_access_key_id=AKIA2\naws_secret_access_key=s2\naws_session_token = t2\n";
        let work = AwsCredentials::from_ini(text, "work").unwrap();
        assert_eq!(work.access_key_id, "AKIA2");
        assert_eq!(work.secret_access_key.expose(), "s2");
        assert_eq!(work.session_token.unwrap().expose(), "t2");
        let default = AwsCredentials::from_ini(text, "default").unwrap();
        assert!(default.session_token.is_none());
        assert!(AwsCredentials::from_ini(text, "missing").is_none());
    }

    /// The AWS Signature Version 4 test suite's `post-vanilla` case (the AWS General
    /// Reference's "Signature Version 4 test suite": key AKIDEXAMPLE, region us-east-1,
    /// service `service`, 2015-08-30T12:36:00Z, `POST /` to example.amazonaws.com, no body),
    /// whose documented signature is 5da7c1a2...5d6b.
    #[test]
    fn the_documented_sigv4_test_vector_is_reproduced() {
        let credentials = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: ApiKey::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: None,
        };
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160);
        let headers = sign_request(
            &credentials,
            "us-east-1",
            "service",
            "https://example.amazonaws.com/",
            "example.amazonaws.com",
            b"",
            time,
        )
        .unwrap();
        assert_eq!(headers["x-amz-date"], "20150830T123600Z");
        assert_eq!(
            headers["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }
}
