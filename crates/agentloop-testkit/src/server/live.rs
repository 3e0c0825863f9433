//! The scripted server: each call takes the next turn, every request is recorded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::fault::{Fault, WriteMode};
use super::render::{Shape, disturb_alone, error_reply, render};
use super::reply::Reply;
use super::wire_error::{ErrorKind, WireError};
use super::{RecordedRequest, Wire};
use crate::turn::Turn;

pub(crate) struct Live {
    pub wire: Wire,
    pub mode: WriteMode,
    pub default_model: String,
    script: Mutex<Script>,
}

struct Script {
    turns: VecDeque<Turn>,
    /// Turns handed out so far: the next turn's index.
    played: usize,
    requests: Vec<RecordedRequest>,
    /// Calls that found the script exhausted.
    unscripted: usize,
    /// Server-wide faults, one per coming request.
    faults: VecDeque<Fault>,
}

/// What one request gets, decided under the lock and rendered outside it.
enum Decision {
    Reply(Reply),
    Turn {
        turn: Box<Turn>,
        index: usize,
        fault: Option<Fault>,
    },
}

impl Live {
    pub(crate) fn new(
        wire: Wire,
        mode: WriteMode,
        default_model: String,
        turns: Vec<Turn>,
        faults: Vec<Fault>,
    ) -> Self {
        Self {
            wire,
            mode,
            default_model,
            script: Mutex::new(Script {
                turns: turns.into(),
                played: 0,
                requests: Vec::new(),
                unscripted: 0,
                faults: faults.into(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // A test that panicked while holding the lock must not hide the requests from others.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    pub(crate) fn last_request(&self) -> Option<RecordedRequest> {
        self.lock().requests.last().cloned()
    }

    pub(crate) fn calls(&self) -> usize {
        self.lock().requests.len()
    }

    pub(crate) fn remaining_turns(&self) -> usize {
        self.lock().turns.len()
    }

    pub(crate) fn push_turn(&self, turn: Turn) {
        self.lock().turns.push_back(turn);
    }

    pub(crate) fn inject(&self, fault: Fault, times: usize) {
        self.lock().faults.extend(std::iter::repeat_n(fault, times));
    }

    /// Why the script is not complete, if it is not.
    pub(crate) fn incomplete(&self) -> Option<String> {
        let script = self.lock();
        let calls = script.requests.len();
        if !script.turns.is_empty() {
            return Some(format!(
                "the mock server expected {} more call(s): {} scripted turn(s) were never \
                 requested ({calls} call(s) received)",
                script.turns.len(),
                script.turns.len()
            ));
        }
        if script.unscripted > 0 {
            return Some(format!(
                "the mock server got {} call(s) after its script ran out ({} turn(s) scripted, \
                 {calls} call(s) received)",
                script.unscripted, script.played
            ));
        }
        None
    }

    fn decide(&self, request: RecordedRequest, valid_json: Result<(), String>) -> Decision {
        let mut script = self.lock();
        script.requests.push(request);
        let call = script.requests.len();
        if let Err(problem) = valid_json {
            let error = WireError::new(
                ErrorKind::InvalidRequest,
                format!("mock server: the request body is not valid JSON: {problem}"),
            );
            return Decision::Reply(error_reply(self.wire, &error));
        }
        let fault = script.faults.pop_front();
        if let Some(error) = fault.as_ref().and_then(WireError::from_fault) {
            // A server-wide rejection answers instead of the script: the turn waits for the
            // retry.
            let mut reply = error_reply(self.wire, &error);
            disturb_alone(&mut reply, fault.as_ref(), self.mode);
            return Decision::Reply(reply);
        }
        let Some(turn) = script.turns.pop_front() else {
            script.unscripted += 1;
            let error = WireError::script_exhausted(call, script.played);
            let mut reply = error_reply(self.wire, &error);
            disturb_alone(&mut reply, fault.as_ref(), self.mode);
            return Decision::Reply(reply);
        };
        let index = script.played;
        script.played += 1;
        Decision::Turn {
            turn: Box::new(turn),
            index,
            fault,
        }
    }

    fn reply(&self, request: RecordedRequest, valid_json: Result<(), String>) -> Reply {
        let body = &request.body;
        let include_usage =
            body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
        let (stream, model) = match self.wire {
            // Gemini names the model and the method in the path.
            Wire::Gemini => {
                let (model, stream) = super::gemini::call_of(&request.path);
                (stream, model.map(str::to_owned))
            }
            // So does Bedrock.
            Wire::Bedrock => {
                let (model, stream) = super::bedrock::call_of(&request.path);
                (stream, model)
            }
            Wire::OpenAi | Wire::Anthropic | Wire::Responses => (
                body.get("stream") == Some(&Value::Bool(true)),
                body.get("model").and_then(Value::as_str).map(str::to_owned),
            ),
        };
        match self.decide(request, valid_json) {
            Decision::Reply(reply) => reply,
            Decision::Turn { turn, index, fault } => {
                let shape = Shape {
                    wire: self.wire,
                    stream,
                    include_usage,
                    model: model.as_deref().unwrap_or(&self.default_model),
                    turn_index: index,
                };
                render(&turn, &shape, fault.as_ref(), self.mode)
            }
        }
    }
}

/// `POST` on the wire's endpoint.
pub(crate) async fn call(
    State(live): State<Arc<Live>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (body, valid) = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => (value, Ok(())),
        Err(e) => (Value::Null, Err(e.to_string())),
    };
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers,
        body,
    };
    Arc::new(live.reply(request, valid)).respond().await
}

/// Anything else: recorded (a client calling the wrong path shows up in `requests()`) and
/// answered 404 in the wire's error shape.
pub(crate) async fn not_found(
    State(live): State<Arc<Live>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let message = super::not_found_message(live.wire, &method, uri.path());
    live.lock().requests.push(RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let error = WireError::new(ErrorKind::NotFound, message);
    Arc::new(error_reply(live.wire, &error)).respond().await
}
