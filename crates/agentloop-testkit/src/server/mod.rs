//! OpenAI-, Anthropic-, Gemini- and Bedrock-compatible HTTP servers on loopback that play scripted [`Turn`]s as
//! real wire traffic, with fault injection.
//!
//! ```no_run
//! use agentloop_testkit::server::{Fault, MockServer, Wire};
//! use agentloop_testkit::Turn;
//! use serde_json::json;
//!
//! # async fn demo() -> std::io::Result<()> {
//! let server = MockServer::start(Wire::OpenAi, [
//!     Turn::tool_call("get_weather", json!({"city": "Paris"})),
//!     Turn::text("18 °C"),
//! ]).await?;
//! server.inject(Fault::rate_limited(1), 1); // the first call gets a 429 first
//! let base_url = server.base_url(); // "http://127.0.0.1:PORT/v1"
//! // ... point a client at base_url ...
//! server.assert_complete();
//! # Ok(()) }
//! ```
//!
//! # Routes
//! | wire | endpoint | [`MockServer::base_url`] |
//! |---|---|---|
//! | [`Wire::OpenAi`] | `POST /v1/chat/completions` | `http://127.0.0.1:PORT/v1` (as OpenAI SDKs expect) |
//! | [`Wire::Anthropic`] | `POST /v1/messages` | `http://127.0.0.1:PORT` (as Anthropic SDKs expect) |
//! | [`Wire::Gemini`] | `POST /v1beta/models/<model>:streamGenerateContent` (and `:generateContent`) | `http://127.0.0.1:PORT` |
//! | [`Wire::Bedrock`] | `POST /model/<modelId>/converse-stream` (and `/converse`) | `http://127.0.0.1:PORT` |
//! | [`Wire::Responses`] | `POST /v1/responses` | `http://127.0.0.1:PORT/v1` (as OpenAI SDKs expect) |
//!
//! OpenAI and Anthropic honour the request's `"stream": true` (an SSE stream in the provider's
//! exact event shape) or not (one JSON body), and OpenAI's `stream_options.include_usage`;
//! Gemini streams on `:streamGenerateContent` and takes the model from the path; it also
//! answers Vertex AI's `/v1/projects/<p>/locations/<l>/publishers/google/models/<model>:<method>`.
//! Bedrock streams AWS event-stream frames on `converse-stream` (exceptions mid-stream as
//! exception frames, errors named by `x-amzn-ErrorType`) and takes the model from the path;
//! it checks no signature. `GET /health`
//! answers `{"status":"ok"}`; any other route is a 404 in the wire's error shape (and recorded).
//! Responses echo the request's `model`; ids are numbered by turn (`chatcmpl-mock-0`,
//! `msg_mock_0`, `mock-response-0`), tool-call ids come from the turn (`call_<turn>_<i>` unless given), and OpenAI's
//! `created` is fixed, so bodies are reproducible byte for byte.
//!
//! # How a turn plays on the wire
//! - Text in 3 deltas, reasoning in 2 (OpenAI: `reasoning_content`; Anthropic: a thinking block
//!   with its `signature_delta`; Gemini: `thought` parts, the signature on the last; Bedrock:
//!   `reasoningContent` deltas, then the signature in a delta of its own), arguments in 4
//!   fragments (Gemini: each call whole in one chunk, with its `id`): the same split as the
//!   scripted model. Bedrock sends one event-stream frame per event; its mid-stream errors are
//!   exception frames (`throttlingException`, `serviceUnavailableException`, ...).
//! - [`Turn::delay`] waits before the status line, [`Turn::chunk_delay`] between writes (tokio
//!   time, so tests with paused time run instantly).
//! - [`Turn::error`]: a transport error ([`Error::Http`](agentloop::Error::Http),
//!   [`Error::IncompleteStream`](agentloop::Error::IncompleteStream)) drops the connection after the
//!   headers; [`Error::Stream`](agentloop::Error::Stream) is a 200 stream that starts with the
//!   provider's error event; every other error is an error status with the provider's body
//!   (rate limited → 429 with `retry-after` and `retry-after-ms`, overloaded → 529 on Anthropic
//!   and 503 on OpenAI, auth → its status, `Api`/`InvalidRequest` → their status and type).
//! - [`Turn::fail_after_events`] `(n, error)`: after `n` SSE events the stream ends with the
//!   error event (or the connection drops, for transport errors). A non-streamed answer fails
//!   with the error's status instead (or, for transport errors, drops half-way through its
//!   body).
//! - [`Turn::faults`]: see [`Fault`].
//!
//! Every call is recorded, including those answered by a fault or found no turn left, so
//! retries show in [`MockServer::requests`]. A call that finds the script exhausted gets a 500
//! whose message says so.

