//! What every provider's conformance test shares: a folder of recorded streams, each with an
//! expected summary in `tests/conformance/<folder>/<name>.json` (format:
//! `tests/conformance/README.md`); feeding bytes through a decoder the way the HTTP transport
//! does; and the splits and damage the property tests apply.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use agentloop::provider::http::{BodyDecoder, SseDecoder};
use agentloop::sse::SseParser;
use agentloop::{Accumulator, ContentBlock, Error, StreamEvent};
use serde_json::{Value, json};

/// A decoded stream: its events and the error that ended it, if any.
pub type Decoded = (Vec<StreamEvent>, Option<Error>);

/// A decoded stream in a form that compares with `==` (errors by their message).
pub fn comparable((events, error): Decoded) -> (Vec<StreamEvent>, Option<String>) {
    (events, error.map(|e| e.to_string()))
}

/// Feed `chunks` through an SSE decoder like the transport: events after a decoder error are
/// not decoded, and the end of the body is signalled only when no error came.
pub fn assemble_sse<'a, D: SseDecoder>(
    mut decoder: D,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Decoded {
    let mut parser = SseParser::new();
    let mut out = VecDeque::new();
    let mut failure = None;
    for chunk in chunks {
        parser.feed(chunk, |event| {
            if failure.is_none()
                && let Err(e) = decoder.event(&event, &mut out)
            {
                failure = Some(e);
            }
        });
        if failure.is_some() {
            return (out.into(), failure);
        }
    }
    parser.finish(|event| {
        if failure.is_none()
            && let Err(e) = decoder.event(&event, &mut out)
        {
            failure = Some(e);
        }
    });
    if failure.is_none()
        && let Err(e) = decoder.end(&mut out)
    {
        failure = Some(e);
    }
    (out.into(), failure)
}

/// Feed `chunks` through a body decoder like the transport: each chunk until it is used up,
/// one event at a time; nothing after a decoder error; the end of the body only when no error
/// came.
pub fn assemble_body<'a, B: BodyDecoder>(
    mut decoder: B,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Decoded {
    let mut out = VecDeque::new();
    let mut events = Vec::new();
    for chunk in chunks {
        let mut rest = chunk;
        while !rest.is_empty() {
            match decoder.feed_until(rest, &mut out) {
                Ok(read) => {
                    assert!(read > 0 || !out.is_empty(), "no progress");
                    rest = &rest[read..];
                    events.extend(out.drain(..));
                }
                Err(e) => {
                    events.extend(out.drain(..));
                    return (events, Some(e));
                }
            }
        }
    }
    let result = decoder.finish(&mut out);
    events.extend(out.drain(..));
    (events, result.err())
}

/// `bytes` cut into chunks of `sizes` (cycled; each at least one byte).
pub fn chunked<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = bytes;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        let (head, tail) = rest.split_at(size);
        chunks.push(head);
        rest = tail;
    }
    chunks
}

/// `bytes` cut at a fraction of its length, then with bytes overwritten at fractions of what
/// is left.
pub fn damaged(mut bytes: Vec<u8>, cut: f64, damage: &[(f64, u8)]) -> Vec<u8> {
    bytes.truncate((bytes.len() as f64 * cut) as usize);
    let len = bytes.len();
    for &(at, byte) in damage {
        if len > 0 {
            bytes[((len as f64 * at) as usize).min(len - 1)] = byte;
        }
    }
    bytes
}

/// A folder of recordings named `<name><suffix>`, and their expectations.
pub struct Recordings {
    streams: PathBuf,
    expected: PathBuf,
    suffix: &'static str,
}

impl Recordings {
    /// The recordings in `shared/<folder>` whose file names end in `suffix`, expected in
    /// `tests/conformance/<expected>`.
    pub fn new(folder: &str, expected: &str, suffix: &'static str) -> Self {
        Self {
            streams: crate::common::shared_path(folder),
            expected: Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/conformance")
                .join(expected),
            suffix,
        }
    }

