//! Running one chat answer: the agent's run in a task of its own, its events recorded as they
//! came (see [`Frame`]), and the history saved after every step.
//!
//! # Surviving a crash
//!
//! An answer is a durable run of the library (`Agent::run_durable_stream`, or
//! `Agent::run_output_durable_stream_with` for a typed one; run id = the message id; after
//! approval decisions `Agent::decide_run_stream` / `decide_output_run_stream_with`) whose
//! [`RunStore`] is [`Durable`]: each checkpoint is written to the
//! server's database together with the answer's `/v1/chat` events recorded since the previous
//! one, in one transaction, so the stored log always ends exactly where the stored checkpoint
//! stands. The save first lets the run's stream hand out every event sent before it (the
//! stream delivers queued events before it polls the run again), so no event of the run up
//! to the checkpoint is missing from the log. When the answer ends, its last events are
//! written and it is marked finished; its rows go when its log is forgotten.
//!
//! At start-up every unfinished answer is registered again with its stored log, under the same
//! event ids, and resumed from its checkpoint (`Agent::resume_run_stream`): a tool outcome
//! recorded is never run again, a call that was running is answered as interrupted (unless
//! its tool is idempotent), a model call in flight is made again. Events the dead process
//! sent after its last checkpoint are **cut**: the log goes back to the checkpoint, and the
//! resumed answer's events get new ids, from the next multiple of 1,000,000,000, so no id
//! names two events. A client reconnecting with an id it got before the checkpoint gets the
//! events after it; one whose id was cut gets 409 naming the last kept event to reconnect
//! from (it must drop what it received after that one). The step's `tool_call_start` events
//! are shown once, though the resumed run reports its calls ready again.
//!
//! # Many servers (Postgres)
//!
//! The same, with a lease: a new answer first takes its conversation's unique unfinished row
//! (409 when another server's answer holds it); the server renews its leases (see
//! [`keep_leases`]), which also takes over the answers whose lease expired, resuming each as
//! above. Every write is conditioned on the lease; a refused one marks the answer lost here
//! ([`RunLog::is_lost`]): it is cancelled, nothing more of it is saved, and its streams here
//! end. Between checkpoints its events are written every [`FLUSH_EVERY`] so other servers
//! can follow it ([`follow_remote`]).

use std::future::Future;
use std::sync::Arc;

use agentloop::output::Output;
use agentloop::run::{
    Checkpoint, Decision, PausedRun, RunStatus, RunStopReason, RunStore, RunSummary,
};
use agentloop::{Agent, Message, RunEvent, Usage, history};
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::error::ServerError;
use crate::events::Frame;
use crate::runs::{Jump, PausedChat, RunLog};
use crate::state::AppState;
use crate::store::{
    ChatCheckpoint, ChatRunRow, CheckpointSaved, ClaimOutcome, PausedRow, RecordedEvents, Store,
};

/// A chat answer to start.
pub(crate) struct ChatStart {
    pub(crate) conversation_id: String,
    /// Create the conversation (with this title) before running.
    pub(crate) create: Option<String>,
    /// The whole history the model gets, ending with the new user message.
    pub(crate) history: Vec<Message>,
    /// How many leading messages of `history` are stored already, at the same positions.
    pub(crate) stored: usize,
    /// Answer with JSON following this schema (a typed answer, sent as an `output` event).
    pub(crate) output_schema: Option<serde_json::Value>,
}

/// Why a chat could not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The conversation has an answer running; its message id.
    Busy(String),
    /// The history would not be valid to send.
    InvalidHistory(String),
    /// The database failed.
    Store(ServerError),
}

/// A fresh random id with a readable prefix.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

/// Start the answer; its frames are in the returned log.
pub(crate) async fn start(state: &AppState, start: ChatStart) -> Result<Arc<RunLog>, StartError> {
    history::validate(&start.history).map_err(|e| StartError::InvalidHistory(e.to_string()))?;
    let inner = &state.inner;
    inner.store.check_open().map_err(StartError::Store)?;
    if start.create.is_none() {
        // An answer waiting in the conversation on another server keeps it busy here too.
        active_in(state, &start.conversation_id)
            .await
            .map_err(StartError::Store)?;
    }
    let message_id = new_id("msg");
    let run = inner
        .runs
        .start(
            message_id.clone(),
            start.conversation_id.clone(),
            inner.config.disconnect_grace,
            inner.shutdown.child_token(),
        )
        .map_err(|busy| StartError::Busy(busy.message_id))?;
    // The conversation's row is written by the answer's task, so the stream's headers do not
    // wait for the database; the insert is queued now, ahead of any later request's query.
    let created = start.create.is_some();
    let mut creating = start
        .create
        .map(|title| inner.store.create(start.conversation_id.clone(), title));
    if inner.store.is_shared() {
        // Across servers, the conversation's unfinished answer row is what makes it busy: it
        // is taken before the answer starts.
        let claimed = async {
            if let Some(creating) = creating.take() {
                creating.await?;
            }
            inner
                .store
                .claim_chat(
                    message_id.clone(),
                    start.conversation_id.clone(),
                    start.history.len().saturating_sub(1),
                )
                .await
        };
        match claimed.await {
            Ok(ClaimOutcome::Claimed) => {}
            Ok(ClaimOutcome::Busy(holder)) => {
                inner.runs.remove(&run);
                return Err(StartError::Busy(holder));
            }
            Err(e) => {
                inner.runs.remove(&run);
                return Err(StartError::Store(e));
            }
        }
    }
    run.push(Frame::Start {
        conversation_id: start.conversation_id.clone(),
        message_id,
    });
    inner.tasks.spawn(drive(
        state.clone(),
        run.clone(),
        start.history,
        start.stored,
        start.output_schema,
        creating,
        created,
    ));
    Ok(run)
}

/// Saves the history as the run goes; only appended messages are written.
#[derive(Clone)]
struct Saver {
    store: Store,
    conversation_id: String,
    stored: Arc<tokio::sync::Mutex<usize>>,
}

