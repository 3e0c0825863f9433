//! Shared parts of the agent-loop benchmark: the workload every client runs, the command-line
//! options every binary takes, and the harness that drives runs and checks them.

pub mod harness;
pub mod options;
pub mod workload;

pub use harness::{Outcome, drive};
pub use options::Options;