mod anthropic;
mod bedrock;
mod fault;
mod gemini;
mod live;
mod openai;
mod prerendered;
mod render;
mod reply;
mod responses;
mod wire_error;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, Method};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use fault::{Fault, WriteMode};

use crate::turn::Turn;
use live::Live;
use prerendered::Prerendered;

/// Which provider's API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// Gemini `generateContent` (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`
    /// and `:generateContent`).
    Gemini,
    /// Bedrock Converse (`POST /model/<modelId>/converse-stream` and `/converse`).
    Bedrock,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
}

impl Wire {
    /// The path of the endpoint it serves (for Gemini, with the model `mock-model` and the
    /// non-streamed method; any model and `:streamGenerateContent` work as well).
    pub fn path(self) -> &'static str {
        match self {
            Self::OpenAi => "/v1/chat/completions",
            Self::Anthropic => "/v1/messages",
            Self::Gemini => "/v1beta/models/mock-model:generateContent",
            Self::Bedrock => "/model/mock-model/converse",
            Self::Responses => "/v1/responses",
        }
    }

    /// The route the server registers: Gemini names the model and method in the last segment
    /// (Vertex AI's longer path is served too, see [`VERTEX_ROUTE`]).
    fn route(self) -> &'static str {
        match self {
            Self::OpenAi | Self::Anthropic | Self::Responses => self.path(),
            Self::Gemini => "/v1beta/models/{call}",
            Self::Bedrock => "/model/{model}/{method}",
        }
    }

    /// What a client's base URL ends with: OpenAI clients append `/chat/completions` to a base
    /// URL that includes `/v1`; Anthropic clients append `/v1/messages` to the bare host.
    fn base_path(self) -> &'static str {
        match self {
            Self::OpenAi | Self::Responses => "/v1",
            Self::Anthropic | Self::Gemini | Self::Bedrock => "",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "OpenAI Chat Completions",
            Self::Anthropic => "Anthropic Messages",
            Self::Gemini => "Gemini generateContent",
            Self::Bedrock => "Bedrock Converse",
            Self::Responses => "OpenAI Responses",
        }
    }
}

/// Vertex AI's path to a Gemini model, which the Gemini server answers like the Gemini API's.
const VERTEX_ROUTE: &str =
    "/v1/projects/{project}/locations/{location}/publishers/google/models/{call}";

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path without the query, e.g. `/v1/messages`.
    pub path: String,
    /// All request headers.
    pub headers: HeaderMap,
    /// The JSON body; `Null` when the body was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Options of a server before it starts; from [`MockServer::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until started"]
pub struct MockServerBuilder {
    wire: Wire,
    turns: Vec<Turn>,
    faults: Vec<Fault>,
    mode: WriteMode,
    addr: SocketAddr,
    model: String,
}

impl MockServerBuilder {
    /// Add turns to the script, played in order, one per call.
    pub fn turns(mut self, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.turns.extend(turns);
        self
    }

    /// Add one turn to the script.
    pub fn turn(mut self, turn: Turn) -> Self {
        self.turns.push(turn);
        self
    }

    /// Queue `fault` for the next `times` calls (see [`MockServer::inject`]). Ignored by a
    /// pre-rendered server.
    pub fn inject(mut self, fault: Fault, times: usize) -> Self {
        self.faults.extend(std::iter::repeat_n(fault, times));
        self
    }

