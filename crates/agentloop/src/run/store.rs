//! Durable runs: checkpoints of a run's [`Machine`] in a [`RunStore`], so a run survives the
//! process that ran it. The semantics are documented on [`RunStore`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use futures::future::BoxFuture;
use memchr::memmem;
use serde::Serialize;

use super::approval::{PAUSED_RUN_VERSION, PausedRun};
use super::machine::Machine;
use crate::error::{Error, Result};

/// Where a run stands, as a store lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Started and not over: resume it with [`crate::Agent::resume_run`].
    Running,
    /// Stopped to wait for approval.
    Paused,
    /// Over.
    Done,
    /// Its last model call failed (after the provider's retries): the checkpoint is the run
    /// as it stood before that call, and [`crate::Agent::resume_run`] issues the call again.
    /// No Postgres worker claims it on its own.
    Failed,
}

impl RunStatus {
    /// The status's name (`running`, `paused`, `done`), as stores keep it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    /// The status named `name` ([`Self::as_str`]).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "running" => Some(Self::Running),
            "paused" => Some(Self::Paused),
            "done" => Some(Self::Done),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    fn of(machine: &Machine) -> Self {
        if machine.is_paused() {
            Self::Paused
        } else if machine.is_done() {
            Self::Done
        } else {
            Self::Running
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One saved state of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The store's version of the run: 1 for its first save, one more for each save after.
    pub version: u64,
    /// Where the run stands.
    pub status: RunStatus,
    /// The run's state as JSON (the format of [`PausedRun::to_json`]: a format version and
    /// the [`Machine`]).
    pub state: String,
}

impl Checkpoint {
    /// The run's state machine, read back. A checkpoint written in another format version is
    /// refused with [`Error::UnsupportedVersion`].
    pub fn machine(&self) -> Result<Machine> {
        Ok(PausedRun::from_json(&self.state)?.machine().clone())
    }
}

/// A run as [`RunStore::list`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// Its last checkpoint's version.
    pub version: u64,
    /// Where it stands.
    pub status: RunStatus,
}

/// Keeps durable runs' checkpoints: [`MemoryStore`] (one process, for tests), `SqliteStore`
/// (feature `sqlite`: one file, WAL, the embedded choice) and `PostgresStore` (feature
/// `postgres`: many worker processes, each run claimed with a lease renewed by heartbeat).
///
/// [`crate::Agent::run_durable`] (or [`crate::Agent::run_durable_stream`], with the same
/// checkpoints) writes a checkpoint after every state change that matters:
/// the run's start, the model's response recorded, the step's tools about to start, each tool
/// outcome recorded, the step closed (or the run paused or ended). Changes with nothing
/// between them that acts outside the run go in one checkpoint: a response and the start of
/// its tools, the last outcome of a step and the step's close. The rule: every change is in
/// the store before the next effect outside the run (a tool starting, a model call, the run
/// returning to its caller), never later. [`crate::Agent::resume_run`]
/// (or [`crate::Agent::resume_run_stream`])
/// continues a run from its last checkpoint, in this process or another, with the same agent
/// definition.
///
/// # Every tool once
///
/// - A tool outcome that was recorded is never run again.
/// - A model call in flight when the process died is simply issued again (nothing of it was
///   recorded).
/// - A tool call that had started (its step's tools were about to start, and its outcome was
///   not recorded) is run again only if its tool is marked idempotent
///   ([`crate::Tool::with_idempotent`]); otherwise it gets a
///   [`super::ToolOutcome::Interrupted`] outcome, which the model sees as an error result. Of a
///   step whose tools run one at a time, calls that had not started yet count as started: a
///   call is never run twice, at the price of an interrupted call that never ran.
/// - Every tool gets an idempotency key, `run_id/call_id`, in its
///   [`crate::ToolContext::idempotency_key`], the same when a call is run again: use it to
///   deduplicate side effects outside the process.
///
/// # Failures and stops
///
/// - A model call that fails (after the provider's retries: a 5xx, a cut connection, a
///   timeout) ends the run with [`super::RunStopReason::Error`] and the error, and leaves the
///   run as it stood before the call, with [`RunStatus::Failed`]: [`crate::Agent::resume_run`]
///   issues the call again.
/// - A tool that fails is an outcome like any other: recorded, and shown to the model.
/// - Cancelling a run (its [`super::RunOptions::cancel`] token, [`super::RunStream::cancel`])
///   ends it: the store keeps it as over, with [`super::RunStopReason::Cancelled`] and the
///   calls it cut off answered as not run. Dropping the run's future or stream instead stops
///   it where it stands, as a crash would, and it can be resumed.
///
/// Every save names the version it read, and fails with [`Error::StaleCheckpoint`] when the
/// stored one moved on: two processes never both continue a run. A run whose save fails stops
/// with [`super::RunStopReason::Error`] and that error.
pub trait RunStore: Send + Sync + 'static {
    /// The run's last checkpoint, or `None` when there is no such run.
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>>>;

