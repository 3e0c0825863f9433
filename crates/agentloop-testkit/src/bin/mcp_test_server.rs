//! The testkit's MCP server over stdio, for MCP client tests.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = agentloop_testkit::mcp::serve_stdio().await {
        eprintln!("agentloop-mcp-test-server: {e}");
        std::process::exit(1);
    }
}
