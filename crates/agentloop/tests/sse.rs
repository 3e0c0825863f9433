//! Conformance, chunking-invariance and allocation tests for the SSE parser.

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;
use std::hint::black_box;

use agentloop::sse::{SseEvent, SseParser};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Allocation counting (per thread, so parallel tests do not interfere).

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc() {
    let tracking = TRACKING.try_with(Cell::get).unwrap_or(false);
    if tracking {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Number of allocations `f` performs on this thread.
fn count_allocs(f: impl FnOnce()) -> usize {
    ALLOCS.with(|n| n.set(0));
    TRACKING.with(|t| t.set(true));
    f();
    TRACKING.with(|t| t.set(false));
    ALLOCS.with(Cell::get)
}

// ---------------------------------------------------------------------------
// Helpers.

/// Owned form of an event: (event, data, id, retry).
type Ev = (String, String, Option<String>, Option<u64>);

fn own(e: SseEvent<'_>) -> Ev {
    (
        e.event.to_owned(),
        e.data.into_owned(),
        e.id.map(str::to_owned),
        e.retry,
    )
}

fn ev(event: &str, data: &str) -> Ev {
    (event.into(), data.into(), None, None)
}

fn ev_full(event: &str, data: &str, id: Option<&str>, retry: Option<u64>) -> Ev {
    (event.into(), data.into(), id.map(Into::into), retry)
}

/// Feeds `chunks` in order, then finishes the stream.
fn parse_chunks<C: AsRef<[u8]>>(chunks: &[C]) -> Vec<Ev> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c.as_ref(), |e| out.push(own(e)));
    }
    p.finish(|e| out.push(own(e)));
    out
}

/// Feeds `chunks` without finishing: only events completed by a blank line.
fn feed_only<C: AsRef<[u8]>>(chunks: &[C]) -> Vec<Ev> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c.as_ref(), |e| out.push(own(e)));
    }
    out
}

/// Feeds `chunks` with `feed_until`, breaking after the events `breaks` picks (cycling through
/// it), and feeding what each call left before the next chunk; then finishes the stream.
/// Checks that a call reads its whole chunk unless it broke, and stops right after the event
/// it broke on (so it hands out nothing after it).
fn parse_stopping<C: AsRef<[u8]>>(chunks: &[C], breaks: &[bool]) -> Vec<Ev> {
    use std::ops::ControlFlow;
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let mut picks = breaks.iter().copied().cycle();
    for c in chunks {
        let mut rest = c.as_ref();
        loop {
            let mut broke = false;
            let read = p.feed_until(rest, |e| {
                assert!(!broke, "an event was handed out after a break");
                out.push(own(e));
                broke = picks.next().unwrap_or(false);
                if broke {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            assert!(read <= rest.len());
            if !broke {
                assert_eq!(read, rest.len(), "stopped without a break");
            }
            rest = &rest[read..];
            if rest.is_empty() {
                break;
            }
        }
    }
    p.finish(|e| out.push(own(e)));
    out
}

/// `bytes` stopped after every event, and cut at `cuts` and stopped after the events `breaks`
/// picks, parse as `expected`.
fn stopping_parses_as(
    bytes: &[u8],
    cuts: &[prop::sample::Index],
    breaks: &[bool],
    expected: &[Ev],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(&parse_stopping(&[bytes], &[true]), expected);
    prop_assert_eq!(
        &parse_stopping(&split_at_points(bytes, cuts), breaks),
        expected
    );
    Ok(())
}

fn parse(input: impl AsRef<[u8]>) -> Vec<Ev> {
    parse_chunks(&[input])
}

fn parse_bytewise(input: &[u8]) -> Vec<Ev> {
    let chunks: Vec<&[u8]> = input.chunks(1).collect();
    parse_chunks(&chunks)
}

/// Splits `input` at the given (unsorted, possibly repeated) cut points.
fn split_at_points<'a>(input: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut last = 0;
    for p in points {
        chunks.push(&input[last..p]); // repeated points give empty chunks
        last = p;
    }
    chunks.push(&input[last..]);
    chunks
}

/// A deliberately naive, literal transcription of the WHATWG algorithm (decode
/// the whole stream, then split into lines), plus our lenient end of stream.
fn reference(input: &[u8]) -> Vec<Ev> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let text = String::from_utf8_lossy(input);
    let mut lines = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut cur));
            }
            '\n' => lines.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines.push(String::new()); // lenient: end of stream dispatches

    let mut out = Vec::new();
    let (mut event, mut data, mut id, mut retry) = (String::new(), String::new(), None, None);
    for line in lines {
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                out.push((event.clone(), data.clone(), id.clone(), retry));
            }
            (event, data, id, retry) = (String::new(), String::new(), None, None);
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (name, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_str(), ""),
        };
        match name {
            "event" => event = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                retry = Some(value.parse::<u64>().unwrap_or(u64::MAX));
            }
            _ => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Line endings.

