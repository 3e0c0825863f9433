//! The conversation store in Postgres, for many servers on one database: the same rows as the
//! SQLite store (tables prefixed `agentloop_`, beside the library's `agentloop_runs`).
//!
//! Calls are queued, in the order they are made, to one task that owns the connection and runs
//! them one after another, as the SQLite store does: a conversation created by a chat exists for
//! every request made after the chat started, and a transaction has the connection to itself.
//! A connection that dropped (Postgres restarted) is opened again at the next call. A second
//! connection `LISTEN`s for the paused answers any server decides (deleting a paused row
//! notifies its message id), so every server can end its copy, and for the answers whose
//! stored log any server wrote, so servers following them read the new rows.
//!
//! Answers run durably are leased (`owner`, `lease_until` of `agentloop_chat_runs`), as the
//! library's `PostgresStore` leases its runs: every write names the owner it expects, and a
//! claim takes only expired leases, `FOR UPDATE SKIP LOCKED`. Lease times come from Postgres's
//! clock (`clock_timestamp()`), so the servers' clocks need not agree.

use std::future::Future;

use agentloop::cost::Cost;
use agentloop::{Message, Usage};
use std::panic::AssertUnwindSafe;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_postgres::{AsyncMessage, Client, NoTls, Row};

use super::{
    AnswerRecord, ChatCheckpoint, ChatLog, ChatRunRow, CheckpointSaved, ClaimOutcome,
    ConversationSummary, PausedRow, StoredConversation, now_millis,
};
use crate::error::ServerError;

/// The schema, one step a migration; `agentloop_server_migrations` records the steps applied.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE agentloop_conversations (
        id          TEXT PRIMARY KEY,
        title       TEXT NOT NULL,
        created_at  BIGINT NOT NULL,
        updated_at  BIGINT NOT NULL
    );
    CREATE INDEX agentloop_conversations_by_update ON agentloop_conversations (updated_at DESC);
    CREATE TABLE agentloop_messages (
        conversation_id TEXT NOT NULL REFERENCES agentloop_conversations (id) ON DELETE CASCADE,
        position        BIGINT NOT NULL,
        message         TEXT NOT NULL,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE TABLE agentloop_answers (
        conversation_id TEXT NOT NULL REFERENCES agentloop_conversations (id) ON DELETE CASCADE,
        prompt_index    BIGINT NOT NULL,
        stop_reason     TEXT NOT NULL,
        usage           TEXT NOT NULL,
        cost            TEXT,
        PRIMARY KEY (conversation_id, prompt_index)
    );
    CREATE TABLE agentloop_paused_answers (
        message_id      TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES agentloop_conversations (id) ON DELETE CASCADE,
        prompt_index    BIGINT NOT NULL,
        usage           TEXT NOT NULL,
        paused_run      TEXT NOT NULL,
        events          TEXT NOT NULL,
        created_at      BIGINT NOT NULL
    );
",
    "
    CREATE TABLE agentloop_chat_runs (
        message_id      TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES agentloop_conversations (id) ON DELETE CASCADE,
        prompt_index    BIGINT NOT NULL,
        version         BIGINT NOT NULL,
        status          TEXT NOT NULL,
        state           TEXT NOT NULL,
        log_end         BIGINT NOT NULL,
        log_jumps       TEXT NOT NULL,
        live_end        BIGINT NOT NULL,
        live_jumps      TEXT NOT NULL,
        finished        BOOLEAN NOT NULL DEFAULT false,
        cancel          BOOLEAN NOT NULL DEFAULT false,
        owner           TEXT,
        lease_until     TIMESTAMPTZ,
        updated_at      BIGINT NOT NULL
    );
    CREATE UNIQUE INDEX agentloop_chat_runs_one_per_conversation
        ON agentloop_chat_runs (conversation_id) WHERE NOT finished;
    CREATE INDEX agentloop_chat_runs_claimable ON agentloop_chat_runs (lease_until)
        WHERE NOT finished;
    CREATE TABLE agentloop_chat_run_events (
        message_id TEXT NOT NULL REFERENCES agentloop_chat_runs (message_id) ON DELETE CASCADE,
        id         BIGINT NOT NULL,
        event      TEXT NOT NULL,
        PRIMARY KEY (message_id, id)
    );
",
];

/// The advisory lock migrations hold, so servers starting at once migrate one after another
/// (the library's run store takes another key).
const MIGRATION_LOCK: i64 = 0x6167_6c73_7276; // "aglsrv"

const SUMMARY_COLUMNS: &str = "c.id, c.title, c.created_at, c.updated_at,
    (SELECT COUNT(*) FROM agentloop_messages m WHERE m.conversation_id = c.id)";

/// One queued call: given the connection (or why there is none), it runs and sends its reply.
type Job = Box<dyn for<'a> FnOnce(Result<&'a mut Client, ServerError>) -> BoxFuture<'a, ()> + Send>;

