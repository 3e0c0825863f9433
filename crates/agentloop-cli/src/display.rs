//! The live terminal display of a run: answer text on stdout as it streams, tool calls with a
//! spinner and their results on stderr, a summary line at the end. Colours only on a terminal,
//! and never when `NO_COLOR` is set.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use agentloop::run::{RunEvent, RunResult};
use indicatif::{ProgressBar, ProgressStyle};

/// Whether stderr gets colours and spinners.
pub fn fancy_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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
    fancy: bool,
    spinner: Option<ProgressBar>,
    line_open: bool,
    started: Instant,
}

impl Display {
    /// A display for this terminal.
    pub fn new() -> Self {
        Self {
            fancy: fancy_stderr(),
            spinner: None,
            line_open: false,
            started: Instant::now(),
        }
    }

    fn end_line(&mut self) {
        if self.line_open {
            println!();
            self.line_open = false;
        }
    }

    /// Show one event.
    pub fn event(&mut self, event: &RunEvent) {
        match event {
            RunEvent::TextDelta { text } => {
                print!("{text}");
                let _ = std::io::stdout().flush();
                self.line_open = !text.ends_with('\n');
            }
            RunEvent::ToolCallReady { call } => {
                self.end_line();
                let label = format!("{} {}", call.name, short(&call.input.to_string(), 80));
                if self.fancy {
                    let spinner = ProgressBar::new_spinner();
                    spinner.set_style(
                        ProgressStyle::with_template("{spinner} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    spinner.set_message(paint(true, "36", &format!("⚙ {label}")));
                    spinner.enable_steady_tick(Duration::from_millis(80));
                    self.spinner = Some(spinner);
                } else {
                    eprintln!("tool: {label}");
                }
            }
            RunEvent::ToolCallResult {
                name,
                result,
                outcome,
                ..
            } => {
                if let Some(spinner) = self.spinner.take() {
                    spinner.finish_and_clear();
                }
                let text = short(&result.content.to_text(), 100);
                let (mark, colour) = if result.is_error {
                    ("✗", "31")
                } else {
                    ("✓", "32")
                };
                let line = format!("{mark} {name} → {text} ({})", outcome.kind());
                eprintln!("{}", paint(self.fancy, colour, &line));
            }
            RunEvent::Error { error } => {
                self.end_line();
                eprintln!("{}", paint(self.fancy, "31", &format!("error: {error}")));
            }
            RunEvent::RunFinish { result } => {
                self.end_line();
                eprintln!("{}", paint(self.fancy, "2", &self.summary(result)));
            }
            _ => {}
        }
    }

    fn summary(&self, result: &RunResult) -> String {
        format!(
            "[{} step(s), {} tool call(s), {} tokens in / {} out, {:.1}s, stop: {}]",
            result.steps.len(),
            result.tool_calls,
            result.usage.input_tokens,
            result.usage.output_tokens,
            self.started.elapsed().as_secs_f64(),
            result.stop_reason
        )
    }
}