#[test]
fn lf_line_endings() {
    assert_eq!(
        feed_only(&["data: a\n\ndata: b\n\n"]),
        [ev("", "a"), ev("", "b")]
    );
}

#[test]
fn crlf_line_endings() {
    assert_eq!(
        feed_only(&["event: x\r\ndata: a\r\n\r\ndata: b\r\n\r\n"]),
        [ev("x", "a"), ev("", "b")]
    );
}

#[test]
fn cr_line_endings() {
    assert_eq!(
        feed_only(&["event: x\rdata: a\r\rdata: b\r\r"]),
        [ev("x", "a"), ev("", "b")]
    );
}

#[test]
fn mixed_line_endings() {
    assert_eq!(
        feed_only(&["data: a\r\ndata: b\rdata: c\n\r\n"]),
        [ev("", "a\nb\nc")]
    );
}

#[test]
fn feed_until_stops_right_after_the_event_it_breaks_on() {
    use std::ops::ControlFlow;
    let chunk: &[u8] = b"data: a\n\nevent: x\r\ndata: b\r\n\r\n: note\ndata: c\n\ndata: d";
    let mut p = SseParser::new();
    let mut rest = chunk;
    let mut got = Vec::new();
    let mut left = Vec::new();
    while !rest.is_empty() {
        let read = p.feed_until(rest, |e| {
            got.push(own(e));
            ControlFlow::Break(())
        });
        rest = &rest[read..];
        left.push(String::from_utf8_lossy(rest).into_owned());
    }
    assert_eq!(got, [ev("", "a"), ev("x", "b"), ev("", "c")]);
    // The CRLF after the blank line is read with it; the unterminated last line is held.
    assert_eq!(
        left,
        [
            "event: x\r\ndata: b\r\n\r\n: note\ndata: c\n\ndata: d",
            ": note\ndata: c\n\ndata: d",
            "data: d",
            "",
        ]
    );
    assert_eq!(p.buffered_len(), "data: d".len());
    let mut last = Vec::new();
    p.finish(|e| last.push(own(e)));
    assert_eq!(last, [ev("", "d")]);
}

#[test]
fn crlf_split_across_chunks_is_one_line_end() {
    // A spurious empty line here would dispatch "a" early and then "b" alone.
    assert_eq!(
        feed_only(&["data: a\r", "\ndata: b\r", "\n\r", "\n"]),
        [ev("", "a\nb")]
    );
}

#[test]
fn cr_at_chunk_end_completes_line_immediately() {
    let mut p = SseParser::new();
    let mut n = 0;
    p.feed(b"data: a\n\r", |_| n += 1);
    assert_eq!(n, 1, "CR is a line end without waiting for the next chunk");
    assert_eq!(p.buffered_len(), 0);
}

#[test]
fn lone_cr_followed_by_other_bytes_is_line_end() {
    assert_eq!(
        feed_only(&["data: a\r", "data: b\r", "\r"]),
        [ev("", "a\nb")]
    );
    assert_eq!(feed_only(&["data: a\rdata: b\r\r"]), [ev("", "a\nb")]);
}

#[test]
fn double_cr_then_lf_is_two_line_ends() {
    // CR, then CRLF: a data line followed by a blank line.
    assert_eq!(feed_only(&["data: a\r", "\r\n"]), [ev("", "a")]);
    assert_eq!(feed_only(&["data: a\r\r", "\n"]), [ev("", "a")]);
}

#[test]
fn empty_chunks_are_harmless() {
    assert_eq!(
        feed_only(&["", "data: a\r", "", "", "\n", "", "\n", ""]),
        [ev("", "a")]
    );
}

// ---------------------------------------------------------------------------
// BOM.

#[test]
fn bom_stripped_at_stream_start() {
    assert_eq!(parse(b"\xEF\xBB\xBFevent: e\ndata: a\n\n"), [ev("e", "a")]);
    // Without stripping, the first field name would be "\u{FEFF}data".
    assert_eq!(parse(b"\xEF\xBB\xBFdata: a\n\n"), [ev("", "a")]);
}