/// What Postgres said, with the server's detail when it gave one.
fn message(e: &tokio_postgres::Error) -> String {
    if e.is_closed() {
        return "the connection to Postgres was lost (Postgres restarted, or the network \
                failed); the next call connects again"
            .to_owned();
    }
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_owned(),
        },
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

impl From<tokio_postgres::Error> for ServerError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::database(message(&e))
    }
}

/// The channel on which deleting a paused answer's row (deciding or cancelling it) names its
/// message id, so the other servers end their copies of it.
const DECIDED: &str = "agentloop_answer_decided";

/// The conversation store on one Postgres connection, plus one that listens for answers
/// decided by any server. Cheap to clone.
#[derive(Clone)]
pub(crate) struct PgStore {
    jobs: mpsc::UnboundedSender<Job>,
    decided: broadcast::Sender<String>,
    /// Message ids of answers whose stored log changed, as Postgres notifies them.
    written: broadcast::Sender<String>,
    /// Message ids of answers a cancel was asked for through any server.
    cancelled: broadcast::Sender<String>,
    /// Message ids of answers a stopping server handed over, to take over now.
    released: broadcast::Sender<String>,
    /// This server's name in the leases it holds: random, one per process.
    instance: Arc<str>,
    /// How long a lease lasts without renewal.
    lease: Duration,
}

/// The channel on which writing an answer's events (or cutting them, or forgetting the
/// answer) names its message id, so servers following it read the new rows.
const WRITTEN: &str = "agentloop_chat_written";

/// The channel on which a server stopping gracefully names each answer it hands over, so
/// another takes it over at once rather than when its lease would have expired.
const RELEASED: &str = "agentloop_chat_released";

/// The channel on which a cancel asked through any server names the answer's message id, so
/// the server running it stops it.
const CANCEL: &str = "agentloop_chat_cancel";

/// A lease's length as Postgres takes it (`$n::float8 * interval '1 millisecond'`).
fn millis(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}

async fn connect(url: &str) -> Result<Client, ServerError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(|e| {
        ServerError::database(format!(
            "cannot connect ({}); check that Postgres is running there and that the URL's \
                 user, password and database name are right",
            message(&e)
        ))
    })?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!("the conversation store's Postgres connection ended: {error}");
        }
    });
    Ok(client)
}

/// Bring the schema up to date in one transaction, holding the migration lock.
async fn migrate(client: &mut Client) -> Result<(), ServerError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS agentloop_server_migrations (
             version    INT PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let done: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM agentloop_server_migrations",
            &[],
        )
        .await?
        .try_get(0)?;
    let done = usize::try_from(done).unwrap_or_default();
    if done > MIGRATIONS.len() {
        return Err(ServerError::database(format!(
            "the database has schema version {done}, newer than this server knows ({}); use a newer agentloop",
            MIGRATIONS.len()
        )));
    }
    for (at, sql) in MIGRATIONS.iter().enumerate().skip(done) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO agentloop_server_migrations (version) VALUES ($1)",
            &[&(at as i32 + 1)],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Runs the queued calls until every [`PgStore`] is gone, connecting again when the connection
/// was lost.
async fn worker(url: String, mut client: Client, mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        if client.is_closed() {
            match connect(&url).await {
                Ok(fresh) => client = fresh,
                Err(e) => {
                    job(Err(e)).await;
                    continue;
                }
            }
        }
        // A call that panics drops its reply (its caller gets an error); the others go on.
        let _ = AssertUnwindSafe(job(Ok(&mut client))).catch_unwind().await;
    }
}

/// Forwards the [`DECIDED`] notifications to `decided` while a [`PgStore`] lives, on a
/// connection of its own, connecting again a second after losing it (what is decided
/// meanwhile is found when the copy is next asked about).
async fn listen(
    url: String,
    decided: broadcast::Sender<String>,
    written: broadcast::Sender<String>,
    cancelled: broadcast::Sender<String>,
    released: broadcast::Sender<String>,
    alive: mpsc::WeakUnboundedSender<Job>,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    const RETRY: Duration = Duration::from_secs(1);
    // How often a listener with nothing to forward checks that its store still lives.
    const CHECK: Duration = Duration::from_secs(5);
    while alive.upgrade().is_some() {
        let (client, mut connection) = match tokio_postgres::connect(&url, NoTls).await {
            Ok(connected) => connected,
            Err(error) => {
                tracing::warn!("cannot listen for decided answers: {}", message(&error));
                ready.take().map(|ready| ready.send(()));
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let (heard, mut notifications) = mpsc::unbounded_channel();
        let forward = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message
                    && heard
                        .send((n.channel().to_owned(), n.payload().to_owned()))
                        .is_err()
                {
                    return;
                }
            }
        });
        let listening = client
            .batch_execute(&format!(
                "LISTEN {DECIDED}; LISTEN {WRITTEN}; LISTEN {CANCEL}; LISTEN {RELEASED}"
            ))
            .await;
        ready.take().map(|ready| ready.send(()));
        match listening {
            Ok(()) => loop {
                tokio::select! {
                    heard = notifications.recv() => match heard {
                        Some((channel, message_id)) => {
                            let to = match channel.as_str() {
                                WRITTEN => &written,
                                CANCEL => &cancelled,
                                RELEASED => &released,
                                _ => &decided,
                            };
                            let _ = to.send(message_id);
                        }
                        None => break,
                    },
                    () = tokio::time::sleep(CHECK) => {
                        if alive.upgrade().is_none() {
                            forward.abort();
                            return;
                        }
                    }
                }
            },
            Err(error) => tracing::warn!("cannot listen for decided answers: {}", message(&error)),
        }
        forward.abort();
        tokio::time::sleep(RETRY).await;
    }
}

