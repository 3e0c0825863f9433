//! Fitting a run's requests into the model's context window.
//!
//! Set a [`ContextPolicy`] on the run's options ([`crate::run::RunOptions::context`]): before
//! each model call the run estimates the request's tokens ([`estimate`]) and, when they would
//! not fit the window minus the room kept for the answer, applies the policy's strategies in
//! order until they do. The strategies edit the run's history itself, so the result's
//! messages show what the model saw, and the history stays valid after each of them (every
//! tool use keeps its result):
//!
//! - [`Strategy::ClearToolResults`]: the oldest tool results' contents become a short note;
//! - [`Strategy::TrimTurns`]: the oldest turns go, whole (a turn is a prompt and what followed
//!   it; inside the current turn, a model call and its tool results), keeping the first user
//!   message when [`ContextPolicy::keep_first_user`] says so;
//! - [`Strategy::Summarize`]: older messages are replaced by one message holding a summary a
//!   model wrote.
//!
//! The policy runs before the prepare-step hooks, which see the fitted request. The window is
//! the policy's own, else the price table's (`context_window` of the genai-prices data, see
//! [`crate::cost`]); without either the policy does nothing.
//!
//! The estimate counts bytes at a ratio per provider family, plus overheads per message, per
//! tool and per image. After each call it is corrected by the input tokens the provider
//! reported for the request it estimated: the run keeps that ratio for its next estimates.
//!
//! Anthropic's own context management (the API clears old tool uses, or compacts the
//! conversation, on its side) is a request field: [`anthropic_context_management`] builds it.
//! So is OpenAI Responses' server-side compaction ([`responses_compaction`]): its encrypted
//! `compaction` item stays in the history as a native block and goes back as it came.
//!
//! ```
//! use agentloop::context::{ContextPolicy, Strategy};
//! let policy = ContextPolicy::new()
//!     .window(32_000)
//!     .strategy(Strategy::ClearToolResults { keep_last: 2 })
//!     .strategy(Strategy::TrimTurns);
//! assert_eq!(policy.strategies.len(), 2);
//! ```

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::message::{ContentBlock, Message, Request, Role, ToolResultContent};
use crate::provider::Provider;

/// The note a cleared tool result's content is replaced with.
pub const CLEARED_NOTE: &str = "[tool result cleared to fit the context window]";

/// Output room kept when neither the policy nor the request says how long the answer may be.
pub const DEFAULT_RESERVE: u64 = 4_096;

/// How a run keeps its requests within the model's context window.
#[derive(Clone, Debug)]
pub struct ContextPolicy {
    /// The window in tokens; the price table's for the model when `None`.
    pub window: Option<u64>,
    /// Tokens kept free for the answer: the request's `max_tokens` when `None`, else
    /// [`DEFAULT_RESERVE`].
    pub reserve_output: Option<u64>,
    /// Applied in order until the request fits.
    pub strategies: Vec<Strategy>,
    /// Never trim or summarize away the history's first message when it is the user's (the
    /// task, in most agent runs). On by default.
    pub keep_first_user: bool,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            window: None,
            reserve_output: None,
            strategies: Vec::new(),
            keep_first_user: true,
        }
    }
}

impl ContextPolicy {
    /// A policy with no strategy and the table's window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use a window of `tokens` instead of the table's.
    pub fn window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// Keep `tokens` free for the answer.
    pub fn reserve_output(mut self, tokens: u64) -> Self {
        self.reserve_output = Some(tokens);
        self
    }

    /// Add a strategy, applied after the ones added before.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategies.push(strategy);
        self
    }

    /// Whether the first user message is kept (see the field).
    pub fn keep_first_user(mut self, keep: bool) -> Self {
        self.keep_first_user = keep;
        self
    }
}

