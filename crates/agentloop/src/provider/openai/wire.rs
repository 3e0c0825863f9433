//! Lenient pieces of the Chat Completions wire format, shared by the stream decoder and the
//! non-streamed response parser.
//!
//! Compatible servers disagree on details: `null` where OpenAI omits a field, numbers where a
//! string is expected, content as an array of parts, arguments as an object. Every field here
//! reads what it can and treats anything else as absent, so one odd field never loses a chunk.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::message::{StopReason, Usage};
use crate::provider::scan::{Scanner, first};

/// A string that reads as absent when it is `null`, missing or not a string. Borrowed from the
/// input when the JSON string has no escapes.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Str<'a>(pub Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    /// Read as `Str` deserializes: a string, or absent for `null`, `true`, `false`, arrays and
    /// objects. Numbers are left to serde (`None`), which range-checks them.
    #[inline]
    pub(crate) fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        match s.peek()? {
            b'"' => s.string().map(|text| Str(Some(text))),
            b'n' | b't' | b'f' => {
                let _: bool = s.null()? || s.boolean()?;
                Some(Str(None))
            }
            b'[' | b'{' => s.skip().map(|()| Str(None)),
            _ => None,
        }
    }
}

impl<'a> Str<'a> {
    /// The string, if present and not empty.
    pub fn non_empty(&self) -> Option<&str> {
        self.0.as_deref().filter(|s| !s.is_empty())
    }

    /// Whether the field held a string at all (even an empty one).
    pub fn is_present(&self) -> bool {
        self.0.is_some()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrVisitor(PhantomData))
    }
}

struct StrVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for StrVisitor<'a> {
    type Value = Str<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Str(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Str(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Str(Some(Cow::Owned(v))))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Str(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Str::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Str(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Str(None))
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Message content: a string (OpenAI), or an array of parts whose `text` parts are joined
/// (Mistral and others). Anything else reads as absent.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Text<'a>(pub Option<Cow<'a, str>>);

impl<'a> Text<'a> {
    /// The text, if present and not empty.
    pub fn non_empty(&self) -> Option<&str> {
        self.0.as_deref().filter(|s| !s.is_empty())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor(PhantomData))
    }
}

struct TextVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
    type Value = Text<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of content parts")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v))))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Text(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Text::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Rare shape: owned values are fine here.
        let mut joined: Option<String> = None;
        while let Some(part) = seq.next_element::<Value>()? {
            let is_text = part.get("type").is_none_or(|t| t == "text");
            if let (true, Some(text)) = (is_text, part.get("text").and_then(Value::as_str)) {
                joined.get_or_insert_with(String::new).push_str(text);
            }
        }
        Ok(Text(joined.map(Cow::Owned)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Text(None))
    }
}

/// Tool-call arguments: JSON text in a string (OpenAI), or a JSON value some servers send
/// instead, turned back into text so both take the same path.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Arguments<'a>(pub Option<Cow<'a, str>>);

impl<'a> Arguments<'a> {
    /// The fragment, if present and not empty.
    pub fn non_empty(&self) -> Option<&str> {
        self.0.as_deref().filter(|s| !s.is_empty())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Arguments<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArgumentsVisitor(PhantomData))
    }
}

struct ArgumentsVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ArgumentsVisitor<'a> {
    type Value = Arguments<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON arguments as a string or a value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Arguments(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Arguments(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Arguments(Some(Cow::Owned(v))))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Arguments(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Arguments::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Arguments(Some(Cow::Owned(value.to_string()))))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Arguments(Some(Cow::Owned(value.to_string()))))
    }
}

/// A count that reads as absent unless it is a non-negative number (some servers send floats).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count(pub Option<u64>);

impl Count {
    /// Read as `Count` deserializes a plain non-negative integer or `null`; anything else is
    /// left to serde (`None`).
    #[inline]
    pub(crate) fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        s.optional_count().map(Count)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative number")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Count(Some(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Count(u64::try_from(v).ok()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // Truncation is the intent: a count sent as 12.0 is 12.
        Ok(Count(
            (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64),
        ))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Count(None))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Count(v.trim().parse().ok()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Count(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Count(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Count::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Count(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Count(None))
    }
}

/// The `usage` object. Anything but an object reads as absent (`usage: null` on every chunk
/// but the last is what OpenAI sends with `include_usage`).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct WireUsage(pub Option<Usage>);

impl<'de> Deserialize<'de> for WireUsage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UsageVisitor)
    }
}

