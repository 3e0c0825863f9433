//! `agentloop serve` stopped by SIGTERM (what docker and systemd send) shuts down like Ctrl-C:
//! the answer in flight ends with `message_end` and what it produced is saved.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

const ANSWER: &str = "one two three four five six seven eight nine ten eleven twelve thirteen \
                      fourteen fifteen sixteen seventeen eighteen nineteen twenty";

/// `agentloop serve` on a free port against the mock model at `base_url`; its URL.
fn serve(db: &Path, base_url: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("AGENTLOOP_TOKEN")
        .env("NO_COLOR", "1")
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--model",
            "openai-compatible/demo",
        ])
        .args(["--base-url", base_url, "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    (child, url)
}

fn event_name(line: &str) -> Option<&str> {
    line.strip_prefix("event: ")
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_streams_with_message_end_and_saves_the_partial_answer() {
    let mut slow = Turn::text(ANSWER);
    slow.pieces.text = 20;
    slow.chunk_delay = Some(Duration::from_millis(150));
    let model = MockServer::start(Wire::OpenAi, [slow]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let (mut server, url) = {
        let (db, base) = (db.clone(), model.base_url());
        tokio::task::spawn_blocking(move || serve(&db, &base))
            .await
            .unwrap()
    };

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut response = client
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Count to twenty"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let conversation_id = response.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();

    // Read until the first text arrives, then send SIGTERM.
    let mut body = String::new();
    while !body.contains("event: text_delta") {
        let chunk = response.chunk().await.unwrap().expect("the stream goes on");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while let Some(chunk) = response.chunk().await.unwrap_or(None) {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "serve exited with {status} after SIGTERM");

    let events: Vec<&str> = body.lines().filter_map(event_name).collect();
    assert_eq!(events.last(), Some(&"message_end"), "{body}");
    let received: String = body
        .split("\n\n")
        .filter(|block| block.lines().any(|l| event_name(l) == Some("text_delta")))
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| {
            let data: Value = serde_json::from_str(data).unwrap();
            data["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(
        !received.is_empty() && received.len() < ANSWER.len(),
        "{body}"
    );

    // After a restart the partial answer is there.
    let (mut again, url) = {
        let (db, base) = (db.clone(), model.base_url());
        tokio::task::spawn_blocking(move || serve(&db, &base))
            .await
            .unwrap()
    };
    let stored: Value = client
        .get(format!("{url}/v1/conversations/{conversation_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    again.kill().unwrap();
    let _ = again.wait();
    let messages = stored["messages"]
        .as_array()
        .expect("the conversation is stored");
    assert_eq!(messages.len(), 2, "{stored}");
    assert_eq!(messages[1]["role"], "assistant", "{stored}");
    assert_eq!(
        messages[1]["content"][0]["text"].as_str(),
        Some(received.as_str()),
        "{stored}"
    );
}

/// The soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap().to_owned(),
        fields.next().unwrap().to_owned(),
    )
}

#[test]
fn serve_raises_its_open_file_limit_to_the_hard_limit() {
    let (_, hard) = open_file_limits(std::process::id());
    if hard.parse::<u64>().is_ok_and(|n| n <= 256) {
        return; // Nothing to raise.
    }
    let dir = tempfile::tempdir().unwrap();
    // Started with a soft limit of 256, as some systems still set it.
    let mut child = Command::new("sh")
        .args([
            "-c",
            "ulimit -Sn 256 && exec \"$0\" serve --addr 127.0.0.1:0 --db \"$1\"",
        ])
        .arg(env!("CARGO_BIN_EXE_agentloop"))
        .arg(dir.path().join("chats.db"))
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("AGENTLOOP_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = std::io::BufReader::new(stdout).lines().next();
    let limits = open_file_limits(child.id());
    child.kill().unwrap();
    let _ = child.wait();
    assert!(matches!(line, Some(Ok(l)) if l.starts_with("serving on")));
    // An unlimited hard limit cannot be reached (the kernel caps it); it must still be raised.
    assert!(
        limits.0 == limits.1 || (limits.1 == "unlimited" && limits.0 != "256"),
        "soft and hard open-file limits of serve: {limits:?}"
    );
}
