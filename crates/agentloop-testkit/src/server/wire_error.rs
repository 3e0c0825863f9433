//! Errors as the servers send them: a status, a provider-neutral kind that each wire names in
//! its own words, a message and retry hints.

use std::time::Duration;

use agentloop::Error;

use super::fault::Fault;

/// What went wrong, before a wire names it (`invalid_request_error`, `overloaded_error`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    InvalidRequest,
    Authentication,
    Permission,
    NotFound,
    RateLimit,
    Internal,
    Overloaded,
    Timeout,
    /// A type given verbatim by the script.
    Named(String),
}

/// One error answer (a status response or a mid-stream error event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireError {
    /// HTTP status; `None` lets the wire pick its usual status for the kind (529 vs 503).
    pub status: Option<u16>,
    pub kind: ErrorKind,
    pub message: String,
    pub retry_after_secs: Option<u64>,
    pub retry_after_ms: Option<u64>,
}

/// How a scripted [`Error`] is played on the wire.
pub(crate) enum Played {
    /// An error status with the provider's error body.
    Reject(WireError),
    /// A 200 stream that ends with the provider's error event.
    ErrorEvent(WireError),
    /// The connection drops.
    Disconnect,
}

impl WireError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            status: None,
            kind,
            message: message.into(),
            retry_after_secs: None,
            retry_after_ms: None,
        }
    }

    fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The error a rejecting fault answers with; `None` for disturbances.
    pub(crate) fn from_fault(fault: &Fault) -> Option<Self> {
        Some(match fault {
            Fault::RateLimited {
                retry_after_secs,
                retry_after_ms,
            } => Self {
                retry_after_secs: *retry_after_secs,
                retry_after_ms: *retry_after_ms,
                ..Self::new(
                    ErrorKind::RateLimit,
                    "Rate limit reached (injected by the mock server).",
                )
            },
            Fault::ServerError => Self::new(
                ErrorKind::Internal,
                "Internal server error (injected by the mock server).",
            ),
            Fault::Overloaded => Self::new(ErrorKind::Overloaded, "Overloaded"),
            Fault::BadRequest { message } => Self::new(ErrorKind::InvalidRequest, message.clone()),
            Fault::Status {
                status,
                error_type,
                message,
            } => Self::new(ErrorKind::Named(error_type.clone()), message.clone())
                .with_status(*status),
            _ => return None,
        })
    }

    /// The mid-stream error of [`Fault::ErrorEvent`]: the overload a real stream reports most.
    pub(crate) fn midstream_default() -> Self {
        Self::new(ErrorKind::Overloaded, "Overloaded")
    }

    /// The answer to a call that found no scripted turn left.
    pub(crate) fn script_exhausted(call: usize, scripted: usize) -> Self {
        Self::new(
            ErrorKind::Internal,
            format!(
                "agentloop-testkit mock server: the script is exhausted: call {call} arrived but \
                 only {scripted} turn(s) were scripted; script more turns or add them with \
                 MockServer::push_turn"
            ),
        )
        .with_status(500)
    }
}

/// How a scripted error is played: transport failures drop the connection, stream errors
/// become an error event, everything else an error status with the provider's body.
pub(crate) fn play(error: &Error) -> Played {
    let reject = |status: u16, kind: ErrorKind, message: &str| {
        Played::Reject(WireError::new(kind, message).with_status(status))
    };
    match error {
        Error::Http { .. } | Error::IncompleteStream { .. } => Played::Disconnect,
        Error::Stream {
            error_type,
            message,
            ..
        } => Played::ErrorEvent(WireError::new(
            named_or(error_type, ErrorKind::Internal),
            message,
        )),
        Error::RateLimited {
            retry_after,
            message,
            ..
        } => Played::Reject(WireError {
            status: Some(429),
            retry_after_secs: retry_after.map(whole_seconds),
            retry_after_ms: retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ..WireError::new(ErrorKind::RateLimit, message.clone())
        }),
        Error::Overloaded { message, .. } => {
            Played::Reject(WireError::new(ErrorKind::Overloaded, message.clone()))
        }
        Error::Auth {
            status, message, ..
        } => {
            let kind = if *status == 403 {
                ErrorKind::Permission
            } else {
                ErrorKind::Authentication
            };
            reject(*status, kind, message)
        }
        Error::InvalidRequest {
            status,
            error_type,
            message,
            ..
        } => {
            let fallback = if *status == 404 {
                ErrorKind::NotFound
            } else {
                ErrorKind::InvalidRequest
            };
            reject(*status, named_or(error_type, fallback), message)
        }
        Error::Api {
            status,
            error_type,
            message,
            ..
        } => reject(*status, named_or(error_type, ErrorKind::Internal), message),
        Error::Timeout { .. } => reject(504, ErrorKind::Timeout, &error.to_string()),
        other => reject(500, ErrorKind::Internal, &other.to_string()),
    }
}

fn named_or(error_type: &Option<String>, fallback: ErrorKind) -> ErrorKind {
    error_type.clone().map_or(fallback, ErrorKind::Named)
}

/// `retry-after` carries whole seconds: round up so a client never retries too early.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