impl Saver {
    async fn save(&self, messages: &[Message]) -> Result<(), String> {
        let mut stored = self.stored.lock().await;
        if messages.len() <= *stored {
            return Ok(());
        }
        history::validate(messages).map_err(|e| format!("the history is not valid: {e}"))?;
        self.store
            .save_tail(
                self.conversation_id.clone(),
                *stored,
                messages[*stored..].to_vec(),
            )
            .await
            .map_err(|e| e.to_string())?;
        *stored = messages.len();
        Ok(())
    }

    async fn saved(&self) -> usize {
        *self.stored.lock().await
    }
}

/// An answer's checkpoints and event log in the server's database: the [`RunStore`] of its
/// durable run (see the module docs). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Durable(Arc<DurableInner>);

struct DurableInner {
    store: Store,
    run: Arc<RunLog>,
    prompt_index: usize,
    /// The log's frames before this index are stored with a checkpoint.
    checkpointed: std::sync::Mutex<usize>,
    /// The log's frames before this index are written (between checkpoints, on a shared
    /// database, for the servers following the answer).
    flushed: std::sync::Mutex<usize>,
    /// The end is being recorded: a write between checkpoints refused from now on was refused
    /// because the answer is finished, not because another server took it over.
    ending: std::sync::atomic::AtomicBool,
}

/// How often, at most, a running answer's new events are written between checkpoints on a
/// shared database: what a server following it from another lags behind at worst.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// The lock's value; only plain assignments are made under these locks.
fn value(m: &std::sync::Mutex<usize>) -> std::sync::MutexGuard<'_, usize> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Durable {
    /// `run`'s frames before index `stored` are stored already. On a shared database its new
    /// events are also written every [`FLUSH_EVERY`] while it runs.
    fn new(store: Store, run: Arc<RunLog>, prompt_index: usize, stored: usize) -> Self {
        let shared = store.is_shared();
        let durable = Self(Arc::new(DurableInner {
            store,
            run,
            prompt_index,
            checkpointed: std::sync::Mutex::new(stored),
            flushed: std::sync::Mutex::new(stored),
            ending: std::sync::atomic::AtomicBool::new(false),
        }));
        if shared {
            durable.spawn_flusher();
        }
        durable
    }

    /// Write the log's new events a moment after they come, until the answer is over (or
    /// this `Durable` is gone: the answer paused, and its pause keeps its events).
    fn spawn_flusher(&self) {
        let weak = Arc::downgrade(&self.0);
        let mut watch = self.0.run.watch();
        tokio::spawn(async move {
            while watch.changed().await {
                tokio::time::sleep(FLUSH_EVERY).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                if inner.run.is_finished() || inner.run.is_lost() {
                    return;
                }
                Durable(inner).flush();
            }
        });
    }

    /// The log's frames from index `from` on: their events as `(id, JSON)`, the index after
    /// them and the id after them.
    fn unsaved(&self, from: usize) -> (Vec<(usize, String)>, usize, usize) {
        let (len, end, events) = self.0.run.chat_events_from(from);
        let events = events
            .into_iter()
            .filter_map(|(id, event)| Some((id, serde_json::to_string(&event).ok()?)))
            .collect();
        (events, len, end)
    }

    fn jumps(&self) -> String {
        serde_json::to_string(&self.0.run.jumps()).unwrap_or_else(|_| "[]".into())
    }

    /// Write the events since the last write (queued now, in order with the checkpoints); a
    /// write refused because another server took the answer over stops it here.
    fn flush(&self) {
        let from = *value(&self.0.flushed);
        let (events, len, end) = self.unsaved(from);
        *value(&self.0.flushed) = len;
        let written = self.0.store.append_chat_events(
            self.0.run.message_id.clone(),
            events,
            end,
            self.jumps(),
        );
        let run = self.0.run.clone();
        let inner = self.0.clone();
        tokio::spawn(async move {
            match written.await {
                Ok(true) => {}
                // Queued after the end was recorded (the flusher raced the answer's end).
                Ok(false) if inner.ending.load(std::sync::atomic::Ordering::SeqCst) => {}
                Ok(false) => lost(&run),
                Err(e) => {
                    tracing::warn!(message_id = %run.message_id, "could not write the answer's events: {e}")
                }
            }
        });
    }

    /// The answer is over: store its last events and mark it finished (not when another
    /// server took it over). The write is queued now; awaiting the returned future waits for
    /// it.
    fn finish(&self) -> impl Future<Output = ()> + Send + 'static {
        self.0
            .ending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let lost = self.0.run.is_lost();
        let from = *value(&self.0.checkpointed);
        let (events, len, end) = self.unsaved(from);
        *value(&self.0.checkpointed) = len;
        *value(&self.0.flushed) = len;
        let message_id = self.0.run.message_id.clone();
        let finished = (!lost).then(|| {
            self.0
                .store
                .finish_chat_run(message_id.clone(), events, end, self.jumps())
        });
        async move {
            if let Some(finished) = finished
                && let Err(e) = finished.await
            {
                tracing::warn!(message_id = %message_id, "could not record the end of the answer: {e}");
            }
        }
    }
}

/// Another server took the answer over (this one's lease on it expired): it stops here
/// without writing more.
fn lost(run: &RunLog) {
    if !run.is_lost() {
        tracing::warn!(message_id = %run.message_id, "another server took this answer over (this server's lease on it expired); stopping it here");
    }
    run.lose();
    run.cancel.cancel();
}

fn lost_error(run_id: &str) -> agentloop::Error {
    agentloop::Error::Store {
        run_id: run_id.to_owned(),
        message: "another server took this answer over (this server's lease on it expired)".into(),
    }
}

fn store_error(run_id: &str, error: ServerError) -> agentloop::Error {
    agentloop::Error::Store {
        run_id: run_id.to_owned(),
        message: error.to_string(),
    }
}

impl RunStore for Durable {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, agentloop::Result<Option<Checkpoint>>> {
        Box::pin(async move {
            let found = self
                .0
                .store
                .chat_checkpoint(run_id.to_owned())
                .await
                .map_err(|e| store_error(run_id, e))?;
            found
                .map(|(version, status, state)| {
                    let status =
                        RunStatus::parse(&status).ok_or_else(|| agentloop::Error::Store {
                            run_id: run_id.to_owned(),
                            message: format!("unknown run status `{status}`"),
                        })?;
                    Ok(Checkpoint {
                        version,
                        status,
                        state,
                    })
                })
                .transpose()
        })
    }

