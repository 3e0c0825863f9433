//! A hand-written reader for the chunk shapes nearly every stream is made of: text deltas,
//! tool-call fragments, finish reasons, the closing usage object, with `null`s and unknown
//! fields (`object`, `created`, `logprobs`, ...) around them.
//!
//! serde's derived reading dispatches on every field and would be a streamed run's main cost;
//! this reads the same chunks in a single pass with no per-field dispatch. It answers `None` on
//! anything rarer (an error or `x_groq` object, content parts, arguments sent as an object,
//! numbers where strings belong, duplicate fields, escaped keys, invalid JSON) and the caller
//! falls back to serde. Where it answers, it answers what serde would: debug builds and fuzzing
//! check every chunk against serde, and `tests::agrees_with_serde` does so over generated
//! chunks.

use std::borrow::Cow;

use super::super::wire::{Arguments, Count, Str, Text, WireUsage};
use super::{Choice, Chunk, Delta, FunctionDelta, ToolCallDelta};
use crate::provider::scan::{Scanner, first, null_only};

/// Read one chunk, or `None` to let serde read it.
#[cfg(test)]
pub(super) fn read(data: &str) -> Option<Chunk<'_>> {
    read_after(data, &mut Header::default())
}

/// [`read_next`], with a fragment's choices built as a whole chunk's.
#[cfg(test)]
pub(super) fn read_after<'a>(data: &'a str, header: &mut Header) -> Option<Chunk<'a>> {
    read_next(data, header).map(Read::into_chunk)
}

/// What [`read_next`] read.
#[derive(Debug, Clone)]
pub(super) enum Read<'a> {
    /// A whole chunk.
    Chunk(Chunk<'a>),
    /// A chunk whose choices are a recent chunk's with another string (see [`Fragment`]): its
    /// other members, with `choices` left out, and the piece. Most of a stream's chunks; the
    /// decoder takes the piece directly, with no choices built around it.
    Fragment(Chunk<'a>, Piece<'a>),
}

impl<'a> Read<'a> {
    /// The chunk's members other than a fragment's choices, and the fragment's piece.
    pub(super) fn into_parts(self) -> (Chunk<'a>, Option<Piece<'a>>) {
        match self {
            Read::Chunk(chunk) => (chunk, None),
            Read::Fragment(chunk, piece) => (chunk, Some(piece)),
        }
    }

    /// The chunk as serde reads it.
    #[cfg(any(test, debug_assertions, fuzzing))]
    pub(super) fn into_chunk(self) -> Chunk<'a> {
        match self {
            Read::Chunk(chunk) => chunk,
            Read::Fragment(mut chunk, piece) => {
                chunk.choices = Some(vec![piece.into_choice()]);
                chunk
            }
        }
    }
}

/// The one string of a fragment chunk's choices, and which field it is.
#[derive(Debug, Clone)]
pub(super) struct Piece<'a> {
    pub(super) field: FragmentField,
    pub(super) value: Cow<'a, str>,
}

impl<'a> Piece<'a> {
    /// The choice's `index`.
    pub(super) fn choice(&self) -> Count {
        match self.field {
            FragmentField::Content { choice }
            | FragmentField::ReasoningContent { choice }
            | FragmentField::Reasoning { choice }
            | FragmentField::Arguments { choice, .. } => choice,
        }
    }

    /// The choice's delta, unless the piece is a tool call's arguments.
    #[cfg(any(test, debug_assertions, fuzzing))]
    fn into_text_delta(self) -> Result<Delta<'a>, ToolCallDelta<'a>> {
        let value = Some(self.value);
        let mut delta = Delta::default();
        match self.field {
            FragmentField::Content { .. } => delta.content = Text(value),
            FragmentField::ReasoningContent { .. } => delta.reasoning_content = Str(value),
            FragmentField::Reasoning { .. } => delta.reasoning = Str(value),
            FragmentField::Arguments { call, .. } => {
                return Err(ToolCallDelta {
                    index: call,
                    id: Str(None),
                    function: Some(FunctionDelta {
                        name: Str(None),
                        arguments: Arguments(value),
                    }),
                });
            }
        }
        Ok(delta)
    }

    /// The whole choice the piece stands for.
    #[cfg(any(test, debug_assertions, fuzzing))]
    fn into_choice(self) -> Choice<'a> {
        let index = self.choice();
        let delta = self.into_text_delta().unwrap_or_else(|call| Delta {
            tool_calls: Some(vec![call]),
            ..Delta::default()
        });
        Choice {
            index,
            delta: Some(delta),
            finish_reason: Str(None),
        }
    }
}

/// The members a stream's chunks open with, before `choices` (`id`, `object`, `created`,
/// `model`, `system_fingerprint`, ...), as the last chunk read had them. Streams repeat them
/// byte for byte on every chunk, so a chunk that starts with the same bytes is read from where
/// they end: they are most of a text delta's bytes.
#[derive(Debug, Default)]
pub(super) struct Header {
    /// The chunk's text up to the first key that is not part of the header; empty when
    /// nothing is remembered.
    bytes: String,
    /// Where the borrowed `id` and `model` strings are in `bytes` (`None`: read as absent).
    id: Option<(usize, usize)>,
    model: Option<(usize, usize)>,
    /// The known members the header holds.
    seen: ChunkMembers,
    /// The `choices` of the last few chunks that were one text, reasoning or argument
    /// fragment.
    fragments: Fragments,
}

