//! Canonical [`Request`] → Converse request JSON (the same body for `Converse` and
//! `ConverseStream`).
//!
//! Shapes from the Bedrock API reference ("Converse", "Message", "ContentBlock",
//! "ToolConfiguration", "ToolSpecification", "ToolResultBlock", "ReasoningContentBlock",
//! "InferenceConfiguration"): `messages` alternate `user` and `assistant`, each a list of
//! content blocks keyed by kind (`text`, `image`, `toolUse`, `toolResult`,
//! `reasoningContent`); `system` is a list of text blocks; tools are `toolConfig.tools[]
//! .toolSpec` with `inputSchema.json`; tool choice is `toolConfig.toolChoice` (`auto`, `any`,
//! `tool`); model-specific fields (top-k, Claude's thinking) go in
//! `additionalModelRequestFields`. A structured answer ([`Request::output`]) is
//! `outputConfig.textFormat` ("OutputConfig", "OutputFormat", "OutputFormatStructure",
//! "JsonSchemaDefinition"): `{"type": "json_schema", "structure": {"jsonSchema": {"schema",
//! "name"}}}`, the schema as a JSON string. Bedrock takes it for some models only (the user
//! guide's "Get validated JSON results from models" lists them) and refuses schemas outside
//! its JSON Schema subset with a 400, so the strict form (Anthropic's closed objects) is sent
//! when the schema has one.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{BedrockOptions, PROVIDER_NAME};
use crate::error::{Error, Result};
use crate::message::{
    ContentBlock, ImageSource, Message, OutputFormat, Request, Role, ToolResult, ToolResultContent,
};
use crate::provider::http::BodySize;
use crate::tool::{ToolChoice, ToolDefinition};

/// The serialized body.
pub(super) fn build(
    request: &Request,
    options: &BedrockOptions,
    body_size: &BodySize,
) -> Result<Bytes> {
    let body = body(request, options)?;
    body_size
        .serialize(&body)
        .map_err(|e| Error::config(format!("could not serialize the Bedrock request: {e}")))
}

/// The body as JSON.
pub(super) fn body(request: &Request, options: &BedrockOptions) -> Result<Value> {
    let mut system: Vec<Value> = Vec::new();
    if let Some(text) = request.system.as_deref().filter(|t| !t.is_empty()) {
        system.push(json!({"text": text}));
    }
    let mut messages: Vec<Value> = Vec::new();
    let mut history_has_tools = false;
    for message in &request.messages {
        let (role, content) = match message.role {
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
            Role::User => ("user", user_content(message)?),
            Role::Assistant => ("assistant", assistant_content(message)),
        };
        history_has_tools |= content
            .iter()
            .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
        if content.is_empty() {
            continue;
        }
        push_message(&mut messages, role, content);
    }

    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    if let Some(max) = request.max_tokens {
        inference.insert("maxTokens".into(), max.into());
    }
    if let Some(t) = request.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if let Some(p) = request.top_p {
        inference.insert("topP".into(), json!(p));
    }
    if !request.stop_sequences.is_empty() {
        inference.insert("stopSequences".into(), json!(request.stop_sequences));
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    // Converse has no "none" choice: without tools in the history the tools are left out;
    // with them Bedrock requires the tool configuration, so it stays (without a choice).
    let no_tools = request.tool_choice == Some(ToolChoice::None) && !history_has_tools;
    let tools = if no_tools {
        Vec::new()
    } else {
        wire_tools(&request.tools)?
    };
    if !tools.is_empty() {
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        match &request.tool_choice {
            Some(ToolChoice::Auto) => {
                config.insert("toolChoice".into(), json!({"auto": {}}));
            }
            Some(ToolChoice::Required) => {
                config.insert("toolChoice".into(), json!({"any": {}}));
            }
            Some(ToolChoice::Tool { name }) => {
                config.insert("toolChoice".into(), json!({"tool": {"name": name}}));
            }
            Some(ToolChoice::None) | None => {}
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }
    if let Some(format) = request.output.as_deref() {
        body.insert("outputConfig".into(), output_config(format)?);
    }
    let mut additional = Map::new();
    if let Some(k) = request.top_k {
        additional.insert("top_k".into(), k.into());
    }
    if let Some(budget) = options.thinking_budget {
        additional.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if !additional.is_empty() {
        body.insert(
            "additionalModelRequestFields".into(),
            Value::Object(additional),
        );
    }
    // Extensions are top-level fields (`guardrailConfig`, `performanceConfig`,
    // `additionalModelRequestFields`, ...) and win over what was built.
    for (key, value) in request.extensions.iter().flatten() {
        body.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(body))
}

/// `outputConfig` for a structured answer: the schema in Anthropic's strict form when asked
/// and possible (closed objects, which Bedrock's subset wants), else in Bedrock's tool dialect.
fn output_config(format: &OutputFormat) -> Result<Value> {
    let strict = format.strict.then(|| {
        crate::tool::schema::anthropic_strict(&format.schema)
            .inspect_err(|why| {
                tracing::warn!(
                    output = %format.name,
                    keyword = why.keyword.as_str(),
                    path = why.path.as_str(),
                    "{why}: `{}` is sent in Bedrock's plain dialect",
                    format.name
                );
            })
            .ok()
    });
    let schema = match strict.flatten() {
        Some(schema) => schema,
        None => crate::tool::schema::bedrock(&format.schema).unwrap_or_else(|why| {
            tracing::warn!(output = %format.name, "{why}; sending the schema as written");
            format.schema.clone()
        }),
    };
    let schema = serde_json::to_string(&schema).map_err(|e| {
        Error::config(format!(
            "could not serialize the output schema `{}`: {e}",
            format.name
        ))
    })?;
    Ok(
        json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
            "schema": schema,
            "name": format.name,
        }}}}),
    )
}

