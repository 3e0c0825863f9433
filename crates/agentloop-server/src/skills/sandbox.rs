//! Path resolution confined to a root directory, and file access through a handle on it.
//!
//! A path from the model is first checked as text (NUL bytes, length, absolute paths outside
//! the root, `..` climbing above the root), then resolved on disk with every symbolic link
//! followed (`canonicalize`) and checked again to lie under the canonical root: that gives the
//! model a precise message. The file operation itself then goes through a capability handle on
//! the root (`cap_std::fs::Dir`) with the path relative to it, which refuses to leave the root
//! whatever the directory tree turned into since the check: a directory swapped for a link
//! between the check and the open leads nowhere outside.
//!
//! Only regular files with a single link are read or written: a FIFO or device could block a
//! thread forever or act on open, and a hard link may be a file outside the sandbox under a
//! name inside. Files are opened with `O_NOFOLLOW | O_NONBLOCK` and checked again once open.
//! A write goes to a new file beside the target, which then replaces it (`rename`): the old
//! file is never truncated in place, and a crash leaves either the old or the new content.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt as _, OpenOptions, OpenOptionsExt as _};

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
    /// Total bytes `write_file` may write into the sandbox for the life of the server (every
    /// conversation together); past it, writes fail with a message saying so.
    pub max_total_write_bytes: u64,
    /// Bytes one `search_files` call may read; past it the search stops and says it was cut
    /// short.
    pub max_search_bytes: u64,
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
            max_total_write_bytes: 64 * 1024 * 1024,
            max_search_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A directory the file skills are confined to. Clones share the directory handle and the
/// write quota.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
    dir: Arc<Dir>,
    written: Arc<AtomicU64>,
    pub(crate) limits: SandboxLimits,
}

fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

/// Refuse what is not a regular file with a single link: a FIFO or device can block a thread
/// or act on open, and a file with another link may be one outside the sandbox.
fn refuse_unless_plain(is_dir: bool, is_file: bool, nlink: u64, shown: &str) -> Result<(), String> {
    if is_dir {
        return Err(format!("`{shown}` is a directory"));
    }
    if !is_file {
        return Err(format!(
            "`{shown}` is not a regular file (a FIFO, socket or device); only regular files are read and written"
        ));
    }
    if nlink > 1 {
        return Err(format!(
            "`{shown}` has other hard links, so it may be a file outside the sandbox; only files with a single link are read and written"
        ));
    }
    Ok(())
}

/// Write `content` to a new temporary file in `dir`, flush it to disk, then rename it to
/// `name`. The temporary file is removed on failure.
fn write_beside(
    dir: &Dir,
    name: &std::ffi::OsStr,
    content: &[u8],
    permissions: Option<cap_std::fs::Permissions>,
) -> io::Result<()> {
    use std::io::Write;
    // Short whatever the target's name, which may already be as long as a name can be.
    let temp = format!(".agentloop-{:016x}.tmp", rand::random::<u64>());
    let file = dir.open_with(
        &temp,
        no_follow_no_block(OpenOptions::new().write(true).create_new(true)),
    )?;
    let result = (|| {
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        let mut file = file.into_std();
        file.write_all(content)?;
        file.sync_all()?;
        dir.rename(&temp, dir, name)
    })();
    if result.is_err() {
        let _ = dir.remove_file(&temp);
    }
    result
}

/// Options for opening an existing file: no link in the last component, and no waiting on
/// open (a FIFO swapped in after the check must not block the thread).
fn no_follow_no_block(options: &mut OpenOptions) -> &mut OpenOptions {
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
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
        let dir = Dir::open_ambient_dir(&root, ambient_authority())
            .map_err(|e| format!("cannot open it: {}", describe(&e)))?;
        Ok(Self {
            root,
            dir: Arc::new(dir),
            written: Arc::new(AtomicU64::new(0)),
            limits,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Bytes written so far, counted against [`SandboxLimits::max_total_write_bytes`].
    pub fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// `path` relative to the root, for messages.
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// A resolved path (under the root) as the relative path the directory handle takes.
    pub(crate) fn relative<'a>(&self, resolved: &'a Path) -> &'a Path {
        match resolved.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel,
            _ => Path::new("."),
        }
    }

    /// The handle on the root.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Open `relative` for reading if it is a regular file with a single link, without
    /// following a link or blocking; `shown` names it in messages.
    pub(crate) fn open_plain_file(
        &self,
        relative: &Path,
        shown: &str,
    ) -> Result<std::fs::File, String> {
        // Checked before opening too, as opening a device or FIFO can act by itself.
        self.check_plain_file(relative, shown)?;
        let file = self
            .dir
            .open_with(relative, no_follow_no_block(OpenOptions::new().read(true)))
            .map_err(|e| format!("cannot read `{shown}`: {}", describe(&e)))?
            .into_std();
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read `{shown}`: {}", describe(&e)))?;
        refuse_unless_plain(meta.is_dir(), meta.is_file(), meta.nlink(), shown)?;
        Ok(file)
    }

    /// Check the metadata of `relative` (not following a link in its last component) for a
    /// read or write.
    pub(crate) fn check_plain_file(&self, relative: &Path, shown: &str) -> Result<(), String> {
        let meta = self
            .dir
            .symlink_metadata(relative)
            .map_err(|e| format!("`{shown}`: {}", describe(&e)))?;
        refuse_unless_plain(meta.is_dir(), meta.is_file(), meta.nlink(), shown)
    }

    /// Count `bytes` against the write quota, or say why not.
    fn reserve(&self, bytes: u64) -> Result<(), String> {
        let quota = self.limits.max_total_write_bytes;
        self.written
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |written| {
                written.checked_add(bytes).filter(|total| *total <= quota)
            })
            .map(drop)
            .map_err(|written| {
                format!(
                    "the sandbox's write quota is used up: {written} of {quota} bytes written since the server started, and this write needs {bytes} more; no more files can be written until the server restarts"
                )
            })
    }

    /// Replace the file at `resolved` (a path from [`Sandbox::resolve_for_write`]) with
    /// `content`: written to a new file in the same directory, which then takes its place.
    pub(crate) fn replace_file(
        &self,
        resolved: &Path,
        content: &[u8],
        shown: &str,
    ) -> Result<(), String> {
        let relative = self.relative(resolved);
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(format!("`{shown}` names the sandbox root, not a file"));
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let dir = self
            .dir
            .open_dir(parent)
            .map_err(|e| format!("the directory of `{shown}`: {}", describe(&e)))?;
        let permissions = match dir.symlink_metadata(name) {
            Ok(meta) => {
                refuse_unless_plain(meta.is_dir(), meta.is_file(), meta.nlink(), shown)?;
                Some(meta.permissions())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("`{shown}`: {}", describe(&e))),
        };
        self.reserve(content.len() as u64)?;
        let written = write_beside(&dir, name, content, permissions);
        if let Err(e) = written {
            self.written
                .fetch_sub(content.len() as u64, Ordering::Relaxed);
            return Err(format!("cannot write `{shown}`: {}", describe(&e)));
        }
        Ok(())
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
            self.dir
                .create_dir(self.relative(&dir))
                .map_err(|e| format!("cannot create `{}`: {}", self.display(&dir), describe(&e)))?;
        }
        Ok(dir)
    }
}
