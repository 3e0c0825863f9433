//! `agentloop mcp serve --tools PATH [--stdio | --addr IP:PORT]`: the tools of descriptor files
//! served to other agents as an MCP server (see `agentloop::mcp_server`).

use std::process::ExitCode;

use agentloop::mcp_server::McpServer;
use tokio_util::sync::CancellationToken;

use crate::cli::McpServeArgs;
use crate::commands::mock_server::stopped;

/// Serve until the client disconnects (stdio) or the process is stopped (HTTP).
pub async fn serve(args: McpServeArgs) -> Result<ExitCode, String> {
    let registry = crate::commands::tools::load(&args.tools)?;
    if registry.is_empty() {
        return Err(format!("{} defines no tool to serve", args.tools.display()));
    }
    let Some(addr) = args.addr else {
        McpServer::new(registry)
            .serve_stdio()
            .await
            .map_err(|e| e.to_string())?;
        return Ok(ExitCode::SUCCESS);
    };
    // The endpoint checks the Host header against loopback names (against DNS rebinding), so
    // another address could not be reached anyway; say so up front.
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--addr {addr}: `agentloop mcp serve` listens on loopback only (127.0.0.1 or [::1]); put a reverse proxy in front to expose it"
        ));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("could not listen on {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("could not read the listening address: {e}"))?;
    let stop = CancellationToken::new();
    let server = tokio::spawn(
        McpServer::new(registry)
            .cancel_on(stop.clone())
            .serve_http(listener),
    );
    println!("serving MCP on http://{local}/mcp");
    stopped().await?;
    stop.cancel();
    server
        .await
        .map_err(|e| format!("the MCP server stopped abnormally: {e}"))?
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
