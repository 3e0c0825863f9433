//! One error type for the whole crate, with a variant per cause so callers can act on it.
//!
//! Tool failures are not errors: they become tool results the model sees (see
//! [`crate::run::ToolOutcome`]). A run only fails when it cannot go on.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutKind {
    /// Establishing the connection.
    Connect,
    /// The whole HTTP request (non-streaming).
    Request,
    /// Waiting for the first chunk of a stream.
    FirstChunk,
    /// Waiting between two chunks of a stream.
    Idle,
    /// One step of a run (model call plus tools).
    Step,
    /// The whole run.
    Run,
    /// One tool call run directly ([`crate::Tool::execute`]).
    Tool,
}

impl std::fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Request => "request",
            Self::FirstChunk => "first chunk",
            Self::Idle => "idle between chunks",
            Self::Step => "step",
            Self::Run => "run",
            Self::Tool => "tool",
        })
    }
}

/// Everything that can go wrong.
///
/// Serializes as `{"kind", "message", "details"}`: the [`Error::kind`] name, the display text,
/// and the variant's fields, from which it deserializes again (a saved run keeps why it
/// failed).
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
#[serde(
    remote = "Self",
    tag = "kind",
    content = "details",
    rename_all = "snake_case"
)]
#[non_exhaustive]
pub enum Error {
    /// The request never got a usable HTTP answer (DNS, connect, TLS, reset).
    #[error("HTTP transport error: {message}")]
    Http {
        /// What the transport said.
        message: String,
    },
    /// The provider answered with an error status we have no more specific variant for.
    #[error("{provider} API error {status}{}: {message}", error_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default())]
    Api {
        /// Which provider.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's error type or code, when it sent one.
        error_type: Option<String>,
        /// The provider's message.
        message: String,
    },
    /// 429: too many requests. Retried automatically up to the configured maximum.
    #[error("{provider} rate limited the request{}: {message}", retry_after.map(|d| format!(" (retry after {:.1}s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        /// Which provider.
        provider: String,
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The provider is overloaded (Anthropic 529, `overloaded_error`, or 503).
    #[error("{provider} is overloaded: {message}")]
    Overloaded {
        /// Which provider.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// 401/403: the API key is missing, wrong or lacks permission.
    #[error("{provider} rejected the credentials ({status}): {message}; check the API key")]
    Auth {
        /// Which provider.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// 400/404/422: the provider refused the request as malformed. Not retried.
    #[error("{provider} refused the request as invalid ({status}): {message}")]
    InvalidRequest {
        /// Which provider.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's error type, when it sent one.
        error_type: Option<String>,
        /// The provider's message.
        message: String,
    },
    /// The provider sent an error event after a successful start of the stream.
    #[error("{provider} reported an error mid-stream{}: {message}", error_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default())]
    Stream {
        /// Which provider.
        provider: String,
        /// The provider's error type or code.
        error_type: Option<String>,
        /// The provider's message.
        message: String,
    },
    /// A timeout fired.
    #[error("{kind} timeout after {:.1}s", after.as_secs_f64())]
    Timeout {
        /// Which timeout.
        kind: TimeoutKind,
        /// How long it was.
        after: Duration,
    },
    /// A response or stream chunk could not be understood.
    #[error("could not parse the {what}: {message}")]
    Parse {
        /// What was being parsed.
        what: String,
        /// Why it failed.
        message: String,
    },
    /// The stream ended (or the connection dropped) before the response was complete.
    #[error("the stream ended before the response was complete: {message}")]
    #[serde(alias = "interrupted")]
    IncompleteStream {
        /// What happened.
        message: String,
    },
    /// The run or call was cancelled by its caller.
    #[error("cancelled")]
    Cancelled,
    /// A tool call's arguments could not be turned into the tool's input type.
    #[error("arguments for tool `{tool}` do not match its input: {message}")]
    ToolArgumentParse {
        /// The tool.
        tool: String,
        /// The serde error.
        message: String,
    },
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool `{tool}` has an invalid input schema: {message}")]
    InvalidToolSchema {
        /// The tool.
        tool: String,
        /// What is wrong with it.
        message: String,
    },
    /// A tool file could not be loaded, or a tool could not be added to a registry.
    #[error("{}", load_message(path, tool.as_deref(), *line, *column, message))]
    ToolLoad {
        /// The file (or the tool's source, such as an MCP server).
        path: String,
        /// The tool, when the problem belongs to one.
        tool: Option<String>,
        /// 1-based line in the file, when the parser gave one.
        line: Option<usize>,
        /// 1-based column in the file, when the parser gave one.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A tool failed where failure cannot be fed back to the model: a direct call
    /// ([`crate::Tool::execute`]). In a run, failures become tool results instead.
    #[error("tool `{tool}` failed: {message}")]
    ToolExecution {
        /// The tool.
        tool: String,
        /// What went wrong.
        message: String,
    },
    /// A hook refused to go on.
    #[error("blocked by the {hook} hook: {reason}")]
    HookBlocked {
        /// Which hook.
        hook: String,
        /// The reason it gave.
        reason: String,
    },
    /// The provider has no such feature.
    #[error("{feature} is not supported by {provider}")]
    Unsupported {
        /// Which provider.
        provider: String,
        /// What was asked for.
        feature: String,
    },
    /// A configuration problem: unknown provider, missing key, bad URL, ...
    #[error("configuration error: {message}")]
    Config {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The run stopped before the model finished its answer (see [`crate::run::RunResult::finished`]).
    #[error("the run did not finish: it stopped with `{reason}`")]
    Incomplete {
        /// The run's stop reason.
        reason: String,
    },
    /// A typed run paused for approval of some of its calls before it answered: decide them
    /// and resume the paused run ([`crate::Agent::resume_output`]).
    #[error("{}", awaiting_message(paused))]
    AwaitingApproval {
        /// The paused run, to resume with the decisions.
        paused: Box<crate::run::PausedRun>,
    },
    /// A typed run's answer still broke its output's schema or validator when the retries
    /// ran out (see [`crate::output`]).
    #[error(
        "the model's answer did not match the output `{name}` within the retries: {}",
        violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    InvalidOutput {
        /// The output's name.
        name: String,
        /// What was wrong with the last answer, by JSON pointer.
        violations: Vec<crate::tool::Violation>,
    },
    /// The history is not valid to send (a tool use without a result, a result for nothing).
    #[error("invalid history: {message}")]
    InvalidHistory {
        /// What is wrong.
        message: String,
    },
    /// The request goes past a limit the provider documents (tools per request, cache
    /// breakpoints); it was not sent.
    #[error(
        "{provider} accepts at most {limit} {what} per request, and this one has {count}; remove some or split the work"
    )]
    LimitExceeded {
        /// Which provider.
        provider: String,
        /// What is counted (`tools`, `cache breakpoints`).
        what: String,
        /// The provider's limit.
        limit: usize,
        /// How many the request has.
        count: usize,
    },
    /// A saved value (a paused run) was written in a format version this build does not read.
    #[error(
        "the {what} was saved in format version {found}, but this version of agentloop reads only version {supported}; resume it with the agentloop version that saved it"
    )]
    UnsupportedVersion {
        /// What was read (`paused run`).
        what: String,
        /// The version it holds.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A decision on a paused run's call cannot be applied (no such pending call, or a run that
    /// is not waiting for approval). Nothing was run.
    #[error("cannot apply the decision for tool call `{call_id}`: {message}")]
    InvalidDecision {
        /// The call id the decision named.
        call_id: String,
        /// What is wrong.
        message: String,
    },
    /// A durable run's store failed to load or save a checkpoint (see [`crate::run::RunStore`]).
    #[error("the run store failed for run `{run_id}`: {message}")]
    Store {
        /// The run.
        run_id: String,
        /// What the store said.
        message: String,
    },
    /// A checkpoint save named a version that is no longer the stored one: another writer
    /// (another process resuming the run, or the run already existing) saved it since. Load
    /// the run again rather than overwrite it.
    #[error(
        "the checkpoint of run `{run_id}` moved on: this writer read version {expected} but the store holds version {found}; another writer owns the run now (or it already exists), so load it again instead of saving over it"
    )]
    StaleCheckpoint {
        /// The run.
        run_id: String,
        /// The version this writer read (0: none, a new run).
        expected: u64,
        /// The version the store holds.
        found: u64,
    },
    /// The request does not fit the model's context window, by the run's estimate, even after
    /// every strategy of the run's [`crate::context::ContextPolicy`]; it was not sent.
    #[error(
        "the request needs about {estimate} tokens but the context window leaves {budget} of its {window} for the input; add a strategy to the run's context policy (trim turns, summarize) or use a model with a larger window"
    )]
    ContextWindow {
        /// The request's estimated input tokens.
        estimate: u64,
        /// What the window leaves for the input once the answer's room is kept.
        budget: u64,
        /// The window.
        window: u64,
    },
    /// No run with this id is in the store.
    #[error("no run `{run_id}` in the store; start it with Agent::run_durable")]
    RunNotFound {
        /// The run asked for.
        run_id: String,
    },
}

