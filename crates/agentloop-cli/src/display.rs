//! The live terminal display of a run: answer text on stdout as it streams, tool calls and their
//! results on stderr, a summary line at the end. On a terminal, a spinner shows while the model
//! has not started answering and while tools run; colours only on a terminal, and never when
//! `NO_COLOR` is set. Nothing but plain lines ever goes to a pipe.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use agentloop::StreamEvent;
use agentloop::run::{RunEvent, RunResult, RunStopReason};
use indicatif::{ProgressBar, ProgressStyle};

/// Whether stderr is a terminal: spinners and in-place updates only then.
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Whether stderr gets colours: a terminal, and `NO_COLOR` unset or empty.
pub fn colour_stderr() -> bool {
    stderr_is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn paint(on: bool, code: &str, text: &str) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Shorten `text` to at most `max` characters on one line.
pub fn short(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// Renders run events as they arrive.
pub struct Display {
    colour: bool,
    /// Whether to show a spinner (stderr is a terminal).
    spin: bool,
    spinner: Option<ProgressBar>,
    /// Tool calls running now (id, label), for the spinner's message.
    running: Vec<(String, String)>,
    line_open: bool,
    started: Instant,
    timeout: Option<Duration>,
}

impl Display {
    /// A display for this terminal; `timeout` is the run's `--timeout`, named when it fires.
    pub fn new(timeout: Option<Duration>) -> Self {
        Self {
            colour: colour_stderr(),
            spin: stderr_is_terminal(),
            spinner: None,
            running: Vec::new(),
            line_open: false,
            started: Instant::now(),
            timeout,
        }
    }

    /// End the answer's line on stdout, so that what stderr prints next starts a line of its own.
    fn end_line(&mut self) {
        if self.line_open {
            println!();
            self.line_open = false;
        }
    }

    /// Show `message` with a spinner (terminal only), replacing any spinner shown.
    fn spin(&mut self, message: String) {
        if !self.spin {
            return;
        }
        let spinner = self.spinner.get_or_insert_with(|| {
            let spinner = ProgressBar::new_spinner();
            spinner.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            spinner.enable_steady_tick(Duration::from_millis(80));
            spinner
        });
        spinner.set_message(message);
    }

    fn stop_spinner(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }

    /// The spinner for the tools still running, or none.
    fn spin_tools(&mut self) {
        let labels: Vec<&str> = self.running.iter().map(|(_, l)| l.as_str()).collect();
        match labels.as_slice() {
            [] => self.stop_spinner(),
            [one] => {
                let message = paint(self.colour, "36", &format!("⚙ {one}"));
                self.spin(message);
            }
            many => {
                let message = paint(
                    self.colour,
                    "36",
                    &format!("⚙ {} tools running: {}", many.len(), many.join(", ")),
                );
                self.spin(message);
            }
        }
    }

    /// Show one event.
    pub fn event(&mut self, event: &RunEvent) {
        match event {
            RunEvent::StepStart { .. } => {
                self.end_line();
                let message = paint(self.colour, "2", "waiting for the model…");
                self.spin(message);
            }
            RunEvent::Model(StreamEvent::TextDelta { text }) => {
                self.stop_spinner();
                print!("{text}");
                let _ = std::io::stdout().flush();
                self.line_open = !text.ends_with('\n');
            }
            RunEvent::Model(StreamEvent::ThinkingDelta { .. })
            | RunEvent::Model(StreamEvent::ToolCallStart { .. }) => self.stop_spinner(),
            RunEvent::ToolCallReady { call } => {
                self.end_line();
                let label = format!("{} {}", call.name, short(&call.input.to_string(), 80));
                if self.spin {
                    self.running.push((call.id.clone(), label));
                    self.spin_tools();
                } else {
                    eprintln!("tool: {label}");
                }
            }
            RunEvent::ToolCallResult {
                id,
                name,
                result,
                outcome,
                ..
            } => {
                self.stop_spinner();
                self.end_line();
                self.running.retain(|(running, _)| running != id);
                let text = short(&result.content.to_text(), 100);
                let (mark, colour) = if result.is_error {
                    ("✗", "31")
                } else {
                    ("✓", "32")
                };
                let line = format!("{mark} {name} → {text} ({})", outcome.kind());
                eprintln!("{}", paint(self.colour, colour, &line));
                self.spin_tools();
            }
            RunEvent::ApprovalRequested(pending) => {
                // Not running: it waits for a decision.
                self.running.retain(|(running, _)| *running != pending.id);
                self.spin_tools();
                let line = format!(
                    "? {} {} needs approval: {}",
                    pending.tool,
                    short(&pending.input.to_string(), 80),
                    pending.reason
                );
                eprintln!("{}", paint(self.colour, "33", &line));
            }
            RunEvent::Error { error } => {
                self.stop_spinner();
                self.end_line();
                eprintln!("{}", paint(self.colour, "31", &format!("error: {error}")));
            }
            RunEvent::RunFinish { result }
                if result.stop_reason == RunStopReason::AwaitingApproval =>
            {
                self.stop_spinner();
                self.end_line();
            }
            RunEvent::RunFinish { result } => {
                self.stop_spinner();
                self.end_line();
                match timeout_sentence(result, self.timeout) {
                    Some(sentence) => eprintln!("{}", paint(self.colour, "31", &sentence)),
                    None => eprintln!("{}", paint(self.colour, "2", &self.summary(result))),
                }
            }
            _ => {}
        }
    }

    /// Stop the spinner and end the answer's line, for a question on the terminal.
    pub fn pause(&mut self) {
        self.stop_spinner();
        self.end_line();
    }

    fn summary(&self, result: &RunResult) -> String {
        let cost = result
            .cost
            .map(|c| format!(", ${}", c.total.round_dp(6).normalize()))
            .unwrap_or_default();
        format!(
            "[{} step(s), {} tool call(s), {} tokens in / {} out{cost}, {:.1}s, stop: {}]",
            result.steps.len(),
            result.tool_calls,
            result.usage.input_tokens,
            result.usage.output_tokens,
            self.started.elapsed().as_secs_f64(),
            result.stop_reason
        )
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop_spinner();
    }
}

/// For a run that timed out, the one sentence that says so.
pub fn timeout_sentence(result: &RunResult, timeout: Option<Duration>) -> Option<String> {
    if result.stop_reason != RunStopReason::Timeout {
        return None;
    }
    Some(match timeout {
        Some(limit) => format!(
            "timed out: the run took longer than --timeout {} s, so the answer is incomplete ({} step(s), {} tool call(s) done).",
            limit.as_secs_f64(),
            result.steps.len(),
            result.tool_calls
        ),
        None => {
            "timed out: the model or a tool took longer than allowed, so the answer is incomplete."
                .to_owned()
        }
    })
}
