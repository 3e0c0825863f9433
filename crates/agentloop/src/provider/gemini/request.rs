//! Canonical [`Request`] → `GenerateContentRequest` JSON.
//!
//! Shapes from the Gemini API reference (ai.google.dev/api: "Generating content", "Caching",
//! "Function calling", "Thinking", "Thought signatures"): `contents` alternate `user` and
//! `model`, tool results are `functionResponse` parts of a `user` turn (with the call's name,
//! which Gemini requires), the system prompt is `systemInstruction`, tools are
//! `functionDeclarations` with `parametersJsonSchema`, and tool choice is
//! `toolConfig.functionCallingConfig`.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::decode::SYNTHETIC_ID_PREFIX;
use super::{GeminiOptions, PROVIDER_NAME, VERTEX_PROVIDER_NAME, tools};
use crate::error::{Error, Result};
use crate::message::{
    ContentBlock, ImageSource, Message, Request, Role, ToolResult, ToolResultContent,
};
use crate::provider::http::BodySize;
use crate::tool::ToolChoice;

/// The documented stand-in for a thought signature Gemini never issued (history written by
/// another provider or by hand): Gemini 3 rejects a model turn's first function call without
/// one ("Thought signatures", FAQ on transferring conversations from other models).
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// The serialized body.
pub(super) fn build(
    request: &Request,
    options: &GeminiOptions,
    body_size: &BodySize,
) -> Result<Bytes> {
    let body = body(request, options)?;
    body_size
        .serialize(&body)
        .map_err(|e| Error::config(format!("could not serialize the Gemini request: {e}")))
}

/// The body as JSON.
pub(super) fn body(request: &Request, options: &GeminiOptions) -> Result<Value> {
    let mut system: Vec<Value> = Vec::new();
    if let Some(text) = request.system.as_deref().filter(|t| !t.is_empty()) {
        system.push(json!({"text": text}));
    }
    let names = call_names(&request.messages);
    let signatures_required = needs_signatures(&request.model);
    let mut contents: Vec<Value> = Vec::new();
    for message in &request.messages {
        let (role, parts) = match message.role {
            Role::System => {
                for block in &message.content {
                    if let ContentBlock::Text { text } = block
                        && !text.is_empty()
                    {
                        system.push(json!({"text": text}));
                    }
                }
                continue;
            }
            Role::User => ("user", user_parts(message, &names)?),
            Role::Assistant => ("model", model_parts(message, signatures_required)),
        };
        if parts.is_empty() {
            continue;
        }
        push_content(&mut contents, role, parts);
    }

    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    let tools = tools::wire_tools(&request.tools)?;
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert("toolConfig".into(), tool_config(choice));
    }
    let generation = generation_config(request, options)?;
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    // Extensions are top-level fields (`safetySettings`, `cachedContent`, `labels`, ...) and
    // win over what was built.
    for (key, value) in request.extensions.iter().flatten() {
        body.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(body))
}

/// Gemini wants turns to alternate; consecutive messages of one role become one content.
fn push_content(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if let Some(last) = contents.last_mut()
        && last.get("role").and_then(Value::as_str) == Some(role)
        && let Some(existing) = last.get_mut("parts").and_then(Value::as_array_mut)
    {
        existing.extend(parts);
        return;
    }
    contents.push(json!({"role": role, "parts": parts}));
}

/// Tool-use id → tool name over the whole history: a `functionResponse` must name its function.
fn call_names(messages: &[Message]) -> HashMap<&str, &str> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect()
}

/// Gemini 1.x and 2.x do not check signatures; later models (and unknown names) do.
fn needs_signatures(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    !(model.starts_with("gemini-1") || model.starts_with("gemini-2"))
}

fn user_parts(message: &Message, names: &HashMap<&str, &str>) -> Result<Vec<Value>> {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => parts.push(json!({"text": text})),
            ContentBlock::Image { source } => parts.push(image(source)),
            ContentBlock::ToolResult(result) => parts.push(function_response(result, names)?),
            ContentBlock::Native { provider, value } if is_gemini(provider) && is_part(value) => {
                parts.push(value.clone());
            }
            // Reasoning and other providers' blocks have no place in a user turn.
            _ => {}
        }
    }
    Ok(parts)
}

/// A model turn. A Gemini reasoning block carries the signature of the part after it (see
/// the stream decoder); the thought summary text itself is not sent back, Gemini reads only
/// the signature. The first function call of a turn with no signature at all gets
/// [`SKIP_SIGNATURE`].
fn model_parts(message: &Message, signatures_required: bool) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::new();
    let mut pending: Option<&str> = None;
    let mut first_call: Option<usize> = None;
    for block in &message.content {
        let part = match block {
            // A Gemini signature waits for the part it belongs to. Unsigned or foreign
            // reasoning cannot be verified and is left out (the arm at the end).
            ContentBlock::Thinking {
                signature: Some(signature),
                provider: Some(provider),
                ..
            } if is_gemini(provider) => {
                pending = Some(signature);
                continue;
            }
            ContentBlock::Text { text } => {
                if text.is_empty() && pending.is_none() {
                    continue;
                }
                json!({"text": text})
            }
            ContentBlock::Image { source } => image(source),
            ContentBlock::ToolUse { id, name, input } => {
                let mut call = Map::new();
                if !id.is_empty() && !id.starts_with(SYNTHETIC_ID_PREFIX) {
                    call.insert("id".into(), id.clone().into());
                }
                call.insert("name".into(), name.clone().into());
                let args = match input {
                    Value::Object(_) => input.clone(),
                    // Invalid arguments were kept as text: Gemini needs an object.
                    _ => Value::Object(Map::new()),
                };
                call.insert("args".into(), args);
                first_call.get_or_insert(parts.len());
                json!({ "functionCall": call })
            }
            ContentBlock::Native { provider, value } if is_gemini(provider) => {
                if !is_part(value) {
                    continue;
                }
                value.clone()
            }
            _ => continue,
        };
        parts.push(with_signature(part, pending.take()));
    }
    if let Some(signature) = pending {
        // A signature on the turn's last, empty text part, as Gemini sent it.
        parts.push(json!({"text": "", "thoughtSignature": signature}));
    }
    // A turn Gemini signed is sent as Gemini made it; only a turn with no signature at all
    // (another provider's, or written by hand) needs the stand-in.
    let signed = parts.iter().any(|p| p.get("thoughtSignature").is_some());
    if signatures_required
        && !signed
        && let Some(index) = first_call
        && let Some(Value::Object(part)) = parts.get_mut(index)
    {
        part.insert("thoughtSignature".into(), SKIP_SIGNATURE.into());
    }
    parts
}

