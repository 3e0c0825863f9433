//! `agentloop run "prompt"`.

use std::process::ExitCode;

use agentloop::Message;
use agentloop::run::{RunEvent, RunResult, RunStopReason};
use futures::StreamExt;

use crate::cli::RunArgs;
use crate::display::Display;
use crate::{model, output};

/// Exit code for a run that ended: 0 answered, 1 failed, 2 stopped by a limit or timeout.
pub fn exit_code(result: &RunResult) -> ExitCode {
    match result.stop_reason {
        RunStopReason::EndTurn => ExitCode::SUCCESS,
        RunStopReason::Error => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

/// Run the prompt.
pub async fn run(args: RunArgs) -> Result<ExitCode, String> {
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    let agent = model::agent(&args.model, &resolved)?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = agent.options().cancel_token(cancel.clone());
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let mut events = agent.stream_with(vec![Message::user(args.prompt)], options);
    let mut display = (!args.json).then(Display::new);
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
    let result = finished.ok_or_else(|| "the run ended without a result".to_owned())?;
    if args.json {
        let doc = output::run_json(&result);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    }
    Ok(exit_code(&result))
}
