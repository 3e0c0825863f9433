//! Every wire fault the testkit server can inject × {blocking `run`, streaming `run_stream`} ×
//! {OpenAI, Anthropic, Gemini, Bedrock, Responses} × {fault in the first model call, fault in the call after a tool step},
//! over real loopback HTTP. Each cell asserts the documented outcome (recovery after
//! retries, or a run that stops with `Error` and the typed cause), the exact number of requests
//! (so a retry after a stream started yielding would show), a valid history, and a time bound.
//!
//! Real time, tiny delays: with paused time tokio auto-advances while every task waits on
//! loopback I/O, which fires the transport's idle timeouts spuriously.

mod common;

use std::time::Duration;

use agentloop::provider::http::RetryPolicy;
use agentloop::run::{RunEvent, RunStopReason};
use agentloop::{Agent, AgentBuilder, Error, RunResult, Tool, ToolOutput, history};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};
use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

/// Longest any cell may take; the slowest fault (`SlowChunks`) needs well under a second.
const BOUND: Duration = Duration::from_secs(10);

/// The wait the rate-limit fault asks for (`retry-after-ms`); the backoff is far shorter, so a
/// run taking at least this long shows the header was honoured.
const RETRY_AFTER_MS: u64 = 40;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Blocking,
    Streaming,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// The first model call.
    FirstCall,
    /// The second model call, after a completed tool step.
    AfterToolStep,
}

impl Place {
    /// 0-based index of the faulted model call.
    fn call(self) -> usize {
        match self {
            Place::FirstCall => 0,
            Place::AfterToolStep => 1,
        }
    }
}

/// What a cell must end in.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The run finishes normally after `retries` extra requests. `spare`: the faulted reply had
    /// already taken its scripted turn (the server only keeps the turn for rejections), so the
    /// script holds a copy for the retry.
    Recovers { retries: usize, spare: bool },
    /// The run stops with `RunStopReason::Error` and this error; no retry.
    Fails(ErrorKind),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ErrorKind {
    InvalidRequest,
    Auth,
    Interrupted,
    Parse,
    Stream,
    Overloaded,
    Api,
}

impl ErrorKind {
    fn matches(self, error: &Error) -> bool {
        match self {
            ErrorKind::InvalidRequest => {
                matches!(error, Error::InvalidRequest { message, .. } if message.contains("bad tool schema"))
            }
            ErrorKind::Auth => {
                matches!(error, Error::Auth { message, .. } if message.contains("bad key"))
            }
            ErrorKind::Interrupted => matches!(error, Error::IncompleteStream { .. }),
            ErrorKind::Overloaded => matches!(error, Error::Overloaded { .. }),
            ErrorKind::Parse => matches!(error, Error::Parse { .. }),
            ErrorKind::Stream => matches!(error, Error::Stream { .. }),
            ErrorKind::Api => matches!(error, Error::Api { status: 500, .. }),
        }
    }
}

