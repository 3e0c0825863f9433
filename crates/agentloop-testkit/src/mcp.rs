//! A small MCP server for tests, built on the official Rust SDK (`rmcp`): run it in-process
//! over streamable HTTP ([`serve_http`]) or as the `agentloop-mcp-test-server` binary over
//! stdio.
//!
//! Tools: `echo {message}` → `"Echo: <message>"`; `add {a, b}` → structured `{"sum": a + b}`
//! (with an output schema); `fail {reason}` → an `isError` result saying `failed: <reason>`;
//! `sleep {ms}` → `slept <ms> ms` after that long (for cancellation tests).

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
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
}

impl Default for TestMcpServer {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_router]
impl TestMcpServer {
    /// A server with the four tools.
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
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

    #[tool(description = "Wait, then say how long")]
    async fn sleep(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(std::time::Duration::from_millis(args.ms)).await;
        format!("slept {} ms", args.ms)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestMcpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("agentloop-test-mcp", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Serve the test server on this process's stdin/stdout until the client disconnects.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running = TestMcpServer::new().serve(rmcp::transport::stdio()).await?;
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
    let cancel = CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(cancel.child_token());
    let service: StreamableHttpService<TestMcpServer, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(TestMcpServer::new()), Default::default(), config);
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
