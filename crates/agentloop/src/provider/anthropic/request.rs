//! Canonical [`Request`] → Messages API body, serialized once from structs that borrow the
//! request (no intermediate `serde_json::Value` for the history).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::response::is_note;
use super::{AnthropicOptions, ForeignThinking, PROVIDER_NAME};
use crate::error::{Error, Result};
use crate::message::{
    CacheControl, CacheTarget, CacheTtl, ContentBlock, ImageSource, Request, Role, ToolResult,
    ToolResultContent,
};
use crate::provider::http::BodySize;
use crate::provider::rendered::RenderedTools;
use crate::tool::schema::inline_refs;
use crate::tool::{ToolChoice, ToolDefinition};

/// A serialized body and the beta features it needs.
pub(super) struct Built {
    pub body: Bytes,
    pub betas: Vec<&'static str>,
}

pub(super) fn build(
    request: &Request,
    options: &AnthropicOptions,
    stream: bool,
    body_size: &BodySize,
    rendered: &RenderedTools,
) -> Result<Built> {
    let marks = Marks::new(request);
    let (system, messages, marked) = messages(request, options, &marks)?;
    let mut betas = Vec::new();
    let mut tools = request
        .tools
        .iter()
        .map(|tool| wire_tool(tool, &mut betas, rendered))
        .collect::<Result<Vec<_>>>()?;
    context_betas(request, &mut betas);
    let tools_marked = mark_last_tool(&mut tools, marks.tools)?;
    check_breakpoints(marked + usize::from(tools_marked) + usize::from(marks.automatic.is_some()))?;
    let body = Body {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(options.default_max_tokens),
        system,
        messages,
        temperature: request.temperature,
        top_p: request.top_p,
        top_k: request.top_k,
        stop_sequences: &request.stop_sequences,
        tool_choice: tool_choice(request),
        tools,
        metadata: request
            .metadata
            .as_ref()
            .and_then(|m| m.get("user_id"))
            .filter(|id| !id.is_null())
            .map(|user_id| Metadata { user_id }),
        stream,
        cache_control: marks.automatic.map(WireCacheControl::new),
        output_config: request.output.as_deref().map(OutputConfig::new),
        container: container(request),
        extensions: request.extensions.as_ref(),
    };
    let body = body_size
        .serialize(&body)
        .map_err(|e| Error::parse("Anthropic request body while serializing it", e))?;
    Ok(Built { body, betas })
}

/// The code execution container the last assistant turn ran in: a programmatic tool call's
/// results must reach the code waiting for them there ("Programmatic tool calling"). An
/// expired container is Anthropic's to refuse; `extensions` can name another.
fn container(request: &Request) -> Option<&str> {
    let last = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)?;
    last.content.iter().rev().find_map(|block| match block {
        ContentBlock::Native { provider, value } if provider == PROVIDER_NAME && is_note(value) => {
            value.get("container")?.get("id")?.as_str()
        }
        _ => None,
    })
}

/// The betas a `context_management` field (see [`crate::context::anthropic_context_management`])
/// needs: context editing's, and compaction's for a `compact_*` edit (Anthropic's context
/// editing and compaction pages).
fn context_betas(request: &Request, betas: &mut Vec<&'static str>) {
    let Some(management) = request
        .extensions
        .as_ref()
        .and_then(|ext| ext.get("context_management"))
    else {
        return;
    };
    let edits = management.get("edits").and_then(Value::as_array);
    let types = || {
        edits
            .into_iter()
            .flatten()
            .filter_map(|edit| edit.get("type").and_then(Value::as_str))
    };
    if types().any(|t| t.starts_with("clear_")) {
        betas.push("context-management-2025-06-27");
    }
    if types().any(|t| t.starts_with("compact_")) {
        betas.push("compact-2026-01-12");
    }
}

/// The top-level body. Serialized by hand so that `extensions` can replace any field without
/// a second pass over a `Value`.
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: Option<WireSystem<'a>>,
    messages: Vec<WireMessage<'a>>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<u32>,
    stop_sequences: &'a [String],
    tools: Vec<WireTool>,
    tool_choice: Option<WireToolChoice<'a>>,
    metadata: Option<Metadata<'a>>,
    stream: bool,
    /// Automatic caching: Anthropic marks the last cacheable block itself.
    cache_control: Option<WireCacheControl<'a>>,
    output_config: Option<OutputConfig<'a>>,
    container: Option<&'a str>,
    extensions: Option<&'a Map<String, Value>>,
}