/// One way to make a request smaller (see the [module docs](self)).
#[derive(Clone, Debug)]
pub enum Strategy {
    /// Replace the contents of the oldest tool results with [`CLEARED_NOTE`], one at a time,
    /// sparing the last `keep_last`.
    ClearToolResults {
        /// How many of the newest results are never cleared.
        keep_last: usize,
    },
    /// Remove the oldest turns, whole, one at a time.
    TrimTurns,
    /// Replace older messages with a summary written by a model.
    Summarize(Summarizer),
}

/// What a failing summary call does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnSummaryFailure {
    /// The run ends with the call's error.
    #[default]
    Fail,
    /// Trim turns instead (as [`Strategy::TrimTurns`]).
    Trim,
}

/// How [`Strategy::Summarize`] writes its summary.
#[derive(Clone)]
pub struct Summarizer {
    /// The model that writes it: the run's own when `None`.
    pub provider: Option<Arc<dyn Provider>>,
    /// Its model name: the run's when `None`.
    pub model: Option<String>,
    /// The instructions it gets (its system prompt).
    pub instructions: String,
    /// Model calls at the end of the history left as they are.
    pub keep_last: usize,
    /// What a failing summary call does.
    pub on_failure: OnSummaryFailure,
}

impl std::fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarizer")
            .field(
                "provider",
                &self.provider.as_ref().map(|p| p.name().to_owned()),
            )
            .field("model", &self.model)
            .field("keep_last", &self.keep_last)
            .field("on_failure", &self.on_failure)
            .finish_non_exhaustive()
    }
}

impl Default for Summarizer {
    fn default() -> Self {
        Self {
            provider: None,
            model: None,
            instructions: "Summarize the conversation below for the assistant that will continue \
                it: the task, what was found, what was decided and what is left to do. Keep \
                names, numbers and identifiers exactly. Answer with the summary only."
                .to_owned(),
            keep_last: 1,
            on_failure: OnSummaryFailure::Fail,
        }
    }
}

impl Summarizer {
    /// Summaries by the run's own model.
    pub fn new() -> Self {
        Self::default()
    }

    /// Summaries by `provider`'s `model`.
    pub fn with_model(mut self, provider: Arc<dyn Provider>, model: impl Into<String>) -> Self {
        self.provider = Some(provider);
        self.model = Some(model.into());
        self
    }

    /// Leave the last `n` model calls (with their tool results) as they are.
    pub fn keep_last(mut self, n: usize) -> Self {
        self.keep_last = n;
        self
    }

    /// What a failing summary call does.
    pub fn on_failure(mut self, on_failure: OnSummaryFailure) -> Self {
        self.on_failure = on_failure;
        self
    }
}

/// Providers whose tokenizers differ enough to be estimated apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// OpenAI and the servers that speak its API.
    OpenAi,
    /// Anthropic (and Claude on Bedrock or Vertex).
    Anthropic,
    /// Gemini.
    Gemini,
}

impl Family {
    /// The family of a provider, by its [`Provider::name`].
    pub fn of(provider: &str) -> Self {
        match provider {
            "anthropic" | "bedrock" | "aws" => Family::Anthropic,
            "gemini" | "vertex" | "google" => Family::Gemini,
            _ => Family::OpenAi,
        }
    }

    /// Bytes per token of text and JSON, in tenths. o200k and Gemini's tokenizer average
    /// about four bytes of English a token; Claude's tokenizer makes more tokens of the same
    /// text, and all of them make more of JSON: these sit between the two.
    fn bytes_per_token_x10(self) -> u64 {
        match self {
            Family::OpenAi => 38,
            Family::Anthropic => 33,
            Family::Gemini => 40,
        }
    }

    /// Tokens every message costs besides its content (role markers).
    fn per_message(self) -> u64 {
        match self {
            Family::OpenAi => 4,
            Family::Anthropic => 5,
            Family::Gemini => 3,
        }
    }

