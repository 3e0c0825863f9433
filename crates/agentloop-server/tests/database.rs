//! The database at start-up: an unusable file or directory is refused at open with an error
//! naming the path and the cause, a failed start leaves no new database behind, and new
//! database files are private to their owner.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentloop::Agent;
use agentloop_server::{AppState, Server, ServerConfig, ServerError};
use agentloop_testkit::{ScriptedModel, Turn};

fn config(db: &Path) -> ServerConfig {
    let model = ScriptedModel::from_fn(|_, _| Turn::text("Hello."));
    ServerConfig::new(Agent::builder(model).build()).database(db)
}

async fn open_error(db: &Path) -> String {
    match AppState::new(config(db)).await {
        Ok(_) => panic!("`{}` opened, but it should have been refused", db.display()),
        Err(e @ ServerError::Database { .. }) => e.to_string(),
        Err(e) => panic!("expected a database error, got: {e}"),
    }
}

/// Create a database with the server's schema and `rows` conversations, then close it.
async fn make_database(db: &Path, rows: usize) {
    drop(AppState::new(config(db)).await.unwrap());
    let conn = rusqlite::Connection::open(db).unwrap();
    for i in 0..rows {
        conn.execute(
            "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?1, ?2, 0, 0)",
            rusqlite::params![
                format!("conv_{i:05}"),
                "a title long enough to fill pages ".repeat(8)
            ],
        )
        .unwrap();
    }
    drop(conn);
    // The server's connection closes in its worker, just after the state is dropped; the last
    // connection to close checkpoints the database and removes its `-wal` and `-shm`.
    let wal = db.with_extension("db-wal");
    for _ in 0..500 {
        if !wal.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{} is still there", wal.display());
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|ids| ids.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Permission bits do not stop root. When the tests run as root, run `test` again in a child
/// process as the unprivileged user `nobody` (returns `false`: the caller skips its body);
/// otherwise returns `true` and the caller runs the test itself.
fn run_unprivileged(test: &str) -> bool {
    if !is_root() {
        return true;
    }
    use std::os::unix::process::CommandExt;
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("TMPDIR", "/tmp")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("the test binary runs as nobody");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test} as nobody failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    false
}

#[tokio::test]
async fn a_read_only_database_file_is_refused_at_open() {
    if !run_unprivileged("a_read_only_database_file_is_refused_at_open") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    make_database(&db, 1).await;
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    let message = open_error(&db).await;
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(message.contains("read-only"), "{message}");
}

#[tokio::test]
async fn a_database_in_a_read_only_directory_is_refused_naming_the_path() {
    if !run_unprivileged("a_database_in_a_read_only_directory_is_refused_naming_the_path") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("chats.db");
    make_database(&db, 1).await;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
    let message = open_error(&db).await;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(message.contains("not writable"), "{message}");

    // A new database in a read-only directory, likewise.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
    let new = data.join("new.db");
    let message = open_error(&new).await;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(message.contains(&new.display().to_string()), "{message}");
    assert!(message.contains("not writable"), "{message}");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_with_the_path_and_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.txt");
    std::fs::write(&db, "These are my notes, not a database.\n".repeat(200)).unwrap();
    let message = open_error(&db).await;
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(message.contains("not an SQLite database"), "{message}");
    assert!(message.contains("another database file"), "{message}");
    // It was left alone.
    assert!(
        std::fs::read_to_string(&db)
            .unwrap()
            .starts_with("These are my notes")
    );
}

#[tokio::test]
async fn a_database_corrupted_mid_way_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    make_database(&db, 400).await;
    let mut bytes = std::fs::read(&db).unwrap();
    let pages = bytes.len() / 4096;
    assert!(pages > 10, "the database has {pages} pages");
    // Overwrite a page in the middle (the first page, with the schema, stays intact).
    let middle = (pages / 2) * 4096;
    for b in &mut bytes[middle..middle + 4096] {
        *b = 0xA5;
    }
    std::fs::write(&db, bytes).unwrap();
    let message = open_error(&db).await;
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(message.contains("damaged"), "{message}");
    assert!(message.contains(".recover"), "{message}");
}

#[tokio::test]
async fn a_start_on_a_port_in_use_leaves_no_database_behind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let error = Server::bind(addr, config(&db)).await.unwrap_err();
    assert!(
        matches!(error, ServerError::Serve { .. }),
        "expected a bind error, got: {error}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the failed start left {left:?}");
}

#[tokio::test]
async fn new_database_files_are_private_to_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let state = AppState::new(config(&db)).await.unwrap();
    // A chat's worth of activity, so the WAL files exist.
    assert!(state.conversations().await.unwrap().is_empty());
    let wal = dir.path().join("chats.db-wal");
    let shm = dir.path().join("chats.db-shm");
    for path in [&db, &wal, &shm] {
        let mode = std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "{} has mode {:o}",
            path.display(),
            mode & 0o777
        );
    }
    drop(state);
}