/// The `choices` member that follows a chunk's header, cut around the one string that changes
/// from chunk to chunk of a text or tool call: `"choices":[{"index":0,"delta":{"content":` |
/// `"Hi"` | `},"logprobs":null,"finish_reason":null}]`. Choices made of the same bytes around
/// another string read as the remembered ones did with that string in place, so only the string
/// is read. The members after `choices` (`usage`, OpenAI's `obfuscation` padding, which changes on
/// every chunk) are read as usual.
#[derive(Debug, Default)]
struct Fragment {
    before: String,
    after: String,
    /// `None`: nothing is remembered.
    field: Option<FragmentField>,
}

/// How many fragment shapes are kept: parallel tool calls whose argument fragments alternate
/// each have their own (their call's index differs), and a text's is one more.
const FRAGMENTS: usize = 4;

/// The last few fragment shapes (see [`Fragment`]).
#[derive(Debug, Default)]
struct Fragments {
    /// The shape read or remembered last: a text's chunks, and a call's sent one after
    /// another, match it every time, so it alone is tried first at no extra cost.
    newest: Fragment,
    /// Up to `FRAGMENTS - 1` other shapes, in no order.
    older: Vec<Fragment>,
}

impl Fragments {
    /// The piece of `data` read as one of these fragments; see [`Fragment::read`]. A match
    /// among the older ones becomes the newest.
    #[inline]
    fn read<'a>(&mut self, data: &'a str, at: usize) -> Option<(Piece<'a>, usize)> {
        let read = self.newest.read(data, at);
        if read.is_some() || self.older.is_empty() {
            return read;
        }
        let (slot, read) = self
            .older
            .iter()
            .enumerate()
            .find_map(|(slot, fragment)| fragment.read(data, at).map(|read| (slot, read)))?;
        std::mem::swap(&mut self.newest, &mut self.older[slot]);
        Some(read)
    }

    /// Keep `chunk`'s choices as the newest shape if they are a fragment (see
    /// [`Fragment::cut`]), in place of an older one once all are taken.
    fn remember(&mut self, data: &str, choices: Span, text: Span, chunk: &Chunk<'_>) {
        let (Some(choices), Some(text)) = (choices, text) else {
            return;
        };
        // An evicted shape's buffers are reused.
        let mut spare = if self.older.len() + 1 < FRAGMENTS {
            Fragment::default()
        } else {
            self.older.swap_remove(0)
        };
        match spare.cut(data, choices, text, chunk) {
            Some(field) => {
                spare.field = Some(field);
                let previous = std::mem::replace(&mut self.newest, spare);
                if previous.field.is_some() {
                    self.older.push(previous);
                }
            }
            // Not a fragment: an evicted shape stays.
            None if spare.field.is_some() => self.older.push(spare),
            None => {}
        }
    }

    /// The newest fragment's field.
    #[cfg(test)]
    fn newest_field(&self) -> Option<FragmentField> {
        self.newest.field
    }
}

/// Which field the changing string is, and the indexes around it.
#[derive(Debug, Clone, Copy)]
pub(super) enum FragmentField {
    Content {
        choice: Count,
    },
    /// DeepSeek's and GLM's reasoning text.
    ReasoningContent {
        choice: Count,
    },
    /// Groq's and OpenRouter's reasoning text.
    Reasoning {
        choice: Count,
    },
    Arguments {
        choice: Count,
        call: Count,
    },
}

impl Fragment {
    /// Keep the bytes of the `choices` member (`choices` in `data`) around its changing string
    /// (`text`), if it has one: one choice, no finish reason, and a delta of one text (content
    /// or reasoning) or of one nameless argument piece.
    fn cut(
        &mut self,
        data: &str,
        (start, end): (usize, usize),
        (text_start, text_end): (usize, usize),
        chunk: &Chunk<'_>,
    ) -> Option<FragmentField> {
        let [choice] = chunk.choices.as_deref()? else {
            return None;
        };
        let delta = choice.delta.as_ref()?;
        if choice.finish_reason.0.is_some() || delta.refusal.0.is_some() {
            return None;
        }
        // Exactly one text or argument string, which is then the one `text` points at.
        let index = choice.index;
        let field = match (
            &delta.content.0,
            &delta.reasoning_content.0,
            &delta.reasoning.0,
            delta.tool_calls.as_deref(),
        ) {
            (Some(_), None, None, None) => FragmentField::Content { choice: index },
            (None, Some(_), None, None) => FragmentField::ReasoningContent { choice: index },
            (None, None, Some(_), None) => FragmentField::Reasoning { choice: index },
            (None, None, None, Some([call])) => {
                let function = call.function.as_ref()?;
                if call.id.0.is_some()
                    || function.name.0.is_some()
                    || function.arguments.0.is_none()
                {
                    return None;
                }
                FragmentField::Arguments {
                    choice: index,
                    call: call.index,
                }
            }
            _ => return None,
        };
        let before = data.get(start..text_start)?;
        let after = data.get(text_end..end)?;
        self.before.clear();
        self.before.push_str(before);
        self.after.clear();
        self.after.push_str(after);
        Some(field)
    }

    /// The piece of `data` read as this fragment, if its member at `at` is one; and where the
    /// member ends.
    #[inline]
    fn read<'a>(&self, data: &'a str, at: usize) -> Option<(Piece<'a>, usize)> {
        let field = self.field?;
        if !data.get(at..)?.starts_with(self.before.as_str()) {
            return None;
        }
        let mut s = Scanner::inside_object(data, at + self.before.len());
        let value = s.string()?;
        s.literal(&self.after)?;
        Some((Piece { field, value }, s.position()))
    }
}

impl Header {
    /// Whether a header is remembered and `data` opens with it.
    fn starts(&self, data: &str) -> bool {
        !self.bytes.is_empty() && data.starts_with(self.bytes.as_str())
    }

