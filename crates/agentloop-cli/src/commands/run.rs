//! `agentloop run "prompt"` (or `agentloop run -` with the prompt on standard input).

use std::io::Read;
use std::pin::Pin;
use std::process::ExitCode;

use agentloop::output::Output;
use agentloop::run::RunEvent;
use agentloop::stream::StreamEvent;
use futures::{Stream, StreamExt};
use serde_json::Value;

use crate::cli::RunArgs;
use crate::commands::approve::{self, Approver};
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
    let approver = match (args.approve, args.yes) {
        (_, true) => Approver::Yes,
        (true, false) => Approver::Ask,
        (false, false) => Approver::Refuse,
    };
    if approver == Approver::Ask && args.prompt == "-" {
        return Err(
            "--approve reads its answers from standard input: give the prompt as an argument \
             instead of `-`"
                .to_owned(),
        );
    }
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    let agent = model::agent(&args.model, &resolved)?;
    let prompt = prompt(args.prompt)?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    if let (Some(db), Some(run_id)) = (&args.db, &args.run_id) {
        let store = crate::commands::runs::open(db)?;
        let result = agent
            .run_durable(run_id.clone(), prompt, &store)
            .await
            .map_err(|e| e.to_string())?;
        return crate::commands::runs::finish(&result, args.json, args.model.timeout);
    }
    // One token for the run and its resumptions after approval: Ctrl-C stops whichever runs.
    let cancel = tokio_util::sync::CancellationToken::new();
    let agent = agent.with_options(|o| o.cancel = Some(cancel.clone()));
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let output_schema = args.output_schema.as_deref().map(read_schema).transpose()?;
    let typed = output_schema.is_some();
    let mut events: Pin<Box<dyn Stream<Item = RunEvent> + Send>> = match output_schema {
        Some(schema) => Box::pin(
            agent.run_output_stream_with(prompt, Output::<Value>::new().with_schema(schema)),
        ),
        None => Box::pin(agent.run_stream(prompt)),
    };
    let mut display = (!args.json).then(|| Display::new(args.model.timeout));
    let result = loop {
        let mut finished = None;
        while let Some(event) = events.next().await {
            // A typed answer is printed once checked, alone: its text does not stream.
            let answer_text = matches!(event, RunEvent::Model(StreamEvent::TextDelta { .. }));
            if let Some(display) = display.as_mut()
                && !(typed && answer_text)
            {
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
        let result = finished.ok_or_else(|| "the run ended without a result".to_owned())?;
        let Some(paused) = result.paused.as_deref() else {
            break result;
        };
        // The spinner must not draw over the questions.
        if let Some(display) = display.as_mut() {
            display.pause();
        }
        match approve::decide(&agent, paused.pending(), approver, &mut approve::Stdin).await {
            // A typed run keeps its schema while paused and goes on checking answers with it.
            Ok(decisions) if typed => {
                events = Box::pin(
                    agent
                        .resume_output_stream_with(paused, decisions, Output::<Value>::new())
                        .map_err(|e| e.to_string())?,
                );
            }
            Ok(decisions) => {
                events = Box::pin(
                    agent
                        .resume_stream(paused, decisions)
                        .map_err(|e| e.to_string())?,
                );
            }
            Err(refusal) => {
                eprintln!("error: {refusal}");
                break result;
            }
        }
    };
    ctrl_c.abort();
    drop(display);
    if args.json {
        if let Some(sentence) = display::timeout_sentence(&result, args.model.timeout) {
            eprintln!("{sentence}");
        }
        let mut doc = output::run_json(&result);
        if typed {
            doc["output"] = result.output.clone().unwrap_or(Value::Null);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else if let Some(value) = result.output.as_ref().filter(|_| typed) {
        println!(
            "{}",
            serde_json::to_string_pretty(value).map_err(|e| e.to_string())?
        );
    }
    Ok(exit::for_run(&result))
}

/// The `--output-schema` file's JSON Schema.
fn read_schema(path: &std::path::Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the output schema {}: {e}", path.display()))?;
    let schema: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the output schema {} is not JSON: {e}", path.display()))?;
    if !schema.is_object() {
        return Err(format!(
            "the output schema {} must be a JSON Schema object, not {schema}",
            path.display()
        ));
    }
    Ok(schema)
}
