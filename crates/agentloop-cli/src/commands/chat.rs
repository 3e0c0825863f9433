//! `agentloop chat`: an interactive conversation with history.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentloop::conversation::{Conversation, InterruptHandle};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::ModelArgs;
use crate::display::{Display, short};
use crate::model;

const HELP: &str = "commands: /clear (forget the conversation), /history (show it), /model NAME (switch model), /quit";

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
                    std::process::exit(130);
                }
            }
        });
    }

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? else {
            break;
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
            ("/model", name) if !name.is_empty() => {
                match model::resolve(Some(name), args.base_url.as_deref()) {
                    Ok(next) => {
                        chat.set_model(next.provider, next.model);
                        println!("(model: {name})");
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
            (command, _) if command.starts_with('/') => {
                eprintln!("unknown command {command}; {HELP}")
            }
            _ => {
                busy.store(true, Ordering::SeqCst);
                let outcome = answer(&mut chat, line).await;
                busy.store(false, Ordering::SeqCst);
                if let Err(e) = outcome {
                    eprintln!("error: {e}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn answer(chat: &mut Conversation, prompt: &str) -> Result<(), String> {
    let mut reply = chat.send(prompt).await.map_err(|e| e.to_string())?;
    let mut display = Display::new();
    while let Some(event) = reply.next().await {
        display.event(&event);
    }
    Ok(())
}
