//! MCP tool sources against real MCP servers: the testkit's `rmcp` server over stdio (a
//! child process) and over streamable HTTP (in-process), and the reference server
//! `@modelcontextprotocol/server-everything` from npm over stdio.

#![cfg(feature = "mcp")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentloop::ToolResultContent;
use agentloop::executor::{McpHttp, McpStdio};
use agentloop::registry::{McpSource, Registry, ToolMode, ToolSource};
use agentloop::tool::{ToolContext, ToolError, ToolOutput, Violation};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_agentloop-mcp-test-server");

fn text(output: &ToolOutput) -> &str {
    match &output.0 {
        ToolResultContent::Text(text) => text,
        other => panic!("expected text output, got {other:?}"),
    }
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Wait (up to 10 s of real time) for a process to end.
async fn wait_gone(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The checks every transport must pass against the testkit server.
async fn exercise_test_server(registry: &Registry, server: &str, prefix: &str) {
    let echo = format!("{prefix}echo");
    let descriptor = registry.descriptor(&echo).expect("echo is listed");
    assert_eq!(descriptor.description, "Echo the message back");
    assert_eq!(descriptor.mode, ToolMode::Mcp);
    assert_eq!(
        descriptor.mcp,
        Some(McpSource {
            server: server.to_owned(),
            tool: "echo".to_owned()
        })
    );
    assert_eq!(descriptor.input_schema["required"], json!(["message"]));
    assert_eq!(
        descriptor.input_schema["properties"]["message"]["type"],
        json!("string")
    );
    assert_eq!(
        registry.source(&echo),
        Some(&ToolSource::Mcp(server.to_owned()))
    );
    let add = registry.descriptor(&format!("{prefix}add")).unwrap();
    assert_eq!(
        add.output_schema
            .as_ref()
            .map(|s| s["properties"]["sum"]["type"].clone()),
        Some(json!("integer"))
    );

    // The same connection answers call after call.
    for word in ["hi", "again"] {
        let output = registry
            .call(&echo, json!({"message": word}))
            .await
            .unwrap();
        assert_eq!(text(&output), format!("Echo: {word}"));
    }
    let sum = registry
        .call(&format!("{prefix}add"), json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text(&sum)).unwrap(),
        json!({"sum": 5})
    );
    // `isError` results become error results.
    assert_eq!(
        registry
            .call(&format!("{prefix}fail"), json!({"reason": "disk full"}))
            .await
            .unwrap_err(),
        ToolError::Failed("failed: disk full".to_owned())
    );
    // Arguments are checked against the server's schema before anything is sent.
    assert_eq!(
        registry.call(&echo, json!({})).await.unwrap_err(),
        ToolError::InvalidArguments(vec![Violation {
            path: String::new(),
            message: "\"message\" is a required property".to_owned()
        }])
    );
}

#[tokio::test]
async fn stdio_server_lists_and_calls_tools_and_its_child_dies_with_the_registry() {
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(McpStdio::new(TEST_SERVER))
        .await
        .unwrap();
    assert_eq!(info.server, TEST_SERVER);
    assert_eq!(info.name.as_deref(), Some("agentloop-test-mcp"));
    let mut tools = info.tools.clone();
    tools.sort();
    assert_eq!(tools, ["add", "echo", "fail", "sleep", "toggle_extra"]);
    let pid = info.process_id.expect("a stdio server has a pid");
    assert!(!is_gone(pid));

    exercise_test_server(&registry, TEST_SERVER, "").await;

    drop(registry);
    assert!(
        wait_gone(pid).await,
        "the MCP child {pid} outlived its registry"
    );
}

#[tokio::test]
async fn close_stops_the_child_and_later_calls_fail_cleanly() {
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(McpStdio::new(TEST_SERVER).prefix("t_"))
        .await
        .unwrap();
    let mut tools = info.tools.clone();
    tools.sort();
    assert_eq!(
        tools,
        ["t_add", "t_echo", "t_fail", "t_sleep", "t_toggle_extra"]
    );
    let output = registry
        .call("t_echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(text(&output), "Echo: hi");

    registry.close().await;
    assert!(wait_gone(info.process_id.unwrap()).await);
    let err = registry
        .call("t_echo", json!({"message": "hi"}))
        .await
        .unwrap_err();
    let ToolError::Failed(message) = err else {
        panic!("expected a failure, got {err:?}");
    };
    assert!(
        message.starts_with(&format!(
            "calling `echo` on MCP server `{TEST_SERVER}` failed: "
        )),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_that_dies_at_start_is_reported_with_its_stderr() {
    let mut registry = Registry::new();
    let err = registry
        .add_mcp_stdio(McpStdio::new("sh").args(["-c", "echo 'cannot find module x' >&2; exit 3"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "MCP server `sh -c echo 'cannot find module x' >&2; exit 3`: the MCP handshake failed: "
        ),
        "{err}"
    );
    assert!(
        err.ends_with("; its stderr ended with:\ncannot find module x"),
        "{err}"
    );
    assert!(registry.is_empty());

    let err = registry
        .add_mcp_stdio(McpStdio::new("/nonexistent/agentloop-mcp"))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "MCP server `/nonexistent/agentloop-mcp`: could not start `/nonexistent/agentloop-mcp`: No such file or directory (os error 2)"
    );
}

#[tokio::test]
async fn duplicate_names_from_a_server_add_nothing() {
    let mut registry = Registry::new();
    registry
        .add_descriptor(agentloop::registry::ToolDescriptor::new("echo", "mine"))
        .unwrap();
    let err = registry
        .add_mcp_stdio(McpStdio::new(TEST_SERVER))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "MCP server `{TEST_SERVER}`: tool `echo`: duplicate tool name: it is already defined in code"
        )
    );
    assert_eq!(registry.names(), ["echo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_server_lists_and_calls_tools() {
    let server = agentloop_testkit::mcp::serve_http().await.unwrap();
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_http(McpHttp::new(server.url.clone()))
        .await
        .unwrap();
    assert_eq!(info.name.as_deref(), Some("agentloop-test-mcp"));
    assert_eq!(info.process_id, None);
    exercise_test_server(&registry, &server.url, "").await;
    registry.close().await;
}

/// The reference server from npm, when CI (or a developer) installed it.
fn everything_server() -> Option<(PathBuf, PathBuf)> {
    let node = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("node"))
            .find(|candidate| candidate.is_file())
    });
    let script = std::env::var_os("AGENTLOOP_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "../../target/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    match (node, script.is_file()) {
        (Some(node), true) => Some((node, script)),
        (node, _) => {
            agentloop_testkit::skip(&format!(
                "server-everything test needs node ({}) and {} (install with `npm install --prefix target/npm @modelcontextprotocol/server-everything` or set AGENTLOOP_MCP_EVERYTHING)",
                if node.is_some() { "found" } else { "missing" },
                script.display()
            ));
            None
        }
    }
}

#[tokio::test]
async fn reference_server_everything_over_stdio() {
    let Some((node, script)) = everything_server() else {
        return;
    };
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(
            McpStdio::new(node.to_string_lossy())
                .arg(script.to_string_lossy())
                .arg("stdio"),
        )
        .await
        .unwrap();
    assert_eq!(info.name.as_deref(), Some("mcp-servers/everything"));
    for expected in [
        "echo",
        "get-sum",
        "get-structured-content",
        "get-tiny-image",
    ] {
        assert!(
            info.tools.iter().any(|t| t == expected),
            "{expected} in {:?}",
            info.tools
        );
    }
    let echo = registry.descriptor("echo").unwrap();
    assert_eq!(echo.description, "Echoes back the input string");
    assert_eq!(echo.input_schema["required"], json!(["message"]));

    let output = registry
        .call("echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(text(&output), "Echo: hi");
    let output = registry
        .call("get-sum", json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert_eq!(text(&output), "The sum of 2 and 40 is 42.");
    // A tool with an output schema: its structured content is checked and passes.
    let structured = registry
        .call("get-structured-content", json!({"location": "Chicago"}))
        .await;
    assert!(structured.is_ok(), "{structured:?}");

    // Sent past our own validation, bad arguments come back from the server as an
    // `isError` result, which is an error result here.
    let tool = registry.get("get-sum").unwrap();
    let ctx = ToolContext::new("call_1", "get-sum", CancellationToken::new(), None);
    let err = tool
        .handler()
        .unwrap()
        .call(ctx, json!({"a": "x", "b": 1}))
        .await
        .unwrap_err();
    let ToolError::Failed(message) = err else {
        panic!("expected a failure, got {err:?}");
    };
    assert!(
        message.starts_with(
            "MCP error -32602: Input validation error: Invalid arguments for tool get-sum"
        ),
        "{message}"
    );

    let pid = info.process_id.unwrap();
    drop(registry);
    assert!(wait_gone(pid).await);
}

/// MCP 2025-06-18 "Structured Content": a result may carry `structuredContent` and, for
/// backwards compatibility, the same value as text content. The value is kept next to the
/// content the model reads: in the tool's output, the step's outcome and the run's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_content_is_kept_beside_the_text_in_the_outcome_and_the_run_events() {
    use agentloop::run::RunEvent;
    use agentloop_testkit::{ScriptedModel, Turn};

    let server = agentloop_testkit::mcp::serve_http().await.unwrap();
    let mut registry = Registry::new();
    registry
        .add_mcp_http(McpHttp::new(server.url.clone()))
        .await
        .unwrap();
    let model = ScriptedModel::new([
        Turn::tool_call("add", json!({"a": 2, "b": 3})),
        Turn::text("5"),
    ]);
    let agent = agentloop::Agent::builder(model)
        .tools(registry.tools())
        .build();
    let mut events = agent.run_stream("add");
    let mut outcomes = Vec::new();
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        if let RunEvent::ToolCallResult {
            outcome, result, ..
        } = event
        {
            assert_eq!(result.content.to_text(), r#"{"sum":5}"#);
            outcomes.push(serde_json::to_value(outcome).unwrap());
        }
    }
    assert_eq!(
        outcomes,
        [json!({
            "outcome": "completed",
            "content": r#"{"sum":5}"#,
            "structured": {"sum": 5},
        })]
    );
    registry.close().await;
}

/// The processes (zombies aside) whose environment carries `AGENTLOOP_TEST_MARK=<mark>`: a
/// stdio server started with that variable and everything it started.
fn marked_processes(mark: &str) -> Vec<u32> {
    let needle = format!("AGENTLOOP_TEST_MARK={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == needle.as_bytes())
            }) && !is_gone(pid)
        })
        .collect()
}