    /// Every recording's name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.streams)
            .expect("read the streams folder")
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(self.suffix).map(str::to_owned)
            })
            .collect();
        names.sort();
        names
    }

    /// The `pick`th recording's name, wrapping around.
    pub fn pick(&self, pick: usize) -> String {
        let names = self.names();
        names[pick % names.len()].clone()
    }

    /// The file `<name><suffix>` of the folder.
    pub fn read(&self, name: &str) -> Vec<u8> {
        self.read_as(name, self.suffix).expect("read the recording")
    }

    /// Another file of the folder: `<name><suffix>`, if it exists.
    pub fn read_as(&self, name: &str, suffix: &str) -> Option<Vec<u8>> {
        std::fs::read(self.streams.join(format!("{name}{suffix}"))).ok()
    }

    /// Checks that there are `count` recordings and that each one's summary equals its
    /// expectation; lists every mismatch, and the actual summary of a recording that has no
    /// expectation yet.
    pub fn check_expectations(&self, count: usize, summarize: impl Fn(&str) -> Value) {
        let names = self.names();
        assert_eq!(names.len(), count, "recordings found: {names:?}");
        let mut failures = Vec::new();
        for name in &names {
            let actual = summarize(name);
            let path = self.expected.join(format!("{name}.json"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                failures.push(format!(
                    "{name}: no expectation; actual:\n{}",
                    serde_json::to_string_pretty(&actual).unwrap()
                ));
                continue;
            };
            let expected: Value = serde_json::from_str(&text).expect("expectation is JSON");
            if actual != expected {
                failures.push(format!(
                    "{name}:\n  expected {expected}\n  actual   {}",
                    serde_json::to_string_pretty(&actual).unwrap()
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// What a provider's summary adds to the README's format.
pub struct Extras {
    /// `cache_read_tokens` in usage.
    pub cache_read: bool,
    /// `cache_write_tokens` in usage.
    pub cache_write: bool,
    /// `blocks`, the kinds of the content blocks in order (`thinking`, `signed_thinking`,
    /// `redacted_thinking`, `text`, `tool_use`, `native:<label>`), with this label for a
    /// native block's value; none when absent.
    pub native_label: Option<fn(&Value) -> String>,
    /// The `error` entry for the error that ended the stream.
    pub error: fn(&Error) -> Value,
}

/// The README's `error` entry: the provider's error type where it gave one.
pub fn typed_error(error: &Error) -> Value {
    let (kind, message) = match error {
        Error::Stream {
            error_type,
            message,
            ..
        }
        | Error::InvalidRequest {
            error_type,
            message,
            ..
        } => (error_type.clone().unwrap_or_default(), message.clone()),
        other => (other.kind().to_owned(), other.to_string()),
    };
    json!({"type": kind, "message": message})
}

/// The assembled result of `events` in the README's format, with `extras`.
pub fn summary(events: &[StreamEvent], error: Option<&Error>, extras: &Extras) -> Value {
    let mut acc = Accumulator::new();
    for event in events {
        acc.push(event);
    }
    let stopped = acc.is_stopped();
    let response = acc.finish();
    let tool_calls: Vec<Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(match input {
                Value::String(raw) if serde_json::from_str::<Value>(raw).is_err() => {
                    json!({"id": id, "name": name, "input": null, "input_error": "invalid JSON"})
                }
                _ => json!({"id": id, "name": name, "input": input}),
            }),
            _ => None,
        })
        .collect();
    let thinking: String = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let stop_reason = if error.is_some() && !stopped {
        Value::Null
    } else {
        json!(response.stop_reason.as_str())
    };
    let mut usage = json!({
        "input_tokens": response.usage.input_tokens,
        "output_tokens": response.usage.output_tokens,
    });
    if extras.cache_read {
        usage["cache_read_tokens"] = json!(response.usage.cache_read_tokens);
    }
    if extras.cache_write {
        usage["cache_write_tokens"] = json!(response.usage.cache_write_tokens);
    }
    let mut summary = json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": stop_reason,
        "usage": usage,
    });
    if let Some(label) = extras.native_label {
        let blocks: Vec<String> = response
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Thinking {
                    signature: Some(_), ..
                } => "signed_thinking".to_owned(),
                ContentBlock::Thinking { .. } => "thinking".to_owned(),
                ContentBlock::RedactedThinking { .. } => "redacted_thinking".to_owned(),
                ContentBlock::Text { .. } => "text".to_owned(),
                ContentBlock::ToolUse { .. } => "tool_use".to_owned(),
                ContentBlock::Native { value, .. } => format!("native:{}", label(value)),
                other => format!("{other:?}"),
            })
            .collect();
        summary["blocks"] = json!(blocks);
    }
    if !thinking.is_empty() {
        summary["thinking"] = json!(thinking);
    }
    if let Some(error) = error {
        summary["error"] = (extras.error)(error);
    }
    summary
}
