//! An in-process model that plays scripted turns and records every request it gets.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use agentloop::{Error, EventStream, Provider, Request};
use futures::StreamExt;

use crate::turn::Turn;

type TurnFn = dyn Fn(&Request, usize) -> Turn + Send + Sync;

enum Script {
    Turns(VecDeque<Turn>),
    Function(Box<TurnFn>),
}

struct State {
    script: Script,
    requests: Vec<Request>,
    /// Calls made, recorded or not.
    calls: usize,
    /// Whether `requests` keeps a copy of each request.
    record: bool,
    expected: Option<usize>,
}

/// A fake model for tests: answers each call with the next scripted [`Turn`], streamed as
/// realistic events, and records the requests.
///
/// ```
/// use agentloop_testkit::{ScriptedModel, Turn};
/// let model = ScriptedModel::new([
///     Turn::tool_call("get_weather", serde_json::json!({"city": "Paris"})),
///     Turn::text("It is 18 °C in Paris."),
/// ]);
/// assert_eq!(model.calls(), 0);
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    state: Arc<Mutex<State>>,
    name: Arc<str>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("calls", &self.calls())
            .finish()
    }
}

impl ScriptedModel {
    /// A model that plays `turns` in order, one per call.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        let turns: VecDeque<Turn> = turns.into_iter().collect();
        let expected = Some(turns.len());
        Self::with_script(Script::Turns(turns), expected)
    }

    /// A model whose answer is computed from each request (and the 0-based call index).
    pub fn from_fn(f: impl Fn(&Request, usize) -> Turn + Send + Sync + 'static) -> Self {
        Self::with_script(Script::Function(Box::new(f)), None)
    }

    fn with_script(script: Script, expected: Option<usize>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                script,
                requests: Vec::new(),
                calls: 0,
                record: true,
                expected,
            })),
            name: Arc::from("scripted"),
        }
    }

    /// Report this provider name (tags reasoning blocks), e.g. to mimic `anthropic`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Arc::from(name);
        self
    }

    /// Keep no copy of the requests: for benchmarks and long runs, where the copies would
    /// grow without bound and cost a clone per call. [`requests`](Self::requests) and
    /// [`last_request`](Self::last_request) then stay empty; [`calls`](Self::calls) still
    /// counts.
    pub fn unrecorded(self) -> Self {
        self.lock().record = false;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not hide the requests from the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().requests.clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<Request> {
        self.lock().requests.last().cloned()
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.lock().calls
    }

    /// Panic unless exactly the scripted number of calls was made.
    #[track_caller]
    pub fn assert_complete(&self) {
        let state = self.lock();
        if let Some(expected) = state.expected {
            assert_eq!(
                state.calls, expected,
                "the scripted model expected {expected} calls but got {}",
                state.calls
            );
        }
    }

    fn next_turn(&self, request: &Request) -> (usize, Result<Turn, Error>) {
        let mut state = self.lock();
        let index = state.calls;
        state.calls += 1;
        if state.record {
            state.requests.push(request.clone());
        }
        let turn = match &mut state.script {
            Script::Turns(turns) => turns.pop_front().ok_or_else(|| Error::Config {
                message: format!(
                    "the scripted model has no turn left for call {} (it was scripted for {index})",
                    index + 1
                ),
            }),
            Script::Function(f) => Ok(f(request, index)),
        };
        (index, turn)
    }
}

impl Provider for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: &Request) -> EventStream {
        let (index, turn) = self.next_turn(request);
        let turn = match turn {
            Ok(turn) => turn,
            Err(error) => return futures::stream::once(async move { Err(error) }).boxed(),
        };
        Box::pin(async_stream(index, turn))
    }
}

fn async_stream(
    index: usize,
    turn: Turn,
) -> impl futures::Stream<Item = Result<agentloop::StreamEvent, Error>> + Send {
    let delay = turn.delay;
    let chunk_delay = turn.chunk_delay;
    let failure = turn.error.clone();
    let cut = turn.fail_after_events.clone();
    let events = turn.events(index);
    futures::stream::unfold(
        (0usize, events, delay, failure, cut),
        move |(i, events, delay, failure, cut)| async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            if let Some(error) = failure {
                return Some((Err(error), (usize::MAX, events, None, None, None)));
            }
            if i == usize::MAX {
                return None;
            }
            if let Some((after, error)) = &cut
                && i == *after
            {
                return Some((Err(error.clone()), (usize::MAX, events, None, None, None)));
            }
            let event = events.get(i)?.clone();
            if i > 0
                && let Some(d) = chunk_delay
            {
                tokio::time::sleep(d).await;
            }
            Some((Ok(event), (i + 1, events, None, None, cut)))
        },
    )
}

#[cfg(test)]
mod tests {
    use agentloop::Provider;

    use super::*;

    #[tokio::test]
    async fn unrecorded_models_count_calls_but_keep_no_requests() {
        let script = |_: &Request, call: usize| Turn::text(format!("answer {call}"));
        let request = Request {
            model: "m".into(),
            ..Request::default()
        };
        let recorded = ScriptedModel::from_fn(script);
        let unrecorded = ScriptedModel::from_fn(script).unrecorded();
        for model in [&recorded, &unrecorded] {
            for call in 0..2 {
                let response = model.complete(&request).await.unwrap();
                assert_eq!(response.text(), format!("answer {call}"));
            }
            assert_eq!(model.calls(), 2);
        }
        assert_eq!(recorded.requests(), vec![request.clone(), request]);
        assert!(unrecorded.requests().is_empty());
        assert_eq!(unrecorded.last_request(), None);
    }
}
