//! The file skills as agentloop tools. Every failure is an error message the model reads.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::Tool;
use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::sandbox::Sandbox;

/// Read a UTF-8 text file from the sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFile {
    /// Path relative to the sandbox root, e.g. `notes/todo.md`.
    pub path: String,
}

/// List a directory of the sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListDir {
    /// Directory relative to the sandbox root; the root when omitted.
    #[serde(default)]
    pub path: Option<String>,
}

/// Write (create or replace) a UTF-8 text file in the sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteFile {
    /// Path relative to the sandbox root.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
    /// Create missing parent directories.
    #[serde(default)]
    pub create_dirs: bool,
}

/// Search the text files of the sandbox for lines matching a pattern.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchFiles {
    /// A substring to look for, or a regular expression when `regex` is true.
    pub pattern: String,
    /// Treat `pattern` as a regular expression (Rust `regex` syntax).
    #[serde(default)]
    pub regex: bool,
    /// Ignore letter case.
    #[serde(default)]
    pub ignore_case: bool,
    /// Directory to search, relative to the sandbox root; the root when omitted.
    #[serde(default)]
    pub path: Option<String>,
}

impl Sandbox {
    /// The four file skills (`read_file`, `list_dir`, `write_file`, `search_files`) confined
    /// to this sandbox.
    pub fn tools(self: Arc<Self>) -> Vec<Tool> {
        vec![
            blocking_tool(
                &self,
                "read_file",
                "Read a UTF-8 text file. Paths are relative to the sandbox root.",
                |sandbox, args: ReadFile| sandbox.read_file(&args.path),
            ),
            blocking_tool(
                &self,
                "list_dir",
                "List the entries of a directory (directories end with `/`). Paths are relative to the sandbox root.",
                |sandbox, args: ListDir| sandbox.list_dir(args.path.as_deref().unwrap_or(".")),
            ),
            blocking_tool(
                &self,
                "write_file",
                "Create or replace a UTF-8 text file with the given content. Paths are relative to the sandbox root.",
                |sandbox, args: WriteFile| {
                    sandbox.write_file(&args.path, &args.content, args.create_dirs)
                },
            ),
            blocking_tool(
                &self,
                "search_files",
                "Find lines containing a substring (or matching a regular expression) in the text files under a directory. Returns `path:line: text` lines.",
                |sandbox, args: SearchFiles| sandbox.search_files(&args),
            ),
        ]
    }

