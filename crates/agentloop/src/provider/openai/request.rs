//! Request bodies: the canonical [`Request`] as a Chat Completions body, serialized once.
//!
//! The body is a tree of borrowed views over the request, written with one
//! `serde_json::to_vec`; no intermediate `Value` is built except where a tool schema has to be
//! reshaped. Wire shapes follow OpenAI's API reference for `POST /chat/completions`
//! (`CreateChatCompletionRequest` in openai/openai-openapi, v2.3.0).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::OpenAiOptions;
use super::tools::WebSearchOptions;
use crate::error::{Error, Result};
use crate::message::{
    ContentBlock, ImageSource, Message, OutputFormat, Request, Role, ToolResult, ToolResultContent,
};
use crate::provider::http::BodySize;
use crate::provider::rendered::RenderedTools;
use crate::tool::schema::{inline_refs, openai_strict};
use crate::tool::{FunctionDefinition, ToolChoice, ToolDefinition};

/// Serialize `request` for `POST /chat/completions`; function tools come from `rendered`.
pub(crate) fn build(
    request: &Request,
    options: &OpenAiOptions,
    stream: bool,
    body_size: &BodySize,
    rendered: &RenderedTools,
) -> Result<Bytes> {
    let unserializable =
        |e: serde_json::Error| Error::config(format!("could not serialize the request body: {e}"));
    let mut tools = Vec::with_capacity(request.tools.len());
    let mut web_search = None;
    for tool in &request.tools {
        match tool {
            ToolDefinition::Function(function) => tools.push(
                rendered
                    .get(function, |f| {
                        serde_json::value::to_raw_value(&WireTool::new(f))
                    })
                    .map_err(unserializable)?,
            ),
            ToolDefinition::Native(native) => {
                let options = super::tools::web_search_options(native, options)?;
                // Chat Completions has one `web_search_options`: a second search would replace
                // the first's settings without a word.
                if web_search.replace(options).is_some() {
                    return Err(Error::config(
                        "the request has two web_search tools; Chat Completions takes one \
                         (`web_search_options`): keep one, with the settings you want",
                    ));
                }
            }
        }
    }
    check_tool_count(tools.len(), options)?;
    let body = Body {
        request,
        options,
        stream,
        messages: messages(request, options),
        tools,
        web_search,
        response_format: request.output.as_deref().map(ResponseFormat::new),
    };
    body_size.serialize(&body).map_err(unserializable)
}

struct Body<'a> {
    request: &'a Request,
    options: &'a OpenAiOptions,
    stream: bool,
    messages: Vec<WireMessage<'a>>,
    /// Rendered once per provider (see [`RenderedTools`]).
    tools: Vec<Arc<RawValue>>,
    web_search: Option<WebSearchOptions<'a>>,
    response_format: Option<ResponseFormat<'a>>,
}

/// `response_format: {"type": "json_schema", "json_schema": {name, schema, strict}}`
/// (`ResponseFormatJsonSchema` in openai/openai-openapi). The schema is shaped like a strict
/// tool's parameters when strict, else only its `$ref`s are inlined.
#[derive(Serialize)]
struct ResponseFormat<'a> {
    r#type: &'static str,
    json_schema: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    name: &'a str,
    schema: Cow<'a, Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
}

