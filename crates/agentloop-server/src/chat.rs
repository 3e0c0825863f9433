//! Running one chat answer: the agent's run in a task of its own, its events recorded as they
//! came (see [`Frame`]), and the history saved after every step.

use std::future::Future;
use std::sync::Arc;

use agentloop::output::Output;
use agentloop::run::RunStopReason;
use agentloop::{Message, RunEvent, history};
use futures::StreamExt;

use crate::error::ServerError;
use crate::events::Frame;
use crate::runs::RunLog;
use crate::state::AppState;
use crate::store::Store;

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
}

impl Drop for Finisher {
    fn drop(&mut self) {
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
            "a tool call needs approval, which the server does not support yet".into()
        }
        RunStopReason::EndTurn
        | RunStopReason::MaxTokens
        | RunStopReason::Custom(_)
        | RunStopReason::Cancelled
        | RunStopReason::Error => return None,
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
    let step_saver = saver.clone();
    let agent = inner.agent.with_options(|options| {
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
    });

    // Where the prompt this run answers sits in the history, for the stored usage.
    let prompt_index = history.len().saturating_sub(1);
    let mut events: std::pin::Pin<Box<dyn futures::Stream<Item = RunEvent> + Send>> =
        match output_schema {
            Some(schema) => Box::pin(agent.run_output_stream_with(
                history,
                Output::<serde_json::Value>::new().with_schema(schema),
            )),
            None => Box::pin(agent.run_stream(history)),
        };
    let mut failure: Option<String> = None;
    let mut ended = false;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::Error { error } => {
                // Web users get the kind of failure; the details (provider URL, body) are logged.
                tracing::error!(conversation = %run.conversation_id, message_id = %run.message_id, "the chat failed: {error}");
                failure = Some(crate::error::user_message(&error));
            }
            RunEvent::RunFinish { result } => {
                ended = true;
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
                        prompt_index,
                        crate::events::stop_reason_name(&result.stop_reason).to_owned(),
                        result.usage,
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
                    usage: result.usage,
                });
                if let Some(message) = message {
                    run.push(Frame::Failed { message });
                }
            }
            // The rest is recorded as it came; each wire protocol shows what it has names for.
            event => run.push(Frame::Run(event)),
        }
    }
    if !ended {
        // The run never started (the prompt hook refused the message).
        run.push(Frame::End {
            stop_reason: RunStopReason::Error,
            usage: Default::default(),
        });
        run.push(Frame::Failed {
            message: failure.unwrap_or_else(|| "the run ended without a result".into()),
        });
        if created
            && saver.saved().await == 0
            && let Err(e) = inner.store.delete(run.conversation_id.clone()).await
        {
            tracing::warn!(conversation = %run.conversation_id, "could not remove an empty conversation: {e}");
        }
    }
    run.finish();
    drop(finisher);
}
