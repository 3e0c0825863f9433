//! Running one chat answer: the agent's run in a task of its own, its events recorded as they
//! came (see [`Frame`]), and the history saved after every step.

use std::future::Future;
use std::sync::Arc;

use agentloop::output::Output;
use agentloop::run::{Decision, PausedRun, RunStopReason};
use agentloop::{Agent, Message, RunEvent, Usage, history};
use futures::StreamExt;

use crate::error::ServerError;
use crate::events::Frame;
use crate::runs::{PausedChat, RunLog};
use crate::state::AppState;
use crate::store::{PausedRow, RecordedEvents, Store};

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
    let creating = start
        .create
        .map(|title| inner.store.create(start.conversation_id.clone(), title));
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

/// Ends the log however the run ends (a panic included) and frees the conversation.
struct Finisher {
    state: AppState,
    run: Arc<RunLog>,
    /// The answer paused for approval: it stays registered, its conversation busy.
    paused: bool,
}

impl Drop for Finisher {
    fn drop(&mut self) {
        if self.paused {
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
            self.run.finish();
        }
        let inner = &self.state.inner;
        inner.runs.release(&self.run);
        let state = self.state.clone();
        let message_id = self.run.message_id.clone();
        let retain = inner.config.retain_finished;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(retain).await;
                state.inner.runs.forget(&message_id);
            });
        } else {
            inner.runs.forget(&message_id);
        }
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
) {
    let finisher = Finisher {
        state: state.clone(),
        run: run.clone(),
        paused: false,
    };
    let inner = &state.inner;
    let created = creating.is_some();
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
    let events: Events = match output_schema {
        Some(schema) => Box::pin(agent.run_output_stream_with(
            history,
            Output::<serde_json::Value>::new().with_schema(schema),
        )),
        None => Box::pin(agent.run_stream(history)),
    };
    let answer = Answer {
        saver,
        prompt_index,
        earlier_usage: Usage::default(),
        created,
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
                    let asked = std::mem::take(&mut asked);
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
            // The rest is recorded as it came; each wire protocol shows what it has names for.
            event => run.push(Frame::Run(event)),
        }
    }
    if finisher.paused {
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
    // A typed answer keeps its schema while paused, and ends in its `output` event.
    let resumed: agentloop::Result<Events> = if paused.run.is_typed() {
        agent
            .resume_output_stream_with(&paused.run, decisions, Output::<serde_json::Value>::new())
            .map(|events| Box::pin(events) as Events)
    } else {
        agent
            .resume_stream(&paused.run, decisions)
            .map(|events| Box::pin(events) as Events)
    };
    let events = match resumed {
        Ok(events) => events,
        Err(e) => return give_back(paused, ResumeError::Invalid(e.to_string())),
    };
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
    run.begin_segment(decided);
    let finisher = Finisher {
        state: state.clone(),
        run,
        paused: false,
    };
    let answer = Answer {
        saver,
        prompt_index: paused.prompt_index,
        earlier_usage: paused.usage,
        created: false,
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
        return Ok(None);
    };
    Ok(restore(state, row))
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
    let Some(row) = inner.store.paused_in(conversation_id.to_owned()).await? else {
        return Ok(None);
    };
    Ok(restore(state, row))
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
            let mut events = recorded.events.into_iter().peekable();
            for position in 0..recorded.len.saturating_sub(1) {
                match events.next_if(|(at, _)| *at == position) {
                    Some((_, event)) => run.push(Frame::Replayed(event)),
                    None => run.push(Frame::Hidden),
                }
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
