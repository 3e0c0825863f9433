//! Shared helpers: a server on 127.0.0.1:0 and an SSE reader.

#![allow(dead_code)]

pub mod deploy;

use std::collections::VecDeque;

use agentloop::sse::SseParser;
use agentloop_server::{AppState, ServerConfig, router};
use serde_json::Value;

/// A server running in the test's runtime.
pub struct TestServer {
    pub url: String,
    pub state: AppState,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> Self {
        let state = AppState::new(config).await.expect("the server state opens");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = router(state.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, state, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Stop serving and wait until every answer in flight is saved.
    pub async fn stop(self) {
        self.state.shutdown().await;
        self.task.abort();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A client that never reuses connections (a pooled connection closed by the server between
/// two requests would make a test flaky).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// One received event.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
}

impl Received {
    pub fn id_number(&self) -> u64 {
        self.id
            .as_deref()
            .expect("every event has an id")
            .parse()
            .expect("ids are numbers")
    }
}

/// Reads SSE events from a streaming response.
pub struct EventReader {
    response: reqwest::Response,
    parser: SseParser,
    queue: VecDeque<Received>,
    done: bool,
}

impl EventReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            parser: SseParser::new(),
            queue: VecDeque::new(),
            done: false,
        }
    }

    pub fn headers(&self) -> &reqwest::header::HeaderMap {
        self.response.headers()
    }

    pub async fn next(&mut self) -> Option<Received> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let chunk = self.response.chunk().await.expect("the stream reads");
            let queue = &mut self.queue;
            let mut push = |e: agentloop::sse::SseEvent<'_>| {
                let data = serde_json::from_str(&e.data)
                    .unwrap_or_else(|_| Value::String(e.data.to_string()));
                queue.push_back(Received {
                    id: e.id.map(str::to_owned),
                    event: e.event.to_owned(),
                    data,
                });
            };
            match chunk {
                Some(bytes) => self.parser.feed(&bytes, &mut push),
                None => {
                    self.parser.finish(&mut push);
                    self.done = true;
                }
            }
        }
    }

    /// Read until `stop` returns true for an event (included), or the end.
    pub async fn read_until(&mut self, stop: impl Fn(&Received) -> bool) -> Vec<Received> {
        let mut out = Vec::new();
        while let Some(event) = self.next().await {
            let last = stop(&event);
            out.push(event);
            if last {
                break;
            }
        }
        out
    }

    pub async fn rest(mut self) -> Vec<Received> {
        self.read_until(|_| false).await
    }
}

/// `(name, data)` pairs, for comparing whole sequences.
pub fn named(events: &[Received]) -> Vec<(String, Value)> {
    events
        .iter()
        .map(|e| (e.event.clone(), e.data.clone()))
        .collect()
}

pub fn event(name: &str, data: Value) -> (String, Value) {
    (name.to_owned(), data)
}

pub async fn post_chat(server: &TestServer, body: Value) -> reqwest::Response {
    client()
        .post(server.url("/v1/chat"))
        .json(&body)
        .send()
        .await
        .expect("the request is sent")
}