    /// How bodies are cut into network writes (default: one write per SSE event).
    pub fn write_mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Listen here instead of `127.0.0.1:0` (a free port on loopback).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The model name answered when a request names none (default `mock-model`); the
    /// pre-rendered server always answers with it.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Start the scripted server.
    pub async fn start(self) -> io::Result<MockServer> {
        let live = Arc::new(Live::new(
            self.wire,
            self.mode,
            self.model,
            self.turns,
            self.faults,
        ));
        let mut router = Router::new().route(self.wire.route(), post(live::call));
        if self.wire == Wire::Gemini {
            router = router.route(VERTEX_ROUTE, post(live::call));
        }
        let router = router
            .fallback(live::not_found)
            .with_state(Arc::clone(&live));
        let running = Running::spawn(self.addr, self.wire, router).await?;
        Ok(MockServer { running, live })
    }

    /// Start a pre-rendered server (see [`MockServer::prerendered`]) with these options.
    #[doc(hidden)] // Benchmark plumbing (the CLI's mock server, benches): not for tests.
    pub async fn start_prerendered(self) -> io::Result<PrerenderedServer> {
        let (running, server) = spawn_prerendered(self).await?;
        Ok(PrerenderedServer { running, server })
    }
}

/// A scripted OpenAI- or Anthropic-compatible server on loopback. Stops when dropped (or with
/// [`shutdown`](Self::shutdown)).
pub struct MockServer {
    running: Running,
    live: Arc<Live>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("wire", &self.running.wire)
            .field("addr", &self.running.addr)
            .field("calls", &self.calls())
            .finish()
    }
}

impl MockServer {
    /// Start a server on a free loopback port that answers each call with the next turn.
    pub async fn start(wire: Wire, turns: impl IntoIterator<Item = Turn>) -> io::Result<Self> {
        Self::builder(wire).turns(turns).start().await
    }

    /// Configure a server before starting it.
    pub fn builder(wire: Wire) -> MockServerBuilder {
        MockServerBuilder {
            wire,
            turns: Vec::new(),
            faults: Vec::new(),
            mode: WriteMode::default(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            model: "mock-model".to_owned(),
        }
    }

    /// A server for benchmarks: each turn's replies (streamed, with and without usage, and
    /// not streamed) are rendered once now, then served by position in the conversation — a
    /// request holding `k` assistant messages gets turn `k % turns.len()` — so a client can
    /// run the same conversation thousands of times. Nothing is recorded and nothing is
    /// rendered per request. Turns' errors, delays and faults are rendered in too.
    #[doc(hidden)] // Benchmark plumbing (the CLI's mock server, benches): not for tests.
    pub async fn prerendered(
        wire: Wire,
        turns: impl IntoIterator<Item = Turn>,
    ) -> io::Result<PrerenderedServer> {
        Self::builder(wire).turns(turns).start_prerendered().await
    }

    /// The base URL to give a client: `http://127.0.0.1:PORT/v1` for OpenAI,
    /// `http://127.0.0.1:PORT` for Anthropic and Gemini.
    pub fn base_url(&self) -> String {
        self.running.base_url()
    }

    /// The full URL of the endpoint, e.g. `http://127.0.0.1:PORT/v1/messages`.
    pub fn endpoint_url(&self) -> String {
        self.running.endpoint_url()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    /// The wire it speaks.
    pub fn wire(&self) -> Wire {
        self.running.wire
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.live.requests()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.live.last_request()
    }

    /// How many requests arrived (faulted and unscripted ones included).
    pub fn calls(&self) -> usize {
        self.live.calls()
    }

    /// How many scripted turns are still waiting for a call.
    pub fn remaining_turns(&self) -> usize {
        self.live.remaining_turns()
    }

    /// Add a turn at the end of the script.
    pub fn push_turn(&self, turn: Turn) {
        self.live.push_turn(turn);
    }

    /// Apply `fault` to each of the next `times` calls, after any already queued (one queued
    /// fault per call). A rejection answers the call without taking a turn, so the retry gets
    /// it: `inject(Fault::Overloaded, 2)` gives two 529s, then the script.
    pub fn inject(&self, fault: Fault, times: usize) {
        self.live.inject(fault, times);
    }

    /// Panic unless every scripted turn was played and no call came after the script ran out.
    #[track_caller]
    pub fn assert_complete(&self) {
        if let Some(problem) = self.live.incomplete() {
            panic!("{problem}");
        }
    }

    /// Stop accepting connections, let the open ones finish, and wait for the server to stop.
    pub async fn shutdown(mut self) -> io::Result<()> {
        self.running.shutdown().await
    }
}

/// A pre-rendered server, from [`MockServer::prerendered`]. Stops when dropped.
#[doc(hidden)] // Benchmark plumbing (the CLI's mock server, benches): not for tests.
pub struct PrerenderedServer {
    running: Running,
    server: Arc<Prerendered>,
}

impl std::fmt::Debug for PrerenderedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrerenderedServer")
            .field("wire", &self.running.wire)
            .field("addr", &self.running.addr)
            .field("calls", &self.calls())
            .finish()
    }
}

