//! `agentloop serve --approve-tools`: the server's own approval policy, from the command line.

mod serve_support;

use std::path::Path;
use std::process::Stdio;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::json;
use serve_support::{Served, command, read_events, start};

/// `agentloop serve` with `--approve-tools approve`; the process and its URL.
fn serve(db: &Path, tools: &Path, base_url: &str, approve: &str) -> (Served, String) {
    let mut command = command(db, tools, base_url);
    command.args(["--approve-tools", approve]);
    start(command)
}

/// A tools directory with two mock tools that need no approval of their own.
fn tools(dir: &Path) -> std::path::PathBuf {
    let tools = dir.join("tools");
    std::fs::create_dir(&tools).unwrap();
    for name in ["deploy", "status"] {
        std::fs::write(
            tools.join(format!("{name}.json")),
            json!({
                "name": name,
                "description": format!("The {name} tool"),
                "input_schema": {"type": "object", "properties": {}},
                "mock": {"template": format!("{name} done")},
            })
            .to_string(),
        )
        .unwrap();
    }
    tools
}

#[tokio::test(flavor = "multi_thread")]
async fn named_tools_wait_for_approval_and_the_others_run() {
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_calls([("status", json!({})), ("deploy", json!({}))])
                .with_ids(["call_status", "call_deploy"]),
            Turn::text("Deployed."),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(dir.path());
    let db = dir.path().join("chats.db");
    let base = model.base_url();
    let (server, url) = tokio::task::spawn_blocking(move || serve(&db, &tools, &base, "deploy"))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Deploy it"}))
        .send()
        .await
        .unwrap();
    let message_id = response.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = read_events(response, "approval_requested").await;
    assert_eq!(
        events.last().unwrap().1,
        json!({"id": "call_deploy", "name": "deploy", "arguments": {}, "reason": "tool `deploy` needs approval on this server (--approve-tools)"})
    );
    // Only the named tool waits.
    assert_eq!(
        events
            .iter()
            .filter(|(name, _)| name == "approval_requested")
            .count(),
        1
    );
    let decided = http
        .post(format!("{url}/v1/chat/{message_id}/approvals"))
        .json(&json!({"decisions": [{"id": "call_deploy", "decision": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    server.kill();
}

#[test]
fn an_unknown_tool_name_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(dir.path());
    let db = dir.path().join("chats.db");
    let mut command = command(&db, &tools, "http://127.0.0.1:9/v1");
    command
        .args(["--approve-tools", "deploy,deplyo"])
        .stderr(Stdio::piped());
    let output = command.output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "--approve-tools: no tool `deplyo` (the tools are deploy, status); give `all`, \
             `none`, or tool names separated by commas"
        ),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing was started");
}
