//! Conversation storage: conversations, and their histories as canonical agentloop messages
//! (JSON), one row per message. In SQLite (here), or in Postgres (`postgres`, feature
//! `postgres`), which every method dispatches to when the store was opened on a Postgres URL.

#[cfg(feature = "postgres")]
mod postgres;

use std::future::Future;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agentloop::cost::Cost;
use agentloop::{Message, Usage};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::config::Database;
use crate::error::ServerError;

/// Schema changes, applied in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE conversations (
        id          TEXT PRIMARY KEY,
        title       TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE messages (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position        INTEGER NOT NULL,
        message         TEXT NOT NULL,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE INDEX conversations_by_update ON conversations(updated_at DESC);",
    // What each answer used, kept with the prompt it replied to so the page shows it again.
    "CREATE TABLE answers (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        prompt_index    INTEGER NOT NULL,
        stop_reason     TEXT NOT NULL,
        usage           TEXT NOT NULL,
        PRIMARY KEY (conversation_id, prompt_index)
    );",
    // Answers waiting for approval decisions: the library's paused run as JSON, so a restart
    // keeps them waiting.
    "CREATE TABLE paused_answers (
        message_id      TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        prompt_index    INTEGER NOT NULL,
        usage           TEXT NOT NULL,
        paused_run      TEXT NOT NULL,
        events          TEXT NOT NULL,
        created_at      INTEGER NOT NULL
    );",
    // What each answer cost (JSON of agentloop's `Cost`), NULL when its model has no price.
    "ALTER TABLE answers ADD COLUMN cost TEXT;",
    // Answers run durably: the library's last checkpoint of each, where its `/v1/chat` event
    // log stood then (`log_end`, the next event id, and `log_jumps`, where ids skip ahead after
    // a restart, JSON `[[index, id], ...]`), and the log's events up to there. A restart
    // resumes the unfinished ones; finished ones keep their log a while for reconnects.
    "CREATE TABLE chat_runs (
        message_id      TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        prompt_index    INTEGER NOT NULL,
        version         INTEGER NOT NULL,
        status          TEXT NOT NULL,
        state           TEXT NOT NULL,
        log_end         INTEGER NOT NULL,
        log_jumps       TEXT NOT NULL,
        finished        INTEGER NOT NULL DEFAULT 0,
        updated_at      INTEGER NOT NULL
    );
    CREATE TABLE chat_run_events (
        message_id TEXT NOT NULL REFERENCES chat_runs(message_id) ON DELETE CASCADE,
        id         INTEGER NOT NULL,
        event      TEXT NOT NULL,
        PRIMARY KEY (message_id, id)
    );",
];

/// An answer waiting for approval, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PausedRow {
    pub(crate) message_id: String,
    pub(crate) conversation_id: String,
    pub(crate) prompt_index: usize,
    /// The usage so far, as JSON.
    pub(crate) usage: String,
    /// [`agentloop::run::PausedRun::to_json`]'s text.
    pub(crate) paused_run: String,
    /// The answer's `/v1/chat` events up to its pause, as [`RecordedEvents`] JSON.
    pub(crate) events: String,
}

/// The `/v1/chat` events of an answer up to its pause, at their positions in its log, so a
/// restart keeps their ids.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct RecordedEvents {
    /// The event id after the pause (the number of frames, the pause included, when the ids
    /// never jumped).
    pub(crate) len: usize,
    /// Each event with its id.
    pub(crate) events: Vec<(usize, crate::events::ChatEvent)>,
    /// Where the ids skip ahead (after a restart resumed the answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) jumps: Vec<crate::runs::Jump>,
}

/// A checkpoint of an answer run durably, with its log's events since the last one.
#[derive(Debug, Clone)]
pub(crate) struct ChatCheckpoint {
    pub(crate) message_id: String,
    pub(crate) conversation_id: String,
    pub(crate) prompt_index: usize,
    /// The version this writer read (0 for a new run).
    pub(crate) read: u64,
    /// [`agentloop::run::RunStatus::as_str`].
    pub(crate) status: String,
    /// The library's checkpoint JSON.
    pub(crate) state: String,
    /// The log's events since the last save: `(event id, ChatEvent JSON)`.
    pub(crate) events: Vec<(usize, String)>,
    /// The log's next event id.
    pub(crate) log_end: usize,
    /// Where the log's ids skip ahead, JSON.
    pub(crate) log_jumps: String,
}

/// What a checkpoint save did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointSaved {
    /// Saved as this version.
    Saved(u64),
    /// Not saved: the stored version is this one, not the one read.
    Stale(u64),
    /// Not saved: another server took the answer over (this one's lease expired), or the
    /// answer is gone (its conversation was deleted). Only on a shared database.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Lost,
}

/// Whether a new answer got its conversation (on a shared database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimOutcome {
    /// It did: its row is leased to this server.
    Claimed,
    /// Another answer, this message id, runs or waits there (on any server).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Busy(String),
}

/// An answer's stored log, as a server that does not run it follows it.
#[derive(Debug, Clone)]
pub(crate) struct ChatLog {
    pub(crate) conversation_id: String,
    pub(crate) finished: bool,
    /// The log's next event id.
    pub(crate) end: usize,
    /// Where the log's ids skip ahead, JSON.
    pub(crate) jumps: String,
    /// `(event id, ChatEvent JSON)`, by id.
    pub(crate) events: Vec<(usize, String)>,
}

/// An answer run durably, as stored: what a restart needs to resume it or show its log.
#[derive(Debug, Clone)]
pub(crate) struct ChatRunRow {
    pub(crate) message_id: String,
    pub(crate) conversation_id: String,
    pub(crate) prompt_index: usize,
    pub(crate) status: String,
    pub(crate) finished: bool,
    pub(crate) log_end: usize,
    pub(crate) log_jumps: String,
    /// `(event id, ChatEvent JSON)`, by id.
    pub(crate) events: Vec<(usize, String)>,
}

/// A conversation in the list: no messages, just what a picker shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationSummary {
    /// Its id.
    pub id: String,
    /// The start of its first prompt.
    pub title: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at: i64,
    /// Time of the last change, milliseconds since the Unix epoch.
    pub updated_at: i64,
    /// Number of stored messages.
    pub message_count: i64,
}

/// A conversation with its whole history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredConversation {
    /// Id, title and times.
    #[serde(flatten)]
    pub summary: ConversationSummary,
    /// The history, canonical agentloop messages, valid to send again.
    pub messages: Vec<Message>,
    /// How each answer ended and what it used, in the order of the prompts they replied to.
    pub answers: Vec<AnswerRecord>,
}

/// How one answer ended and the tokens it used (all its model calls together).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerRecord {
    /// The position in the history of the prompt the answer replied to.
    pub prompt_index: usize,
    /// Why the run stopped, as `message_end` says it (`end_turn`, `interrupted`, ...).
    pub stop_reason: String,
    /// The tokens used.
    pub usage: Usage,
    /// What they cost in USD; absent when the model has no price (never a made-up zero).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// The database. Calls are queued, in the order they are made, to one worker that runs them