    /// Tokens every tool definition costs besides its JSON.
    fn per_tool(self) -> u64 {
        match self {
            Family::OpenAi => 8,
            Family::Anthropic => 10,
            Family::Gemini => 5,
        }
    }

    /// Tokens a request with tools costs once: Anthropic adds its tool-use system prompt
    /// (346 tokens for `auto` on current models, per its tool-use pricing table).
    fn with_tools(self) -> u64 {
        match self {
            Family::OpenAi => 12,
            Family::Anthropic => 346,
            Family::Gemini => 0,
        }
    }

    /// Tokens an image costs when its size is unknown: OpenAI's high detail for a 1024 px
    /// square, Anthropic's for its largest unscaled image, Gemini's per 768 px tile.
    fn per_image(self) -> u64 {
        match self {
            Family::OpenAi => 765,
            Family::Anthropic => 1_600,
            Family::Gemini => 258,
        }
    }
}

/// An estimate of the input tokens `request` costs at a provider of `family`, before any
/// correction by reported usage.
pub fn estimate(request: &Request, family: Family) -> u64 {
    let mut bytes = request.system.as_ref().map_or(0, String::len) as u64;
    let mut fixed = 3; // the answer's priming
    let mut images = 0;
    for message in &request.messages {
        fixed += family.per_message();
        for block in &message.content {
            let (b, i) = block_size(block);
            bytes += b;
            images += i;
        }
    }
    if !request.tools.is_empty() {
        fixed += family.with_tools() + family.per_tool() * request.tools.len() as u64;
        bytes += request
            .tools
            .iter()
            .map(|t| serde_json::to_string(t).map_or(0, |s| s.len() as u64))
            .sum::<u64>();
    }
    if let Some(output) = &request.output {
        bytes += output.schema.to_string().len() as u64;
    }
    fixed + images * family.per_image() + (bytes * 10).div_ceil(family.bytes_per_token_x10())
}

/// Bytes of text and JSON in a block, and its images.
fn block_size(block: &ContentBlock) -> (u64, u64) {
    match block {
        ContentBlock::Text { text } => (text.len() as u64, 0),
        ContentBlock::Image { .. } => (0, 1),
        ContentBlock::ToolUse { id, name, input } => {
            ((id.len() + name.len()) as u64 + json_len(input) + 8, 0)
        }
        ContentBlock::ToolResult(result) => {
            let (bytes, images) = match &result.content {
                ToolResultContent::Text(text) => (text.len() as u64, 0),
                ToolResultContent::Blocks(blocks) => blocks
                    .iter()
                    .map(block_size)
                    .fold((0, 0), |(b, i), (b2, i2)| (b + b2, i + i2)),
            };
            (bytes + result.tool_use_id.len() as u64 + 8, images)
        }
        ContentBlock::Thinking { thinking, .. } => (thinking.len() as u64, 0),
        // Sent back as opaque data the provider decrypts: its size says little, a quarter is
        // a guess that errs high.
        ContentBlock::RedactedThinking { data, .. } => ((data.len() / 4) as u64, 0),
        ContentBlock::Native { value, .. } => (json_len(value), 0),
    }
}

fn json_len(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.len() as u64 + 2,
        other => serde_json::to_string(other).map_or(0, |s| s.len() as u64),
    }
}

/// The smallest estimate a report is learned from.
const MIN_LEARNED: u64 = 256;

/// A run's estimator: the family's estimate times the ratio the provider's reports showed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Calibrated {
    pub(crate) family: Family,
    /// Reported over estimated input tokens, of the last call that reported any.
    pub(crate) ratio: f64,
}

impl Calibrated {
    pub(crate) fn new(family: Family) -> Self {
        Self { family, ratio: 1.0 }
    }

    pub(crate) fn tokens(&self, request: &Request) -> u64 {
        scale(estimate(request, self.family), self.ratio)
    }

