//! [`PostgresStore`]: durable runs' checkpoints in Postgres, shared by many worker processes.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_postgres::{Client, NoTls, Statement};

use super::store::{Checkpoint, RunStatus, RunStore, RunSummary};
use crate::error::{Error, Result};

/// The schema, one migration a step; a database records the steps it has in
/// `agentloop_migrations` and gets the rest when a store connects.
const MIGRATIONS: &[&str] = &["
    CREATE TABLE agentloop_runs (
        run_id      TEXT PRIMARY KEY,
        version     BIGINT NOT NULL,
        status      TEXT NOT NULL,
        state       TEXT NOT NULL,
        lease_owner TEXT,
        lease_until TIMESTAMPTZ,
        updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE INDEX agentloop_runs_claimable ON agentloop_runs (status, lease_until);
"];

/// A [`RunStore`] in Postgres for many worker processes. A worker writes a run only while it
/// holds the run's lease: starting a run takes it, [`Self::claim`] takes the lease of a
/// running run whose lease expired (`SELECT … FOR UPDATE SKIP LOCKED`, so two workers never
/// claim the same run), and every save and [`Self::heartbeat`] renews it. A claim moves the
/// run's version on, so the worker that lost the lease (it stalled, or died) cannot save over
/// the new owner's checkpoints: its save fails with [`Error::StaleCheckpoint`] and its run
/// stops. Cheap to clone.
#[derive(Clone)]
pub struct PostgresStore {
    client: Arc<Client>,
    /// Prepared once at connect: a statement given as text is prepared again at every call,
    /// one more round trip per checkpoint.
    statements: Arc<Statements>,
    worker: Arc<str>,
    lease: Duration,
}

/// The statements a run's checkpoints use.
struct Statements {
    load: Statement,
    insert: Statement,
    update: Statement,
}

impl Statements {
    async fn prepare(client: &Client) -> std::result::Result<Self, tokio_postgres::Error> {
        Ok(Self {
            load: client
                .prepare("SELECT version, status, state FROM agentloop_runs WHERE run_id = $1")
                .await?,
            // A run that is over keeps no lease.
            insert: client
                .prepare(
                    "INSERT INTO agentloop_runs
                         (run_id, version, status, state, lease_owner, lease_until)
                     VALUES ($1, 1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond')
                     ON CONFLICT (run_id) DO NOTHING",
                )
                .await?,
            update: client
                .prepare(
                    "UPDATE agentloop_runs
                     SET version = version + 1, status = $2, state = $3, updated_at = now(),
                         lease_until = CASE WHEN $2 = 'running'
                             THEN now() + $5::float8 * interval '1 millisecond' END
                     WHERE run_id = $1 AND version = $4",
                )
                .await?,
        })
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("worker", &self.worker)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

fn pg_error(run_id: &str) -> impl Fn(tokio_postgres::Error) -> Error + '_ {
    move |e| Error::Store {
        run_id: run_id.to_owned(),
        message: match e.as_db_error() {
            Some(db) => format!("postgres: {}", db.message()),
            None => format!("postgres: {e}"),
        },
    }
}

fn millis(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}

fn status(run_id: &str, name: &str) -> Result<RunStatus> {
    RunStatus::parse(name).ok_or_else(|| Error::Store {
        run_id: run_id.to_owned(),
        message: format!("unknown run status `{name}` in the store"),
    })
}

/// Apply the migrations the database lacks, one transaction, one migrator at a time.
async fn migrate(client: &Client) -> Result<()> {
    let failed = pg_error("");
    client.batch_execute("BEGIN").await.map_err(&failed)?;
    let applied = async {
        // The table too is made under the lock: two first connections creating it at once
        // collide in Postgres's catalog even with IF NOT EXISTS.
        client
            .batch_execute(
                "SELECT pg_advisory_xact_lock(7283911);
                 CREATE TABLE IF NOT EXISTS agentloop_migrations (version INT PRIMARY KEY);",
            )
            .await?;
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM agentloop_migrations",
                &[],
            )
            .await?;
        let done: i32 = row.try_get(0)?;
        for (at, sql) in MIGRATIONS.iter().enumerate() {
            let version = at as i32 + 1;
            if version <= done {
                continue;
            }
            client.batch_execute(sql).await?;
            client
                .execute(
                    "INSERT INTO agentloop_migrations (version) VALUES ($1)",
                    &[&version],
                )
                .await?;
        }
        Ok::<(), tokio_postgres::Error>(())
    }
    .await;
    let end = if applied.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    client.batch_execute(end).await.map_err(&failed)?;
    applied.map_err(&failed)
}

impl PostgresStore {
    /// Connect to `url` (`postgres://user@host:port/db`, no TLS) as worker `worker` (a name
    /// unique among the workers) whose leases last `lease`, and apply the migrations the
    /// database lacks. Call from a Tokio runtime: the connection runs on a task of its own.
    pub async fn connect(url: &str, worker: impl Into<String>, lease: Duration) -> Result<Self> {
        let failed = |e: tokio_postgres::Error| Error::Store {
            run_id: String::new(),
            message: format!("cannot connect to postgres: {e}"),
        };
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(failed)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "the run store's postgres connection ended");
            }
        });
        migrate(&client).await?;
        let statements = Statements::prepare(&client).await.map_err(pg_error(""))?;
        Ok(Self {
            client: Arc::new(client),
            statements: Arc::new(statements),
            worker: worker.into().into(),
            lease,
        })
    }

    /// This worker's name.
    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// Take the lease of a running run whose lease expired (or that has none), the one waiting
    /// longest, and return its id for [`crate::Agent::resume_run`]; `None` when there is none.
    pub async fn claim(&self) -> Result<Option<String>> {
        let row = self
            .client
            .query_opt(
                "WITH next AS (
                     SELECT run_id FROM agentloop_runs
                     WHERE status = 'running' AND (lease_until IS NULL OR lease_until < now())
                     ORDER BY updated_at
                     LIMIT 1
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE agentloop_runs AS r
                 SET lease_owner = $1,
                     lease_until = now() + $2::float8 * interval '1 millisecond',
                     version = r.version + 1
                 FROM next WHERE r.run_id = next.run_id
                 RETURNING r.run_id",
                &[&&*self.worker, &millis(self.lease)],
            )
            .await
            .map_err(pg_error(""))?;
        row.map(|row| row.try_get(0))
            .transpose()
            .map_err(pg_error(""))
    }

    /// Renew this worker's lease on `run_id` every third of the lease until the guard is
    /// dropped: hold one around a run whose steps (a long tool) may outlast the lease, which
    /// saves alone renew. The renewals stop when the lease is lost.
    pub fn keep_alive(&self, run_id: impl Into<String>) -> Heartbeat {
        let store = self.clone();
        let run_id = run_id.into();
        let every = (self.lease / 3).max(Duration::from_millis(1));
        Heartbeat(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match store.heartbeat(&run_id).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(error) => tracing::warn!(%error, "a lease heartbeat failed"),
                }
            }
        }))
    }

    /// Renew this worker's lease on `run_id`; `false` when it holds the lease no more.
    pub async fn heartbeat(&self, run_id: &str) -> Result<bool> {
        let renewed = self
            .client
            .execute(
                "UPDATE agentloop_runs SET lease_until = now() + $3::float8 * interval '1 millisecond'
                 WHERE run_id = $1 AND lease_owner = $2",
                &[&run_id, &&*self.worker, &millis(self.lease)],
            )
            .await
            .map_err(pg_error(run_id))?;
        Ok(renewed == 1)
    }
}

