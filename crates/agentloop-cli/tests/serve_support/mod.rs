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

use serde_json::Value;
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
