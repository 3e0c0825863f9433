//! The MCP client against the reference servers from npm (`.ci/run` installs them into
//! `target/npm`): `@modelcontextprotocol/server-everything` over stdio and streamable HTTP,
//! `@modelcontextprotocol/server-filesystem` over stdio confined to a temporary directory.
//! The HTTP server binds every interface, so it runs in a network namespace of its own with
//! only loopback, and so does the client half of that test (this test binary, run again
//! inside it), as `shared/conformance/README.md` describes.

#![cfg(feature = "mcp")]

use std::path::{Path, PathBuf};

use agentloop::ToolResultContent;
use agentloop::executor::{McpHttp, McpServerInfo, McpStdio};
use agentloop::message::ContentBlock;
use agentloop::registry::Registry;
use agentloop::tool::ToolError;
use serde_json::json;

fn node() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("node"))
            .find(|candidate| candidate.is_file())
    })
}

/// `node` and the package's entry script, or `None` with a skip notice.
fn package(name: &str) -> Option<(PathBuf, PathBuf)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../target/npm/node_modules/@modelcontextprotocol/{name}/dist/index.js"
    ));
    match (node(), script.is_file()) {
        (Some(node), true) => Some((node, script)),
        (node, _) => {
            agentloop_testkit::skip(&format!(
                "{name} tests need node ({}) and {} (bash .ci/run installs it)",
                if node.is_some() { "found" } else { "missing" },
                script.display()
            ));
            None
        }
    }
}