    /// Save `state` (JSON) as the run's checkpoint after version `read` (0 for a new run),
    /// returning the new version (`read + 1`). Fails with [`Error::StaleCheckpoint`], saving
    /// nothing, when the stored version is not `read`.
    fn save<'a>(
        &'a self,
        run_id: &'a str,
        read: u64,
        status: RunStatus,
        state: String,
    ) -> BoxFuture<'a, Result<u64>>;

    /// Every run in the store, by id.
    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>>;
}

/// A [`RunStore`] in memory: checkpoints live as long as the store (clones share them).
/// For tests and for runs that only need to survive a dropped future.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore(Arc<Mutex<BTreeMap<String, Checkpoint>>>);

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Checkpoint>> {
        // A panic while holding the lock leaves the map as it was: every change is one insert.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RunStore for MemoryStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>>> {
        let found = self.runs().get(run_id).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn save<'a>(
        &'a self,
        run_id: &'a str,
        read: u64,
        status: RunStatus,
        state: String,
    ) -> BoxFuture<'a, Result<u64>> {
        let mut runs = self.runs();
        let found = runs.get(run_id).map_or(0, |c| c.version);
        let saved = if found == read {
            let version = read + 1;
            runs.insert(
                run_id.to_owned(),
                Checkpoint {
                    version,
                    status,
                    state,
                },
            );
            Ok(version)
        } else {
            Err(Error::StaleCheckpoint {
                run_id: run_id.to_owned(),
                expected: read,
                found,
            })
        };
        Box::pin(std::future::ready(saved))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>> {
        let runs = self
            .runs()
            .iter()
            .map(|(id, c)| RunSummary {
                run_id: id.clone(),
                version: c.version,
                status: c.status,
            })
            .collect();
        Box::pin(std::future::ready(Ok(runs)))
    }
}

/// The machine in the checkpoint format (that of [`PausedRun`]), without copying it, in a
/// buffer of `capacity` bytes to start with.
pub(crate) fn state_json(machine: &Machine, capacity: usize) -> Result<String> {
    #[derive(Serialize)]
    struct Saved<'a> {
        version: u32,
        machine: &'a Machine,
    }
    let mut json = Vec::with_capacity(capacity);
    serde_json::to_writer(
        &mut json,
        &Saved {
            version: PAUSED_RUN_VERSION,
            machine,
        },
    )
    .map_err(|e| Error::parse("run checkpoint", e))?;
    // serde_json writes UTF-8 only; the check is cheap next to the serializing.
    String::from_utf8(json).map_err(|e| Error::parse("run checkpoint", e))
}

/// A durable run's machine in the checkpoint format, byte for byte what [`state_json`] writes,
/// from the encodings of the messages and steps it wrote for earlier checkpoints: a run's
/// history only grows, so each checkpoint encodes only what is new or changed. Only the last
/// message and the last step may still change, and the machine says when they did; a machine
/// whose history was edited otherwise starts over (see [`Machine::take_history_edited`]).
#[derive(Debug, Default)]
struct Encoded {
    messages: Sealed,
    steps: Sealed,
    /// The last checkpoint's size: the next one starts in a buffer that holds it instead of
    /// doubling its way there.
    size: usize,
}

/// The encodings of a list's items: those before the last one, joined by commas, and the last
/// one apart, as it may still change.
#[derive(Debug, Default)]
struct Sealed {
    json: Vec<u8>,
    count: usize,
    /// The encoding of the item at `count`, when `last_valid`.
    last: Vec<u8>,
    last_valid: bool,
}

impl Sealed {
    fn clear(&mut self) {
        self.json.clear();
        self.count = 0;
        self.last_valid = false;
    }