/// one after another on the connection, in tokio's blocking pool (so they never stall the
/// runtime, and paused-clock tests do not jump ahead while one runs). However many chats
/// wait on the database, it takes one blocking thread, not one per call; and a call queued
/// before another is answered before it (a conversation created by a chat exists for every
/// request made after the chat started).
#[derive(Clone)]
pub(crate) struct Store {
    jobs: mpsc::UnboundedSender<Job>,
    /// How errors name the database: its path in backquotes.
    name: Arc<str>,
    /// Set when the store is in Postgres: every method goes there, and SQLite's queue is
    /// closed.
    #[cfg(feature = "postgres")]
    pg: Option<postgres::PgStore>,
}

/// One queued call.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Calls the worker runs in one go when they queue up.
const BATCH: usize = 64;

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// `error`, its message prefixed with the database's name (when it is a database error).
fn naming(name: &str, error: ServerError) -> ServerError {
    match error {
        ServerError::Database { message } => ServerError::database(format!("{name}: {message}")),
        other => other,
    }
}

/// Whether the current user may create files in `dir` (root may, whatever the mode says).
fn writable_dir(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// What to tell the user when SQLite fails on `path` at open.
fn open_failure(path: &Path, dir: &Path, error: &rusqlite::Error) -> ServerError {
    let shown = path.display();
    let message = match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => format!(
            "`{shown}` is not an SQLite database ({error}); pass another database file, or move this one away"
        ),
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => damaged(path, &error.to_string()),
        _ if !writable_dir(dir) => format!(
            "cannot open `{shown}` ({error}): the directory `{}` is not writable, and SQLite keeps \
             its `-wal` and `-shm` files beside the database; make the directory writable or pass \
             another database path",
            dir.display()
        ),
        _ => format!("cannot open `{shown}`: {error}"),
    };
    ServerError::database(message)
}

fn damaged(path: &Path, detail: &str) -> String {
    let shown = path.display();
    format!(
        "`{shown}` is damaged (PRAGMA quick_check: {detail}); restore it from a backup, salvage \
         what it holds with `sqlite3 {shown} .recover`, or pass another database file"
    )
}

/// Fail unless the whole file reads back consistent, not only the pages read at start: a
/// file damaged in the middle would otherwise start and fail later, chat by chat.
fn check_integrity(conn: &Connection, path: &Path, dir: &Path) -> Result<(), ServerError> {
    let problems = conn
        .prepare("PRAGMA quick_check(5)")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| open_failure(path, dir, &e))?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(ServerError::database(damaged(path, &problems.join("; "))))
}

/// Open the file at `path` and check that it is a sound database the server can write,
/// creating it (readable by its owner only) when missing.
fn open_file(path: &Path) -> Result<Connection, ServerError> {
    let shown = path.display();
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(ServerError::database(format!(
            "the directory of `{shown}` does not exist"
        )));
    }
    // Created here rather than by SQLite, with mode 0600: conversations are private, and SQLite
    // gives the `-wal` and `-shm` files the database file's mode.
    let created = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) if !writable_dir(dir) => {
            return Err(ServerError::database(format!(
                "cannot create `{shown}` ({e}): the directory `{}` is not writable; make it \
                 writable or pass another database path",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(ServerError::database(format!(
                "cannot create `{shown}`: {e}"
            )));
        }
    };
    let opened = check_file(path, dir);
    if opened.is_err() && created {
        // Leave nothing behind of a database this start created.
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
    opened
}

fn check_file(path: &Path, dir: &Path) -> Result<Connection, ServerError> {
    let shown = path.display();
    let conn = Connection::open(path).map_err(|e| open_failure(path, dir, &e))?;
    // SQLite falls back to reading only when the file cannot be written; every chat would
    // then fail.
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| open_failure(path, dir, &e))?
    {
        return Err(ServerError::database(format!(
            "`{shown}` is read-only, and the server writes every conversation to it; make it \
             writable (chmod u+w) or pass another database path"
        )));
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| open_failure(path, dir, &e))?;
    check_integrity(&conn, path, dir)?;
    // Taking the write lock proves the file and its `-wal` and `-shm` can be written.
    conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
        .map_err(|e| open_failure(path, dir, &e))?;
    Ok(conn)
}

fn open_connection(database: &Database) -> Result<Connection, ServerError> {
    let conn = match database {
        Database::File(path) => open_file(path)?,
        Database::InMemory => Connection::open_in_memory()?,
        Database::Postgres(_) => {
            return Err(ServerError::database(
                "a Postgres URL is not an SQLite database",
            ));
        }
    };
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// Runs the queued calls until every [`Store`] is gone.
async fn worker(mut conn: Connection, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let mut batch = Vec::with_capacity(BATCH);
    while jobs.recv_many(&mut batch, BATCH).await > 0 {
        let now = std::mem::take(&mut batch);
        let ran = tokio::task::spawn_blocking(move || {
            for job in now {
                // A call that panics drops its reply (its caller gets an error); its
                // transaction was rolled back and the connection stays usable.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut conn)));
            }
            conn
        })
        .await;
        match ran {
            Ok(back) => conn = back,
            Err(e) => {
                tracing::error!("the database worker stopped: {e}");
                return;
            }
        }
    }
}

/// Bring the schema up to date; errors name the database (`name`).
fn migrate(conn: &mut Connection, name: &str) -> Result<(), ServerError> {
    let named = |e: rusqlite::Error| ServerError::database(format!("{name}: {e}"));
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(named)?;
    let version = usize::try_from(version).unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        return Err(ServerError::database(format!(
            "{name} has schema version {version}, newer than this server knows ({}); use a newer agentloop",
            MIGRATIONS.len()
        )));
    }
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction().map_err(named)?;
        tx.execute_batch(migration).map_err(named)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .map_err(named)?;
        tx.commit().map_err(named)?;
    }
    Ok(())
}

fn summary_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ConversationSummary> {
    Ok(ConversationSummary {
        id: row.get(0)?,
        title: row.get(1)?,
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        message_count: row.get(4)?,
    })
}

fn paused_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PausedRow> {
    Ok(PausedRow {
        message_id: row.get(0)?,
        conversation_id: row.get(1)?,
        prompt_index: usize::try_from(row.get::<_, i64>(2)?).unwrap_or_default(),
        usage: row.get(3)?,
        paused_run: row.get(4)?,
        events: row.get(5)?,
    })
}

const SUMMARY_COLUMNS: &str = "c.id, c.title, c.created_at, c.updated_at,
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)";

impl Store {
    /// Open (creating and migrating as needed), after checking that the database is sound
    /// and writable.
    #[cfg(test)]
    pub(crate) async fn open(database: Database) -> Result<Self, ServerError> {
        Self::open_leased(database, std::time::Duration::from_secs(15)).await
    }

