//! A small MCP server for tests, built on the official Rust SDK (`rmcp`): run it in-process
//! over streamable HTTP ([`serve_http`]) or as the `agentloop-mcp-test-server` binary over
//! stdio.
//!
//! Tools: `echo {message}` → `"Echo: <message>"`; `add {a, b}` → structured `{"sum": a + b}`
//! (with an output schema); `fail {reason}` → an `isError` result saying `failed: <reason>`;
//! `sleep {ms}` → `slept <ms> ms` after that long (for cancellation tests); `toggle_extra`
//! adds (or removes again) a tool `extra {message}` → `Extra: <message>` and sends
//! `notifications/tools/list_changed` (for refresh tests). [`TestMcpServer::eliciting`] adds
//! `greet`, which asks the user's name with a
//! form elicitation (`elicitation/create` in the handshake revisions, an `input_required`
//! result in 2026-07-28) → `Hello, <name>!`, `You declined.` or `You cancelled.`.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::handler::server::tool::InputResponses;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, DiscoverRequestMethod, DiscoverResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    Implementation, InputRequest, InputRequiredResult, ProtocolVersion, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to echo.
    pub message: String,
}

/// Arguments of `add`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// Left operand.
    pub a: i64,
    /// Right operand.
    pub b: i64,
}

/// Result of `add`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: i64,
}

/// Arguments of `fail`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FailArgs {
    /// Why it fails.
    pub reason: String,
}

/// Arguments of `sleep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// How long to wait, in milliseconds.
    pub ms: u64,
}

/// The test server's tools.
#[derive(Debug, Clone)]
pub struct TestMcpServer {
    tool_router: ToolRouter<Self>,
    versions: Vec<ProtocolVersion>,
    discover: bool,
    /// Whether `extra` is listed; shared by every session of one server.
    extra: Arc<AtomicBool>,
    /// Whether `greet` is listed.
    greet: bool,
}

impl Default for TestMcpServer {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_router]
impl TestMcpServer {
    /// A server with the five tools.
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            versions: ProtocolVersion::KNOWN_VERSIONS.to_vec(),
            discover: true,
            extra: Arc::default(),
            greet: false,
        }
    }

    /// This server with the tool `greet` too, which asks for the user's name.
    pub fn eliciting(self) -> Self {
        Self {
            greet: true,
            ..self
        }
    }

    /// A server that speaks only these protocol revisions, as rmcp 3.9 does when narrowed:
    /// `server/discover` is answered with "unsupported protocol version" and the list when
    /// 2026-07-28 is not among them, and `initialize` is refused when only 2026-07-28 is.
    pub fn speaking(versions: &[ProtocolVersion]) -> Self {
        Self {
            versions: versions.to_vec(),
            ..Self::new()
        }
    }

    /// A server from before 2026-07-28 that speaks these handshake revisions and does not
    /// know `server/discover` at all ("method not found", as the older SDKs answer).
    pub fn predating_discover(versions: &[ProtocolVersion]) -> Self {
        Self {
            versions: versions.to_vec(),
            discover: false,
            ..Self::new()
        }
    }

    /// [`TestMcpServer::speaking`] the comma-separated revisions of
    /// `$AGENTLOOP_TEST_MCP_PROTOCOLS` ([`TestMcpServer::predating_discover`] them when
    /// `$AGENTLOOP_TEST_MCP_NO_DISCOVER` is set), or every revision when it is unset;
    /// [`TestMcpServer::eliciting`] when `$AGENTLOOP_TEST_MCP_ELICIT` is set.
    pub fn from_env() -> Self {
        let server = Self::from_env_protocols();
        if std::env::var_os("AGENTLOOP_TEST_MCP_ELICIT").is_some() {
            server.eliciting()
        } else {
            server
        }
    }

    fn from_env_protocols() -> Self {
        let Ok(list) = std::env::var("AGENTLOOP_TEST_MCP_PROTOCOLS") else {
            return Self::new();
        };
        let versions: Vec<ProtocolVersion> = list
            .split(',')
            .filter_map(|v| serde_json::from_value(serde_json::json!(v.trim())).ok())
            .collect();
        if std::env::var_os("AGENTLOOP_TEST_MCP_NO_DISCOVER").is_some() {
            Self::predating_discover(&versions)
        } else {
            Self::speaking(&versions)
        }
    }

    #[tool(description = "Echo the message back")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        format!("Echo: {}", args.message)
    }

    #[tool(description = "Add two integers")]
    async fn add(&self, Parameters(args): Parameters<AddArgs>) -> Json<Sum> {
        Json(Sum {
            sum: args.a + args.b,
        })
    }

    #[tool(description = "Always fails with the given reason")]
    async fn fail(&self, Parameters(args): Parameters<FailArgs>) -> Result<String, String> {
        Err(format!("failed: {}", args.reason))
    }

    #[tool(description = "Add the tool `extra`, or remove it when it is there")]
    async fn toggle_extra(&self, peer: Peer<RoleServer>) -> String {
        let now = !self.extra.fetch_xor(true, Ordering::AcqRel);
        let _ = peer.notify_tool_list_changed().await;
        format!("extra is {}", if now { "listed" } else { "gone" })
    }

    /// The tools listed now.
    fn router(&self) -> ToolRouter<Self> {
        let mut router = self.tool_router.clone();
        if self.greet {
            router += Self::greet_router();
        }
        if self.extra.load(Ordering::Acquire) {
            router += Self::extra_router();
        }
        router
    }

    #[tool(description = "Wait, then say how long")]
    async fn sleep(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(std::time::Duration::from_millis(args.ms)).await;
        format!("slept {} ms", args.ms)
    }
}