    fn save<'a>(
        &'a self,
        run_id: &'a str,
        read: u64,
        status: RunStatus,
        state: String,
    ) -> BoxFuture<'a, agentloop::Result<u64>> {
        Box::pin(async move {
            // The run's stream hands out the events queued before this save while the save
            // is pending, and the answer's task records each before it polls again: after one
            // yield, the log holds every event up to this checkpoint.
            tokio::task::yield_now().await;
            if self.0.run.is_lost() {
                return Err(lost_error(run_id));
            }
            let (events, len, end) = self.unsaved(*value(&self.0.checkpointed));
            let jumps = self.jumps();
            let saved = self
                .0
                .store
                .save_chat_checkpoint(ChatCheckpoint {
                    message_id: run_id.to_owned(),
                    conversation_id: self.0.run.conversation_id.clone(),
                    prompt_index: self.0.prompt_index,
                    read,
                    status: status.as_str().to_owned(),
                    state,
                    events,
                    log_end: end,
                    log_jumps: jumps,
                })
                .await
                .map_err(|e| store_error(run_id, e))?;
            match saved {
                CheckpointSaved::Saved(version) => {
                    *value(&self.0.checkpointed) = len;
                    let mut flushed = value(&self.0.flushed);
                    *flushed = (*flushed).max(len);
                    Ok(version)
                }
                CheckpointSaved::Lost => {
                    lost(&self.0.run);
                    Err(lost_error(run_id))
                }
                CheckpointSaved::Stale(found) => Err(agentloop::Error::StaleCheckpoint {
                    run_id: run_id.to_owned(),
                    expected: read,
                    found,
                }),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, agentloop::Result<Vec<RunSummary>>> {
        Box::pin(async move {
            let runs = self
                .0
                .store
                .chat_checkpoints()
                .await
                .map_err(|e| store_error("*", e))?;
            Ok(runs
                .into_iter()
                .filter_map(|(run_id, version, status)| {
                    Some(RunSummary {
                        run_id,
                        version,
                        status: RunStatus::parse(&status)?,
                    })
                })
                .collect())
        })
    }
}

/// Ends the log however the run ends (a panic included) and frees the conversation.
struct Finisher {
    state: AppState,
    run: Arc<RunLog>,
    /// The answer paused for approval: it stays registered, its conversation busy.
    paused: bool,
    /// The answer's stored log, until its end is recorded.
    durable: Option<Durable>,
}

/// Forget a finished answer's log (in memory and stored) after the retention time.
fn retire(state: &AppState, message_id: String) {
    let inner = &state.inner;
    let retain = inner.config.retain_finished;
    let state = state.clone();
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            tokio::time::sleep(retain).await;
            state.inner.runs.forget(&message_id);
            if let Err(e) = state.inner.store.delete_chat_run(message_id).await {
                tracing::warn!("could not remove a finished answer's log: {e}");
            }
        });
    } else {
        inner.runs.forget(&message_id);
        // Queued: the worker writes it even though nobody waits.
        drop(inner.store.delete_chat_run(message_id));
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        if self.paused {
            return;
        }
        if self.run.is_lost() {
            // Another server runs it now: its log here ends (a reconnect reads the database),
            // and nothing of it is written or forgotten from here.
            self.run.finish();
            self.state.inner.runs.remove(&self.run);
            return;
        }
        if !self.run.is_finished() {
            self.run.push(Frame::End {
                stop_reason: RunStopReason::Error,
                usage: Default::default(),
            });
            self.run.push(Frame::Failed {
                message: "the chat stopped unexpectedly".into(),
            });
            if let Some(durable) = self.durable.take() {
                // Queued now; nobody can wait here.
                drop(durable.finish());
            }
            self.run.finish();
        }
        self.state.inner.runs.release(&self.run);
        retire(&self.state, self.run.message_id.clone());
    }
}

/// Why a run that ended with `reason` did not complete its answer, when it is worth an `error`.
fn limit_message(reason: &RunStopReason, max_tool_iterations: u32) -> Option<String> {
    Some(match reason {
        RunStopReason::MaxToolIterations => format!(
            "the model was still calling tools after {max_tool_iterations} tool iterations \
             (the server's max_tool_iterations limit); send another message to let it go on"
        ),
        RunStopReason::MaxToolCalls => "the max_tool_calls limit of the agent was reached".into(),
        RunStopReason::TokenBudget => {
            "the token budget (max_total_tokens) of the agent was used up".into()
        }
        RunStopReason::CostBudget => "the cost budget (max_cost) of the agent was used up".into(),
        RunStopReason::Timeout => "the answer took longer than the agent's timeout".into(),
        RunStopReason::RepeatedInvalidCall(tool) => {
            format!("the model repeated the same invalid call to `{tool}`")
        }
        RunStopReason::InvalidOutput => {
            "the model's answer did not match the output schema within the retries".into()
        }
        RunStopReason::AwaitingToolResults => {
            "the agent is in manual tool mode, which the server does not support".into()
        }
        RunStopReason::AwaitingApproval => {
            "the tool calls waiting for approval could not be kept; send the message again".into()
        }
        RunStopReason::EndTurn
        | RunStopReason::MaxTokens
        | RunStopReason::Custom(_)
        | RunStopReason::Cancelled
        | RunStopReason::Error => return None,
    })
}

/// The agent for one answer: the server's tool-iteration limit, the answer's cancellation,
/// and the history saved between steps.
fn answer_agent(state: &AppState, run: &RunLog, saver: &Saver) -> Agent {
    let inner = &state.inner;
    let step_saver = saver.clone();
    inner.agent.with_options(|options| {
        options.limits.max_tool_iterations = inner.config.max_tool_iterations;
        options.cancel = Some(run.cancel.clone());
        options.hooks = std::mem::take(&mut options.hooks).prepare_step(move |step| {
            let saver = step_saver.clone();
            async move {
                // Between steps the history is complete: save it, so a crash loses at most the
                // step about to run.
                if let Err(e) = saver.save(&step.request.messages).await {
                    tracing::warn!(conversation = %saver.conversation_id, "could not save a step: {e}");
                }
                step.request
            }
        });
    })
}

