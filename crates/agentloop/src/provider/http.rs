//! The HTTP transport every wire provider shares: one pooled client per configuration, typed
//! errors from status and body, retries with backoff and jitter that honour `retry-after`, and
//! SSE streams decoded into normalized events with an idle timeout that costs nothing per chunk.
//! A stream whose provider reports a retryable error (overload, rate limit, server error)
//! before any content is sent again, like an error status; after content it is not. Until
//! content comes, the events before it (message start, usage) are held back, so a consumer
//! sees only the attempt that answered.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use crate::error::{Error, Result, TimeoutKind};
use crate::provider::EventStream;
use crate::provider::rendered::RenderedTools;
use crate::sse::{SseEvent, SseParser};
use crate::stream::StreamEvent;
use deadline::later;

pub(crate) mod deadline;

/// An API key. Its `Debug` and `Display` never show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// Read a key from an environment variable; `None` when unset or empty.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(Self)
    }

    /// The key itself, for building the auth header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// When and how often to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (default 2).
    pub max_retries: u32,
    /// First backoff (default 500 ms); doubles each retry, with full jitter.
    pub initial_backoff: Duration,
    /// Upper bound of one backoff (default 20 s).
    pub max_backoff: Duration,
    /// A `retry-after` longer than this is not waited for: the error surfaces (default 60 s).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// How long to wait before retry number `attempt` (1-based) after `error`.
    pub fn delay(&self, attempt: u32, error: &Error) -> Option<Duration> {
        if attempt > self.max_retries || !error.is_retryable() {
            return None;
        }
        if let Some(after) = error.retry_after() {
            return (after <= self.max_retry_after).then_some(after);
        }
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << (attempt - 1).min(16))
            .min(self.max_backoff);
        // Full jitter spreads retries of many clients hit by the same outage.
        let jittered = exp.mul_f64(rand::random::<f64>().clamp(0.1, 1.0));
        Some(jittered)
    }
}

/// Connection settings shared by the wire providers. `Debug` shows neither the key nor the
/// values of extra headers (they often carry credentials too, e.g. Azure's `api-key`).
#[derive(Clone)]
pub struct HttpConfig {
    /// Base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The key, if the service needs one.
    pub api_key: Option<ApiKey>,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Connect timeout (default 10 s).
    pub connect_timeout: Duration,
    /// Whole-request timeout for non-streamed calls (default 10 min).
    pub request_timeout: Duration,
    /// Longest silence allowed between two chunks of a stream, and before the first unless
    /// [`Self::first_chunk_timeout`] is set (default 5 min; reasoning models can think for a
    /// long time before the first token).
    pub idle_timeout: Duration,
    /// Longest wait for a stream's first chunk once the response started; `None` (the
    /// default) waits as long as [`Self::idle_timeout`].
    pub first_chunk_timeout: Option<Duration>,
    /// Retries.
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("HttpConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("headers", &header_names)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("first_chunk_timeout", &self.first_chunk_timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl HttpConfig {
    /// Defaults for `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            headers: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(300),
            first_chunk_timeout: None,
            retry: RetryPolicy::default(),
        }
    }
}

/// Turns one provider's SSE events into normalized events.
pub trait SseDecoder: Send + 'static {
    /// Handle one event. An `Err` is an error the provider reported mid-stream; it ends the
    /// stream.
    fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()>;

    /// The body ended: flush, and return `Err` if the response was cut short.
    fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()>;
}

/// Cuts a streamed body into events and decodes them: SSE through [`SseDecoder`] for most
/// providers, AWS event-stream frames for Bedrock.
pub trait BodyDecoder: Send + 'static {
    /// Decode from `chunk` until one event gave stream events (into `out`, empty on entry) or
    /// the chunk is used up, and return how many bytes were read. The rest, `&chunk[read..]`,
    /// is fed again before any later chunk. An `Err` ends the stream after the events in `out`.
    fn feed_until(&mut self, chunk: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<usize>;

    /// The body ended: decode what is held back, flush, and return `Err` if the response was
    /// cut short.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()>;
}