    fn value<'a>(data: &'a str, span: Option<(usize, usize)>) -> Option<Str<'a>> {
        match span {
            None => Some(Str(None)),
            Some((start, end)) => data.get(start..end).map(|s| Str(Some(Cow::Borrowed(s)))),
        }
    }
}

/// Where a string field's value lies in `data`: `Some(None)` when it reads as absent, `None`
/// when it was decoded (escaped) and so cannot be found again by position.
fn span_of(data: &str, value: &Str<'_>) -> Option<Option<(usize, usize)>> {
    match &value.0 {
        None => Some(None),
        Some(Cow::Borrowed(text)) => {
            let start = (text.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
            Some(Some((start, start + text.len())))
        }
        Some(Cow::Owned(_)) => None,
    }
}

/// Which known members of a chunk were read: serde rejects a known member given twice.
#[derive(Debug, Default, Clone, Copy)]
struct ChunkMembers {
    id: bool,
    model: bool,
    choices: bool,
    usage: bool,
    x_groq: bool,
    error: bool,
}

/// Read one chunk, or `None` to let serde read it; `header` is the last chunk's header and
/// becomes this one's.
pub(super) fn read_next<'a>(data: &'a str, header: &mut Header) -> Option<Read<'a>> {
    let mut chunk = Chunk {
        id: Str(None),
        model: Str(None),
        choices: None,
        usage: WireUsage(None),
        x_groq: None,
        error: None,
    };
    let mut seen = ChunkMembers::default();
    // The choices' piece, when they were read as a remembered fragment.
    let mut piece = None;
    // Where the `choices` member lies, and the last text or argument string in it.
    let mut choices_span = None;
    let mut text_span = None;
    let remembered = header.starts(data);
    let mut s = if remembered {
        chunk.id = Header::value(data, header.id)?;
        chunk.model = Header::value(data, header.model)?;
        seen = header.seen;
        match header.fragments.read(data, header.bytes.len()) {
            Some((read, end)) => {
                first(&mut seen.choices)?;
                piece = Some(read);
                Scanner::inside_object(data, end)
            }
            None => Scanner::inside_object(data, header.bytes.len()),
        }
    } else {
        Scanner::new(data)
    };
    // Where this chunk's header ends (at the first key that is not part of it), and its state.
    let mut header_end: Option<(usize, ChunkMembers)> = None;
    let mut header_members = 0_usize;
    let mut field = |s: &mut Scanner<'a>, key: &'a str| {
        let header_key = !matches!(key, "choices" | "usage" | "x_groq" | "error");
        if header_end.is_none() {
            if header_key {
                header_members += 1;
            } else {
                header_end = Some((s.member_start(), seen));
            }
        }
        match key {
            "id" => {
                first(&mut seen.id)?;
                chunk.id = Str::scan(s)?;
            }
            "model" => {
                first(&mut seen.model)?;
                chunk.model = Str::scan(s)?;
            }
            "choices" => {
                first(&mut seen.choices)?;
                let start = s.member_start();
                if !s.null()? {
                    let mut choices = Vec::with_capacity(1);
                    // Filled in place: these structs are large enough that moves show.
                    s.array(|s| {
                        choices.push(Choice {
                            index: Count(None),
                            delta: None,
                            finish_reason: Str(None),
                        });
                        choice(s, choices.last_mut()?, &mut text_span)
                    })?;
                    chunk.choices = Some(choices);
                }
                choices_span = Some((start, s.position()));
            }
            // `null` on every chunk but the last.
            "usage" => {
                first(&mut seen.usage)?;
                chunk.usage = WireUsage::scan(s)?;
            }
            "x_groq" => null_only(s, &mut seen.x_groq)?,
            "error" => null_only(s, &mut seen.error)?,
            _ => s.skip()?,
        }
        Some(())
    };
    if piece.is_some() {
        s.after_member(&mut field)?;
    } else if remembered {
        s.members(&mut field)?;
    } else {
        s.object(&mut field)?;
    }
    s.finish()?;
    if !remembered
        && header_members > 0
        && let Some((end, seen)) = header_end
    {
        remember(data, &chunk, end, seen, header);
    }
    if let Some(piece) = piece {
        return Some(Read::Fragment(chunk, piece));
    }
    // Only choices that start where the (now remembered) header ends can be found again.
    let first =
        choices_span.filter(|&(start, _)| start == header.bytes.len() && header.starts(data));
    header.fragments.remember(data, first, text_span, &chunk);
    Some(Read::Chunk(chunk))
}

/// The piece of a chunk that is the remembered header, then a remembered fragment's choices,
/// then nothing the decoder reads: unknown members (OpenAI's `obfuscation` padding) and `null`
/// `usage`, `x_groq` or `error`. Most of a stream's chunks are this, and the decoder takes the
/// piece with no chunk built around it. `None`: read the chunk with [`read_next`].
pub(super) fn read_fragment<'a>(data: &'a str, header: &mut Header) -> Option<Piece<'a>> {
    if !header.starts(data) {
        return None;
    }
    let (piece, end) = header.fragments.read(data, header.bytes.len())?;
    let mut seen = header.seen;
    first(&mut seen.choices)?;
    let mut s = Scanner::inside_object(data, end);
    s.after_member(|s, key| match key {
        // Given again: serde rejects the chunk, and `read_next` leaves it to serde.
        "id" | "model" | "choices" => None,
        "usage" => null_only(s, &mut seen.usage),
        "x_groq" => null_only(s, &mut seen.x_groq),
        "error" => null_only(s, &mut seen.error),
        _ => s.skip(),
    })?;
    s.finish()?;
    Some(piece)
}