/// Blocks made by the Gemini API or by Vertex AI (one model family, one signature scheme).
fn is_gemini(provider: &str) -> bool {
    provider == PROVIDER_NAME || provider == VERTEX_PROVIDER_NAME
}

fn with_signature(mut part: Value, signature: Option<&str>) -> Value {
    if let (Some(signature), Value::Object(map)) = (signature, &mut part)
        && !map.contains_key("thoughtSignature")
    {
        map.insert("thoughtSignature".into(), signature.into());
    }
    part
}

/// Native blocks the decoder made from candidate fields (grounding, an abnormal finish) are
/// not parts and are never sent back.
fn is_part(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|v| !v.contains_key("groundingMetadata") && !v.contains_key("finishReason"))
}

fn image(source: &ImageSource) -> Value {
    match source {
        ImageSource::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        ImageSource::Url { url } => {
            let mut file = Map::new();
            if let Some(mime) = mime_from_url(url) {
                file.insert("mimeType".into(), mime.into());
            }
            file.insert("fileUri".into(), url.clone().into());
            json!({ "fileData": file })
        }
    }
}

fn mime_from_url(url: &str) -> Option<&'static str> {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    let extension = path.rsplit('.').next()?;
    Some(match extension {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// `functionResponse.response` is an object; the reference names `output` for the result and
/// `error` for a failure.
fn function_response(result: &ToolResult, names: &HashMap<&str, &str>) -> Result<Value> {
    let Some(name) = names.get(result.tool_use_id.as_str()) else {
        return Err(Error::InvalidHistory {
            message: format!(
                "the tool result for `{}` answers no tool use in the history, and Gemini needs the function's name; keep the assistant message with that call",
                result.tool_use_id
            ),
        });
    };
    let text = match &result.content {
        ToolResultContent::Text(text) => text.clone(),
        ToolResultContent::Blocks(_) => result.content.to_text(),
    };
    // A JSON object result is sent as structured output rather than as its text.
    let output = match serde_json::from_str::<Value>(&text) {
        Ok(value @ Value::Object(_)) if !result.is_error => value,
        _ => Value::String(text),
    };
    let key = if result.is_error { "error" } else { "output" };
    let mut response = Map::new();
    if !result.tool_use_id.is_empty() && !result.tool_use_id.starts_with(SYNTHETIC_ID_PREFIX) {
        response.insert("id".into(), result.tool_use_id.clone().into());
    }
    response.insert("name".into(), (*name).into());
    response.insert("response".into(), json!({ key: output }));
    Ok(json!({ "functionResponse": response }))
}

fn tool_config(choice: &ToolChoice) -> Value {
    let config = match choice {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Tool { name } => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    json!({ "functionCallingConfig": config })
}

fn generation_config(request: &Request, options: &GeminiOptions) -> Result<Map<String, Value>> {
    let mut config = Map::new();
    // Structured output: `responseMimeType` with `responseJsonSchema`, which takes JSON Schema
    // (Gemini's subset, see [`crate::tool::schema::gemini`]) where `responseSchema` wants
    // the OpenAPI form (ai.google.dev/api/generate-content, `GenerationConfig`).
    if let Some(output) = &request.output {
        let schema = crate::tool::schema::gemini(&output.schema).map_err(|why| {
            Error::InvalidToolSchema {
                tool: output.name.clone(),
                message: format!(
                    "{why}; Gemini cannot take it (give a recursive type a fixed depth, or \
                     use the prompted strategy)"
                ),
            }
        })?;
        config.insert("responseMimeType".into(), "application/json".into());
        config.insert("responseJsonSchema".into(), schema);
    }
    if let Some(max) = request.max_tokens {
        config.insert("maxOutputTokens".into(), max.into());
    }
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json_f32(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json_f32(top_p));
    }
    if let Some(top_k) = request.top_k {
        config.insert("topK".into(), top_k.into());
    }
    if !request.stop_sequences.is_empty() {
        config.insert(
            "stopSequences".into(),
            request.stop_sequences.clone().into(),
        );
    }
    if let Some(thinking) = &options.thinking {
        let mut value = Map::new();
        if thinking.include_thoughts {
            value.insert("includeThoughts".into(), true.into());
        }
        if let Some(budget) = thinking.budget {
            value.insert("thinkingBudget".into(), budget.into());
        }
        if let Some(level) = &thinking.level {
            value.insert("thinkingLevel".into(), level.clone().into());
        }
        config.insert("thinkingConfig".into(), Value::Object(value));
    }
    Ok(config)
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
