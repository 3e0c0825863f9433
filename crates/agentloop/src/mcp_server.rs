//! agentloop as an MCP server: a [`Registry`]'s tools (mock, HTTP, function tools bound in
//! Rust, even the tools of MCP servers it is connected to) offered to any MCP client over stdio
//! or streamable HTTP, through the official Rust SDK (`rmcp`).
//!
//! Each tool is listed with its input schema and, when its descriptor has one of type
//! `object`, its output schema (MCP requires structured results to be objects). A result whose
//! text is a JSON object is returned both as text and as `structuredContent`; a failing tool is
//! an `isError` result whose text says why, so the calling model can read it.
//!
//! Protocol revisions: the server answers the `initialize` handshake of 2024-11-05 to
//! 2025-11-25 clients (over HTTP with a session id) and the stateless `server/discover` and
//! per-request metadata of 2026-07-28 clients, as rmcp 3.9 implements them.
//!
//! ```no_run
//! use agentloop::mcp_server::McpServer;
//! use agentloop::registry::Registry;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::load_dir("tools")?;
//! // In your own axum app:
//! let app = axum::Router::new().nest_service("/mcp", McpServer::new(registry).http_service());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::message::{ContentBlock, ImageSource, ToolResultContent};
use crate::registry::Registry;
use crate::tool::ToolError;

/// Errors of serving a registry over MCP.
#[derive(Debug, thiserror::Error)]
pub enum McpServeError {
    /// The client could not complete the MCP handshake.
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    /// The connection failed while serving.
    #[error("serving MCP failed: {0}")]
    Serve(String),
    /// Binding or accepting on the HTTP listener failed.
    #[error("the MCP HTTP server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves a [`Registry`]'s tools as an MCP server.
#[derive(Clone)]
pub struct McpServer {
    handler: McpHandler,
    allowed_hosts: Option<Vec<String>>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("registry", &self.handler.registry)
            .field("name", &self.handler.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Serve these tools (named `agentloop` with this crate's version until
    /// [`McpServer::name`] says otherwise).
    pub fn new(registry: impl Into<Arc<Registry>>) -> Self {
        Self {
            handler: McpHandler {
                registry: registry.into(),
                name: "agentloop".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                page_size: None,
            },
            allowed_hosts: None,
            cancel: CancellationToken::new(),
        }
    }

    /// The server name and version clients see.
    pub fn name(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.handler.name = name.into();
        self.handler.version = version.into();
        self
    }

    /// List at most `size` tools per `tools/list` page (all on one page by default).
    pub fn page_size(mut self, size: usize) -> Self {
        self.handler.page_size = Some(size.max(1));
        self
    }

    /// The `Host` headers the HTTP service accepts (default: `localhost`, `127.0.0.1` and
    /// `::1`, against DNS rebinding); set your public host names when serving beyond loopback.
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = Some(hosts.into_iter().map(Into::into).collect());
        self
    }

    /// Stop serving when this token is cancelled (open HTTP sessions end too).
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Serve one client on the process's stdin and stdout until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        self.serve_io(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serve one client speaking newline-delimited JSON-RPC on a reader and a writer (a pipe,
    /// a socket) until it disconnects or the server is cancelled.
    pub async fn serve_io<R, W>(self, reader: R, writer: W) -> Result<(), McpServeError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let running = self
            .handler
            .serve_with_ct((reader, writer), self.cancel.child_token())
            .await
            .map_err(|e| McpServeError::Handshake(e.to_string()))?;
        running
            .waiting()
            .await
            .map(drop)
            .map_err(|e| McpServeError::Serve(e.to_string()))
    }

