//! [`SqliteStore`]: durable runs' checkpoints in one SQLite file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

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
/// fails with [`Error::StaleCheckpoint`]. Cheap to clone: clones share one connection on one
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
    /// The store's writer thread, which owns the one connection: SQLite writes one at a time
    /// anyway. Saves queued while it writes are committed together, in one transaction.
    jobs: mpsc::Sender<Job>,
    path: Arc<PathBuf>,
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
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| failed(&e))?;
        connection.execute_batch(SCHEMA).map_err(|e| failed(&e))?;
        // One long-lived thread rather than a blocking-pool task per save: a checkpoint is
        // written at every step, and the thread ends when the last clone of the store drops.
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("agentloop-sqlite".to_owned())
            .spawn(move || write_loop(connection, queue))
            .map_err(|e| failed(&e))?;
        Ok(Self {
            jobs,
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
}

/// The writer thread: answer jobs until every store handle is gone. Saves that queued up
/// while the thread was busy are written in one transaction (one commit for all), and each
/// is answered only once that transaction committed.
fn write_loop(connection: Connection, queue: mpsc::Receiver<Job>) {
    let mut saves = Vec::new();
    while let Ok(first) = queue.recv() {
        for job in std::iter::once(first).chain(queue.try_iter()) {
            match job {
                Job::Load { run_id, reply } => {
                    let _ = reply.send(load(&connection, &run_id));
                }
                Job::List { reply } => {
                    let _ = reply.send(list(&connection));
                }
                Job::Save {
                    run_id,
                    read,
                    status,
                    state,
                    reply,
                } => saves.push((run_id, read, status, state, reply)),
            }
        }
        match saves.len() {
            0 => {}
            1 => {
                if let Some((run_id, read, status, state, reply)) = saves.pop() {
                    let _ = reply.send(save(&connection, run_id, read, status, &state));
                }
            }
            _ => save_together(&connection, &mut saves),
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
    let (Ok(read_sql), Ok(next)) = (i64::try_from(read), i64::try_from(read + 1)) else {
        return Err(Error::Store {
            run_id: id,
            message: format!("version {read} is out of range"),
        });
    };
    // One statement each way, so the version check and the write are atomic; each prepared
    // once per connection, since every step saves.
    let written = if read == 0 {
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
    .map_err(sql_error(&id))?;
    if written == 1 {
        return Ok(read + 1);
    }
    let found = stored_version(connection, &id)?;
    Err(Error::StaleCheckpoint {
        run_id: id,
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
        self.ask(run_id, |reply| Job::Save {
            run_id: run_id.to_owned(),
            read,
            status,
            state,
            reply,
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>> {
        self.ask("", |reply| Job::List { reply })
    }
}