/// Renews a lease while it lives (see [`PostgresStore::keep_alive`]).
#[derive(Debug)]
pub struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl RunStore for PostgresStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Checkpoint>>> {
        Box::pin(async move {
            let row = self
                .client
                .query_opt(&self.statements.load, &[&run_id])
                .await
                .map_err(pg_error(run_id))?;
            row.map(|row| {
                let read = |row: &tokio_postgres::Row| {
                    Ok::<_, tokio_postgres::Error>((
                        row.try_get::<_, i64>(0)?,
                        row.try_get::<_, String>(1)?,
                        row.try_get::<_, String>(2)?,
                    ))
                };
                let (version, name, state) = read(&row).map_err(pg_error(run_id))?;
                Ok(Checkpoint {
                    version: version.max(0) as u64,
                    status: status(run_id, &name)?,
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
        Box::pin(async move {
            let Ok(read_sql) = i64::try_from(read) else {
                return Err(Error::Store {
                    run_id: run_id.to_owned(),
                    message: format!("version {read} is out of range"),
                });
            };
            // One statement each way: the version check and the write are atomic.
            let written = if read == 0 {
                self.client
                    .execute(
                        &self.statements.insert,
                        &[
                            &run_id,
                            &status.as_str(),
                            &state,
                            &&*self.worker,
                            &millis(self.lease),
                        ],
                    )
                    .await
            } else {
                self.client
                    .execute(
                        &self.statements.update,
                        &[
                            &run_id,
                            &status.as_str(),
                            &state,
                            &read_sql,
                            &millis(self.lease),
                        ],
                    )
                    .await
            }
            .map_err(pg_error(run_id))?;
            if written == 1 {
                return Ok(read + 1);
            }
            let found = self
                .load(run_id)
                .await?
                .map_or(0, |checkpoint| checkpoint.version);
            Err(Error::StaleCheckpoint {
                run_id: run_id.to_owned(),
                expected: read,
                found,
            })
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<RunSummary>>> {
        Box::pin(async move {
            let rows = self
                .client
                .query(
                    "SELECT run_id, version, status FROM agentloop_runs ORDER BY run_id",
                    &[],
                )
                .await
                .map_err(pg_error(""))?;
            rows.into_iter()
                .map(|row| {
                    let read = |row: &tokio_postgres::Row| {
                        Ok::<_, tokio_postgres::Error>((
                            row.try_get::<_, String>(0)?,
                            row.try_get::<_, i64>(1)?,
                            row.try_get::<_, String>(2)?,
                        ))
                    };
                    let (run_id, version, name) = read(&row).map_err(pg_error(""))?;
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
