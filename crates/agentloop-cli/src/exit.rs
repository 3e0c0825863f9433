//! The process's exit codes, one per kind of ending, so scripts can tell them apart. Clap uses 2
//! for usage errors, so nothing else does.

use std::process::ExitCode;

use agentloop::run::{RunResult, RunStopReason};

/// The model answered (or the command did what it was asked).
pub const OK: u8 = 0;
/// Something failed: a model call, a configuration problem, a bad file.
pub const ERROR: u8 = 1;
/// The run was stopped by a limit before the model answered.
pub const LIMIT: u8 = 3;
/// The run took longer than `--timeout`.
pub const TIMEOUT: u8 = 4;
/// A tool call needed approval that was not given: neither --approve nor --yes, or no answer
/// could be read.
pub const APPROVAL: u8 = 5;
/// Interrupted with Ctrl-C (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// The exit codes as `--help` and the README list them.
pub const HELP: &str = "\
Exit codes:
  0    the model answered (or the command succeeded)
  1    an error: a failed model call, a configuration problem, a bad file
  2    a usage error in the arguments
  3    stopped by a limit before the model answered (--max-tool-iterations, --max-tool-calls,
       the model's output token limit, a repeated invalid tool call, an answer that
       never matched --output-schema)
  4    timed out (--timeout)
  5    a tool call needed approval that was not given (run with --approve or --yes)
  130  interrupted (Ctrl-C)";

/// The exit code for a finished run.
pub fn for_run(result: &RunResult) -> ExitCode {
    ExitCode::from(match result.stop_reason {
        RunStopReason::EndTurn | RunStopReason::AwaitingToolResults => OK,
        RunStopReason::Error => ERROR,
        RunStopReason::Timeout => TIMEOUT,
        RunStopReason::AwaitingApproval => APPROVAL,
        RunStopReason::Cancelled => INTERRUPTED,
        RunStopReason::MaxToolIterations
        | RunStopReason::MaxToolCalls
        | RunStopReason::MaxTokens
        | RunStopReason::TokenBudget
        | RunStopReason::CostBudget
        | RunStopReason::Custom(_)
        | RunStopReason::RepeatedInvalidCall(_)
        | RunStopReason::InvalidOutput => LIMIT,
    })
}