    /// Learn from a call whose request was estimated at `raw` (uncorrected) and for which the
    /// provider reported `reported` input tokens. A ratio far from one is not a tokenizer's
    /// difference but a report that counts something else (a provider or mock that reports
    /// nothing real, a proxy): it is ignored rather than allowed to make the next estimates
    /// absurd.
    pub(crate) fn learn(&mut self, raw: u64, reported: u64) {
        // A small request is mostly fixed overhead (chat templates, role markers), whose ratio
        // says little about the bytes that make a request large.
        if raw < MIN_LEARNED || reported == 0 {
            return;
        }
        let ratio = reported as f64 / raw as f64;
        if (0.2..=5.0).contains(&ratio) {
            self.ratio = ratio;
        }
    }
}

fn scale(tokens: u64, ratio: f64) -> u64 {
    (tokens as f64 * ratio).ceil() as u64
}

/// The room a request may take: the window minus the answer's.
pub(crate) fn budget(policy: &ContextPolicy, window: u64, request: &Request) -> u64 {
    let reserve = policy
        .reserve_output
        .or(request.max_tokens.map(u64::from))
        .unwrap_or(DEFAULT_RESERVE);
    window.saturating_sub(reserve)
}

/// Where the history may be cut: the first message that may go.
fn first_removable(policy: &ContextPolicy, messages: &[Message]) -> usize {
    usize::from(policy.keep_first_user && messages.first().is_some_and(|m| m.role == Role::User))
}

/// Whether a message answers tool uses (a history cut there would orphan them).
fn is_results(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Whether a message starts a turn: the user's, not tool results.
fn is_prompt(message: &Message) -> bool {
    message.role == Role::User && !is_results(message)
}

/// Clear the oldest tool result not cleared yet (sparing the last `keep_last`); whether one
/// was.
pub(crate) fn clear_one_result(messages: &mut [Message], keep_last: usize) -> bool {
    let total = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult(_)))
        .count();
    let clearable = total.saturating_sub(keep_last);
    let mut seen = 0;
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        let ContentBlock::ToolResult(result) = block else {
            continue;
        };
        if seen >= clearable {
            return false;
        }
        seen += 1;
        let cleared = matches!(&result.content, ToolResultContent::Text(t) if t == CLEARED_NOTE);
        if !cleared {
            result.content = ToolResultContent::Text(CLEARED_NOTE.to_owned());
            return true;
        }
    }
    false
}

/// Remove the oldest turn (or, when only the current turn is left, its oldest model call and
/// tool results); whether anything went.
pub(crate) fn trim_one(policy: &ContextPolicy, messages: &mut Vec<Message>) -> bool {
    let from = first_removable(policy, messages);
    let prompts: Vec<usize> = (from..messages.len())
        .filter(|&i| messages.get(i).is_some_and(is_prompt))
        .collect();
    // The rest of a kept first turn (its answer, its tool rounds) when a later turn exists.
    if let Some(&first) = prompts.first()
        && first > from
    {
        messages.drain(from..first);
        return true;
    }
    // A whole old turn: from its prompt to the next prompt.
    if let [first, next, ..] = prompts[..] {
        messages.drain(first..next);
        return true;
    }
    // Only the current turn: drop its oldest model call and that call's results, keeping the
    // prompt. The last model call (the one being answered now, or the one the next call
    // follows) stays.
    let start = prompts.first().map_or(from, |p| p + 1).max(from);
    let calls: Vec<usize> = (start..messages.len())
        .filter(|&i| messages.get(i).is_some_and(|m| m.role == Role::Assistant))
        .collect();
    if let [first, next, ..] = calls[..] {
        messages.drain(first..next);
        return true;
    }
    false
}

