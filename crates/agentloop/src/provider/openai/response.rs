//! Non-streamed Chat Completions: a `chat.completion` object into a [`Response`], with the
//! same mappings as the stream decoder.

use serde::Deserialize;
use serde_json::Value;

use super::wire::{Arguments, Count, Str, Text, WireError, WireUsage, stop_reason};
use crate::error::{Error, Result};
use crate::message::{ContentBlock, Response, StopReason};
use crate::stream::parse_arguments;

mod fast;

#[derive(Deserialize, Debug, PartialEq)]
struct Completion<'a> {
    #[serde(borrow, default)]
    id: Str<'a>,
    #[serde(borrow, default)]
    model: Str<'a>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: WireUsage,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct Choice<'a> {
    #[serde(default)]
    index: Count,
    #[serde(borrow, default)]
    message: Option<ChoiceMessage<'a>>,
    #[serde(borrow, default)]
    finish_reason: Str<'a>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct ChoiceMessage<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(borrow, default)]
    refusal: Str<'a>,
    #[serde(borrow, default)]
    reasoning_content: Str<'a>,
    #[serde(borrow, default)]
    reasoning: Str<'a>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    id: Str<'a>,
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct Function<'a> {
    #[serde(borrow, default)]
    name: Str<'a>,
    #[serde(borrow, default)]
    arguments: Arguments<'a>,
}

/// Parse a `chat.completion` body into a [`Response`]. Reasoning blocks are tagged with
/// `provider`, whose name also appears in errors.
///
/// A body carrying an `error` object (some compatible servers answer 200 with one) is an
/// [`Error::Api`]; a body without choices is an [`Error::Parse`].
pub fn parse_completion(body: &Value, provider: &str) -> Result<Response> {
    let completion = Completion::deserialize(body)
        .map_err(|e| Error::parse(format!("{provider} response"), e))?;
    from_completion(completion, provider)
}

/// [`parse_completion`] straight from the body's bytes: strings are borrowed from them and no
/// [`Value`] tree is built. Invalid JSON is an [`Error::Parse`] too.
///
/// ```
/// use agentloop::provider::openai::parse_completion_bytes;
///
/// let body = br#"{"id":"c1","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
/// let response = parse_completion_bytes(body, "openai").unwrap();
/// assert_eq!(response.text(), "Hi");
/// assert_eq!(response.usage.output_tokens, 1);
/// ```
pub fn parse_completion_bytes(body: &[u8], provider: &str) -> Result<Response> {
    let fast = simdutf8::basic::from_utf8(body).ok().and_then(|text| {
        let completion = fast::read(text)?;
        #[cfg(any(debug_assertions, fuzzing))]
        crate::provider::scan::check_against_serde(text, &completion);
        Some(completion)
    });
    let completion = match fast {
        Some(completion) => completion,
        None => serde_json::from_slice(body)
            .map_err(|e| Error::parse(format!("{provider} response"), e))?,
    };
    from_completion(completion, provider)
}

fn from_completion(completion: Completion<'_>, provider: &str) -> Result<Response> {
    if let Some(error) = completion.error {
        return Err(Error::Api {
            provider: provider.to_owned(),
            status: 200,
            error_type: error.kind,
            message: error.message,
        });
    }
    let choices = completion.choices.unwrap_or_default();
    let Some(choice) = choices
        .iter()
        .find(|c| c.index.0.unwrap_or(0) == 0)
        .or(choices.first())
    else {
        return Err(Error::parse(
            format!("{provider} response"),
            "it has no choices",
        ));
    };
    let mut content = Vec::new();
    let mut refused = false;
    if let Some(message) = &choice.message {
        let reasoning = if message.reasoning_content.is_present() {
            message.reasoning_content.non_empty()
        } else {
            message.reasoning.non_empty()
        };
        if let Some(thinking) = reasoning {
            content.push(ContentBlock::Thinking {
                thinking: thinking.to_owned(),
                signature: None,
                provider: Some(provider.to_owned()),
            });
        }
        if let Some(text) = message.content.non_empty() {
            content.push(ContentBlock::text(text));
        }
        if let Some(refusal) = message.refusal.non_empty() {
            refused = true;
            content.push(ContentBlock::text(refusal));
        }
        for call in message.tool_calls.iter().flatten() {
            let (name, arguments) = match &call.function {
                Some(f) => (f.name.non_empty(), f.arguments.non_empty()),
                None => (None, None),
            };
            content.push(ContentBlock::ToolUse {
                id: call
                    .id
                    .non_empty()
                    .map_or_else(super::wire::synthesized_call_id, str::to_owned),
                name: name.unwrap_or_default().to_owned(),
                input: parse_arguments(arguments.unwrap_or_default()),
            });
        }
    }
    let has_calls = content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
    let stop_reason = match choice.finish_reason.non_empty() {
        _ if refused => StopReason::Refusal,
        Some(reason) => stop_reason(reason),
        None if has_calls => StopReason::ToolUse,
        None => StopReason::EndTurn,
    };
    Ok(Response {
        id: completion.id.non_empty().unwrap_or_default().to_owned(),
        model: completion.model.non_empty().unwrap_or_default().to_owned(),
        content,
        stop_reason,
        usage: completion.usage.0.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both entry points read the same bodies the same way.
    #[test]
    fn bytes_and_value_parse_alike() {
        let bodies = [
            r#"{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            r#"{"id":"x","model":"m","choices":[{"message":{"reasoning_content":"think","content":[{"type":"text","text":"a \"quoted\" "},{"text":"answer"}]},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"index":1,"message":{"content":"second"}},{"index":0,"message":{"content":"first"},"finish_reason":null}]}"#,
        ];
        for body in bodies {
            let value: Value = serde_json::from_str(body).unwrap();
            assert_eq!(
                parse_completion_bytes(body.as_bytes(), "p").unwrap(),
                parse_completion(&value, "p").unwrap(),
                "{body}"
            );
        }
    }

    #[test]
    fn bytes_report_errors_as_the_value_path_does() {
        let error = parse_completion_bytes(br#"{"error":{"message":"m","code":502}}"#, "p");
        assert!(
            matches!(&error, Err(Error::Api { status: 200, error_type: Some(t), message, .. })
                if t == "502" && message == "m"),
            "{error:?}"
        );
        for body in [
            &br#"{"id":"x","choices":[]}"#[..],
            b"{\"choices\": tru",
            b"[]",
        ] {
            let error = parse_completion_bytes(body, "p");
            assert!(
                matches!(&error, Err(Error::Parse { what, .. }) if what == "p response"),
                "{error:?}"
            );
        }
    }
}
