//! A chat's stream starts without waiting for the database, and a busy database does not make
//! the server spawn a thread per query.

mod common;

use std::time::Duration;

use agentloop::Agent;
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn};
use common::{EventReader, TestServer, client};
use serde_json::json;

fn config(db: &std::path::Path) -> ServerConfig {
    let model = ScriptedModel::from_fn(|_, _| Turn::text("Hello there."));
    ServerConfig::new(Agent::builder(model).build()).database(db)
}

/// Another connection holding the write lock: the server's writes wait for it.
fn hold_write_lock(db: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    conn
}

fn process_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_stream_starts_while_the_database_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let server = TestServer::start(config(&db)).await;
    let lock = hold_write_lock(&db);

    // The lock is held until the headers are in: a server that waited for the database would
    // never send them, so the bound only has to outlast a loaded machine.
    let response = tokio::time::timeout(
        Duration::from_secs(20),
        client()
            .post(server.url("/v1/chat"))
            .json(&json!({"message": "Hi"}))
            .send(),
    )
    .await
    .expect("the response headers arrive while the database is busy")
    .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let first = reader.next().await.unwrap();
    assert_eq!(first.event, "message_start");
    let conversation_id = first.data["conversation_id"].as_str().unwrap().to_owned();

    drop(lock);
    let rest = reader.rest().await;
    assert_eq!(
        rest.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        ["text_delta", "text_delta", "text_delta", "message_end"],
        "{rest:?}"
    );
    let stored = server
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .expect("the conversation was saved");
    assert_eq!(stored.messages.len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_chats_on_a_busy_database_do_not_take_a_thread_each() {
    const CHATS: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let server = TestServer::start(config(&db)).await;
    let lock = hold_write_lock(&db);

    let mut chats = tokio::task::JoinSet::new();
    for i in 0..CHATS {
        let url = server.url("/v1/chat");
        chats.spawn(async move {
            let response = client()
                .post(url)
                .json(&json!({"message": format!("Hi {i}")}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response
        });
    }
    // Every chat has started (its headers are in) while the database is held; the threads
    // are counted meanwhile.
    let mut responses = Vec::new();
    let mut most = process_threads();
    // The database stays locked meanwhile: a generous bound, as above.
    let collected = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(response) = chats.join_next().await {
            responses.push(response.unwrap());
            most = most.max(process_threads());
        }
    })
    .await;
    most = most.max(process_threads());
    assert!(
        most < 40,
        "{most} threads with {CHATS} chats waiting on the database"
    );
    collected.expect("every chat's headers arrive while the database is busy");

    drop(lock);
    for response in responses {
        let events = EventReader::new(response).rest().await;
        assert_eq!(
            events.last().map(|e| e.event.as_str()),
            Some("message_end"),
            "{events:?}"
        );
    }
    assert_eq!(server.state.conversations().await.unwrap().len(), CHATS);
    server.stop().await;
}