/// The messages a summary replaces: `(from, to)`, or `None` when nothing can go.
pub(crate) fn summary_span(
    policy: &ContextPolicy,
    messages: &[Message],
    keep_last: usize,
) -> Option<(usize, usize)> {
    let from = first_removable(policy, messages);
    let calls: Vec<usize> = (from..messages.len())
        .filter(|&i| messages.get(i).is_some_and(|m| m.role == Role::Assistant))
        .collect();
    // Cut before the kept calls: a cut at an assistant message orphans no tool result.
    let keep = keep_last.max(1);
    let to = *calls.get(calls.len().checked_sub(keep)?)?;
    (to > from).then_some((from, to))
}

/// The request asking `summarizer` for a summary of `messages`.
pub(crate) fn summary_request(
    summarizer: &Summarizer,
    model: &str,
    messages: &[Message],
) -> Request {
    Request {
        model: summarizer.model.clone().unwrap_or_else(|| model.to_owned()),
        system: Some(summarizer.instructions.clone()),
        messages: vec![Message::user(transcript(messages))],
        ..Request::default()
    }
}

/// The message a summary is kept as.
pub(crate) fn summary_message(summary: &str) -> Message {
    Message::user(format!(
        "Summary of the earlier part of this conversation:\n{summary}"
    ))
}

