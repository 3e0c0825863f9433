//! `agentloop run --db PATH --run-id ID` and `agentloop runs list|show|resume` (issue 39 item 6):
//! durable runs in a SQLite file, process by process.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloop"));
    command.env_remove("AGENTLOOP_MODEL").env("NO_COLOR", "1");
    command
}

fn run(args: &[&str], db: &Path) -> Output {
    bin()
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("the agentloop binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            text(&output.stdout),
            text(&output.stderr)
        )
    })
}

#[test]
fn a_durable_run_is_listed_shown_and_resumed_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");

    let started = run(&["run", "--run-id", "r1", "--json", "Hello"], &db);
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    let started = json(&started);
    assert_eq!(started["stop_reason"], "end_turn");

    let listed = run(&["runs", "list"], &db);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    // The mock model calls its demo tool, then answers: saved at the start, the call with
    // the tool's start, its outcome with the step's close, and the answer.
    assert_eq!(text(&listed.stdout), "r1\tdone\t4\n");

    let shown = run(&["runs", "show", "r1"], &db);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let shown = json(&shown);
    assert_eq!(shown["run_id"], "r1");
    assert_eq!(shown["status"], "done");
    assert_eq!(shown["version"], 4);
    assert_eq!(shown["steps"], 2);
    assert_eq!(shown["messages"][0]["content"][0]["text"], "Hello");
    assert_eq!(shown["messages"].as_array().unwrap().len(), 4);

    let resumed = run(&["runs", "resume", "r1", "--json"], &db);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let resumed = json(&resumed);
    assert_eq!(resumed["text"], started["text"]);
    assert_eq!(resumed["stop_reason"], "end_turn");
}

#[test]
fn a_run_id_is_taken_once_and_an_unknown_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    assert_eq!(
        run(&["run", "--run-id", "r1", "Hello"], &db).status.code(),
        Some(0)
    );

    let again = run(&["run", "--run-id", "r1", "Hello"], &db);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("the checkpoint of run `r1` moved on"),
        "{}",
        text(&again.stderr)
    );

    let missing = run(&["runs", "show", "nope"], &db);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        "error: no run `nope` in the store; start it with Agent::run_durable\n"
    );
    let missing = run(&["runs", "resume", "nope"], &db);
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn run_id_and_db_go_together() {
    let out = bin()
        .args(["run", "--run-id", "r1", "Hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--db <PATH>"),
        "{}",
        text(&out.stderr)
    );
}
