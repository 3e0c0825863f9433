//! [`SqliteStore`]: durable runs' checkpoints in one SQLite file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, mpsc};
use std::time::Duration;

use futures::channel::oneshot;
use futures::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};

use super::store::{Checkpoint, RunStatus, RunStore, RunSummary};
use crate::error::{Error, Result};

/// A [`RunStore`] in one SQLite file, in WAL mode: a checkpoint is in the file once its save
/// returns, so it survives the process being killed, the crash durable runs are about. With
/// `synchronous = NORMAL` a commit does not wait for the disk: a power loss (or an OS crash)
/// may lose the last saves, never corrupt the file, and a run resumes from the checkpoint
/// before them. Several processes may share the file; a save that another wrote over first
/// fails with [`Error::StaleCheckpoint`]. Cheap to clone: clones share one connection. A save
/// that finds it free writes on the caller's thread (such a commit does not wait for the
/// disk); one that finds it busy, or the file locked by another process, goes to the store's
/// writer thread, which commits saves that arrive together (concurrent runs) in one
/// transaction.
///
/// ```no_run
/// # async fn demo(agent: agentloop::Agent) -> agentloop::Result<()> {
/// use agentloop::run::SqliteStore;
/// let store = SqliteStore::open("runs.db")?;
/// let result = agent.run_durable("order-1234", "Ship order 1234", &store).await?;
/// // After a crash, in a new process with the same agent:
/// let result = agent.resume_run("order-1234", &store).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    /// The store's writer thread, for saves that would wait for the connection: SQLite writes
    /// one at a time anyway. Saves queued while it writes are committed together, in one
    /// transaction.
    jobs: mpsc::Sender<Job>,
    /// The one connection, shared by the callers' threads and the writer thread.
    shared: Arc<Shared>,
    path: Arc<PathBuf>,
}

/// The connection, and the commits (and their states' bytes) since the write-ahead log was
/// last copied into the database.
struct Shared {
    connection: Mutex<Connection>,
    commits: AtomicU32,
    bytes: AtomicUsize,
}

/// How long the writer thread waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Commits between two copies of the write-ahead log into the database, at most: each copy
/// waits for the disk twice whatever it copies, so fewer copies cost less. The writer thread
/// makes them, never a caller's thread.
const COMMITS_PER_WAL_CHECKPOINT: u32 = 1024;

/// Bytes of states committed between two copies, at most: a commit adds pages about the size
/// of its state, so the log stays near SQLite's own bound (1000 pages) when states are large.
const BYTES_PER_WAL_CHECKPOINT: usize = 4 << 20;

/// Whether the log is due to be copied into the database after `commits` commits of `bytes`
/// bytes of states since the last copy.
fn wal_checkpoint_due(commits: u32, bytes: usize) -> bool {
    commits >= COMMITS_PER_WAL_CHECKPOINT || bytes >= BYTES_PER_WAL_CHECKPOINT
}