/// Messages as plain text a model can summarize (tool calls and results included).
fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        let role = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        for block in &message.content {
            let line = match block {
                ContentBlock::Text { text } => format!("{role}: {text}"),
                ContentBlock::ToolUse { name, input, .. } => {
                    format!("{role} called tool {name} with {input}")
                }
                ContentBlock::ToolResult(result) => {
                    format!("tool result: {}", result.content.to_text())
                }
                ContentBlock::Image { .. } => format!("{role}: [an image]"),
                ContentBlock::Thinking { .. }
                | ContentBlock::RedactedThinking { .. }
                | ContentBlock::Native { .. } => continue,
            };
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// One edit of Anthropic's context management (see [`anthropic_context_management`]).
#[derive(Clone, Debug, PartialEq)]
pub enum AnthropicEdit {
    /// `clear_tool_uses_20250919`: the API replaces the oldest tool results with a
    /// placeholder once the input passes `trigger` tokens, keeping the last `keep` tool uses.
    ClearToolUses {
        /// Input tokens at which it acts (the API's default when `None`).
        trigger: Option<u64>,
        /// Tool uses kept (the API's default when `None`).
        keep: Option<u64>,
        /// The least input tokens each clearing removes, so a cache break is worth it.
        clear_at_least: Option<u64>,
        /// Tools whose results are never cleared.
        exclude_tools: Vec<String>,
    },
    /// `compact_20260112`: the API summarizes the conversation once the input passes
    /// `trigger` tokens and answers with a compaction block.
    Compact {
        /// Input tokens at which it acts (the API's default when `None`).
        trigger: Option<u64>,
    },
}

impl AnthropicEdit {
    fn to_json(&self) -> Value {
        let tokens = |n: u64| json!({"type": "input_tokens", "value": n});
        let mut edit = Map::new();
        match self {
            AnthropicEdit::ClearToolUses {
                trigger,
                keep,
                clear_at_least,
                exclude_tools,
            } => {
                edit.insert("type".into(), json!("clear_tool_uses_20250919"));
                if let Some(n) = trigger {
                    edit.insert("trigger".into(), tokens(*n));
                }
                if let Some(n) = keep {
                    edit.insert("keep".into(), json!({"type": "tool_uses", "value": n}));
                }
                if let Some(n) = clear_at_least {
                    edit.insert("clear_at_least".into(), tokens(*n));
                }
                if !exclude_tools.is_empty() {
                    edit.insert("exclude_tools".into(), json!(exclude_tools));
                }
            }
            AnthropicEdit::Compact { trigger } => {
                edit.insert("type".into(), json!("compact_20260112"));
                if let Some(n) = trigger {
                    edit.insert("trigger".into(), tokens(*n));
                }
            }
        }
        Value::Object(edit)
    }
}

/// Ask Anthropic to manage the context on its side: sets the request's `context_management`
/// field (in [`Request::extensions`]); the Anthropic provider then sends the beta headers the
/// edits need (`context-management-2025-06-27`, and `compact-2026-01-12` for compaction).
/// Other providers send the field as is, so set it only on Anthropic runs (a prepare-step hook
/// or the agent's request).
pub fn anthropic_context_management(request: &mut Request, edits: &[AnthropicEdit]) {
    let edits: Vec<Value> = edits.iter().map(AnthropicEdit::to_json).collect();
    request
        .extensions
        .get_or_insert_default()
        .insert("context_management".into(), json!({"edits": edits}));
}

/// Ask OpenAI's Responses API to compact the conversation on its side: sets the request's
/// `context_management` field (in [`Request::extensions`]) to
/// `[{"type": "compaction", "compact_threshold": n}]`, `compact_threshold` left out when
/// `None` (the API's default). Once the rendered input passes the threshold, the answer
/// carries an encrypted `compaction` output item; the run keeps it in the assistant's message
/// (a [`ContentBlock::Native`] of `openai-responses`) and sends it back as it came, and the
/// API reads it in place of what it summarizes. Other providers send the field as is, so set it
/// only on Responses runs (a prepare-step hook or the agent's request).
pub fn responses_compaction(request: &mut Request, compact_threshold: Option<u64>) {
    let mut entry = Map::new();
    entry.insert("type".into(), json!("compaction"));
    if let Some(n) = compact_threshold {
        entry.insert("compact_threshold".into(), json!(n));
    }
    request
        .extensions
        .get_or_insert_default()
        .insert("context_management".into(), json!([entry]));
}

/// The error a request that cannot be made to fit ends the run with.
pub(crate) fn too_large(estimate: u64, budget: u64, window: u64) -> Error {
    Error::ContextWindow {
        estimate,
        budget,
        window,
    }
}

/// `Ok` once `messages` were summarized (the summary's call done by the caller).
pub(crate) fn replace_with_summary(
    messages: &mut Vec<Message>,
    span: (usize, usize),
    summary: &str,
) -> Result<()> {
    let (from, to) = span;
    if from >= to || to > messages.len() {
        return Err(Error::config("the span to summarize is out of the history"));
    }
    messages.splice(from..to, [summary_message(summary)]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Request {
        Request {
            messages: vec![Message::user(text)],
            ..Request::default()
        }
    }

    #[test]
    fn the_estimate_counts_bytes_at_the_family_ratio_plus_overheads() {
        let r = request(&"a".repeat(380));
        // 3 for the answer's priming, 4 for the message, 380 bytes at 3.8 a token.
        assert_eq!(estimate(&r, Family::OpenAi), 3 + 4 + 100);
        // 3 + 5 + 380 bytes at 3.3 a token (115.2, rounded up).
        assert_eq!(estimate(&r, Family::Anthropic), 3 + 5 + 116);
        let mut image = request("");
        image.messages[0]
            .content
            .push(ContentBlock::image_url("https://example.com/a.png"));
        assert_eq!(estimate(&image, Family::Gemini), 3 + 3 + 258);
    }

    #[test]
    fn the_correction_follows_the_reports_but_not_absurd_ones() {
        let r = request(&"a".repeat(380));
        let mut calibrated = Calibrated::new(Family::OpenAi);
        assert_eq!(calibrated.tokens(&r), 107);
        // A small request's report says little.
        calibrated.learn(100, 300);
        assert_eq!(calibrated.tokens(&r), 107);
        calibrated.learn(1_000, 1_500);
        assert_eq!(calibrated.tokens(&r), 161);
        // A report of 10 tokens for a request estimated at 2,500 counts something else.
        calibrated.learn(2_500, 10);
        assert_eq!(calibrated.tokens(&r), 161);
        calibrated.learn(0, 10);
        assert_eq!(calibrated.tokens(&r), 161);
    }
}
