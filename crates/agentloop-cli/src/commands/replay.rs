//! `agentloop replay [--format openai|anthropic|gemini|bedrock|openai-responses] FILE`: the format is recognised from the stream
//! when not given, and a given format that does not match the stream is an error rather than a
//! plausible empty answer.

use std::io::Read;
use std::process::ExitCode;

use agentloop::provider::replay::{self, WireFormat};
use agentloop::sse::SseParser;
use agentloop::{ContentBlock, Error, Response};
use serde_json::{Value, json};

use crate::cli::{self, ReplayArgs};

/// The assembled response in the documented shape: text, tool calls in order with parsed
/// input (or `null` plus `input_error`), stop reason, usage; for a stream that failed, the stop
/// reason is `null` (the model never said why it stopped) and `error` says what happened.
pub fn response_json(response: &Response, error: Option<&Error>) -> Value {
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
    let mut doc = json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": error.is_none().then(|| response.stop_reason.as_str()),
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    });
    if let Some(error) = error {
        doc["error"] = json!({"kind": error.kind(), "message": error.to_string()});
    }
    doc
}

/// Anthropic's stream event types (the `event:` field and the data's `type`).
const ANTHROPIC_EVENTS: [&str; 7] = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
];

/// Bedrock `ConverseStream` event types, as the decoded form of a stream names them.
const BEDROCK_EVENTS: [&str; 6] = [
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
];

/// The format a recorded stream is in, judged by its first event that only one format has:
/// OpenAI's `chat.completion.chunk` objects (`choices`, `[DONE]`), Anthropic's typed events or
/// Gemini's `GenerateContentResponse` chunks (`candidates`, `usageMetadata`). A body that is one
/// Google error object (`{"error": {"code", "status"}}`, what Gemini sends even under
/// `text/event-stream`) is Gemini's too. Bedrock's binary event-stream body is known by its
/// first frame's prelude (its CRC checks), its decoded form by a first line holding one
/// `ConverseStream` event (`{"messageStart": ...}`).
pub fn detect(body: &[u8]) -> Option<WireFormat> {
    if matches!(
        agentloop::provider::bedrock::eventstream::frame_len(body),
        Ok(Some(_))
    ) {
        return Some(WireFormat::Bedrock);
    }
    let trimmed = body.trim_ascii_start();
    let first_line = trimmed.split(|b| *b == b'\n').next().unwrap_or_default();
    if let Ok(serde_json::Value::Object(event)) = serde_json::from_slice::<Value>(first_line)
        && event.len() == 1
        && event.keys().all(|k| BEDROCK_EVENTS.contains(&k.as_str()))
    {
        return Some(WireFormat::Bedrock);
    }
    if trimmed.starts_with(b"{")
        && let Ok(value) = serde_json::from_slice::<Value>(trimmed)
        && value.pointer("/error/status").is_some_and(Value::is_string)
    {
        return Some(WireFormat::Gemini);
    }
    let mut found = None;
    let mut parser = SseParser::new();
    let mut look = |event: agentloop::sse::SseEvent<'_>| {
        if found.is_none() {
            found = classify(event.event, &event.data);
        }
    };
    parser.feed(body, &mut look);
    parser.finish(&mut look);
    found
}

fn classify(event: &str, data: &str) -> Option<WireFormat> {
    if ANTHROPIC_EVENTS.contains(&event) {
        return Some(WireFormat::Anthropic);
    }
    if event.starts_with("response.") {
        return Some(WireFormat::OpenAiResponses);
    }
    if data.trim() == "[DONE]" {
        return Some(WireFormat::OpenAi);
    }
    let value: Value = serde_json::from_str(data).ok()?;
    let object = value.as_object()?;
    let chunk = object
        .get("object")
        .and_then(Value::as_str)
        .is_some_and(|o| o.starts_with("chat.completion"));
    if chunk || object.contains_key("choices") {
        return Some(WireFormat::OpenAi);
    }
    if ["candidates", "usageMetadata", "promptFeedback"]
        .iter()
        .any(|key| object.contains_key(*key))
    {
        return Some(WireFormat::Gemini);
    }
    let kind = object.get("type").and_then(Value::as_str)?;
    if kind.starts_with("response.") {
        return Some(WireFormat::OpenAiResponses);
    }
    ANTHROPIC_EVENTS
        .contains(&kind)
        .then_some(WireFormat::Anthropic)
}

fn describe(format: WireFormat) -> (&'static str, &'static str) {
    match format {
        WireFormat::OpenAi => ("an OpenAI stream", "openai"),
        WireFormat::Anthropic => ("an Anthropic stream", "anthropic"),
        WireFormat::Gemini => ("a Gemini stream", "gemini"),
        WireFormat::Bedrock => ("a Bedrock stream", "bedrock"),
        WireFormat::OpenAiResponses => ("an OpenAI Responses stream", "openai-responses"),
    }
}

/// The format to replay with: the one given, if the stream does not plainly say otherwise,
/// or the one the stream is in.
fn choose(given: Option<cli::Format>, body: &[u8]) -> Result<WireFormat, String> {
    let given = given.map(|format| match format {
        cli::Format::Openai => WireFormat::OpenAi,
        cli::Format::Anthropic => WireFormat::Anthropic,
        cli::Format::Gemini => WireFormat::Gemini,
        cli::Format::Bedrock => WireFormat::Bedrock,
        cli::Format::OpenaiResponses => WireFormat::OpenAiResponses,
    });
    match (given, detect(body)) {
        (Some(given), Some(detected)) if given != detected => {
            let (looks, flag) = describe(detected);
            let (said, _) = describe(given);
            Err(format!(
                "this looks like {looks}, not {said}: pass --format {flag}, or leave --format out to have it recognised"
            ))
        }
        (Some(format), _) | (None, Some(format)) => Ok(format),
        (None, None) => Err(
            "could not tell the stream's format (no OpenAI chunk, Anthropic event, Gemini chunk, Bedrock frame or Responses event in it): pass --format openai, anthropic, gemini, bedrock or openai-responses"
                .to_owned(),
        ),
    }
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
    let format = choose(args.format, &body)?;
    let replayed = replay::assemble(format, &body);
    let doc = response_json(&replayed.response, replayed.error.as_ref());
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
