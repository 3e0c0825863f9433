//! Running chats: each records its frames in a log that any number of HTTP responses follow.
//!
//! The run itself is a spawned task, so a response that goes away does not stop it; a reconnect
//! reads the log from where its client left off. When the last listener has been gone for the
//! grace period, the run is cancelled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::events::Frame;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update below is a plain assignment or push, so the state is consistent even if a
    // holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct Log {
    frames: Vec<Arc<Frame>>,
    finished: bool,
}

#[derive(Debug, Default)]
struct Listeners {
    count: usize,
    /// Bumped whenever the count drops to zero, so an older grace timer knows it is stale.
    generation: u64,
}

/// One chat answer in flight (or recently finished).
#[derive(Debug)]
pub(crate) struct RunLog {
    pub(crate) message_id: String,
    pub(crate) conversation_id: String,
    log: watch::Sender<Log>,
    listeners: Mutex<Listeners>,
    pub(crate) cancel: CancellationToken,
    grace: Duration,
    /// Set while the answer waits for approval decisions: no task runs it, and listeners
    /// leaving do not cancel it.
    paused: Mutex<Option<Box<PausedChat>>>,
    /// Where the answer's latest part begins: 0, or the first frame after the last resume.
    segment: Mutex<Segment>,
}

/// The part of an answer after its last resume (the whole answer when it never paused).
#[derive(Debug, Default, Clone)]
pub(crate) struct Segment {
    /// Its first frame.
    pub(crate) start: usize,
    /// The calls decided by the resume that began it.
    pub(crate) decided: Vec<String>,
}

/// An answer waiting for approval: the library's paused run and what the rest of the answer
/// needs to finish it as if it had not stopped.
#[derive(Debug)]
pub(crate) struct PausedChat {
    /// The paused run, to resume with decisions.
    pub(crate) run: agentloop::run::PausedRun,
    /// Where the prompt the answer replies to sits in the history.
    pub(crate) prompt_index: usize,
    /// What the answer used before it paused.
    pub(crate) usage: agentloop::Usage,
}

impl RunLog {
    fn new(
        message_id: String,
        conversation_id: String,
        grace: Duration,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            message_id,
            conversation_id,
            log: watch::Sender::new(Log::default()),
            listeners: Mutex::default(),
            cancel,
            grace,
            paused: Mutex::new(None),
            segment: Mutex::default(),
        }
    }

    /// A resume with decisions on `decided` begins a new part of the answer at the next frame.
    pub(crate) fn begin_segment(&self, decided: Vec<String>) {
        *lock(&self.segment) = Segment {
            start: self.len(),
            decided,
        };
    }

    /// The answer's latest part.
    pub(crate) fn segment(&self) -> Segment {
        lock(&self.segment).clone()
    }

    /// The `/v1/chat` events recorded so far, by position, and how many frames there are.
    pub(crate) fn chat_events(&self) -> (usize, Vec<(usize, crate::events::ChatEvent)>) {
        let log = self.log.borrow();
        let events = log
            .frames
            .iter()
            .enumerate()
            .filter_map(|(i, frame)| Some((i, frame.chat_event()?)))
            .collect();
        (log.frames.len(), events)
    }

    /// The answer waits for approval decisions.
    pub(crate) fn pause(&self, paused: Box<PausedChat>) {
        *lock(&self.paused) = Some(paused);
    }

    /// Take the paused answer to resume or end it; `None` when it is not waiting (running,
    /// finished, or taken by a concurrent request).
    pub(crate) fn take_paused(&self) -> Option<Box<PausedChat>> {
        lock(&self.paused).take()
    }

    /// Whether the answer waits for approval decisions.
    pub(crate) fn is_paused(&self) -> bool {
        lock(&self.paused).is_some()
    }

    /// Record a frame; listeners wake up.
    pub(crate) fn push(&self, frame: Frame) {
        self.log.send_modify(|log| {
            if !log.finished {
                log.frames.push(Arc::new(frame));
            }
        });
    }

    /// No more frames will come.
    pub(crate) fn finish(&self) {
        self.log.send_modify(|log| log.finished = true);
    }

    /// How many frames are recorded: every event id sent so far is below it.
    pub(crate) fn len(&self) -> usize {
        self.log.borrow().frames.len()
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.log.borrow().finished
    }

    /// Wait until the run has finished.
    pub(crate) async fn finished(&self) {
        let mut rx = self.log.subscribe();
        let _ = rx.wait_for(|log| log.finished).await;
    }

    /// Follow the log from frame `from` on: `(index, frame)` pairs, ending when the run has
    /// finished and everything was read. While the stream lives it counts as a listener.
    pub(crate) fn follow(
        self: &Arc<Self>,
        from: usize,
    ) -> impl Stream<Item = (usize, Arc<Frame>)> + Send + 'static {
        lock(&self.listeners).count += 1;
        let listener = Listener(self.clone());
        let rx = self.log.subscribe();
        futures::stream::unfold(
            (rx, from, listener),
            |(mut rx, cursor, listener)| async move {
                loop {
                    {
                        let log = rx.borrow_and_update();
                        if let Some(frame) = log.frames.get(cursor) {
                            let item = (cursor, frame.clone());
                            drop(log);
                            return Some((item, (rx, cursor + 1, listener)));
                        }
                        if log.finished {
                            return None;
                        }
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        )
    }

    fn listener_left(self: &Arc<Self>) {
        let generation = {
            let mut listeners = lock(&self.listeners);
            listeners.count = listeners.count.saturating_sub(1);
            if listeners.count > 0 || self.is_finished() {
                return;
            }
            listeners.generation += 1;
            listeners.generation
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.cancel.cancel();
            return;
        };
        let run = self.clone();
        runtime.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(run.grace) => {}
                () = run.finished() => return,
            }
            let listeners = lock(&run.listeners);
            // An answer waiting for a person keeps waiting; only a running one is stopped.
            if listeners.count == 0 && listeners.generation == generation && !run.is_paused() {
                tracing::debug!(message_id = %run.message_id, "no listener came back: cancelling the chat");
                run.cancel.cancel();
            }
        });
    }
}