    /// The streamable HTTP endpoint as a tower service, to mount in an axum app with
    /// `Router::nest_service("/mcp", ...)`.
    pub fn http_service(&self) -> StreamableHttpService<McpHandler, LocalSessionManager> {
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(self.cancel.child_token());
        if let Some(hosts) = &self.allowed_hosts {
            config = config.with_allowed_hosts(hosts.clone());
        }
        let handler = self.handler.clone();
        StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// An axum router with the MCP endpoint at `/mcp`.
    pub fn router(&self) -> axum::Router {
        axum::Router::new().nest_service("/mcp", self.http_service())
    }

    /// Serve the endpoint `/mcp` on `listener` until the server is cancelled.
    pub async fn serve_http(self, listener: tokio::net::TcpListener) -> Result<(), McpServeError> {
        let router = self.router();
        let stop = self.cancel.clone();
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await?;
        Ok(())
    }
}

/// The rmcp handler behind [`McpServer`]: lists and calls the registry's tools.
#[derive(Clone)]
pub struct McpHandler {
    registry: Arc<Registry>,
    name: String,
    version: String,
    page_size: Option<usize>,
}

impl std::fmt::Debug for McpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHandler")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl McpHandler {
    fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.registry
            .descriptors()
            .into_iter()
            .map(|descriptor| {
                // MCP wants an object schema; a tool taking any JSON (`true`, `{}`) takes
                // any object here.
                let mut input = match &descriptor.input_schema {
                    Value::Object(map) => map.clone(),
                    _ => JsonObject::new(),
                };
                input
                    .entry("type")
                    .or_insert_with(|| Value::String("object".to_owned()));
                let mut tool = rmcp::model::Tool::new(
                    descriptor.name.clone(),
                    descriptor.description.clone(),
                    Arc::new(input),
                );
                if let Some(Value::Object(schema)) = &descriptor.output_schema
                    && schema.get("type").and_then(Value::as_str) == Some("object")
                {
                    tool = tool.with_raw_output_schema(Arc::new(schema.clone()));
                }
                tool
            })
            .collect()
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.name.clone(), self.version.clone()))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools();
        let Some(size) = self.page_size else {
            return Ok(ListToolsResult::with_all_items(tools));
        };
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|&start| start <= tools.len())
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("invalid tools/list cursor `{cursor}`: pass the nextCursor of the previous page"),
                        None,
                    )
                })?,
        };
        let end = (start + size).min(tools.len());
        let mut result =
            ListToolsResult::with_all_items(tools.into_iter().skip(start).take(size).collect());
        if end < self.registry.len() {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if self.registry.get(name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("there is no tool named `{name}`"),
                None,
            ));
        }
        let input = request.arguments.map_or(Value::Null, Value::Object);
        let result = match self.registry.call(name, input).await {
            Ok(output) => success(output.into_parts()),
            Err(error) => {
                CallToolResult::error(vec![rmcp::model::ContentBlock::text(error_text(&error))])
            }
        };
        Ok(result.into())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [rmcp::model::ProtocolVersion]> {
        Cow::Borrowed(rmcp::model::ProtocolVersion::KNOWN_VERSIONS)
    }
}

fn error_text(error: &ToolError) -> String {
    match error {
        ToolError::Failed(message) => message.clone(),
        ToolError::InputRequired(request) => format!(
            "the tool asks a person for input (\"{}\"), which this server cannot pass on",
            request.message
        ),
        ToolError::InvalidArguments(violations) => {
            let mut text = "invalid arguments:".to_owned();
            for v in violations {
                text.push_str("\n- ");
                text.push_str(&v.to_string());
            }
            text
        }
    }
}

/// A tool's output as an MCP result: the structured value the tool gave (an MCP tool's, passed
/// on), or else text that is a JSON object, also becomes `structuredContent` (the text stays
/// for clients that read only content).
fn success((content, structured): (ToolResultContent, Option<Box<Value>>)) -> CallToolResult {
    let mut result = match content {
        ToolResultContent::Text(text) => {
            let parsed = match serde_json::from_str::<Value>(&text) {
                Ok(value @ Value::Object(_)) if structured.is_none() => Some(value),
                _ => None,
            };
            let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
            result.structured_content = parsed;
            result
        }
        ToolResultContent::Blocks(blocks) => {
            CallToolResult::success(blocks.into_iter().map(block).collect())
        }
    };
    if let Some(value) = structured.filter(|v| v.is_object()) {
        result.structured_content = Some(*value);
    }
    result
}

fn block(block: ContentBlock) -> rmcp::model::ContentBlock {
    use rmcp::model::ContentBlock as Mcp;
    match block {
        ContentBlock::Text { text } => Mcp::text(text),
        ContentBlock::Image {
            source: ImageSource::Base64 { media_type, data },
        } => Mcp::image(data, media_type),
        ContentBlock::Image {
            source: ImageSource::Url { url },
        } => Mcp::text(format!("[image: {url}]")),
        other => Mcp::text(serde_json::to_string(&other).unwrap_or_default()),
    }
}