impl Shared {
    fn connection(&self) -> MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| recovered(poisoned.into_inner()))
    }

    /// Count a commit of `bytes` bytes of states; whether the log is due to be copied into the
    /// database.
    fn committed(&self, bytes: usize) -> bool {
        let commits = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        wal_checkpoint_due(commits, bytes)
    }

    /// Copy the write-ahead log into the database, as far as readers allow.
    fn checkpoint_wal(&self, connection: &Connection) {
        self.commits.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        // A failed copy is retried after the next commits; the log stays valid meanwhile.
        let _ = connection.execute_batch("PRAGMA wal_checkpoint(PASSIVE)");
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What the writer thread is asked to do; each job answers on its channel.
enum Job {
    Load {
        run_id: String,
        reply: oneshot::Sender<Result<Option<Checkpoint>>>,
    },
    Save {
        run_id: String,
        read: u64,
        status: RunStatus,
        state: String,
        reply: oneshot::Sender<Result<u64>>,
    },
    List {
        reply: oneshot::Sender<Result<Vec<RunSummary>>>,
    },
    /// Copy the write-ahead log into the database (saves on callers' threads leave it to
    /// the writer thread).
    CheckpointWal,
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS agentloop_runs (
        run_id     TEXT PRIMARY KEY,
        version    INTEGER NOT NULL,
        status     TEXT NOT NULL,
        state      TEXT NOT NULL,
        updated_at INTEGER NOT NULL DEFAULT (unixepoch())
    );
";

impl SqliteStore {
    /// Open (or create) the store in the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let failed = |e: &dyn std::fmt::Display| Error::Store {
            run_id: String::new(),
            message: format!("cannot open {}: {e}", path.display()),
        };
        let connection = Connection::open(&path).map_err(|e| failed(&e))?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| failed(&e))?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| failed(&e))?;
        // Another process's write holds the lock briefly; wait for it rather than fail.
        connection
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| failed(&e))?;
        connection.execute_batch(SCHEMA).map_err(|e| failed(&e))?;
        // The store copies the log into the database itself, off the callers' threads.
        connection
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| failed(&e))?;
        let shared = Arc::new(Shared {
            connection: Mutex::new(connection),
            commits: AtomicU32::new(0),
            bytes: AtomicUsize::new(0),
        });
        // One long-lived thread rather than a blocking-pool task per save: a checkpoint is
        // written at every step, and the thread ends when the last clone of the store drops.
        let (jobs, queue) = mpsc::channel();
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("agentloop-sqlite".to_owned())
            .spawn(move || write_loop(&writer, queue))
            .map_err(|e| failed(&e))?;
        Ok(Self {
            jobs,
            shared,
            path: Arc::new(path),
        })
    }

    /// The file the store is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hand `job` to the writer thread and wait for its answer without blocking the caller's
    /// thread (SQLite blocks on disk).
    fn ask<T: Send + 'static>(
        &self,
        run_id: &str,
        job: impl FnOnce(oneshot::Sender<Result<T>>) -> Job,
    ) -> BoxFuture<'static, Result<T>> {
        let (reply, answer) = oneshot::channel();
        let job = job(reply);
        let jobs = self.jobs.clone();
        let run_id = run_id.to_owned();
        // Sent when first polled, as a future that is never awaited does nothing.
        Box::pin(async move {
            let gone = || Error::Store {
                run_id,
                message: "the store's writer thread stopped (it panicked); open the store again"
                    .to_owned(),
            };
            if jobs.send(job).is_err() {
                return Err(gone());
            }
            answer.await.map_err(|_| gone())?
        })
    }

    /// Save on the caller's thread when the connection is free and no other process holds
    /// the file's write lock; `None` when the save must wait (the writer thread's job).
    fn save_here(
        &self,
        run_id: &str,
        read: u64,
        status: RunStatus,
        state: &str,
    ) -> Option<Result<u64>> {
        let connection = match self.shared.connection.try_lock() {
            Ok(connection) => connection,
            Err(TryLockError::Poisoned(poisoned)) => recovered(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Fail at once rather than wait on the caller's thread for another process's lock.
        connection.busy_timeout(Duration::ZERO).ok()?;
        let saved = write(&connection, run_id, read, status, state);
        let _ = connection.busy_timeout(BUSY_TIMEOUT);
        match saved {
            Err(e) if is_busy(&e) => None,
            saved => {
                if saved.is_ok() && self.shared.committed(state.len()) {
                    let _ = self.jobs.send(Job::CheckpointWal);
                }
                Some(finish(&connection, run_id, read, saved))
            }
        }
    }
}

/// The connection after a panic while it was held: any transaction the panic left open is
/// rolled back, as it was never answered as committed.
fn recovered(connection: MutexGuard<'_, Connection>) -> MutexGuard<'_, Connection> {
    if !connection.is_autocommit() {
        let _ = connection.execute_batch("ROLLBACK");
    }
    connection
}

/// Whether `error` is SQLite's "the database is locked" (by another connection).
fn is_busy(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
}

/// The writer thread: answer jobs until every store handle is gone. Saves that queued up
/// while the thread was busy are written in one transaction (one commit for all), and each
/// is answered only once that transaction committed.
fn write_loop(shared: &Shared, queue: mpsc::Receiver<Job>) {
    let mut saves = Vec::new();
    while let Ok(first) = queue.recv() {
        let connection = shared.connection();
        let connection = &*connection;
        let mut checkpoint = false;
        for job in std::iter::once(first).chain(queue.try_iter()) {
            match job {
                Job::Load { run_id, reply } => {
                    let _ = reply.send(load(connection, &run_id));
                }
                Job::List { reply } => {
                    let _ = reply.send(list(connection));
                }
                Job::CheckpointWal => checkpoint = true,
                Job::Save {
                    run_id,
                    read,
                    status,
                    state,
                    reply,
                } => saves.push((run_id, read, status, state, reply)),
            }
        }
        let wrote = !saves.is_empty();
        let bytes = saves.iter().map(|(_, _, _, state, _)| state.len()).sum();
        match saves.len() {
            0 => {}
            1 => {
                if let Some((run_id, read, status, state, reply)) = saves.pop() {
                    let _ = reply.send(save(connection, run_id, read, status, &state));
                }
            }
            _ => save_together(connection, &mut saves),
        }
        if checkpoint || (wrote && shared.committed(bytes)) {
            shared.checkpoint_wal(connection);
        }
    }
}

/// A queued save: run id, version read, status, state, and where to answer.
type QueuedSave = (String, u64, RunStatus, String, oneshot::Sender<Result<u64>>);

/// Write `saves` in one transaction; answer each once it committed (or with the commit's
/// error, every save of it lost).
fn save_together(connection: &Connection, saves: &mut Vec<QueuedSave>) {
    let failed = |e: rusqlite::Error| e.to_string();
    let began = connection.execute_batch("BEGIN IMMEDIATE").map_err(failed);
    let mut answers = Vec::with_capacity(saves.len());
    for (run_id, read, status, state, reply) in saves.drain(..) {
        let saved = match &began {
            Ok(()) => save(connection, run_id.clone(), read, status, &state),
            Err(_) => Ok(0),
        };
        answers.push((run_id, saved, reply));
    }
    let committed = began.and_then(|()| connection.execute_batch("COMMIT").map_err(failed));
    if committed.is_err() {
        // Leave no transaction open for the next jobs; there may be none left to roll back.
        let _ = connection.execute_batch("ROLLBACK");
    }
    for (run_id, saved, reply) in answers {
        let answer = match &committed {
            Ok(()) => saved,
            Err(message) => Err(Error::Store {
                run_id,
                message: message.clone(),
            }),
        };
        let _ = reply.send(answer);
    }
}

fn sql_error(run_id: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::Store {
        run_id: run_id.to_owned(),
        message: e.to_string(),
    }
}

fn stored_version(connection: &Connection, run_id: &str) -> Result<u64> {
    let version: Option<i64> = connection
        .query_row(
            "SELECT version FROM agentloop_runs WHERE run_id = ?1",
            [run_id],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql_error(run_id))?;
    Ok(version.map_or(0, |v| v.max(0) as u64))
}

fn status(run_id: &str, name: &str) -> Result<RunStatus> {
    RunStatus::parse(name).ok_or_else(|| Error::Store {
        run_id: run_id.to_owned(),
        message: format!("unknown run status `{name}` in the store"),
    })
}

fn load(connection: &Connection, id: &str) -> Result<Option<Checkpoint>> {
    let row: Option<(i64, String, String)> = connection
        .prepare_cached("SELECT version, status, state FROM agentloop_runs WHERE run_id = ?1")
        .and_then(|mut select| {
            select.query_row([id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        })
        .optional()
        .map_err(sql_error(id))?;
    row.map(|(version, name, state)| {
        Ok(Checkpoint {
            version: version.max(0) as u64,
            status: status(id, &name)?,
            state,
        })
    })
    .transpose()
}

fn save(
    connection: &Connection,
    id: String,
    read: u64,
    status: RunStatus,
    state: &str,
) -> Result<u64> {
    let written = write(connection, &id, read, status, state);
    finish(connection, &id, read, written)
}

/// The save's one statement: how many rows it wrote (0 when the version moved on). A version
/// out of SQLite's range writes nothing either.
fn write(
    connection: &Connection,
    id: &str,
    read: u64,
    status: RunStatus,
    state: &str,
) -> rusqlite::Result<usize> {
    let (Ok(read_sql), Ok(next)) = (i64::try_from(read), i64::try_from(read.saturating_add(1)))
    else {
        return Ok(0);
    };
    // One statement each way, so the version check and the write are atomic; each prepared
    // once per connection, since every step saves.
    if read == 0 {
        connection
            .prepare_cached(
                "INSERT INTO agentloop_runs (run_id, version, status, state)
                 VALUES (?1, 1, ?2, ?3) ON CONFLICT (run_id) DO NOTHING",
            )
            .and_then(|mut insert| insert.execute(params![id, status.as_str(), state]))
    } else {
        connection
            .prepare_cached(
                "UPDATE agentloop_runs
                 SET version = ?2, status = ?3, state = ?4, updated_at = unixepoch()
                 WHERE run_id = ?1 AND version = ?5",
            )
            .and_then(|mut update| {
                update.execute(params![id, next, status.as_str(), state, read_sql])
            })
    }
}

/// The save's answer from what [`write`] did: the new version, or why not.
fn finish(
    connection: &Connection,
    id: &str,
    read: u64,
    written: rusqlite::Result<usize>,
) -> Result<u64> {
    if read >= i64::MAX as u64 {
        return Err(Error::Store {
            run_id: id.to_owned(),
            message: format!("version {read} is out of range"),
        });
    }
    if written.map_err(sql_error(id))? == 1 {
        return Ok(read + 1);
    }
    let found = stored_version(connection, id)?;
    Err(Error::StaleCheckpoint {
        run_id: id.to_owned(),
        expected: read,
        found,
    })
}

fn list(connection: &Connection) -> Result<Vec<RunSummary>> {
    let mut statement = connection
        .prepare("SELECT run_id, version, status FROM agentloop_runs ORDER BY run_id")
        .map_err(sql_error(""))?;
    let rows = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .map_err(sql_error(""))?;
    rows.map(|row| {
        let (run_id, version, name) = row.map_err(sql_error(""))?;
        Ok(RunSummary {
            status: status(&run_id, &name)?,
            run_id,
            version: version.max(0) as u64,
        })
    })
    .collect()
}

impl RunStore for SqliteStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>>> {
        self.ask(run_id, |reply| Job::Load {
            run_id: run_id.to_owned(),
            reply,
        })
    }

    fn save<'a>(
        &'a self,
        run_id: &'a str,
        read: u64,
        status: RunStatus,
        state: String,
    ) -> BoxFuture<'a, Result<u64>> {
        // Written when first polled, as a future that is never awaited does nothing.
        Box::pin(async move {
            if let Some(saved) = self.save_here(run_id, read, status, &state) {
                return saved;
            }
            self.ask(run_id, |reply| Job::Save {
                run_id: run_id.to_owned(),
                read,
                status,
                state,
                reply,
            })
            .await
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>> {
        self.ask("", |reply| Job::List { reply })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log is copied after many commits of small states, or after a few megabytes of
    /// large ones: each copy waits for the disk twice, whatever it copies.
    #[test]
    fn the_log_is_copied_after_1024_commits_or_4_mib_of_states() {
        assert!(!wal_checkpoint_due(256, 256 * 3_000));
        assert!(!wal_checkpoint_due(1023, 1023 * 3_000));
        assert!(wal_checkpoint_due(1024, 1024 * 3_000));
        assert!(!wal_checkpoint_due(100, (4 << 20) - 1));
        assert!(wal_checkpoint_due(100, 4 << 20));
    }
}