/// The documented outcome of `fault` in `mode` on `wire` (see the testkit's `Fault` docs for
/// what the server sends, and `provider::http` for what is retried).
fn expected(fault: &Fault, mode: Mode, wire: Wire, place: Place) -> Expect {
    match (fault, mode) {
        // Rejections do not take the turn: the retry gets it.
        (Fault::RateLimited { .. } | Fault::ServerError | Fault::Overloaded, _) => {
            Expect::Recovers {
                retries: 1,
                spare: false,
            }
        }
        (Fault::BadRequest { .. }, _) => Expect::Fails(ErrorKind::InvalidRequest),
        (Fault::Status { status: 401, .. }, _) => Expect::Fails(ErrorKind::Auth),
        // A streamed body cut after the 200: never retried, the run stops interrupted.
        (Fault::Disconnect { .. }, Mode::Streaming) => Expect::Fails(ErrorKind::Interrupted),
        // A non-streamed body cut before it was used: the whole call is retried.
        (Fault::Disconnect { .. }, Mode::Blocking) => Expect::Recovers {
            retries: 1,
            spare: true,
        },
        (Fault::MalformedChunk { .. }, _) => Expect::Fails(ErrorKind::Parse),
        // OpenAI's error chunk has no type to go by: never retried. Anthropic's
        // `overloaded_error` event is the in-stream twin of HTTP 529 (Anthropic docs,
        // "Streaming Messages" → "Error events"), Gemini's `UNAVAILABLE` error chunk and
        // Bedrock's `serviceUnavailableException` frame that of HTTP 503, the Responses API's
        // `server_error` that of HTTP 500: retried while no content came (the faulted stream
        // used its turn), typed once some did.
        (Fault::ErrorEvent { after_events }, Mode::Streaming) => match wire {
            Wire::OpenAi => Expect::Fails(ErrorKind::Stream),
            _ if *after_events <= leading_events(wire, place) => Expect::Recovers {
                retries: 1,
                spare: true,
            },
            Wire::Responses => Expect::Fails(ErrorKind::Api),
            Wire::Anthropic | Wire::Gemini | Wire::Bedrock => Expect::Fails(ErrorKind::Overloaded),
        },
        // Non-streamed, the server answers 503 (overloaded) instead: retried.
        (Fault::ErrorEvent { .. }, Mode::Blocking) => Expect::Recovers {
            retries: 1,
            spare: true,
        },
        // Disturbances of delivery only.
        (Fault::SlowChunks(_) | Fault::OneByteWrites | Fault::Delay(_), _) => Expect::Recovers {
            retries: 0,
            spare: false,
        },
        (other, _) => panic!("no expectation for {other:?}"),
    }
}

/// How many events the testkit's streams send before any content (the call of the first
/// turn, the text of the second): Anthropic `message_start`, then `content_block_start` of a
/// tool use (content) or of an empty text block and a `ping`; Gemini's first chunk carries
/// content; Bedrock `messageStart`; Responses `response.created`, `response.in_progress`, then
/// a function call item (content) or a message item and its empty `content_part.added`.
fn leading_events(wire: Wire, place: Place) -> usize {
    match (wire, place) {
        (Wire::OpenAi | Wire::Bedrock, _) | (Wire::Anthropic, Place::FirstCall) => 1,
        (Wire::Gemini, _) => 0,
        (Wire::Anthropic, Place::AfterToolStep) => 3,
        (Wire::Responses, Place::FirstCall) => 2,
        (Wire::Responses, Place::AfterToolStep) => 4,
    }
}

fn echo_tool() -> Tool {
    Tool::from_schema(
        "echo",
        "Echo the input",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
    )
    .unwrap()
    .with_handler(
        |_ctx: agentloop::ToolContext, input: serde_json::Value| async move {
            Ok(ToolOutput::text(input.to_string()))
        },
    )
}

/// An agent builder on `wire`'s provider, pointed at `server`, with short retry waits.
fn agent(server: &MockServer, wire: Wire) -> AgentBuilder {
    common::wire_agent(
        server,
        wire,
        RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(1),
        },
    )
}

/// Runs the agent and, for streamed runs, checks the event protocol around errors.
async fn run(agent: &Agent, mode: Mode) -> RunResult {
    match mode {
        Mode::Blocking => agent.run("go").await.unwrap(),
        Mode::Streaming => {
            let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
            let errors: Vec<&Error> = events
                .iter()
                .filter_map(|e| match e {
                    RunEvent::Error { error } => Some(error),
                    _ => None,
                })
                .collect();
            let Some(RunEvent::RunFinish { result }) = events.last() else {
                panic!("the stream did not end with run_finish: {events:?}");
            };
            assert!(matches!(events.first(), Some(RunEvent::RunStart)));
            match &result.error {
                Some(error) => {
                    assert_eq!(errors.len(), 1, "one error event: {events:?}");
                    assert_eq!(errors[0].kind(), error.kind());
                    assert!(matches!(events[events.len() - 2], RunEvent::Error { .. }));
                }
                None => assert!(errors.is_empty(), "no error event: {events:?}"),
            }
            (**result).clone()
        }
    }
}