async fn drive(
    state: AppState,
    run: Arc<RunLog>,
    history: Vec<Message>,
    stored: usize,
    output_schema: Option<serde_json::Value>,
    creating: Option<impl Future<Output = Result<(), ServerError>>>,
    created: bool,
) {
    let mut finisher = Finisher {
        state: state.clone(),
        run: run.clone(),
        paused: false,
        durable: None,
    };
    let inner = &state.inner;
    if let Some(creating) = creating
        && let Err(e) = creating.await
    {
        tracing::error!(conversation = %run.conversation_id, "could not create the conversation: {e}");
        run.push(Frame::End {
            stop_reason: RunStopReason::Error,
            usage: Default::default(),
        });
        run.push(Frame::Failed {
            message: format!("the conversation could not be saved: {e}"),
        });
        run.finish();
        drop(finisher);
        return;
    }
    let saver = Saver {
        store: inner.store.clone(),
        conversation_id: run.conversation_id.clone(),
        stored: Arc::new(tokio::sync::Mutex::new(stored)),
    };
    let agent = answer_agent(&state, &run, &saver);
    // Where the prompt this run answers sits in the history, for the stored usage.
    let prompt_index = history.len().saturating_sub(1);
    let durable = Durable::new(inner.store.clone(), run.clone(), prompt_index, 0);
    finisher.durable = Some(durable.clone());
    let events: Events = match output_schema {
        Some(schema) => Box::pin(agent.run_output_durable_stream_with(
            run.message_id.clone(),
            history,
            Output::<serde_json::Value>::new().with_schema(schema),
            &durable,
        )),
        None => Box::pin(agent.run_durable_stream(run.message_id.clone(), history, &durable)),
    };
    let answer = Answer {
        saver,
        prompt_index,
        earlier_usage: Usage::default(),
        created,
        shown_calls: Vec::new(),
    };
    follow(finisher, answer, events).await;
}

/// What following a run needs besides its events.
struct Answer {
    saver: Saver,
    prompt_index: usize,
    /// What the answer used before it paused for approval (nothing for a fresh answer), for
    /// an answer that ends without a result.
    earlier_usage: Usage,
    /// The answer created its conversation (removed again when nothing was saved).
    created: bool,
    /// Calls whose `tool_call_start` the log shows already (of an answer resumed after a
    /// restart).
    shown_calls: Vec<String>,
}

/// A run's events, typed answer or not.
type Events = std::pin::Pin<Box<dyn futures::Stream<Item = RunEvent> + Send>>;

/// Record the run's events in the log, save what it produced, and end the log, or leave it
/// open when the run paused for approval.
async fn follow(mut finisher: Finisher, answer: Answer, mut events: Events) {
    let state = finisher.state.clone();
    let run = finisher.run.clone();
    let inner = &state.inner;
    let saver = &answer.saver;
    let mut failure: Option<String> = None;
    let mut ended = false;
    // Approval requests are shown once the pause is stored: a client that saw one can decide
    // it, even after a crash right after.
    let mut asked: Vec<RunEvent> = Vec::new();
    while let Some(event) = events.next().await {
        if run.is_lost() {
            // Another server took it over: nothing more is recorded or saved here.
            break;
        }
        match event {
            event @ RunEvent::ApprovalRequested(_) => asked.push(event),
            RunEvent::Error { error } => {
                // Web users get the kind of failure; the details (provider URL, body) are logged.
                tracing::error!(conversation = %run.conversation_id, message_id = %run.message_id, "the chat failed: {error}");
                failure = Some(crate::error::user_message(&error));
            }
            RunEvent::RunFinish { mut result } => {
                ended = true;
                // A resumed run's usage counts the steps before its pause already.
                let usage = result.usage;
                if result.stop_reason == RunStopReason::AwaitingApproval
                    && failure.is_none()
                    && let Some(paused) = result.paused.take()
                {
                    let mut asked = std::mem::take(&mut asked);
                    if asked.is_empty() {
                        // A run resumed at its paused checkpoint (the process died before the
                        // pause was kept) asks again for what it waits on.
                        asked = paused
                            .pending()
                            .iter()
                            .map(|p| RunEvent::ApprovalRequested(Box::new(p.clone())))
                            .collect();
                    }
                    match pause(&state, &run, *paused, answer.prompt_index, usage, asked).await {
                        Ok(()) => {
                            finisher.paused = true;
                            continue;
                        }
                        Err(e) => {
                            tracing::error!(conversation = %run.conversation_id, "could not keep the paused answer: {e}");
                        }
                    }
                }
                if let Err(e) = saver.save(&result.messages).await {
                    tracing::error!(conversation = %run.conversation_id, "could not save the answer: {e}");
                    failure.get_or_insert_with(|| {
                        "the answer could not be saved; the server log has the details".into()
                    });
                }
                if let Err(e) = inner
                    .store
                    .save_answer(
                        run.conversation_id.clone(),
                        answer.prompt_index,
                        crate::events::stop_reason_name(&result.stop_reason).to_owned(),
                        usage,
                        result.cost,
                    )
                    .await
                {
                    tracing::warn!(conversation = %run.conversation_id, "could not save the answer's usage: {e}");
                }
                let message = failure.take().or_else(|| {
                    limit_message(&result.stop_reason, inner.config.max_tool_iterations)
                });
                run.push(Frame::End {
                    stop_reason: result.stop_reason,
                    usage,
                });
                if let Some(message) = message {
                    run.push(Frame::Failed { message });
                }
            }
            // A resumed run reports its step's calls ready again; the log has them.
            RunEvent::ToolCallReady { call } if answer.shown_calls.contains(&call.id) => {}
            // The rest is recorded as it came; each wire protocol shows what it has names for.
            event => run.push(Frame::Run(event)),
        }
    }
    if finisher.paused || run.is_lost() {
        return;
    }
    if !ended {
        // The run never started (the prompt hook refused the message).
        run.push(Frame::End {
            stop_reason: RunStopReason::Error,
            usage: answer.earlier_usage,
        });
        run.push(Frame::Failed {
            message: failure.unwrap_or_else(|| "the run ended without a result".into()),
        });
        if answer.created
            && saver.saved().await == 0
            && let Err(e) = inner.store.delete(run.conversation_id.clone()).await
        {
            tracing::warn!(conversation = %run.conversation_id, "could not remove an empty conversation: {e}");
        }
    }
    if let Some(durable) = finisher.durable.take() {
        durable.finish().await;
    }
    run.finish();
    drop(finisher);
}