fn summary(row: &Row) -> Result<ConversationSummary, ServerError> {
    Ok(ConversationSummary {
        id: row.try_get(0)?,
        title: row.try_get(1)?,
        created_at: row.try_get(2)?,
        updated_at: row.try_get(3)?,
        message_count: row.try_get(4)?,
    })
}

fn paused_row(row: &Row) -> Result<PausedRow, ServerError> {
    Ok(PausedRow {
        message_id: row.try_get(0)?,
        conversation_id: row.try_get(1)?,
        prompt_index: position(row.try_get(2)?),
        usage: row.try_get(3)?,
        paused_run: row.try_get(4)?,
        events: row.try_get(5)?,
    })
}

fn index(i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

fn position(i: i64) -> usize {
    usize::try_from(i).unwrap_or_default()
}

impl PgStore {
    /// Connect to `url` and migrate the schema; the answers this server runs are leased for
    /// `lease` at a time.
    pub(crate) async fn open(url: &str, lease: Duration) -> Result<Self, ServerError> {
        let mut client = connect(url).await?;
        migrate(&mut client).await?;
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(worker(url.to_owned(), client, queue));
        let (decided, _) = broadcast::channel(256);
        let (written, _) = broadcast::channel(1024);
        let (cancelled, _) = broadcast::channel(256);
        let (released, _) = broadcast::channel(256);
        let (ready, listening) = oneshot::channel();
        tokio::spawn(listen(
            url.to_owned(),
            decided.clone(),
            written.clone(),
            cancelled.clone(),
            released.clone(),
            jobs.downgrade(),
            ready,
        ));
        // Started listening (or failed to, logged): decisions made from now on are heard.
        let _ = listening.await;
        Ok(Self {
            jobs,
            decided,
            written,
            cancelled,
            released,
            instance: format!("srv_{:032x}", rand::random::<u128>()).into(),
            lease,
        })
    }

    /// The message ids of answers whose stored log any server changed.
    pub(crate) fn written(&self) -> broadcast::Receiver<String> {
        self.written.subscribe()
    }

    /// The message ids of answers a cancel was asked for through any server.
    pub(crate) fn cancelled(&self) -> broadcast::Receiver<String> {
        self.cancelled.subscribe()
    }

    /// The message ids of answers a stopping server handed over.
    pub(crate) fn released(&self) -> broadcast::Receiver<String> {
        self.released.subscribe()
    }

    /// How long this server's leases last.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// The message ids of paused answers decided or cancelled by any server sharing the
    /// database (this one included), as Postgres notifies them.
    pub(crate) fn decided(&self) -> broadcast::Receiver<String> {
        self.decided.subscribe()
    }

    /// Whether calls can still be queued.
    pub(crate) fn is_open(&self) -> bool {
        !self.jobs.is_closed()
    }

    /// Queue `f` now; the returned future gives its result (errors not yet named).
    fn call<R, F>(&self, f: F) -> impl Future<Output = Result<R, ServerError>> + Send + 'static
    where
        R: Send + 'static,
        F: for<'a> FnOnce(&'a mut Client) -> BoxFuture<'a, Result<R, ServerError>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |client| {
            Box::pin(async move {
                let result = match client {
                    Ok(client) => f(client).await,
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            })
        });
        let queued = self.jobs.send(job).is_ok();
        async move {
            if !queued {
                return Err(ServerError::database("the database connection is closed"));
            }
            answer.await.unwrap_or_else(|_| {
                Err(ServerError::database("a database call failed unexpectedly"))
            })
        }
    }

    pub(crate) fn create(
        &self,
        id: String,
        title: String,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                let now = now_millis();
                client
                    .execute(
                        "INSERT INTO agentloop_conversations (id, title, created_at, updated_at)
                         VALUES ($1, $2, $3, $3)",
                        &[&id, &title, &now],
                    )
                    .await?;
                Ok(())
            })
        })
    }

    pub(crate) fn list(
        &self,
    ) -> impl Future<Output = Result<Vec<ConversationSummary>, ServerError>> + Send + 'static {
        self.call(|client| {
            Box::pin(async move {
                let rows = client
                    .query(
                        &format!(
                            "SELECT {SUMMARY_COLUMNS} FROM agentloop_conversations c
                             ORDER BY c.updated_at DESC, c.id"
                        ),
                        &[],
                    )
                    .await?;
                rows.iter().map(summary).collect()
            })
        })
    }

    pub(crate) fn get(
        &self,
        id: String,
    ) -> impl Future<Output = Result<Option<StoredConversation>, ServerError>> + Send + 'static
    {
        self.call(move |client| {
            Box::pin(async move {
                // One snapshot, so a history saved meanwhile is seen whole or not at all.
                let tx = client
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let Some(row) = tx
                    .query_opt(
                        &format!(
                            "SELECT {SUMMARY_COLUMNS} FROM agentloop_conversations c WHERE c.id = $1"
                        ),
                        &[&id],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let summary = summary(&row)?;
                let mut messages = Vec::new();
                for row in tx
                    .query(
                        "SELECT position, message FROM agentloop_messages
                         WHERE conversation_id = $1 ORDER BY position",
                        &[&id],
                    )
                    .await?
                {
                    let (position, json): (i64, String) = (row.try_get(0)?, row.try_get(1)?);
                    let message = serde_json::from_str::<Message>(&json).map_err(|e| {
                        ServerError::database(format!(
                            "message {position} of conversation `{id}` is not a valid message: {e}"
                        ))
                    })?;
                    messages.push(message);
                }
                let mut answers = Vec::new();
                for row in tx
                    .query(
                        "SELECT prompt_index, stop_reason, usage, cost FROM agentloop_answers
                         WHERE conversation_id = $1 ORDER BY prompt_index",
                        &[&id],
                    )
                    .await?
                {
                    let prompt_index: i64 = row.try_get(0)?;
                    let usage: String = row.try_get(2)?;
                    let cost: Option<String> = row.try_get(3)?;
                    let usage = serde_json::from_str::<Usage>(&usage).map_err(|e| {
                        ServerError::database(format!(
                            "the usage of answer {prompt_index} of conversation `{id}` is not valid: {e}"
                        ))
                    })?;
                    let cost = cost
                        .map(|cost| serde_json::from_str::<Cost>(&cost))
                        .transpose()
                        .map_err(|e| {
                            ServerError::database(format!(
                                "the cost of answer {prompt_index} of conversation `{id}` is not valid: {e}"
                            ))
                        })?;
                    answers.push(AnswerRecord {
                        prompt_index: position(prompt_index),
                        stop_reason: row.try_get(1)?,
                        usage,
                        cost,
                    });
                }
                tx.commit().await?;
                Ok(Some(StoredConversation {
                    summary,
                    messages,
                    answers,
                }))
            })
        })
    }

    pub(crate) fn save_tail(
        &self,
        id: String,
        from: usize,
        encoded: Vec<String>,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                let from = index(from);
                let tx = client.transaction().await?;
                tx.execute(
                    "DELETE FROM agentloop_messages WHERE conversation_id = $1 AND position >= $2",
                    &[&id, &from],
                )
                .await?;
                // Answers to prompts that are replaced go with them.
                tx.execute(
                    "DELETE FROM agentloop_answers WHERE conversation_id = $1 AND prompt_index >= $2",
                    &[&id, &from],
                )
                .await?;
                let insert = tx
                    .prepare(
                        "INSERT INTO agentloop_messages (conversation_id, position, message)
                         VALUES ($1, $2, $3)",
                    )
                    .await?;
                for (i, json) in encoded.iter().enumerate() {
                    tx.execute(&insert, &[&id, &(from + index(i)), json])
                        .await?;
                }
                tx.execute(
                    "UPDATE agentloop_conversations SET updated_at = $2 WHERE id = $1",
                    &[&id, &now_millis()],
                )
                .await?;
                tx.commit().await?;
                Ok(())
            })
        })
    }

    pub(crate) fn save_answer(
        &self,
        id: String,
        prompt_index: usize,
        stop_reason: String,
        usage: String,
        cost: Option<String>,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .execute(
                        "INSERT INTO agentloop_answers
                         (conversation_id, prompt_index, stop_reason, usage, cost)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (conversation_id, prompt_index) DO UPDATE SET
                         stop_reason = EXCLUDED.stop_reason, usage = EXCLUDED.usage,
                         cost = EXCLUDED.cost",
                        &[&id, &index(prompt_index), &stop_reason, &usage, &cost],
                    )
                    .await?;
                Ok(())
            })
        })
    }

    pub(crate) fn save_paused(
        &self,
        row: PausedRow,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .execute(
                        "INSERT INTO agentloop_paused_answers
                         (message_id, conversation_id, prompt_index, usage, paused_run, events,
                          created_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7)
                         ON CONFLICT (message_id) DO UPDATE SET
                         conversation_id = EXCLUDED.conversation_id,
                         prompt_index = EXCLUDED.prompt_index, usage = EXCLUDED.usage,
                         paused_run = EXCLUDED.paused_run, events = EXCLUDED.events,
                         created_at = EXCLUDED.created_at",
                        &[
                            &row.message_id,
                            &row.conversation_id,
                            &index(row.prompt_index),
                            &row.usage,
                            &row.paused_run,
                            &row.events,
                            &now_millis(),
                        ],
                    )
                    .await?;
                Ok(())
            })
        })
    }

    pub(crate) fn paused(
        &self,
    ) -> impl Future<Output = Result<Vec<PausedRow>, ServerError>> + Send + 'static {
        self.call(|client| {
            Box::pin(async move {
                let rows = client
                    .query(
                        "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                         FROM agentloop_paused_answers ORDER BY created_at, message_id",
                        &[],
                    )
                    .await?;
                rows.iter().map(paused_row).collect()
            })
        })
    }

    pub(crate) fn paused_answer(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<Option<PausedRow>, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .query_opt(
                        "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                         FROM agentloop_paused_answers WHERE message_id = $1",
                        &[&message_id],
                    )
                    .await?
                    .as_ref()
                    .map(paused_row)
                    .transpose()
            })
        })
    }

    pub(crate) fn paused_in(
        &self,
        conversation_id: String,
    ) -> impl Future<Output = Result<Option<PausedRow>, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .query_opt(
                        "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                         FROM agentloop_paused_answers WHERE conversation_id = $1
                         ORDER BY created_at, message_id LIMIT 1",
                        &[&conversation_id],
                    )
                    .await?
                    .as_ref()
                    .map(paused_row)
                    .transpose()
            })
        })
    }

    pub(crate) fn delete_paused(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<bool, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                // One statement: the notification goes out when the delete commits.
                let n = client
                    .execute(
                        &format!(
                            "WITH gone AS (
                                 DELETE FROM agentloop_paused_answers WHERE message_id = $1
                                 RETURNING message_id
                             )
                             SELECT pg_notify('{DECIDED}', message_id) FROM gone"
                        ),
                        &[&message_id],
                    )
                    .await?;
                Ok(n > 0)
            })
        })
    }

    pub(crate) fn rename(
        &self,
        id: String,
        title: String,
    ) -> impl Future<Output = Result<Option<ConversationSummary>, ServerError>> + Send + 'static
    {
        self.call(move |client| {
            Box::pin(async move {
                let n = client
                    .execute(
                        "UPDATE agentloop_conversations SET title = $2 WHERE id = $1",
                        &[&id, &title],
                    )
                    .await?;
                if n == 0 {
                    return Ok(None);
                }
                client
                    .query_opt(
                        &format!(
                            "SELECT {SUMMARY_COLUMNS} FROM agentloop_conversations c WHERE c.id = $1"
                        ),
                        &[&id],
                    )
                    .await?
                    .as_ref()
                    .map(summary)
                    .transpose()
            })
        })
    }

    pub(crate) fn delete(
        &self,
        id: String,
    ) -> impl Future<Output = Result<bool, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                let n = client
                    .execute("DELETE FROM agentloop_conversations WHERE id = $1", &[&id])
                    .await?;
                Ok(n > 0)
            })
        })
    }
}