/// Structured outputs: `output_config: {"format": {"type": "json_schema", "schema": ...}}`
/// (platform.claude.com/docs/en/build-with-claude/structured-outputs). A strict format's schema
/// goes in Anthropic's strict dialect ([`crate::tool::schema::anthropic_strict`]) where that
/// keeps what it accepts; otherwise as written, without `$schema`, with a warning.
#[derive(Serialize)]
struct OutputConfig<'a> {
    format: OutputConfigFormat<'a>,
}

#[derive(Serialize)]
struct OutputConfigFormat<'a> {
    r#type: &'static str,
    schema: std::borrow::Cow<'a, Value>,
}

impl<'a> OutputConfig<'a> {
    fn new(format: &'a crate::message::OutputFormat) -> Self {
        let strict = format
            .strict
            .then(|| strict_schema(&format.name, &format.schema))
            .flatten();
        let schema = match (strict, &format.schema) {
            (Some(strict), _) => std::borrow::Cow::Owned(strict),
            (None, Value::Object(map)) if map.contains_key("$schema") => {
                let mut map = map.clone();
                map.shift_remove("$schema");
                std::borrow::Cow::Owned(Value::Object(map))
            }
            (None, other) => std::borrow::Cow::Borrowed(other),
        };
        Self {
            format: OutputConfigFormat {
                r#type: "json_schema",
                schema,
            },
        }
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ext = self.extensions;
        let mut map = serializer.serialize_map(None)?;
        entry(&mut map, ext, "model", self.model)?;
        entry(&mut map, ext, "max_tokens", &self.max_tokens)?;
        if let Some(system) = &self.system {
            entry(&mut map, ext, "system", system)?;
        }
        entry(&mut map, ext, "messages", &self.messages)?;
        if let Some(temperature) = self.temperature {
            entry(&mut map, ext, "temperature", &temperature)?;
        }
        if let Some(top_p) = self.top_p {
            entry(&mut map, ext, "top_p", &top_p)?;
        }
        if let Some(top_k) = self.top_k {
            entry(&mut map, ext, "top_k", &top_k)?;
        }
        if !self.stop_sequences.is_empty() {
            entry(&mut map, ext, "stop_sequences", self.stop_sequences)?;
        }
        if !self.tools.is_empty() {
            entry(&mut map, ext, "tools", &self.tools)?;
        }
        if let Some(choice) = &self.tool_choice {
            entry(&mut map, ext, "tool_choice", choice)?;
        }
        if let Some(metadata) = &self.metadata {
            entry(&mut map, ext, "metadata", metadata)?;
        }
        if self.stream {
            entry(&mut map, ext, "stream", &true)?;
        }
        if let Some(cache_control) = &self.cache_control {
            entry(&mut map, ext, "cache_control", cache_control)?;
        }
        if let Some(output_config) = &self.output_config {
            entry(&mut map, ext, "output_config", output_config)?;
        }
        if let Some(container) = self.container {
            entry(&mut map, ext, "container", container)?;
        }
        // Extensions come last and win: every key they name was skipped above.
        for (key, value) in ext.into_iter().flatten() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

fn entry<M: SerializeMap, T: Serialize + ?Sized>(
    map: &mut M,
    extensions: Option<&Map<String, Value>>,
    key: &str,
    value: &T,
) -> Result<(), M::Error> {
    if extensions.is_some_and(|ext| ext.contains_key(key)) {
        return Ok(());
    }
    map.serialize_entry(key, value)
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireBlock<'a> {
    Typed(TypedBlock<'a>),
    /// A block Anthropic made, sent back exactly as it came.
    Native(&'a Value),
    /// A block carrying a cache breakpoint.
    Cached(Cached<'a>),
}

impl WireBlock<'_> {
    fn is_tool_result(&self) -> bool {
        match self {
            Self::Typed(TypedBlock::ToolResult { .. }) => true,
            Self::Cached(cached) => cached.block.is_tool_result(),
            _ => false,
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TypedBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        // The canonical source already has Anthropic's shape: {type: base64|url, ...}.
        source: &'a ImageSource,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        #[serde(serialize_with = "object_or_empty")]
        input: &'a Value,
        /// Programmatic tool calling: the code execution call that made this one.
        #[serde(skip_serializing_if = "Option::is_none")]
        caller: Option<&'a Value>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        is_error: bool,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<TypedBlock<'a>>),
}

/// Anthropic requires tool input to be an object. Arguments that were not valid JSON are
/// kept in the history as a string (the model already got an error result for them); they
/// go back as `{}`.
fn object_or_empty<S: Serializer>(input: &&Value, serializer: S) -> Result<S::Ok, S::Error> {
    match input {
        Value::Object(_) => input.serialize(serializer),
        _ => serializer.serialize_map(Some(0))?.end(),
    }
}

/// The history as Anthropic messages, the system prompt with any system messages of the
/// history folded in, and how many message and system cache breakpoints were placed.
fn messages<'a>(
    request: &'a Request,
    options: &AnthropicOptions,
    marks: &Marks<'a>,
) -> Result<(Option<WireSystem<'a>>, Vec<WireMessage<'a>>, usize)> {
    let mut system: Vec<(&'a str, Option<&'a CacheControl>)> = request
        .system
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| (s, None))
        .into_iter()
        .collect();
    marks.check_range(request.messages.len())?;
    let mut placed = 0;
    let mut out: Vec<WireMessage<'a>> = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        let role = match message.role {
            Role::System => {
                let before = system.len();
                system.extend(
                    message
                        .content
                        .iter()
                        .filter_map(ContentBlock::as_text)
                        .filter(|text| !text.is_empty())
                        .map(|text| (text, None)),
                );
                placed += mark_system_message(&mut system[before..], marks.on(index, message))?;
                continue;
            }
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let callers = callers(message);
        let mut blocks: Vec<(usize, WireBlock<'a>)> = message
            .content
            .iter()
            .enumerate()
            .filter_map(|(i, block)| wire_block(block, options, &callers).map(|wire| (i, wire)))
            .collect();
        placed += mark_blocks(&mut blocks, marks.on(index, message))?;
        let blocks = blocks.into_iter().map(|(_, block)| block);
        // Anthropic requires alternating roles: consecutive messages of one role (left by
        // dropped blocks or folded system messages) become one.
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => {
                let content: Vec<_> = blocks.collect();
                if !content.is_empty() {
                    out.push(WireMessage { role, content });
                }
            }
        }
    }
    for message in &mut out {
        // "tool_result blocks must come first in the content array; any text must come after
        // all tool results" (docs, "How to implement tool use"). Stable, so order is kept.
        if message.role == "user" && message.content.iter().any(WireBlock::is_tool_result) {
            message.content.sort_by_key(|block| !block.is_tool_result());
        }
    }
    if let (Some(control), Some(last)) = (marks.system, system.last_mut()) {
        if last.1.is_none() {
            placed += 1;
        }
        last.1 = Some(control);
    }
    let system = if system.iter().any(|(_, control)| control.is_some()) {
        // Only blocks can carry `cache_control`: one text block per piece.
        Some(WireSystem::Blocks(
            system
                .into_iter()
                .map(|(text, control)| SystemBlock {
                    kind: "text",
                    text,
                    cache_control: control.map(WireCacheControl::new),
                })
                .collect(),
        ))
    } else {
        match system.as_slice() {
            [] => None,
            [(one, _)] => Some(WireSystem::Text(Cow::Borrowed(*one))),
            many => Some(WireSystem::Text(Cow::Owned(
                many.iter()
                    .map(|(text, _)| *text)
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            ))),
        }
    };
    Ok((system, out, placed))
}

/// The `caller` annotations of a message's client calls, by call id.
fn callers(message: &crate::message::Message) -> Vec<(&str, &Value)> {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Native { provider, value }
                if provider == PROVIDER_NAME && is_note(value) =>
            {
                Some((value.get("tool_use_id")?.as_str()?, value.get("caller")?))
            }
            _ => None,
        })
        .collect()
}

