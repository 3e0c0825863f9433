//! MCP servers as tool sources, through the official Rust SDK (`rmcp`): connect over stdio (a
//! child process) or streamable HTTP, list the server's tools as descriptors, call them.
//!
//! Protocol revisions (through rmcp 3.9): the stateless 2026-07-28 (`server/discover`, then
//! per-request `_meta`, no session) and the handshake revisions 2024-11-05, 2025-03-26,
//! 2025-06-18 and 2025-11-25 (`initialize`, a session). By default the server's generation is
//! detected ([`McpProtocol::Auto`]); [`McpStdio::protocol`] and [`McpHttp::protocol`] pin one.
//! [`McpServerInfo::protocol_version`] says which revision was agreed.
//!
//! One connection per server, shared by its tools and reused across calls. A stdio server
//! runs in its own process group and is killed with it when the connection goes away (the
//! registry and every tool taken from it dropped, or [`crate::registry::Registry::close`]),
//! so neither the child nor anything it started outlives its registry. A call in flight when
//! its run is cancelled is cancelled at the server too (`notifications/cancelled`).
//!
//! A server's form elicitation during a call pauses the run for a person (see
//! [`crate::run`]'s approvals): in 2026-07-28 the `input_required` result's question is kept
//! with the paused run and the call is made again with `inputResponses` and the echoed
//! `requestState`; in the handshake revisions the server's `elicitation/create` is answered
//! `cancel`, the call's result set aside, and the call made again on resume, where the same
//! question gets the person's answer (a tool with side effects before it asks has them
//! twice). An elicitation while several calls to one server are in flight cannot be told
//! apart, and URL elicitations cannot be handed over: both are declined.
//!
//! A streamable-HTTP server behind OAuth 2.1 is reached with [`McpHttp::oauth`] (see
//! [`super::mcp_oauth`]); one behind a plain bearer token with [`McpHttp::bearer_token_env`].

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, InputRequest as McpInputRequest,
    InputRequiredResult, InputResponses, ProtocolVersion, ResourceContents,
};
use rmcp::service::ClientInitializeError;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, Peer, RoleClient};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tracing::Instrument;

use super::OutputCheck;
use super::http::expand_env;
use crate::message::ContentBlock;
use crate::registry::{McpSource, ToolDescriptor, ToolMode};
use crate::run::{InputAction, InputReply, InputRequest};
use crate::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};

/// How long a server gets to answer the MCP handshake unless told otherwise.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How many of a stdio server's last stderr lines are kept for error messages.
const STDERR_LINES: usize = 20;

/// An MCP server started as a child process speaking MCP on its stdin/stdout.
///
/// ```
/// use agentloop::executor::McpStdio;
/// let server = McpStdio::new("node")
///     .args(["server-everything/dist/index.js", "stdio"])
///     .env("LOG_LEVEL", "warn")
///     .prefix("everything_");
/// ```
#[derive(Debug, Clone)]
pub struct McpStdio {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    current_dir: Option<PathBuf>,
    prefix: Option<String>,
    connect_timeout: Duration,
    protocol: McpProtocol,
}

impl McpStdio {
    /// Run `command` (looked up in `PATH` when it has no `/`).
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            current_dir: None,
            prefix: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            protocol: McpProtocol::Auto,
        }
    }

    /// Add one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Add arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set an environment variable for the server (it inherits ours otherwise).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Run the server in this directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Register the server's tools as `<prefix><name>` (to keep two servers' names apart).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How long the server gets to complete the handshake (default 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Which protocol generation to speak ([`McpProtocol::Auto`] by default).
    pub fn protocol(mut self, protocol: McpProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    pub(crate) fn label(&self) -> String {
        std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// An MCP server reached over streamable HTTP.
#[derive(Clone)]
pub struct McpHttp {
    url: String,
    headers: BTreeMap<String, String>,
    prefix: Option<String>,
    connect_timeout: Duration,
    protocol: McpProtocol,
    oauth: Option<super::McpOAuth>,
}

impl std::fmt::Debug for McpHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.keys().map(String::as_str).collect();
        f.debug_struct("McpHttp")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("prefix", &self.prefix)
            .field("protocol", &self.protocol)
            .field("oauth", &self.oauth)
            .finish_non_exhaustive()
    }
}

