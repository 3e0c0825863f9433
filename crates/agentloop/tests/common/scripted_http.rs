//! A small scripted HTTP server on 127.0.0.1 for a provider's tests: it answers each request
//! with the next [`Reply`] and keeps what it was sent.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the server answers to one request.
pub enum Reply {
    /// A whole JSON body with a status and extra headers.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// An SSE body sent in these pieces.
    Sse(Vec<Bytes>),
    /// These SSE pieces; once `cut` is notified, the connection drops.
    SseThenCut(Vec<Bytes>, Arc<Notify>),
    /// These SSE pieces, `gap` apart, then nothing more on an open connection.
    SseThenStall(Vec<Bytes>, Duration),
}

/// A 200 with this JSON body.
pub fn json_reply(body: Value) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![],
        body: body.to_string(),
    }
}

/// One request the server was sent.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The replies still to give and the requests seen.
#[derive(Clone, Default)]
pub struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Script {
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serve `replies` in order for POSTs to `path` on 127.0.0.1 (any port); returns the script
/// and `http://127.0.0.1:PORT`.
pub async fn serve(path: &str, replies: Vec<Reply>) -> (Script, String) {
    let script = Script {
        replies: Arc::new(Mutex::new(replies.into())),
        ..Script::default()
    };
    let app = axum::Router::new()
        .route(path, axum::routing::post(answer))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (script, url)
}

async fn answer(
    axum::extract::State(script): axum::extract::State<Script>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    script.seen.lock().unwrap().push(Seen {
        at: Instant::now(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = script.replies.lock().unwrap().pop_front();
    let builder = axum::response::Response::builder();
    let sse = |body: Body| {
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    };
    match reply {
        None => builder
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("no scripted reply left"))
            .unwrap(),
        Some(Reply::Full {
            status,
            headers,
            body,
        }) => {
            let mut builder = builder
                .status(status)
                .header("content-type", "application/json");
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            builder.body(Body::from(body)).unwrap()
        }
        Some(Reply::Sse(pieces)) => sse(Body::from_stream(futures::stream::iter(
            pieces.into_iter().map(Ok::<_, Infallible>),
        ))),
        Some(Reply::SseThenCut(pieces, cut)) => {
            // The cut waits for the test's signal, so the pieces are surely delivered first.
            let cut = futures::stream::once(async move {
                cut.notified().await;
                Err(std::io::Error::other("connection cut"))
            });
            sse(Body::from_stream(
                futures::stream::iter(pieces.into_iter().map(Ok)).chain(cut),
            ))
        }
        Some(Reply::SseThenStall(pieces, gap)) => {
            let paced = futures::stream::iter(pieces).then(move |piece| async move {
                tokio::time::sleep(gap).await;
                Ok::<_, Infallible>(piece)
            });
            sse(Body::from_stream(paced.chain(futures::stream::pending())))
        }
    }
}