    /// Write `items` (without brackets) to `out`, encoding only the items not kept yet, or
    /// changed (`tail_changed`: the item last written as the last one may have), and keep them.
    fn write<T: Serialize>(
        &mut self,
        items: &[T],
        tail_changed: bool,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        let result = self.encode(items, tail_changed);
        if result.is_err() {
            self.clear();
            return result;
        }
        out.extend_from_slice(&self.json);
        if !items.is_empty() {
            if self.count > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.last);
        }
        Ok(())
    }

    fn encode<T: Serialize>(&mut self, items: &[T], tail_changed: bool) -> serde_json::Result<()> {
        let sealed = items.len().saturating_sub(1);
        if self.count > sealed {
            // Fewer items than kept: not the same list grown.
            self.clear();
        }
        if tail_changed {
            self.last_valid = false;
        }
        for item in &items[self.count..sealed] {
            if self.count > 0 {
                self.json.push(b',');
            }
            if self.last_valid {
                // The item written last time as the last one, unchanged since.
                self.json.extend_from_slice(&self.last);
                self.last_valid = false;
            } else {
                serde_json::to_writer(&mut self.json, item)?;
            }
            self.count += 1;
        }
        if let Some(last) = items.last()
            && !self.last_valid
        {
            self.last.clear();
            serde_json::to_writer(&mut self.last, last)?;
            self.last_valid = true;
        }
        Ok(())
    }
}

/// Where the empty list that `finder` finds (`"key":[]`) is in `json`, when it is there
/// exactly once: a machine encoded with its history taken out holds it once, unless a name in
/// its tools' schemas or elsewhere happens to make the same bytes, when nothing is spliced.
fn splice_point(json: &[u8], finder: &memmem::Finder<'static>) -> Option<usize> {
    let mut found = finder.find_iter(json);
    let at = found.next()?;
    // Just inside the brackets.
    found
        .next()
        .is_none()
        .then_some(at + finder.needle().len() - 1)
}

/// Where the history goes in a machine encoded without it (see [`splice_point`]); built once,
/// as building a finder costs about as much as a search.
static MESSAGES: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"messages\":[]"));
static STEPS: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"steps\":[]"));

impl Encoded {
    /// `machine` as [`state_json`] encodes it.
    fn encode(&mut self, machine: &mut Machine) -> Result<String> {
        let (edited, tail_changed) = machine.take_history_edited();
        if edited {
            self.messages.clear();
            self.steps.clear();
        }
        let (messages, steps) = machine.take_history();
        let header = state_json(machine, 1024);
        machine.restore_history(messages, steps);
        let header = header?.into_bytes();
        let (Some(m), Some(s)) = (
            splice_point(&header, &MESSAGES),
            splice_point(&header, &STEPS),
        ) else {
            // What changed since the parts were kept is not tracked past this save.
            self.messages.clear();
            self.steps.clear();
            return state_json(machine, self.size + 1024);
        };
        let failed = |e| Error::parse("run checkpoint", e);
        let mut json = Vec::with_capacity(self.size + 1024);
        let (first, second, messages_first) = if m < s { (m, s, true) } else { (s, m, false) };
        json.extend_from_slice(&header[..first]);
        let mut list = |json: &mut Vec<u8>, messages: bool| {
            if messages {
                self.messages.write(machine.messages(), tail_changed, json)
            } else {
                self.steps.write(machine.steps(), tail_changed, json)
            }
        };
        let written = list(&mut json, messages_first).and_then(|()| {
            json.extend_from_slice(&header[first..second]);
            list(&mut json, !messages_first)
        });
        if let Err(e) = written {
            // The flags read above are spent: keep nothing that they would have invalidated.
            self.messages.clear();
            self.steps.clear();
            return Err(failed(e));
        }
        json.extend_from_slice(&header[second..]);
        self.size = json.len();
        // Every part is serde_json's UTF-8; the check is cheap next to the serializing.
        String::from_utf8(json).map_err(|e| Error::parse("run checkpoint", e))
    }
}

/// What a durable run's driver needs to checkpoint: its store, its id, and the version it
/// last read or wrote.
pub(crate) struct Durable {
    store: Arc<dyn RunStore>,
    pub(crate) run_id: Arc<str>,
    version: AtomicU64,
    /// What the last checkpoints encoded, for the next one.
    encoded: Mutex<Encoded>,
}

impl Durable {
    pub(crate) fn new(store: Arc<dyn RunStore>, run_id: Arc<str>, version: u64) -> Self {
        Self {
            store,
            run_id,
            version: AtomicU64::new(version),
            encoded: Mutex::default(),
        }
    }

