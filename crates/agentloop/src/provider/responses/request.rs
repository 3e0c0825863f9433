//! Canonical [`Request`] → `POST /responses` body.
//!
//! Shapes from OpenAI's API reference ("Create a model response", platform.openai.com/docs/
//! api-reference/responses/create, and the "Function calling", "Reasoning" and "Structured
//! Outputs" guides): the system prompt is `instructions`; the history is `input`, a list of
//! items: messages (`input_text`/`input_image` parts for the user, `output_text` for the
//! assistant), `function_call` items (our tool uses) and `function_call_output` items (our tool
//! results), reasoning items sent back as OpenAI made them, and built-in tool items kept as
//! native blocks. Tools are flat (`{"type": "function", "name", "parameters", "strict"}`);
//! `strict` is always sent, because Responses makes functions strict when it is left out.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{PROVIDER_NAME, ResponsesOptions, tools};
use crate::error::{Error, Result};
use crate::message::{
    ContentBlock, ImageSource, Message, OutputFormat, Request, Role, ToolResult, ToolResultContent,
};
use crate::provider::http::BodySize;
use crate::provider::openai::{function_parameters, refuses_sampling};
use crate::tool::{ToolChoice, ToolDefinition};

/// The serialized body.
pub(super) fn build(
    request: &Request,
    options: &ResponsesOptions,
    stream: bool,
    body_size: &BodySize,
) -> Result<Bytes> {
    let body = body(request, options, stream)?;
    body_size
        .serialize(&body)
        .map_err(|e| Error::config(format!("could not serialize the Responses request: {e}")))
}

/// The body as JSON.
pub(super) fn body(request: &Request, options: &ResponsesOptions, stream: bool) -> Result<Value> {
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), system.into());
    }
    let mut input = Vec::new();
    for message in &request.messages {
        push_message(&mut input, message, options);
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let mut wire = Vec::with_capacity(request.tools.len());
        for tool in &request.tools {
            wire.push(match tool {
                ToolDefinition::Function(function) => {
                    let (parameters, strict) = function_parameters(
                        &function.name,
                        &function.input_schema,
                        function.strict,
                    );
                    let mut out = Map::new();
                    out.insert("type".into(), "function".into());
                    out.insert("name".into(), function.name.clone().into());
                    if !function.description.is_empty() {
                        out.insert("description".into(), function.description.clone().into());
                    }
                    out.insert("parameters".into(), parameters.into_owned());
                    out.insert("strict".into(), strict.into());
                    Value::Object(out)
                }
                ToolDefinition::Native(native) => tools::wire_tool(native)?,
            });
        }
        body.insert("tools".into(), Value::Array(wire));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    if let Some(parallel) = request.parallel_tool_calls {
        body.insert("parallel_tool_calls".into(), parallel.into());
    }
    if let Some(max) = request.max_tokens {
        body.insert("max_output_tokens".into(), max.into());
    }
    let sampling = !refuses_sampling(&request.model);
    if let Some(temperature) = request.temperature {
        if sampling {
            body.insert("temperature".into(), json_f32(temperature));
        } else {
            tracing::warn!(
                model = request.model.as_str(),
                "temperature is left out: OpenAI reasoning models refuse it"
            );
        }
    }
    if let Some(top_p) = request.top_p {
        if sampling {
            body.insert("top_p".into(), json_f32(top_p));
        } else {
            tracing::warn!(
                model = request.model.as_str(),
                "top_p is left out: OpenAI reasoning models refuse it"
            );
        }
    }
    if request.top_k.is_some() {
        tracing::warn!("top_k is left out: the Responses API has no such parameter");
    }
    if !request.stop_sequences.is_empty() {
        tracing::warn!(
            "stop sequences are left out: the Responses API has no stop parameter; set one in extensions for a compatible server that takes it"
        );
    }
    if let Some(reasoning) = &options.reasoning {
        let mut value = Map::new();
        if let Some(effort) = &reasoning.effort {
            value.insert("effort".into(), effort.clone().into());
        }
        if let Some(summary) = &reasoning.summary {
            value.insert("summary".into(), summary.clone().into());
        }
        body.insert("reasoning".into(), Value::Object(value));
    }
    if let Some(format) = request.output.as_deref() {
        body.insert("text".into(), json!({ "format": text_format(format) }));
    }
    body.insert("store".into(), options.store.into());
    if options.encrypted_reasoning && !options.store {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if options.store
        && let Some(metadata) = &request.metadata
    {
        body.insert("metadata".into(), metadata.clone());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    for (key, value) in request.extensions.iter().flatten() {
        body.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(body))
}

/// `text.format`: `{"type": "json_schema", name, schema, strict}`, the schema shaped like a
/// strict function's parameters when strict.
fn text_format(format: &OutputFormat) -> Value {
    let (schema, strict) = function_parameters(&format.name, &format.schema, format.strict);
    json!({
        "type": "json_schema",
        "name": format.name,
        "schema": schema.into_owned(),
        "strict": strict,
    })
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
    }
}

fn push_message(input: &mut Vec<Value>, message: &Message, options: &ResponsesOptions) {
    match message.role {
        Role::System => {
            let text = message.text();
            if !text.is_empty() {
                input.push(json!({"role": "developer", "content": text}));
            }
        }
        Role::User => {
            let mut parts = Vec::new();
            for block in &message.content {
                match block {
                    ContentBlock::Text { text } if !text.is_empty() => {
                        parts.push(json!({"type": "input_text", "text": text}));
                    }
                    ContentBlock::Image { source } => parts.push(input_image(source)),
                    ContentBlock::ToolResult(result) => {
                        flush_user(input, &mut parts);
                        input.push(function_call_output(result));
                        let images: Vec<Value> = match &result.content {
                            ToolResultContent::Blocks(blocks) => blocks
                                .iter()
                                .filter_map(|b| match b {
                                    ContentBlock::Image { source } => Some(input_image(source)),
                                    _ => None,
                                })
                                .collect(),
                            ToolResultContent::Text(_) => Vec::new(),
                        };
                        // Images a tool returned follow in a user message, as on Chat
                        // Completions.
                        if !images.is_empty() {
                            input.push(json!({"role": "user", "content": images}));
                        }
                    }
                    ContentBlock::Native { provider, value } if provider == PROVIDER_NAME => {
                        flush_user(input, &mut parts);
                        input.push(value.clone());
                    }
                    _ => {}
                }
            }
            flush_user(input, &mut parts);
        }
        Role::Assistant => {
            let mut text: Vec<Value> = Vec::new();
            for block in &message.content {
                match block {
                    ContentBlock::Text { text: t } if !t.is_empty() => {
                        text.push(json!({"type": "output_text", "text": t}));
                    }
                    ContentBlock::ToolUse {
                        id,
                        name,
                        input: args,
                    } => {
                        flush_assistant(input, &mut text);
                        let arguments: Cow<'_, str> = match args {
                            // Arguments that were not valid JSON go back as the model wrote them.
                            Value::String(raw) => Cow::Borrowed(raw),
                            Value::Null => Cow::Borrowed("{}"),
                            other => Cow::Owned(other.to_string()),
                        };
                        input.push(json!({
                            "type": "function_call",
                            "call_id": id,
                            "name": name,
                            "arguments": arguments,
                        }));
                    }
                    ContentBlock::Thinking {
                        signature: Some(signature),
                        provider: Some(provider),
                        ..
                    } if provider == PROVIDER_NAME => {
                        if let Some(item) = reasoning_item(signature, options) {
                            flush_assistant(input, &mut text);
                            input.push(item);
                        }
                    }
                    // Items go back as they came; the decoder's notes (citations, no `type`)
                    // are not items.
                    ContentBlock::Native { provider, value }
                        if provider == PROVIDER_NAME && value.get("type").is_some() =>
                    {
                        flush_assistant(input, &mut text);
                        input.push(value.clone());
                    }
                    // Other providers' reasoning and blocks cannot be checked here.
                    _ => {}
                }
            }
            flush_assistant(input, &mut text);
        }
    }
}

