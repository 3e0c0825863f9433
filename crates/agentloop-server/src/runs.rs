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
    /// Where event ids skip ahead: from frame `index` on, ids count up from `id`. Ids are
    /// frame indexes until an answer is resumed after a restart; its new frames then get ids
    /// past any the previous process can have sent (see [`RunLog::resumed`]).
    jumps: Vec<Jump>,
}

/// From frame `index` on, event ids count up from `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Jump {
    pub(crate) index: usize,
    pub(crate) id: usize,
}

impl Log {
    /// The event id of frame `index`.
    fn id_of(&self, index: usize) -> usize {
        match self.jumps.iter().rev().find(|j| j.index <= index) {
            Some(jump) => jump.id + (index - jump.index),
            None => index,
        }
    }

    /// Where a follower that saw event `id` goes on: the index of the next frame.
    fn after(&self, id: usize) -> Result<usize, After> {
        let len = self.frames.len();
        if id >= self.id_of(len) {
            return Err(After::Past);
        }
        // The run of ids `id` falls in or after: (first index, first id, frames in it).
        let mut run = (0, 0, self.jumps.first().map_or(len, |first| first.index));
        for (i, jump) in self.jumps.iter().enumerate() {
            if jump.id > id {
                break;
            }
            let end = self.jumps.get(i + 1).map_or(len, |next| next.index);
            run = (jump.index, jump.id, end - jump.index);
        }
        let (index, first_id, count) = run;
        if id - first_id < count {
            return Ok(index + (id - first_id) + 1);
        }
        // Ids past the end of a run, up to the next jump, were given by a process that stopped
        // before a checkpoint recorded them.
        Err(After::Lost {
            last_kept: (first_id + count).saturating_sub(1),
        })
    }
}

/// Why a follower cannot go on after an event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// No event has that id yet.
    Past,
    /// The event was sent by a process that died before recording it; the answer went on from
    /// its last checkpoint, whose last event is `last_kept`.
    Lost { last_kept: usize },
}

/// How far ahead a resumed answer's ids start: past any id the dead process can have given
/// (no step makes that many frames), on a round number so they read as a restart.
const RESTART_ID_STEP: usize = 1_000_000_000;

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
    /// A copy of an answer another server runs, kept up to date from the shared database.
    remote: bool,
    /// Another server took the answer over (this one's lease expired): nothing more of it is
    /// written here.
    lost: std::sync::atomic::AtomicBool,
}

/// Wakes up when a log changes (see [`RunLog::watch`]).
pub(crate) struct LogWatch(watch::Receiver<Log>);

impl LogWatch {
    /// Wait for the next change; `false` once the log is gone.
    pub(crate) async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
}