impl<'a> ResponseFormat<'a> {
    fn new(format: &'a OutputFormat) -> Self {
        let (schema, strict) = parameters(&format.name, &format.schema, format.strict);
        Self {
            r#type: "json_schema",
            json_schema: JsonSchemaFormat {
                name: &format.name,
                schema,
                strict,
            },
        }
    }
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let request = self.request;
        let options = self.options;
        let extensions = request.extensions.as_ref();
        let mut map = Overridable {
            map: serializer.serialize_map(None)?,
            extensions,
        };
        map.entry("model", &request.model)?;
        map.entry("messages", &self.messages)?;
        if self.stream {
            map.entry("stream", &true)?;
            if options.stream_usage {
                map.entry(
                    "stream_options",
                    &StreamOptions {
                        include_usage: true,
                    },
                )?;
            }
        }
        if let Some(max_tokens) = request.max_tokens {
            map.entry(options.token_limit.key(&request.model), &max_tokens)?;
        }
        let refuses_sampling = options.sampling_by_model && super::refuses_sampling(&request.model);
        for (key, value) in [
            ("temperature", request.temperature),
            ("top_p", request.top_p),
        ] {
            let Some(value) = value else { continue };
            if refuses_sampling {
                tracing::warn!(
                    provider = %options.name,
                    model = %request.model,
                    "{key} is refused by OpenAI reasoning models and was left out (set it in `extensions` to force it)"
                );
            } else {
                map.entry(key, &value)?;
            }
        }
        if let Some(top_k) = request.top_k {
            if options.top_k {
                map.entry("top_k", &top_k)?;
            } else {
                tracing::warn!(
                    provider = %options.name,
                    "top_k is not accepted by this server and was left out (set it in `extensions` to force it)"
                );
            }
        }
        if !request.stop_sequences.is_empty() {
            if options.sampling_by_model && super::refuses_stop(&request.model) {
                tracing::warn!(
                    provider = %options.name,
                    model = %request.model,
                    "stop is refused by this OpenAI reasoning model and was left out (set it in `extensions` to force it)"
                );
            } else {
                map.entry("stop", &request.stop_sequences)?;
            }
        }
        if options.metadata
            && let Some(metadata) = &request.metadata
        {
            map.entry("metadata", metadata)?;
        }
        // tool_choice and parallel_tool_calls are rejected without tools.
        if !self.tools.is_empty() {
            map.entry("tools", &self.tools)?;
            if let Some(choice) = &request.tool_choice {
                map.entry("tool_choice", &WireToolChoice(choice))?;
            }
            if let Some(parallel) = request.parallel_tool_calls {
                map.entry("parallel_tool_calls", &parallel)?;
            }
        }
        if let Some(web_search) = &self.web_search {
            map.entry("web_search_options", web_search)?;
        }
        if let Some(format) = &self.response_format {
            map.entry("response_format", format)?;
        }
        let mut map = map.map;
        for (key, value) in extensions.into_iter().flatten() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A map writer that leaves out keys the request's `extensions` will set, so extensions win
/// without the body being built twice.
struct Overridable<'e, M> {
    map: M,
    extensions: Option<&'e Map<String, Value>>,
}

impl<M: SerializeMap> Overridable<'_, M> {
    fn entry<V: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &V,
    ) -> std::result::Result<(), M::Error> {
        if self.extensions.is_some_and(|e| e.contains_key(key)) {
            return Ok(());
        }
        self.map.serialize_entry(key, value)
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

struct WireToolChoice<'a>(&'a ToolChoice);

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            ToolChoice::Auto => serializer.serialize_str("auto"),
            ToolChoice::Required => serializer.serialize_str("required"),
            ToolChoice::None => serializer.serialize_str("none"),
            ToolChoice::Tool { name } => NamedChoice {
                r#type: "function",
                function: FunctionName { name },
            }
            .serialize(serializer),
        }
    }
}

#[derive(Serialize)]
struct NamedChoice<'a> {
    r#type: &'static str,
    function: FunctionName<'a>,
}

#[derive(Serialize)]
struct FunctionName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: Cow<'a, Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
}

impl<'a> WireTool<'a> {
    fn new(function: &'a FunctionDefinition) -> Self {
        let (parameters, strict) =
            parameters(&function.name, &function.input_schema, function.strict);
        Self {
            r#type: "function",
            function: WireFunction {
                name: &function.name,
                description: &function.description,
                parameters,
                strict,
            },
        }
    }
}

/// Strict tools get OpenAI's strict shape; others, and strict ones whose schema strict mode
/// would change (see [`openai_strict`]), have `$ref`s inlined and `$schema` dropped. A schema
/// with nothing to reshape (the common case) is sent as it is, without a copy. Also whether
/// it goes strict.
pub(crate) fn parameters<'a>(
    name: &str,
    schema: &'a Value,
    strict: bool,
) -> (Cow<'a, Value>, bool) {
    if strict {
        match openai_strict(schema) {
            Ok(shaped) => return (Cow::Owned(shaped), true),
            Err(why) => tracing::warn!(
                tool = name,
                keyword = why.keyword.as_str(),
                path = why.path.as_str(),
                "{why}: `{name}` is sent without strict mode"
            ),
        }
    }
    if !needs_shaping(schema) {
        return (Cow::Borrowed(schema), false);
    }
    let mut shaped = inline_refs(schema);
    if let Value::Object(map) = &mut shaped {
        map.shift_remove("$schema");
    }
    (Cow::Owned(shaped), false)
}

