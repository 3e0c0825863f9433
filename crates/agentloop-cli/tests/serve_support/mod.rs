//! What the tests that run a real `agentloop serve` share: the process (killed when dropped),
//! its command line, reading its `/v1/chat` events, and a tool endpoint that counts its calls.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A running `agentloop serve`, killed (SIGKILL) when dropped, so a failing test leaves no
/// server behind.
pub struct Served(pub Child);

impl Served {
    /// SIGKILL: nothing is saved on the way out.
    pub fn kill(mut self) {
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

/// `agentloop serve` on a free loopback port with database `db` and the tools in `tools`,
/// against the mock model at `base_url`; add options before [`start`].
pub fn command(db: impl AsRef<OsStr>, tools: &Path, base_url: &str) -> Command {
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
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// Start `command` and wait for the address it prints; the process and its URL.
pub fn start(mut command: Command) -> (Served, String) {
    let mut child = command.spawn().expect("the agentloop binary runs");
    let line = std::io::BufReader::new(child.stdout.take().expect("stdout is piped"))
        .lines()
        .next()
        .expect("serve prints its address")
        .unwrap();
    let url = line.trim_start_matches("serving on ").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    (Served(child), url)
}

/// `(event, data)` of each SSE event of `response` up to the first `stop` event.
pub async fn read_events(mut response: reqwest::Response, stop: &str) -> Vec<(String, Value)> {
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

/// A tool endpoint on loopback that counts its calls and answers `{"deployed": true}`.
pub async fn tool_endpoint() -> (String, Arc<AtomicUsize>) {
    counting_endpoint(false).await
}

/// A tool endpoint that counts its calls; `hang`: it never answers (a slow tool).
pub async fn counting_endpoint(hang: bool) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/deploy", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let counted = counted.clone();
            tokio::spawn(async move {
                // One request per connection: read its head and its body, then answer.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("content-length")
                                    .then(|| value.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                if hang {
                    // Held open until the server dies; the test ends long before.
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    return;
                }
                let body = r#"{"deployed": true}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, calls)
}

/// Write an HTTP tool descriptor `name` calling `url` into `tools`.
pub fn http_tool(tools: &Path, name: &str, url: &str) {
    std::fs::write(
        tools.join(format!("{name}.json")),
        json!({
            "name": name,
            "description": format!("The {name} tool"),
            "input_schema": {"type": "object", "properties": {}},
            "mode": "http",
            "http": {"url": url},
        })
        .to_string(),
    )
    .unwrap();
}

/// One SSE event: id, name and data.
pub type Sse = (u64, String, Value);

/// The SSE events of `response` until `done` says so (or the stream ends, as when the server
/// is killed).
pub async fn sse_until(mut response: reqwest::Response, done: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    let mut text = String::new();
    let mut events = Vec::new();
    // A guard against a stream that never gets there, not a timing assumption.
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block = text[..end].to_owned();
                text.drain(..end + 2);
                let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name));
                if let (Some(id), Some(name), Some(data)) =
                    (field("id: "), field("event: "), field("data: "))
                {
                    events.push((
                        id.parse().unwrap(),
                        name.to_owned(),
                        serde_json::from_str(data).unwrap(),
                    ));
                    if done(&events) {
                        return;
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the stream gets there");
    events
}

pub fn names(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|(_, name, _)| name.as_str()).collect()
}

/// Wait (bounded) until `count` reaches `n`.
pub async fn wait_for(count: &AtomicUsize, n: usize) {
    for _ in 0..600 {
        if count.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the count never reached {n}");
}

pub fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

/// The stored conversation's messages, checked valid.
pub async fn stored_history(url: &str, conversation_id: &str) -> Vec<agentloop::Message> {
    let stored: Value = reqwest::get(format!("{url}/v1/conversations/{conversation_id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages: Vec<agentloop::Message> =
        serde_json::from_value(stored["messages"].clone()).unwrap();
    assert!(agentloop::history::is_valid(&messages), "{messages:?}");
    messages
}

/// Follow answer `message_id` through the server at `url` until its `message_end`, after the
/// events `seen` (all received so far), reconnecting as a client does: when a stream ends
/// early (a server following an answer another server ran hands it over), again from the
/// last event received; on 409 (events cut when a server took the answer over from its last
/// checkpoint), from the event the error names, dropping those after it. The events of
/// `seen` kept, the rest, and how many 409s came.
pub async fn follow_to_end(
    url: &str,
    message_id: &str,
    mut seen: Vec<Sse>,
) -> (Vec<Sse>, Vec<Sse>, usize) {
    let http = reqwest::Client::new();
    let mut rest: Vec<Sse> = Vec::new();
    let mut cuts = 0;
    // Bounded: a handful of reconnects at most happen.
    for _ in 0..20 {
        let mut request = http.get(format!("{url}/v1/chat/{message_id}/events"));
        if let Some(last) = rest.last().or(seen.last()) {
            request = request.header("last-event-id", last.0.to_string());
        }
        let response = request.send().await.unwrap();
        match response.status().as_u16() {
            200 => {
                rest.extend(
                    sse_until(response, |events| {
                        events
                            .last()
                            .is_some_and(|(_, name, _)| name == "message_end")
                    })
                    .await,
                );
                if rest
                    .last()
                    .is_some_and(|(_, name, _)| name == "message_end")
                {
                    return (seen, rest, cuts);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            409 => {
                let error: Value = response.json().await.unwrap();
                let message = error["error"]["message"].as_str().unwrap();
                let last_kept: u64 = message
                    .split("reconnect with Last-Event-ID ")
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap();
                seen.retain(|e| e.0 <= last_kept);
                rest.retain(|e| e.0 <= last_kept);
                cuts += 1;
            }
            status => panic!(
                "GET events answered {status}: {}",
                response.text().await.unwrap()
            ),
        }
    }
    panic!("the answer never reached message_end: {rest:?}");
}

/// The rest of an answer killed while its `slow` tool ran, after `fast` had run: the slow call
/// answered as interrupted (not run again), then a three-delta answer, every event under a new
/// id (past any the dead process gave); each tool ran once.
pub fn assert_finished_after_an_interrupted_slow_tool(
    rest: &[Sse],
    fast: &AtomicUsize,
    slow: &AtomicUsize,
) {
    assert_eq!(
        names(rest),
        [
            "tool_call_result",
            "text_delta",
            "text_delta",
            "text_delta",
            "message_end"
        ]
    );
    assert_eq!(rest[0].2["id"], "call_slow");
    assert_eq!(rest[0].2["is_error"], true);
    let content = rest[0].2["content"].as_str().unwrap();
    assert!(content.contains("was interrupted"), "{content}");
    assert_eq!(rest[4].2["stop_reason"], "end_turn");
    assert!(
        rest.iter().all(|(id, _, _)| *id >= 1_000_000_000),
        "{rest:?}"
    );
    assert_eq!(
        fast.load(Ordering::SeqCst),
        1,
        "the completed tool ran once"
    );
    assert_eq!(
        slow.load(Ordering::SeqCst),
        1,
        "the interrupted tool was not run again"
    );
}

/// A model that calls `fast`, then `slow` (which never answers), then says "Done."; a folder
/// whose `tools` holds both as HTTP tools; how often each was called.
pub struct FastThenSlow {
    pub model: agentloop_testkit::server::MockServer,
    pub dir: tempfile::TempDir,
    pub tools: std::path::PathBuf,
    pub fast: Arc<AtomicUsize>,
    pub slow: Arc<AtomicUsize>,
}

/// See [`FastThenSlow`].
pub async fn fast_then_slow() -> FastThenSlow {
    use agentloop_testkit::Turn;
    let (fast_url, fast) = counting_endpoint(false).await;
    let (slow_url, slow) = counting_endpoint(true).await;
    let model = agentloop_testkit::server::MockServer::start(
        agentloop_testkit::server::Wire::OpenAi,
        [
            Turn::tool_call("fast", json!({})).with_ids(["call_fast"]),
            Turn::tool_call("slow", json!({})).with_ids(["call_slow"]),
            Turn::text("Done."),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    http_tool(&tools, "fast", &fast_url);
    http_tool(&tools, "slow", &slow_url);
    FastThenSlow {
        model,
        dir,
        tools,
        fast,
        slow,
    }
}

/// Send "Deploy it" through the server at `url` and read the answer until the [`FastThenSlow`]
/// model's slow tool has started: the conversation's id, the answer's, and the events seen
/// (checked).
pub async fn chat_until_the_slow_tool(url: &str, slow: &AtomicUsize) -> (String, String, Vec<Sse>) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Deploy it"}))
        .send()
        .await
        .unwrap();
    let conversation_id = header(&response, "x-agentloop-conversation-id");
    let message_id = header(&response, "x-agentloop-message-id");
    let seen = sse_until(response, |events| {
        events
            .iter()
            .any(|(_, name, data)| name == "tool_call_start" && data["id"] == "call_slow")
    })
    .await;
    assert_eq!(
        names(&seen),
        [
            "message_start",
            "tool_call_start",
            "tool_call_result",
            "tool_call_start"
        ]
    );
    // Its step's checkpoint is saved before any tool runs.
    wait_for(slow, 1).await;
    (conversation_id, message_id, seen)
}