/// Converse wants roles to alternate; consecutive messages of one role become one message.
fn push_message(messages: &mut Vec<Value>, role: &str, content: Vec<Value>) {
    if let Some(last) = messages.last_mut()
        && last.get("role").and_then(Value::as_str) == Some(role)
        && let Some(existing) = last.get_mut("content").and_then(Value::as_array_mut)
    {
        existing.extend(content);
        return;
    }
    messages.push(json!({"role": role, "content": content}));
}

/// A tool-use id in Bedrock's alphabet (`[a-zA-Z0-9_-]+`, at most 64 characters): ids made
/// by other providers may hold other characters. The same mapping is applied to a call and
/// its result, so they still match.
pub(crate) fn tool_use_id(id: &str) -> String {
    let mut out: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push_str("tooluse_");
    }
    out
}

fn user_content(message: &Message) -> Result<Vec<Value>> {
    let mut content = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                content.push(json!({"text": text}));
            }
            ContentBlock::Image { source } => content.push(image(source)?),
            ContentBlock::ToolResult(result) => content.push(tool_result(result)?),
            ContentBlock::Native { provider, value } if provider == PROVIDER_NAME => {
                content.push(value.clone());
            }
            _ => {}
        }
    }
    Ok(content)
}

fn assistant_content(message: &Message) -> Vec<Value> {
    let mut content = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => {
                content.push(json!({"text": text}));
            }
            ContentBlock::ToolUse { id, name, input } => {
                let input = match input {
                    Value::Object(_) => input.clone(),
                    // Arguments that were not valid JSON: Bedrock takes only an object.
                    Value::String(raw) => serde_json::from_str::<Value>(raw)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({})),
                    _ => json!({}),
                };
                content.push(json!({"toolUse": {
                    "toolUseId": tool_use_id(id),
                    "name": name,
                    "input": input,
                }}));
            }
            // Reasoning goes back only to the provider that signed it; other providers'
            // reasoning is left out (Bedrock would reject their signatures).
            ContentBlock::Thinking {
                thinking,
                signature,
                provider: Some(p),
            } if p == PROVIDER_NAME => {
                let mut text = Map::new();
                text.insert("text".into(), thinking.clone().into());
                if let Some(signature) = signature {
                    text.insert("signature".into(), signature.clone().into());
                }
                content.push(json!({"reasoningContent": {"reasoningText": text}}));
            }
            ContentBlock::RedactedThinking {
                data,
                provider: Some(p),
            } if p == PROVIDER_NAME => {
                content.push(json!({"reasoningContent": {"redactedContent": data}}));
            }
            ContentBlock::Native { provider, value } if provider == PROVIDER_NAME => {
                content.push(value.clone());
            }
            _ => {}
        }
    }
    content
}