/// Keep the paused answer (in the database, so a restart keeps it waiting, and in its log),
/// then show its approval requests.
async fn pause(
    state: &AppState,
    run: &RunLog,
    paused: PausedRun,
    prompt_index: usize,
    usage: Usage,
    asked: Vec<RunEvent>,
) -> Result<(), ServerError> {
    // The events as they will be once the requests and the pause are recorded below.
    let (len, mut events) = run.chat_events();
    let asked: Vec<Frame> = asked.into_iter().map(Frame::Run).collect();
    events.extend(
        asked
            .iter()
            .enumerate()
            .filter_map(|(i, frame)| Some((len + i, frame.chat_event()?))),
    );
    let recorded = RecordedEvents {
        len: len + asked.len() + 1,
        events,
        jumps: run.jumps(),
    };
    let row = PausedRow {
        message_id: run.message_id.clone(),
        conversation_id: run.conversation_id.clone(),
        prompt_index,
        usage: serde_json::to_string(&usage).map_err(ServerError::database)?,
        paused_run: paused.to_json().map_err(ServerError::database)?,
        events: serde_json::to_string(&recorded).map_err(ServerError::database)?,
    };
    state.inner.store.save_paused(row).await?;
    run.pause(Box::new(PausedChat {
        run: paused,
        prompt_index,
        usage,
    }));
    for frame in asked {
        run.push(frame);
    }
    run.push(Frame::Paused);
    Ok(())
}

/// Why decisions could not resume an answer.
#[derive(Debug)]
pub(crate) enum ResumeError {
    /// The answer does not wait for decisions (running, finished, or decided concurrently).
    NotPaused,
    /// The decisions do not fit the pending calls (an unknown or undecided call, an edited
    /// input the tool's schema refuses).
    Invalid(String),
    /// The database failed.
    Store(ServerError),
}

/// Resume an answer paused for approval with a decision for each pending call; the rest of the
/// answer is recorded in the same log.
pub(crate) async fn resume(
    state: &AppState,
    run: Arc<RunLog>,
    decisions: Vec<(String, Decision)>,
) -> Result<(), ResumeError> {
    let paused = run.take_paused().ok_or(ResumeError::NotPaused)?;
    let give_back = |paused, error| {
        run.pause(paused);
        Err(error)
    };
    let pending: Vec<&str> = paused.run.pending().iter().map(|p| p.id.as_str()).collect();
    if let Some((unknown, _)) = decisions
        .iter()
        .find(|(id, _)| !pending.contains(&id.as_str()))
    {
        let message = format!(
            "no call `{unknown}` waits for approval in this answer; the pending calls are {pending:?}"
        );
        return give_back(paused, ResumeError::Invalid(message));
    }
    let undecided: Vec<&str> = pending
        .iter()
        .copied()
        .filter(|id| !decisions.iter().any(|(d, _)| d == id))
        .collect();
    if !undecided.is_empty() {
        let message = format!("every pending call needs a decision; undecided: {undecided:?}");
        return give_back(paused, ResumeError::Invalid(message));
    }
    let stored = match state.conversation(&run.conversation_id).await {
        Ok(conversation) => conversation.map_or(0, |c| c.messages.len()),
        Err(e) => return give_back(paused, ResumeError::Store(e)),
    };
    let saver = Saver {
        store: state.inner.store.clone(),
        conversation_id: run.conversation_id.clone(),
        stored: Arc::new(tokio::sync::Mutex::new(stored)),
    };
    let agent = answer_agent(state, &run, &saver);
    let decided = decisions.iter().map(|(id, _)| id.clone()).collect();
    // Checked here, before anything runs, so a decision that does not fit gets 422. A typed
    // answer keeps its schema while paused, and ends in its `output` event.
    let plain: agentloop::Result<Events> = if paused.run.is_typed() {
        agent
            .resume_output_stream_with(
                &paused.run,
                decisions.clone(),
                Output::<serde_json::Value>::new(),
            )
            .map(|events| Box::pin(events) as Events)
    } else {
        agent
            .resume_stream(&paused.run, decisions.clone())
            .map(|events| Box::pin(events) as Events)
    };
    let plain = match plain {
        Ok(events) => events,
        Err(e) => return give_back(paused, ResumeError::Invalid(e.to_string())),
    };
    // An answer goes on from its paused checkpoint, durably; one without a checkpoint (paused
    // by a server from before typed answers were checkpointed) from the paused run in memory.
    let durable = match state
        .inner
        .store
        .chat_checkpoint(run.message_id.clone())
        .await
    {
        // Its whole log is written again with the next checkpoint (ids stored already are
        // kept): the events of the pause were never written with one.
        Ok(Some(_)) => true,
        Ok(None) => false,
        Err(e) => return give_back(paused, ResumeError::Store(e)),
    };
    // On a shared database a typed answer's events are written too, and its row finished.
    let durable = (durable || state.inner.store.is_shared())
        .then(|| {
            Durable::new(
                state.inner.store.clone(),
                run.clone(),
                paused.prompt_index,
                0,
            )
        })
        .map(|store| (durable, store));
    let events: Events = match &durable {
        Some((true, durable)) if paused.run.is_typed() => {
            drop(plain);
            match agent
                .decide_output_run_stream_with(
                    run.message_id.clone(),
                    decisions,
                    Output::<serde_json::Value>::new(),
                    durable,
                )
                .await
            {
                Ok(events) => Box::pin(events),
                Err(e) => return give_back(paused, ResumeError::Invalid(e.to_string())),
            }
        }
        Some((true, durable)) => {
            drop(plain);
            Box::pin(agent.decide_run_stream(run.message_id.clone(), decisions, durable))
        }
        _ => plain,
    };
    let durable = durable.map(|(_, durable)| durable);
    // Forgotten before anything runs: a crash from here on must not offer the calls again.
    match state
        .inner
        .store
        .delete_paused(run.message_id.clone())
        .await
    {
        Ok(true) => {}
        // Another server sharing the database decided it: this copy of the pause is stale.
        Ok(false) => {
            drop_stale(state, &run);
            return Err(ResumeError::NotPaused);
        }
        Err(e) => return give_back(paused, ResumeError::Store(e)),
    }
    // Deleting the pause made the answer this server's to run: its lease says so, or its
    // checkpoints would be refused.
    if let Err(e) = state.inner.store.own_chat_run(run.message_id.clone()).await {
        tracing::warn!(message_id = %run.message_id, "could not take the answer's lease: {e}");
    }
    run.begin_segment(decided);
    let finisher = Finisher {
        state: state.clone(),
        run,
        paused: false,
        durable,
    };
    let answer = Answer {
        saver,
        prompt_index: paused.prompt_index,
        earlier_usage: paused.usage,
        created: false,
        shown_calls: Vec::new(),
    };
    state.inner.tasks.spawn(follow(finisher, answer, events));
    Ok(())
}

