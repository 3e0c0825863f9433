//! MCP tools: connect a registry to an MCP server, list its tools and let an agent call them.
//!
//! Runs offline: `cargo run -p agentloop --example mcp_tools`. The testkit's MCP server (tools
//! `echo`, `add` and `fail`) runs in-process over streamable HTTP on a loopback port. For a
//! server you start as a child process, use `registry.add_mcp_stdio(McpStdio::new("cmd"))`
//! instead; for your own server, pass its URL.

use agentloop::Agent;
use agentloop::executor::McpHttp;
use agentloop::registry::Registry;
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = agentloop_testkit::mcp::serve_http().await?;

    // Every tool of the server, registered as `calc_<name>`.
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_http(McpHttp::new(&server.url).prefix("calc_"))
        .await?;
    println!(
        "connected to {} ({}): {}",
        info.name.as_deref().unwrap_or("?"),
        info.server,
        info.tools.join(", ")
    );

    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("calc_add", json!({"a": 19, "b": 23})),
            ("calc_echo", json!({"message": "hello over MCP"})),
        ]),
        Turn::text("19 + 23 = 42, and the server echoed your message."),
    ]);
    let agent = Agent::builder(model).tools(registry.tools()).build();
    let result = agent.run("Add 19 and 23, and echo a greeting.").await?;

    let step = &result.steps[0];
    for (call, output) in step.tool_calls.iter().zip(&step.tool_results) {
        println!(
            "→ {}({}) ← {}",
            call.name,
            call.input,
            output.content.to_text()
        );
    }
    println!("{}", result.text());

    let outputs: Vec<String> = step
        .tool_results
        .iter()
        .map(|r| r.content.to_text())
        .collect();
    assert_eq!(outputs, [r#"{"sum":42}"#, "Echo: hello over MCP"]);
    assert_eq!(
        info.tools,
        [
            "calc_add",
            "calc_echo",
            "calc_fail",
            "calc_sleep",
            "calc_toggle_extra"
        ]
    );

    // Close the connections cleanly (dropping the registry also does, less politely).
    registry.close().await;
    Ok(())
}
