//! The accept loop of [`crate::Server`]: HTTP/1 connections with deadlines for slow clients, a
//! cap on connections, `TCP_NODELAY`, and a graceful drain at shutdown.
//!
//! `axum::serve` has no header-read timeout, so a client that never finishes its headers (or
//! its body) would hold a connection, and a file descriptor, forever.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::config::ServerConfig;
use crate::state::AppState;

/// File descriptors kept for the database, the provider's connections and the rest, when the
/// connection cap is fitted to the open-file limit.
const RESERVED_FDS: u64 = 64;

/// The limits the accept loop applies.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) drain_timeout: Duration,
}

impl Limits {
    /// The configured limits, the connection cap lowered to fit `open_files` (each chat holds
    /// its client's connection and one to the model provider).
    pub(crate) fn new(config: &ServerConfig, open_files: Option<u64>) -> Self {
        let mut max_connections = config.max_connections.max(1);
        if let Some(limit) = open_files {
            let fits = usize::try_from(limit.saturating_sub(RESERVED_FDS) / 2)
                .unwrap_or(usize::MAX)
                .max(1);
            if fits < max_connections {
                tracing::warn!(
                    "serving at most {fits} connections at once (not {max_connections}): the open-file limit is {limit}"
                );
                max_connections = fits;
            }
        }
        Self {
            header_read_timeout: config.header_read_timeout,
            body_read_timeout: config.body_read_timeout,
            max_body_bytes: config.max_body_bytes,
            max_connections,
            drain_timeout: config.drain_timeout,
        }
    }
}

/// Raise the soft limit on open files to the hard limit, so many connections do not run the
/// process out of descriptors; the soft limit in force afterwards (`None`: unknown). Never
/// fails: a limit that cannot be read or raised is logged and left as it is.
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!("could not read the open-file limit: {e}");
            return None;
        }
    };
    let known = |n: u64| (n != RLIM_INFINITY).then_some(n);
    // Linux refuses an unlimited soft limit on files; its ceiling is `nr_open`.
    let target = if hard == RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(hard)
    } else {
        hard
    };
    if soft >= target {
        return known(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::info!("raised the open-file limit from {soft} to {target}");
            known(target)
        }
        Err(e) => {
            tracing::warn!("could not raise the open-file limit from {soft} to {target}: {e}");
            known(soft)
        }
    }
}

/// Serve `app` on `listener` until `shutdown` completes; then stop accepting, cancel the
/// answers in flight (`state`), and wait up to the drain timeout for them to be saved and for
/// the connections to close.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    state: AppState,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let limits = Arc::new(limits);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let force_close = CancellationToken::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Connections beyond the cap wait in the listen backlog until one closes.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        // Streamed events are small writes: without this each waits for the client's delayed
        // ACK of the previous one.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {e}");
        }
        let service = hyper::service::service_fn({
            let app = app.clone();
            let limits = limits.clone();
            move |request| handle(request, app.clone(), limits.clone())
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let force_close = force_close.clone();
        tokio::spawn(async move {
            tokio::select! {
                served = connection => if let Err(e) = served {
                    tracing::debug!("connection ended: {e}");
                },
                () = force_close.cancelled() => {}
            }
            drop(permit);
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        tokio::join!(state.shutdown(), graceful.shutdown());
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "shutdown: answers or connections were still open after the drain timeout ({:?}); closing them",
            limits.drain_timeout
        );
    }
    force_close.cancel();
}

/// After a failed accept: errors of one connection are skipped; others (out of file
/// descriptors) pause accepting briefly instead of spinning.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::error!("could not accept a connection: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// One request: refused before its body is read when it announces more than the limit, else
/// handed to the router with a deadline on its body.
async fn handle(
    request: Request<Incoming>,
    app: Router,
    limits: Arc<Limits>,
) -> Result<Response<Body>, Infallible> {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = announced
        && length > limits.max_body_bytes as u64
    {
        return Ok(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body has {length} bytes; the limit is {} bytes",
                limits.max_body_bytes
            ),
        ));
    }
    let expired = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        Body::new(DeadlineBody {
            inner: body,
            deadline: Box::pin(tokio::time::sleep(limits.body_read_timeout)),
            timeout: limits.body_read_timeout,
            expired: expired.clone(),
        })
    });
    let mut response = app.oneshot(request).await?;
    if expired.load(Ordering::Relaxed) {
        // The rest of the body may never come: do not wait for it to reuse the connection.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// A JSON error answer that closes the connection (the unread body is not worth draining).
fn refuse(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": { "message": message } }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The request body was not received in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {0:?}; send it faster or in full")]
struct BodyTimeout(Duration);

/// A request body that fails once its deadline passes, so a client that announces a body and
/// trickles or withholds it cannot hold the handler (and the connection) open.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    /// Set when the deadline passed.
    expired: Arc<AtomicBool>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.expired.store(true, Ordering::Relaxed);
                Poll::Ready(Some(Err(BodyTimeout(this.timeout).into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ServerConfig {
        let model = agentloop_testkit::ScriptedModel::new([]);
        ServerConfig::new(agentloop::Agent::builder(model).build()).max_connections(1000)
    }

    #[test]
    fn the_connection_cap_fits_the_open_file_limit() {
        assert_eq!(Limits::new(&config(), None).max_connections, 1000);
        assert_eq!(
            Limits::new(&config(), Some(1_048_576)).max_connections,
            1000
        );
        assert_eq!(Limits::new(&config(), Some(1024)).max_connections, 480);
        assert_eq!(Limits::new(&config(), Some(10)).max_connections, 1);
    }
}
