//! The canonical message model: one history shape that every provider adapter maps to and from.
//!
//! It stays close to Anthropic's content blocks because they are the richer of the two wire
//! formats; the OpenAI adapter flattens them at the edge.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{ToolCall, ToolChoice, ToolDefinition};

/// Who wrote a message. Tool results travel as [`ContentBlock::ToolResult`] inside user messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model (most providers also take a separate `system` field).
    System,
    /// The human side, and tool results.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A message with the given role and blocks.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self { role, content }
    }

    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// A system message holding one text block.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![ContentBlock::text(text)])
    }

    /// A user message carrying tool results (the shape both providers expect after a tool turn).
    pub fn tool_results(results: impl IntoIterator<Item = ToolResult>) -> Self {
        Self::new(
            Role::User,
            results.into_iter().map(ContentBlock::ToolResult).collect(),
        )
    }

    /// All text blocks joined.
    pub fn text(&self) -> String {
        blocks_text(&self.content)
    }

    /// The tool uses this message asks for, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = ToolCall> + '_ {
        blocks_tool_uses(&self.content)
    }
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// Inline bytes, base64-encoded.
    Base64 {
        /// MIME type such as `image/png`.
        media_type: String,
        /// The base64 text (no `data:` prefix).
        data: String,
    },
    /// An image the provider fetches itself.
    Url {
        /// The address.
        url: String,
    },
}

/// One piece of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Where the image comes from.
        source: ImageSource,
    },
    /// The model asks for a tool to run.
    ToolUse {
        /// The provider's id for this call; the matching result carries it.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments. A JSON object when the model produced valid JSON; the raw argument
        /// text as a JSON string when it did not (so the history stays faithful).
        input: Value,
    },
    /// The answer to a tool use.
    ToolResult(ToolResult),
    /// Model reasoning. Only the provider that made it can check the signature, so adapters
    /// for other providers leave it out (or turn it into text, by option).
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature, needed to send the block back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// Which provider produced it (`anthropic`, `openai`, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
    },
    /// Reasoning the provider returns encrypted.
    RedactedThinking {
        /// Opaque data to send back unchanged.
        data: String,
        /// Which provider produced it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
    },
    /// A provider-native block (server tool use, web search results, ...) kept verbatim so
    /// it round-trips to the provider that made it.
    Native {
        /// Which provider produced it.
        provider: String,
        /// The block exactly as the provider sent it.
        value: Value,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image from base64 data.
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self::Image {
            source: ImageSource::Base64 {
                media_type: media_type.into(),
                data: data.into(),
            },
        }
    }

    /// An image from a URL.
    pub fn image_url(url: impl Into<String>) -> Self {
        Self::Image {
            source: ImageSource::Url { url: url.into() },
        }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// What a tool result says: plain text or content blocks (text and images).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    /// Plain text (JSON results are serialized to text).
    Text(String),
    /// Rich content.
    Blocks(Vec<ContentBlock>),
}

impl ToolResultContent {
    /// The content as text: the text itself, or the text blocks joined.
    pub fn to_text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Blocks(blocks) => blocks_text(blocks),
        }
    }
}

impl From<String> for ToolResultContent {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<&str> for ToolResultContent {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

/// The result of one tool use, sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the tool use this answers.
    pub tool_use_id: String,
    /// What the tool returned.
    pub content: ToolResultContent,
    /// Whether it is an error the model should see as one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// A successful text result.
    pub fn text(tool_use_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            content: ToolResultContent::Text(text.into()),
            is_error: false,
        }
    }

    /// A successful result from any serializable value: strings become text, anything else
    /// JSON text.
    pub fn json<T: Serialize + ?Sized>(
        tool_use_id: impl Into<String>,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            tool_use_id: tool_use_id.into(),
            content: content_from_value(serde_json::to_value(value)?),
            is_error: false,
        })
    }

    /// A successful result made of content blocks.
    pub fn blocks(tool_use_id: impl Into<String>, blocks: Vec<ContentBlock>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            content: ToolResultContent::Blocks(blocks),
            is_error: false,
        }
    }

    /// An error result: the model sees the message and `is_error`.
    pub fn error(tool_use_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            content: ToolResultContent::Text(message.into()),
            is_error: true,
        }
    }
}

/// Strings become their text; any other JSON value its compact JSON text.
pub(crate) fn content_from_value(value: Value) -> ToolResultContent {
    match value {
        Value::String(text) => ToolResultContent::Text(text),
        other => ToolResultContent::Text(other.to_string()),
    }
}