/// Wait (up to 10 s of real time) until no marked process is left; returns those left.
async fn wait_none_marked(mark: &str) -> Vec<u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = marked_processes(mark);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A stdio server behind a shell that leaves a grandchild (`sleep`) running: only killing the
/// server's whole process group stops that one.
fn server_with_grandchild(mark: &str) -> McpStdio {
    McpStdio::new("sh")
        .args(["-c", &format!("sleep 300 & exec {TEST_SERVER}")])
        .env("AGENTLOOP_TEST_MARK", mark)
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_outlives_100_registry_create_drop_cycles() {
    let mark = format!("cycles-{}", std::process::id());
    for cycle in 0..100 {
        let mut registry = Registry::new();
        registry
            .add_mcp_stdio(server_with_grandchild(&mark))
            .await
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        // Every 10th registry is used before it goes, the rest dropped straight away.
        if cycle % 10 == 0 {
            let out = registry
                .call("echo", json!({"message": "x"}))
                .await
                .unwrap();
            assert_eq!(text(&out), "Echo: x");
        }
        drop(registry);
    }
    assert_eq!(wait_none_marked(&mark).await, Vec::<u32>::new());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_cancels_its_mcp_call_and_leaves_no_process_behind() {
    use agentloop::run::{RunEvent, RunStopReason};
    use agentloop_testkit::{ScriptedModel, Turn};

    let mark = format!("cancelled-run-{}", std::process::id());
    let mut registry = Registry::new();
    registry
        .add_mcp_stdio(server_with_grandchild(&mark))
        .await
        .unwrap();
    assert_eq!(marked_processes(&mark).len(), 2, "the server and its sleep");
    let model = ScriptedModel::new([Turn::tool_call("sleep", json!({"ms": 60_000}))]);
    let agent = agentloop::Agent::builder(model)
        .tools(registry.tools())
        .build();
    let mut events = agent.run_stream("wait");
    let cancel = events.cancel_handle();
    let mut outcome = None;
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        match event {
            RunEvent::ToolCallReady { .. } => cancel.cancel(),
            RunEvent::ToolCallResult { outcome: o, .. } => outcome = Some(o.kind()),
            RunEvent::RunFinish { result, .. } => {
                assert_eq!(result.stop_reason, RunStopReason::Cancelled);
            }
            _ => {}
        }
    }
    assert_eq!(outcome, Some("cancelled"));
    // The cancelled call is over at the server too; the connection goes on serving.
    let out = registry
        .call("echo", json!({"message": "after"}))
        .await
        .unwrap();
    assert_eq!(text(&out), "Echo: after");
    drop(agent);
    drop(registry);
    assert_eq!(wait_none_marked(&mark).await, Vec::<u32>::new());
}