/// A stored log does not continue this copy of it: events this copy has were cut (another
/// server took the answer over), or its ids do not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Diverged;

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
            remote: false,
            lost: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// How many streams follow the log now.
    pub(crate) fn listeners(&self) -> usize {
        lock(&self.listeners).count
    }

    /// Whether this is a copy of an answer another server runs.
    pub(crate) fn is_remote(&self) -> bool {
        self.remote
    }

    /// Another server took the answer over: nothing more of it is written here.
    pub(crate) fn lose(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether another server took the answer over.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Wakes up whenever a frame is recorded or the log finishes.
    pub(crate) fn watch(&self) -> LogWatch {
        LogWatch(self.log.subscribe())
    }

    /// The event id the next frame gets.
    pub(crate) fn end_id(&self) -> usize {
        let log = self.log.borrow();
        log.id_of(log.frames.len())
    }

    /// Bring a copy of an answer another server runs up to its stored log: the frames up to
    /// event id `end` with these `jumps`, `events` at their ids. [`Diverged`] (nothing
    /// changed) when the stored log does not continue this one.
    pub(crate) fn extend(
        &self,
        end: usize,
        jumps: Vec<Jump>,
        events: Vec<(usize, crate::events::ChatEvent)>,
    ) -> Result<(), Diverged> {
        const MAX_FRAMES: usize = 1 << 24;
        let (index, id) = jumps.last().map_or((0, 0), |j| (j.index, j.id));
        let frames = index.saturating_add(end.saturating_sub(id));
        let ordered = jumps
            .windows(2)
            .all(|w| w[0].index < w[1].index && w[0].id < w[1].id);
        if end < id || frames > MAX_FRAMES || !ordered {
            return Err(Diverged);
        }
        let mut result = Ok(());
        let mut events = events.into_iter().peekable();
        self.log.send_if_modified(|log| {
            let have = log.frames.len();
            // The jumps this copy knows stay, and new ones start at or after its end.
            let kept = log.jumps.len() <= jumps.len()
                && log.jumps[..] == jumps[..log.jumps.len()]
                && jumps[log.jumps.len()..].iter().all(|j| j.index >= have);
            if !kept || frames < have || log.finished {
                result = Err(Diverged);
                return false;
            }
            let new_jumps = jumps.len() > log.jumps.len();
            log.jumps = jumps;
            for i in have..frames {
                let at = log.id_of(i);
                while events.next_if(|(id, _)| *id < at).is_some() {}
                let frame = match events.next_if(|(id, _)| *id == at) {
                    Some((_, event)) => Frame::Replayed(event),
                    None => Frame::Hidden,
                };
                log.frames.push(Arc::new(frame));
            }
            frames > have || new_jumps
        });
        result
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

    /// The `/v1/chat` events of the frames from index `from` on, by event id, and the index
    /// and event id that follow them.
    pub(crate) fn chat_events_from(
        &self,
        from: usize,
    ) -> (usize, usize, Vec<(usize, crate::events::ChatEvent)>) {
        let log = self.log.borrow();
        let events = log
            .frames
            .iter()
            .enumerate()
            .skip(from)
            .filter_map(|(i, frame)| Some((log.id_of(i), frame.chat_event()?)))
            .collect();
        let len = log.frames.len();
        (len, log.id_of(len), events)
    }

    /// The `/v1/chat` events recorded so far, by event id, and the id that follows them.
    pub(crate) fn chat_events(&self) -> (usize, Vec<(usize, crate::events::ChatEvent)>) {
        let (_, next, events) = self.chat_events_from(0);
        (next, events)
    }

    /// Where the log's event ids skip ahead.
    pub(crate) fn jumps(&self) -> Vec<Jump> {
        self.log.borrow().jumps.clone()
    }

    /// Rebuild a stored log: the frames up to event id `end` with these `jumps`, `events` at
    /// their ids and hidden frames between them. Refused (nothing pushed) when the ids would
    /// need more frames than any answer makes.
    pub(crate) fn replay(
        &self,
        end: usize,
        jumps: Vec<Jump>,
        events: Vec<(usize, crate::events::ChatEvent)>,
    ) -> Result<(), String> {
        const MAX_FRAMES: usize = 1 << 24;
        let (index, id) = jumps.last().map_or((0, 0), |j| (j.index, j.id));
        let frames = index.saturating_add(end.saturating_sub(id));
        let ordered = jumps
            .windows(2)
            .all(|w| w[0].index < w[1].index && w[0].id < w[1].id);
        if end < id || frames > MAX_FRAMES || !ordered {
            return Err(format!(
                "its log does not fit together (next id {end}, id jumps {jumps:?})"
            ));
        }
        let mut events = events.into_iter().peekable();
        self.log.send_modify(|log| {
            log.jumps = jumps;
            for i in 0..frames {
                let at = log.id_of(i);
                while events.next_if(|(id, _)| *id < at).is_some() {}
                let frame = match events.next_if(|(id, _)| *id == at) {
                    Some((_, event)) => Frame::Replayed(event),
                    None => Frame::Hidden,
                };
                log.frames.push(Arc::new(frame));
            }
        });
        Ok(())
    }

    /// The answer goes on after a restart: its next frames get ids past any the process that
    /// died can have sent after the log's end.
    pub(crate) fn resumed(&self) {
        self.log.send_modify(|log| {
            let index = log.frames.len();
            let id = (log.id_of(index) / RESTART_ID_STEP + 1) * RESTART_ID_STEP;
            log.jumps.retain(|j| j.index < index);
            log.jumps.push(Jump { index, id });
        });
    }

    /// Where a follower that saw event `id` goes on (see [`After`]).
    pub(crate) fn after(&self, id: usize) -> Result<usize, After> {
        self.log.borrow().after(id)
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

    /// Follow the log from frame `from` on: `(event id, frame)` pairs, ending when the run has
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
                            let item = (log.id_of(cursor), frame.clone());
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
    /// A copy of answer `message_id`, which another server runs, to follow here: registered
    /// by its message id only (the conversation's one-answer rule is the database's); the
    /// copy registered already when there is one.
    pub(crate) fn follower(
        &self,
        message_id: String,
        conversation_id: String,
        grace: Duration,
        cancel: CancellationToken,
    ) -> (Arc<RunLog>, bool) {
        let mut registry = lock(&self.registry);
        if let Some(run) = registry.by_message.get(&message_id) {
            return (run.clone(), false);
        }
        let mut run = RunLog::new(message_id.clone(), conversation_id, grace, cancel);
        run.remote = true;
        let run = Arc::new(run);
        registry.by_message.insert(message_id, run.clone());
        (run, true)
    }

    /// Drop `run` from the registry, if it is the one registered under its message id, and
    /// free its conversation.
    pub(crate) fn remove(&self, run: &Arc<RunLog>) {
        let mut registry = lock(&self.registry);
        if registry
            .by_message
            .get(&run.message_id)
            .is_some_and(|found| Arc::ptr_eq(found, run))
        {
            registry.by_message.remove(&run.message_id);
        }
        if registry.active.get(&run.conversation_id) == Some(&run.message_id) {
            registry.active.remove(&run.conversation_id);
        }
    }

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

    /// The answers this server is running: not finished, not paused, not copies of another
    /// server's.
    pub(crate) fn running(&self) -> Vec<Arc<RunLog>> {
        lock(&self.registry)
            .by_message
            .values()
            .filter(|run| !run.is_remote() && !run.is_finished() && !run.is_paused())
            .cloned()
            .collect()
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

    #[tokio::test]
    async fn ids_skip_ahead_after_a_restart_and_cut_ids_are_lost() {
        let runs = Runs::default();
        let run = runs
            .start(
                "m1".into(),
                "c1".into(),
                Duration::ZERO,
                CancellationToken::new(),
            )
            .unwrap();
        for t in ["a", "b", "c"] {
            run.push(text(t));
        }
        // The process that died may have sent ids 3, 4, ... after its last checkpoint.
        run.resumed();
        assert_eq!(run.after(2), Ok(3));
        assert_eq!(run.after(3), Err(After::Lost { last_kept: 2 }));
        assert_eq!(run.after(999_999_999), Err(After::Lost { last_kept: 2 }));
        assert_eq!(run.after(1_000_000_000), Err(After::Past));
        run.push(text("d"));
        run.push(text("e"));
        assert_eq!(run.after(1), Ok(2));
        assert_eq!(run.after(1_000_000_000), Ok(4));
        assert_eq!(run.after(1_000_000_001), Ok(5));
        assert_eq!(run.after(1_000_000_002), Err(After::Past));
        let mut follow = Box::pin(run.follow(2));
        assert_eq!(message(follow.next().await), (2, "c".into()));
        assert_eq!(message(follow.next().await), (1_000_000_000, "d".into()));

        // Stored and restored: the same ids, and a second restart skips ahead again.
        let (end, events) = run.chat_events();
        assert_eq!(end, 1_000_000_002);
        let again = Runs::default()
            .start(
                "m1".into(),
                "c1".into(),
                Duration::ZERO,
                CancellationToken::new(),
            )
            .unwrap();
        again.replay(end, run.jumps(), events.clone()).unwrap();
        assert_eq!(again.chat_events(), (end, events));
        again.resumed();
        assert_eq!(
            again.after(1_000_000_002),
            Err(After::Lost {
                last_kept: 1_000_000_001
            })
        );
        again.push(text("f"));
        assert_eq!(again.after(2_000_000_000), Ok(6));
        assert_eq!(again.after(2_000_000_001), Err(After::Past));
        assert_eq!(again.after(1_000_000_001), Ok(5));
        assert_eq!(again.chat_events().0, 2_000_000_001);
        // Ids that would take more frames than any answer makes are refused.
        assert!(again.replay(usize::MAX, Vec::new(), Vec::new()).is_err());
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
