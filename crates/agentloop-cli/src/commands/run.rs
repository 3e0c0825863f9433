//! `agentloop run "prompt"` (or `agentloop run -` with the prompt on standard input).

use std::io::Read;
use std::process::ExitCode;

use agentloop::run::RunEvent;
use futures::StreamExt;

use crate::cli::RunArgs;
use crate::display::{self, Display};
use crate::{exit, model, output};

/// The prompt argument, or standard input for `-` (without its final line end).
fn prompt(arg: String) -> Result<String, String> {
    if arg != "-" {
        return Ok(arg);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("could not read the prompt from standard input: {e}"))?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.trim().is_empty() {
        return Err("the prompt read from standard input (`run -`) is empty".to_owned());
    }
    Ok(text.to_owned())
}

/// Run the prompt.
pub async fn run(args: RunArgs) -> Result<ExitCode, String> {
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    let agent = model::agent(&args.model, &resolved)?;
    let prompt = prompt(args.prompt)?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    let mut events = agent.run_stream(prompt);
    let cancel = events.cancel_handle();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let mut display = (!args.json).then(|| Display::new(args.model.timeout));
    let mut finished = None;
    while let Some(event) = events.next().await {
        if let Some(display) = display.as_mut() {
            display.event(&event);
        }
        match event {
            RunEvent::RunFinish { result } => finished = Some(*result),
            RunEvent::Error { error } if args.json => {
                // Reported inside the JSON document as well; keep stderr informative.
                eprintln!("error: {error}");
            }
            _ => {}
        }
    }
    ctrl_c.abort();
    drop(display);
    let result = finished.ok_or_else(|| "the run ended without a result".to_owned())?;
    if args.json {
        if let Some(sentence) = display::timeout_sentence(&result, args.model.timeout) {
            eprintln!("{sentence}");
        }
        let doc = output::run_json(&result);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    }
    Ok(exit::for_run(&result))
}
