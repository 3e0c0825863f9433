//! `agentloop replay --format openai|anthropic FILE`.

use std::io::Read;
use std::process::ExitCode;

use agentloop::provider::replay::{self, Format};
use agentloop::{ContentBlock, Response};
use serde_json::{Value, json};

use crate::cli::{self, ReplayArgs};

/// The assembled response in the documented shape: text, tool calls in order with parsed
/// input (or `null` plus `input_error`), stop reason, usage.
pub fn response_json(response: &Response) -> Value {
    let tool_calls: Vec<Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(match input {
                // Invalid JSON is kept as the raw text; report why it did not parse.
                Value::String(raw) => {
                    let reason = serde_json::from_str::<Value>(raw)
                        .err()
                        .map_or_else(|| "not a JSON object".to_owned(), |e| e.to_string());
                    json!({"id": id, "name": name, "input": null, "input_error": reason})
                }
                input => json!({"id": id, "name": name, "input": input}),
            }),
            _ => None,
        })
        .collect();
    json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": response.stop_reason.as_str(),
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    })
}

/// Replay the file and print the JSON; a stream carrying an error exits non-zero.
pub fn replay(args: &ReplayArgs) -> Result<ExitCode, String> {
    let mut body = Vec::new();
    if args.file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut body)
            .map_err(|e| format!("could not read standard input: {e}"))?;
    } else {
        body = std::fs::read(&args.file)
            .map_err(|e| format!("could not read {}: {e}", args.file.display()))?;
    }
    let format = match args.format {
        cli::Format::Openai => Format::OpenAi,
        cli::Format::Anthropic => Format::Anthropic,
    };
    let replayed = replay::assemble(format, &body);
    let doc = response_json(&replayed.response);
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
    );
    match replayed.error {
        Some(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::FAILURE)
        }
        None => Ok(ExitCode::SUCCESS),
    }
}
