//! A hand-written reader for `chat.completion` bodies: the choices with their message, text and
//! tool calls, the usage, and `null`s and unknown fields (`object`, `created`, `logprobs`,
//! `annotations`, ...) around them.
//!
//! serde's derived reading dispatches on every field; this reads the same bodies in one pass
//! and answers `None` on anything rarer (content parts, arguments sent as an object, an error
//! object, numbers where strings belong, duplicate fields, escaped keys, invalid JSON); the
//! caller then falls back to serde. Where it answers, it answers what serde would: debug builds
//! and fuzzing check every body against serde, and `tests::agrees_with_serde` does so over
//! generated bodies.

use super::{Choice, ChoiceMessage, Completion, Function, ToolCall};
use crate::provider::openai::wire::{Arguments, Count, Str, Text, WireUsage};
use crate::provider::scan::{Scanner, first, null_only};

/// Read one body, or `None` to let serde read it.
pub(super) fn read(body: &str) -> Option<Completion<'_>> {
    let mut completion = Completion {
        id: Str(None),
        model: Str(None),
        choices: None,
        usage: WireUsage(None),
        error: None,
    };
    // Which known members were read: serde rejects one given twice.
    let (mut id_read, mut model_read, mut choices_read, mut usage_read, mut error_read) =
        (false, false, false, false, false);
    let mut s = Scanner::new(body);
    s.object(|s, key| {
        match key {
            "id" => {
                first(&mut id_read)?;
                completion.id = Str::scan(s)?;
            }
            "model" => {
                first(&mut model_read)?;
                completion.model = Str::scan(s)?;
            }
            "choices" => {
                first(&mut choices_read)?;
                if !s.null()? {
                    let mut choices = Vec::with_capacity(1);
                    s.array(|s| {
                        choices.push(choice(s)?);
                        Some(())
                    })?;
                    completion.choices = Some(choices);
                }
            }
            "usage" => {
                first(&mut usage_read)?;
                completion.usage = WireUsage::scan(s)?;
            }
            // `null` if present at all; an error object is left to serde.
            "error" => null_only(s, &mut error_read)?,
            _ => s.skip()?,
        }
        Some(())
    })?;
    s.finish()?;
    Some(completion)
}