/// Add `events` (`(id, JSON)`) to an answer's stored log (an id stored already is kept) and
/// tell the servers following it.
async fn insert_chat_events(
    tx: &tokio_postgres::Transaction<'_>,
    message_id: &str,
    events: &[(usize, String)],
) -> Result<(), ServerError> {
    if !events.is_empty() {
        let ids: Vec<i64> = events.iter().map(|(id, _)| index(*id)).collect();
        let bodies: Vec<&str> = events.iter().map(|(_, event)| event.as_str()).collect();
        tx.execute(
            "INSERT INTO agentloop_chat_run_events (message_id, id, event)
             SELECT $1, id, event FROM UNNEST($2::BIGINT[], $3::TEXT[]) AS e (id, event)
             ON CONFLICT (message_id, id) DO NOTHING",
            &[&message_id, &ids, &bodies],
        )
        .await?;
    }
    tx.execute(
        &format!("SELECT pg_notify('{WRITTEN}', $1)"),
        &[&message_id],
    )
    .await?;
    Ok(())
}

/// `(event id, JSON)` rows of an answer's log from id `from` on.
async fn chat_events(
    client: &impl tokio_postgres::GenericClient,
    message_id: &str,
    from: usize,
) -> Result<Vec<(usize, String)>, ServerError> {
    let rows = client
        .query(
            "SELECT id, event FROM agentloop_chat_run_events
             WHERE message_id = $1 AND id >= $2 ORDER BY id",
            &[&message_id, &index(from)],
        )
        .await?;
    rows.iter()
        .map(|row| Ok((position(row.try_get(0)?), row.try_get(1)?)))
        .collect()
}

