//! A reply ready to send: status, headers and the body as a list of network writes, with the
//! delays and the disconnect to play. Built once, sent any number of times (pre-rendered mode
//! shares one behind an `Arc`).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};

#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Wait before the status line.
    pub delay: Duration,
    /// The body, one entry per network write (HTTP chunk).
    pub writes: Vec<Bytes>,
    /// Wait between two writes.
    pub write_delay: Duration,
    /// Drop the connection after the writes instead of ending the body.
    pub disconnect: bool,
}

impl Reply {
    fn new(status: u16, content_type: &'static str, writes: Vec<Bytes>) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers,
            delay: Duration::ZERO,
            writes,
            write_delay: Duration::ZERO,
            disconnect: false,
        }
    }

    /// A JSON body in one write.
    pub(crate) fn json(status: u16, body: Bytes) -> Self {
        Self::new(status, "application/json", vec![body])
    }

    /// A 200 event stream, one write per frame.
    pub(crate) fn event_stream(frames: Vec<Bytes>) -> Self {
        let mut reply = Self::new(200, "text/event-stream; charset=utf-8", frames);
        reply
            .headers
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        reply
    }

    pub(crate) fn body_len(&self) -> usize {
        self.writes.iter().map(Bytes::len).sum()
    }

    /// Keep only the first `limit` body bytes and drop the connection after them.
    pub(crate) fn disconnect_after(&mut self, limit: usize) {
        let mut left = limit;
        self.writes.retain_mut(|write| {
            let keep = write.len().min(left);
            left -= keep;
            write.truncate(keep);
            keep > 0
        });
        self.disconnect = true;
    }

    /// One write per byte.
    pub(crate) fn split_into_bytes(&mut self) {
        self.writes = self
            .writes
            .iter()
            .flat_map(|write| (0..write.len()).map(|i| write.slice(i..i + 1)))
            .collect();
    }

    /// The whole body in one write.
    pub(crate) fn merge_writes(&mut self) {
        if self.writes.len() > 1 {
            let mut whole = BytesMut::with_capacity(self.body_len());
            for write in &self.writes {
                whole.extend_from_slice(write);
            }
            self.writes = vec![whole.freeze()];
        }
    }

    /// Send it: waits the delay, then answers with a body that plays the writes.
    pub(crate) async fn respond(self: Arc<Self>) -> Response {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let body = if !self.disconnect && self.writes.len() <= 1 {
            // One piece: a plain body with content-length.
            Body::from(self.writes.first().cloned().unwrap_or_default())
        } else {
            Body::from_stream(writes(Arc::clone(&self)))
        };
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// The body stream: each write in turn, with the delay between them, then an error if the
/// connection is to be dropped (hyper aborts the connection when a body stream fails).
fn writes(reply: Arc<Reply>) -> impl futures::Stream<Item = io::Result<Bytes>> + Send {
    futures::stream::unfold((reply, 0usize), |(reply, i)| async move {
        if let Some(write) = reply.writes.get(i) {
            if i > 0 && !reply.write_delay.is_zero() {
                tokio::time::sleep(reply.write_delay).await;
            }
            let write = write.clone();
            return Some((Ok(write), (reply, i + 1)));
        }
        if i == reply.writes.len() && reply.disconnect {
            // Let hyper flush what was written before it tears the connection down.
            tokio::task::yield_now().await;
            let cut = io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock server: injected disconnect",
            );
            return Some((Err(cut), (reply, i + 1)));
        }
        None
    })
}