fn needs_shaping(schema: &Value) -> bool {
    let top_level = schema.as_object().is_some_and(|map| {
        ["$schema", "$defs", "definitions"]
            .iter()
            .any(|key| map.contains_key(*key))
    });
    top_level || has_ref(schema)
}

fn has_ref(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$ref") || map.values().any(has_ref),
        Value::Array(items) => items.iter().any(has_ref),
        _ => false,
    }
}

/// One wire message. `content` is `null`, a string or content parts, by role.
#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> WireMessage<'a> {
    fn new(role: &'static str, content: Content<'a>) -> Self {
        Self {
            role,
            content,
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

enum Content<'a> {
    Null,
    Text(Cow<'a, str>),
    /// A tool error: the text with an `Error: ` prefix (OpenAI has no error flag).
    ErrorText(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Null => serializer.serialize_none(),
            Self::Text(text) => serializer.serialize_str(text),
            Self::ErrorText(text) => serializer.collect_str(&format_args!("Error: {text}")),
            Self::Parts(parts) => parts.serialize(serializer),
        }
    }
}

enum Part<'a> {
    Text(Cow<'a, str>),
    Image(&'a ImageSource),
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self {
            Self::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            Self::Image(source) => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", &ImageUrl(source))?;
            }
        }
        map.end()
    }
}

/// `{"url": ...}`; base64 images become a data URL, written straight into the body.
struct ImageUrl<'a>(&'a ImageSource);

impl Serialize for ImageUrl<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        struct DataUrl<'a>(&'a str, &'a str);
        impl Serialize for DataUrl<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(&format_args!("data:{};base64,{}", self.0, self.1))
            }
        }
        let mut map = serializer.serialize_map(Some(1))?;
        match self.0 {
            ImageSource::Url { url } => map.serialize_entry("url", url)?,
            ImageSource::Base64 { media_type, data } => {
                map.serialize_entry("url", &DataUrl(media_type, data))?
            }
        }
        map.end()
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: ArgumentsText<'a>,
}

/// The input as JSON text. Input that was not valid JSON is stored as a string holding the raw
/// text, and is sent back as that text, unchanged.
struct ArgumentsText<'a>(&'a Value);

impl Serialize for ArgumentsText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(raw) => serializer.serialize_str(raw),
            Value::Null => serializer.serialize_str("{}"),
            other => serializer.collect_str(other),
        }
    }
}

fn messages<'a>(request: &'a Request, options: &OpenAiOptions) -> Vec<WireMessage<'a>> {
    let system_role = options.system_role.role(&request.model);
    let mut out = Vec::with_capacity(request.messages.len() + 2);
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        out.push(WireMessage::new(
            system_role,
            Content::Text(Cow::Borrowed(system)),
        ));
    }
    for message in &request.messages {
        match message.role {
            Role::System => {
                if let Some(text) = joined_text(&message.content) {
                    out.push(WireMessage::new(system_role, Content::Text(text)));
                }
            }
            Role::User => user_messages(message, &mut out),
            Role::Assistant => {
                if let Some(wire) = assistant_message(message, options) {
                    out.push(wire);
                }
            }
        }
    }
    out
}

/// The text blocks joined, borrowed when there is only one.
fn joined_text(blocks: &[ContentBlock]) -> Option<Cow<'_, str>> {
    let mut texts = blocks.iter().filter_map(ContentBlock::as_text);
    let first = texts.next()?;
    match texts.next() {
        None => Some(Cow::Borrowed(first)),
        Some(second) => {
            let mut joined = String::from(first);
            joined.push_str(second);
            texts.for_each(|t| joined.push_str(t));
            Some(Cow::Owned(joined))
        }
    }
}

