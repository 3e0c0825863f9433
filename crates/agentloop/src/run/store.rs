//! Durable runs: checkpoints of a run's [`Machine`] in a [`RunStore`], so a run survives the
//! process that ran it. The semantics are documented on [`RunStore`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
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

/// What a durable run's driver needs to checkpoint: its store, its id, and the version it
/// last read or wrote.
pub(crate) struct Durable {
    store: Arc<dyn RunStore>,
    pub(crate) run_id: Arc<str>,
    version: AtomicU64,
    /// The last checkpoint's size: a run's state only grows, so the next one starts in a
    /// buffer that holds it instead of doubling its way there.
    size: AtomicUsize,
}

impl Durable {
    pub(crate) fn new(store: Arc<dyn RunStore>, run_id: Arc<str>, version: u64) -> Self {
        Self {
            store,
            run_id,
            version: AtomicU64::new(version),
            size: AtomicUsize::new(0),
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
        let capacity = self.size.load(Ordering::Relaxed) + 1024;
        let (state, status) = if machine.failed_call() {
            let before = machine.before_failed_call();
            (state_json(&before, capacity), RunStatus::Failed)
        } else {
            (state_json(machine, capacity), RunStatus::of(machine))
        };
        let saved = match state {
            Ok(state) => {
                self.size.store(state.len(), Ordering::Relaxed);
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

    /// Whether a save failed (the run is stopping and must not save again).
    pub(crate) fn failed(&self) -> bool {
        self.version.load(Ordering::Acquire) == u64::MAX
    }
}