#[test]
fn bom_split_across_chunks() {
    assert_eq!(
        parse_chunks(&[&b"\xEF"[..], b"\xBB", b"\xBFdata: a\n\n"]),
        [ev("", "a")]
    );
}

#[test]
fn only_one_bom_stripped() {
    // The second BOM is part of the field name, so the field is unknown.
    assert_eq!(parse(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"), []);
}

#[test]
fn bom_not_stripped_after_stream_start() {
    assert_eq!(
        parse(b"data: a\n\n\xEF\xBB\xBFdata: b\n\ndata: c\n\n"),
        [ev("", "a"), ev("", "c")]
    );
}

#[test]
fn partial_bom_is_ordinary_bytes() {
    assert_eq!(
        parse_chunks(&[&b"\xEF\xBB"[..], b"data: a\n\n"]),
        [] // "\u{FFFD}data" is an unknown field
    );
}

// ---------------------------------------------------------------------------
// Dispatch and fields.

#[test]
fn blank_line_without_data_resets_event_name_and_fields() {
    assert_eq!(
        feed_only(&["event: ping\nid: 7\nretry: 10\n\ndata: a\n\n"]),
        [ev("", "a")]
    );
}

#[test]
fn consecutive_blank_lines_dispatch_once() {
    assert_eq!(feed_only(&["\n\n\ndata: a\n\n\n\n"]), [ev("", "a")]);
}

#[test]
fn comment_lines_are_ignored() {
    assert_eq!(
        feed_only(&[": hello\ndata: a\n:data: no\n:\ndata: b\n\n"]),
        [ev("", "a\nb")]
    );
}

#[test]
fn comment_only_block_dispatches_nothing() {
    assert_eq!(parse(": keep-alive\n\n: keep-alive\n\n"), []);
}

#[test]
fn exactly_one_leading_space_is_stripped() {
    assert_eq!(
        feed_only(&["event:  two\ndata:  a \ndata:b\n\n"]),
        [ev(" two", " a \nb")]
    );
}

#[test]
fn only_first_colon_separates() {
    assert_eq!(feed_only(&["data: a: b:c\n\n"]), [ev("", "a: b:c")]);
}

#[test]
fn line_without_colon_is_field_name_with_empty_value() {
    assert_eq!(feed_only(&["data\n\n"]), [ev("", "")]);
    assert_eq!(feed_only(&["data\ndata\n\n"]), [ev("", "\n")]);
    assert_eq!(feed_only(&["event: x\nevent\ndata: a\n\n"]), [ev("", "a")]);
}

#[test]
fn multiple_data_lines_joined_with_newline() {
    assert_eq!(
        feed_only(&["data: a\ndata: b\ndata: c\n\n"]),
        [ev("", "a\nb\nc")]
    );
}

#[test]
fn empty_data_lines_contribute_empty_lines() {
    assert_eq!(feed_only(&["data:\ndata:\n\n"]), [ev("", "\n")]);
    assert_eq!(feed_only(&["data:\n\n"]), [ev("", "")]);
    assert_eq!(feed_only(&["data: \n\n"]), [ev("", "")]);
    assert_eq!(feed_only(&["data:\ndata: a\n\n"]), [ev("", "\na")]);
}

#[test]
fn event_field_sets_name_last_wins() {
    assert_eq!(
        feed_only(&["event: a\nevent: b\ndata: x\n\n"]),
        [ev("b", "x")]
    );
    assert_eq!(feed_only(&["event:\ndata: x\n\n"]), [ev("", "x")]);
}

/// The parser keeps the last name to skip copying a repeated one; that must never leak into
/// an event that names itself differently or not at all.
#[test]
fn event_names_are_per_event_when_repeated() {
    let stream = b"event: a\ndata: 1\n\ndata: 2\n\nevent: a\ndata: 3\n\n\
                  event: b\nevent: a\ndata: 4\n\nevent: a\nevent: b\ndata: 5\n\n\
                  event: b\nevent:\ndata: 6\n\nevent: \xff\ndata: 7\n\nevent: \xff\ndata: 8\n\n";
    let expected = [
        ev("a", "1"),
        ev("", "2"),
        ev("a", "3"),
        ev("a", "4"),
        ev("b", "5"),
        ev("", "6"),
        ev("\u{fffd}", "7"),
        ev("\u{fffd}", "8"),
    ];
    assert_eq!(feed_only(&[stream]), expected);
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(feed_only(&bytes), expected);
}

#[test]
fn id_field_is_per_event() {
    assert_eq!(
        feed_only(&["id: 1\ndata: a\n\ndata: b\n\nid:\ndata: c\n\n"]),
        [
            ev_full("", "a", Some("1"), None),
            ev_full("", "b", None, None),
            ev_full("", "c", Some(""), None),
        ]
    );
}

#[test]
fn id_with_nul_is_ignored() {
    assert_eq!(
        feed_only(&["id: 1\nid: a\0b\ndata: x\n\nid: \0\ndata: y\n\n"]),
        [
            ev_full("", "x", Some("1"), None),
            ev_full("", "y", None, None)
        ]
    );
}

#[test]
fn retry_requires_ascii_digits() {
    assert_eq!(
        feed_only(&[
            "retry: 3000\ndata: a\n\n",
            "retry: 12a\ndata: b\n\n",
            "retry:\ndata: c\n\n",
            "retry: -1\ndata: d\n\n",
            "retry: 5\nretry: x\ndata: e\n\n",
            "retry: 99999999999999999999999\ndata: f\n\n",
            "retry:  1\ndata: g\n\n",
        ]),
        [
            ev_full("", "a", None, Some(3000)),
            ev("", "b"),
            ev("", "c"),
            ev("", "d"),
            ev_full("", "e", None, Some(5)),
            ev_full("", "f", None, Some(u64::MAX)),
            ev("", "g"), // " 1" after stripping one space: not all digits
        ]
    );
}

#[test]
fn retry_only_block_is_not_dispatched() {
    assert_eq!(parse("retry: 1000\n\ndata: a\n\n"), [ev("", "a")]);
}

#[test]
fn unknown_fields_are_ignored() {
    assert_eq!(
        feed_only(&["foo: bar\ndata: a\nx\n: c\nDATA: no\nEvent: no\n\n"]),
        [ev("", "a")]
    );
}

#[test]
fn all_fields_together() {
    assert_eq!(
        feed_only(&["event: update\nid: 42\nretry: 250\ndata: {\"a\":1}\n\n"]),
        [ev_full("update", "{\"a\":1}", Some("42"), Some(250))]
    );
}

// ---------------------------------------------------------------------------
// Events of one `data:` line, alone in their chunk or many to a chunk (token streams send
// nearly every event so).

#[test]
fn chunk_per_event_reads_as_line_by_line() {
    let chunks = [
        "data: {\"a\":1}\n\n",
        "data:  two spaces\n\n",
        "data: \n\n",
        "data: x\n\n",
    ];
    assert_eq!(
        feed_only(&chunks),
        [
            ev("", "{\"a\":1}"),
            ev("", " two spaces"),
            ev("", ""),
            ev("", "x")
        ]
    );
}

#[test]
fn chunk_per_event_keeps_fields_from_earlier_chunks() {
    assert_eq!(
        feed_only(&[
            "data: a\n\n",
            "event: named\n",
            "data: b\n\n",
            "data: c\n\n"
        ]),
        [ev("", "a"), ev("named", "b"), ev("", "c")]
    );
    assert_eq!(
        feed_only(&[
            "data: a\n\n",
            "id: 7\nretry: 30\n",
            "data: b\n\n",
            "data: c\n\n"
        ]),
        [
            ev("", "a"),
            ev_full("", "b", Some("7"), Some(30)),
            ev("", "c")
        ]
    );
    // A data line already pending joins the chunk's.
    assert_eq!(
        feed_only(&["data: a\n\n", "data: b\n", "data: c\n\n"]),
        [ev("", "a"), ev("", "b\nc")]
    );
    // An unfinished line goes on in the chunk: `dadata: b` names an unknown field.
    assert_eq!(
        feed_only(&["data: a\n\n", "da", "data: b\n\n"]),
        [ev("", "a")]
    );
}

#[test]
fn chunk_per_event_with_more_lines_is_read_line_by_line() {
    assert_eq!(
        feed_only(&["data: a\n\n", "data: b\nevent: late\n\n"]),
        [ev("", "a"), ev("late", "b")]
    );
    assert_eq!(
        feed_only(&["data: a\n\n", "data: b\r\n\n", "data: c\rdata: d\n\n"]),
        [ev("", "a"), ev("", "b"), ev("", "c\nd")]
    );
    // A CR that ended the previous chunk swallows nothing here: the chunk starts with `d`.
    assert_eq!(
        feed_only(&["data: a\r\r", "data: b\n\n"]),
        [ev("", "a"), ev("", "b")]
    );
}

#[test]
fn named_events_and_many_events_per_chunk_read_as_line_by_line() {
    let stream = "event: ping\ndata: {}\n\nevent: delta\ndata: a\n\ndata: b\n\n\
                  id: 1\ndata: c\n\nretry: 5\ndata: d\n\nevent: e\nid: 2\ndata: f\n\n";
    let expected = [
        ev("ping", "{}"),
        ev("delta", "a"),
        ev("", "b"),
        ev_full("", "c", Some("1"), None),
        ev_full("", "d", None, Some(5)),
        ev_full("e", "f", Some("2"), None),
    ];
    assert_eq!(feed_only(&[stream]), expected);
    let per_event: Vec<String> = stream.split_inclusive("\n\n").map(str::to_owned).collect();
    assert_eq!(per_event.len(), expected.len());
    assert_eq!(feed_only(&per_event), expected);
}

#[test]
fn chunk_per_event_at_stream_start_strips_the_bom() {
    assert_eq!(
        feed_only(&[&b"\xEF\xBB\xBFdata: a\n\n"[..], b"data: \xFFb\n\n"]),
        [ev("", "a"), ev("", "\u{FFFD}b")]
    );
}

// ---------------------------------------------------------------------------
// UTF-8.

#[test]
fn invalid_utf8_is_replaced() {
    assert_eq!(
        feed_only(&[&b"event: a\xFFb\nid: \xC0\ndata: x\xE2\x82\ndata: y\n\n"[..]]),
        [ev_full(
            "a\u{FFFD}b",
            "x\u{FFFD}\ny",
            Some("\u{FFFD}"),
            None
        )]
    );
}

#[test]
fn multibyte_char_split_across_chunks() {
    let euro = "data: 1€2\n\n".as_bytes();
    for cut in 0..=euro.len() {
        assert_eq!(
            feed_only(&[&euro[..cut], &euro[cut..]]),
            [ev("", "1€2")],
            "cut at {cut}"
        );
    }
}

#[test]
fn non_utf8_field_names_are_unknown() {
    assert_eq!(parse(&b"d\xFFata: a\n\ndata: b\n\n"[..]), [ev("", "b")]);
}

// ---------------------------------------------------------------------------
// End of stream.

#[test]
fn finish_dispatches_event_without_trailing_blank_line() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.feed(b"event: e\ndata: a\n", |e| out.push(own(e)));
    assert!(out.is_empty());
    p.finish(|e| out.push(own(e)));
    assert_eq!(out, [ev("e", "a")]);
}

#[test]
fn finish_treats_unterminated_last_line_as_complete() {
    assert_eq!(parse("data: a\n\ndata: b"), [ev("", "a"), ev("", "b")]);
    assert_eq!(parse("data: a\ndata: b"), [ev("", "a\nb")]);
    assert_eq!(parse("data: a\r"), [ev("", "a")]);
}

#[test]
fn finish_discards_block_without_data() {
    assert_eq!(parse("data: a\n\nevent: e\nid: 3"), [ev("", "a")]);
    assert_eq!(parse(": comment"), []);
    assert_eq!(parse(""), []);
}

#[test]
fn finish_resets_for_a_new_stream() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.feed(b"event: e\nid: 1\ndata: a\r", |e| out.push(own(e)));
    p.finish(|e| out.push(own(e)));
    // A fresh stream: BOM stripped again, the leading LF is a (blank) line
    // of its own, and no field of the previous stream leaks in.
    p.feed(b"\xEF\xBB\xBF\ndata: b\n\n", |e| out.push(own(e)));
    p.finish(|e| out.push(own(e)));
    assert_eq!(out, [ev_full("e", "a", Some("1"), None), ev("", "b")]);
    assert_eq!(p.buffered_len(), 0);
}