pub(crate) fn blocks_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for block in blocks {
        if let ContentBlock::Text { text } = block {
            out.push_str(text);
        }
    }
    out
}

pub(crate) fn blocks_tool_uses(blocks: &[ContentBlock]) -> impl Iterator<Item = ToolCall> + '_ {
    blocks.iter().filter_map(|block| match block {
        ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        }),
        _ => None,
    })
}

/// One request to a model, provider-independent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The model name as the provider knows it (without the `provider/` prefix).
    pub model: String,
    /// System prompt, sent the way each provider wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Upper bound on generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Top-k sampling (Anthropic and some compatible servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Sequences that end generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether and which tool the model must call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Allow several tool calls in one turn (`None`: the provider's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Provider metadata (Anthropic `metadata`, OpenAI `metadata`/`user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Raw JSON merged into the provider body last: the escape hatch for anything not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<serde_json::Map<String, Value>>,
    /// Prompt-cache breakpoints (Anthropic `cache_control`). Providers that cache on their own
    /// (OpenAI and the compatible servers) leave them out. See [`CacheBreakpoint`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<CacheBreakpoint>,
    /// The JSON Schema the answer must follow, for providers that constrain their output
    /// themselves (OpenAI `response_format`, Responses `text.format`, Anthropic
    /// `output_config.format`, Gemini `responseJsonSchema`, Bedrock `outputConfig`). Typed runs
    /// ([`crate::output`]) set it when they use the native strategy. Boxed: every run holds
    /// its request, and most have no output format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Box<OutputFormat>>,
}

/// A structured-output format: the answer is JSON following `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFormat {
    /// A name for the schema (OpenAI requires one: letters, digits, `_` and `-`).
    pub name: String,
    /// The JSON Schema, as written; each provider shapes it for its own dialect.
    pub schema: Value,
    /// Ask for strict decoding where the provider has it and the schema allows it.
    #[serde(default)]
    pub strict: bool,
}

/// How long a prompt-cache entry lives. Anthropic's default is five minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CacheTtl {
    /// `"5m"`.
    #[serde(rename = "5m")]
    FiveMinutes,
    /// `"1h"`: costs more to write; Anthropic wants 1-hour breakpoints before 5-minute ones.
    #[serde(rename = "1h")]
    OneHour,
}

/// Anthropic's `cache_control`: `{"type": "ephemeral"}`, with a `ttl` when one is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheControl {
    /// The entry's lifetime (`None`: the provider's default, five minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<CacheTtl>,
}

impl CacheControl {
    /// An ephemeral breakpoint with the default lifetime.
    pub fn ephemeral() -> Self {
        Self::default()
    }

    /// An ephemeral breakpoint that lives for `ttl`.
    pub fn with_ttl(ttl: CacheTtl) -> Self {
        Self { ttl: Some(ttl) }
    }
}

/// Where a cache breakpoint goes. Everything up to and including the marked block is cached,
/// in Anthropic's order: tools, then system, then messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
pub enum CacheTarget {
    /// The last tool definition, which caches the whole tool list.
    Tools,
    /// The last system block (the system prompt and any system messages of the history).
    System,
    /// A block of `messages[message]`: block `block`, or its last block when `None`. A block
    /// the provider is not sent (an empty text, another provider's reasoning) passes the mark
    /// to the closest earlier block of the same message that is sent.
    Message {
        /// Index into [`Request::messages`].
        message: usize,
        /// Index into that message's content; `None` for its last block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block: Option<usize>,
    },
    /// The last block of the last message: the whole conversation so far.
    LastMessage,
    /// Anthropic's automatic caching (a top-level `cache_control`): the provider puts the
    /// breakpoint on the last cacheable block itself. It takes one of the breakpoint slots.
    Automatic,
}

/// One prompt-cache breakpoint: where, and how long it lives.
///
/// Anthropic takes at most four per request (automatic caching included); a request with more
/// is refused with [`crate::Error::LimitExceeded`] before it is sent. A breakpoint with nothing
/// to mark (no tools, no system prompt, a message left with no block to send) is left out and
/// does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheBreakpoint {
    /// Where it goes.
    #[serde(flatten)]
    pub target: CacheTarget,
    /// Its `cache_control`.
    #[serde(default)]
    pub control: CacheControl,
}

impl CacheBreakpoint {
    /// A breakpoint at `target` with `control`.
    pub fn new(target: CacheTarget, control: CacheControl) -> Self {
        Self { target, control }
    }
}

