//! `agentloop chat`: an interactive conversation with history.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentloop::conversation::{Conversation, InterruptHandle};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{ModelArgs, parse_base_url};
use crate::commands::approve::{self, Approver};
use crate::display::{Display, short};
use crate::{exit, model};

const HELP: &str = "commands: /clear (forget the conversation), /history (show it), /model NAME [BASE_URL] (switch model), /quit";

/// Where prompts come from: a line editor with history on a terminal, plain lines otherwise
/// (pipes, files, tests).
enum Input {
    Editor(Box<rustyline::DefaultEditor>),
    Lines(tokio::io::Lines<BufReader<tokio::io::Stdin>>),
}

/// What reading a line gave.
enum Read {
    Line(String),
    /// End of input (Ctrl-D, or the pipe closed).
    End,
    /// Ctrl-C at the prompt.
    Interrupted,
}

impl Input {
    fn new() -> Self {
        if std::io::stdin().is_terminal()
            && let Ok(editor) = rustyline::DefaultEditor::new()
        {
            return Self::Editor(Box::new(editor));
        }
        Self::Lines(BufReader::new(tokio::io::stdin()).lines())
    }

    async fn read(&mut self) -> Result<Read, String> {
        match self {
            Self::Editor(editor) => {
                // The editor blocks on the terminal; this runtime has threads to spare.
                let line = tokio::task::block_in_place(|| editor.readline("> "));
                match line {
                    Ok(line) => {
                        if !line.trim().is_empty() {
                            let _ = editor.add_history_entry(line.as_str());
                        }
                        Ok(Read::Line(line))
                    }
                    Err(rustyline::error::ReadlineError::Eof) => Ok(Read::End),
                    Err(rustyline::error::ReadlineError::Interrupted) => Ok(Read::Interrupted),
                    Err(e) => Err(format!("could not read from the terminal: {e}")),
                }
            }
            Self::Lines(lines) => match lines.next_line().await {
                Ok(Some(line)) => Ok(Read::Line(line)),
                Ok(None) => Ok(Read::End),
                Err(e) => Err(format!("could not read standard input: {e}")),
            },
        }
    }
}

impl approve::Answers for Input {
    async fn line(&mut self) -> Option<String> {
        match self.read().await {
            Ok(Read::Line(line)) => Some(line),
            _ => None,
        }
    }
}

/// Chat until end of input or `/quit`.
pub async fn chat(args: ModelArgs) -> Result<ExitCode, String> {
    let resolved = model::resolve(args.model.as_deref(), args.base_url.as_deref())?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    let agent = model::agent(&args, &resolved)?;
    let mut chat = Conversation::new(&agent);
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("{HELP}");
    }

    // Ctrl-C interrupts the answer in flight; at the prompt it ends the chat.
    let busy = Arc::new(AtomicBool::new(false));
    let handle: InterruptHandle = chat.interrupt_handle();
    {
        let busy = busy.clone();
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if busy.load(Ordering::SeqCst) {
                    handle.interrupt();
                } else {
                    tokio::task::block_in_place(crate::telemetry::finish);
                    std::process::exit(exit::INTERRUPTED.into());
                }
            }
        });
    }

    let mut input = Input::new();
    loop {
        let line = match input.read().await? {
            Read::Line(line) => line,
            Read::End => break,
            Read::Interrupted => return Ok(ExitCode::from(exit::INTERRUPTED)),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line
            .split_once(' ')
            .map_or((line, ""), |(c, rest)| (c, rest.trim()))
        {
            ("/quit" | "/exit", _) => break,
            ("/help", _) => eprintln!("{HELP}"),
            ("/clear", _) => {
                chat.clear();
                println!("(conversation cleared)");
            }
            ("/history", _) => {
                let history = chat.history();
                if history.is_empty() {
                    println!("(no messages)");
                }
                for message in history {
                    let role = format!("{:?}", message.role).to_lowercase();
                    let mut text = message.text();
                    for call in message.tool_uses() {
                        text.push_str(&format!(" [tool call {} {}]", call.name, call.input));
                    }
                    for block in &message.content {
                        if let agentloop::ContentBlock::ToolResult(r) = block {
                            text.push_str(&format!(
                                " [tool result {}]",
                                short(&r.content.to_text(), 60)
                            ));
                        }
                    }
                    println!("{role}: {}", text.trim());
                }
            }
            ("/model", rest) => match switch_model(rest, args.base_url.as_deref()) {
                Ok((next, name)) => {
                    chat.set_model(next.provider, next.model);
                    println!("(model: {name})");
                }
                Err(e) => eprintln!("error: {e}; usage: /model NAME [BASE_URL]"),
            },
            (command, _) if command.starts_with('/') => {
                eprintln!("unknown command {command}; {HELP}")
            }
            _ => {
                busy.store(true, Ordering::SeqCst);
                let outcome = answer(&mut chat, &mut input, line, args.timeout).await;
                busy.store(false, Ordering::SeqCst);
                if let Err(e) = outcome {
                    eprintln!("error: {e}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `/model NAME [BASE_URL]`: the model, at the given base URL or else the one `--base-url` gave.
fn switch_model(
    rest: &str,
    default_base_url: Option<&str>,
) -> Result<(model::Resolved, String), String> {
    let mut words = rest.split_whitespace();
    let name = words.next().ok_or("name a model")?;
    let base_url = match words.next() {
        Some(url) => Some(parse_base_url(url).map_err(|e| format!("base URL `{url}`: {e}"))?),
        None => default_base_url.map(str::to_owned),
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` after the base URL"));
    }
    let resolved = model::resolve(Some(name), base_url.as_deref())?;
    let shown = match &base_url {
        Some(url) => format!("{name} at {url}"),
        None => name.to_owned(),
    };
    Ok((resolved, shown))
}

/// Send `prompt` and show the reply; a tool call that needs approval is asked about on the
/// chat's input (y/n/e), and the reply goes on with the answers.
async fn answer(
    chat: &mut Conversation,
    input: &mut Input,
    prompt: &str,
    timeout: Option<std::time::Duration>,
) -> Result<(), String> {
    let mut reply = chat.send(prompt).await.map_err(|e| e.to_string())?;
    let mut display = Display::new(timeout);
    loop {
        while let Some(event) = reply.next().await {
            display.event(&event);
        }
        let pending = chat.pending_approvals();
        if pending.is_empty() {
            return Ok(());
        }
        display.pause();
        let agent = chat.agent().clone();
        let decisions = approve::decide(&agent, &pending, Approver::Ask, input).await?;
        reply = chat.decide(decisions).map_err(|e| e.to_string())?;
    }
}