async fn cell(fault: Fault, mode: Mode, wire: Wire, place: Place) {
    let label = format!("{fault:?} / {mode:?} / {wire:?} / {place:?}");
    let expect = expected(&fault, mode, wire, place);
    let mut turns = vec![Turn::tool_call("echo", json!({"n": 1})), Turn::text("done")];
    if let Expect::Recovers { spare: true, .. } = expect {
        let copy = turns[place.call()].clone();
        turns.insert(place.call() + 1, copy);
    }
    let mut builder = MockServer::builder(wire).turns(turns);
    if place == Place::AfterToolStep {
        // A zero delay changes nothing: it only moves the real fault to the second call.
        builder = builder.inject(Fault::Delay(Duration::ZERO), 1);
    }
    let server = builder.inject(fault.clone(), 1).start().await.unwrap();
    let agent = agent(&server, wire)
        .model("mock-model")
        .tool(echo_tool())
        .build();

    let started = Instant::now();
    let result = tokio::time::timeout(BOUND, run(&agent, mode))
        .await
        .unwrap_or_else(|_| panic!("{label}: did not finish within {BOUND:?}"));
    let elapsed = started.elapsed();

    history::validate(&result.messages).unwrap_or_else(|e| panic!("{label}: invalid history: {e}"));
    let requests = server.requests();
    let streamed = mode == Mode::Streaming;
    let expected_path = |r: &agentloop_testkit::server::RecordedRequest| match wire {
        Wire::OpenAi | Wire::Anthropic | Wire::Responses => {
            let path = match wire {
                Wire::OpenAi => "/v1/chat/completions",
                Wire::Responses => "/v1/responses",
                _ => "/v1/messages",
            };
            r.path == path
                && r.body
                    .get("stream")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false)
                    == streamed
        }
        // Gemini picks streaming by the method in the path.
        Wire::Gemini => {
            r.path
                == if streamed {
                    "/v1beta/models/mock-model:streamGenerateContent"
                } else {
                    "/v1beta/models/mock-model:generateContent"
                }
        }
        // So does Bedrock.
        Wire::Bedrock => {
            r.path
                == if streamed {
                    "/model/mock-model/converse-stream"
                } else {
                    "/model/mock-model/converse"
                }
        }
    };
    assert!(
        requests.iter().all(expected_path),
        "{label}: unexpected requests {:?}",
        requests.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    match expect {
        Expect::Recovers { retries, .. } => {
            assert_eq!(
                result.stop_reason,
                RunStopReason::EndTurn,
                "{label}: {:?}",
                result.error
            );
            assert!(result.error.is_none(), "{label}");
            assert_eq!(result.text(), "done", "{label}");
            assert_eq!(result.turns, 2, "{label}");
            assert_eq!(result.tool_calls, 1, "{label}");
            assert_eq!(requests.len(), 2 + retries, "{label}: request count");
            // The retry repeats the faulted call's body exactly.
            if retries > 0 {
                let at = place.call();
                assert_eq!(requests[at].body, requests[at + 1].body, "{label}");
            }
            server.assert_complete();
            if let Fault::RateLimited { .. } = fault {
                assert!(
                    elapsed >= Duration::from_millis(RETRY_AFTER_MS),
                    "{label}: retry-after not honoured ({elapsed:?})"
                );
            }
        }
        Expect::Fails(kind) => {
            assert_eq!(result.stop_reason, RunStopReason::Error, "{label}");
            let error = result
                .error
                .as_ref()
                .unwrap_or_else(|| panic!("{label}: no error"));
            assert!(
                kind.matches(error),
                "{label}: expected {kind:?}, got {error:?}"
            );
            // One request per model call made: nothing was sent again.
            assert_eq!(requests.len(), place.call() + 1, "{label}: request count");
            assert_eq!(result.tool_calls as usize, place.call(), "{label}");
            let completed = result.steps.iter().filter(|s| !s.tool_calls.is_empty());
            assert_eq!(completed.count(), place.call(), "{label}");
        }
    }
}

