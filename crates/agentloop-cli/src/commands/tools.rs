//! `agentloop tools list|validate DIR`.

use std::path::Path;
use std::process::ExitCode;

use agentloop::registry::{Registry, tool_files};

/// Load every descriptor under `dir` into a registry.
pub fn load(dir: &Path) -> Result<Registry, String> {
    Registry::load_dir(dir).map_err(|e| e.to_string())
}

/// Print one line per tool: name, mode, description.
pub fn list(dir: &Path) -> Result<ExitCode, String> {
    let registry = load(dir)?;
    let mut descriptors = registry.descriptors();
    descriptors.sort_by(|a, b| a.name.cmp(&b.name));
    for d in descriptors {
        println!("{}\t{}\t{}", d.name, d.mode, d.description);
    }
    Ok(ExitCode::SUCCESS)
}

/// Check every file on its own (so all broken files are reported), then the directory as a
/// whole (duplicate names across files).
pub fn validate(dir: &Path) -> Result<ExitCode, String> {
    let files = tool_files(dir).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    for file in &files {
        if let Err(e) = Registry::from_file(file) {
            problems.push(e.to_string());
        }
    }
    if problems.is_empty()
        && let Err(e) = Registry::load_dir(dir)
    {
        problems.push(e.to_string());
    }
    if problems.is_empty() {
        let registry = load(dir)?;
        println!(
            "ok: {} tool(s) in {} file(s): {}",
            registry.len(),
            files.len(),
            registry.names().join(", ")
        );
        return Ok(ExitCode::SUCCESS);
    }
    for problem in &problems {
        eprintln!("{problem}");
    }
    eprintln!("{} problem(s) in {}", problems.len(), dir.display());
    Ok(ExitCode::FAILURE)
}