impl Error {
    /// Whether retrying the same request may succeed (transport, 408/409/429/5xx/529).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { .. } | Self::RateLimited { .. } | Self::Overloaded { .. } => true,
            Self::Api {
                status: 408 | 409 | 500..=599,
                ..
            } => true,
            // Bedrock's mid-stream `modelStreamErrorException` ("Retry your request"); other
            // 424s (a model's own error) are not.
            Self::Api {
                status: 424,
                error_type: Some(kind),
                ..
            } => kind.eq_ignore_ascii_case("modelStreamErrorException"),
            Self::Timeout { kind, .. } => {
                matches!(kind, TimeoutKind::Connect | TimeoutKind::Request)
            }
            _ => false,
        }
    }

    /// How long the provider asked us to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short snake_case name of the variant, used in events and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Api { .. } => "api",
            Self::RateLimited { .. } => "rate_limited",
            Self::Overloaded { .. } => "overloaded",
            Self::Auth { .. } => "auth",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::Stream { .. } => "stream",
            Self::Timeout { .. } => "timeout",
            Self::Parse { .. } => "parse",
            Self::IncompleteStream { .. } => "incomplete_stream",
            Self::Cancelled => "cancelled",
            Self::ToolArgumentParse { .. } => "tool_argument_parse",
            Self::InvalidToolSchema { .. } => "invalid_tool_schema",
            Self::ToolLoad { .. } => "tool_load",
            Self::ToolExecution { .. } => "tool_execution",
            Self::HookBlocked { .. } => "hook_blocked",
            Self::Unsupported { .. } => "unsupported",
            Self::Config { .. } => "config",
            Self::InvalidHistory { .. } => "invalid_history",
            Self::Incomplete { .. } => "incomplete",
            Self::AwaitingApproval { .. } => "awaiting_approval",
            Self::InvalidOutput { .. } => "invalid_output",
            Self::LimitExceeded { .. } => "limit_exceeded",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::InvalidDecision { .. } => "invalid_decision",
            Self::Store { .. } => "store",
            Self::StaleCheckpoint { .. } => "stale_checkpoint",
            Self::RunNotFound { .. } => "run_not_found",
            Self::ContextWindow { .. } => "context_window",
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::Config {
            message: message.into(),
        }
    }

    pub(crate) fn parse(what: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::Parse {
            what: what.into(),
            message: message.to_string(),
        }
    }
}

