//! `agentloop runs list|show|resume` and the durable side of `agentloop run --db`: runs
//! checkpointed in a SQLite file (`agentloop::run::SqliteStore`).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use agentloop::run::{RunResult, RunStore, SqliteStore};
use serde_json::json;

use crate::cli::ResumeArgs;
use crate::{display, exit, model, output};

/// The store in `db`.
pub fn open(db: &Path) -> Result<SqliteStore, String> {
    SqliteStore::open(db).map_err(|e| e.to_string())
}

/// Print a durable run's result (its answer, or the `run --json` document) and pick the exit
/// code.
pub fn finish(
    result: &RunResult,
    json: bool,
    timeout: Option<Duration>,
) -> Result<ExitCode, String> {
    if let Some(sentence) = display::timeout_sentence(result, timeout) {
        eprintln!("{sentence}");
    }
    if json {
        let doc = output::run_json(result);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        if let Some(error) = &result.error {
            eprintln!("error: {error}");
        }
        for pending in &result.pending_approvals {
            eprintln!(
                "awaiting approval: {} ({}): {}",
                pending.tool, pending.id, pending.reason
            );
        }
        println!("{}", result.text());
    }
    Ok(exit::for_run(result))
}

/// `agentloop runs list`.
pub async fn list(db: &Path) -> Result<ExitCode, String> {
    let runs = open(db)?.list().await.map_err(|e| e.to_string())?;
    for run in runs {
        println!("{}\t{}\t{}", run.run_id, run.status, run.version);
    }
    Ok(ExitCode::from(exit::OK))
}

/// `agentloop runs show`.
pub async fn show(id: &str, db: &Path) -> Result<ExitCode, String> {
    let checkpoint = open(db)?
        .load(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            agentloop::Error::RunNotFound {
                run_id: id.to_owned(),
            }
            .to_string()
        })?;
    let machine = checkpoint.machine().map_err(|e| e.to_string())?;
    let doc = json!({
        "run_id": id,
        "status": checkpoint.status.as_str(),
        "version": checkpoint.version,
        "steps": machine.steps().len(),
        "messages": machine.messages(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
    );
    Ok(ExitCode::from(exit::OK))
}

/// `agentloop runs resume`.
pub async fn resume(args: ResumeArgs) -> Result<ExitCode, String> {
    let store = open(&args.db)?;
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    let agent = model::agent(&args.model, &resolved)?;
    let result = agent
        .resume_run(args.id, &store)
        .await
        .map_err(|e| e.to_string())?;
    finish(&result, args.json, args.model.timeout)
}