/// A user message becomes one `tool` message per tool result (they must follow the assistant
/// message right away), then one user message with the rest. Images a tool returned cannot go
/// in a `tool` message, so they open that user message, introduced by a line naming the call.
fn user_messages<'a>(message: &'a Message, out: &mut Vec<WireMessage<'a>>) {
    let mut tool_images: Vec<Part<'a>> = Vec::new();
    let mut parts: Vec<Part<'a>> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(result) => {
                out.push(tool_message(result));
                if let ToolResultContent::Blocks(blocks) = &result.content {
                    let mut images = blocks.iter().filter_map(|b| match b {
                        ContentBlock::Image { source } => Some(Part::Image(source)),
                        _ => None,
                    });
                    if let Some(first) = images.next() {
                        tool_images.push(Part::Text(Cow::Owned(format!(
                            "Images returned by tool call {}:",
                            result.tool_use_id
                        ))));
                        tool_images.push(first);
                        tool_images.extend(images);
                    }
                }
            }
            ContentBlock::Text { text } => parts.push(Part::Text(Cow::Borrowed(text))),
            ContentBlock::Image { source } => parts.push(Part::Image(source)),
            // Tool uses, reasoning and other providers' blocks have no place in a user message.
            _ => {}
        }
    }
    tool_images.append(&mut parts);
    let content = match tool_images.len() {
        0 => return,
        1 => match tool_images.pop() {
            Some(Part::Text(text)) => Content::Text(text),
            Some(part) => Content::Parts(vec![part]),
            None => return,
        },
        _ => Content::Parts(tool_images),
    };
    out.push(WireMessage::new("user", content));
}

/// A tool result as a `tool` message. Its content is text: rich results send their text
/// blocks joined. Errors are prefixed with `Error: `, since OpenAI has no error flag, unless the
/// text already starts with "error".
fn tool_message(result: &ToolResult) -> WireMessage<'_> {
    let text: Cow<'_, str> = match &result.content {
        ToolResultContent::Text(text) => Cow::Borrowed(text),
        ToolResultContent::Blocks(blocks) => match joined_text(blocks) {
            Some(text) => text,
            None if blocks
                .iter()
                .any(|b| matches!(b, ContentBlock::Image { .. })) =>
            {
                Cow::Borrowed("(the result is the images in the next message)")
            }
            None => Cow::Borrowed(""),
        },
    };
    let says_error = text
        .get(..5)
        .is_some_and(|head| head.eq_ignore_ascii_case("error"));
    let content = if result.is_error && !says_error {
        Content::ErrorText(text)
    } else {
        Content::Text(text)
    };
    WireMessage {
        tool_call_id: Some(&result.tool_use_id),
        ..WireMessage::new("tool", content)
    }
}

/// Text (joined) and tool calls. Reasoning from any provider goes in `reasoning_content` when
/// that is on, else is sent as tagged text when `thinking_as_text` is on, else is dropped;
/// encrypted reasoning and other providers' native blocks are dropped. An assistant message
/// left with nothing is skipped.
fn assistant_message<'a>(message: &'a Message, options: &OpenAiOptions) -> Option<WireMessage<'a>> {
    let mut texts: Vec<Cow<'a, str>> = Vec::new();
    let mut reasoning: Vec<&'a str> = Vec::new();
    let mut tool_calls = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => texts.push(Cow::Borrowed(text)),
            ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                if options.reasoning_content {
                    reasoning.push(thinking);
                } else if options.thinking_as_text {
                    texts.push(Cow::Owned(format!("<thinking>{thinking}</thinking>")));
                }
            }
            ContentBlock::ToolUse { id, name, input } => tool_calls.push(WireToolCall {
                id,
                r#type: "function",
                function: CallFunction {
                    name,
                    arguments: ArgumentsText(input),
                },
            }),
            _ => {}
        }
    }
    let content = match texts.len() {
        // OpenAI's own assistant tool-call messages carry `content: null`.
        0 if !tool_calls.is_empty() => Content::Null,
        // Reasoning alone (an answer cut short while thinking) still needs content.
        0 if !reasoning.is_empty() => Content::Text(Cow::Borrowed("")),
        0 => return None,
        1 => Content::Text(texts.pop()?),
        _ => Content::Text(Cow::Owned(texts.concat())),
    };
    let reasoning_content = options
        .reasoning_content
        .then(|| match reasoning.as_slice() {
            [one] => Cow::Borrowed(*one),
            many => Cow::Owned(many.concat()),
        });
    Some(WireMessage {
        reasoning_content,
        tool_calls,
        ..WireMessage::new("assistant", content)
    })
}

/// Function tools past the service's documented limit would get a 400 after the round trip;
/// refusing here names the limit and the count.
fn check_tool_count(count: usize, options: &OpenAiOptions) -> Result<()> {
    match options.preset.max_tools() {
        Some(limit) if count > limit => Err(Error::LimitExceeded {
            provider: options.name.clone(),
            what: "tools".to_owned(),
            limit,
            count,
        }),
        _ => Ok(()),
    }
}