impl McpHttp {
    /// The server's MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: BTreeMap::new(),
            prefix: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            protocol: McpProtocol::Auto,
            oauth: None,
        }
    }

    /// Authorize with OAuth 2.1 when connecting (see [`super::mcp_oauth`]): discovery,
    /// registration, a person's consent through `oauth`'s callback unless its store holds
    /// good tokens, and tokens refreshed as they expire.
    pub fn oauth(mut self, oauth: super::McpOAuth) -> Self {
        self.oauth = Some(oauth);
        self
    }

    /// Send a header with every request; the value may reference `${VAR}` (expanded from
    /// the environment when connecting).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Authenticate with `Authorization: Bearer <token>`, the token read from the environment
    /// variable `var` when connecting: it is never kept in this value, so never printed.
    pub fn bearer_token_env(self, var: impl AsRef<str>) -> Self {
        self.header("Authorization", format!("Bearer ${{{}}}", var.as_ref()))
    }

    /// Register the server's tools as `<prefix><name>`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How long the server gets to complete the handshake (default 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Which protocol generation to speak ([`McpProtocol::Auto`] by default).
    pub fn protocol(mut self, protocol: McpProtocol) -> Self {
        self.protocol = protocol;
        self
    }
}

impl McpHttp {
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn name_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }
}

impl McpStdio {
    pub(crate) fn name_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }
}

/// Which generation of the MCP protocol to speak with a server.
///
/// Revisions up to 2025-11-25 open a session with the `initialize` handshake; the 2026-07-28
/// revision is stateless (`server/discover`, then every request carries its protocol version
/// and client details in `_meta`; no session id over HTTP).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum McpProtocol {
    /// Ask with `server/discover` for 2026-07-28; a server that does not know the method (an
    /// older one), or lists only handshake revisions, gets the `initialize` handshake instead
    /// (for 2025-11-25, or the newest it listed; it may answer with an older revision it
    /// speaks). A server that does not answer the discovery within 10 s is treated as older.
    #[default]
    Auto,
    /// Only the stateless 2026-07-28 revision.
    Stateless,
    /// Only the handshake, offering this revision: `2024-11-05`, `2025-03-26`, `2025-06-18` or
    /// `2025-11-25` (the server may answer with an older one it speaks).
    Handshake(String),
}

