//! [`SqliteStore`]: durable runs' checkpoints in one SQLite file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};

use super::store::{Checkpoint, RunStatus, RunStore, RunSummary};
use crate::error::{Error, Result};

/// A [`RunStore`] in one SQLite file, in WAL mode: a checkpoint is on disk once its save
/// returns, so it survives the process being killed (`synchronous = NORMAL`: a power loss may
/// lose the last saves, never corrupt the file). Several processes may share the file; a save
/// that another wrote over first fails with [`Error::StaleCheckpoint`]. Cheap to clone.
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
    /// One connection: SQLite writes one at a time anyway, and saves are short.
    connection: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
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
        let failed = |e: rusqlite::Error| Error::Store {
            run_id: String::new(),
            message: format!("cannot open {}: {e}", path.display()),
        };
        let connection = Connection::open(&path).map_err(failed)?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(failed)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(failed)?;
        // Another process's write holds the lock briefly; wait for it rather than fail.
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(failed)?;
        connection.execute_batch(SCHEMA).map_err(failed)?;
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
            path: Arc::new(path),
        })
    }

    /// The file the store is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `work` on the connection off the async threads (SQLite blocks on disk).
    fn blocking<T: Send + 'static>(
        &self,
        run_id: &str,
        work: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> BoxFuture<'static, Result<T>> {
        let connection = self.connection.clone();
        let run_id = run_id.to_owned();
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || {
                // A panic while holding the lock cannot leave a statement half done: SQLite
                // rolls back what did not commit.
                let connection = connection
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                work(&connection)
            });
            task.await.map_err(|e| Error::Store {
                run_id,
                message: format!("the store's task failed: {e}"),
            })?
        })
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

impl RunStore for SqliteStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>>> {
        let id = run_id.to_owned();
        self.blocking(run_id, move |connection| {
            let row: Option<(i64, String, String)> = connection
                .prepare_cached(
                    "SELECT version, status, state FROM agentloop_runs WHERE run_id = ?1",
                )
                .and_then(|mut select| {
                    select.query_row([&id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                })
                .optional()
                .map_err(sql_error(&id))?;
            row.map(|(version, name, state)| {
                Ok(Checkpoint {
                    version: version.max(0) as u64,
                    status: status(&id, &name)?,
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
    ) -> BoxFuture<'a, Result<u64>> {
        let id = run_id.to_owned();
        self.blocking(run_id, move |connection| {
            let (Ok(read_sql), Ok(next)) = (i64::try_from(read), i64::try_from(read + 1)) else {
                return Err(Error::Store {
                    run_id: id,
                    message: format!("version {read} is out of range"),
                });
            };
            // One statement each way, so the version check and the write are atomic; each
            // prepared once per connection, since every step saves.
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
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>> {
        self.blocking("", |connection| {
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
        })
    }
}