/// Counts a follower of a run while it lives.
struct Listener(Arc<RunLog>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.listener_left();
    }
}

#[derive(Debug, Default)]
struct Registry {
    by_message: HashMap<String, Arc<RunLog>>,
    /// The answer running in each busy conversation (one at a time per conversation).
    active: HashMap<String, String>,
}

/// All chats in flight or recently finished.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    registry: Mutex<Registry>,
}

/// The conversation already has an answer running.
#[derive(Debug)]
pub(crate) struct Busy {
    pub(crate) message_id: String,
}

impl Runs {
    /// Register a new run for `conversation_id`, unless one is running there.
    pub(crate) fn start(
        &self,
        message_id: String,
        conversation_id: String,
        grace: Duration,
        cancel: CancellationToken,
    ) -> Result<Arc<RunLog>, Busy> {
        let mut registry = lock(&self.registry);
        if let Some(running) = registry.active.get(&conversation_id) {
            return Err(Busy {
                message_id: running.clone(),
            });
        }
        let run = Arc::new(RunLog::new(
            message_id.clone(),
            conversation_id.clone(),
            grace,
            cancel,
        ));
        registry.active.insert(conversation_id, message_id.clone());
        registry.by_message.insert(message_id, run.clone());
        Ok(run)
    }

    /// The conversation is free again; the run's log stays readable until [`Runs::forget`].
    pub(crate) fn release(&self, run: &RunLog) {
        let mut registry = lock(&self.registry);
        if registry.active.get(&run.conversation_id) == Some(&run.message_id) {
            registry.active.remove(&run.conversation_id);
        }
    }

    /// Drop a finished run's log.
    pub(crate) fn forget(&self, message_id: &str) {
        lock(&self.registry).by_message.remove(message_id);
    }

    /// The run with this message id.
    pub(crate) fn get(&self, message_id: &str) -> Option<Arc<RunLog>> {
        lock(&self.registry).by_message.get(message_id).cloned()
    }

    /// The run in flight in this conversation.
    pub(crate) fn active_in(&self, conversation_id: &str) -> Option<Arc<RunLog>> {
        let registry = lock(&self.registry);
        let message_id = registry.active.get(conversation_id)?;
        registry.by_message.get(message_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn text(t: &str) -> Frame {
        Frame::Failed { message: t.into() }
    }

    fn message(item: Option<(usize, Arc<Frame>)>) -> (usize, String) {
        match item {
            Some((index, frame)) => match &*frame {
                Frame::Failed { message } => (index, message.clone()),
                other => panic!("unexpected frame {other:?}"),
            },
            None => panic!("the log ended early"),
        }
    }

    #[tokio::test]
    async fn followers_replay_then_follow_live() {
        let runs = Runs::default();
        let run = runs
            .start(
                "m1".into(),
                "c1".into(),
                Duration::from_secs(10),
                CancellationToken::new(),
            )
            .unwrap();
        run.push(text("a"));
        let mut late = Box::pin(run.follow(1));
        let mut early = Box::pin(run.follow(0));
        assert_eq!(early.next().await.unwrap().0, 0);
        run.push(text("b"));
        run.finish();
        run.push(text("ignored after finish"));
        assert_eq!(message(early.next().await), (1, "b".into()));
        assert!(early.next().await.is_none());
        assert_eq!(message(late.next().await), (1, "b".into()));
        assert!(late.next().await.is_none());
    }

    #[tokio::test]
    async fn one_run_per_conversation() {
        let runs = Runs::default();
        let run = runs
            .start(
                "m1".into(),
                "c1".into(),
                Duration::ZERO,
                CancellationToken::new(),
            )
            .unwrap();
        let busy = runs
            .start(
                "m2".into(),
                "c1".into(),
                Duration::ZERO,
                CancellationToken::new(),
            )
            .unwrap_err();
        assert_eq!(busy.message_id, "m1");
        runs.release(&run);
        assert!(
            runs.start(
                "m2".into(),
                "c1".into(),
                Duration::ZERO,
                CancellationToken::new()
            )
            .is_ok()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_without_listeners_is_cancelled_after_the_grace_period() {
        let runs = Runs::default();
        let run = runs
            .start(
                "m1".into(),
                "c1".into(),
                Duration::from_secs(10),
                CancellationToken::new(),
            )
            .unwrap();
        drop(run.follow(0));
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!run.cancel.is_cancelled());
        // A listener coming back within the grace keeps the run alive.
        let back = run.follow(0);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!run.cancel.is_cancelled());
        drop(back);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(run.cancel.is_cancelled());
    }
}