impl McpProtocol {
    fn lifecycle(&self) -> Result<(ClientLifecycleMode, ClientConfig), String> {
        let config = client_config();
        Ok(match self {
            Self::Auto => (
                ClientLifecycleMode::Auto {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
                },
                config,
            ),
            Self::Stateless => (
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
                config,
            ),
            Self::Handshake(version) => {
                let known = ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .find(|v| v.as_str() == version && v.has_initialize())
                    .ok_or_else(|| {
                        format!(
                            "`{version}` is not an MCP revision with a handshake; use one of {}",
                            ProtocolVersion::KNOWN_VERSIONS
                                .iter()
                                .filter(|v| v.has_initialize())
                                .map(ProtocolVersion::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?;
                (
                    ClientLifecycleMode::Initialize,
                    config.with_protocol_version(known.clone()),
                )
            }
        })
    }
}

/// What connecting to an MCP server added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerInfo {
    /// The server as configured: its command line or URL.
    pub server: String,
    /// The name the server gave in the handshake.
    pub name: Option<String>,
    /// The version the server gave in the handshake.
    pub version: Option<String>,
    /// The registered tool names (prefixed when a prefix was set).
    pub tools: Vec<String>,
    /// The child's process id (stdio servers).
    pub process_id: Option<u32>,
    /// The protocol revision agreed with the server, e.g. `2026-07-28` or `2025-06-18`.
    pub protocol_version: Option<String>,
}

type Service = RunningService<RoleClient, ClientState>;

/// Our side of a session: who we are, and what the server told us.
struct ClientState {
    config: ClientConfig,
    shared: Arc<Shared>,
}

/// What a session's handler shares with its connection.
#[derive(Default)]
struct Shared {
    /// Set by the server's `notifications/tools/list_changed`.
    tools_changed: AtomicBool,
    /// The calls in flight, for the server's `elicitation/create` requests (handshake
    /// revisions): see [`ClientState::create_elicitation`].
    calls: Mutex<Vec<InFlight>>,
    next_call: std::sync::atomic::AtomicU64,
}

/// A `tools/call` in flight: the answer it carries to what it asked before, and what the
/// server asked during it.
struct InFlight {
    id: u64,
    reply: Option<InputReply>,
    asked: Option<InputRequest>,
}

/// A call's entry in [`Shared::calls`], removed when the call ends (or is cancelled).
struct InFlightGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl InFlightGuard {
    fn new(shared: &Arc<Shared>, reply: Option<InputReply>) -> Self {
        let id = shared.next_call.fetch_add(1, Ordering::Relaxed);
        shared.lock_calls().push(InFlight {
            id,
            reply,
            asked: None,
        });
        Self {
            shared: shared.clone(),
            id,
        }
    }

    /// What the server asked during the call, when it did not get an answer.
    fn asked(&self) -> Option<InputRequest> {
        let mut calls = self.shared.lock_calls();
        calls
            .iter_mut()
            .find(|c| c.id == self.id)
            .and_then(|c| c.asked.take())
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.shared.lock_calls().retain(|c| c.id != self.id);
    }
}

impl Shared {
    fn lock_calls(&self) -> std::sync::MutexGuard<'_, Vec<InFlight>> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer to a form elicitation of the handshake revisions. The request does not say
    /// which call it belongs to, so it is attributed only when one call is in flight; with
    /// none or several it is declined. The call's stored answer is given when it answers this
    /// very question; otherwise the question is kept for the run to pause on and the server
    /// gets `cancel` (the call is made again, with the answer, once the person answered).
    fn elicit(&self, message: String, schema: Value) -> ElicitResult {
        let mut calls = self.lock_calls();
        let [call] = calls.as_mut_slice() else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        if let Some(reply) = call
            .reply
            .take_if(|r| r.request.message == message && r.request.schema == schema)
        {
            return elicit_result(&reply);
        }
        call.asked.get_or_insert(InputRequest {
            message,
            schema,
            resume: Value::Null,
        });
        ElicitResult::new(ElicitationAction::Cancel)
    }
}

fn elicit_result(reply: &InputReply) -> ElicitResult {
    let action = match reply.action {
        InputAction::Accept => ElicitationAction::Accept,
        InputAction::Decline => ElicitationAction::Decline,
        InputAction::Cancel => ElicitationAction::Cancel,
    };
    let result = ElicitResult::new(action);
    match (&reply.content, reply.action) {
        (Some(content), InputAction::Accept) => result.with_content(content.clone()),
        _ => result,
    }
}

impl rmcp::ClientHandler for ClientState {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.shared.tools_changed.store(true, Ordering::Release);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Ok(match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
                self.shared.elicit(message, schema)
            }
            // A URL to open is not something a paused run can hand over: declined.
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

/// One live MCP session.
pub(crate) struct McpConnection {
    label: String,
    peer: Peer<RoleClient>,
    /// Held so that dropping the connection ends the session (and kills a stdio child).
    service: tokio::sync::Mutex<Option<Service>>,
    process_id: Option<u32>,
    /// Shared with the session's handler: list changes and elicitations.
    shared: Arc<Shared>,
}

impl Drop for McpConnection {
    fn drop(&mut self) {
        self.kill_process_group();
    }
}

fn client_config() -> ClientConfig {
    // Form elicitation: a server's question pauses the run for a person to answer.
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation =
        Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
    ClientConfig::new(
        capabilities,
        Implementation::new("agentloop", env!("CARGO_PKG_VERSION")),
    )
}

/// Why a connection attempt failed, and whether another generation is worth a try.
struct Failed {
    reason: String,
    /// In [`McpProtocol::Auto`], a server that answered `server/discover` without 2026-07-28
    /// but with a handshake revision (an rmcp server narrowed to older revisions does): the
    /// handshake at that revision.
    retry: Option<McpProtocol>,
}

impl Failed {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            retry: None,
        }
    }
}

/// Open the session in the configured generation, within the connect timeout.
async fn open<T, E, A>(
    protocol: &McpProtocol,
    timeout: Duration,
    transport: T,
    shared: &Arc<Shared>,
) -> Result<Service, Failed>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let (lifecycle, config) = protocol.lifecycle().map_err(Failed::new)?;
    let client = ClientState {
        config,
        shared: shared.clone(),
    };
    match tokio::time::timeout(timeout, client.serve_with_lifecycle(transport, lifecycle)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(error)) if error.is_authorization_required() => Err(Failed::new(format!(
            "the server requires authorization (HTTP 401{}): give it a bearer token with `McpHttp::bearer_token_env`, or the header it expects with `McpHttp::header`",
            error
                .auth_challenge()
                .map(|c| format!(", `WWW-Authenticate: {c}`"))
                .unwrap_or_default()
        ))),
        Ok(Err(error)) => {
            let retry = match (&error, protocol) {
                (
                    ClientInitializeError::NoCompatibleProtocolVersion {
                        server_supported, ..
                    },
                    McpProtocol::Auto,
                ) => server_supported
                    .iter()
                    .filter(|v| v.has_initialize())
                    .max_by(|a, b| a.as_str().cmp(b.as_str()))
                    .map(|v| McpProtocol::Handshake(v.as_str().to_owned())),
                _ => None,
            };
            Err(Failed {
                reason: format!("the MCP handshake failed: {error}"),
                retry,
            })
        }
        Err(_) => Err(Failed::new(format!(
            "the server did not complete the MCP handshake within {} ms",
            timeout.as_millis()
        ))),
    }
}