/// The chunk [`read_fragment`] read `piece` from, as serde reads it.
#[cfg(any(test, debug_assertions, fuzzing))]
pub(super) fn fragment_chunk<'a>(data: &'a str, header: &Header, piece: Piece<'a>) -> Chunk<'a> {
    Chunk {
        id: Header::value(data, header.id).unwrap_or(Str(None)),
        model: Header::value(data, header.model).unwrap_or(Str(None)),
        choices: Some(vec![piece.into_choice()]),
        usage: WireUsage(None),
        x_groq: None,
        error: None,
    }
}

/// Keep `data`'s header up to `end` for the next chunk, if it can be found again by position.
fn remember(data: &str, chunk: &Chunk<'_>, end: usize, seen: ChunkMembers, header: &mut Header) {
    header.bytes.clear();
    // Only fields read within the header come from it; later ones are read from each chunk.
    let span = |in_header: bool, value: &Str<'_>| {
        if in_header {
            span_of(data, value)
        } else {
            Some(None)
        }
    };
    let (Some(id), Some(model), Some(bytes)) = (
        span(seen.id, &chunk.id),
        span(seen.model, &chunk.model),
        data.get(..end),
    ) else {
        return;
    };
    header.bytes.push_str(bytes);
    header.id = id;
    header.model = model;
    header.seen = seen;
}

fn choice<'a>(s: &mut Scanner<'a>, choice: &mut Choice<'a>, span: &mut Span) -> Option<()> {
    // Which known members were read: serde rejects one given twice.
    let (mut index_read, mut delta_read, mut finish_read) = (false, false, false);
    s.object(|s, key| {
        match key {
            "index" => {
                first(&mut index_read)?;
                choice.index = Count::scan(s)?;
            }
            "delta" => {
                first(&mut delta_read)?;
                if !s.null()? {
                    let target = choice.delta.insert(Delta {
                        content: Text(None),
                        refusal: Str(None),
                        reasoning_content: Str(None),
                        reasoning: Str(None),
                        tool_calls: None,
                    });
                    delta(s, target, span)?;
                }
            }
            "finish_reason" => {
                first(&mut finish_read)?;
                choice.finish_reason = Str::scan(s)?;
            }
            _ => s.skip()?,
        }
        Some(())
    })
}

fn delta<'a>(s: &mut Scanner<'a>, delta: &mut Delta<'a>, span: &mut Span) -> Option<()> {
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
                delta.content = Text(spanned(s, span)?.0);
            }
            "refusal" => {
                first(&mut refusal_read)?;
                delta.refusal = Str::scan(s)?;
            }
            "reasoning_content" => {
                first(&mut reasoning_content_read)?;
                delta.reasoning_content = spanned(s, span)?;
            }
            "reasoning" => {
                first(&mut reasoning_read)?;
                delta.reasoning = spanned(s, span)?;
            }
            "tool_calls" => {
                first(&mut tool_calls_read)?;
                if !s.null()? {
                    let mut calls = Vec::with_capacity(1);
                    s.array(|s| {
                        calls.push(tool_call(s, span)?);
                        Some(())
                    })?;
                    delta.tool_calls = Some(calls);
                }
            }
            _ => s.skip()?,
        }
        Some(())
    })
}