/// End an answer paused for approval without running its calls (a cancel): the history stays
/// as saved before the calls, and the answer is recorded as interrupted.
pub(crate) async fn end_paused(state: &AppState, run: Arc<RunLog>, paused: Box<PausedChat>) {
    let store = &state.inner.store;
    match store.delete_paused(run.message_id.clone()).await {
        Ok(true) => {}
        Ok(false) => {
            // Decided through another server: its record of the answer stands.
            drop_stale(state, &run);
            return;
        }
        Err(e) => {
            tracing::warn!(message_id = %run.message_id, "could not forget the paused answer: {e}")
        }
    }
    if let Err(e) = store.delete_chat_run(run.message_id.clone()).await {
        tracing::warn!(message_id = %run.message_id, "could not forget the paused checkpoint: {e}");
    }
    if let Err(e) = store
        .save_answer(
            run.conversation_id.clone(),
            paused.prompt_index,
            crate::events::stop_reason_name(&RunStopReason::Cancelled).to_owned(),
            paused.usage,
            paused.run.machine().cost(),
        )
        .await
    {
        tracing::warn!(conversation = %run.conversation_id, "could not save the answer's usage: {e}");
    }
    run.push(Frame::End {
        stop_reason: RunStopReason::Cancelled,
        usage: paused.usage,
    });
    run.finish();
    drop(Finisher {
        state: state.clone(),
        run,
        paused: false,
        durable: None,
    });
}

/// End this server's copy of a paused answer that another server sharing the database
/// decided or cancelled: its listeners' streams end, its conversation is free here again, and
/// it is forgotten like a finished answer.
fn drop_stale(state: &AppState, run: &Arc<RunLog>) {
    run.finish();
    drop(Finisher {
        state: state.clone(),
        run: run.clone(),
        paused: false,
        durable: None,
    });
}

/// At start-up: every answer that was waiting for approval waits again, its log holding its
/// `/v1/chat` events up to the pause at their old positions.
pub(crate) async fn restore_paused(state: &AppState) -> Result<(), ServerError> {
    watch_decisions(state);
    for row in state.inner.store.paused().await? {
        restore(state, row);
    }
    Ok(())
}

/// The answer `message_id`: running or recently finished here, or else waiting for approval in
/// the database (paused by another server sharing it, or before this one started).
pub(crate) async fn find(
    state: &AppState,
    message_id: &str,
) -> Result<Option<Arc<RunLog>>, ServerError> {
    if let Some(run) = state.inner.runs.get(message_id) {
        // A stale copy is still answered for: finished, it is no longer paused (409).
        fresh(state, run.clone()).await?;
        return Ok(Some(run));
    }
    let Some(row) = state
        .inner
        .store
        .paused_answer(message_id.to_owned())
        .await?
    else {
        // Running on another server sharing the database, or finished there lately.
        return follow_remote(state, message_id).await;
    };
    Ok(restore(state, row))
}

/// How often a server following an answer another server runs reads its stored log when no
/// notification came (one was missed while the listener reconnected).
const POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A copy of answer `message_id`, which another server sharing the database runs (or ran),
/// from its stored log, kept up to date while anyone follows it: when that server writes its
/// events (`NOTIFY`), and every [`POLL_EVERY`] in case a notification was missed. `None` when
/// the database has no such answer.
async fn follow_remote(
    state: &AppState,
    message_id: &str,
) -> Result<Option<Arc<RunLog>>, ServerError> {
    let inner = &state.inner;
    // Listening before the first read, so no write after it goes unnoticed.
    let Some(mut written) = inner.store.written_elsewhere() else {
        return Ok(None);
    };
    let Some(log) = inner.store.chat_log(message_id.to_owned(), 0).await? else {
        return Ok(None);
    };
    let (run, new) = inner.runs.follower(
        message_id.to_owned(),
        log.conversation_id.clone(),
        inner.config.disconnect_grace,
        inner.shutdown.child_token(),
    );
    if !new {
        return Ok(Some(run));
    }
    if let Err(e) = catch_up(&run, log) {
        tracing::warn!(%message_id, "the stored events of an answer cannot be shown: {e}");
        run.finish();
        inner.runs.remove(&run);
        return Ok(Some(run));
    }
    // Weak: following must not keep the server's state alive.
    let weak = Arc::downgrade(&state.inner);
    let followed = run.clone();
    tokio::spawn(async move {
        let run = followed;
        let mut idle = 0;
        while !run.is_finished() {
            tokio::select! {
                heard = written.recv() => match heard {
                    Ok(id) if id == run.message_id => {}
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(POLL_EVERY).await;
                    }
                },
                () = tokio::time::sleep(POLL_EVERY) => {
                    // Nobody follows it here any more: stop reading.
                    idle = if run.listeners() == 0 { idle + 1 } else { 0 };
                    if idle > 2 {
                        break;
                    }
                }
                () = run.cancel.cancelled() => break,
            }
            let Some(inner) = weak.upgrade() else {
                return;
            };
            match inner
                .store
                .chat_log(run.message_id.clone(), run.end_id())
                .await
            {
                Ok(Some(log)) => {
                    if catch_up(&run, log).is_err() {
                        // Cut by the server that took the answer over: its followers here
                        // reconnect, and get the events kept (or 409 naming the last one).
                        break;
                    }
                }
                // Forgotten (or its conversation deleted).
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(message_id = %run.message_id, "could not read the answer's events: {e}");
                }
            }
        }
        if run.is_finished() && !run.cancel.is_cancelled() {
            // Finished there: readable here a while, like an answer finished here.
            let Some(retain) = weak.upgrade().map(|inner| inner.config.retain_finished) else {
                return;
            };
            tokio::time::sleep(retain).await;
        }
        let Some(inner) = weak.upgrade() else {
            return;
        };
        run.finish();
        inner.runs.remove(&run);
    });
    Ok(Some(run))
}