impl McpConnection {
    pub(crate) async fn connect_stdio(spec: &McpStdio) -> Result<Self, String> {
        match Self::connect_stdio_as(spec, &spec.protocol).await {
            Err(Failed {
                retry: Some(protocol),
                ..
            }) => Self::connect_stdio_as(spec, &protocol).await,
            other => other,
        }
        .map_err(|f| f.reason)
    }

    async fn connect_stdio_as(spec: &McpStdio, protocol: &McpProtocol) -> Result<Self, Failed> {
        let label = spec.label();
        let mut command = tokio::process::Command::new(&spec.command);
        command.args(&spec.args).envs(&spec.env);
        if let Some(dir) = &spec.current_dir {
            command.current_dir(dir);
        }
        let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
        // Killed on drop even when no runtime is left to run a graceful shutdown; and, in a
        // process group of its own, together with anything it started (`npx`, `sh -c`).
        wrapped.wrap(process_wrap::tokio::KillOnDrop);
        #[cfg(unix)]
        wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
        let (transport, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failed::new(format!("could not start `{}`: {e}", spec.command)))?;
        let process_id = transport.id();
        let stderr_tail = stderr.map(read_stderr);
        let shared = Arc::new(Shared::default());
        let failed = match open(protocol, spec.connect_timeout, transport, &shared).await {
            Ok(service) => return Ok(Self::new(label, service, process_id, shared)),
            Err(failed) => failed,
        };
        if failed.retry.is_some() {
            // A server that is fine, only older: this child goes, a new one gets the handshake.
            kill_group(process_id);
            return Err(failed);
        }
        let tail = match stderr_tail {
            Some((lines, reader)) => {
                // A server that died has closed stderr; give the reader a moment to drain
                // it so the error can quote it.
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                lines
                    .lock()
                    .map(|l| l.iter().cloned().collect::<Vec<_>>())
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        let reason = failed.reason;
        Err(Failed::new(if tail.is_empty() {
            reason
        } else {
            format!("{reason}; its stderr ended with:\n{}", tail.join("\n"))
        }))
    }

    pub(crate) async fn connect_http(spec: &McpHttp) -> Result<Self, String> {
        let mut headers = std::collections::HashMap::new();
        for (name, template) in &spec.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a valid header name"))?;
            let (value, _) = expand_env(template, |var| std::env::var(var).ok())
                .map_err(|e| format!("header `{name}`: {e}"))?;
            let mut value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                format!("header `{name}`: the value contains characters not allowed in a header")
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        let config = || {
            StreamableHttpClientTransportConfig::with_uri(spec.url.as_str())
                .custom_headers(headers.clone())
        };
        let changed = Arc::new(Shared::default());
        let service = match &spec.oauth {
            None => {
                let transport = || StreamableHttpClientTransport::from_config(config());
                match open(&spec.protocol, spec.connect_timeout, transport(), &changed).await {
                    Err(Failed {
                        retry: Some(protocol),
                        ..
                    }) => open(&protocol, spec.connect_timeout, transport(), &changed).await,
                    other => other,
                }
            }
            Some(oauth) => {
                let client = oauth.client(&spec.url).await?;
                let transport =
                    || StreamableHttpClientTransport::with_client(client.clone(), config());
                match open(&spec.protocol, spec.connect_timeout, transport(), &changed).await {
                    Err(Failed {
                        retry: Some(protocol),
                        ..
                    }) => open(&protocol, spec.connect_timeout, transport(), &changed).await,
                    other => other,
                }
            }
        }
        .map_err(|f| f.reason)?;
        Ok(Self::new(spec.url.clone(), service, None, changed))
    }

    fn new(label: String, service: Service, process_id: Option<u32>, shared: Arc<Shared>) -> Self {
        Self {
            label,
            peer: service.peer().clone(),
            service: tokio::sync::Mutex::new(Some(service)),
            process_id,
            shared,
        }
    }

    /// Whether the tools should be listed again: the server sent
    /// `notifications/tools/list_changed` since the last call (a session of a handshake
    /// revision), or it is stateless (2026-07-28 sends that notification only on a
    /// `subscriptions/listen` stream, which is not opened, so every refresh asks).
    pub(crate) fn tools_changed_pending(&self) -> bool {
        self.shared.tools_changed.load(Ordering::Acquire)
    }

    pub(crate) fn take_tools_changed(&self) -> bool {
        let announced = self.shared.tools_changed.swap(false, Ordering::AcqRel);
        let stateless = self
            .peer
            .peer_info()
            .is_some_and(|p| !p.protocol_version.has_initialize());
        announced || stateless
    }

    /// Call `tool`, with the answer to what it asked before when it asked. A question from the
    /// server (a form elicitation) that has no answer yet ends the call with
    /// [`ToolError::InputRequired`], so the run pauses for a person.
    async fn call(
        &self,
        tool: &str,
        arguments: rmcp::model::JsonObject,
        reply: Option<InputReply>,
    ) -> Result<CallToolResult, ToolError> {
        let failed = |e: rmcp::ServiceError| {
            ToolError::Failed(format!(
                "calling `{tool}` on MCP server `{}` failed: {e}",
                self.label
            ))
        };
        let mut request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let stateless = self
            .peer
            .peer_info()
            .is_some_and(|p| !p.protocol_version.has_initialize());
        if !stateless {
            let call = InFlightGuard::new(&self.shared, reply);
            let response = self.peer.call_tool_once(request).await.map_err(failed)?;
            if let Some(asked) = call.asked() {
                // The server was told `cancel`: what it answered to that is not the result.
                return Err(ToolError::InputRequired(Box::new(asked)));
            }
            return complete(tool, response);
        }
        if let Some(reply) = &reply {
            let (responses, state) = mrtr_retry(reply);
            request.input_responses = responses;
            request.request_state = state;
        }
        for round in 0..rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            let response = self
                .peer
                .call_tool_once(request.clone())
                .await
                .map_err(failed)?;
            let CallToolResponse::InputRequired(needed) = response else {
                return complete(tool, response);
            };
            match mrtr_question(tool, needed)? {
                Mrtr::Ask(asked) => return Err(ToolError::InputRequired(Box::new(asked))),
                Mrtr::Retry(responses, state) => {
                    request.input_responses = responses;
                    request.request_state = state;
                    if request.input_responses.is_none() {
                        // Only state: the server is working; back off a little each round.
                        let wait = 50u64 << round.min(2);
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                    }
                }
            }
        }
        Err(ToolError::Failed(format!(
            "MCP tool `{tool}` still asked for more input after {} rounds",
            rmcp::model::DEFAULT_MRTR_MAX_ROUNDS
        )))
    }

    /// The server's tools as descriptors (registered as `<prefix><name>`).
    pub(crate) async fn descriptors(
        &self,
        prefix: Option<&str>,
    ) -> Result<Vec<ToolDescriptor>, String> {
        let tools = self
            .peer
            .list_all_tools()
            .await
            .map_err(|e| format!("listing the server's tools failed: {e}"))?;
        Ok(tools
            .into_iter()
            .map(|tool| ToolDescriptor {
                name: format!("{}{}", prefix.unwrap_or_default(), tool.name),
                description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
                output_schema: tool.output_schema.map(|s| Value::Object((*s).clone())),
                mode: ToolMode::Mcp,
                mock: None,
                http: None,
                mcp: Some(McpSource {
                    server: self.label.clone(),
                    tool: tool.name.into_owned(),
                }),
                timeout_ms: None,
                needs_approval: false,
            })
            .collect())
    }

    pub(crate) fn info(&self, tools: Vec<String>) -> McpServerInfo {
        let implementation = self.peer.peer_info().and_then(|p| p.server_info.clone());
        McpServerInfo {
            server: self.label.clone(),
            name: implementation.as_ref().map(|i| i.name.clone()),
            version: implementation.map(|i| i.version),
            tools,
            process_id: self.process_id,
            protocol_version: self
                .peer
                .peer_info()
                .map(|p| p.protocol_version.as_str().to_owned()),
        }
    }

    /// End the session: stdin closed, then (for a child that does not exit) SIGTERM and
    /// SIGKILL, as the MCP stdio shutdown sequence says; then whatever the child started and
    /// left behind in its process group. Later calls fail cleanly.
    pub(crate) async fn close(&self) {
        let service = self.service.lock().await.take();
        if let Some(service) = service {
            let _ = service.cancel().await;
        }
        self.kill_process_group();
    }

    /// SIGKILL to a stdio server's process group. The rmcp transport stops only the child it
    /// started: a server that exits on its own when stdin closes leaves the processes it
    /// started (a shell's background job, `npx`'s node) running, so the group is killed
    /// whatever the child did. The child leads the group, so its pid is the group id; a group
    /// whose members are all gone is an error we ignore.
    fn kill_process_group(&self) {
        kill_group(self.process_id);
    }
}

/// SIGKILL to the process group led by `pid` (see [`McpConnection::kill_process_group`]).
fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Keep the last lines a child writes to stderr (and log them), so a failed start can say why.
fn read_stderr(
    stderr: tokio::process::ChildStderr,
) -> (Arc<Mutex<VecDeque<String>>>, tokio::task::JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
    let kept = lines.clone();
    // Reading must go on for the child's whole life, or a chatty child blocks on a full pipe.
    let reader = tokio::spawn(async move {
        let mut stderr = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = stderr.next_line().await {
            tracing::debug!(target: "agentloop::mcp", "server stderr: {line}");
            if let Ok(mut kept) = kept.lock() {
                if kept.len() == STDERR_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        }
    });
    (lines, reader)
}

/// Calls one tool of an MCP server over the shared connection.
pub struct McpExecutor {
    connection: Arc<McpConnection>,
    tool: String,
    output: Option<Arc<OutputCheck>>,
}

impl std::fmt::Debug for McpExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpExecutor")
            .field("server", &self.connection.label)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl McpExecutor {
    pub(crate) fn new(
        connection: Arc<McpConnection>,
        tool: String,
        output: Option<Arc<OutputCheck>>,
    ) -> Self {
        Self {
            connection,
            tool,
            output,
        }
    }
}

impl ToolHandler for McpExecutor {
    fn call(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let connection = self.connection.clone();
        let tool = self.tool.clone();
        let output = self.output.clone();
        let reply = ctx.input_reply().cloned();
        // The MCP conventions' client span, under the call's `execute_tool` span.
        let span = tracing::info_span!(
            "tools/call",
            otel.name = format!("tools/call {tool}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool.as_str(),
        );
        let call = async move {
            let arguments = match input {
                Value::Object(map) => map,
                Value::Null => Default::default(),
                other => {
                    return Err(ToolError::Failed(format!(
                        "MCP tool arguments must be an object, got {other}"
                    )));
                }
            };
            let result = connection.call(&tool, arguments, reply).await?;
            convert_result(result, output.as_deref())
        };
        let ended = span.clone();
        Box::pin(
            async move {
                let result = call.await;
                if result.is_err() {
                    let span = ended;
                    span.record("otel.status_code", "error");
                    span.record("error.type", "tool_error");
                }
                result
            }
            .instrument(span),
        )
    }
}

/// A finished `tools/call`, or why it is not one.
fn complete(tool: &str, response: CallToolResponse) -> Result<CallToolResult, ToolError> {
    match response {
        CallToolResponse::Complete(result) => Ok(result),
        _ => Err(ToolError::Failed(format!(
            "MCP tool `{tool}` did not return a result: it started a task, which agentloop does not support"
        ))),
    }
}

/// What to do with an `input_required` result (2026-07-28, multi round-trip requests).
enum Mrtr {
    /// Pause for a person: the first form elicitation.
    Ask(InputRequest),
    /// Call again with these responses and this state, without asking anyone.
    Retry(Option<InputResponses>, Option<String>),
}

/// Where a paused 2026-07-28 call resumes: the elicitation's key, the other requests' keys
/// (declined) and the server's opaque state, kept in [`InputRequest::resume`].
#[derive(serde::Serialize, serde::Deserialize)]
struct MrtrResume {
    key: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    others: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_state: Option<String>,
}

/// The first form elicitation of an `input_required` result becomes a question for a
/// person; other requests are declined with it (a URL elicitation) or refused (sampling and
/// roots, which agentloop does not offer). A result with only state is retried as it is.
fn mrtr_question(tool: &str, needed: InputRequiredResult) -> Result<Mrtr, ToolError> {
    let requests = needed.input_requests.unwrap_or_default();
    let mut form = None;
    let mut others = Vec::new();
    for (key, request) in requests {
        match request {
            McpInputRequest::Elicitation(elicit) => match elicit.params {
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } if form.is_none() => {
                    let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
                    form = Some((key, message, schema));
                }
                _ => others.push(key),
            },
            _ => {
                return Err(ToolError::Failed(format!(
                    "MCP tool `{tool}` asked the client for sampling or roots, which agentloop does not offer"
                )));
            }
        }
    }
    let Some((key, message, schema)) = form else {
        if others.is_empty() {
            return Ok(Mrtr::Retry(None, needed.request_state));
        }
        let declined = others
            .into_iter()
            .map(|key| (key, serde_json::json!({"action": "decline"})))
            .collect();
        return Ok(Mrtr::Retry(Some(declined), needed.request_state));
    };
    let resume = MrtrResume {
        key,
        others,
        request_state: needed.request_state,
    };
    Ok(Mrtr::Ask(InputRequest {
        message,
        schema,
        resume: serde_json::to_value(resume).unwrap_or(Value::Null),
    }))
}

/// The retry of a 2026-07-28 call that asked: the person's answer under the question's key,
/// the other requests declined, and the server's state echoed.
fn mrtr_retry(reply: &InputReply) -> (Option<InputResponses>, Option<String>) {
    let Ok(resume) = serde_json::from_value::<MrtrResume>(reply.request.resume.clone()) else {
        return (None, None);
    };
    let mut responses = InputResponses::new();
    let answer = serde_json::to_value(elicit_result(reply)).unwrap_or(Value::Null);
    responses.insert(resume.key, answer);
    for key in resume.others {
        responses.insert(key, serde_json::json!({"action": "decline"}));
    }
    (Some(responses), resume.request_state)
}

/// An MCP result as tool output: `isError` becomes an error result; structured content is
/// checked against the output schema and kept beside the content blocks, which become text and
/// images for the model (the structured value's JSON text when there are none).
fn convert_result(
    result: CallToolResult,
    output: Option<&OutputCheck>,
) -> Result<ToolOutput, ToolError> {
    let blocks: Vec<ContentBlock> = result.content.into_iter().map(convert_block).collect();
    if result.is_error == Some(true) {
        let text = blocks
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect::<Vec<_>>()
            .join("\n");
        return Err(ToolError::Failed(if text.is_empty() {
            "the MCP tool reported an error without a message".to_owned()
        } else {
            text
        }));
    }
    if let (Some(check), Some(structured)) = (output, &result.structured_content) {
        check.check(structured)?;
    }
    let content = match blocks.as_slice() {
        [] => ToolOutput::json(result.structured_content.clone().unwrap_or(Value::Null)),
        [ContentBlock::Text { text }] => ToolOutput::text(text.clone()),
        _ => ToolOutput::blocks(blocks),
    };
    Ok(match result.structured_content {
        Some(structured) => content.with_structured(structured),
        None => content,
    })
}

/// An MCP content block as one the providers take: text and images as they are, an embedded
/// image as an image; what no provider takes in a tool result (audio, other binary resources,
/// links) as text that says what it was and where to find it.
fn convert_block(block: rmcp::model::ContentBlock) -> ContentBlock {
    use rmcp::model::ContentBlock as Mcp;
    match block {
        Mcp::Text(text) => ContentBlock::text(text.text),
        Mcp::Image(image) => ContentBlock::image_base64(image.mime_type, image.data),
        Mcp::Audio(audio) => ContentBlock::text(format!(
            "[audio content of type {}, {} bytes]",
            audio.mime_type,
            base64_len(&audio.data)
        )),
        Mcp::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => ContentBlock::text(text),
            ResourceContents::BlobResourceContents {
                mime_type: Some(mime_type),
                blob,
                ..
            } if mime_type.starts_with("image/") => ContentBlock::image_base64(mime_type, blob),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => ContentBlock::text(format!(
                "[binary resource {uri}{}, {} bytes]",
                mime_type.map(|m| format!(" ({m})")).unwrap_or_default(),
                base64_len(&blob)
            )),
            other => ContentBlock::text(serde_json::to_string(&other).unwrap_or_default()),
        },
        Mcp::ResourceLink(link) => {
            let mut text = format!("[resource link {}: {}", link.name, link.uri);
            if let Some(mime_type) = &link.mime_type {
                text.push_str(&format!(" ({mime_type})"));
            }
            if let Some(description) = &link.description {
                text.push_str(&format!(": {description}"));
            }
            text.push(']');
            ContentBlock::text(text)
        }
        // Kinds newer than this code: their JSON is the most faithful text we can give.
        other => ContentBlock::text(serde_json::to_string(&other).unwrap_or_default()),
    }
}

/// The decoded size of base64 text, without decoding it.
fn base64_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, ContentBlock as Mcp, Resource, ResourceContents};
    use serde_json::json;

    use super::*;

    // Shapes from MCP 2025-11-25 "Tools > Tool Result": image, audio, resource link and
    // embedded resource content, and structuredContent beside them.
    #[test]
    fn every_content_kind_maps_to_what_providers_take_and_structured_content_stays() {
        let mut link = Resource::new("file:///data/report.csv", "report.csv");
        link.mime_type = Some("text/csv".to_owned());
        link.description = Some("the full table".to_owned());
        let mut result = CallToolResult::success(vec![
            Mcp::text("summary"),
            Mcp::image("iVBORw0KGgo=", "image/png"),
            Mcp::audio("UklGRg==", "audio/wav"),
            Mcp::resource(ResourceContents::BlobResourceContents {
                uri: "file:///chart.png".to_owned(),
                mime_type: Some("image/png".to_owned()),
                blob: "AAAA".to_owned(),
                meta: None,
            }),
            Mcp::resource(ResourceContents::BlobResourceContents {
                uri: "file:///data.bin".to_owned(),
                mime_type: Some("application/octet-stream".to_owned()),
                blob: "AAECAw==".to_owned(),
                meta: None,
            }),
            Mcp::resource_link(link),
        ]);
        result.structured_content = Some(json!({"rows": 3}));
        let output = convert_result(result, None).unwrap();
        assert_eq!(output.structured(), Some(&json!({"rows": 3})));
        assert_eq!(
            output.0,
            crate::ToolResultContent::Blocks(vec![
                ContentBlock::text("summary"),
                ContentBlock::image_base64("image/png", "iVBORw0KGgo="),
                ContentBlock::text("[audio content of type audio/wav, 4 bytes]"),
                ContentBlock::image_base64("image/png", "AAAA"),
                ContentBlock::text(
                    "[binary resource file:///data.bin (application/octet-stream), 4 bytes]"
                ),
                ContentBlock::text(
                    "[resource link report.csv: file:///data/report.csv (text/csv): the full table]"
                ),
            ])
        );
    }

    #[test]
    fn a_structured_only_result_is_its_json_text_and_its_value() {
        let output = convert_result(CallToolResult::structured(json!({"sum": 5})), None).unwrap();
        assert_eq!(output.0.to_text(), r#"{"sum":5}"#);
        assert_eq!(output.structured(), Some(&json!({"sum": 5})));
    }
}
