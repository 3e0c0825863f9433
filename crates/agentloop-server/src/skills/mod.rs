//! Built-in file skills: `read_file`, `list_dir`, `write_file` and `search_files`, confined to a
//! sandbox directory and bounded in size.

mod sandbox;
mod tools;

pub use sandbox::{Sandbox, SandboxLimits};
pub use tools::{ListDir, ReadFile, SearchFiles, WriteFile};