/// Bring a copy of an answer another server runs up to its stored log `log`.
fn catch_up(run: &RunLog, log: crate::store::ChatLog) -> Result<(), String> {
    let jumps: Vec<Jump> = serde_json::from_str(&log.jumps)
        .map_err(|e| format!("its event ids cannot be read: {e}"))?;
    let events = log
        .events
        .iter()
        .filter_map(|(id, json)| Some((*id, serde_json::from_str(json).ok()?)))
        .collect();
    run.extend(log.end, jumps, events)
        .map_err(|_| "the stored log does not continue this copy".to_owned())?;
    if log.finished {
        run.finish();
    }
    Ok(())
}

/// The answer running or waiting in conversation `conversation_id`: here, or, when other
/// servers share the database, one waiting for approval there (then made to wait here too).
pub(crate) async fn active_in(
    state: &AppState,
    conversation_id: &str,
) -> Result<Option<Arc<RunLog>>, ServerError> {
    let inner = &state.inner;
    if let Some(run) = inner.runs.active_in(conversation_id)
        && let Some(run) = fresh(state, run).await?
    {
        return Ok(Some(run));
    }
    if !inner.store.is_shared() {
        return Ok(None);
    }
    if let Some(row) = inner.store.paused_in(conversation_id.to_owned()).await? {
        return Ok(restore(state, row));
    }
    // Running on another server.
    let Some(message_id) = inner.store.active_chat(conversation_id.to_owned()).await? else {
        return Ok(None);
    };
    follow_remote(state, &message_id).await
}