#[test]
fn finish_twice_is_a_no_op() {
    let mut p = SseParser::new();
    let mut n = 0;
    p.feed(b"data: a", |_| n += 1);
    p.finish(|_| n += 1);
    p.finish(|_| n += 1);
    assert_eq!(n, 1);
}

#[test]
fn buffered_len_counts_incomplete_line() {
    let mut p = SseParser::new();
    p.feed(b"data: abc", |_| {});
    assert_eq!(p.buffered_len(), 9);
    p.feed(b"def", |_| {});
    assert_eq!(p.buffered_len(), 12);
    p.feed(b"\n", |_| {});
    assert_eq!(p.buffered_len(), 0);
    p.feed(b"\ndata: x", |_| {});
    assert_eq!(p.buffered_len(), 7);
}

// ---------------------------------------------------------------------------
// Borrowing and allocation.

#[test]
fn single_line_event_in_one_chunk_is_borrowed_from_chunk() {
    let chunk = b"event: e\ndata: hello\n\n";
    let range = chunk.as_ptr_range();
    let mut seen = 0;
    let mut p = SseParser::new();
    p.feed(chunk, |e| {
        seen += 1;
        assert_eq!(e.data, "hello");
        match e.data {
            Cow::Borrowed(s) => assert!(range.contains(&s.as_ptr()), "not borrowed from chunk"),
            Cow::Owned(_) => panic!("copied"),
        }
    });
    assert_eq!(seen, 1);
}