fn wire_block<'a>(
    block: &'a ContentBlock,
    options: &AnthropicOptions,
    callers: &[(&str, &'a Value)],
) -> Option<WireBlock<'a>> {
    let typed = match block {
        // The API rejects empty text blocks (a refusal leaves one in the history).
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => TypedBlock::Text { text },
        ContentBlock::Image { source } => TypedBlock::Image { source },
        ContentBlock::ToolUse { id, name, input } => TypedBlock::ToolUse {
            id,
            name,
            input,
            caller: callers
                .iter()
                .find(|(call, _)| call == id)
                .map(|(_, caller)| *caller),
        },
        ContentBlock::ToolResult(result) => tool_result(result),
        ContentBlock::Thinking {
            thinking,
            signature,
            provider,
        } => match signature.as_deref().filter(|s| !s.is_empty()) {
            Some(signature) if is_ours(provider.as_deref()) => TypedBlock::Thinking {
                thinking,
                signature,
            },
            // Unsigned or another provider's: Anthropic would reject it as a thinking block.
            _ => match options.foreign_thinking {
                ForeignThinking::AsText if !thinking.is_empty() => {
                    TypedBlock::Text { text: thinking }
                }
                _ => return None,
            },
        },
        ContentBlock::RedactedThinking { data, provider } if is_ours(provider.as_deref()) => {
            TypedBlock::RedactedThinking { data }
        }
        ContentBlock::RedactedThinking { .. } => return None,
        // The decoder's annotations are read where they belong (above, and the container).
        ContentBlock::Native { provider, value } if provider == PROVIDER_NAME && is_note(value) => {
            return None;
        }
        ContentBlock::Native { provider, value } if provider == PROVIDER_NAME => {
            return Some(WireBlock::Native(value));
        }
        ContentBlock::Native { .. } => return None,
    };
    Some(WireBlock::Typed(typed))
}

