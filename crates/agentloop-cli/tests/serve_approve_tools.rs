//! `agentloop serve --approve-tools`: the server's own approval policy, from the command line.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

fn command(db: &Path, tools: &Path, base_url: &str, approve: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloop"));
    command
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("AGENTLOOP_TOKEN")
        .env("NO_COLOR", "1")
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(["--model", "openai-compatible/demo", "--base-url", base_url])
        .arg("--db")
        .arg(db)
        .arg("--tools")
        .arg(tools)
        .args(["--approve-tools", approve]);
    command
}

/// A running `agentloop serve`, killed (SIGKILL) when dropped, so a failing test leaves no
/// server behind.
struct Served(Child);

impl Served {
    /// SIGKILL: nothing is saved on the way out.
    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `agentloop serve` with `--approve-tools approve`; the process and its URL.
fn serve(db: &Path, tools: &Path, base_url: &str, approve: &str) -> (Served, String) {
    let mut child = command(db, tools, base_url, approve)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the agentloop binary runs");
    let stdout = child.stdout.take().unwrap();
    let line = std::io::BufReader::new(stdout)
        .lines()
        .next()
        .expect("serve prints its address")
        .unwrap();
    let url = line.trim_start_matches("serving on ").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (Served(child), url)
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

/// `(event, data)` of each SSE event up to the first `stop` event.
async fn read_events(mut response: reqwest::Response, stop: &str) -> Vec<(String, Value)> {
    let mut text = String::new();
    let mut events = Vec::new();
    // A guard against a stream that never sends `stop`, not a timing assumption.
    let read = async {
        while let Some(chunk) = response.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block = text[..end].to_owned();
                text.drain(..end + 2);
                let name = block.lines().find_map(|l| l.strip_prefix("event: "));
                let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                if let (Some(name), Some(data)) = (name, data) {
                    events.push((name.to_owned(), serde_json::from_str(data).unwrap()));
                    if name == stop {
                        return;
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the stream reaches its event");
    events
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
    let output = command(&db, &tools, "http://127.0.0.1:9/v1", "deploy,deplyo")
        .output()
        .unwrap();
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
