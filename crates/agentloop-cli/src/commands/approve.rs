//! Decisions on tool calls that need approval: refused without a flag, all approved with
//! `--yes`, asked one by one on standard input with `--approve`.

use agentloop::Agent;
use agentloop::run::{Decision, PendingApproval};
use serde_json::Value;

use crate::display::short;

/// Who decides on calls that need approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// Nobody: such a call stops the run.
    Refuse,
    /// `--yes`: every call is approved.
    Yes,
    /// `--approve`: the person at the terminal, call by call.
    Ask,
}

/// Where the answers to the questions come from, a line at a time (`None` at the end).
pub trait Answers {
    /// The next line.
    async fn line(&mut self) -> Option<String>;
}

/// Standard input, read off the runtime's threads.
pub struct Stdin;

impl Answers for Stdin {
    async fn line(&mut self) -> Option<String> {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        })
        .await
        .ok()
        .flatten()
    }
}

/// The decisions on `pending`, or why the run stops without them.
pub async fn decide(
    agent: &Agent,
    pending: &[PendingApproval],
    approver: Approver,
    answers: &mut impl Answers,
) -> Result<Vec<(String, Decision)>, String> {
    match approver {
        Approver::Refuse => Err(pending
            .iter()
            .map(|p| {
                format!(
                    "tool call `{}` to `{}` needs approval ({}): run with --approve to be asked, \
                     or --yes to approve every call",
                    p.id, p.tool, p.reason
                )
            })
            .collect::<Vec<_>>()
            .join("\n")),
        Approver::Yes => Ok(pending
            .iter()
            .map(|p| {
                eprintln!(
                    "approved (--yes): {} {}",
                    p.tool,
                    short(&p.input.to_string(), 80)
                );
                (p.id.clone(), Decision::Approve)
            })
            .collect()),
        Approver::Ask => {
            let mut decisions = Vec::with_capacity(pending.len());
            for call in pending {
                decisions.push((call.id.clone(), ask(agent, call, answers).await?));
            }
            Ok(decisions)
        }
    }
}

/// Ask about one call until the answer is y, n, or an edit that fits the tool's schema.
async fn ask(
    agent: &Agent,
    call: &PendingApproval,
    answers: &mut impl Answers,
) -> Result<Decision, String> {
    let ended = || {
        format!(
            "no answer (standard input ended) for tool call `{}` to `{}`; it was not run",
            call.id, call.tool
        )
    };
    loop {
        eprint!(
            "approve {} {}? ({}) [y/n/e] ",
            call.tool,
            short(&call.input.to_string(), 200),
            call.reason
        );
        let answer = answers.line().await.ok_or_else(ended)?;
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(Decision::Approve),
            "n" | "no" => return Ok(Decision::deny("the user declined it")),
            "e" | "edit" => {
                eprint!("new input for {} (JSON): ", call.tool);
                let line = answers.line().await.ok_or_else(ended)?;
                match edited(agent, call, &line) {
                    Ok(input) => return Ok(Decision::edited(input)),
                    Err(problem) => eprintln!("{problem}"),
                }
            }
            _ => eprintln!("answer y (run it), n (do not run it) or e (edit its input)"),
        }
    }
}

/// The edited input, when it is JSON that fits the tool's schema.
fn edited(agent: &Agent, call: &PendingApproval, line: &str) -> Result<Value, String> {
    let input: Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("that is not JSON: {e}"))?;
    if let Some(tool) = agent.tool(&call.tool)
        && let Err(violations) = tool.validate(&input)
    {
        let each: Vec<String> = violations.iter().map(ToString::to_string).collect();
        return Err(format!(
            "that input does not fit `{}`: {}",
            call.tool,
            each.join("; ")
        ));
    }
    Ok(input)
}