/// Answers run durably, each leased by the server running it (see `crate::chat`).
impl PgStore {
    /// Take the conversation for a new answer: its row, leased to this server, before any
    /// checkpoint (version 0). Another answer running or waiting in the conversation, on any
    /// server, makes it [`ClaimOutcome::Busy`] (a unique index on unfinished rows).
    pub(crate) fn claim_chat(
        &self,
        message_id: String,
        conversation_id: String,
        prompt_index: usize,
    ) -> impl Future<Output = Result<ClaimOutcome, ServerError>> + Send + 'static {
        let (owner, lease) = (self.instance.clone(), millis(self.lease));
        self.call(move |client| {
            Box::pin(async move {
                // A holder that finishes between the insert and the look-up: try again.
                for _ in 0..3 {
                    let n = client
                        .execute(
                            "INSERT INTO agentloop_chat_runs (message_id, conversation_id,
                                 prompt_index, version, status, state, log_end, log_jumps,
                                 live_end, live_jumps, owner, lease_until, updated_at)
                             VALUES ($1, $2, $3, 0, 'running', '', 0, '[]', 0, '[]', $4,
                                 clock_timestamp() + $5::float8 * interval '1 millisecond', $6)
                             ON CONFLICT DO NOTHING",
                            &[
                                &message_id,
                                &conversation_id,
                                &index(prompt_index),
                                &&*owner,
                                &lease,
                                &now_millis(),
                            ],
                        )
                        .await?;
                    if n > 0 {
                        return Ok(ClaimOutcome::Claimed);
                    }
                    if let Some(row) = client
                        .query_opt(
                            "SELECT message_id FROM agentloop_chat_runs
                             WHERE conversation_id = $1 AND NOT finished",
                            &[&conversation_id],
                        )
                        .await?
                    {
                        return Ok(ClaimOutcome::Busy(row.try_get(0)?));
                    }
                }
                Err(ServerError::database(
                    "the conversation's answers changed too fast to start another; try again",
                ))
            })
        })
    }

    /// Save a checkpoint and the log's events since the last one in one transaction, if this
    /// server still holds the answer's lease and nobody saved since `read`; renews the lease.
    pub(crate) fn save_chat_checkpoint(
        &self,
        c: ChatCheckpoint,
    ) -> impl Future<Output = Result<CheckpointSaved, ServerError>> + Send + 'static {
        let (owner, lease) = (self.instance.clone(), millis(self.lease));
        self.call(move |client| {
            Box::pin(async move {
                let tx = client.transaction().await?;
                let saved = tx
                    .query_opt(
                        "UPDATE agentloop_chat_runs SET version = version + 1, status = $3,
                             state = $4, log_end = $5, log_jumps = $6, live_end = $5,
                             live_jumps = $6, updated_at = $7,
                             lease_until = clock_timestamp() + $9::float8 * interval '1 millisecond'
                         WHERE message_id = $1 AND version = $2 AND owner = $8 AND NOT finished
                         RETURNING version",
                        &[
                            &c.message_id,
                            &(c.read as i64),
                            &c.status,
                            &c.state,
                            &index(c.log_end),
                            &c.log_jumps,
                            &now_millis(),
                            &&*owner,
                            &lease,
                        ],
                    )
                    .await?;
                let Some(saved) = saved else {
                    let found = tx
                        .query_opt(
                            "SELECT version, owner FROM agentloop_chat_runs WHERE message_id = $1",
                            &[&c.message_id],
                        )
                        .await?;
                    return Ok(match found {
                        Some(row) => {
                            let version: i64 = row.try_get(0)?;
                            let holder: Option<String> = row.try_get(1)?;
                            if holder.as_deref() != Some(&*owner) {
                                CheckpointSaved::Lost
                            } else {
                                CheckpointSaved::Stale(u64::try_from(version).unwrap_or_default())
                            }
                        }
                        None => CheckpointSaved::Lost,
                    });
                };
                let version: i64 = saved.try_get(0)?;
                insert_chat_events(&tx, &c.message_id, &c.events).await?;
                tx.commit().await?;
                Ok(CheckpointSaved::Saved(
                    u64::try_from(version).unwrap_or_default(),
                ))
            })
        })
    }

    /// Add events to a running answer's log between checkpoints, for the servers following
    /// it; `false` (nothing written) when this server no longer holds its lease.
    pub(crate) fn append_chat_events(
        &self,
        message_id: String,
        events: Vec<(usize, String)>,
        end: usize,
        jumps: String,
    ) -> impl Future<Output = Result<bool, ServerError>> + Send + 'static {
        let owner = self.instance.clone();
        self.call(move |client| {
            Box::pin(async move {
                let tx = client.transaction().await?;
                let n = tx
                    .execute(
                        "UPDATE agentloop_chat_runs SET live_end = $2, live_jumps = $3
                         WHERE message_id = $1 AND owner = $4 AND NOT finished",
                        &[&message_id, &index(end), &jumps, &&*owner],
                    )
                    .await?;
                if n == 0 {
                    return Ok(false);
                }
                insert_chat_events(&tx, &message_id, &events).await?;
                tx.commit().await?;
                Ok(true)
            })
        })
    }

    /// The answer is over: its last events, and it is marked finished (its lease released),
    /// if this server still holds it.
    pub(crate) fn finish_chat_run(
        &self,
        message_id: String,
        events: Vec<(usize, String)>,
        end: usize,
        jumps: String,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        let owner = self.instance.clone();
        self.call(move |client| {
            Box::pin(async move {
                let tx = client.transaction().await?;
                let n = tx
                    .execute(
                        "UPDATE agentloop_chat_runs SET finished = true, state = '', log_end = $2,
                             log_jumps = $3, live_end = $2, live_jumps = $3, owner = NULL,
                             lease_until = NULL, updated_at = $4
                         WHERE message_id = $1 AND owner = $5 AND NOT finished",
                        &[&message_id, &index(end), &jumps, &now_millis(), &&*owner],
                    )
                    .await?;
                if n > 0 {
                    insert_chat_events(&tx, &message_id, &events).await?;
                }
                tx.commit().await?;
                Ok(())
            })
        })
    }

    /// An answer's last checkpoint: `(version, status, state)`; none before its first.
    pub(crate) fn chat_checkpoint(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<Option<(u64, String, String)>, ServerError>> + Send + 'static
    {
        self.call(move |client| {
            Box::pin(async move {
                let Some(row) = client
                    .query_opt(
                        "SELECT version, status, state FROM agentloop_chat_runs
                         WHERE message_id = $1 AND version > 0",
                        &[&message_id],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let version: i64 = row.try_get(0)?;
                Ok(Some((
                    u64::try_from(version).unwrap_or_default(),
                    row.try_get(1)?,
                    row.try_get(2)?,
                )))
            })
        })
    }

    /// Every answer with a checkpoint: `(message id, version, status)`.
    pub(crate) fn chat_checkpoints(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, u64, String)>, ServerError>> + Send + 'static
    {
        self.call(|client| {
            Box::pin(async move {
                let rows = client
                    .query(
                        "SELECT message_id, version, status FROM agentloop_chat_runs
                         WHERE version > 0 ORDER BY message_id",
                        &[],
                    )
                    .await?;
                rows.iter()
                    .map(|row| {
                        let version: i64 = row.try_get(1)?;
                        Ok((
                            row.try_get(0)?,
                            u64::try_from(version).unwrap_or_default(),
                            row.try_get(2)?,
                        ))
                    })
                    .collect()
            })
        })
    }

    /// An answer's log as stored now, from event id `from` on, for a server following it.
    pub(crate) fn chat_log(
        &self,
        message_id: String,
        from: usize,
    ) -> impl Future<Output = Result<Option<ChatLog>, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                // One snapshot: the row's end and the events up to it agree.
                let tx = client
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let Some(row) = tx
                    .query_opt(
                        "SELECT conversation_id, finished, live_end, live_jumps
                         FROM agentloop_chat_runs WHERE message_id = $1",
                        &[&message_id],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let events = chat_events(&tx, &message_id, from).await?;
                tx.commit().await?;
                Ok(Some(ChatLog {
                    conversation_id: row.try_get(0)?,
                    finished: row.try_get(1)?,
                    end: position(row.try_get(2)?),
                    jumps: row.try_get(3)?,
                    events,
                }))
            })
        })
    }

    /// The answer running or waiting in a conversation, on any server: its message id.
    pub(crate) fn active_chat(
        &self,
        conversation_id: String,
    ) -> impl Future<Output = Result<Option<String>, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .query_opt(
                        "SELECT message_id FROM agentloop_chat_runs
                         WHERE conversation_id = $1 AND NOT finished",
                        &[&conversation_id],
                    )
                    .await?
                    .map(|row| row.try_get(0))
                    .transpose()
                    .map_err(ServerError::from)
            })
        })
    }

    /// This server runs the answer from now on (it resumes it after approval decisions,
    /// which only the server that deleted its paused row does).
    pub(crate) fn own_chat_run(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        let (owner, lease) = (self.instance.clone(), millis(self.lease));
        self.call(move |client| {
            Box::pin(async move {
                client
                    .execute(
                        "UPDATE agentloop_chat_runs SET owner = $2,
                             lease_until = clock_timestamp() + $3::float8 * interval '1 millisecond'
                         WHERE message_id = $1 AND NOT finished",
                        &[&message_id, &&*owner, &lease],
                    )
                    .await?;
                Ok(())
            })
        })
    }

    /// Renew the lease of every answer this server holds, in one statement; the message ids
    /// of those a cancel was asked for (in case the notification was missed).
    pub(crate) fn heartbeat(
        &self,
    ) -> impl Future<Output = Result<(u64, Vec<String>), ServerError>> + Send + 'static {
        let (owner, lease) = (self.instance.clone(), millis(self.lease));
        self.call(move |client| {
            Box::pin(async move {
                let rows = client
                    .query(
                        "UPDATE agentloop_chat_runs
                         SET lease_until = clock_timestamp() + $2::float8 * interval '1 millisecond'
                         WHERE owner = $1 AND NOT finished
                         RETURNING message_id, cancel",
                        &[&&*owner, &lease],
                    )
                    .await?;
                let mut cancelled = Vec::new();
                for row in &rows {
                    if row.try_get(1)? {
                        cancelled.push(row.try_get(0)?);
                    }
                }
                Ok((rows.len() as u64, cancelled))
            })
        })
    }

    /// Hand over every answer this server holds (it is stopping): their leases end now, and
    /// every server is told (`NOTIFY`), so one takes each over at once; how many there were.
    pub(crate) fn release_leases(
        &self,
    ) -> impl Future<Output = Result<u64, ServerError>> + Send + 'static {
        let owner = self.instance.clone();
        self.call(move |client| {
            Box::pin(async move {
                let rows = client
                    .query(
                        &format!(
                            "WITH freed AS (
                                 UPDATE agentloop_chat_runs
                                 SET lease_until = clock_timestamp() - interval '1 millisecond'
                                 WHERE owner = $1 AND NOT finished
                                 RETURNING message_id
                             )
                             SELECT pg_notify('{RELEASED}', message_id) FROM freed"
                        ),
                        &[&&*owner],
                    )
                    .await?;
                Ok(rows.len() as u64)
            })
        })
    }

    /// Ask the server running the answer to stop it (`NOTIFY`, and a flag its heartbeat
    /// reads); `false` when it is not running.
    pub(crate) fn request_cancel(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<bool, ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                let n = client
                    .execute(
                        &format!(
                            "WITH asked AS (
                                 UPDATE agentloop_chat_runs SET cancel = true
                                 WHERE message_id = $1 AND NOT finished
                                 RETURNING message_id
                             )
                             SELECT pg_notify('{CANCEL}', message_id) FROM asked"
                        ),
                        &[&message_id],
                    )
                    .await?;
                Ok(n > 0)
            })
        })
    }

    /// Take over up to `limit` answers whose lease expired (their server died or stalled) and
    /// that do not wait for approval: each leased to this server, its log cut back to its
    /// last checkpoint (the servers following it are told), returned with that log to resume.
    pub(crate) fn claim_expired(
        &self,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<ChatRunRow>, ServerError>> + Send + 'static {
        let (owner, lease) = (self.instance.clone(), millis(self.lease));
        self.call(move |client| {
            Box::pin(async move {
                let tx = client.transaction().await?;
                let rows = tx
                    .query(
                        "WITH expired AS (
                             SELECT message_id FROM agentloop_chat_runs r
                             WHERE NOT finished AND lease_until < clock_timestamp()
                               AND NOT EXISTS (SELECT 1 FROM agentloop_paused_answers p
                                               WHERE p.message_id = r.message_id)
                             ORDER BY lease_until LIMIT $3
                             FOR UPDATE SKIP LOCKED
                         )
                         UPDATE agentloop_chat_runs r SET owner = $1,
                             lease_until = clock_timestamp() + $2::float8 * interval '1 millisecond',
                             live_end = r.log_end, live_jumps = r.log_jumps
                         FROM expired WHERE r.message_id = expired.message_id
                         RETURNING r.message_id, r.conversation_id, r.prompt_index, r.status,
                             r.log_end, r.log_jumps",
                        &[&&*owner, &lease, &limit],
                    )
                    .await?;
                let mut claimed = Vec::with_capacity(rows.len());
                for row in &rows {
                    let message_id: String = row.try_get(0)?;
                    let log_end: i64 = row.try_get(4)?;
                    // Events the dead server wrote after its last checkpoint are cut.
                    tx.execute(
                        "DELETE FROM agentloop_chat_run_events WHERE message_id = $1 AND id >= $2",
                        &[&message_id, &log_end],
                    )
                    .await?;
                    insert_chat_events(&tx, &message_id, &[]).await?;
                    let events = chat_events(&tx, &message_id, 0).await?;
                    claimed.push(ChatRunRow {
                        conversation_id: row.try_get(1)?,
                        prompt_index: position(row.try_get(2)?),
                        status: row.try_get(3)?,
                        finished: false,
                        log_end: position(log_end),
                        log_jumps: row.try_get(5)?,
                        events,
                        message_id,
                    });
                }
                tx.commit().await?;
                Ok(claimed)
            })
        })
    }

    /// Forget an answer's checkpoint and log (the servers following it are told).
    pub(crate) fn delete_chat_run(
        &self,
        message_id: String,
    ) -> impl Future<Output = Result<(), ServerError>> + Send + 'static {
        self.call(move |client| {
            Box::pin(async move {
                client
                    .execute(
                        &format!(
                            "WITH gone AS (
                                 DELETE FROM agentloop_chat_runs WHERE message_id = $1
                                 RETURNING message_id
                             )
                             SELECT pg_notify('{WRITTEN}', message_id) FROM gone"
                        ),
                        &[&message_id],
                    )
                    .await?;
                Ok(())
            })
        })
    }
}

/// For tests: a fresh database on the server `AGENTLOOP_TEST_POSTGRES` names, its URL; `None`
/// (after a skip notice) when the variable is unset.
#[cfg(test)]
pub(crate) async fn test_database(test: &str) -> Option<String> {
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(&format!(
            "{test} on Postgres: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)"
        ));
        return None;
    };
    let client = connect(&server)
        .await
        .expect("connect to AGENTLOOP_TEST_POSTGRES");
    let db = format!("agentloop_server_{:016x}", rand::random::<u64>());
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .expect("create a test database");
    let (base, _) = server.rsplit_once('/').expect("a URL with a database name");
    Some(format!("{base}/{db}"))
}