#[tool_router(router = greet_router)]
impl TestMcpServer {
    #[tool(description = "Ask the user's name, then greet them")]
    async fn greet(
        &self,
        context: RequestContext<RoleServer>,
        InputResponses(responses): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        let schema = ElicitationSchema::builder()
            .required_string("name")
            .build()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "What is your name?".to_owned(),
            requested_schema: schema,
        };
        let stateless = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        let answer: ElicitResult = if stateless {
            // 2026-07-28: ask in the result; the client calls again with the answer.
            let Some(answer) = responses.and_then(|mut r| r.remove("name")) else {
                let mut requests = rmcp::model::InputRequests::new();
                requests.insert(
                    "name".to_owned(),
                    InputRequest::Elicitation(ElicitRequest::new(params)),
                );
                return Ok(InputRequiredResult::from_input_requests(requests).into());
            };
            serde_json::from_value(answer)
                .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
        } else {
            context
                .peer
                .create_elicitation(params)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        };
        let text = match answer.action {
            ElicitationAction::Accept => format!(
                "Hello, {}!",
                answer
                    .content
                    .as_ref()
                    .and_then(|c| c["name"].as_str())
                    .unwrap_or("?")
            ),
            ElicitationAction::Decline => "You declined.".to_owned(),
            _ => "You cancelled.".to_owned(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tool_router(router = extra_router)]
impl TestMcpServer {
    #[tool(description = "A tool that comes and goes")]
    async fn extra(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        format!("Extra: {}", args.message)
    }
}

#[tool_handler(router = self.router())]
impl ServerHandler for TestMcpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("agentloop-test-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let mut versions = self.versions.clone();
        if !self.discover {
            // Only so that rmcp's per-request version check lets `server/discover` through to
            // `discover` below, which answers as a server that predates it.
            versions.push(ProtocolVersion::V_2026_07_28);
        }
        Cow::Owned(versions)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        if !self.discover {
            return Err(ErrorData::method_not_found::<DiscoverRequestMethod>());
        }
        Ok(DiscoverResult::from_server_info(
            self.versions.clone(),
            self.get_info(),
        ))
    }
}

/// Serve the test server on this process's stdin/stdout until the client disconnects.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running = TestMcpServer::from_env()
        .serve(rmcp::transport::stdio())
        .await?;
    running.waiting().await?;
    Ok(())
}

/// The test server running in-process over streamable HTTP; stopped when dropped.
#[derive(Debug)]
pub struct McpHttpServer {
    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    cancel: CancellationToken,
}

impl Drop for McpHttpServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Start the test server over streamable HTTP on 127.0.0.1 (a free port).
pub async fn serve_http() -> std::io::Result<McpHttpServer> {
    serve_http_with(TestMcpServer::new()).await
}

/// Start this test server over streamable HTTP on 127.0.0.1 (a free port).
pub async fn serve_http_with(server: TestMcpServer) -> std::io::Result<McpHttpServer> {
    let cancel = CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(cancel.child_token());
    let service: StreamableHttpService<TestMcpServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop = cancel.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await;
    });
    Ok(McpHttpServer {
        url: format!("http://{addr}/mcp"),
        cancel,
    })
}
