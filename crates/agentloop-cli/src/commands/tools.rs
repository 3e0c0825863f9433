//! `agentloop tools list|validate PATH`: PATH is one descriptor file (a pack file included), a
//! directory of them, or a pack directory (a `pack.yaml` at its root gives every file under it
//! its defaults, so its files are checked together).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentloop::registry::{Registry, pack_file, tool_files};

use crate::exit;

/// The tool names every provider accepts (OpenAI's and Anthropic's rule).
const NAME_RULE: &str = "^[a-zA-Z0-9_-]{1,64}$";

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The descriptor files `path` stands for: itself if it is a file, else the ones under it.
fn files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if path.is_file() {
        Ok(vec![path.to_owned()])
    } else {
        tool_files(path).map_err(|e| e.to_string())
    }
}

/// What can be checked on its own: each file, or a whole pack directory (its files need the
/// pack's defaults).
fn units(path: &Path) -> Result<Vec<PathBuf>, String> {
    if path.is_dir() && pack_file(path).is_some() {
        Ok(vec![path.to_owned()])
    } else {
        files(path)
    }
}

/// Add the tools of `file` (or of the pack directory `file` is) to `registry`, their names
/// checked against what providers accept.
fn add_file(registry: &mut Registry, file: &Path) -> Result<(), String> {
    let names = if file.is_dir() {
        registry.add_pack(file)
    } else {
        registry.add_file(file)
    }
    .map_err(|e| e.to_string())?;
    match names.iter().find(|name| !valid_name(name)) {
        Some(bad) => Err(format!(
            "{}: tool `{bad}`: the name must match {NAME_RULE} (letters, digits, `_` and `-`, at \
             most 64), or providers reject the request",
            file.display()
        )),
        None => Ok(()),
    }
}

/// Load every descriptor of `path` (a file or a directory) into one registry.
pub fn load(path: &Path) -> Result<Registry, String> {
    let mut registry = Registry::new();
    for file in units(path)? {
        add_file(&mut registry, &file)?;
    }
    Ok(registry)
}

/// Print one line per tool: name, mode, description.
pub fn list(path: &Path) -> Result<ExitCode, String> {
    let registry = load(path)?;
    let mut descriptors = registry.descriptors();
    descriptors.sort_by(|a, b| a.name.cmp(&b.name));
    for d in descriptors {
        println!("{}\t{}\t{}", d.name, d.mode, d.description);
    }
    Ok(ExitCode::SUCCESS)
}

/// Check every file on its own (so all broken files are reported), then all of them together
/// (duplicate names across files). Defining no tool at all is a warning and exit code 1: it is
/// almost always the wrong path.
pub fn validate(path: &Path) -> Result<ExitCode, String> {
    let mut problems = Vec::new();
    for file in &units(path)? {
        if let Err(e) = add_file(&mut Registry::new(), file) {
            problems.push(e);
        }
    }
    if problems.is_empty()
        && let Err(e) = load(path)
    {
        problems.push(e);
    }
    if problems.is_empty() {
        let registry = load(path)?;
        if registry.is_empty() {
            eprintln!(
                "warning: no tool descriptors in {} (looked for .json, .yaml and .yml files)",
                path.display()
            );
            return Ok(ExitCode::from(exit::ERROR));
        }
        println!(
            "ok: {} tool(s) in {} file(s): {}",
            registry.len(),
            files(path)?.len(),
            registry.names().join(", ")
        );
        return Ok(ExitCode::SUCCESS);
    }
    for problem in &problems {
        eprintln!("{problem}");
    }
    eprintln!("{} problem(s) in {}", problems.len(), path.display());
    Ok(ExitCode::from(exit::ERROR))
}