async fn all_cells(fault: Fault) {
    for mode in [Mode::Blocking, Mode::Streaming] {
        for wire in [
            Wire::OpenAi,
            Wire::Anthropic,
            Wire::Gemini,
            Wire::Bedrock,
            Wire::Responses,
        ] {
            for place in [Place::FirstCall, Place::AfterToolStep] {
                cell(fault.clone(), mode, wire, place).await;
            }
        }
    }
}

#[tokio::test]
async fn rate_limited_with_retry_after_is_retried_after_the_wait() {
    all_cells(Fault::RateLimited {
        retry_after_secs: Some(30),
        retry_after_ms: Some(RETRY_AFTER_MS),
    })
    .await;
}

#[tokio::test]
async fn server_error_is_retried() {
    all_cells(Fault::ServerError).await;
}

#[tokio::test]
async fn overloaded_is_retried() {
    all_cells(Fault::Overloaded).await;
}

#[tokio::test]
async fn bad_request_stops_the_run_with_invalid_request() {
    all_cells(Fault::bad_request("bad tool schema")).await;
}

#[tokio::test]
async fn unauthorized_stops_the_run_with_an_auth_error() {
    all_cells(Fault::Status {
        status: 401,
        error_type: "authentication_error".into(),
        message: "bad key".into(),
    })
    .await;
}

#[tokio::test]
async fn disconnect_mid_body() {
    all_cells(Fault::Disconnect { after_bytes: 40 }).await;
}

#[tokio::test]
async fn disconnect_right_after_headers() {
    all_cells(Fault::Disconnect { after_bytes: 0 }).await;
}

#[tokio::test]
async fn malformed_chunk_stops_the_run_with_a_parse_error() {
    all_cells(Fault::MalformedChunk { after_events: 2 }).await;
}

#[tokio::test]
async fn error_event_mid_stream() {
    all_cells(Fault::ErrorEvent { after_events: 2 }).await;
}

#[tokio::test]
async fn error_event_before_any_content_is_retried() {
    all_cells(Fault::ErrorEvent { after_events: 0 }).await;
}

#[tokio::test]
async fn slow_chunks_deliver_the_same_run() {
    all_cells(Fault::SlowChunks(Duration::from_millis(3))).await;
}

#[tokio::test]
async fn one_byte_writes_deliver_the_same_run() {
    all_cells(Fault::OneByteWrites).await;
}

#[tokio::test]
async fn delay_before_the_answer_delivers_the_same_run() {
    all_cells(Fault::Delay(Duration::from_millis(30))).await;
}

/// A `retry-after` longer than the policy allows is not waited for: the 429 surfaces.
#[tokio::test]
async fn rate_limited_beyond_max_retry_after_stops_the_run() {
    for (mode, wire) in [Mode::Blocking, Mode::Streaming]
        .into_iter()
        .flat_map(|mode| {
            [
                (mode, Wire::OpenAi),
                (mode, Wire::Anthropic),
                (mode, Wire::Gemini),
                (mode, Wire::Bedrock),
                (mode, Wire::Responses),
            ]
        })
    {
        let server = MockServer::builder(wire)
            .turn(Turn::text("never"))
            .inject(Fault::rate_limited(30), 1)
            .start()
            .await
            .unwrap();
        let agent = agent(&server, wire).model("m").build();
        let result = tokio::time::timeout(BOUND, run(&agent, mode))
            .await
            .unwrap();
        assert_eq!(result.stop_reason, RunStopReason::Error);
        assert!(
            matches!(result.error, Some(Error::RateLimited { retry_after: Some(d), .. }) if d == Duration::from_secs(30)),
            "{:?}",
            result.error
        );
        assert_eq!(server.calls(), 1);
        history::validate(&result.messages).unwrap();
    }
}