fn choice<'a>(s: &mut Scanner<'a>) -> Option<Choice<'a>> {
    let mut choice = Choice {
        index: Count(None),
        message: None,
        finish_reason: Str(None),
    };
    // Which known members were read: serde rejects one given twice.
    let (mut index_read, mut message_read, mut finish_read) = (false, false, false);
    s.object(|s, key| {
        match key {
            "index" => {
                first(&mut index_read)?;
                choice.index = Count::scan(s)?;
            }
            "message" => {
                first(&mut message_read)?;
                choice.message = s.optional(message)?;
            }
            "finish_reason" => {
                first(&mut finish_read)?;
                choice.finish_reason = Str::scan(s)?;
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(choice)
}

fn message<'a>(s: &mut Scanner<'a>) -> Option<ChoiceMessage<'a>> {
    let mut message = ChoiceMessage {
        content: Text(None),
        refusal: Str(None),
        reasoning_content: Str(None),
        reasoning: Str(None),
        tool_calls: None,
    };
    // Which known members were read: serde rejects one given twice.
    let (
        mut content_read,
        mut refusal_read,
        mut reasoning_content_read,
        mut reasoning_read,
        mut tool_calls_read,
    ) = (false, false, false, false, false);
    s.object(|s, key| {
        match key {
            "content" => {
                first(&mut content_read)?;
                // Content parts (an array) are joined by serde's reader.
                if s.peek()? == b'[' {
                    return None;
                }
                message.content = Text(Str::scan(s)?.0);
            }
            "refusal" => {
                first(&mut refusal_read)?;
                message.refusal = Str::scan(s)?;
            }
            "reasoning_content" => {
                first(&mut reasoning_content_read)?;
                message.reasoning_content = Str::scan(s)?;
            }
            "reasoning" => {
                first(&mut reasoning_read)?;
                message.reasoning = Str::scan(s)?;
            }
            "tool_calls" => {
                first(&mut tool_calls_read)?;
                if !s.null()? {
                    let mut calls = Vec::with_capacity(1);
                    s.array(|s| {
                        calls.push(tool_call(s)?);
                        Some(())
                    })?;
                    message.tool_calls = Some(calls);
                }
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(message)
}

fn tool_call<'a>(s: &mut Scanner<'a>) -> Option<ToolCall<'a>> {
    let mut call = ToolCall {
        id: Str(None),
        function: None,
    };
    // Which known members were read: serde rejects one given twice.
    let (mut id_read, mut function_read) = (false, false);
    s.object(|s, key| {
        match key {
            "id" => {
                first(&mut id_read)?;
                call.id = Str::scan(s)?;
            }
            "function" => {
                first(&mut function_read)?;
                call.function = s.optional(function)?;
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(call)
}

fn function<'a>(s: &mut Scanner<'a>) -> Option<Function<'a>> {
    let mut function = Function {
        name: Str(None),
        arguments: Arguments(None),
    };
    // Which known members were read: serde rejects one given twice.
    let (mut name_read, mut arguments_read) = (false, false);
    s.object(|s, key| {
        match key {
            "name" => {
                first(&mut name_read)?;
                function.name = Str::scan(s)?;
            }
            "arguments" => {
                first(&mut arguments_read)?;
                // Arguments sent as a JSON value are re-serialized by serde's reader.
                if matches!(s.peek()?, b'[' | b'{') {
                    return None;
                }
                function.arguments = Arguments(Str::scan(s)?.0);
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(function)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::provider::scan::strategies::{
        Keys, array, fields, mangled, one_of, share_read, text,
    };

    fn serde(body: &str) -> Option<Completion<'_>> {
        serde_json::from_str(body).ok()
    }

    #[test]
    fn reads_tool_calls_text_and_usage_as_serde_does() {
        for body in [
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#,
            r#"{"id":"x","model":"m","choices":[{"message":{"reasoning_content":"think","content":"a \"quoted\" answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_cache_hit_tokens":1}}"#,
            r#"{"choices":[{"index":1,"message":{"content":"second"}},{"index":0,"message":{"content":"first"},"finish_reason":null}],"usage":null,"error":null}"#,
            r#" { "choices" : [ ] , "id" : null } "#,
        ] {
            let fast = read(body);
            assert!(fast.is_some(), "{body}");
            assert_eq!(fast, serde(body), "{body}");
        }
    }

    #[test]
    fn leaves_rare_shapes_to_serde() {
        for body in [
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]}}]}"#,
            r#"{"choices":[{"message":{"tool_calls":[{"function":{"arguments":{"city":"Paris"}}}]}}]}"#,
            r#"{"error":{"message":"m","code":502}}"#,
            r#"{"id":1,"choices":[]}"#,
            r#"{"usage":{"prompt_tokens":"12"}}"#,
            r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"i\u0064":"x"}"#,
            r#"{"choices": tru"#,
            "[]",
            "",
        ] {
            assert_eq!(read(body), None, "{body}");
        }
    }

    const KEYS: Keys = Keys(&[
        "id",
        "model",
        "object",
        "choices",
        "usage",
        "error",
        "index",
        "message",
        "finish_reason",
        "logprobs",
        "content",
        "refusal",
        "reasoning_content",
        "reasoning",
        "role",
        "tool_calls",
        "type",
        "function",
        "name",
        "arguments",
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "completion_tokens_details",
        "reasoning_tokens",
        "prompt_cache_hit_tokens",
        "i\\u0064",
        "other",
    ]);

    fn count() -> BoxedStrategy<String> {
        one_of(vec!["0", "1", "12", "null"])
    }

    fn body() -> impl Strategy<Value = String> {
        let function = fields(vec![
            KEYS.field("name", text()),
            KEYS.field("arguments", text()),
        ]);
        let call = fields(vec![
            KEYS.field("id", text()),
            KEYS.field("type", text()),
            KEYS.field("function", function.boxed()),
        ]);
        let calls = array(call);
        let message = fields(vec![
            KEYS.field("content", text()),
            KEYS.field("refusal", text()),
            KEYS.field("reasoning_content", text()),
            KEYS.field("reasoning", text()),
            KEYS.field("role", text()),
            KEYS.field("tool_calls", calls.boxed()),
        ]);
        let choice = fields(vec![
            KEYS.field("index", count()),
            KEYS.field("message", message.boxed()),
            KEYS.field("finish_reason", text()),
            KEYS.field("logprobs", KEYS.value()),
        ]);
        let choices = array(choice);
        let details = fields(vec![KEYS.field("cached_tokens", count())]);
        let completion_details = fields(vec![KEYS.field("reasoning_tokens", count())]);
        let usage = fields(vec![
            KEYS.field("prompt_tokens", count()),
            KEYS.field("completion_tokens", count()),
            KEYS.field("prompt_tokens_details", details.boxed()),
            KEYS.field("completion_tokens_details", completion_details.boxed()),
            KEYS.field("prompt_cache_hit_tokens", count()),
        ]);
        fields(vec![
            KEYS.field("id", text()),
            KEYS.field("model", text()),
            KEYS.field("object", text()),
            KEYS.field("choices", choices.boxed()),
            KEYS.field("usage", usage.boxed()),
            KEYS.field("error", one_of(vec!["null"])),
        ])
    }

    fn mangled_body() -> impl Strategy<Value = String> {
        mangled(body(), vec![" ", "\n", ",", "}", "]", "\"", ":"])
    }

    #[test]
    fn generated_bodies_often_take_the_fast_path() {
        let share = share_read(mangled_body(), |body| read(body).is_some());
        assert!(share > 0.1, "only {share} of generated bodies read");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn agrees_with_serde(body in mangled_body()) {
            if let Some(fast) = read(&body) {
                let serde = serde_json::from_str::<Completion<'_>>(&body);
                prop_assert!(matches!(&serde, Ok(c) if *c == fast), "{body}: fast {fast:?}, serde {serde:?}");
            }
        }
    }
}