    /// [`Self::open`]; on a shared database the answers this server runs are leased for
    /// `lease` at a time.
    pub(crate) async fn open_leased(
        database: Database,
        lease: std::time::Duration,
    ) -> Result<Self, ServerError> {
        let name = match &database {
            Database::File(path) => format!("`{}`", path.display()),
            Database::InMemory => "the in-memory database".to_owned(),
            Database::Postgres(_) => format!("Postgres at `{database}`"),
        };
        if let Database::Postgres(url) = &database {
            return Self::open_postgres(url, name, lease).await;
        }
        let conn = tokio::task::spawn_blocking({
            let name = name.clone();
            move || {
                let mut conn = open_connection(&database).map_err(|e| match &database {
                    // Errors of a file name it already.
                    Database::File(_) => e,
                    Database::InMemory | Database::Postgres(_) => naming(&name, e),
                })?;
                migrate(&mut conn, &name)?;
                Ok::<_, ServerError>(conn)
            }
        })
        .await
        .map_err(|e| ServerError::database(format!("opening {name} failed: {e}")))??;
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(worker(conn, queue));
        Ok(Self {
            jobs,
            name: name.into(),
            #[cfg(feature = "postgres")]
            pg: None,
        })
    }

    #[cfg(feature = "postgres")]
    async fn open_postgres(
        url: &str,
        name: String,
        lease: std::time::Duration,
    ) -> Result<Self, ServerError> {
        let pg = postgres::PgStore::open(url, lease)
            .await
            .map_err(|e| naming(&name, e))?;
        // A queue nobody serves: the SQLite calls fail instead of running (each method goes
        // to `pg` first).
        let (jobs, _) = mpsc::unbounded_channel();
        Ok(Self {
            jobs,
            name: name.into(),
            pg: Some(pg),
        })
    }

    #[cfg(not(feature = "postgres"))]
    async fn open_postgres(
        _url: &str,
        name: String,
        _lease: std::time::Duration,
    ) -> Result<Self, ServerError> {
        Err(ServerError::database(format!(
            "{name}: this server was built without Postgres support; build agentloop-server \
             (or agentloop-cli) with the `postgres` feature, or store conversations in an SQLite file"
        )))
    }

    /// The Postgres store, when conversations live there.
    #[cfg(feature = "postgres")]
    fn pg(&self) -> Option<&postgres::PgStore> {
        self.pg.as_ref()
    }

    /// Whether other servers may share the database (Postgres): what they pause is found
    /// there, not in this server's memory.
    pub(crate) fn is_shared(&self) -> bool {
        #[cfg(feature = "postgres")]
        return self.pg.is_some();
        #[cfg(not(feature = "postgres"))]
        false
    }