    /// `read_file`: the file's text.
    pub fn read_file(&self, path: &str) -> Result<String, String> {
        let resolved = self.resolve_existing(path)?;
        let relative = self.relative(&resolved);
        if self.dir().metadata(relative).is_ok_and(|m| m.is_dir()) {
            return Err(format!("`{path}` is a directory; use list_dir"));
        }
        let file = self.open_plain_file(relative, path)?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read `{path}`: {e}"))?
            .len();
        let max = self.limits.max_read_bytes;
        if len > max {
            return Err(format!(
                "`{path}` is {len} bytes, more than the read limit of {max} bytes"
            ));
        }
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read `{path}`: {e}"))?;
        if bytes.len() as u64 > max {
            return Err(format!("`{path}` grew past the read limit of {max} bytes"));
        }
        String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))
    }

    /// `list_dir`: one entry per line, sorted; directories end with `/`, links with `@`.
    pub fn list_dir(&self, path: &str) -> Result<String, String> {
        let resolved = self.resolve_existing(path)?;
        let relative = self.relative(&resolved);
        if !self.dir().metadata(relative).is_ok_and(|m| m.is_dir()) {
            return Err(format!("`{path}` is not a directory"));
        }
        let mut entries = Vec::new();
        let listing = self
            .dir()
            .read_dir(relative)
            .map_err(|e| format!("cannot list `{path}`: {e}"))?;
        for entry in listing {
            let entry = entry.map_err(|e| format!("cannot list `{path}`: {e}"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let line = match entry.file_type() {
                Ok(t) if t.is_symlink() => format!("{name}@"),
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => match entry.metadata() {
                    Ok(meta) => format!("{name} ({} bytes)", meta.len()),
                    Err(_) => name,
                },
            };
            entries.push(line);
        }
        entries.sort();
        if entries.is_empty() {
            return Ok(format!("`{}` is empty", self.display(&resolved)));
        }
        let total = entries.len();
        let mut out = Limited::new(self.limits.max_result_bytes);
        for line in entries.iter().take(self.limits.max_list_entries) {
            if !out.line(line) {
                break;
            }
        }
        let shown = out.lines;
        let mut text = out.finish();
        if shown < total {
            text.push_str(&format!("… and {} more entries\n", total - shown));
        }
        Ok(text)
    }

    /// `write_file`: replace the file's content.
    pub fn write_file(
        &self,
        path: &str,
        content: &str,
        create_dirs: bool,
    ) -> Result<String, String> {
        let max = self.limits.max_write_bytes;
        if content.len() > max {
            return Err(format!(
                "the content is {} bytes, more than the write limit of {max} bytes",
                content.len()
            ));
        }
        let resolved = self.resolve_for_write(path, create_dirs)?;
        self.replace_file(&resolved, content.as_bytes(), path)?;
        Ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            self.display(&resolved)
        ))
    }

    /// `search_files`: matching lines as `path:line: text`, bounded in files, matches and bytes
    /// read.
    pub fn search_files(&self, args: &SearchFiles) -> Result<String, String> {
        if args.pattern.is_empty() {
            return Err("the pattern is empty".into());
        }
        let escaped;
        let pattern = if args.regex {
            args.pattern.as_str()
        } else {
            escaped = regex::escape(&args.pattern);
            escaped.as_str()
        };
        let matcher = RegexBuilder::new(pattern)
            .case_insensitive(args.ignore_case)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("invalid regular expression: {e}"))?;
        let start = self.resolve_existing(args.path.as_deref().unwrap_or("."))?;
        let limits = &self.limits;
        let mut out = Limited::new(limits.max_result_bytes);
        let mut matches = 0;
        let mut files_seen = 0;
        let mut bytes_read: u64 = 0;
        let mut truncated = false;
        let mut out_of_budget = false;
        // Paths relative to the root (empty for the root), walked through the root's handle.
        let start = match self.relative(&start) {
            p if p == Path::new(".") => PathBuf::new(),
            p => p.to_owned(),
        };
        let mut pending = vec![start];
        'walk: while let Some(path) = pending.pop() {
            let handle_path = if path.as_os_str().is_empty() {
                Path::new(".")
            } else {
                path.as_path()
            };
            // Links are never followed: a link inside may point anywhere.
            let Ok(meta) = self.dir().symlink_metadata(handle_path) else {
                continue;
            };
            if meta.is_dir() {
                let Ok(read) = self.dir().read_dir(handle_path) else {
                    continue;
                };
                let mut children: Vec<_> = read
                    .filter_map(|e| e.ok().map(|e| path.join(e.file_name())))
                    .collect();
                children.sort_by(|a, b| b.cmp(a));
                pending.extend(children);
                continue;
            }
            if !meta.is_file() || meta.len() > limits.max_read_bytes {
                continue;
            }
            if files_seen == limits.max_search_files {
                truncated = true;
                break;
            }
            if bytes_read.saturating_add(meta.len()) > limits.max_search_bytes {
                out_of_budget = true;
                break;
            }
            let shown = path.display().to_string();
            // FIFOs, devices and files with other hard links are skipped, like links.
            let Ok(file) = self.open_plain_file(&path, &shown) else {
                continue;
            };
            files_seen += 1;
            let mut bytes = Vec::new();
            let budget = limits
                .max_read_bytes
                .min(limits.max_search_bytes - bytes_read);
            if file.take(budget).read_to_end(&mut bytes).is_err() {
                continue;
            }
            bytes_read += bytes.len() as u64;
            let Ok(text) = String::from_utf8(bytes) else {
                continue;
            };
            for (number, line) in text.lines().enumerate() {
                if !matcher.is_match(line) {
                    continue;
                }
                if matches == limits.max_search_matches
                    || !out.line(&format!("{shown}:{}: {}", number + 1, clip(line, 200)))
                {
                    truncated = true;
                    break 'walk;
                }
                matches += 1;
            }
        }
        let mut text = out.finish();
        if matches == 0 {
            text = format!("no matches in {files_seen} files\n");
        } else if truncated {
            text.push_str(&format!(
                "… stopped after {matches} matches in {files_seen} files; narrow the pattern or the path\n"
            ));
        }
        if out_of_budget {
            text.push_str(&format!(
                "… search cut short after reading {bytes_read} bytes of {files_seen} files (the limit is {} bytes); not every file was searched: narrow the path\n",
                limits.max_search_bytes
            ));
        }
        Ok(text)
    }
}

/// Output that stops growing at a byte budget.
struct Limited {
    text: String,
    budget: usize,
    lines: usize,
}

impl Limited {
    fn new(budget: usize) -> Self {
        Self {
            text: String::new(),
            budget,
            lines: 0,
        }
    }

    /// Add a line; `false` when it does not fit.
    fn line(&mut self, line: &str) -> bool {
        if self.text.len() + line.len() + 1 > self.budget {
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.lines += 1;
        true
    }

    fn finish(self) -> String {
        self.text
    }
}

fn clip(line: &str, max_chars: usize) -> String {
    if line.chars().count() <= max_chars {
        return line.to_owned();
    }
    let mut clipped: String = line.chars().take(max_chars).collect();
    clipped.push('…');
    clipped
}

/// A typed tool whose handler runs on the blocking pool (file I/O must not stall the runtime).
fn blocking_tool<T>(
    sandbox: &Arc<Sandbox>,
    name: &str,
    description: &str,
    run: fn(&Sandbox, T) -> Result<String, String>,
) -> Tool
where
    T: for<'de> Deserialize<'de> + JsonSchema + Send + 'static,
{
    let sandbox = sandbox.clone();
    Tool::function(name, description, move |args: T| {
        let sandbox = sandbox.clone();
        async move {
            tokio::task::spawn_blocking(move || run(&sandbox, args))
                .await
                .map_err(|e| format!("the file operation failed: {e}"))?
        }
    })
}