/// With a shared database: end this server's copy of every paused answer another server
/// decides or cancels, as the database announces them, so its streams do not wait on.
fn watch_decisions(state: &AppState) {
    let Some(mut decided) = state.inner.store.decided_elsewhere() else {
        return;
    };
    // Weak: the watch must not keep the server's state alive.
    let inner = Arc::downgrade(&state.inner);
    tokio::spawn(async move {
        loop {
            let message_id = match decided.recv().await {
                Ok(message_id) => message_id,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let state = AppState { inner };
            if let Some(run) = state.inner.runs.get(&message_id)
                && let Err(e) = fresh(&state, run).await
            {
                tracing::warn!(%message_id, "could not check a paused answer decided elsewhere: {e}");
            }
        }
    });
}

/// This server's copy of a paused answer, unless another server sharing the database decided
/// or cancelled it meanwhile: then the copy is dropped here (its listeners end) and `None`.
async fn fresh(state: &AppState, run: Arc<RunLog>) -> Result<Option<Arc<RunLog>>, ServerError> {
    if !run.is_paused() || !state.inner.store.is_shared() {
        return Ok(Some(run));
    }
    let stored = state
        .inner
        .store
        .paused_answer(run.message_id.clone())
        .await?;
    if stored.is_some() {
        return Ok(Some(run));
    }
    drop(run.take_paused());
    drop_stale(state, &run);
    Ok(None)
}

/// Make a stored paused answer wait here; `None` when it cannot (logged).
fn restore(state: &AppState, row: crate::store::PausedRow) -> Option<Arc<RunLog>> {
    let inner = &state.inner;
    let paused = match PausedRun::from_json(&row.paused_run) {
        Ok(paused) => paused,
        Err(e) => {
            tracing::error!(message_id = %row.message_id, "a paused answer cannot be read, and is left waiting in the database: {e}");
            return None;
        }
    };
    let usage = serde_json::from_str(&row.usage).unwrap_or_default();
    let run = match inner.runs.start(
        row.message_id.clone(),
        row.conversation_id.clone(),
        inner.config.disconnect_grace,
        inner.shutdown.child_token(),
    ) {
        Ok(run) => run,
        // Restored meanwhile by a request that looked it up at the same time.
        Err(busy) if busy.message_id == row.message_id => return inner.runs.get(&row.message_id),
        Err(busy) => {
            tracing::error!(message_id = %row.message_id, "another answer ({}) holds the conversation; this paused one is left in the database", busy.message_id);
            return None;
        }
    };
    match serde_json::from_str::<RecordedEvents>(&row.events) {
        // The events at their old positions, so reconnects keep their `Last-Event-ID`.
        Ok(recorded) => {
            if let Err(e) = run.replay(
                recorded.len.saturating_sub(1),
                recorded.jumps,
                recorded.events,
            ) {
                tracing::warn!(message_id = %row.message_id, "the events of a paused answer cannot be shown again: {e}");
            }
        }
        Err(e) => {
            tracing::warn!(message_id = %row.message_id, "the events of a paused answer cannot be read; it is shown from its waiting calls: {e}");
            run.push(Frame::Start {
                conversation_id: row.conversation_id.clone(),
                message_id: row.message_id.clone(),
            });
            for pending in paused.pending() {
                run.push(Frame::Run(RunEvent::ToolCallReady {
                    call: pending.call(),
                }));
                run.push(Frame::Run(RunEvent::ApprovalRequested(Box::new(
                    pending.clone(),
                ))));
            }
        }
    }
    run.pause(Box::new(PausedChat {
        run: paused,
        prompt_index: row.prompt_index,
        usage,
    }));
    run.push(Frame::Paused);
    Some(run)
}

/// At start-up: every answer that was running when the process stopped goes on from its last
/// checkpoint, its log restored under the same event ids (see the module docs); every answer
/// that had finished shows its log again until it is forgotten.
pub(crate) async fn restore_running(state: &AppState) -> Result<(), ServerError> {
    for row in state.inner.store.chat_runs().await? {
        // Answers waiting for approval are restored from their pause (see `restore_paused`);
        // one whose pause was not kept yet goes on below, and pauses again.
        if state.inner.runs.get(&row.message_id).is_some() {
            continue;
        }
        restore_row(state, row).await?;
    }
    Ok(())
}

/// Register a stored answer again with its log, and resume it from its checkpoint unless it
/// had finished.
async fn restore_row(state: &AppState, row: ChatRunRow) -> Result<(), ServerError> {
    let inner = &state.inner;
    let run = match inner.runs.start(
        row.message_id.clone(),
        row.conversation_id.clone(),
        inner.config.disconnect_grace,
        inner.shutdown.child_token(),
    ) {
        Ok(run) => run,
        Err(busy) => {
            tracing::error!(message_id = %row.message_id, "another answer ({}) holds the conversation; this one is left in the database", busy.message_id);
            return Ok(());
        }
    };
    let jumps: Vec<Jump> = serde_json::from_str(&row.log_jumps).unwrap_or_default();
    let events: Vec<(usize, crate::events::ChatEvent)> = row
        .events
        .iter()
        .filter_map(|(id, json)| Some((*id, serde_json::from_str(json).ok()?)))
        .collect();
    let shown_calls = events
        .iter()
        .filter_map(|(_, event)| match event {
            crate::events::ChatEvent::ToolCallStart { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    if let Err(e) = run.replay(row.log_end, jumps, events) {
        tracing::warn!(message_id = %row.message_id, "the events of an answer cannot be shown again: {e}");
    }
    if row.finished {
        run.finish();
        inner.runs.release(&run);
        retire(state, row.message_id);
        return Ok(());
    }
    tracing::info!(message_id = %row.message_id, status = %row.status, "resuming an answer that was running when its server stopped");
    let empty = run.len() == 0;
    run.resumed();
    if empty {
        // Taken over before its first checkpoint: nothing of it was kept.
        run.push(Frame::Start {
            conversation_id: row.conversation_id.clone(),
            message_id: row.message_id.clone(),
        });
    }
    let stored = state
        .conversation(&row.conversation_id)
        .await?
        .map_or(0, |c| c.messages.len());
    let saver = Saver {
        store: inner.store.clone(),
        conversation_id: row.conversation_id.clone(),
        stored: Arc::new(tokio::sync::Mutex::new(stored)),
    };
    let durable = Durable::new(
        inner.store.clone(),
        run.clone(),
        row.prompt_index,
        if empty { 0 } else { run.len() },
    );
    let agent = answer_agent(state, &run, &saver);
    // A typed answer goes on as one (its schema is in its checkpoint); any other, or one whose
    // checkpoint cannot be read, as a plain run (which reports what went wrong).
    let events: Events = match agent
        .resume_output_run_stream_with(
            row.message_id.clone(),
            Output::<serde_json::Value>::new(),
            &durable,
        )
        .await
    {
        Ok(events) => Box::pin(events),
        Err(_) => Box::pin(agent.resume_run_stream(row.message_id.clone(), &durable)),
    };
    let finisher = Finisher {
        state: state.clone(),
        run,
        paused: false,
        durable: Some(durable),
    };
    let answer = Answer {
        saver,
        prompt_index: row.prompt_index,
        earlier_usage: Usage::default(),
        created: false,
        shown_calls,
    };
    inner.tasks.spawn(follow(finisher, answer, events));
    Ok(())
}

/// With a shared database: renew this server's leases every third of a lease, and every half
/// of one (at start-up first) take over the answers whose lease expired, resuming each as a
/// restart does, until the server shuts down.
pub(crate) fn keep_leases(state: &AppState) {
    let Some(lease) = state.inner.store.lease() else {
        return;
    };
    // Weak: the tasks must not keep the server's state alive.
    let weak = Arc::downgrade(&state.inner);
    let shutdown = state.inner.shutdown.clone();
    if let Some(mut cancels) = state.inner.store.cancelled_elsewhere() {
        let (weak, shutdown) = (weak.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                let message_id = tokio::select! {
                    heard = cancels.recv() => match heard {
                        Ok(message_id) => message_id,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    () = shutdown.cancelled() => return,
                };
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                cancel_here(&AppState { inner }, &message_id);
            }
        });
    }
    let mut released = state.inner.store.released_elsewhere();
    tokio::spawn(async move {
        let mut renew = tokio::time::interval(lease / 3);
        let mut claim = tokio::time::interval(lease / 2);
        for timer in [&mut renew, &mut claim] {
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            // A stopping server handed answers over: take them now, not at the next tick.
            let handed_over = async {
                let Some(released) = released.as_mut() else {
                    return std::future::pending().await;
                };
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = released.recv().await
                {
                    std::future::pending::<()>().await;
                }
            };
            let claiming = tokio::select! {
                _ = renew.tick() => false,
                _ = claim.tick() => true,
                () = handed_over => true,
                () = shutdown.cancelled() => return,
            };
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let state = AppState { inner };
            if !claiming {
                match state.inner.store.heartbeat().await {
                    // Cancels asked elsewhere whose notification was missed.
                    Ok((_, cancelled)) => {
                        for message_id in cancelled {
                            cancel_here(&state, &message_id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!("could not renew the leases on this server's answers: {e}")
                    }
                }
                continue;
            }
            // A few at a time, so servers starting together share the work.
            const BATCH: i64 = 16;
            match state.inner.store.claim_expired(BATCH).await {
                Ok(rows) => {
                    for row in rows {
                        take_over(&state, row).await;
                    }
                }
                Err(e) => tracing::warn!("could not look for answers to take over: {e}"),
            }
        }
    });
}

/// Cancel answer `message_id` if this server runs it (a cancel asked through another server).
fn cancel_here(state: &AppState, message_id: &str) {
    if let Some(run) = state.inner.runs.get(message_id)
        && !run.is_remote()
        && !run.is_finished()
        && !run.is_paused()
    {
        run.cancel.cancel();
    }
}

/// Resume an answer whose server's lease expired, now leased to this one.
async fn take_over(state: &AppState, row: ChatRunRow) {
    let inner = &state.inner;
    if let Some(copy) = inner.runs.get(&row.message_id) {
        // Followed here as another server's answer: its followers reconnect to this one.
        copy.finish();
        inner.runs.remove(&copy);
    }
    let message_id = row.message_id.clone();
    if let Err(e) = restore_row(state, row).await {
        tracing::error!(%message_id, "could not take over an answer: {e}");
    }
}