#[test]
fn event_spanning_chunks_is_still_correct() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.feed(b"data: hel", |e| out.push(own(e)));
    p.feed(b"lo\ndata: wor", |e| out.push(own(e)));
    p.feed(b"ld\n", |e| out.push(own(e)));
    p.feed(b"\ndata: next\n\n", |e| out.push(own(e)));
    assert_eq!(out, [ev("", "hello\nworld"), ev("", "next")]);
}

#[test]
fn data_line_completed_then_chunk_ends_is_kept() {
    // The data line is borrowed from chunk 1 and must survive its end.
    assert_eq!(feed_only(&["data: a\n", "\n"]), [ev("", "a")]);
    assert_eq!(
        feed_only(&["data: a\n", "data: b\n", "\n"]),
        [ev("", "a\nb")]
    );
}

#[test]
fn allocation_counter_sees_allocations() {
    let allocs = count_allocs(|| drop(black_box(vec![1u8; 8])));
    assert!(allocs > 0, "the steady-state test below would be vacuous");
}

#[test]
fn no_allocation_per_event_in_steady_state() {
    let one_chunk =
        "event: delta\nid: 17\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let split = [
        "event: del",
        "ta\nid: 1",
        "7\ndata: {\"choices\":[{\"de",
        "lta\":{}}]}\n",
        "\n",
    ];
    let multi = "data: a\ndata: bb\ndata: ccc\n\n";
    let mut p = SseParser::new();
    let mut total = 0;
    let mut run = |p: &mut SseParser| {
        p.feed(one_chunk.as_bytes(), |e| total += e.data.len());
        for s in split {
            p.feed(s.as_bytes(), |e| total += e.data.len());
        }
        p.feed(multi.as_bytes(), |e| total += e.data.len());
    };
    run(&mut p); // warm up the reusable buffers
    let allocs = count_allocs(|| {
        for _ in 0..100 {
            run(&mut p);
        }
    });
    assert_eq!(allocs, 0);
    assert!(total > 0);
}