    /// With a shared database, the message ids of answers whose stored log any server changed.
    pub(crate) fn written_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        #[cfg(feature = "postgres")]
        return self.pg.as_ref().map(postgres::PgStore::written);
        #[cfg(not(feature = "postgres"))]
        None
    }

    /// With a shared database, how long this server's leases on answers last.
    pub(crate) fn lease(&self) -> Option<std::time::Duration> {
        #[cfg(feature = "postgres")]
        return self.pg.as_ref().map(postgres::PgStore::lease);
        #[cfg(not(feature = "postgres"))]
        None
    }

    /// With a shared database, the message ids of paused answers decided or cancelled by any
    /// server sharing it.
    pub(crate) fn decided_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        #[cfg(feature = "postgres")]
        return self.pg.as_ref().map(postgres::PgStore::decided);
        #[cfg(not(feature = "postgres"))]
        None
    }

    /// An error when the worker has stopped (a call can no longer be queued).
    pub(crate) fn check_open(&self) -> Result<(), ServerError> {
        #[cfg(feature = "postgres")]
        let closed = self.pg().map_or(self.jobs.is_closed(), |pg| !pg.is_open());
        #[cfg(not(feature = "postgres"))]
        let closed = self.jobs.is_closed();
        if closed {
            return Err(ServerError::database(format!(
                "{}: the database connection is closed",
                self.name
            )));
        }
        Ok(())
    }

    /// `call`'s result with its errors naming the database.
    #[cfg(feature = "postgres")]
    fn named<R: Send + 'static>(
        &self,
        call: impl Future<Output = Result<R, ServerError>> + Send + 'static,
    ) -> futures::future::BoxFuture<'static, Result<R, ServerError>> {
        let name = self.name.clone();
        Box::pin(async move { call.await.map_err(|e| naming(&name, e)) })
    }

    /// Queue `f` now; the returned future gives its result.
    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, ServerError> + Send + 'static,
    ) -> impl Future<Output = Result<R, ServerError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let queued = self
            .jobs
            .send(Box::new(move |conn| {
                let _ = reply.send(f(conn));
            }))
            .is_ok();
        let name = self.name.clone();
        #[cfg(feature = "postgres")]
        let postgres = self.pg.is_some();
        #[cfg(not(feature = "postgres"))]
        let postgres = false;
        async move {
            if postgres {
                return Err(ServerError::database(format!(
                    "{name}: this operation has no Postgres implementation yet"
                )));
            }
            if !queued {
                return Err(ServerError::database(format!(
                    "{name}: the database connection is closed"
                )));
            }
            match answer.await {
                Ok(result) => result.map_err(|e| naming(&name, e)),
                Err(_) => Err(ServerError::database(format!(
                    "{name}: a database call failed unexpectedly"
                ))),
            }
        }
    }

    /// Create an empty conversation. The insert is queued when this is called, before the
    /// returned future is awaited: calls made afterwards see the conversation.
    pub(crate) fn create(
        &self,
        id: String,
        title: String,
    ) -> futures::future::BoxFuture<'static, Result<(), ServerError>> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.create(id, title));
        }
        Box::pin(self.call(move |conn| {
            let now = now_millis();
            conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)",
                params![id, title, now],
            )?;
            Ok(())
        }))
    }

    /// All conversations, most recently changed first.
    pub(crate) async fn list(&self) -> Result<Vec<ConversationSummary>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.list()).await;
        }
        self.call(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM conversations c ORDER BY c.updated_at DESC, c.id"
            ))?;
            let rows = stmt.query_map([], summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// One conversation with its history.
    pub(crate) async fn get(&self, id: String) -> Result<Option<StoredConversation>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.get(id)).await;
        }
        self.call(move |conn| {
            let summary = conn
                .query_row(
                    &format!("SELECT {SUMMARY_COLUMNS} FROM conversations c WHERE c.id = ?1"),
                    params![id],
                    summary_from_row,
                )
                .optional()?;
            let Some(summary) = summary else {
                return Ok(None);
            };
            let mut stmt = conn.prepare(
                "SELECT position, message FROM messages WHERE conversation_id = ?1 ORDER BY position",
            )?;
            let rows = stmt.query_map(params![id], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })?;
            let mut messages = Vec::new();
            for row in rows {
                let (position, json) = row?;
                let message = serde_json::from_str(&json).map_err(|e| {
                    ServerError::database(format!(
                        "message {position} of conversation `{id}` is not a valid message: {e}"
                    ))
                })?;
                messages.push(message);
            }
            let mut stmt = conn.prepare(
                "SELECT prompt_index, stop_reason, usage, cost FROM answers
                 WHERE conversation_id = ?1 ORDER BY prompt_index",
            )?;
            let rows = stmt.query_map(params![id], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            })?;
            let mut answers = Vec::new();
            for row in rows {
                let (prompt_index, stop_reason, usage, cost) = row?;
                let usage = serde_json::from_str(&usage).map_err(|e| {
                    ServerError::database(format!(
                        "the usage of answer {prompt_index} of conversation `{id}` is not valid: {e}"
                    ))
                })?;
                let cost = cost
                    .map(|cost| serde_json::from_str(&cost))
                    .transpose()
                    .map_err(|e| {
                        ServerError::database(format!(
                            "the cost of answer {prompt_index} of conversation `{id}` is not valid: {e}"
                        ))
                    })?;
                answers.push(AnswerRecord {
                    prompt_index: usize::try_from(prompt_index).unwrap_or_default(),
                    stop_reason,
                    usage,
                    cost,
                });
            }
            Ok(Some(StoredConversation {
                summary,
                messages,
                answers,
            }))
        })
        .await
    }

    /// Replace the history from position `from` on with `messages` (one transaction), so a
    /// crash leaves either the old or the new history, never a mix.
    pub(crate) async fn save_tail(
        &self,
        id: String,
        from: usize,
        messages: Vec<Message>,
    ) -> Result<(), ServerError> {
        let encoded = messages
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(ServerError::database)?;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.save_tail(id, from, encoded)).await;
        }
        self.call(move |conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "DELETE FROM messages WHERE conversation_id = ?1 AND position >= ?2",
                params![id, from as i64],
            )?;
            // Answers to prompts that are replaced go with them.
            tx.execute(
                "DELETE FROM answers WHERE conversation_id = ?1 AND prompt_index >= ?2",
                params![id, from as i64],
            )?;
            {
                let mut insert = tx.prepare(
                    "INSERT INTO messages (conversation_id, position, message) VALUES (?1, ?2, ?3)",
                )?;
                for (i, json) in encoded.iter().enumerate() {
                    insert.execute(params![id, (from + i) as i64, json])?;
                }
            }
            tx.execute(
                "UPDATE conversations SET updated_at = ?2 WHERE id = ?1",
                params![id, now_millis()],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Record how the answer to the prompt at `prompt_index` ended (replacing an earlier answer
    /// to it, which regenerating makes).
    pub(crate) async fn save_answer(
        &self,
        id: String,
        prompt_index: usize,
        stop_reason: String,
        usage: Usage,
        cost: Option<Cost>,
    ) -> Result<(), ServerError> {
        let usage = serde_json::to_string(&usage).map_err(ServerError::database)?;
        let cost = cost
            .map(|cost| serde_json::to_string(&cost))
            .transpose()
            .map_err(ServerError::database)?;
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self
                .named(pg.save_answer(id, prompt_index, stop_reason, usage, cost))
                .await;
        }
        self.call(move |conn| {
            conn.execute(
                "INSERT OR REPLACE INTO answers (conversation_id, prompt_index, stop_reason, usage, cost)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, prompt_index as i64, stop_reason, usage, cost],
            )?;
            Ok(())
        })
        .await
    }

    /// Keep an answer waiting for approval (replacing an earlier pause of the same answer).
    pub(crate) async fn save_paused(&self, row: PausedRow) -> Result<(), ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.save_paused(row)).await;
        }
        self.call(move |conn| {
            conn.execute(
                "INSERT OR REPLACE INTO paused_answers
                 (message_id, conversation_id, prompt_index, usage, paused_run, events, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    row.message_id,
                    row.conversation_id,
                    row.prompt_index as i64,
                    row.usage,
                    row.paused_run,
                    row.events,
                    now_millis()
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Every answer waiting for approval, oldest first.
    pub(crate) async fn paused(&self) -> Result<Vec<PausedRow>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.paused()).await;
        }
        self.call(|conn| {
            let mut stmt = conn.prepare(
                "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                 FROM paused_answers ORDER BY created_at, message_id",
            )?;
            let rows = stmt.query_map([], paused_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// The answer waiting for approval `message_id`, when it waits (another server sharing
    /// the database may have paused it).
    pub(crate) async fn paused_answer(
        &self,
        message_id: String,
    ) -> Result<Option<PausedRow>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.paused_answer(message_id)).await;
        }
        self.call(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                     FROM paused_answers WHERE message_id = ?1",
                    params![message_id],
                    paused_from_row,
                )
                .optional()?)
        })
        .await
    }

    /// The answer waiting for approval in conversation `conversation_id`, if one does.
    pub(crate) async fn paused_in(
        &self,
        conversation_id: String,
    ) -> Result<Option<PausedRow>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.paused_in(conversation_id)).await;
        }
        self.call(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT message_id, conversation_id, prompt_index, usage, paused_run, events
                     FROM paused_answers WHERE conversation_id = ?1
                     ORDER BY created_at, message_id LIMIT 1",
                    params![conversation_id],
                    paused_from_row,
                )
                .optional()?)
        })
        .await
    }

    /// The answer no longer waits (decided or cancelled); `false` when it did not wait (any
    /// more): whoever deletes the row decides the answer, so servers sharing the database
    /// never run its calls twice.
    pub(crate) async fn delete_paused(&self, message_id: String) -> Result<bool, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.delete_paused(message_id)).await;
        }
        self.call(move |conn| {
            let n = conn.execute(
                "DELETE FROM paused_answers WHERE message_id = ?1",
                params![message_id],
            )?;
            Ok(n > 0)
        })
        .await
    }

    /// Give a conversation another title; its summary, or `None` when there is none.
    pub(crate) async fn rename(
        &self,
        id: String,
        title: String,
    ) -> Result<Option<ConversationSummary>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.rename(id, title)).await;
        }
        self.call(move |conn| {
            let n = conn.execute(
                "UPDATE conversations SET title = ?2 WHERE id = ?1",
                params![id, title],
            )?;
            if n == 0 {
                return Ok(None);
            }
            Ok(conn
                .query_row(
                    &format!("SELECT {SUMMARY_COLUMNS} FROM conversations c WHERE c.id = ?1"),
                    params![id],
                    summary_from_row,
                )
                .optional()?)
        })
        .await
    }

    /// Delete a conversation; `false` when there was none.
    pub(crate) async fn delete(&self, id: String) -> Result<bool, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.delete(id)).await;
        }
        self.call(move |conn| {
            let n = conn.execute("DELETE FROM conversations WHERE id = ?1", params![id])?;
            Ok(n > 0)
        })
        .await
    }

    // --- Answers run durably (checkpoints and event logs; see `chat.rs`) ---

    /// Save an answer's checkpoint and its log's events since the last one, in one
    /// transaction, unless another writer saved since `read`.
    pub(crate) fn save_chat_checkpoint(
        &self,
        checkpoint: ChatCheckpoint,
    ) -> futures::future::BoxFuture<'static, Result<CheckpointSaved, ServerError>> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.save_chat_checkpoint(checkpoint));
        }
        Box::pin(self.call(move |conn| {
            let c = checkpoint;
            let tx = conn.transaction()?;
            let found: u64 = tx
                .query_row(
                    "SELECT version FROM chat_runs WHERE message_id = ?1",
                    params![c.message_id],
                    |row| row.get::<_, i64>(0),
                )
                .optional()?
                .map_or(0, |v| u64::try_from(v).unwrap_or_default());
            if found != c.read {
                return Ok(CheckpointSaved::Stale(found));
            }
            let version = c.read + 1;
            tx.execute(
                "INSERT INTO chat_runs (message_id, conversation_id, prompt_index, version, status,
                     state, log_end, log_jumps, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (message_id) DO UPDATE SET version = ?4, status = ?5, state = ?6,
                     log_end = ?7, log_jumps = ?8, updated_at = ?9",
                params![
                    c.message_id,
                    c.conversation_id,
                    c.prompt_index as i64,
                    version as i64,
                    c.status,
                    c.state,
                    c.log_end as i64,
                    c.log_jumps,
                    now_millis()
                ],
            )?;
            insert_chat_events(&tx, &c.message_id, &c.events)?;
            tx.commit()?;
            Ok(CheckpointSaved::Saved(version))
        }))
    }

    /// An answer's last checkpoint: `(version, status, state)`.
    pub(crate) async fn chat_checkpoint(
        &self,
        message_id: String,
    ) -> Result<Option<(u64, String, String)>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.chat_checkpoint(message_id)).await;
        }
        self.call(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT version, status, state FROM chat_runs WHERE message_id = ?1",
                    params![message_id],
                    |row| {
                        Ok((
                            u64::try_from(row.get::<_, i64>(0)?).unwrap_or_default(),
                            row.get(1)?,
                            row.get(2)?,
                        ))
                    },
                )
                .optional()?)
        })
        .await
    }

    /// Every answer run durably: `(message id, version, status)`.
    pub(crate) async fn chat_checkpoints(&self) -> Result<Vec<(String, u64, String)>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.chat_checkpoints()).await;
        }
        self.call(|conn| {
            let mut stmt = conn
                .prepare("SELECT message_id, version, status FROM chat_runs ORDER BY message_id")?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get(0)?,
                    u64::try_from(row.get::<_, i64>(1)?).unwrap_or_default(),
                    row.get(2)?,
                ))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// The answer is over: keep the last events of its log and mark it finished (nothing
    /// when it never saved a checkpoint, or on a shared database when this server no longer
    /// holds it). The queued write goes ahead even when the returned future is dropped.
    pub(crate) fn finish_chat_run(
        &self,
        message_id: String,
        events: Vec<(usize, String)>,
        log_end: usize,
        log_jumps: String,
    ) -> futures::future::BoxFuture<'static, Result<(), ServerError>> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.finish_chat_run(message_id, events, log_end, log_jumps));
        }
        let _ = log_jumps;
        Box::pin(self.call(move |conn| {
            let tx = conn.transaction()?;
            let n = tx.execute(
                "UPDATE chat_runs SET finished = 1, log_end = ?2, state = '', updated_at = ?3
                 WHERE message_id = ?1",
                params![message_id, log_end as i64, now_millis()],
            )?;
            if n > 0 {
                insert_chat_events(&tx, &message_id, &events)?;
            }
            tx.commit()?;
            Ok(())
        }))
    }

    /// Every answer run durably with its stored log, oldest first.
    /// Not on a shared database, where the answers of servers still running are taken over
    /// only once their lease expires ([`Self::claim_expired`]).
    pub(crate) async fn chat_runs(&self) -> Result<Vec<ChatRunRow>, ServerError> {
        if self.is_shared() {
            return Ok(Vec::new());
        }
        self.call(|conn| {
            let mut stmt = conn.prepare(
                "SELECT message_id, conversation_id, prompt_index, status, finished, log_end,
                     log_jumps
                 FROM chat_runs ORDER BY updated_at, message_id",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(ChatRunRow {
                    message_id: row.get(0)?,
                    conversation_id: row.get(1)?,
                    prompt_index: usize::try_from(row.get::<_, i64>(2)?).unwrap_or_default(),
                    status: row.get(3)?,
                    finished: row.get::<_, i64>(4)? != 0,
                    log_end: usize::try_from(row.get::<_, i64>(5)?).unwrap_or_default(),
                    log_jumps: row.get(6)?,
                    events: Vec::new(),
                })
            })?;
            let mut runs = rows.collect::<Result<Vec<_>, _>>()?;
            let mut stmt = conn.prepare(
                "SELECT id, event FROM chat_run_events WHERE message_id = ?1 ORDER BY id",
            )?;
            for run in &mut runs {
                let rows = stmt.query_map(params![run.message_id], |row| {
                    Ok((
                        usize::try_from(row.get::<_, i64>(0)?).unwrap_or_default(),
                        row.get(1)?,
                    ))
                })?;
                run.events = rows.collect::<Result<Vec<_>, _>>()?;
            }
            Ok(runs)
        })
        .await
    }

    /// Forget an answer's checkpoint and log. The queued write goes ahead even when the
    /// returned future is dropped.
    pub(crate) fn delete_chat_run(
        &self,
        message_id: String,
    ) -> futures::future::BoxFuture<'static, Result<(), ServerError>> {
        // Queued now: a caller may drop the future.
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.delete_chat_run(message_id));
        }
        Box::pin(self.call(move |conn| {
            conn.execute(
                "DELETE FROM chat_runs WHERE message_id = ?1",
                params![message_id],
            )?;
            Ok(())
        }))
    }

    // --- On a shared database only: leases, and following answers other servers run ---

    /// Take the conversation for new answer `message_id` (see `PgStore::claim_chat`); always
    /// granted on SQLite, where this server's own registry keeps one answer per conversation.
    pub(crate) fn claim_chat(
        &self,
        message_id: String,
        conversation_id: String,
        prompt_index: usize,
    ) -> futures::future::BoxFuture<'static, Result<ClaimOutcome, ServerError>> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.claim_chat(message_id, conversation_id, prompt_index));
        }
        let _ = (message_id, conversation_id, prompt_index);
        Box::pin(async { Ok(ClaimOutcome::Claimed) })
    }

    /// Write a running answer's events between checkpoints (shared database only); `false`
    /// when this server no longer holds the answer.
    pub(crate) fn append_chat_events(
        &self,
        message_id: String,
        events: Vec<(usize, String)>,
        end: usize,
        jumps: String,
    ) -> futures::future::BoxFuture<'static, Result<bool, ServerError>> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.append_chat_events(message_id, events, end, jumps));
        }
        let _ = (message_id, events, end, jumps);
        Box::pin(async { Ok(true) })
    }

    /// An answer's stored log from event id `from` on (shared database only).
    pub(crate) async fn chat_log(
        &self,
        message_id: String,
        from: usize,
    ) -> Result<Option<ChatLog>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.chat_log(message_id, from)).await;
        }
        let _ = (message_id, from);
        Ok(None)
    }

    /// The answer running or waiting in a conversation on any server (shared database only).
    pub(crate) async fn active_chat(
        &self,
        conversation_id: String,
    ) -> Result<Option<String>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.active_chat(conversation_id)).await;
        }
        let _ = conversation_id;
        Ok(None)
    }

    /// This server runs the answer from now on (shared database only).
    pub(crate) async fn own_chat_run(&self, message_id: String) -> Result<(), ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.own_chat_run(message_id)).await;
        }
        let _ = message_id;
        Ok(())
    }

    /// Renew this server's leases (shared database only); how many it holds, and those a
    /// cancel was asked for.
    pub(crate) async fn heartbeat(&self) -> Result<(u64, Vec<String>), ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.heartbeat()).await;
        }
        Ok((0, Vec::new()))
    }

    /// Hand over the answers this server holds to the others (shared database only): their
    /// leases end now and the others are told; how many there were.
    pub(crate) async fn release_leases(&self) -> Result<u64, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.release_leases()).await;
        }
        Ok(0)
    }

    /// With a shared database, the message ids of answers a stopping server handed over.
    pub(crate) fn released_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        #[cfg(feature = "postgres")]
        return self.pg.as_ref().map(postgres::PgStore::released);
        #[cfg(not(feature = "postgres"))]
        None
    }

    /// Ask the server running an answer to cancel it (shared database only); `false` when
    /// it is not running.
    pub(crate) async fn request_cancel(&self, message_id: String) -> Result<bool, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.request_cancel(message_id)).await;
        }
        let _ = message_id;
        Ok(false)
    }

    /// With a shared database, the message ids of answers a cancel was asked for.
    pub(crate) fn cancelled_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        #[cfg(feature = "postgres")]
        return self.pg.as_ref().map(postgres::PgStore::cancelled);
        #[cfg(not(feature = "postgres"))]
        None
    }

    /// Take over answers whose lease expired (shared database only).
    pub(crate) async fn claim_expired(&self, limit: i64) -> Result<Vec<ChatRunRow>, ServerError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return self.named(pg.claim_expired(limit)).await;
        }
        let _ = limit;
        Ok(Vec::new())
    }
}