impl PrerenderedServer {
    /// The base URL to give a client (see [`MockServer::base_url`]).
    pub fn base_url(&self) -> String {
        self.running.base_url()
    }

    /// The full URL of the endpoint.
    pub fn endpoint_url(&self) -> String {
        self.running.endpoint_url()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    /// How many calls the endpoint got.
    pub fn calls(&self) -> usize {
        self.server.calls.load(Ordering::Relaxed)
    }

    /// Stop accepting connections, let the open ones finish, and wait for the server to stop.
    pub async fn shutdown(mut self) -> io::Result<()> {
        self.running.shutdown().await
    }
}

/// Serve `turns` pre-rendered (see [`MockServer::prerendered`]) on `addr` until the process
/// ends; for a command-line mock server.
#[doc(hidden)] // Benchmark plumbing (the CLI's mock server, benches): not for tests.
pub async fn serve_prerendered(
    addr: SocketAddr,
    wire: Wire,
    turns: impl IntoIterator<Item = Turn>,
) -> io::Result<()> {
    serve_prerendered_on(TcpListener::bind(addr).await?, wire, turns).await
}

/// [`serve_prerendered`] on a listener the caller bound (e.g. to port 0, to print the port it
/// got before serving).
#[doc(hidden)] // Benchmark plumbing (the CLI's mock server, benches): not for tests.
pub async fn serve_prerendered_on(
    listener: TcpListener,
    wire: Wire,
    turns: impl IntoIterator<Item = Turn>,
) -> io::Result<()> {
    let (router, _) = prerendered_router(MockServer::builder(wire).turns(turns));
    serve(listener, router, std::future::pending()).await
}

fn prerendered_router(options: MockServerBuilder) -> (Router, Arc<Prerendered>) {
    let server = Arc::new(Prerendered::new(
        options.wire,
        &options.turns,
        options.mode,
        &options.model,
    ));
    let router = Router::new()
        .route(options.wire.route(), post(prerendered::call))
        .fallback(prerendered::not_found)
        .with_state(Arc::clone(&server));
    (router, server)
}

async fn spawn_prerendered(options: MockServerBuilder) -> io::Result<(Running, Arc<Prerendered>)> {
    let (addr, wire) = (options.addr, options.wire);
    let (router, server) = prerendered_router(options);
    Ok((Running::spawn(addr, wire, router).await?, server))
}

/// Request bodies bigger than axum's 2 MB default are normal for long agent conversations.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

async fn serve(
    listener: TcpListener,
    router: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let router = router
        .route(
            "/health",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .layer(DefaultBodyLimit::max(BODY_LIMIT));
    // Small SSE writes must leave at once, not wait for Nagle's algorithm; failing to set the
    // option only adds latency, so it is not worth refusing the connection over.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
}

/// A spawned server task and the means to stop it.
struct Running {
    addr: SocketAddr,
    wire: Wire,
    stop: CancellationToken,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl Running {
    async fn spawn(addr: SocketAddr, wire: Wire, router: Router) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, router, stop.clone().cancelled_owned()));
        Ok(Self {
            addr,
            wire,
            stop,
            task: Some(task),
        })
    }

    fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, self.wire.base_path())
    }

    fn endpoint_url(&self) -> String {
        format!("http://{}{}", self.addr, self.wire.path())
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn not_found_message(wire: Wire, method: &Method, path: &str) -> String {
    format!(
        "mock server: no route for {method} {path}; this server speaks the {} API at POST {}",
        wire.name(),
        wire.path()
    )
}