/// Blocks without a provider tag predate tagging or were built by hand; trust them.
fn is_ours(provider: Option<&str>) -> bool {
    provider.is_none_or(|p| p == PROVIDER_NAME)
}

fn tool_result(result: &ToolResult) -> TypedBlock<'_> {
    let content = match &result.content {
        ToolResultContent::Text(text) => ResultContent::Text(text),
        // A tool result holds text and images only.
        ToolResultContent::Blocks(blocks) => ResultContent::Blocks(
            blocks
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::Text { text } if !text.is_empty() => {
                        Some(TypedBlock::Text { text })
                    }
                    ContentBlock::Image { source } => Some(TypedBlock::Image { source }),
                    _ => None,
                })
                .collect(),
        ),
    };
    TypedBlock::ToolResult {
        tool_use_id: &result.tool_use_id,
        content,
        is_error: result.is_error,
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireTool {
    /// A function tool's wire form, rendered once per provider (see [`RenderedTools`]).
    Function(Arc<RawValue>),
    Native(Value),
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: Cow<'a, Value>,
    /// Strict tool use: the model's input is held to the schema.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
}

/// A schema in Anthropic's strict dialect, or `None` (with a warning naming the tool, the
/// keyword and its path) when strict mode would change what it accepts.
fn strict_schema(name: &str, schema: &Value) -> Option<Value> {
    match crate::tool::schema::anthropic_strict(schema) {
        Ok(strict) => Some(strict),
        Err(why) => {
            tracing::warn!(
                tool = name,
                keyword = why.keyword.as_str(),
                path = why.path.as_str(),
                "{why}: `{name}` is sent without strict mode"
            );
            None
        }
    }
}

fn wire_tool(
    tool: &ToolDefinition,
    betas: &mut Vec<&'static str>,
    rendered: &RenderedTools,
) -> Result<WireTool> {
    match tool {
        ToolDefinition::Function(function) => rendered
            .get(function, |function| {
                let strict = function
                    .strict
                    .then(|| strict_schema(&function.name, &function.input_schema))
                    .flatten();
                serde_json::value::to_raw_value(&WireFunction {
                    name: &function.name,
                    description: &function.description,
                    strict: strict.is_some(),
                    input_schema: match strict {
                        Some(strict) => Cow::Owned(strict),
                        None => shape_schema(&function.input_schema),
                    },
                })
            })
            .map(WireTool::Function)
            .map_err(|e| Error::parse("Anthropic tool definition while serializing it", e)),
        ToolDefinition::Native(native) => super::tools::wire(native, betas).map(WireTool::Native),
    }
}

/// Anthropic takes JSON Schema but not `$schema`, and resolves no `$ref`s: inline them.
/// Schemas that need neither are sent as they are, without a copy.
fn shape_schema(schema: &Value) -> Cow<'_, Value> {
    let top_level = schema.as_object().is_some_and(|map| {
        ["$schema", "$defs", "definitions"]
            .iter()
            .any(|key| map.contains_key(*key))
    });
    if !top_level && !has_ref(schema) {
        return Cow::Borrowed(schema);
    }
    let mut shaped = inline_refs(schema);
    if let Value::Object(map) = &mut shaped {
        map.shift_remove("$schema");
    }
    Cow::Owned(shaped)
}