fn flush_user(input: &mut Vec<Value>, parts: &mut Vec<Value>) {
    if !parts.is_empty() {
        input.push(json!({"role": "user", "content": std::mem::take(parts)}));
    }
}

fn flush_assistant(input: &mut Vec<Value>, parts: &mut Vec<Value>) {
    if !parts.is_empty() {
        input.push(json!({"role": "assistant", "content": std::mem::take(parts)}));
    }
}

/// A reasoning block's signature is the reasoning item OpenAI sent (see the decoder). Without
/// `store`, an item is only of use with its `encrypted_content`; an item without it (or a
/// signature that is not an item) is left out, since OpenAI would look its id up and fail.
fn reasoning_item(signature: &str, options: &ResponsesOptions) -> Option<Value> {
    let Ok(Value::Object(mut item)) = serde_json::from_str::<Value>(signature) else {
        return None;
    };
    if item.get("type").and_then(Value::as_str) != Some("reasoning") {
        return None;
    }
    let encrypted = item
        .get("encrypted_content")
        .is_some_and(|e| e.as_str().is_some_and(|e| !e.is_empty()));
    if !encrypted && !options.store {
        return None;
    }
    if !encrypted {
        item.remove("encrypted_content");
    }
    // `summary` is required on input items.
    item.entry("summary").or_insert_with(|| json!([]));
    Some(Value::Object(item))
}

fn input_image(source: &ImageSource) -> Value {
    let url = match source {
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url { url } => url.clone(),
    };
    json!({"type": "input_image", "image_url": url, "detail": "auto"})
}

/// A tool result as a `function_call_output` item. Its output is text; an error's text gets an
/// `Error: ` prefix (the API has no error flag) unless it already starts with "error".
fn function_call_output(result: &ToolResult) -> Value {
    let text = result.content.to_text();
    let says_error = text
        .get(..5)
        .is_some_and(|head| head.eq_ignore_ascii_case("error"));
    let output = if result.is_error && !says_error {
        format!("Error: {text}")
    } else {
        text
    };
    json!({
        "type": "function_call_output",
        "call_id": result.tool_use_id,
        "output": output,
    })
}

/// An `f32` as the decimal a person wrote (0.7, not 0.699999988079071).
fn json_f32(value: f32) -> Value {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}
