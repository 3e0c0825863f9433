//! Path resolution confined to a root directory.
//!
//! A path from the model is first checked as text (NUL bytes, length, absolute paths outside
//! the root, `..` climbing above the root), then resolved on disk with every symbolic link
//! followed (`canonicalize`) and checked again to lie under the canonical root. Writes resolve
//! the parent directory, and refuse a target that is itself a link leading out or nowhere.
//!
//! Known limit: the check and the file operation are two system calls, so a process racing to
//! swap a directory for a link between them is not stopped; the model, which has no tool that
//! makes links, cannot do that.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Size limits of the file skills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Largest file `read_file` returns, and largest file `search_files` looks into (bytes).
    pub max_read_bytes: u64,
    /// Largest content `write_file` accepts (bytes).
    pub max_write_bytes: usize,
    /// Largest output of `list_dir` and `search_files` (bytes); longer output is cut with a note.
    pub max_result_bytes: usize,
    /// Longest accepted path (bytes).
    pub max_path_bytes: usize,
    /// Most entries `list_dir` shows.
    pub max_list_entries: usize,
    /// Most files `search_files` looks into.
    pub max_search_files: usize,
    /// Most matching lines `search_files` returns.
    pub max_search_matches: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            max_read_bytes: 256 * 1024,
            max_write_bytes: 256 * 1024,
            max_result_bytes: 64 * 1024,
            max_path_bytes: 1024,
            max_list_entries: 500,
            max_search_files: 5_000,
            max_search_matches: 200,
        }
    }
}

/// A directory the file skills are confined to.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
    pub(crate) limits: SandboxLimits,
}

fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

impl Sandbox {
    /// Confine the skills to `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>, limits: SandboxLimits) -> Result<Self, String> {
        let root = root
            .as_ref()
            .canonicalize()
            .map_err(|e| format!("cannot open it: {}", describe(&e)))?;
        if !root.is_dir() {
            return Err("it is not a directory".into());
        }
        Ok(Self { root, limits })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` relative to the root, for messages.
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// Check `path` as text and return it relative to the root, `..` and `.` resolved.
    fn lexical(&self, path: &str) -> Result<PathBuf, String> {
        if path.contains('\0') {
            return Err("the path contains a NUL byte".into());
        }
        if path.len() > self.limits.max_path_bytes {
            return Err(format!(
                "the path is {} bytes long; the limit is {}",
                path.len(),
                self.limits.max_path_bytes
            ));
        }
        let raw = Path::new(path);
        let relative = if raw.is_absolute() {
            raw.strip_prefix(&self.root).map_err(|_| {
                format!("`{path}` is outside the sandbox; use a path relative to the sandbox root")
            })?
        } else {
            raw
        };
        let mut clean = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::Normal(part) => clean.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !clean.pop() {
                        return Err(format!("`{path}` leads outside the sandbox"));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("`{path}` is outside the sandbox"));
                }
            }
        }
        Ok(clean)
    }

    fn inside(&self, resolved: PathBuf, path: &str) -> Result<PathBuf, String> {
        if resolved.starts_with(&self.root) {
            Ok(resolved)
        } else {
            Err(format!(
                "`{path}` leads outside the sandbox (through a symbolic link)"
            ))
        }
    }

    /// Resolve an existing file or directory.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, String> {
        let relative = self.lexical(path)?;
        let resolved = self
            .root
            .join(&relative)
            .canonicalize()
            .map_err(|e| format!("`{path}`: {}", describe(&e)))?;
        self.inside(resolved, path)
    }

    /// Resolve a file to write. Its directory must exist unless `create_dirs`, in which case
    /// the missing directories are created (inside the root).
    pub fn resolve_for_write(&self, path: &str, create_dirs: bool) -> Result<PathBuf, String> {
        let relative = self.lexical(path)?;
        let Some(name) = relative.file_name().map(ToOwned::to_owned) else {
            return Err(format!("`{path}` names the sandbox root, not a file"));
        };
        let target = self.root.join(&relative);
        if let Ok(meta) = target.symlink_metadata() {
            if meta.file_type().is_symlink() {
                let resolved = target.canonicalize().map_err(|_| {
                    format!(
                        "`{path}` is a symbolic link that leads nowhere; not writing through it"
                    )
                })?;
                return self.inside(resolved, path);
            }
            if meta.is_dir() {
                return Err(format!("`{path}` is a directory"));
            }
        }
        let parent_relative = relative.parent().unwrap_or(Path::new(""));
        let parent = self.root.join(parent_relative);
        let parent = match parent.canonicalize() {
            Ok(parent) => self.inside(parent, path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create_dirs => {
                self.create_dirs(parent_relative, path)?
            }
            Err(e) => {
                return Err(format!(
                    "the directory of `{path}`: {}{}",
                    describe(&e),
                    if e.kind() == io::ErrorKind::NotFound {
                        " (set create_dirs to create it)"
                    } else {
                        ""
                    }
                ));
            }
        };
        if !parent.is_dir() {
            return Err(format!("the parent of `{path}` is not a directory"));
        }
        Ok(parent.join(name))
    }

    /// Create `relative` (a clean relative path) under the root, checking that the part that
    /// exists already lies inside.
    fn create_dirs(&self, relative: &Path, path: &str) -> Result<PathBuf, String> {
        let mut existing = self.root.join(relative);
        let mut missing = Vec::new();
        while existing.symlink_metadata().is_err() {
            match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    missing.push(name.to_owned());
                    existing = parent.to_owned();
                }
                _ => break,
            }
        }
        let mut dir = existing
            .canonicalize()
            .map_err(|e| format!("the directory of `{path}`: {}", describe(&e)))?;
        dir = self.inside(dir, path)?;
        for name in missing.into_iter().rev() {
            dir.push(name);
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create `{}`: {}", self.display(&dir), describe(&e)))?;
        }
        Ok(dir)
    }
}