/// Add `events` (`(id, JSON)`) to an answer's stored log; an id stored already is kept.
fn insert_chat_events(
    tx: &rusqlite::Transaction<'_>,
    message_id: &str,
    events: &[(usize, String)],
) -> Result<(), ServerError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT OR IGNORE INTO chat_run_events (message_id, id, event) VALUES (?1, ?2, ?3)",
    )?;
    for (id, event) in events {
        insert.execute(params![message_id, *id as i64, event])?;
    }
    Ok(())
}

/// The title of a conversation: the start of its first prompt, on one line; a long prompt is
/// cut at the last word boundary that fits (inside a word only when that would leave less than
/// half), without the punctuation before the cut, and ends with an ellipsis.
pub(crate) fn title_from(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_CHARS {
        return line;
    }
    let kept: String = line.chars().take(MAX_CHARS - 1).collect();
    let next = line.chars().nth(MAX_CHARS - 1);
    let mut title = match kept.rfind(' ') {
        // The cut falls inside a word: end at the space before it.
        Some(space) if next != Some(' ') && kept[..space].chars().count() >= MAX_CHARS / 2 => {
            kept[..space].to_owned()
        }
        _ => kept,
    };
    let end = title
        .trim_end_matches(|c: char| {
            c.is_whitespace() || matches!(c, ',' | ';' | ':' | '.' | '-' | '–' | '—')
        })
        .len();
    title.truncate(end);
    title.push('…');
    title
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stores the suite runs on: SQLite in memory, and a fresh Postgres database when the
    /// build has Postgres and `AGENTLOOP_TEST_POSTGRES` names a server (a skip notice when not).
    async fn backends(test: &str) -> Vec<Store> {
        let sqlite = Store::open(Database::InMemory).await.unwrap();
        #[cfg(feature = "postgres")]
        if let Some(url) = postgres::test_database(test).await {
            let postgres = Store::open(Database::Postgres(url)).await.unwrap();
            return vec![sqlite, postgres];
        }
        #[cfg(not(feature = "postgres"))]
        let _ = test;
        vec![sqlite]
    }

    #[tokio::test]
    async fn history_round_trips_and_tails_are_replaced() {
        for store in backends("history_round_trips_and_tails_are_replaced").await {
            history_round_trips(store).await;
        }
    }

    async fn history_round_trips(store: Store) {
        store.create("c1".into(), "Hello".into()).await.unwrap();
        let history = vec![Message::user("a"), Message::assistant("b")];
        store.save_tail("c1".into(), 0, history).await.unwrap();
        store
            .save_tail(
                "c1".into(),
                1,
                vec![Message::assistant("c"), Message::user("d")],
            )
            .await
            .unwrap();
        let stored = store.get("c1".into()).await.unwrap().unwrap();
        assert_eq!(
            stored.messages,
            vec![
                Message::user("a"),
                Message::assistant("c"),
                Message::user("d")
            ]
        );
        assert_eq!(stored.summary.message_count, 3);
        assert!(store.delete("c1".into()).await.unwrap());
        assert!(!store.delete("c1".into()).await.unwrap());
        assert_eq!(store.get("c1".into()).await.unwrap(), None);
    }

    #[tokio::test]
    async fn answers_are_replaced_and_go_with_their_prompts() {
        for store in backends("answers_are_replaced_and_go_with_their_prompts").await {
            store.create("c1".into(), "Hi".into()).await.unwrap();
            let history = vec![
                Message::user("a"),
                Message::assistant("b"),
                Message::user("c"),
                Message::assistant("d"),
            ];
            store.save_tail("c1".into(), 0, history).await.unwrap();
            let usage = |n| Usage {
                input_tokens: n,
                output_tokens: n + 1,
                ..Usage::default()
            };
            let cost = Cost {
                total: agentloop::cost::Decimal::new(75, 2),
                input: agentloop::cost::Decimal::new(25, 2),
                output: agentloop::cost::Decimal::new(5, 1),
                ..Cost::default()
            };
            store
                .save_answer("c1".into(), 0, "end_turn".into(), usage(1), None)
                .await
                .unwrap();
            // Regenerated: the second answer to the same prompt replaces the first.
            store
                .save_answer("c1".into(), 0, "interrupted".into(), usage(5), Some(cost))
                .await
                .unwrap();
            store
                .save_answer("c1".into(), 2, "end_turn".into(), usage(7), None)
                .await
                .unwrap();
            let answers = store.get("c1".into()).await.unwrap().unwrap().answers;
            assert_eq!(
                answers,
                vec![
                    AnswerRecord {
                        prompt_index: 0,
                        stop_reason: "interrupted".into(),
                        usage: usage(5),
                        cost: Some(cost),
                    },
                    AnswerRecord {
                        prompt_index: 2,
                        stop_reason: "end_turn".into(),
                        usage: usage(7),
                        cost: None,
                    },
                ]
            );
            // Replacing the history from the second prompt on drops its answer.
            store
                .save_tail("c1".into(), 2, vec![Message::user("e")])
                .await
                .unwrap();
            let stored = store.get("c1".into()).await.unwrap().unwrap();
            assert_eq!(stored.answers.len(), 1);
            assert_eq!(stored.messages.len(), 3);
        }
    }

    #[tokio::test]
    async fn paused_answers_are_kept_replaced_and_forgotten() {
        for store in backends("paused_answers_are_kept_replaced_and_forgotten").await {
            store.create("c1".into(), "Hi".into()).await.unwrap();
            store.create("c2".into(), "Hey".into()).await.unwrap();
            let row = |id: &str, events: &str| PausedRow {
                message_id: id.into(),
                conversation_id: if id == "m1" { "c1" } else { "c2" }.into(),
                prompt_index: 2,
                usage: "{}".into(),
                paused_run: "{\"paused\":true}".into(),
                events: events.into(),
            };
            store.save_paused(row("m1", "[1]")).await.unwrap();
            store.save_paused(row("m2", "[]")).await.unwrap();
            store.save_paused(row("m1", "[1,2]")).await.unwrap();
            let mut paused = store.paused().await.unwrap();
            paused.sort_by(|a, b| a.message_id.cmp(&b.message_id));
            assert_eq!(paused, vec![row("m1", "[1,2]"), row("m2", "[]")]);
            assert_eq!(
                store.paused_answer("m1".into()).await.unwrap(),
                Some(row("m1", "[1,2]"))
            );
            assert_eq!(
                store.paused_in("c1".into()).await.unwrap(),
                Some(row("m1", "[1,2]"))
            );
            assert_eq!(store.paused_in("c3".into()).await.unwrap(), None);
            assert!(store.delete_paused("m1".into()).await.unwrap());
            // Taken once: a second server deciding the same answer finds it gone.
            assert!(!store.delete_paused("m1".into()).await.unwrap());
            assert_eq!(store.paused_answer("m1".into()).await.unwrap(), None);
            assert_eq!(store.paused().await.unwrap(), vec![row("m2", "[]")]);
            // Deleting the conversation deletes what waited in it.
            assert!(store.delete("c2".into()).await.unwrap());
            assert_eq!(store.paused().await.unwrap(), vec![]);
        }
    }

    #[tokio::test]
    async fn conversations_are_listed_newest_first_and_renamed() {
        for store in backends("conversations_are_listed_newest_first_and_renamed").await {
            store.create("c1".into(), "One".into()).await.unwrap();
            store.create("c2".into(), "Two".into()).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            store
                .save_tail("c1".into(), 0, vec![Message::user("a")])
                .await
                .unwrap();
            let ids: Vec<_> = store
                .list()
                .await
                .unwrap()
                .into_iter()
                .map(|c| (c.id, c.title, c.message_count))
                .collect();
            assert_eq!(
                ids,
                vec![
                    ("c1".into(), "One".into(), 1),
                    ("c2".into(), "Two".into(), 0)
                ]
            );
            let renamed = store
                .rename("c2".into(), "Deux".into())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (renamed.id.as_str(), renamed.title.as_str()),
                ("c2", "Deux")
            );
            assert_eq!(
                store.get("c2".into()).await.unwrap().unwrap().summary.title,
                "Deux"
            );
            assert_eq!(store.rename("c3".into(), "x".into()).await.unwrap(), None);
        }
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_postgres_url_is_refused_by_a_build_without_postgres() {
        let url = "postgres://agent:hunter2@127.0.0.1:1/chats";
        let Err(error) = Store::open(Database::Postgres(url.into())).await else {
            panic!("opened Postgres without the feature");
        };
        assert_eq!(
            error.to_string(),
            "database error: Postgres at `postgres://agent:<redacted>@127.0.0.1:1/chats`: this \
             server was built without Postgres support; build agentloop-server (or agentloop-cli) \
             with the `postgres` feature, or store conversations in an SQLite file"
        );
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_errors_name_the_server_without_its_password() {
        // Nothing listens on port 1 of loopback.
        let url = "postgres://agent:hunter2@127.0.0.1:1/chats";
        let Err(error) = Store::open(Database::Postgres(url.into())).await else {
            panic!("connected to port 1");
        };
        let message = error.to_string();
        assert!(
            message.starts_with(
                "database error: Postgres at `postgres://agent:<redacted>@127.0.0.1:1/chats`: \
                 cannot connect (error connecting to server: Connection refused"
            ),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
        assert!(
            !format!("{:?}", Database::Postgres(url.into())).contains("hunter2"),
            "Debug shows the password"
        );
    }

    /// Postgres restarted (here: the server's connection terminated): the call that finds the
    /// connection gone may fail, the next one connects again.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_connects_again_after_losing_its_connection() {
        let Some(url) =
            postgres::test_database("postgres_connects_again_after_losing_its_connection").await
        else {
            return;
        };
        let store = Store::open(Database::Postgres(url.clone())).await.unwrap();
        store.create("c1".into(), "x".into()).await.unwrap();
        let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let ended = admin
            .query(
                "WITH others AS MATERIALIZED (
                     SELECT pid FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid())
                 SELECT pid, pg_terminate_backend(pid) FROM others",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(ended.len(), 2, "the store's connection and its listener's");
        // Termination is a signal the backends act on later: wait until they are gone, or the
        // first call below could still be answered by the old connection.
        for _ in 0..500 {
            let pids: Vec<i32> = ended.iter().map(|row| row.get(0)).collect();
            let left: i64 = admin
                .query_one(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                    &[&pids],
                )
                .await
                .unwrap()
                .get(0);
            if left == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Postgres's notice of the termination, or the closed connection, whichever the call
        // meets first.
        if let Err(error) = store.list().await {
            let message = error.to_string();
            assert!(
                message.contains("terminating connection")
                    || message.contains("the connection to Postgres was lost"),
                "{message}"
            );
        }
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
    }

    /// Servers starting at once on a fresh database: one migrates, the others wait for it and
    /// find the schema done; a schema newer than the server knows is refused.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_migrations_run_once_when_servers_start_together() {
        let Some(url) =
            postgres::test_database("postgres_migrations_run_once_when_servers_start_together")
                .await
        else {
            return;
        };
        let open = || Store::open(Database::Postgres(url.clone()));
        let (a, b, c) = tokio::join!(open(), open(), open());
        let (a, b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
        a.create("c1".into(), "x".into()).await.unwrap();
        assert_eq!(b.list().await.unwrap().len(), 1);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let versions: Vec<i32> = client
            .query("SELECT version FROM agentloop_server_migrations", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(versions, vec![1, 2]);
        client
            .batch_execute("INSERT INTO agentloop_server_migrations (version) VALUES (99)")
            .await
            .unwrap();
        let Err(error) = open().await else {
            panic!("a newer schema was accepted");
        };
        assert!(
            error
                .to_string()
                .contains("has schema version 99, newer than this server knows (2)"),
            "{error}"
        );
    }

    #[cfg(feature = "postgres")]
    fn checkpoint(id: &str, read: u64, events: &[usize], log_end: usize) -> ChatCheckpoint {
        ChatCheckpoint {
            message_id: id.into(),
            conversation_id: "c1".into(),
            prompt_index: 0,
            read,
            status: "running".into(),
            state: format!("{{\"v\":{read}}}"),
            events: events
                .iter()
                .map(|i| (*i, format!("{{\"e\":{i}}}")))
                .collect(),
            log_end,
            log_jumps: "[]".into(),
        }
    }

    /// Two servers on one database: an answer belongs to the server holding its lease; when
    /// the lease expires another takes it over, its log cut back to its checkpoint, and the
    /// first server's late writes are refused. One unfinished answer per conversation holds
    /// across servers.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_answers_are_leased_and_a_stale_owner_cannot_write() {
        let Some(url) =
            postgres::test_database("postgres_answers_are_leased_and_a_stale_owner_cannot_write")
                .await
        else {
            return;
        };
        let lease = std::time::Duration::from_millis(300);
        let a = Store::open_leased(Database::Postgres(url.clone()), lease)
            .await
            .unwrap();
        let b = Store::open_leased(Database::Postgres(url), lease)
            .await
            .unwrap();
        a.create("c1".into(), "x".into()).await.unwrap();
        assert_eq!(
            a.claim_chat("m1".into(), "c1".into(), 0).await.unwrap(),
            ClaimOutcome::Claimed
        );
        // The conversation is busy through every server.
        assert_eq!(
            b.claim_chat("m2".into(), "c1".into(), 0).await.unwrap(),
            ClaimOutcome::Busy("m1".into())
        );
        assert_eq!(b.active_chat("c1".into()).await.unwrap(), Some("m1".into()));
        // No checkpoint yet: a new durable run finds none.
        assert_eq!(a.chat_checkpoint("m1".into()).await.unwrap(), None);
        assert_eq!(
            a.save_chat_checkpoint(checkpoint("m1", 0, &[0, 1], 2))
                .await
                .unwrap(),
            CheckpointSaved::Saved(1)
        );
        // Events between checkpoints, for servers following the answer.
        assert!(
            a.append_chat_events("m1".into(), vec![(2, "{\"e\":2}".into())], 3, "[]".into())
                .await
                .unwrap()
        );
        let log = b.chat_log("m1".into(), 1).await.unwrap().unwrap();
        assert_eq!((log.end, log.finished), (3, false));
        assert_eq!(
            log.events.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [1, 2]
        );
        // Renewed, the lease holds: nothing to take over.
        assert_eq!(a.heartbeat().await.unwrap(), (1, vec![]));
        assert!(b.claim_expired(16).await.unwrap().is_empty());
        // A stalls past its lease: B takes the answer over, cut back to the checkpoint.
        tokio::time::sleep(lease + std::time::Duration::from_millis(100)).await;
        let claimed = b.claim_expired(16).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let row = &claimed[0];
        assert_eq!((row.message_id.as_str(), row.log_end), ("m1", 2));
        assert_eq!(
            row.events.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(
            b.claim_expired(16).await.unwrap().is_empty(),
            "claimed once"
        );
        let log = b.chat_log("m1".into(), 0).await.unwrap().unwrap();
        assert_eq!((log.end, log.events.len()), (2, 2));
        // A's late writes are refused, and change nothing.
        assert_eq!(
            a.save_chat_checkpoint(checkpoint("m1", 1, &[2, 3], 4))
                .await
                .unwrap(),
            CheckpointSaved::Lost
        );
        assert!(
            !a.append_chat_events("m1".into(), vec![(3, "{}".into())], 4, "[]".into())
                .await
                .unwrap()
        );
        a.finish_chat_run("m1".into(), vec![(5, "{}".into())], 6, "[]".into())
            .await
            .unwrap();
        assert_eq!(a.heartbeat().await.unwrap(), (0, vec![]));
        let log = b.chat_log("m1".into(), 0).await.unwrap().unwrap();
        assert_eq!((log.end, log.events.len(), log.finished), (2, 2, false));
        assert_eq!(
            b.chat_checkpoint("m1".into()).await.unwrap(),
            Some((1, "running".into(), "{\"v\":0}".into()))
        );
        // B goes on from the checkpoint A saved, and finishes.
        assert_eq!(
            b.save_chat_checkpoint(checkpoint("m1", 1, &[1_000_000_000], 1_000_000_001))
                .await
                .unwrap(),
            CheckpointSaved::Saved(2)
        );
        b.finish_chat_run("m1".into(), Vec::new(), 1_000_000_001, "[]".into())
            .await
            .unwrap();
        let log = a.chat_log("m1".into(), 0).await.unwrap().unwrap();
        assert!(log.finished);
        assert_eq!(a.active_chat("c1".into()).await.unwrap(), None);
        // The conversation is free again.
        assert_eq!(
            a.claim_chat("m3".into(), "c1".into(), 2).await.unwrap(),
            ClaimOutcome::Claimed
        );
        a.delete_chat_run("m1".into()).await.unwrap();
        assert!(b.chat_log("m1".into(), 0).await.unwrap().is_none());
    }

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(
            title_from("  What is\n the weather? "),
            "What is the weather?"
        );
        let long = "x".repeat(200);
        assert_eq!(title_from(&long), format!("{}…", "x".repeat(59)));
    }

    #[test]
    fn long_titles_end_at_a_word_boundary_with_an_ellipsis() {
        let prompt = "Could you please explain how the borrow checker decides when a mutable \
                      reference may be taken, with examples?";
        assert_eq!(
            title_from(prompt),
            "Could you please explain how the borrow checker decides…"
        );
        // Trailing punctuation before the cut goes, so the title does not end in `,…`.
        assert_eq!(
            title_from(
                "Rewrite the introduction of my essay on climate policy, tighten it, and keep \
                 the tone formal"
            ),
            "Rewrite the introduction of my essay on climate policy…"
        );
        // A cut that falls between two words keeps both.
        assert_eq!(
            title_from(
                "Summarize these notes, then list every action item with its owner and date"
            ),
            "Summarize these notes, then list every action item with its…"
        );
        // One long word is cut inside it.
        assert_eq!(
            title_from(&format!("see {}", "y".repeat(100))),
            format!("see {}…", "y".repeat(55))
        );
        assert_eq!(title_from("Exactly short enough."), "Exactly short enough.");
    }
}
