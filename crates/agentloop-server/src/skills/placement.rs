//! Where a sandbox may not be: over the server's own files, or over the whole machine.

use std::path::{Path, PathBuf};

use crate::config::{Database, ServerConfig};
use crate::error::ServerError;

/// `path` made absolute with every link in its existing part resolved. The part that does not
/// exist yet (a database created at start) is appended as given.
fn canonical(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        if let Ok(resolved) = existing.canonicalize() {
            let mut out = resolved;
            out.extend(missing.iter().rev());
            return Some(out);
        }
        missing.push(existing.file_name()?);
        existing = existing.parent()?;
    }
}

/// The user's home directory, from `HOME`.
fn home_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Path::new(&home).canonicalize().ok()
}

/// Refuse a configured sandbox that contains the database (and so its `-wal`/`-shm` files) or
/// overlaps a protected path, and one that is `/` or holds the home directory unless
/// [`ServerConfig::allow_broad_sandbox`] is set. Paths are compared canonicalized. A sandbox
/// that does not exist is left to [`super::Sandbox::new`] to report.
pub(crate) fn check_sandbox_placement(config: &ServerConfig) -> Result<(), ServerError> {
    let Some(root) = config
        .sandbox
        .as_deref()
        .and_then(|d| d.canonicalize().ok())
    else {
        return Ok(());
    };
    let refuse = |message: String| {
        Err(ServerError::Sandbox {
            path: root.clone(),
            message,
        })
    };
    if !config.allow_broad_sandbox {
        let opt_in = "choose a project directory, or pass --allow-broad-sandbox (ServerConfig::allow_broad_sandbox) if that is really meant";
        if root.parent().is_none() {
            return refuse(format!(
                "it is the whole file system, so the model could read and rewrite every file the server can; {opt_in}"
            ));
        }
        if let Some(home) = home_dir().filter(|home| home.starts_with(&root)) {
            let what = if home == root {
                "it is your home directory".to_owned()
            } else {
                format!("it contains your home directory `{}`", home.display())
            };
            return refuse(format!(
                "{what}, so the model could read and rewrite your keys and settings; {opt_in}"
            ));
        }
    }
    if let Database::File(db) = &config.database
        && let Some(db) = canonical(db)
        && db.starts_with(&root)
    {
        return refuse(format!(
            "it contains the server's database `{}` (and its -wal and -shm files), which the file skills could then rewrite; keep the database outside the sandbox (--db) or choose a sandbox that does not contain it",
            db.display()
        ));
    }
    for protected in &config.protected_paths {
        let Some(protected) = canonical(protected) else {
            continue;
        };
        if protected.starts_with(&root) {
            return refuse(format!(
                "it contains `{}`, which the server keeps out of the file skills' reach (such as the --tools directory); choose a sandbox that does not contain it",
                protected.display()
            ));
        }
        if root.starts_with(&protected) {
            return refuse(format!(
                "it lies inside `{}`, which the server keeps out of the file skills' reach (such as the --tools directory); choose a sandbox outside it",
                protected.display()
            ));
        }
    }
    Ok(())
}