/// An [`SseDecoder`] behind the SSE parser.
pub(crate) struct Sse<D> {
    parser: SseParser,
    decoder: D,
}

impl<D> Sse<D> {
    pub(crate) fn new(decoder: D) -> Self {
        Self {
            parser: SseParser::new(),
            decoder,
        }
    }
}

impl<D: SseDecoder> BodyDecoder for Sse<D> {
    fn feed_until(&mut self, chunk: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<usize> {
        let mut failure = None;
        let decoder = &mut self.decoder;
        let read = self
            .parser
            .feed_until(chunk, |event| match decoder.event(&event, out) {
                Ok(()) if out.is_empty() => ControlFlow::Continue(()),
                Ok(()) => ControlFlow::Break(()),
                Err(e) => {
                    failure = Some(e);
                    ControlFlow::Break(())
                }
            });
        failure.map_or(Ok(read), Err)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        let mut failure = None;
        let decoder = &mut self.decoder;
        self.parser.finish(|event| {
            if failure.is_none()
                && let Err(e) = decoder.event(&event, out)
            {
                failure = Some(e);
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        self.decoder.end(out)
    }
}

/// Maps an error response to a typed error (provider-specific body shapes).
pub type ErrorMapper = fn(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error;

/// A pooled client bound to one provider configuration. Cloning it is one reference-count
/// increment: every streamed call takes a clone into its `'static` future.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Shared>,
}

/// What every clone of a [`Transport`] shares.
struct Shared {
    client: reqwest::Client,
    config: HttpConfig,
    provider: String,
    headers: HeaderMap,
    map_error: ErrorMapper,
    /// Endpoint URLs by path, parsed once: parsing one costs more than building the rest of a
    /// request.
    endpoints: Mutex<Vec<(String, reqwest::Url)>>,
    body_size: BodySize,
    rendered_tools: RenderedTools,
}

/// Serializes request bodies into a buffer about the size of the last one. A run's requests
/// grow by a little each turn, so this replaces the buffer's repeated doubling (and the copies
/// that come with it) by one allocation.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodySize(Arc<AtomicUsize>);

impl BodySize {
    /// The hint never exceeds this, so one huge request does not make every later one reserve
    /// as much.
    const MAX_HINT: usize = 1 << 20;

    /// `body` as JSON bytes.
    pub(crate) fn serialize(&self, body: &impl serde::Serialize) -> serde_json::Result<Bytes> {
        let mut buf = Vec::with_capacity(self.0.load(Ordering::Relaxed));
        serde_json::to_writer(&mut buf, body)?;
        let next = buf.len() + buf.len() / 4 + 256;
        self.0.store(next.min(Self::MAX_HINT), Ordering::Relaxed);
        Ok(Bytes::from(buf))
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("provider", &self.inner.provider)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// Build the client. `auth` are the provider's auth headers (computed from the key).
    pub fn new(
        provider: impl Into<String>,
        config: HttpConfig,
        auth: Vec<(HeaderName, HeaderValue)>,
        map_error: ErrorMapper,
    ) -> Result<Self> {
        let provider = provider.into();
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, mut value) in auth {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Error::config(format!("invalid header name `{name}`: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| Error::config(format!("invalid value for header `{name}`: {e}")))?;
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| Error::config(format!("could not build the HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Shared {
                client,
                config,
                provider,
                headers,
                map_error,
                endpoints: Mutex::default(),
                body_size: BodySize::default(),
                rendered_tools: RenderedTools::default(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HttpConfig {
        &self.inner.config
    }

    /// The serializer for this transport's request bodies.
    pub(crate) fn body_size(&self) -> &BodySize {
        &self.inner.body_size
    }

    /// The wire forms of the tool definitions sent through this transport.
    pub(crate) fn rendered_tools(&self) -> &RenderedTools {
        &self.inner.rendered_tools
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{}",
            self.inner.config.base_url.trim_end_matches('/'),
            path
        )
    }

    /// The endpoint URL for `path`, parsed on first use only; the text when it does not parse.
    fn endpoint(&self, path: &str) -> std::result::Result<reqwest::Url, String> {
        let cached = self.inner.endpoints.lock().ok().and_then(|endpoints| {
            endpoints
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, url)| url.clone())
        });
        if let Some(url) = cached {
            return Ok(url);
        }
        let url = self.url(path);
        let parsed = reqwest::Url::parse(&url).map_err(|_| url)?;
        if let Ok(mut endpoints) = self.inner.endpoints.lock() {
            endpoints.push((path.to_owned(), parsed.clone()));
        }
        Ok(parsed)
    }

    /// A POST to `path` with the transport's headers, then `extra` over them. Built as a whole
    /// request so the header map is copied once rather than copied and then re-inserted. A URL
    /// that does not parse goes to reqwest as text, which reports the error as it always did.
    fn post(
        &self,
        path: &str,
        body: &Bytes,
        extra: &HeaderMap,
        timeout: Option<Duration>,
    ) -> reqwest::Result<reqwest::Request> {
        let url = match self.endpoint(path) {
            Ok(url) => url,
            Err(text) => return self.inner.client.post(text).build(),
        };
        let mut request = reqwest::Request::new(reqwest::Method::POST, url);
        let headers = request.headers_mut();
        headers.clone_from(&self.inner.headers);
        for name in extra.keys() {
            headers.remove(name);
        }
        for (name, value) in extra {
            headers.append(name, value.clone());
        }
        *request.body_mut() = Some(body.clone().into());
        *request.timeout_mut() = timeout;
        Ok(request)
    }

    /// Send once; map transport failures and error statuses to typed errors.
    async fn send_once(
        &self,
        path: &str,
        body: &Bytes,
        extra: &HeaderMap,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response> {
        let request = self
            .post(path, body, extra, timeout)
            .map_err(|e| self.transport_error(e))?;
        let response = self
            .inner
            .client
            .execute(request)
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = response.bytes().await.unwrap_or_default();
        Err((self.inner.map_error)(
            &self.inner.provider,
            status.as_u16(),
            &headers,
            &body,
        ))
    }

    fn transport_error(&self, e: reqwest::Error) -> Error {
        if e.is_timeout() {
            let (kind, after) = if e.is_connect() {
                (TimeoutKind::Connect, self.inner.config.connect_timeout)
            } else {
                (TimeoutKind::Request, self.inner.config.request_timeout)
            };
            Error::Timeout { kind, after }
        } else {
            Error::Http {
                message: error_chain(&e),
            }
        }
    }

    /// Send with retries until a success status.
    async fn send(
        &self,
        path: &str,
        body: &Bytes,
        extra: &HeaderMap,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response> {
        let mut attempt = 0;
        loop {
            match self.send_once(path, body, extra, timeout).await {
                Ok(response) => return Ok(response),
                Err(error) => {
                    attempt += 1;
                    let Some(delay) = self.inner.config.retry.delay(attempt, &error) else {
                        return Err(error);
                    };
                    tracing::debug!(provider = %self.inner.provider, attempt, ?delay, %error, "retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// POST a JSON body and return the JSON answer (non-streamed calls).
    pub async fn post_json(&self, path: &str, body: Bytes, extra: HeaderMap) -> Result<Value> {
        let bytes = self.post_bytes(path, body, extra).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::parse(format!("{} response", self.inner.provider), e))
    }

    /// POST a JSON body and return the answer's bytes (non-streamed calls), for providers that
    /// read it straight into borrowed structs instead of building a [`Value`] first.
    pub async fn post_bytes(&self, path: &str, body: Bytes, extra: HeaderMap) -> Result<Bytes> {
        let mut attempt = 0;
        loop {
            let response = self
                .send(path, &body, &extra, Some(self.inner.config.request_timeout))
                .await?;
            match response.bytes().await {
                Ok(bytes) => return Ok(bytes),
                // The body failed before we used any of it: the whole call may be retried.
                Err(e) => {
                    let error = self.transport_error(e);
                    attempt += 1;
                    let Some(delay) = self.inner.config.retry.delay(attempt, &error) else {
                        return Err(error);
                    };
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// POST a JSON body and stream the SSE answer through a decoder `new_decoder` makes.
    ///
    /// Retries (per [`RetryPolicy`]): an error status is retried before the stream starts; a
    /// retryable error the stream reports before any content (an overload or rate limit
    /// right after the message started) sends the request again with a new decoder, so the
    /// stream then starts over with a second [`StreamEvent::MessageStart`]. Once content
    /// came, an error ends the stream: content is never sent twice.
    pub fn post_stream<D: SseDecoder>(
        &self,
        path: &str,
        body: Bytes,
        extra: HeaderMap,
        new_decoder: impl Fn() -> D + Send + 'static,
    ) -> EventStream {
        self.post_body_stream(path, body, extra, move || Sse::new(new_decoder()))
    }

    /// [`Self::post_stream`] for a body that is not SSE (Bedrock's event-stream frames).
    pub fn post_body_stream<C: BodyDecoder>(
        &self,
        path: &str,
        body: Bytes,
        extra: HeaderMap,
        new_decoder: impl Fn() -> C + Send + 'static,
    ) -> EventStream {
        let config = &self.inner.config;
        let silence = Silence {
            first_chunk: config.first_chunk_timeout.unwrap_or(config.idle_timeout),
            idle: config.idle_timeout,
        };
        let again = Again {
            transport: self.clone(),
            path: path.to_owned(),
            body,
            extra,
            new_decoder: Box::new(new_decoder),
            retries: 0,
            held: Vec::new(),
        };
        Box::pin(SseStream {
            state: SseState::Connecting {
                connect: again.connect(None),
                decoder: Some((again.new_decoder)()),
                silence,
            },
            // A function rather than a boxed stream: the body's own type stays known, so
            // reading a chunk is no call through a `dyn Stream`.
            body: reqwest::Response::bytes_stream,
            again: Some(Box::new(again)),
        })
    }
}

/// What it takes to send a streamed call again, kept until content arrives.
struct Again<D> {
    transport: Transport,
    path: String,
    body: Bytes,
    extra: HeaderMap,
    new_decoder: Box<dyn Fn() -> D + Send>,
    /// Times the call was sent again after an error in its stream.
    retries: u32,
    /// The events before the first content (message start, usage), held back while the call
    /// may still be sent again, so that a retry starts the answer over unseen.
    held: Vec<StreamEvent>,
}

type Connect = Pin<Box<dyn Future<Output = Result<reqwest::Response>> + Send>>;

impl<D> Again<D> {
    /// Send the call (with the status retries of [`Transport::send`]), after `wait`.
    fn connect(&self, wait: Option<Duration>) -> Connect {
        let transport = self.transport.clone();
        let (path, body, extra) = (self.path.clone(), self.body.clone(), self.extra.clone());
        Box::pin(async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            transport.send(&path, &body, &extra, None).await
        })
    }
}

/// Whether an event is part of the answer (after which the call is never sent again).
fn is_content(event: &StreamEvent) -> bool {
    !matches!(
        event,
        StreamEvent::MessageStart { .. } | StreamEvent::Usage { .. }
    )
}

/// At the end of a stream that can no longer be sent again: queue what was held back, if
/// anything, and say whether something was.
fn release_held<D>(again: &mut Option<Box<Again<D>>>, pending: &mut VecDeque<StreamEvent>) -> bool {
    match again.take() {
        Some(again) if !again.held.is_empty() => {
            pending.extend(again.held);
            true
        }
        _ => false,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

/// The streamed answer of one call. A hand-written `Stream` rather than `stream::unfold`:
/// unfold moves its whole state in and out of a new future for every event. `B` is the
/// response body as a stream of chunks, made by `F`.
struct SseStream<D, B, F> {
    state: SseState<D, B>,
    /// Makes the body's stream of chunks from the response.
    body: F,
    /// How to start over after an error before any content; `None` once content came.
    again: Option<Box<Again<D>>>,
}

// No field is ever pinned: the connect future is boxed, the body is `Unpin`, and the decoder
// is only reached through `&mut`.
impl<D, B, F> Unpin for SseStream<D, B, F> {}

// `allow`, not `expect`: the lint sees the reading state's size only through the decoder
// type, which is generic here.
#[allow(
    clippy::large_enum_variant,
    reason = "the stream is boxed once and never moved, so the reading state is kept inline: \
              one allocation and one pointer less per chunk"
)]
enum SseState<D, B> {
    /// Sending the request (retries happen inside, before any event).
    Connecting {
        connect: Connect,
        decoder: Option<D>,
        silence: Silence,
    },
    Reading(Reading<D, B>),
    Done,
}

/// The longest silences a stream may keep: before its first chunk and between two.
#[derive(Debug, Clone, Copy)]
struct Silence {
    first_chunk: Duration,
    idle: Duration,
}

struct Reading<D, B> {
    body: B,
    /// What the last chunk read holds that is not parsed yet.
    chunk: Bytes,
    decoder: D,
    /// The events decoded from one SSE event (usually one), not handed out yet.
    pending: VecDeque<StreamEvent>,
    silence: Silence,
    /// Set to fire the allowed silence after the last chunk known when it was last set; see
    /// [`Reading::poll_read`].
    timer: Pin<Box<tokio::time::Sleep>>,
    last_chunk: Instant,
    got_first: bool,
    /// The body ended; what is pending is the last of it.
    ended: bool,
    /// Delivered after the events decoded before it.
    failed: Option<Error>,
}

impl<D, B, F> Stream for SseStream<D, B, F>
where
    D: BodyDecoder,
    B: Stream<Item = reqwest::Result<Bytes>> + Unpin,
    F: Fn(reqwest::Response) -> B + Copy,
{
    type Item = Result<StreamEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                SseState::Done => return Poll::Ready(None),
                SseState::Connecting {
                    connect,
                    decoder,
                    silence,
                } => {
                    let response = match ready!(connect.as_mut().poll(cx)) {
                        Ok(response) => response,
                        Err(error) => {
                            this.state = SseState::Done;
                            return Poll::Ready(Some(Err(error)));
                        }
                    };
                    let Some(decoder) = decoder.take() else {
                        this.state = SseState::Done;
                        return Poll::Ready(None);
                    };
                    let reading = Reading::new((this.body)(response), decoder, *silence);
                    this.state = SseState::Reading(reading);
                }
                SseState::Reading(reading) => {
                    if let Some(event) = reading.pending.pop_front() {
                        match this.again.as_deref_mut() {
                            None => return Poll::Ready(Some(Ok(event))),
                            Some(again) if !is_content(&event) => {
                                again.held.push(event);
                                continue;
                            }
                            Some(again) => {
                                // The first content: no retry from here, and what was held
                                // goes out before it.
                                let held = std::mem::take(&mut again.held);
                                this.again = None;
                                reading.pending.push_front(event);
                                for event in held.into_iter().rev() {
                                    reading.pending.push_front(event);
                                }
                                continue;
                            }
                        }
                    }
                    if let Some(error) = reading.failed.take() {
                        if let Some(again) = this.again.as_deref_mut()
                            && let Some(wait) = again
                                .transport
                                .inner
                                .config
                                .retry
                                .delay(again.retries + 1, &error)
                        {
                            again.retries += 1;
                            again.held.clear();
                            tracing::debug!(provider = %again.transport.inner.provider, retry = again.retries, ?wait, %error, "sending again after an error before any content");
                            this.state = SseState::Connecting {
                                connect: again.connect(Some(wait)),
                                decoder: Some((again.new_decoder)()),
                                silence: reading.silence,
                            };
                            continue;
                        }
                        if release_held(&mut this.again, &mut reading.pending) {
                            reading.failed = Some(error);
                            continue;
                        }
                        this.state = SseState::Done;
                        return Poll::Ready(Some(Err(error)));
                    }
                    if reading.ended {
                        if release_held(&mut this.again, &mut reading.pending) {
                            continue;
                        }
                        this.state = SseState::Done;
                        return Poll::Ready(None);
                    }
                    match ready!(reading.poll_read(cx)) {
                        Ok(true) => {}
                        Ok(false) => reading.ended = true,
                        Err(error) => reading.failed = Some(error),
                    }
                }
            }
        }
    }
}

impl<D, B> Reading<D, B> {
    fn new(body: B, decoder: D, silence: Silence) -> Self {
        Self {
            body,
            chunk: Bytes::new(),
            decoder,
            pending: VecDeque::new(),
            silence,
            timer: Box::pin(tokio::time::sleep(silence.first_chunk)),
            last_chunk: Instant::now(),
            got_first: false,
            ended: false,
            failed: None,
        }
    }
}

impl<D: BodyDecoder, B: Stream<Item = reqwest::Result<Bytes>> + Unpin> Reading<D, B> {
    /// Decode the chunk's unread events until one gives stream events (into `pending`, which
    /// is empty here) or the chunk ends. A chunk holding many events (a body that arrived at
    /// once) is thus decoded an event at a time as the stream is read, not queued whole: each
    /// event's strings are made and dropped in turn, in memory the allocator just freed.
    fn decode_chunk(&mut self) -> Result<bool> {
        let read = self.decoder.feed_until(&self.chunk, &mut self.pending)?;
        self.chunk.advance(read);
        if self.chunk.is_empty() {
            // Read whole: give the buffer back now, not when the next chunk comes.
            self.chunk = Bytes::new();
        }
        Ok(true)
    }

    /// Decode the next events into `pending`: from the chunk read last while it has some
    /// left, else from the next one. `Ok(false)` at the end of the body.
    ///
    /// The idle timer is re-armed only when it fires, never per chunk. It is not made to fire
    /// in steps to spare the clock read per chunk either: a timer due sooner than any other
    /// the runtime holds makes tokio wake its driver (an eventfd write and an extra
    /// `epoll_wait`) once per stream, which cost more than the clock reads it saved.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool>> {
        // One call of `decode_chunk`, after this, so that it is inlined once.
        while self.chunk.is_empty() {
            match self.body.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    self.last_chunk = Instant::now();
                    self.got_first = true;
                    self.chunk = bytes;
                    // Decoded below, unless it is empty: then the next is read.
                    continue;
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(Error::IncompleteStream {
                        message: format!("the connection failed mid-stream: {}", error_chain(&e)),
                    }));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(self.decoder.finish(&mut self.pending).map(|()| false));
                }
                Poll::Pending => {}
            }
            ready!(self.timer.as_mut().poll(cx));
            let (kind, after) = if self.got_first {
                (TimeoutKind::Idle, self.silence.idle)
            } else {
                (TimeoutKind::FirstChunk, self.silence.first_chunk)
            };
            let deadline = later(self.last_chunk, after);
            if deadline <= Instant::now() {
                return Poll::Ready(Err(Error::Timeout { kind, after }));
            }
            self.timer.as_mut().reset(deadline);
        }
        Poll::Ready(self.decode_chunk())
    }
}

/// Parse `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The error mapping both OpenAI- and Anthropic-style services fit: the body is
/// `{"error": {"type"|"code", "message"}}` (Anthropic adds `"type": "error"` around it).
pub(crate) fn map_error(provider: &str, status: u16, headers: &HeaderMap, body: &[u8]) -> Error {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let error_type = error
        .and_then(|e| e.get("type").or_else(|| e.get("code")))
        .and_then(|t| match t {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|v| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| excerpt(body));
    let overloaded = error_type.as_deref() == Some("overloaded_error");
    error_for_status(
        ErrorParts {
            provider,
            status,
            error_type,
            message,
            retry_after: retry_after(headers),
        },
        overloaded,
    )
}

/// What a provider's error response said, read by the provider's own error reader.
pub(crate) struct ErrorParts<'a> {
    pub(crate) provider: &'a str,
    pub(crate) status: u16,
    pub(crate) error_type: Option<String>,
    pub(crate) message: String,
    pub(crate) retry_after: Option<Duration>,
}

/// The typed error for an HTTP status, shared by every provider; `overloaded` when the body
/// said so whatever the status (Anthropic's `overloaded_error`).
pub(crate) fn error_for_status(parts: ErrorParts<'_>, overloaded: bool) -> Error {
    let ErrorParts {
        provider,
        status,
        error_type,
        message,
        retry_after,
    } = parts;
    let provider = provider.to_owned();
    match status {
        401 | 403 => Error::Auth {
            provider,
            status,
            message,
        },
        429 if !overloaded => Error::RateLimited {
            provider,
            retry_after,
            message,
        },
        529 | 503 => Error::Overloaded { provider, message },
        _ if overloaded => Error::Overloaded { provider, message },
        400 | 404 | 413 | 422 => Error::InvalidRequest {
            provider,
            status,
            error_type,
            message,
        },
        _ => Error::Api {
            provider,
            status,
            error_type,
            message,
        },
    }
}

/// The start of a body, for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    const MAX: usize = 300;
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event's data as a text delta.
    struct Texts;

    impl SseDecoder for Texts {
        fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
            out.push_back(StreamEvent::TextDelta {
                text: event.data.to_string(),
            });
            Ok(())
        }

        fn end(&mut self, _: &mut VecDeque<StreamEvent>) -> Result<()> {
            Ok(())
        }
    }

    /// A body sending one event at each of `at` (from now), then stalling or ending.
    fn body(at: &'static [u64], then_stall: bool) -> Body {
        let start = Instant::now();
        let chunks = at.iter().copied().enumerate().map(move |(i, ms)| {
            let when = start + Duration::from_millis(ms);
            async move {
                tokio::time::sleep_until(when).await;
                Ok(Bytes::from(format!("data: {i}\n\n")))
            }
        });
        let chunks = futures::stream::iter(chunks).then(|chunk| chunk);
        if then_stall {
            chunks.chain(futures::stream::pending()).boxed()
        } else {
            chunks.boxed()
        }
    }

    type Body = futures::stream::BoxStream<'static, reqwest::Result<Bytes>>;

    /// Already reading `body`: the function that would make it from a response goes unused.
    fn stream(body: Body) -> SseStream<Sse<Texts>, Body, fn(reqwest::Response) -> Body> {
        decoded_by(Texts, body)
    }

    fn decoded_by<D>(
        decoder: D,
        body: Body,
    ) -> SseStream<Sse<D>, Body, fn(reqwest::Response) -> Body> {
        SseStream {
            state: SseState::Reading(Reading::new(body, Sse::new(decoder), ONE_SECOND)),
            body: no_body,
            again: None,
        }
    }

    /// Never called: the streams here are read from the start, and never sent again.
    fn no_body(_: reqwest::Response) -> Body {
        futures::stream::empty().boxed()
    }

    const ONE_SECOND: Silence = Silence {
        first_chunk: Duration::from_secs(1),
        idle: Duration::from_secs(1),
    };

    #[tokio::test(start_paused = true)]
    async fn a_first_chunk_timeout_of_its_own_waits_longer_only_for_the_first() {
        let silence = Silence {
            first_chunk: Duration::from_secs(3),
            idle: Duration::from_secs(1),
        };
        let reading = |body| SseStream::<_, Body, fn(reqwest::Response) -> Body> {
            state: SseState::Reading(Reading::new(body, Sse::new(Texts), silence)),
            body: no_body,
            again: None,
        };
        // The first chunk at 2.5 s is in time; then 1 s of silence is too much.
        let started = Instant::now();
        let items: Vec<_> = reading(body(&[2500, 3000], true)).collect().await;
        assert_eq!(started.elapsed(), Duration::from_millis(4000));
        assert_eq!(items.len(), 3, "{items:?}");
        assert!(
            matches!(&items[2], Err(Error::Timeout { kind: TimeoutKind::Idle, after }) if *after == Duration::from_secs(1)),
            "{items:?}"
        );
        // No first chunk within 3 s.
        let started = Instant::now();
        let items: Vec<_> = reading(body(&[], true)).collect().await;
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(
            matches!(&items[..], [Err(Error::Timeout { kind: TimeoutKind::FirstChunk, after })] if *after == Duration::from_secs(3)),
            "{items:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_timeout_fires_exactly_after_the_silence() {
        let started = Instant::now();
        let items: Vec<_> = stream(body(&[0, 300, 600, 900], true)).collect().await;
        let elapsed = started.elapsed();
        let (last, texts) = items.split_last().unwrap();
        assert_eq!(texts.len(), 4);
        assert!(
            matches!(last, Err(Error::Timeout { kind: TimeoutKind::Idle, after }) if *after == Duration::from_secs(1)),
            "{last:?}"
        );
        // The last chunk came at 0.9 s.
        assert_eq!(elapsed, Duration::from_millis(1900));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_chunk_timeout_counts_from_the_start() {
        let started = Instant::now();
        let items: Vec<_> = stream(body(&[], true)).collect().await;
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert!(
            matches!(
                items[..],
                [Err(Error::Timeout {
                    kind: TimeoutKind::FirstChunk,
                    ..
                })]
            ),
            "{items:?}"
        );
    }

    /// Text deltas, failing on the event whose data is `fail_on`.
    struct FailsOn(&'static str);

    impl SseDecoder for FailsOn {
        fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
            if event.data == self.0 {
                return Err(Error::parse("test event", "refused"));
            }
            Texts.event(event, out)
        }

        fn end(&mut self, _: &mut VecDeque<StreamEvent>) -> Result<()> {
            Ok(())
        }
    }

    fn text(item: Option<Result<StreamEvent>>) -> String {
        match item {
            Some(Ok(StreamEvent::TextDelta { text })) => text,
            other => panic!("expected a text delta, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_chunk_of_many_events_is_decoded_an_event_at_a_time() {
        let chunk = Bytes::from_static(b"data: 0\n\ndata: 1\n\n: ping\n\ndata: 2\n\n");
        let body = futures::stream::iter([Ok(chunk.clone())]).boxed();
        let mut events = stream(body);
        assert_eq!(text(events.next().await), "0");
        let SseState::Reading(reading) = &events.state else {
            panic!("not reading");
        };
        // Nothing else decoded yet: the rest of the chunk waits for the next poll.
        assert!(reading.pending.is_empty());
        assert_eq!(&reading.chunk[..], &chunk[b"data: 0\n\n".len()..]);
        assert_eq!(text(events.next().await), "1");
        assert_eq!(text(events.next().await), "2");
        let SseState::Reading(reading) = &events.state else {
            panic!("not reading");
        };
        // Read whole: the chunk is let go before the next one comes.
        assert!(reading.chunk.is_empty());
        assert!(events.next().await.is_none());
    }

    #[tokio::test]
    async fn a_decoding_error_mid_chunk_comes_after_the_events_before_it() {
        let chunk = Bytes::from_static(b"data: 0\n\ndata: 1\n\ndata: bad\n\ndata: 3\n\n");
        let body = futures::stream::iter([Ok(chunk)]).boxed();
        let items: Vec<_> = decoded_by(FailsOn("bad"), body).collect().await;
        assert_eq!(items.len(), 3, "{items:?}");
        assert!(matches!(&items[0], Ok(StreamEvent::TextDelta { text }) if text == "0"));
        assert!(matches!(&items[1], Ok(StreamEvent::TextDelta { text }) if text == "1"));
        assert!(
            matches!(&items[2], Err(Error::Parse { message, .. }) if message.contains("refused")),
            "{:?}",
            items[2]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_closer_than_the_idle_timeout_never_trip_it() {
        let items: Vec<_> = stream(body(&[0, 950, 1900, 2850, 3800], false))
            .collect()
            .await;
        assert_eq!(items.len(), 5);
        assert!(items.iter().all(Result::is_ok), "{items:?}");
    }
}
