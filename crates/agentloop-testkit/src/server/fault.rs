//! Faults the mock servers can inject, and how a reply is cut into network writes.

use std::time::Duration;

/// Something going wrong on the wire, attached to one [`Turn`](crate::Turn) with
/// [`Turn::with_fault`](crate::Turn::with_fault) or queued for the next requests with
/// [`MockServer::inject`](super::MockServer::inject).
///
/// Two kinds:
/// - **rejections** ([`RateLimited`](Self::RateLimited), [`ServerError`](Self::ServerError),
///   [`Overloaded`](Self::Overloaded), [`BadRequest`](Self::BadRequest), [`Status`](Self::Status))
///   answer with an error status and the provider's error body instead of the turn;
/// - **disturbances** (all others) change how the answer is delivered and combine with each
///   other.
///
/// The scripted in-process model ignores faults: they only exist on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// HTTP 429 with the provider's rate-limit error body and the given headers.
    RateLimited {
        /// `retry-after` header, in whole seconds.
        retry_after_secs: Option<u64>,
        /// `retry-after-ms` header (sent by OpenAI, honoured by its SDKs).
        retry_after_ms: Option<u64>,
    },
    /// HTTP 500 with the provider's internal-error body.
    ServerError,
    /// Overloaded: HTTP 529 `overloaded_error` on the Anthropic wire, HTTP 503 on the OpenAI
    /// wire (OpenAI has no 529).
    Overloaded,
    /// HTTP 400 `invalid_request_error` with this message.
    BadRequest {
        /// The error message.
        message: String,
    },
    /// Any status with the provider's error body.
    Status {
        /// HTTP status.
        status: u16,
        /// The provider error type (`error.type`).
        error_type: String,
        /// The error message.
        message: String,
    },
    /// Send the status line, headers and this many bytes of the body, then drop the
    /// connection (0 cuts it right after the headers).
    Disconnect {
        /// Body bytes sent before the cut.
        after_bytes: usize,
    },
    /// Insert a truncated, unparseable JSON chunk after this many SSE events; the stream goes
    /// on after it. A non-streaming answer gets a truncated JSON body instead.
    MalformedChunk {
        /// SSE events sent before the bad one.
        after_events: usize,
    },
    /// End the stream with the provider's error event after this many SSE events (OpenAI: a
    /// `data: {"error":{...}}` chunk; Anthropic: `event: error` with `overloaded_error`). A
    /// non-streaming answer fails with the overload status instead (503 / 529).
    ErrorEvent {
        /// SSE events sent before the error.
        after_events: usize,
    },
    /// Wait this long before answering (before the status line).
    Delay(Duration),
    /// Wait this long between two network writes.
    SlowChunks(Duration),
    /// Send the body one byte per network write (one HTTP chunk per byte).
    OneByteWrites,
}

impl Fault {
    /// HTTP 429 with `retry-after: <secs>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::RateLimited {
            retry_after_secs: Some(retry_after_secs),
            retry_after_ms: None,
        }
    }

    /// HTTP 429 with `retry-after-ms: <ms>` only.
    pub fn rate_limited_ms(retry_after_ms: u64) -> Self {
        Self::RateLimited {
            retry_after_secs: None,
            retry_after_ms: Some(retry_after_ms),
        }
    }

    /// HTTP 400 with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
        }
    }

    /// Whether this fault replaces the answer with an error status.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::ServerError
                | Self::Overloaded
                | Self::BadRequest { .. }
                | Self::Status { .. }
        )
    }
}

/// How a reply body is cut into network writes (HTTP chunks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteMode {
    /// One write per SSE event, like a real token stream. Non-streaming bodies are one write.
    #[default]
    PerEvent,
    /// The whole body in one write (sent with `content-length`).
    WholeBody,
}