impl WireUsage {
    /// Read as `WireUsage` deserializes `null` or a usage object whose counts are plain
    /// integers or `null`; anything else is left to serde (`None`).
    pub(crate) fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        if s.null()? {
            return Some(WireUsage(None));
        }
        let (mut input, mut output, mut details, mut cache_hit) = (None, None, None, None);
        let mut reasoning = None;
        // Which known members were read: serde rejects one given twice.
        let (mut input_read, mut output_read, mut details_read, mut cache_hit_read) =
            (false, false, false, false);
        let mut reasoning_read = false;
        s.object(|s, key| {
            let (read, target) = match key {
                "prompt_tokens" => (&mut input_read, &mut input),
                "completion_tokens" => (&mut output_read, &mut output),
                "prompt_cache_hit_tokens" => (&mut cache_hit_read, &mut cache_hit),
                "prompt_tokens_details" => {
                    first(&mut details_read)?;
                    details = s.optional(|s| detail(s, "cached_tokens"))?.flatten();
                    return Some(());
                }
                "completion_tokens_details" => {
                    first(&mut reasoning_read)?;
                    reasoning = s.optional(|s| detail(s, "reasoning_tokens"))?.flatten();
                    return Some(());
                }
                _ => return s.skip(),
            };
            first(read)?;
            *target = s.optional_count()?;
            Some(())
        })?;
        Some(WireUsage(Some(Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
            cache_read_tokens: details.or(cache_hit).unwrap_or(0),
            cache_write_tokens: 0,
            reasoning_tokens: reasoning.unwrap_or(0),
        })))
    }
}

/// The count `name` of a details object (`prompt_tokens_details`' `cached_tokens`,
/// `completion_tokens_details`' `reasoning_tokens`), read as [`PromptDetails`] and
/// [`CompletionDetails`] deserialize one.
fn detail(s: &mut Scanner<'_>, name: &str) -> Option<Option<u64>> {
    let mut count = None;
    let mut count_read = false;
    s.object(|s, key| {
        if key != name {
            return s.skip();
        }
        first(&mut count_read)?;
        count = s.optional_count()?;
        Some(())
    })?;
    Some(count)
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UsageFields {
    prompt_tokens: Count,
    completion_tokens: Count,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek reports cache hits here instead of `prompt_tokens_details`.
    prompt_cache_hit_tokens: Count,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PromptDetails {
    cached_tokens: Count,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct CompletionDetails {
    reasoning_tokens: Count,
}

struct UsageVisitor;

impl<'de> Visitor<'de> for UsageVisitor {
    type Value = WireUsage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a usage object")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let fields = UsageFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let cached = fields
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens.0)
            .or(fields.prompt_cache_hit_tokens.0);
        Ok(WireUsage(Some(Usage {
            input_tokens: fields.prompt_tokens.0.unwrap_or(0),
            output_tokens: fields.completion_tokens.0.unwrap_or(0),
            cache_read_tokens: cached.unwrap_or(0),
            cache_write_tokens: 0,
            reasoning_tokens: fields
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens.0)
                .unwrap_or(0),
        })))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        WireUsage::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(WireUsage(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(WireUsage(None))
    }
}

/// Groq's extension object; only its `usage` matters (a fallback for the top-level one).
#[derive(serde::Deserialize, Debug, Default, Clone, PartialEq)]
#[serde(default)]
pub(crate) struct XGroq {
    pub usage: WireUsage,
}

/// An error object in a body or chunk: `{"message", "type", "code"}`, or just a message string.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct WireError {
    /// `type`, else `code` as text.
    pub kind: Option<String>,
    /// `message`, else the whole object as text.
    pub message: String,
}

impl WireError {
    /// Read an error from any JSON value.
    pub fn from_value(value: &Value) -> Self {
        match value {
            Value::String(message) => Self {
                kind: None,
                message: message.clone(),
            },
            Value::Object(map) => {
                let kind = ["type", "code"]
                    .iter()
                    .filter_map(|key| map.get(*key))
                    .find_map(|v| match v {
                        Value::String(s) if !s.is_empty() => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    });
                let message = map
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| value.to_string(), str::to_owned);
                Self { kind, message }
            }
            other => Self {
                kind: None,
                message: other.to_string(),
            },
        }
    }
}

