//! Incremental Server-Sent Events parser.
//!
//! Implements the WHATWG "interpreting an event stream" algorithm over raw
//! network chunks, so that callers never have to re-frame bytes themselves.
//! Lines are split on bytes (the delimiters are all ASCII), and field values
//! are UTF-8 decoded lossily one at a time, which yields exactly what decoding
//! the whole stream first would. Events that lie wholly inside the slice being
//! fed are handed out borrowed from it; only bytes that straddle a chunk
//! boundary are copied, into buffers that are reused for the parser's life.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::str;

use memchr::{memchr, memchr2};

/// UTF-8 byte order mark, stripped once at the start of a stream.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A data line's field name, colon and the one space a value usually starts after.
const DATA: &[u8] = b"data: ";

/// One dispatched event, borrowed from the fed chunk or the parser's buffers
/// so that the common case costs no allocation; convert to owned data if it
/// must outlive the callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field; empty when absent, which callers treat as
    /// `"message"` (kept empty so that absence stays observable).
    pub event: &'a str,
    /// Data lines joined with `'\n'`; borrowed whenever no copy was needed.
    pub data: Cow<'a, str>,
    /// The `id:` field of this event only: reconnection bookkeeping
    /// (last-event-id) is left to the caller.
    pub id: Option<&'a str>,
    /// The `retry:` field in milliseconds, if it was all ASCII digits
    /// (saturating at `u64::MAX`).
    pub retry: Option<u64>,
}

/// Where the pending event's data lives.
#[derive(Debug, Default, Clone, Copy)]
enum Data {
    /// No `data` field seen yet: a blank line dispatches nothing.
    #[default]
    None,
    /// Exactly one data line, at `start..end` of the slice being fed.
    Chunk(usize, usize),
    /// One or more lines, joined with `'\n'` in `SseParser::data`.
    Owned,
}

/// The field a line sets.
#[derive(Clone, Copy)]
enum Field {
    Data,
    Event,
    Id,
    Retry,
    /// Unknown fields are ignored.
    Other,
}

impl Field {
    fn named(name: &[u8]) -> Self {
        match name {
            b"data" => Self::Data,
            b"event" => Self::Event,
            b"id" => Self::Id,
            b"retry" => Self::Retry,
            _ => Self::Other,
        }
    }
}

/// Push-based SSE parser: feed it chunks as they arrive, get events as soon
/// as their terminating blank line is seen. It never fails and never panics;
/// malformed input degrades as the specification prescribes.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Incomplete trailing line of the previous chunks.
    line: Vec<u8>,
    /// Raw data bytes of the pending event when they cannot be borrowed.
    data: Vec<u8>,
    data_at: Data,
    /// The last `event:` value seen; it names the pending event only while `has_event`.
    /// Kept across events: streams repeat a few names, and one that matches needs no copy.
    event: String,
    has_event: bool,
    id: String,
    has_id: bool,
    retry: Option<u64>,
    /// The previous chunk ended with CR, so a leading LF ends nothing.
    skip_lf: bool,
    /// A first line has been seen, so no BOM is stripped any more.
    started: bool,
}