fn has_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(has_ref),
        Value::Array(items) => items.iter().any(has_ref),
        _ => false,
    }
}

#[derive(Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    disable_parallel_tool_use: bool,
}

/// `disable_parallel_tool_use` lives inside `tool_choice` (it has no top-level switch), so
/// turning parallel calls off without a choice sends `auto` with the flag. Anthropic rejects any
/// `tool_choice` in a request without tools (a step whose active tools are none, say), so none
/// is sent then.
fn tool_choice(request: &Request) -> Option<WireToolChoice<'_>> {
    if request.tools.is_empty() {
        return None;
    }
    let serial = request.parallel_tool_calls == Some(false);
    let (kind, name) = match &request.tool_choice {
        Some(ToolChoice::Auto) => ("auto", None),
        Some(ToolChoice::Required) => ("any", None),
        // `none` takes no flag: no tool call at all.
        Some(ToolChoice::None) => {
            return Some(WireToolChoice {
                kind: "none",
                name: None,
                disable_parallel_tool_use: false,
            });
        }
        Some(ToolChoice::Tool { name }) => ("tool", Some(name.as_str())),
        None if serial => ("auto", None),
        None => return None,
    };
    Some(WireToolChoice {
        kind,
        name,
        disable_parallel_tool_use: serial,
    })
}

/// Anthropic's metadata takes `user_id` only; other keys would be rejected.
#[derive(Serialize)]
struct Metadata<'a> {
    user_id: &'a Value,
}

/// Anthropic's limit on `cache_control` breakpoints in one request ("You can define up to 4
/// cache breakpoints", prompt caching guide).
pub(super) const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The request's cache breakpoints by where they go; a later breakpoint for the same place
/// replaces an earlier one.
struct Marks<'a> {
    tools: Option<&'a CacheControl>,
    system: Option<&'a CacheControl>,
    automatic: Option<&'a CacheControl>,
    /// `(message, block)` with `None` for the message's last block.
    messages: Vec<(usize, Option<usize>, &'a CacheControl)>,
}

impl<'a> Marks<'a> {
    fn new(request: &'a Request) -> Self {
        let mut marks = Self {
            tools: None,
            system: None,
            automatic: None,
            messages: Vec::new(),
        };
        for breakpoint in &request.cache {
            let control = &breakpoint.control;
            let (message, block) = match breakpoint.target {
                CacheTarget::Tools => {
                    marks.tools = Some(control);
                    continue;
                }
                CacheTarget::System => {
                    marks.system = Some(control);
                    continue;
                }
                CacheTarget::Automatic => {
                    marks.automatic = Some(control);
                    continue;
                }
                CacheTarget::Message { message, block } => (message, block),
                CacheTarget::LastMessage => match request.messages.len().checked_sub(1) {
                    Some(last) => (last, None),
                    None => continue,
                },
            };
            marks
                .messages
                .retain(|(m, b, _)| (*m, *b) != (message, block));
            marks.messages.push((message, block, control));
        }
        marks
    }

    /// The breakpoints on message `index`, checked against its length.
    fn on(
        &self,
        index: usize,
        message: &crate::message::Message,
    ) -> Result<Vec<(Option<usize>, &'a CacheControl)>> {
        self.messages
            .iter()
            .filter(|(m, _, _)| *m == index)
            .map(|&(_, block, control)| match block {
                Some(b) if b >= message.content.len() => Err(Error::InvalidHistory {
                    message: format!(
                        "a cache breakpoint names block {b} of message {index}, which has {} blocks",
                        message.content.len()
                    ),
                }),
                _ => Ok((block, control)),
            })
            .collect()
    }

    /// Breakpoints on messages past the end of the history.
    fn check_range(&self, len: usize) -> Result<()> {
        match self.messages.iter().find(|(m, _, _)| *m >= len) {
            Some((m, _, _)) => Err(Error::InvalidHistory {
                message: format!(
                    "a cache breakpoint names message {m}, but the request has {len} messages"
                ),
            }),
            None => Ok(()),
        }
    }
}