// ---------------------------------------------------------------------------
// Real-world shaped streams (excerpts of recorded provider streams).

const OPENAI: &str = concat!(
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1727346168,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n",
    "\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1727346168,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"I'm\"},\"logprobs\":null,\"finish_reason\":null}]}\n",
    "\n",
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1727346168,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n",
    "\n",
    "data: [DONE]\n",
    "\n",
);

#[test]
fn openai_stream_ending_in_done() {
    for out in [parse(OPENAI), parse_bytewise(OPENAI.as_bytes())] {
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(|e| e.0.is_empty() && e.2.is_none()));
        assert!(out[1].1.contains(r#""content":"I'm""#));
        assert!(out[0].1.starts_with("{\"id\":\"chatcmpl-1\""));
        assert_eq!(out[3], ev("", "[DONE]"));
    }
}

const ANTHROPIC: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-3-haiku-20240307\",\"stop_reason\":null,\"usage\":{\"input_tokens\":17,\"output_tokens\":1}}}\n",
    "\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n",
    "\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n",
    "\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, World!\"}}\n",
    "\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n",
    "\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":227}}\n",
    "\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n",
    "\n",
);

#[test]
fn anthropic_stream_with_event_names() {
    let names = [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ];
    for out in [parse(ANTHROPIC), parse_bytewise(ANTHROPIC.as_bytes())] {
        let got: Vec<&str> = out.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(got, names);
        assert_eq!(out[6].1, r#"{"type":"message_stop"}"#);
        assert_eq!(out[2].1, r#"{"type": "ping"}"#);
    }
}

#[test]
fn openrouter_processing_comments() {
    let stream = concat!(
        ": OPENROUTER PROCESSING\n\n",
        ": OPENROUTER PROCESSING\n\n",
        "data: {\"id\":\"gen-1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        ": OPENROUTER PROCESSING\n\n",
        "data: {\"id\":\"gen-1\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    );
    let want = [
        ev(
            "",
            r#"{"id":"gen-1","choices":[{"delta":{"content":"Hi"}}]}"#,
        ),
        ev(
            "",
            r#"{"id":"gen-1","choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ),
        ev("", "[DONE]"),
    ];
    assert_eq!(parse(stream), want);
    assert_eq!(parse_bytewise(stream.as_bytes()), want);
}

#[test]
fn final_event_without_blank_line_dispatched_by_finish() {
    let stream = "data: {\"a\":1}\n\ndata: [DONE]\n";
    assert_eq!(feed_only(&[stream]), [ev("", "{\"a\":1}")]);
    assert_eq!(parse(stream), [ev("", "{\"a\":1}"), ev("", "[DONE]")]);
}

#[test]
fn crlf_provider_stream() {
    let stream = OPENAI.replace('\n', "\r\n");
    assert_eq!(parse(&stream), parse(OPENAI));
    assert_eq!(parse_bytewise(stream.as_bytes()), parse(OPENAI));
}

// ---------------------------------------------------------------------------
// Properties.

/// One generated line of a block.
#[derive(Debug, Clone)]
enum GenLine {
    Data(String),
    Event(String),
    Id(String),
    Retry(String),
    Comment(String),
    Unknown(String),
}

/// A generated stream: blocks of lines, how each line is spelled and ended.
#[derive(Debug, Clone)]
struct GenStream {
    bom: bool,
    blocks: Vec<Vec<(GenLine, bool)>>,
    /// Whether the last block gets its terminating blank line.
    terminated: bool,
    /// Terminator choice per emitted line (cycled).
    terminators: Vec<u8>,
}

fn value() -> impl Strategy<Value = String> {
    "[a-z0-9 :é€😀\t\u{0}{}\"]{0,12}"
}

fn gen_line() -> impl Strategy<Value = GenLine> {
    prop_oneof![
        4 => value().prop_map(GenLine::Data),
        1 => "[a-z_ ]{0,12}".prop_map(GenLine::Event),
        1 => "[a-z0-9 :\u{0}-]{0,8}".prop_map(GenLine::Id),
        1 => prop_oneof!["[0-9]{1,6}", "[0-9a ]{0,4}"].prop_map(GenLine::Retry),
        1 => value().prop_map(GenLine::Comment),
        1 => value().prop_map(GenLine::Unknown),
    ]
}

fn gen_stream() -> impl Strategy<Value = GenStream> {
    (
        any::<bool>(),
        prop::collection::vec(
            prop::collection::vec((gen_line(), any::<bool>()), 0..6),
            0..8,
        ),
        any::<bool>(),
        prop::collection::vec(0u8..3, 1..16),
    )
        .prop_map(|(bom, blocks, terminated, terminators)| GenStream {
            bom,
            blocks,
            terminated,
            terminators,
        })
}

impl GenStream {
    fn lines(&self) -> Vec<String> {
        let field = |name: &str, v: &str, spaced: bool| {
            // A value that itself starts with a space needs the separator space.
            let sep = if spaced || v.starts_with(' ') {
                ": "
            } else {
                ":"
            };
            if v.is_empty() && !spaced {
                name.to_owned() // no colon at all
            } else {
                format!("{name}{sep}{v}")
            }
        };
        let mut lines = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            for (line, spaced) in block {
                lines.push(match line {
                    GenLine::Data(v) => field("data", v, *spaced),
                    GenLine::Event(v) => field("event", v, *spaced),
                    GenLine::Id(v) => field("id", v, *spaced),
                    GenLine::Retry(v) => field("retry", v, *spaced),
                    GenLine::Comment(v) => format!(":{v}"),
                    GenLine::Unknown(v) => field("x-unknown", v, *spaced),
                });
            }
            if i + 1 < self.blocks.len() || self.terminated {
                lines.push(String::new());
            }
        }
        lines
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.bom {
            out.extend_from_slice(b"\xEF\xBB\xBF");
        }
        let mut prev_cr = false;
        for (i, line) in self.lines().iter().enumerate() {
            out.extend_from_slice(line.as_bytes());
            let mut term: &[u8] = match self.terminators[i % self.terminators.len()] {
                0 => b"\n",
                1 => b"\r\n",
                _ => b"\r",
            };
            // CR + (empty line ended by LF) would read as one CRLF.
            if prev_cr && line.is_empty() && term == b"\n" {
                term = b"\r\n";
            }
            out.extend_from_slice(term);
            prev_cr = term == b"\r";
        }
        out
    }

    fn expected(&self) -> Vec<Ev> {
        let mut out = Vec::new();
        for block in &self.blocks {
            let (mut event, mut data, mut id, mut retry) = (String::new(), Vec::new(), None, None);
            for (line, _) in block {
                match line {
                    GenLine::Data(v) => data.push(v.as_str()),
                    GenLine::Event(v) => event = v.clone(),
                    GenLine::Id(v) if !v.contains('\0') => id = Some(v.clone()),
                    GenLine::Retry(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                        retry = Some(v.parse::<u64>().unwrap())
                    }
                    _ => {}
                }
            }
            if !data.is_empty() {
                out.push((event, data.join("\n"), id, retry));
            }
        }
        out
    }
}

fn arbitrary_sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: &[u8] = b"datevnirymx: \r\n\r\n\0\xEF\xBB\xBF\xE2\x82\xAC\xFF";
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        prop::collection::vec(prop::sample::select(alphabet.to_vec()), 0..256),
        // Well-formed-looking lines glued with random terminators.
        prop::collection::vec(
            (
                prop::sample::select(
                    &[
                        "data", "data:", "data: ", "event: ", "id:", "retry: ", ":", ""
                    ][..]
                ),
                "[a-z0-9\u{0} é]{0,6}",
                prop::sample::select(&["\n", "\r", "\r\n", "\n\n", "\r\r"][..]),
            ),
            0..24,
        )
        .prop_map(|parts| {
            parts
                .into_iter()
                .flat_map(|(a, b, c)| [a.to_owned(), b, c.to_owned()])
                .collect::<String>()
                .into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_streams_parse_identically_under_any_split(
        stream in gen_stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let bytes = stream.bytes();
        let expected = stream.expected();
        let whole = parse(&bytes);
        prop_assert_eq!(&whole, &expected);
        prop_assert_eq!(&parse_chunks(&split_at_points(&bytes, &cuts)), &expected);
        prop_assert_eq!(&parse_bytewise(&bytes), &expected);
        prop_assert_eq!(&reference(&bytes), &expected);
    }

    /// Cut after every blank line, so most chunks are exactly one event, as token streams
    /// send them.
    #[test]
    fn generated_streams_parse_identically_one_event_per_chunk(stream in gen_stream()) {
        let bytes = stream.bytes();
        let mut chunks = Vec::new();
        let mut rest = &bytes[..];
        while let Some(at) = memchr::memmem::find(rest, b"\n\n") {
            let (chunk, after) = rest.split_at(at + 2);
            chunks.push(chunk);
            rest = after;
        }
        chunks.push(rest);
        prop_assert_eq!(&parse_chunks(&chunks), &stream.expected());
    }

    /// Stopping after any events and feeding the rest later changes nothing: the reader that
    /// decodes a chunk an event at a time relies on it.
    #[test]
    fn stopping_after_events_and_feeding_the_rest_parses_identically(
        stream in gen_stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        breaks in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        stopping_parses_as(&stream.bytes(), &cuts, &breaks, &stream.expected())?;
    }

    #[test]
    fn arbitrary_bytes_stopping_after_events_match_whole_parse(
        bytes in arbitrary_sse_bytes(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        breaks in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        stopping_parses_as(&bytes, &cuts, &breaks, &parse(&bytes))?;
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_match_reference(
        bytes in arbitrary_sse_bytes(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let whole = parse(&bytes);
        prop_assert_eq!(&parse_chunks(&split_at_points(&bytes, &cuts)), &whole);
        prop_assert_eq!(&parse_bytewise(&bytes), &whole);
        prop_assert_eq!(&reference(&bytes), &whole);
    }

    #[test]
    fn buffered_len_is_bounded_by_last_incomplete_line(
        bytes in arbitrary_sse_bytes(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut p = SseParser::new();
        let mut fed = 0;
        for chunk in split_at_points(&bytes, &cuts) {
            p.feed(chunk, |_| {});
            fed += chunk.len();
            let tail = bytes[..fed].iter().rev().take_while(|&&b| b != b'\n' && b != b'\r').count();
            prop_assert_eq!(p.buffered_len(), tail);
        }
    }
}
