//! Conversation storage in SQLite: conversations, and their histories as canonical agentloop
//! messages (JSON), one row per message.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use agentloop::Message;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::config::Database;
use crate::error::ServerError;

/// Schema changes, applied in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &["CREATE TABLE conversations (
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
    CREATE INDEX conversations_by_update ON conversations(updated_at DESC);"];

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
}

/// The database. Calls run on tokio's blocking pool (so they never stall the runtime, and
/// paused-clock tests do not jump ahead while one runs) and are serialized by the connection's
/// lock; a chat awaits each of its writes, so they land in the order they were made.
#[derive(Clone)]
pub(crate) struct Store {
    conn: Arc<Mutex<Connection>>,
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

fn open_connection(database: &Database) -> Result<Connection, ServerError> {
    let conn = match database {
        Database::File(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                && !parent.is_dir()
            {
                return Err(ServerError::database(format!(
                    "the directory of `{}` does not exist",
                    path.display()
                )));
            }
            let conn = Connection::open(path).map_err(|e| {
                ServerError::database(format!("cannot open `{}`: {e}", path.display()))
            })?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn
        }
        Database::InMemory => Connection::open_in_memory()?,
    };
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, name: &str) -> Result<(), ServerError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let version = usize::try_from(version).unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        return Err(ServerError::database(format!(
            "{name} has schema version {version}, newer than this server knows ({}); use a newer agentloop",
            MIGRATIONS.len()
        )));
    }
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
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

const SUMMARY_COLUMNS: &str = "c.id, c.title, c.created_at, c.updated_at,
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id)";

impl Store {
    /// Open (creating and migrating as needed).
    pub(crate) async fn open(database: Database) -> Result<Self, ServerError> {
        let name = match &database {
            Database::File(path) => format!("`{}`", path.display()),
            Database::InMemory => "the in-memory database".to_owned(),
        };
        let conn = tokio::task::spawn_blocking(move || {
            let mut conn = open_connection(&database)?;
            migrate(&mut conn, &name)?;
            Ok::<_, ServerError>(conn)
        })
        .await
        .map_err(|e| ServerError::database(format!("opening the database failed: {e}")))??;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, ServerError> + Send + 'static,
    ) -> Result<R, ServerError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            // A panic mid-call rolled its transaction back; the connection is still usable.
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await
        .map_err(|e| ServerError::database(format!("a database call failed: {e}")))?
    }

    /// Create an empty conversation.
    pub(crate) async fn create(&self, id: String, title: String) -> Result<(), ServerError> {
        self.call(move |conn| {
            let now = now_millis();
            conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)",
                params![id, title, now],
            )?;
            Ok(())
        })
        .await
    }

    /// All conversations, most recently changed first.
    pub(crate) async fn list(&self) -> Result<Vec<ConversationSummary>, ServerError> {
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
            Ok(Some(StoredConversation { summary, messages }))
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
        self.call(move |conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "DELETE FROM messages WHERE conversation_id = ?1 AND position >= ?2",
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

    /// Delete a conversation; `false` when there was none.
    pub(crate) async fn delete(&self, id: String) -> Result<bool, ServerError> {
        self.call(move |conn| {
            let n = conn.execute("DELETE FROM conversations WHERE id = ?1", params![id])?;
            Ok(n > 0)
        })
        .await
    }
}

/// The title of a conversation: the start of its first prompt, on one line.
pub(crate) fn title_from(text: &str) -> String {
    const MAX_CHARS: usize = 80;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_CHARS {
        return line;
    }
    let mut title: String = line.chars().take(MAX_CHARS - 1).collect();
    title.push('…');
    title
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn history_round_trips_and_tails_are_replaced() {
        let store = Store::open(Database::InMemory).await.unwrap();
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

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(
            title_from("  What is\n the weather? "),
            "What is the weather?"
        );
        let long = "x".repeat(200);
        assert_eq!(title_from(&long).chars().count(), 80);
        assert!(title_from(&long).ends_with('…'));
    }
}