/// Put each breakpoint on its block or, when that block is not sent or cannot carry one
/// (thinking), on the closest earlier block of the message that can. Returns how many blocks
/// were marked.
fn mark_blocks<'a>(
    blocks: &mut [(usize, WireBlock<'a>)],
    marks: Result<Vec<(Option<usize>, &'a CacheControl)>>,
) -> Result<usize> {
    let mut placed = 0;
    for (block, control) in marks? {
        let limit = block.unwrap_or(usize::MAX);
        let Some(slot) = blocks
            .iter_mut()
            .rev()
            .find(|(i, wire)| *i <= limit && markable(wire))
        else {
            continue;
        };
        static PLACEHOLDER: Value = Value::Null;
        let wire = std::mem::replace(&mut slot.1, WireBlock::Native(&PLACEHOLDER));
        slot.1 = match wire {
            WireBlock::Cached(cached) => WireBlock::Cached(Cached {
                block: cached.block,
                control,
            }),
            other => {
                placed += 1;
                WireBlock::Cached(Cached {
                    block: Box::new(other),
                    control,
                })
            }
        };
    }
    Ok(placed)
}

/// Thinking blocks cannot carry `cache_control` (prompt caching guide: they are cached as part
/// of the assistant turn, not marked).
fn markable(block: &WireBlock<'_>) -> bool {
    !matches!(
        block,
        WireBlock::Typed(TypedBlock::Thinking { .. } | TypedBlock::RedactedThinking { .. })
    )
}

/// A breakpoint on a system message of the history goes on the last text it adds to `system`.
fn mark_system_message<'a>(
    pieces: &mut [(&'a str, Option<&'a CacheControl>)],
    marks: Result<Vec<(Option<usize>, &'a CacheControl)>>,
) -> Result<usize> {
    let mut placed = 0;
    for (_, control) in marks? {
        if let Some(last) = pieces.last_mut() {
            if last.1.is_none() {
                placed += 1;
            }
            last.1 = Some(control);
        }
    }
    Ok(placed)
}

/// Put the tools breakpoint on the last tool. Function tools come pre-rendered; the marked one
/// is re-parsed once to take the field.
fn mark_last_tool(tools: &mut [WireTool], control: Option<&CacheControl>) -> Result<bool> {
    let (Some(control), Some(last)) = (control, tools.last_mut()) else {
        return Ok(false);
    };
    let mut value = match last {
        WireTool::Function(raw) => serde_json::from_str::<Value>(raw.get()).map_err(|e| {
            Error::parse("Anthropic tool definition while marking it for caching", e)
        })?,
        WireTool::Native(value) => std::mem::take(value),
    };
    if let Value::Object(map) = &mut value {
        map.insert("cache_control".into(), cache_value(control));
    }
    *last = WireTool::Native(value);
    Ok(true)
}

fn check_breakpoints(count: usize) -> Result<()> {
    if count > MAX_CACHE_BREAKPOINTS {
        return Err(Error::LimitExceeded {
            provider: PROVIDER_NAME.to_owned(),
            what: "cache breakpoints".to_owned(),
            limit: MAX_CACHE_BREAKPOINTS,
            count,
        });
    }
    Ok(())
}

/// `{"type": "ephemeral"}`, and `ttl` when set.
#[derive(Serialize)]
struct WireCacheControl<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'a CacheTtl>,
}

impl<'a> WireCacheControl<'a> {
    fn new(control: &'a CacheControl) -> Self {
        Self {
            kind: "ephemeral",
            ttl: control.ttl.as_ref(),
        }
    }
}

fn cache_value(control: &CacheControl) -> Value {
    let mut value = json!({"type": "ephemeral"});
    if let (Some(ttl), Value::Object(map)) = (control.ttl, &mut value) {
        map.insert("ttl".into(), json!(ttl));
    }
    value
}

/// A content block with `cache_control` added.
struct Cached<'a> {
    block: Box<WireBlock<'a>>,
    control: &'a CacheControl,
}

impl Serialize for Cached<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(&*self.block).map_err(serde::ser::Error::custom)?;
        if let Value::Object(map) = &mut value {
            map.insert("cache_control".into(), cache_value(self.control));
        }
        value.serialize(serializer)
    }
}

/// `system`: a string, or text blocks when one of them carries a cache breakpoint.
#[derive(Serialize)]
#[serde(untagged)]
enum WireSystem<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<SystemBlock<'a>>),
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<WireCacheControl<'a>>,
}