impl<'de> Deserialize<'de> for WireError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Errors are rare: reading them as a value costs nothing that matters.
        Value::deserialize(deserializer).map(|v| Self::from_value(&v))
    }
}

/// Map a `finish_reason` to the canonical stop reason.
pub(crate) fn stop_reason(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// An id for a tool call the server sent without one, unique enough to pair its result.
pub(crate) fn synthesized_call_id() -> String {
    format!("call_{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, default)]
        s: Str<'a>,
        #[serde(borrow, default)]
        t: Text<'a>,
        #[serde(borrow, default)]
        a: Arguments<'a>,
        #[serde(default)]
        n: Count,
        #[serde(default)]
        u: WireUsage,
    }

    fn probe(json: &str) -> Probe<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn strings_borrow_when_unescaped_and_tolerate_other_types() {
        let p = probe(r#"{"s":"plain","t":"x\"y"}"#);
        assert!(matches!(p.s.0, Some(Cow::Borrowed("plain"))));
        assert_eq!(p.t.0.as_deref(), Some("x\"y"));
        for odd in ["null", "12", "true", "[1,2]", r#"{"k":[1]}"#] {
            let json = format!(r#"{{"s":{odd},"t":{odd},"n":{odd}}}"#);
            let p: Probe<'_> = serde_json::from_str(&json).unwrap();
            assert_eq!(p.s, Str(None), "{odd}");
        }
    }

    #[test]
    fn content_parts_join_their_text() {
        let p = probe(
            r#"{"t":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"text":"b"}]}"#,
        );
        assert_eq!(p.t.0.as_deref(), Some("ab"));
    }

    #[test]
    fn object_arguments_become_json_text() {
        let p = probe(r#"{"a":{"city":"Paris"}}"#);
        assert_eq!(p.a.0.as_deref(), Some(r#"{"city":"Paris"}"#));
    }

    #[test]
    fn counts_accept_floats_and_strings() {
        assert_eq!(probe(r#"{"n":12.0}"#).n, Count(Some(12)));
        assert_eq!(probe(r#"{"n":"7"}"#).n, Count(Some(7)));
        assert_eq!(probe(r#"{"n":-1}"#).n, Count(None));
    }

    #[test]
    fn usage_maps_cached_tokens_and_ignores_null() {
        let p = probe(
            r#"{"u":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        );
        assert_eq!(
            p.u.0,
            Some(Usage {
                input_tokens: 10,
                output_tokens: 3,
                cache_read_tokens: 4,
                cache_write_tokens: 0,
                reasoning_tokens: 0
            })
        );
        assert_eq!(probe(r#"{"u":null}"#).u.0, None);
        // OpenAI's reasoning models count their reasoning apart, within `completion_tokens`.
        let reasoning = probe(
            r#"{"u":{"prompt_tokens":10,"completion_tokens":30,"completion_tokens_details":{"reasoning_tokens":22}}}"#,
        );
        assert_eq!(
            reasoning.u.0.map(|u| (u.output_tokens, u.reasoning_tokens)),
            Some((30, 22))
        );
        let deepseek = probe(r#"{"u":{"prompt_tokens":10,"prompt_cache_hit_tokens":6}}"#);
        assert_eq!(deepseek.u.0.map(|u| u.cache_read_tokens), Some(6));
    }

    #[test]
    fn errors_take_type_then_code() {
        let e = WireError::from_value(&serde_json::json!({"code": 400, "message": "m"}));
        assert_eq!((e.kind.as_deref(), e.message.as_str()), (Some("400"), "m"));
        let e = WireError::from_value(
            &serde_json::json!({"type": "invalid_request_error", "code": "x", "message": "m"}),
        );
        assert_eq!(e.kind.as_deref(), Some("invalid_request_error"));
        let e = WireError::from_value(&serde_json::json!("just text"));
        assert_eq!((e.kind, e.message.as_str()), (None, "just text"));
    }
}