fn image(source: &ImageSource) -> Result<Value> {
    match source {
        ImageSource::Base64 { media_type, data } => {
            let format = media_type
                .strip_prefix("image/")
                .filter(|f| matches!(*f, "png" | "jpeg" | "gif" | "webp"))
                .ok_or_else(|| Error::Unsupported {
                    provider: PROVIDER_NAME.to_owned(),
                    feature: format!(
                        "images of type {media_type} (Converse takes image/png, image/jpeg, image/gif and image/webp)"
                    ),
                })?;
            Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
        }
        ImageSource::Url { .. } => Err(Error::Unsupported {
            provider: PROVIDER_NAME.to_owned(),
            feature: "images by URL (Converse takes image bytes or an S3 location: download the image and send it as base64)".to_owned(),
        }),
    }
}

fn tool_result(result: &ToolResult) -> Result<Value> {
    let content = match &result.content {
        ToolResultContent::Text(text) => vec![json!({"text": text})],
        ToolResultContent::Blocks(blocks) => {
            let mut content = Vec::new();
            for block in blocks {
                match block {
                    ContentBlock::Text { text } => content.push(json!({"text": text})),
                    ContentBlock::Image { source } => content.push(image(source)?),
                    _ => {}
                }
            }
            content
        }
    };
    let mut value = Map::new();
    value.insert("toolUseId".into(), tool_use_id(&result.tool_use_id).into());
    value.insert("content".into(), Value::Array(content));
    // `status` is documented for Claude models only; it is sent when it says something.
    if result.is_error {
        value.insert("status".into(), "error".into());
    }
    Ok(json!({ "toolResult": value }))
}

/// `toolConfig.tools`: function tools as `toolSpec`, Bedrock's own tools (`bedrock.<name>`,
/// e.g. `bedrock.nova_grounding`) as `systemTool`.
fn wire_tools(tools: &[ToolDefinition]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for tool in tools {
        match tool {
            ToolDefinition::Function(function) => {
                let schema = match &function.input_schema {
                    Value::Object(schema) if !schema.is_empty() => {
                        let written = Value::Object(schema.clone());
                        // Bedrock's dialect; a schema it cannot express goes as written, so
                        // the model behind Bedrock is the judge rather than us.
                        crate::tool::schema::bedrock(&written).unwrap_or_else(|e| {
                            tracing::warn!(tool = %function.name, "{e}; sending the schema as written");
                            written
                        })
                    }
                    _ => json!({"type": "object", "properties": {}}),
                };
                let mut spec = Map::new();
                spec.insert("name".into(), function.name.clone().into());
                if !function.description.is_empty() {
                    spec.insert("description".into(), function.description.clone().into());
                }
                spec.insert("inputSchema".into(), json!({ "json": schema }));
                out.push(json!({ "toolSpec": spec }));
            }
            ToolDefinition::Native(native) => {
                let Some(name) = native.id().strip_prefix("bedrock.") else {
                    return Err(Error::Unsupported {
                        provider: PROVIDER_NAME.to_owned(),
                        feature: format!(
                            "the native tool {} (Bedrock's own tools are named bedrock.<systemTool name>, e.g. bedrock.nova_grounding)",
                            native.id()
                        ),
                    });
                };
                out.push(json!({"systemTool": {"name": name}}));
            }
        }
    }
    Ok(out)
}
