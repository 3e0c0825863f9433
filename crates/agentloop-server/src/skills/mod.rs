//! Built-in file skills: `read_file`, `list_dir`, `write_file` and `search_files`, confined to a
//! sandbox directory and bounded in size.
//!
//! **Rules.** Paths are relative to the sandbox root; `..`, absolute paths and symbolic links
//! that lead out are refused, and every file operation goes through a handle on the root that
//! cannot leave it, even if the tree changes between the check and the operation. Only regular
//! files with a single link are read or written (no FIFOs, sockets, devices, or hard links that
//! may be files outside), opened without following links or blocking. A write replaces the
//! file with a new one (temporary file, then rename), never rewriting it in place. Sizes are
//! bounded per call ([`SandboxLimits`]), writes in total for the life of the server
//! ([`SandboxLimits::max_total_write_bytes`]) and the bytes one search reads
//! ([`SandboxLimits::max_search_bytes`]). At start, a sandbox that contains the server's
//! database or a protected path (the CLI's `--tools` directory), or lies inside a protected
//! path, is refused; so are `/` and the home directory, unless
//! [`crate::ServerConfig::allow_broad_sandbox`] is set.

mod placement;
mod sandbox;
mod tools;

pub(crate) use placement::check_sandbox_placement;
pub use sandbox::{Sandbox, SandboxLimits};
pub use tools::{ListDir, ReadFile, SearchFiles, WriteFile};