    /// Save `machine`. On failure the run stops with the error: a writer that cannot save
    /// must not go on running tools that no checkpoint would record. A run that a failed
    /// model call ended is saved as it stood before the call, [`RunStatus::Failed`], so that
    /// resuming it issues the call again.
    pub(crate) async fn save(&self, machine: &mut Machine) {
        if self.failed() {
            return;
        }
        let (state, status) = if machine.failed_call() {
            let before = machine.before_failed_call();
            (state_json(&before, 1024), RunStatus::Failed)
        } else {
            (self.encode(machine), RunStatus::of(machine))
        };
        let saved = match state {
            Ok(state) => {
                let read = self.version.load(Ordering::Acquire);
                self.store.save(&self.run_id, read, status, state).await
            }
            Err(error) => Err(error),
        };
        match saved {
            Ok(version) => self.version.store(version, Ordering::Release),
            Err(error) => {
                // Stop without saving again: the store refused, or another writer owns the run.
                self.version.store(u64::MAX, Ordering::Release);
                machine.on_error(error);
            }
        }
    }

    /// `machine`'s checkpoint state, reusing what earlier checkpoints encoded.
    fn encode(&self, machine: &mut Machine) -> Result<String> {
        // A panic while holding the lock leaves at worst a stale encoding: start over.
        let mut encoded = self.encoded.lock().unwrap_or_else(|poisoned| {
            let mut encoded = poisoned.into_inner();
            *encoded = Encoded::default();
            encoded
        });
        let state = encoded.encode(machine);
        #[cfg(debug_assertions)]
        if let Ok(state) = &state {
            debug_assert_eq!(
                Some(state.as_str()),
                state_json(machine, 0).ok().as_deref(),
                "a checkpoint encoded from its parts differs from the whole machine's"
            );
        }
        state
    }
    /// Whether a save failed (the run is stopping and must not save again).
    pub(crate) fn failed(&self) -> bool {
        self.version.load(Ordering::Acquire) == u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::message::{ContentBlock, Message, Request, Response, StopReason, ToolResultContent};
    use crate::run::{Action, Limits, RunStopReason, ToolOutcome};

    /// One change to a run's machine: the run's own steps, and the edits a context strategy,
    /// a prompt hook or a failed call make.
    #[derive(Debug, Clone)]
    enum Change {
        /// The model answers with `calls` tool calls (text only when 0).
        Respond { calls: usize, text: String },
        /// One running call's outcome is recorded (the durable driver's way).
        RecordOne { text: String },
        /// Every running call's outcome at once.
        Outcomes { text: String },
        /// A context strategy removes the message at `at` (modulo the history's length).
        Remove { at: usize },
        /// A context strategy rewrites the message at `at`.
        Rewrite { at: usize, text: String },
        /// A prompt hook changes the prompt (the last message, while it is the user's).
        Prompt { text: String },
        /// The model call fails: the run ends as it stood before it.
        Fail,
        /// The run is cancelled with a partial answer.
        Interrupt { text: String },
        /// The last step is priced (or its price dropped).
        Price { priced: bool },
    }

    fn change() -> impl Strategy<Value = Change> {
        let text = "[a-z \"\\\\é]{0,12}";
        prop_oneof![
            4 => (0usize..3, text).prop_map(|(calls, text)| Change::Respond { calls, text }),
            3 => text.prop_map(|text| Change::RecordOne { text }),
            3 => text.prop_map(|text| Change::Outcomes { text }),
            1 => (0usize..64).prop_map(|at| Change::Remove { at }),
            1 => (0usize..64, text).prop_map(|(at, text)| Change::Rewrite { at, text }),
            1 => text.prop_map(|text| Change::Prompt { text }),
            1 => Just(Change::Fail),
            1 => text.prop_map(|text| Change::Interrupt { text }),
            2 => any::<bool>().prop_map(|priced| Change::Price { priced }),
        ]
    }

    fn response(calls: usize, text: &str, turn: usize) -> Response {
        let mut content = vec![ContentBlock::text(text)];
        for n in 0..calls {
            content.push(ContentBlock::ToolUse {
                id: format!("c{turn}-{n}"),
                name: "get_weather".into(),
                // A second call's input looks like the steps' place while it is pending.
                input: if n == 1 {
                    json!({"city": text, "steps": []})
                } else {
                    json!({"city": text, "n": n})
                },
            });
        }
        Response {
            id: format!("r{turn}"),
            model: "m".into(),
            content,
            stop_reason: if calls > 0 {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            },
            usage: Default::default(),
        }
    }

    fn completed(text: &str) -> ToolOutcome {
        ToolOutcome::Completed {
            structured: None,
            content: ToolResultContent::Text(text.into()),
        }
    }

    fn apply(machine: &mut Machine, change: Change, turn: usize) {
        match change {
            Change::Respond { calls, text } => {
                if machine.next_action() == Action::CallModel {
                    machine.on_response(response(calls, &text, turn), Duration::ZERO);
                }
            }
            Change::RecordOne { text } => {
                if let Action::RunTools(calls) = machine.next_action()
                    && let Some(call) = calls.first()
                {
                    machine.record_outcome(&call.id, completed(&text));
                }
            }
            Change::Outcomes { text } => {
                if let Action::RunTools(calls) = machine.next_action() {
                    let outcomes = calls.iter().map(|_| completed(&text)).collect();
                    machine.on_tool_outcomes(outcomes, Duration::ZERO);
                }
            }
            Change::Remove { at } => {
                let messages = machine.messages_mut();
                if !messages.is_empty() {
                    let at = at % messages.len();
                    messages.remove(at);
                }
            }
            Change::Rewrite { at, text } => {
                let messages = machine.messages_mut();
                if !messages.is_empty() {
                    let at = at % messages.len();
                    messages[at] = Message::user(text);
                }
            }
            Change::Prompt { text } => {
                if let Some(prompt) = machine.prompt_mut() {
                    prompt.content.push(ContentBlock::text(text));
                }
            }
            Change::Fail => {
                if machine.next_action() == Action::CallModel {
                    machine.on_error(Error::parse("test", "a failed call"));
                    *machine = machine.before_failed_call();
                }
            }
            Change::Interrupt { text } => {
                machine.interrupt(RunStopReason::Cancelled, Some(response(0, &text, turn)));
            }
            Change::Price { priced } => {
                machine.price_last_step(priced.then(crate::cost::Cost::default));
            }
        }
    }

    proptest! {
        /// However a run's machine changes between checkpoints, and whichever of them are
        /// saved, a checkpoint encoded from the parts kept is the whole machine's encoding,
        /// byte for byte.
        #[test]
        fn encoded_from_parts_is_the_whole_encoding(
            changes in prop::collection::vec((change(), any::<bool>()), 0..40)
        ) {
            let mut machine = Machine::new(
                Request::new("m", vec![Message::user("Weather?")]),
                Limits::default(),
            );
            let mut encoded = Encoded::default();
            for (turn, (change, save)) in changes.into_iter().enumerate() {
                apply(&mut machine, change, turn);
                if save {
                    let parts = encoded.encode(&mut machine).unwrap();
                    prop_assert_eq!(parts, state_json(&machine, 0).unwrap());
                }
            }
            let parts = encoded.encode(&mut machine).unwrap();
            prop_assert_eq!(parts, state_json(&machine, 0).unwrap());
        }
    }

    /// A name in a tool's schema that makes the same bytes as the history's place is no
    /// splice point: the whole machine is encoded instead, still the same bytes.
    #[test]
    fn a_lookalike_of_the_history_is_not_spliced() {
        let mut request = Request::new("m", vec![Message::user("Weather?")]);
        request.metadata = Some(json!({"messages": [], "steps": []}));
        let mut machine = Machine::new(request, Limits::default());
        machine.on_response(response(1, "Paris", 0), Duration::ZERO);
        let mut encoded = Encoded::default();
        let parts = encoded.encode(&mut machine).unwrap();
        assert_eq!(parts, state_json(&machine, 0).unwrap());
        assert_eq!(encoded.messages.count, 0, "nothing kept: nothing spliced");
    }

    /// A checkpoint encoded whole (a lookalike of the history's place, gone by the next one)
    /// leaves nothing stale behind: the last step changed before it is encoded again after.
    #[test]
    fn parts_kept_before_a_whole_encoding_are_not_reused_after_it() {
        let lookalike = crate::tool::ToolDefinition::Function(std::sync::Arc::new(
            crate::tool::FunctionDefinition {
                name: "odd".into(),
                description: String::new(),
                input_schema: json!({"type": "object", "steps": []}),
                strict: false,
            },
        ));
        let mut machine = Machine::new(
            Request::new("m", vec![Message::user("Weather?")]),
            Limits::default(),
        );
        machine.on_response(response(1, "Paris", 0), Duration::ZERO);
        let mut encoded = Encoded::default();
        encoded.encode(&mut machine).unwrap();
        machine.replace_tools(&[], [lookalike]);
        machine.price_last_step(Some(crate::cost::Cost::default()));
        let whole = encoded.encode(&mut machine).unwrap();
        assert_eq!(whole, state_json(&machine, 0).unwrap());
        machine.replace_tools(&["odd".to_owned()], []);
        let parts = encoded.encode(&mut machine).unwrap();
        assert_eq!(parts, state_json(&machine, 0).unwrap());
    }
}