/// `the run paused for approval of 2 calls (`a`, `b`): decide them and resume the paused run`.
fn awaiting_message(paused: &crate::run::PausedRun) -> String {
    let pending = paused.pending();
    let tools: Vec<String> = pending.iter().map(|p| format!("`{}`", p.tool)).collect();
    let (calls, them) = if pending.len() == 1 {
        ("call", "it")
    } else {
        ("calls", "them")
    };
    format!(
        "the run paused for approval of {} {calls} ({}): decide {them} and resume the paused run",
        pending.len(),
        tools.join(", ")
    )
}

/// `file:line:column: tool `name`: message`, leaving out what is unknown.
fn load_message(
    path: &str,
    tool: Option<&str>,
    line: Option<usize>,
    column: Option<usize>,
    message: &str,
) -> String {
    let mut out = path.to_owned();
    if let Some(line) = line {
        out.push_str(&format!(":{line}"));
        if let Some(column) = column {
            out.push_str(&format!(":{column}"));
        }
    }
    out.push_str(": ");
    if let Some(tool) = tool {
        out.push_str(&format!("tool `{tool}`: "));
    }
    out.push_str(message);
    out
}

/// The derived, adjacently tagged form (`{"kind", "details"}`) that [`Error`]'s own impls add
/// the display text to.
struct Tagged<'a>(&'a Error);

impl Serialize for Tagged<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Error::serialize(self.0, serializer)
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(Tagged(self)).map_err(serde::ser::Error::custom)?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("message".into(), self.to_string().into());
        }
        value.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Error {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = serde_json::Value::deserialize(deserializer)?;
        // The display text is derived from the details; drop it rather than trust it.
        if let serde_json::Value::Object(map) = &mut value {
            map.remove("message");
        }
        Error::deserialize(value).map_err(serde::de::Error::custom)
    }
}