fn tool_call<'a>(s: &mut Scanner<'a>, span: &mut Span) -> Option<ToolCallDelta<'a>> {
    let mut call = ToolCallDelta {
        index: Count(None),
        id: Str(None),
        function: None,
    };
    // Which known members were read: serde rejects one given twice.
    let (mut index_read, mut id_read, mut function_read) = (false, false, false);
    s.object(|s, key| {
        match key {
            "index" => {
                first(&mut index_read)?;
                call.index = Count::scan(s)?;
            }
            "id" => {
                first(&mut id_read)?;
                call.id = Str::scan(s)?;
            }
            "function" => {
                first(&mut function_read)?;
                if !s.null()? {
                    call.function = Some(function(s, span)?);
                }
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(call)
}

fn function<'a>(s: &mut Scanner<'a>, span: &mut Span) -> Option<FunctionDelta<'a>> {
    let mut function = FunctionDelta {
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
                function.arguments = Arguments(spanned(s, span)?.0);
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(function)
}

/// Where the last text or argument string read lies (quotes included), for [`Fragment`].
type Span = Option<(usize, usize)>;

/// [`Str::scan`], noting where a string value lies in `span`.
#[inline]
fn spanned<'a>(s: &mut Scanner<'a>, span: &mut Span) -> Option<Str<'a>> {
    s.peek()?;
    let start = s.position();
    let value = Str::scan(s)?;
    if value.0.is_some() {
        *span = Some((start, s.position()));
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;

    use std::collections::VecDeque;

    use super::super::ChunkDecoder;
    use super::*;
    use crate::message::Usage;
    use crate::provider::http::SseDecoder;
    use crate::provider::scan::strategies::{
        Keys, array, fields, mangled, one_of, recorded_streams, share_read, string, text,
    };
    use crate::sse::SseEvent;
    use crate::stream::StreamEvent;

    fn serde(data: &str) -> Option<Chunk<'_>> {
        serde_json::from_str(data).ok()
    }

    #[test]
    fn reads_text_and_tool_call_chunks_without_copying() {
        let data = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        let chunk = read(data).unwrap();
        assert_eq!(Some(&chunk), serde(data).as_ref());
        let delta = chunk.choices.as_ref().unwrap()[0].delta.as_ref().unwrap();
        assert!(matches!(delta.content.0, Some(Cow::Borrowed("Hi"))));

        let data = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]},"finish_reason":null}]}"#;
        let chunk = read(data).unwrap();
        assert_eq!(Some(&chunk), serde(data).as_ref());
        let call = &chunk.choices.as_ref().unwrap()[0]
            .delta
            .as_ref()
            .unwrap()
            .tool_calls
            .as_ref()
            .unwrap()[0];
        assert_eq!(call.index, Count(Some(1)));
        assert_eq!(
            call.function.as_ref().unwrap().arguments.0.as_deref(),
            Some("{\"ci")
        );
    }

    /// The usage chunk that ends a stream is read here too, as serde reads it: its counts,
    /// the cached count from either place servers put it, and anything else skipped.
    #[test]
    fn reads_usage_objects() {
        let data = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":30,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":6,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":22,"audio_tokens":0}}}"#;
        let chunk = read(data).unwrap();
        assert_eq!(Some(&chunk), serde(data).as_ref());
        assert_eq!(
            chunk.usage.0,
            Some(Usage {
                input_tokens: 14,
                output_tokens: 30,
                cache_read_tokens: 6,
                cache_write_tokens: 0,
                reasoning_tokens: 22,
            })
        );
        for data in [
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_cache_hit_tokens":4}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":null,"prompt_cache_hit_tokens":4}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":{},"prompt_cache_hit_tokens":4}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":2}}"#,
            r#"{"choices":[],"usage":{}}"#,
            r#"{"choices":[],"usage":{"completion_tokens_details":null}}"#,
            r#"{"choices":[],"usage":{"completion_tokens_details":{"reasoning_tokens":null}}}"#,
        ] {
            assert_eq!(read(data), serde(data), "{data}");
            assert!(read(data).is_some(), "{data}");
        }
    }

    #[test]
    fn leaves_rare_shapes_to_serde() {
        for data in [
            r#"{"choices":[],"usage":{"prompt_tokens":9.0,"completion_tokens":2}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens_details":[3]}}"#,
            r#"{"choices":[],"usage":true}"#,
            r#"{"x_groq":{"id":"req_1"}}"#,
            r#"{"error":{"message":"overloaded"}}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":{"city":"Paris"}}}]}}]}"#,
            r#"{"id":12,"choices":[]}"#,
            r#"{"choices":[{"index":1.0}]}"#,
            r#"{"i\u0064":"a"}"#,
        ] {
            assert_eq!(read(data), None, "{data}");
            assert!(serde(data).is_some(), "{data}");
        }
        for invalid in [
            r#"{"id":"a","id":"b"}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens":2}}"#,
            r#"{"id":"a",}"#,
            r#"{"id":"a"} x"#,
            r#"[{"id":"a"}]"#,
            "",
        ] {
            assert_eq!(read(invalid), None, "{invalid}");
        }
    }

    /// The recorded streams of the OpenAI-compatible services: each file's path and text.
    fn openai_recordings() -> Vec<(std::path::PathBuf, String)> {
        let mut recordings = Vec::new();
        for service in std::fs::read_dir(recorded_streams()).unwrap() {
            let service = service.unwrap().path();
            if !service.is_dir() || service.ends_with("anthropic") {
                continue;
            }
            for file in std::fs::read_dir(&service).unwrap() {
                let path = file.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                recordings.push((path, text));
            }
        }
        recordings
    }

    /// Every chunk of the recorded streams of the OpenAI-compatible services: the fast reader
    /// agrees with serde wherever it answers, and it answers for nearly all of them.
    #[test]
    fn recorded_streams_agree_and_mostly_take_the_fast_path() {
        let (mut chunks, mut fast, mut fragments) = (0, 0, 0);
        let mut fragments_by_file = std::collections::HashMap::new();
        for (path, text) in openai_recordings() {
            // Read in order too, as the decoder does, with the header and fragment kept.
            let mut header = Header::default();
            for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
                let data = data.trim();
                let as_fragment = header.starts(data)
                    && header.fragments.read(data, header.bytes.len()).is_some();
                let in_order = read_after(data, &mut header);
                let Some(expected) = serde(data) else {
                    continue;
                };
                chunks += 1;
                if let Some(chunk) = read(data) {
                    assert_eq!(chunk, expected, "{data}");
                    fast += 1;
                }
                if let Some(chunk) = in_order {
                    assert_eq!(chunk, expected, "{data}");
                }
                if as_fragment {
                    fragments += 1;
                    *fragments_by_file.entry(path.clone()).or_insert(0) += 1;
                }
            }
        }
        assert!(chunks > 500, "only {chunks} recorded chunks found");
        // The rest are error and x_groq chunks.
        assert!(
            fast * 100 >= chunks * 98,
            "fast path took {fast} of {chunks}"
        );
        // Text, reasoning and argument pieces after the first of each run, OpenAI's padded
        // chunks included.
        assert!(
            fragments * 100 >= chunks * 60,
            "fragments were {fragments} of {chunks}"
        );
        let padded = recorded_streams().join("openai/tool-call-obfuscation.sse");
        assert!(fragments_by_file.get(&padded).is_some_and(|&n| n >= 4));
    }

    const KEYS: Keys = Keys(&[
        "id",
        "model",
        "object",
        "created",
        "choices",
        "usage",
        "x_groq",
        "error",
        "index",
        "delta",
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
        "total_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "completion_tokens_details",
        "reasoning_tokens",
        "prompt_cache_hit_tokens",
        "i\\u0064",
        "other",
    ]);

    fn count() -> BoxedStrategy<String> {
        one_of(vec!["0", "1", "2", "null"])
    }

    fn chunk() -> impl Strategy<Value = String> {
        let function = fields(vec![
            KEYS.field("name", text()),
            KEYS.field("arguments", text()),
        ]);
        let call = fields(vec![
            KEYS.field("index", count()),
            KEYS.field("id", text()),
            KEYS.field("type", text()),
            KEYS.field("function", function.boxed()),
        ]);
        let calls = array(call);
        let delta = fields(vec![
            KEYS.field("content", text()),
            KEYS.field("refusal", text()),
            KEYS.field("reasoning_content", text()),
            KEYS.field("reasoning", text()),
            KEYS.field("role", text()),
            KEYS.field("tool_calls", calls.boxed()),
        ]);
        let choice = fields(vec![
            KEYS.field("index", count()),
            KEYS.field("delta", delta.boxed()),
            KEYS.field("finish_reason", text()),
            KEYS.field("logprobs", KEYS.value()),
        ]);
        let choices = array(choice);
        let details = fields(vec![KEYS.field("cached_tokens", count())]);
        let completion_details = fields(vec![KEYS.field("reasoning_tokens", count())]);
        let usage = prop_oneof![
            1 => Just("null".to_owned()),
            3 => fields(vec![
                KEYS.field("prompt_tokens", count()),
                KEYS.field("completion_tokens", count()),
                KEYS.field("total_tokens", count()),
                KEYS.field("prompt_tokens_details", details.boxed()),
                KEYS.field("completion_tokens_details", completion_details.boxed()),
                KEYS.field("prompt_cache_hit_tokens", count()),
            ]),
        ];
        fields(vec![
            KEYS.field("id", text()),
            KEYS.field("model", text()),
            KEYS.field("object", text()),
            KEYS.field("created", count()),
            KEYS.field("choices", choices.boxed()),
            KEYS.field("usage", usage.boxed()),
            KEYS.field("error", one_of(vec!["null"])),
            KEYS.field("other", KEYS.value()),
        ])
    }

    fn mangled_chunk() -> impl Strategy<Value = String> {
        mangled(chunk(), vec![" ", "\n", ",", "}", "\""])
    }

    #[test]
    fn generated_chunks_often_take_the_fast_path() {
        let share = share_read(mangled_chunk(), |data| read(data).is_some());
        assert!(share > 0.2, "only {share} of generated chunks read");
    }

    #[test]
    fn a_chunk_that_repeats_the_header_is_read_from_where_it_ends() {
        let first = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        let mut header = Header::default();
        assert_eq!(read_after(first, &mut header), serde(first));
        assert_eq!(
            header.bytes,
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"#
        );
        let second = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}],"usage":null}"#;
        let chunk = read_after(second, &mut header).unwrap();
        assert_eq!(Some(&chunk), serde(second).as_ref());
        assert!(matches!(chunk.id.0, Some(Cow::Borrowed("c1"))));
        // Another header is read in full and remembered instead.
        let third = r#"{"id":"c2","choices":[],"model":"n"}"#;
        assert_eq!(read_after(third, &mut header), serde(third));
        assert_eq!(header.bytes, r#"{"id":"c2","#);
        // `model` came after the header, so it is read from each chunk, not remembered.
        let fourth = r#"{"id":"c2","choices":[]}"#;
        assert_eq!(read_after(fourth, &mut header), serde(fourth));
        let fifth = r#"{"model":"n","choices":[],"id":"c3"}"#;
        assert_eq!(read_after(fifth, &mut header), serde(fifth));
        let sixth = r#"{"model":"n","choices":[]}"#;
        assert_eq!(read_after(sixth, &mut header), serde(sixth));
    }

    /// Chunks that share a generated header, as a stream's do.
    /// Header members, as JSON text without the braces.
    fn header_members() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                KEYS.field("id", text()),
                KEYS.field("model", text()),
                KEYS.field("object", text()),
                KEYS.field("created", count()),
                KEYS.field("other", KEYS.value()),
            ],
            0..4,
        )
        .prop_map(|header| {
            let header: Vec<String> = header.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            header.join(",")
        })
    }

    /// `body` (an object) with `header` members put first.
    fn with_header(header: &str, body: &str) -> String {
        let members = body.strip_prefix('{').unwrap_or(body);
        let comma = if header.is_empty() || members.starts_with('}') {
            ""
        } else {
            ","
        };
        format!("{{{header}{comma}{members}")
    }

    /// Chunks that share a generated header, as a stream's do.
    fn chunks_with_a_header() -> impl Strategy<Value = Vec<String>> {
        (
            header_members(),
            prop::collection::vec(mangled_chunk(), 1..4),
        )
            .prop_map(|(header, bodies)| {
                bodies
                    .iter()
                    .map(|body| with_header(&header, body))
                    .collect()
            })
    }

    /// Where a fragment's changing string goes in the bodies below.
    const SLOT: &str = "@S@";

    /// Chunks that share a header and differ in one string, as a text's or a tool call's do;
    /// the shapes include ones that must not be read as fragments.
    fn fragment_chunks() -> impl Strategy<Value = Vec<String>> {
        // Shapes a fragment is made of, and shapes close to them that are not fragments.
        let shapes = prop_oneof![
            1 => one_of(vec![
                r#"{"choices":[{"index":0,"delta":{"content":@S@},"logprobs":null,"finish_reason":null}]}"#,
                r#"{"choices":[{"index":1,"delta":{"tool_calls":[{"index":2,"function":{"arguments":@S@}}]},"finish_reason":null}],"usage":null}"#,
                r#"{"choices":[{"delta":{"role":"assistant","content":@S@},"index":0}],"id":"late"}"#,
                r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":@S@},"logprobs":null,"finish_reason":null}],"usage":null}"#,
                r#"{"choices":[{"index":0,"delta":{"reasoning":@S@,"channel":"analysis"},"finish_reason":null}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@},"finish_reason":null}],"usage":null,"obfuscation":@P@}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@}}],"id":@P@}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@}}],"usage":@P@}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@}}],"choices":@P@}"#,
            ]),
            1 => one_of(vec![
                r#"{"choices":[{"index":0,"delta":{"content":@S@,"refusal":"no"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"reasoning":@S@,"content":"x"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"reasoning":@S@,"reasoning_content":"x"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@},"finish_reason":"stop"}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@}},{"index":1,"delta":{"content":"b"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":@S@}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":@S@}},{"index":1}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"content":@S@,"content":"x"}}]}"#,
            ]),
        ];
        let body = prop_oneof![
            2 => shapes.clone(),
            1 => mangled(shapes, vec![" ", "\n", ",", "}", "\""]),
        ];
        let header = prop_oneof![
            2 => one_of(vec![
                r#""id":"c1","object":"chat.completion.chunk","created":1,"model":"m""#,
                r#""id":"c2","model":"m2""#,
            ]),
            1 => header_members(),
        ];
        let value = prop_oneof![
            4 => "\"[a-z ]{0,8}\"",
            2 => string(),
            1 => KEYS.value(),
        ];
        let values = prop::collection::vec(value, 1..5);
        (header, body, values).prop_map(|(header, body, values)| {
            let body = with_header(&header, &body);
            // The members after `choices` change too, as OpenAI's padding does.
            let others = [
                "\"pad\"",
                "\"padding\"",
                "null",
                "[]",
                r#"{"prompt_tokens":1}"#,
            ];
            values
                .iter()
                .enumerate()
                .map(|(i, value)| {
                    body.replace(SLOT, value)
                        .replace("@P@", others[i % others.len()])
                })
                .collect()
        })
    }

    #[test]
    fn a_chunk_that_repeats_the_last_but_for_its_text_reads_only_the_text() {
        let head = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"#;
        let tail = r#"},"logprobs":null,"finish_reason":null}]"#;
        let text = |piece: &str, end: &str| format!(r#"{head}"content":{piece}{tail}{end}"#);
        let arguments = |piece: &str| {
            format!(
                r#"{head}"tool_calls":[{{"index":1,"function":{{"arguments":{piece}}}}}]{tail}}}"#
            )
        };
        let mut header = Header::default();
        for data in [
            text(r#""Hel""#, "}"),
            text(r#""lo""#, "}"),
            text(r#""\n\"quoted\"""#, "}"),
            text(r#" "spaced" "#, " }"),
            // OpenAI's padding after `choices` changes on every chunk.
            text(r#""a""#, r#","usage":null,"obfuscation":"qfQVOwfh"}"#),
            text(r#""b""#, r#","usage":null,"obfuscation":"Uq"}"#),
            text(r#""c""#, r#","choices":[]}"#),
            text(r#""d""#, r#","id":"late"}"#),
            arguments(r#""{\"ci""#),
            arguments(r#""ty\": ""#),
            arguments(r#""Paris\"}""#),
            text(r#""""#, "}"),
        ] {
            let chunk = read_after(&data, &mut header);
            assert_eq!(chunk, serde(&data), "{data}");
            assert_eq!(chunk, read(&data), "{data}");
        }
        // The text's shape is still remembered after the arguments': its chunks are read as
        // fragments.
        assert!(matches!(
            read_next(&text(r#""a""#, "}"), &mut header),
            Some(Read::Fragment(
                _,
                Piece {
                    field: FragmentField::Content {
                        choice: Count(Some(0))
                    },
                    ..
                }
            ))
        ));
        let at = header.bytes.len();
        let next = text(r#""b""#, r#","obfuscation":"x"}"#);
        let (piece, end) = header.fragments.read(&next, at).unwrap();
        assert!(matches!(piece.value, Cow::Borrowed("b")));
        assert!(matches!(piece.field, FragmentField::Content { .. }));
        assert_eq!(&next[end..], r#","obfuscation":"x"}"#);
        // No remembered shape: read in full.
        let other = text(r#""b","refusal":"no""#, "}");
        assert!(header.fragments.read(&other, at).is_none());
        assert!(header.fragments.read(&text("null", "}"), at).is_none());
    }

    #[test]
    fn a_fragment_with_nothing_else_to_read_is_taken_as_its_piece_alone() {
        let head = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"#;
        let tail = r#"},"logprobs":null,"finish_reason":null}]"#;
        let text = |piece: &str, end: &str| format!(r#"{head}"{piece}"{tail}{end}"#);
        let mut header = Header::default();
        // Nothing is remembered before a chunk was read in full.
        assert!(read_fragment(&text("Hi", "}"), &mut header).is_none());
        assert!(read_next(&text("Hi", "}"), &mut header).is_some());
        for end in [
            "}",
            " } ",
            r#","usage":null,"obfuscation":"qfQVOwfh"}"#,
            r#","x_groq":null,"error":null,"system_fingerprint":"fp"}"#,
        ] {
            let data = text("there", end);
            let piece = read_fragment(&data, &mut header).unwrap();
            assert!(matches!(piece.value, Cow::Borrowed("there")), "{data}");
            assert_eq!(
                Some(fragment_chunk(&data, &header, piece)),
                serde(&data),
                "{data}"
            );
        }
        // Anything the decoder reads, or serde rejects, is read by `read_next` instead.
        for end in [
            r#","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
            r#","usage":null,"usage":null}"#,
            r#","id":"late"}"#,
            r#","choices":[]}"#,
            r#","error":{"message":"overloaded"}}"#,
            r#"},"#,
            "",
        ] {
            let data = text("there", end);
            assert!(read_fragment(&data, &mut header).is_none(), "{data}");
        }
        let other_header = text("there", "}").replace(r#""created":1"#, r#""created":2"#);
        assert!(read_fragment(&other_header, &mut header).is_none());
    }

    #[test]
    fn alternating_tool_calls_each_keep_their_fragment() {
        let call = |index: usize, piece: &str| {
            format!(
                r#"{{"id":"c1","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{index},"function":{{"arguments":"{piece}"}}}}]}}}}]}}"#
            )
        };
        let mut header = Header::default();
        let mut fragments = 0;
        for step in 0..4 {
            for index in 0..FRAGMENTS {
                let data = call(index, &format!("p{step}"));
                let read = read_next(&data, &mut header).unwrap();
                if let Read::Fragment(_, piece) = &read {
                    assert!(matches!(
                        piece.field,
                        FragmentField::Arguments { call: Count(Some(i)), .. } if i == index as u64
                    ));
                    fragments += 1;
                }
                assert_eq!(Some(read.into_chunk()), serde(&data), "{data}");
            }
        }
        // Only each call's first chunk is read in full.
        assert_eq!(fragments, 3 * FRAGMENTS);
        // One call more than there are slots: an older shape makes room (here call 0's, the one
        // used longest ago).
        let data = call(FRAGMENTS, "x");
        assert!(matches!(
            read_next(&data, &mut header),
            Some(Read::Chunk(_))
        ));
        assert!(matches!(
            read_next(&data, &mut header),
            Some(Read::Fragment(..))
        ));
        assert!(matches!(
            read_next(&call(0, "y"), &mut header),
            Some(Read::Chunk(_))
        ));
    }

    #[test]
    fn generated_fragments_often_take_the_shortcut() {
        let share = share_read(
            fragment_chunks().prop_map(|chunks| chunks.join("\u{1f}")),
            |joined| {
                let mut header = Header::default();
                let mut chunks = joined.split('\u{1f}');
                chunks
                    .next()
                    .is_some_and(|first| read_after(first, &mut header).is_some())
                    && header.fragments.newest_field().is_some()
            },
        );
        assert!(
            share > 0.1,
            "only {share} of generated streams had a fragment"
        );
    }

    /// Reading `chunks` in order, as a stream's decoder does, gives what reading each afresh
    /// gives, and what serde gives wherever the reader answers.
    fn reads_in_order_as_fresh_reads<'a>(
        chunks: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), TestCaseError> {
        let mut header = Header::default();
        for data in chunks {
            let fast = read_after(data, &mut header);
            prop_assert_eq!(&fast, &read(data), "{}", data);
            if let Some(fast) = fast {
                prop_assert_eq!(Some(fast), serde(data), "{}", data);
            }
        }
        Ok(())
    }

    /// The events a decoder emits for `chunks`: as it reads them (fragments taken as pieces),
    /// and with every chunk read by serde and taken whole. Chunks serde rejects are left out.
    fn decoded_both_ways(chunks: &[&str]) -> (Vec<StreamEvent>, Vec<StreamEvent>) {
        let mut fast = ChunkDecoder::new("test");
        let mut whole = ChunkDecoder::new("test");
        let (mut fast_out, mut whole_out) = (VecDeque::new(), VecDeque::new());
        for data in chunks {
            let Some(mut chunk) = serde(data) else {
                continue;
            };
            let event = SseEvent {
                event: "",
                data: Cow::Borrowed(data),
                id: None,
                retry: None,
            };
            let fast_error = fast.event(&event, &mut fast_out).err();
            let error = chunk.error.take();
            whole.chunk(chunk, &mut whole_out);
            let whole_error = error.map(|error| whole.fail(error, &mut whole_out));
            assert_eq!(format!("{fast_error:?}"), format!("{whole_error:?}"));
            if fast_error.is_some() {
                break;
            }
        }
        (fast_out.into(), whole_out.into())
    }

    /// Every recorded stream decodes to the same events whether its fragments are taken as
    /// pieces or as whole chunks.
    #[test]
    fn recorded_streams_decode_the_same_as_whole_chunks() {
        let mut pieces = 0;
        for (path, text) in openai_recordings() {
            let chunks: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .filter(|data| *data != "[DONE]")
                .collect();
            let (fast, whole) = decoded_both_ways(&chunks);
            assert_eq!(fast, whole, "{}", path.display());
            pieces += fast.len();
        }
        assert!(pieces > 500, "only {pieces} events decoded");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_fragment_reads_as_a_fresh_read_does(chunks in fragment_chunks()) {
            reads_in_order_as_fresh_reads(&chunks)?;
        }

        #[test]
        fn fragments_decode_as_whole_chunks_do(chunks in fragment_chunks()) {
            let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
            let (fast, whole) = decoded_both_ways(&chunks);
            prop_assert_eq!(fast, whole);
        }

        #[test]
        fn a_remembered_header_reads_as_a_fresh_read_does(chunks in chunks_with_a_header()) {
            reads_in_order_as_fresh_reads(chunks.iter().chain(&chunks))?;
        }

        #[test]
        fn agrees_with_serde(data in mangled_chunk()) {
            if let Some(fast) = read(&data) {
                let serde = serde_json::from_str::<Chunk<'_>>(&data);
                prop_assert!(matches!(&serde, Ok(chunk) if *chunk == fast), "{data}: fast {fast:?}, serde {serde:?}");
            }
        }
    }
}