impl Request {
    /// A request for `model` with the given messages.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            ..Self::default()
        }
    }

    /// Continue from a response: appends the assistant message, ready for tool results.
    ///
    /// ```
    /// # use agentloop::{Request, Response, Message, ContentBlock, StopReason, Usage};
    /// # let response = Response { id: "r1".into(), model: "m".into(), content: vec![
    /// #   ContentBlock::ToolUse { id: "call_1".into(), name: "get_weather".into(), input: serde_json::json!({"city":"Paris"}) }],
    /// #   stop_reason: StopReason::ToolUse, usage: Usage::default() };
    /// let next = Request::new("gpt-4o", vec![Message::user("Weather in Paris?")])
    ///     .continue_from(&response)
    ///     .tool_result("call_1", "18 °C");
    /// assert_eq!(next.messages.len(), 3);
    /// ```
    pub fn continue_from(mut self, response: &Response) -> Self {
        self.messages.push(response.to_message());
        self
    }

    /// Offer only the function tools named in `names` (provider-native tools stay), e.g. in a
    /// [`crate::run::Hooks::prepare_step`] hook that narrows one step's tools.
    pub fn retain_tools(&mut self, names: &[impl AsRef<str>]) {
        self.tools.retain(|t| match t.function_name() {
            Some(name) => names.iter().any(|n| n.as_ref() == name),
            None => true,
        });
    }

    /// Add a prompt-cache breakpoint (Anthropic; other providers ignore it).
    pub fn cache_at(mut self, target: CacheTarget, control: CacheControl) -> Self {
        self.cache.push(CacheBreakpoint::new(target, control));
        self
    }

    /// Add a text tool result for `tool_use_id`, grouped with the other results of the turn.
    pub fn tool_result(self, tool_use_id: impl Into<String>, text: impl Into<String>) -> Self {
        self.with_tool_result(ToolResult::text(tool_use_id, text))
    }

    /// Add any tool result, grouped with the other results of the same turn.
    pub fn with_tool_result(mut self, result: ToolResult) -> Self {
        match self.messages.last_mut() {
            Some(last)
                if last.role == Role::User
                    && !last.content.is_empty()
                    && last
                        .content
                        .iter()
                        .all(|b| matches!(b, ContentBlock::ToolResult(_))) =>
            {
                last.content.push(ContentBlock::ToolResult(result));
            }
            _ => self.messages.push(Message::tool_results([result])),
        }
        self
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum StopReason {
    /// It finished its answer.
    #[default]
    EndTurn,
    /// It wants tools to run.
    ToolUse,
    /// It hit the token limit.
    MaxTokens,
    /// It produced a stop sequence.
    StopSequence,
    /// It declined to answer.
    Refusal,
    /// Anything else the provider said, kept verbatim.
    Other(String),
}

impl StopReason {
    /// The snake_case name used in events and JSON.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Refusal => "refusal",
            Self::Other(other) => other,
        }
    }

    /// Parse the canonical (Anthropic-style) names; anything else becomes `Other`.
    pub fn from_name(name: &str) -> Self {
        match name {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" => Self::Refusal,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::from_name(&name))
    }
}

/// Token counts. Adds up with `+`, `+=` and `Sum`.
///
/// `input_tokens` is what the provider reports as input: for Anthropic that excludes cached
/// tokens (see the cache fields); for OpenAI it includes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Tokens written to the prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of the output tokens, those the model spent reasoning, where the provider counts them
    /// apart (OpenAI, Responses, Gemini); 0 elsewhere. Billed as output.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(mut self, rhs: Usage) -> Usage {
        self += rhs;
        self
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
        self.cache_read_tokens += rhs.cache_read_tokens;
        self.cache_write_tokens += rhs.cache_write_tokens;
        self.reasoning_tokens += rhs.reasoning_tokens;
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), |acc, u| acc + u)
    }
}

/// A whole model response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The provider's response id.
    pub id: String,
    /// The model that answered.
    pub model: String,
    /// What it said, in order.
    pub content: Vec<ContentBlock>,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// What it cost.
    pub usage: Usage,
}

impl Response {
    /// All text blocks joined.
    pub fn text(&self) -> String {
        blocks_text(&self.content)
    }

    /// The tool calls it asks for, in order.
    pub fn tool_uses(&self) -> Vec<ToolCall> {
        blocks_tool_uses(&self.content).collect()
    }

    /// This response as an assistant message for the history.
    pub fn to_message(&self) -> Message {
        Message::new(Role::Assistant, self.content.clone())
    }
}