impl SseParser {
    /// Creates a parser positioned at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one network chunk; calls `on_event` for every event completed by
    /// it, in order. Chunks may be split anywhere, even inside a CRLF pair or
    /// a multi-byte character.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        self.feed_until(chunk, |event| {
            on_event(event);
            ControlFlow::Continue(())
        });
    }

    /// [`Self::feed`] that stops right after an event for which `on_event` breaks, and returns
    /// how many bytes of `chunk` it read. The rest, `&chunk[read..]`, must be fed before any
    /// later chunk; it is parsed as if it had never been held back. A reader can thus decode a
    /// chunk holding many events one event at a time instead of queueing them all.
    pub fn feed_until(
        &mut self,
        chunk: &[u8],
        mut on_event: impl FnMut(SseEvent<'_>) -> ControlFlow<()>,
    ) -> usize {
        let on_event = &mut on_event;
        let mut pos = 0;
        if self.skip_lf {
            let Some(&first) = chunk.first() else {
                return 0;
            };
            self.skip_lf = false;
            pos = usize::from(first == b'\n');
        }
        if !self.line.is_empty() {
            let Some(i) = memchr2(b'\n', b'\r', &chunk[pos..]) else {
                self.line.extend_from_slice(&chunk[pos..]);
                return chunk.len();
            };
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(&chunk[pos..pos + i]);
            pos = self.after_line_end(chunk, pos + i);
            let flow = self.held_line_complete(&line, chunk, on_event);
            line.clear();
            self.line = line;
            if flow.is_break() {
                return pos;
            }
        }
        loop {
            let end = match chunk.get(pos) {
                // A blank line (the end of every event) needs no search.
                Some(b'\n' | b'\r') => pos,
                Some(_) => match memchr2(b'\n', b'\r', &chunk[pos..]) {
                    Some(i) => pos + i,
                    None => break,
                },
                None => break,
            };
            if self.ends_event_alone(chunk, pos, end) {
                let flow = self.dispatch_alone(&chunk[pos + DATA.len()..end], on_event);
                pos = end + 2;
                if flow.is_break() {
                    return pos;
                }
                continue;
            }
            let next = self.after_line_end(chunk, end);
            let flow = self.line_complete(&chunk[pos..end], Some(pos), chunk, on_event);
            pos = next;
            // A break comes only from a dispatch, after which nothing borrows the chunk.
            if flow.is_break() {
                return pos;
            }
        }
        self.line.extend_from_slice(&chunk[pos..]);
        // The chunk is about to go away: keep what the pending event borrows.
        if let Data::Chunk(start, end) = self.data_at {
            self.data.extend_from_slice(&chunk[start..end]);
            self.data_at = Data::Owned;
        }
        chunk.len()
    }

    /// End of stream: dispatch a pending event that had data but no
    /// terminating blank line (servers often omit it; WHATWG would discard it,
    /// we are lenient), then reset so the parser can serve a new stream.
    /// An unterminated last line counts as complete, for the same reason.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut on_event = |event: SseEvent<'_>| {
            on_event(event);
            ControlFlow::Continue(())
        };
        let mut line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            let _ = self.held_line_complete(&line, &[], &mut on_event);
        }
        let _ = self.dispatch(&[], &mut on_event);
        line.clear();
        self.line = line;
        self.skip_lf = false;
        self.started = false;
    }

    /// Bytes buffered but not yet part of a complete line, so callers can cap
    /// memory against servers that never send a line end.
    pub fn buffered_len(&self) -> usize {
        self.line.len()
    }

    /// Whether the line at `start..end` of `chunk` is a `data: ` line followed by a blank line
    /// (LF, LF), and the pending event has no data, id or retry yet: then it is the whole event
    /// but its name. Token streams send nearly every event so, and it needs none of the
    /// line-by-line bookkeeping; see [`Self::dispatch_alone`].
    #[inline(always)]
    fn ends_event_alone(&self, chunk: &[u8], start: usize, end: usize) -> bool {
        chunk[end] == b'\n'
            && chunk.get(end + 1) == Some(&b'\n')
            && self.started
            && matches!(self.data_at, Data::None)
            && !self.has_id
            && self.retry.is_none()
            && chunk[start..end].starts_with(DATA)
    }

    /// Dispatches an event whose only data line is `data`, as [`Self::line_complete`] and
    /// [`Self::dispatch`] would for that line and the blank line after it. Not `dispatch`
    /// itself: it resets fields that are already clear here, on nearly every event.
    #[inline(always)]
    fn dispatch_alone<F: FnMut(SseEvent<'_>) -> ControlFlow<()>>(
        &mut self,
        data: &[u8],
        on_event: &mut F,
    ) -> ControlFlow<()> {
        let flow = on_event(SseEvent {
            event: if self.has_event { &self.event } else { "" },
            data: lossy(data),
            id: None,
            retry: None,
        });
        self.has_event = false;
        flow
    }

    /// Returns the position after the line end at `at`, consuming CRLF as one
    /// and remembering a CR that ends the chunk.
    #[inline]
    fn after_line_end(&mut self, chunk: &[u8], at: usize) -> usize {
        if chunk[at] == b'\r' {
            match chunk.get(at + 1) {
                Some(b'\n') => return at + 2,
                None => self.skip_lf = true,
                Some(_) => {}
            }
        }
        at + 1
    }

    /// [`Self::line_complete`] for a line held over from earlier chunks: rare, so kept out
    /// of line, which lets the loop over the chunk's own lines take it inline.
    #[inline(never)]
    fn held_line_complete<F: FnMut(SseEvent<'_>) -> ControlFlow<()>>(
        &mut self,
        line: &[u8],
        chunk: &[u8],
        on_event: &mut F,
    ) -> ControlFlow<()> {
        self.line_complete(line, None, chunk, on_event)
    }

    /// Interprets one complete line; `at` is its offset in `chunk` when it
    /// lies there (and may thus be borrowed).
    #[inline(always)]
    fn line_complete<F: FnMut(SseEvent<'_>) -> ControlFlow<()>>(
        &mut self,
        mut line: &[u8],
        mut at: Option<usize>,
        chunk: &[u8],
        on_event: &mut F,
    ) -> ControlFlow<()> {
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
                at = at.map(|a| a + BOM.len());
            }
        }
        if line.is_empty() {
            return self.dispatch(chunk, on_event);
        }
        // Streams are almost all `data:` and `event:` lines: those are told apart without a
        // search for the colon or a comparison of the name.
        let (field, name_len) = if line.starts_with(b"data:") {
            (Field::Data, 4)
        } else if line.starts_with(b"event:") {
            (Field::Event, 5)
        } else {
            match memchr(b':', line) {
                Some(0) => return ControlFlow::Continue(()), // comment
                Some(colon) => (Field::named(&line[..colon]), colon),
                None => (Field::named(line), line.len()),
            }
        };
        // The value starts after the colon and one optional space.
        let value_at = match line.get(name_len + 1) {
            Some(b' ') => name_len + 2,
            _ => (name_len + 1).min(line.len()),
        };
        let value = &line[value_at..];
        match field {
            Field::Data => self.push_data(value, at.map(|a| a + value_at), chunk),
            Field::Event => {
                if value != self.event.as_bytes() {
                    set_lossy(&mut self.event, value);
                }
                self.has_event = true;
            }
            Field::Id if memchr(0, value).is_none() => {
                set_lossy(&mut self.id, value);
                self.has_id = true;
            }
            Field::Retry => {
                if let Some(ms) = parse_retry(value) {
                    self.retry = Some(ms);
                }
            }
            Field::Id | Field::Other => {}
        }
        ControlFlow::Continue(())
    }

    /// Appends one data line, borrowing it while it is the only one.
    #[inline]
    fn push_data(&mut self, value: &[u8], at: Option<usize>, chunk: &[u8]) {
        match (self.data_at, at) {
            (Data::None, Some(start)) => self.data_at = Data::Chunk(start, start + value.len()),
            (Data::None, None) => {
                self.data.extend_from_slice(value);
                self.data_at = Data::Owned;
            }
            (Data::Chunk(start, end), _) => {
                self.data.extend_from_slice(&chunk[start..end]);
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
                self.data_at = Data::Owned;
            }
            (Data::Owned, _) => {
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
    }

    /// Blank line: hands the pending event to `on_event` if it had data, and
    /// starts a new one either way.
    fn dispatch<F: FnMut(SseEvent<'_>) -> ControlFlow<()>>(
        &mut self,
        chunk: &[u8],
        on_event: &mut F,
    ) -> ControlFlow<()> {
        let data = match self.data_at {
            Data::None => None,
            Data::Chunk(start, end) => Some(lossy(&chunk[start..end])),
            Data::Owned => Some(lossy(&self.data)),
        };
        let flow = match data {
            Some(data) => on_event(SseEvent {
                event: if self.has_event { &self.event } else { "" },
                data,
                id: self.has_id.then_some(self.id.as_str()),
                retry: self.retry,
            }),
            None => ControlFlow::Continue(()),
        };
        self.has_event = false;
        self.data.clear();
        self.data_at = Data::None;
        self.id.clear();
        self.has_id = false;
        self.retry = None;
        flow
    }
}

/// UTF-8 decodes with U+FFFD replacement, validating with SIMD first: invalid input is rare,
/// and std's check is slower on the valid text of every event.
#[inline]
fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Replaces `dst` with the lossy decoding of `bytes`, keeping its capacity.
fn set_lossy(dst: &mut String, bytes: &[u8]) {
    dst.clear();
    dst.push_str(&lossy(bytes));
}

/// `retry` must be one or more ASCII digits; anything else is ignored.
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |ms, &d| {
        ms.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}