/// What every transport must show of server-everything: structured results kept next to
/// their text, images as images, resource links named, and a tool list that refreshes.
async fn exercise_everything(registry: &mut Registry, info: &McpServerInfo) {
    assert_eq!(info.name.as_deref(), Some("mcp-servers/everything"));
    for expected in [
        "echo",
        "get-structured-content",
        "get-tiny-image",
        "get-resource-links",
    ] {
        assert!(
            info.tools.iter().any(|t| t == expected),
            "{expected} in {:?}",
            info.tools
        );
    }
    let weather = registry
        .call("get-structured-content", json!({"location": "Chicago"}))
        .await
        .unwrap();
    assert_eq!(
        weather.structured(),
        Some(&json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}))
    );
    let image = registry.call("get-tiny-image", json!({})).await.unwrap();
    let ToolResultContent::Blocks(blocks) = &image.0 else {
        panic!("expected blocks, got {:?}", image.0);
    };
    assert!(
        blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::Image { .. })),
        "{blocks:?}"
    );
    let links = registry
        .call("get-resource-links", json!({"count": 2}))
        .await
        .unwrap();
    let text = links.0.to_text();
    assert!(text.contains("[resource link "), "{text}");
    // The server registers tools after the handshake and says so; a refresh lists them
    // again and keeps working tools working.
    registry.refresh().await.unwrap();
    let out = registry
        .call("echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), "Echo: hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let Some((node, script)) = package("server-everything") else {
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
    assert!(info.protocol_version.is_some());
    exercise_everything(&mut registry, &info).await;
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_over_stdio_stays_in_its_directory() {
    let Some((node, script)) = package("server-filesystem") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(
            McpStdio::new(node.to_string_lossy())
                .arg(script.to_string_lossy())
                .arg(root_path.to_string_lossy()),
        )
        .await
        .unwrap();
    for expected in ["read_text_file", "write_file", "list_directory"] {
        assert!(
            info.tools.iter().any(|t| t == expected),
            "{expected} in {:?}",
            info.tools
        );
    }
    let file = root_path.join("note.txt");
    registry
        .call(
            "write_file",
            json!({"path": file.to_string_lossy(), "content": "hello from agentloop"}),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "hello from agentloop"
    );
    let read = registry
        .call("read_text_file", json!({"path": file.to_string_lossy()}))
        .await
        .unwrap();
    assert_eq!(read.0.to_text(), "hello from agentloop");
    // Outside its root: an `isError` result, which is an error result here.
    let outside = registry
        .call("read_text_file", json!({"path": "/etc/hostname"}))
        .await
        .unwrap_err();
    let ToolError::Failed(message) = outside else {
        panic!("expected a failure, got {outside:?}");
    };
    assert!(message.contains("outside allowed directories"), "{message}");
    registry.close().await;
}

const IN_NAMESPACE: &str = "AGENTLOOP_MCP_IN_NETNS";
const NETNS_PORT: u16 = 3001;

/// Starts server-everything over HTTP in a private network namespace (only loopback) and
/// runs this binary's `server_everything_over_http_client_half` in it.
#[test]
fn server_everything_over_streamable_http_in_a_network_namespace() {
    let Some((node, script)) = package("server-everything") else {
        return;
    };
    let probe = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c", "ip link set lo up"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        agentloop_testkit::skip(
            "server-everything over HTTP needs `unshare -n` and `ip` (root, or user namespaces) to confine the server to a private loopback",
        );
        return;
    }
    let me = std::env::current_exe().unwrap();
    // The server is stopped when the client half ends: nothing else would, in its namespace.
    let script_text = format!(
        "ip link set lo up || exit 1
        PORT={NETNS_PORT} \"$0\" \"$1\" streamableHttp >/dev/null 2>&1 &
        server=$!
        \"$2\" --exact server_everything_over_http_client_half --nocapture --test-threads=1
        status=$?
        kill $server
        wait $server
        exit $status"
    );
    let output = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c", &script_text])
        .arg(node)
        .arg(script)
        .arg(me)
        .env(IN_NAMESPACE, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the client half failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The client half of the test above; does nothing outside its namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_http_client_half() {
    if std::env::var_os(IN_NAMESPACE).is_none() {
        return;
    }
    let url = format!("http://127.0.0.1:{NETNS_PORT}/mcp");
    // The server takes about a second to listen.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut registry, info) = loop {
        let mut registry = Registry::new();
        match registry.add_mcp_http(McpHttp::new(&url)).await {
            Ok(info) => break (registry, info),
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("server-everything did not come up at {url}: {e}"),
        }
    };
    assert!(info.protocol_version.is_some());
    exercise_everything(&mut registry, &info).await;
    registry.close().await;
}

/// server-everything's `trigger-elicitation-request` (registered once the client declares
/// the elicitation capability, and announced with `notifications/tools/list_changed`) asks
/// with `elicitation/create` during the call: the run pauses with its form, and the answer
/// reaches the tool when the run resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_elicitation_pauses_the_run_and_the_answer_resumes_it() {
    use agentloop::run::Decision;
    use agentloop::{Agent, RunStopReason};
    use agentloop_testkit::{ScriptedModel, Turn};

    let Some((node, script)) = package("server-everything") else {
        return;
    };
    let mut registry = Registry::new();
    registry
        .add_mcp_stdio(
            McpStdio::new(node.to_string_lossy())
                .arg(script.to_string_lossy())
                .arg("stdio"),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while registry.get("trigger-elicitation-request").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the elicitation tool was not listed: {:?}",
            registry.names()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        registry.refresh().await.unwrap();
    }
    let model = ScriptedModel::new([
        Turn::tool_call("trigger-elicitation-request", json!({})).with_ids(["call_1"]),
        Turn::text("Done."),
    ]);
    let agent = Agent::builder(model.clone())
        .tools(registry.tools())
        .build();
    let first = agent.run("Ask me").await.unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingApproval);
    let request = first.pending_approvals[0].input_request.clone().unwrap();
    assert_eq!(
        request.message,
        "Please provide inputs for the following fields:"
    );
    assert_eq!(request.schema["required"], json!(["name"]));
    assert_eq!(request.schema["properties"]["check"]["type"], "boolean");

    let done = agent
        .resume(
            &first.paused.unwrap(),
            [(
                "call_1",
                Decision::accept(json!({"name": "Ada Lovelace", "check": true})),
            )],
        )
        .await
        .unwrap();
    assert_eq!(done.stop_reason, RunStopReason::EndTurn, "{:?}", done.error);
    let text = done.steps[0].tool_results[0].content.to_text();
    assert!(
        text.contains("User provided the requested information")
            && text.contains("- Name: Ada Lovelace")
            && text.contains("- Agreed to terms: true"),
        "{text}"
    );
    registry.close().await;
}
