//! A small JSON scanner for the providers' hand-written readers (each provider's
//! `decode::fast`, and `openai::response::fast`).
//!
//! It reads exactly the JSON that serde_json reads, with one difference: wherever serde_json
//! would do more than check and skip (decode an escaped key, range-check a number, recurse
//! deeply), the scanner answers `None` and its caller falls back to serde. So it never accepts
//! what serde_json rejects, and it never reads a value differently.

use std::borrow::Cow;

#[cfg(test)]
pub(super) mod strategies;

/// Deeper than this, the scanner gives up (serde_json's own limit is 128).
const MAX_DEPTH: u8 = 64;

const ONES: u64 = u64::from_le_bytes([1; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// Marks, in each byte's high bit, the bytes of `word` that end a run of string characters:
/// `"`, `\\` or a control character. The lowest marked byte is exact (borrows only ever mark
/// bytes above a real match).
#[inline]
fn stop_marks(word: u64) -> u64 {
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let marks = (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash)
        | (word.wrapping_sub(ONES * 0x20) & !word);
    marks & HIGHS
}

const fn is_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The first byte at or after `from` that ends a run of string characters, eight bytes at a
/// time.
#[inline]
fn next_stop(bytes: &[u8], mut from: usize) -> Option<usize> {
    while let Some(word) = bytes.get(from..from + 8) {
        let marks = stop_marks(u64::from_le_bytes(word.try_into().ok()?));
        if marks != 0 {
            return Some(from + (marks.trailing_zeros() / 8) as usize);
        }
        from += 8;
    }
    let tail = bytes.get(from..)?;
    tail.iter().position(|&b| is_stop(b)).map(|at| from + at)
}

/// The index of the closing quote of a string whose body starts at `from`, each escape checked
/// as serde_json checks it.
fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        i = next_stop(bytes, i)?;
        match *bytes.get(i)? {
            b'"' => return Some(i),
            b'\\' => {
                let kind = *bytes.get(i + 1)?;
                i += if SHORT_ESCAPES[usize::from(kind)] != 0 {
                    2
                } else if kind == b'u' {
                    hex4(bytes.get(i + 2..i + 6)?)?;
                    6
                } else {
                    return None;
                };
            }
            // A control character, which JSON forbids inside strings.
            _ => return None,
        }
    }
}

/// Below this many bytes left in the text, a decoded string takes them all as capacity instead
/// of being decoded into the scanner's scratch buffer and copied out at its exact size.
const EXACT_BELOW: usize = 256;

/// Decodes a string body that starts at `start` and whose first stop byte (not its closing
/// quote) is at `stop`, as serde_json decodes it: the text and the index of the closing quote.
/// `None` for anything serde_json rejects or that decodes to a lone surrogate (both left to
/// serde).
///
/// Decoding only shrinks text. In a stream's event the string is most of what is left, so the
/// rest of the text bounds its length closely and the string is decoded in place. In a longer
/// text (a whole document) it is decoded into `scratch`, which keeps its room from string to
/// string, and copied out: one pass less than finding the string's end first to size it.
fn decode_escaped(
    bytes: &[u8],
    start: usize,
    stop: usize,
    scratch: &mut Vec<u8>,
) -> Option<(String, usize)> {
    let rest = bytes.len().saturating_sub(start);
    if rest <= EXACT_BELOW {
        let mut out = Vec::with_capacity(rest);
        let end = decode_into(bytes, start, stop, &mut out)?;
        return String::from_utf8(out).ok().map(|text| (text, end));
    }
    scratch.clear();
    let end = decode_into(bytes, start, stop, scratch)?;
    let text = std::str::from_utf8(scratch).ok()?;
    Some((text.to_owned(), end))
}

/// [`decode_escaped`]'s pass: appends the decoded body to `out`, checking escapes as it goes,
/// and returns the index of the closing quote.
///
/// The bytes between escapes are copied eight at a time as they are searched, so a string
/// dense with escapes (tool arguments are JSON inside a JSON string) costs little per escape.
/// A word is copied whole and its bytes from the stop on are dropped again: a fixed-size copy
/// is a single store. So `out` needs room for eight bytes more than the decoded text, or for
/// the whole text left from `start`.
#[inline]
fn decode_into(bytes: &[u8], start: usize, stop: usize, out: &mut Vec<u8>) -> Option<usize> {
    out.extend_from_slice(bytes.get(start..stop)?);
    let mut at = stop;
    loop {
        match *bytes.get(at)? {
            b'"' => return Some(at),
            b'\\' => at = push_escape(bytes, at, out)?,
            // A control character, which JSON forbids inside strings.
            _ => return None,
        }
        loop {
            let Some(word) = bytes.get(at..at + 8) else {
                let tail = bytes.get(at..)?;
                let len = tail.iter().position(|&b| is_stop(b))?;
                out.extend_from_slice(tail.get(..len)?);
                at += len;
                break;
            };
            let word: [u8; 8] = word.try_into().ok()?;
            out.extend_from_slice(&word);
            let marks = stop_marks(u64::from_le_bytes(word));
            if marks != 0 {
                let len = (marks.trailing_zeros() / 8) as usize;
                out.truncate(out.len() - (8 - len));
                at += len;
                break;
            }
            at += 8;
        }
    }
}

/// What each one-character escape (`\n`, `\"`, ...) decodes to, by the byte after the
/// backslash; 0 for `u` and for bytes that are no escape. A table rather than a `match`: strings
/// mix `\"` and `\\` unpredictably, and a jump table mispredicts on them.
const SHORT_ESCAPES: [u8; 256] = {
    let mut table = [0; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// Decodes the escape at `at` (a backslash) into `out`; the index after it.
#[inline]
fn push_escape(bytes: &[u8], at: usize, out: &mut Vec<u8>) -> Option<usize> {
    let kind = *bytes.get(at + 1)?;
    let byte = SHORT_ESCAPES[usize::from(kind)];
    if byte != 0 {
        out.push(byte);
        return Some(at + 2);
    }
    if kind != b'u' {
        return None;
    }
    let (code, used) = match hex4(bytes.get(at + 2..at + 6)?)? {
        lead @ 0xD800..=0xDBFF => {
            let trail = bytes.get(at + 6..at + 12)?.strip_prefix(b"\\u")?;
            let trail = hex4(trail)?;
            if !(0xDC00..=0xDFFF).contains(&trail) {
                return None;
            }
            (0x10000 + ((lead - 0xD800) << 10) + (trail - 0xDC00), 12)
        }
        code => (code, 6),
    };
    let mut buf = [0; 4];
    out.extend_from_slice(char::from_u32(code)?.encode_utf8(&mut buf).as_bytes());
    Some(at + used)
}

/// Four hex digits.
fn hex4(digits: &[u8]) -> Option<u32> {
    if digits.len() != 4 {
        return None;
    }
    digits.iter().try_fold(0, |code, &b| {
        let digit = char::from(b).to_digit(16)?;
        Some(code << 4 | digit)
    })
}

/// The JSON string whose body starts at `start` in `bytes` (just after its opening quote),
/// for readers of bytes not yet known to be UTF-8: its text, checked as UTF-8 and decoded as
/// serde_json decodes it, and the index after its closing quote. `None` for anything
/// serde_json rejects or that decodes to a lone surrogate (both left to serde). Built with its
/// one caller, Bedrock's reader.
#[cfg(feature = "bedrock")]
#[inline]
pub(super) fn string_body(bytes: &[u8], start: usize) -> Option<(Cow<'_, str>, usize)> {
    let stop = next_stop(bytes, start)?;
    if bytes.get(stop) == Some(&b'"') {
        let text = std::str::from_utf8(bytes.get(start..stop)?).ok()?;
        return Some((Cow::Borrowed(text), stop + 1));
    }
    let (text, end) = decode_escaped(bytes, start, stop, &mut Vec::new())?;
    Some((Cow::Owned(text), end + 1))
}

/// JSON text a hand-written reader expects verbatim where a service always writes the same
/// bytes (keys, punctuation, spacing) between the values it reads: consumed whole by
/// [`Scanner::layout`] instead of token by token. Build it in a `const`, so a text that is not
/// whole tokens fails the build.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    text: &'static str,
    /// How many more objects and arrays the text opens than it closes (negative: closes).
    depth: i8,
}

impl Layout {
    /// The layout of `text`, whole JSON tokens that do not end inside a string.
    pub const fn new(text: &'static str) -> Self {
        let bytes = text.as_bytes();
        let mut depth: i8 = 0;
        let mut in_string = false;
        let mut i = 0;
        while i < bytes.len() {
            match (in_string, bytes[i]) {
                (true, b'\\') => i += 1,
                (true, b'"') | (false, b'"') => in_string = !in_string,
                (false, b'{' | b'[') => depth += 1,
                (false, b'}' | b']') => depth -= 1,
                _ => {}
            }
            i += 1;
        }
        assert!(
            !in_string,
            "a layout ends between tokens, not inside a string"
        );
        Self { text, depth }
    }

    /// The text.
    #[cfg(test)]
    pub const fn text(&self) -> &'static str {
        self.text
    }
}

/// An object key as a service writes it, with its colon and the spacing after it
/// (`"index": `), for [`Scanner::object_body_in_order`]. Build it in a `const`, so a text that
/// is not a plain key fails the build.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key {
    text: &'static str,
    name: &'static str,
    /// The text's first eight bytes as one word: most keys looked for are not next, and one
    /// comparison of a word tells.
    head: u64,
}

impl Key {
    /// The key written as `text`: a quoted key without escapes, a colon, then spaces.
    pub const fn new(text: &'static str) -> Self {
        let bytes = text.as_bytes();
        assert!(
            !bytes.is_empty() && bytes[0] == b'"',
            "a key starts with a quote"
        );
        let mut end = 1;
        while end < bytes.len() && bytes[end] != b'"' {
            assert!(!is_stop(bytes[end]), "a key without escapes");
            end += 1;
        }
        assert!(
            end + 1 < bytes.len() && bytes[end + 1] == b':',
            "a colon after the key"
        );
        let mut i = end + 2;
        while i < bytes.len() {
            assert!(bytes[i] == b' ', "only spaces after the colon");
            i += 1;
        }
        assert!(bytes.len() >= 8, "a key's text has eight bytes or more");
        let (quoted, _) = bytes.split_at(end);
        let (_, name) = quoted.split_at(1);
        let Ok(name) = std::str::from_utf8(name) else {
            panic!("a key is text");
        };
        let head = u64::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]);
        Self { text, name, head }
    }

    /// Whether `rest` starts with this key's text.
    #[inline]
    fn starts(&self, rest: &[u8]) -> bool {
        word(rest, 0) == Some(self.head) && starts_with(rest, self.text.as_bytes())
    }
}

/// The eight bytes of `bytes` at `at`, as one word.
#[inline]
fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let word: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(word))
}

/// `rest.starts_with(text)`, a word at a time: the texts compared are a few words long, too
/// short for a call to `memcmp` to pay.
#[inline]
pub(super) fn starts_with(rest: &[u8], text: &[u8]) -> bool {
    let len = text.len();
    if len < 8 || rest.len() < len {
        return rest.starts_with(text);
    }
    let mut at = 0;
    while at + 8 < len {
        if word(rest, at) != word(text, at) {
            return false;
        }
        at += 8;
    }
    // The last word overlaps the one before when the length is not a multiple of eight.
    word(rest, len - 8) == word(text, len - 8)
}

/// A cursor over one JSON text.
pub(super) struct Scanner<'a> {
    text: &'a str,
    at: usize,
    depth: u8,
    /// Where the key of the object member being read starts.
    member_start: usize,
    /// Where long escaped strings are decoded before they are copied out at their size.
    scratch: Vec<u8>,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `text`.
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            depth: 0,
            member_start: 0,
            scratch: Vec::new(),
        }
    }

    /// A scanner inside the top-level object of `text`, at `at`, where a member's key is next.
    /// [`Self::members`] reads on from there.
    pub fn inside_object(text: &'a str, at: usize) -> Self {
        Self {
            text,
            at,
            depth: 1,
            member_start: at,
            scratch: Vec::new(),
        }
    }

    /// Where the cursor is: the byte after the last value read.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Where the current object member's key starts (whitespace before it included).
    pub fn member_start(&self) -> usize {
        self.member_start
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        // Compact JSON has no whitespace between tokens, and every JSON whitespace byte is
        // at most a space.
        if let Some(&b) = bytes.get(self.at)
            && b > b' '
        {
            return Some(b);
        }
        while let Some(&b) = bytes.get(self.at) {
            if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    /// Consume `byte` if it is next after whitespace.
    #[inline]
    pub fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left.
    pub fn finish(mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// Consume exactly `word` (no whitespace skipped) if it is next.
    #[inline]
    pub fn literal(&mut self, word: &str) -> Option<()> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(word).then(|| self.at += word.len())
    }

    /// Consume `layout`'s text if it is next, exactly (no whitespace skipped), and follow the
    /// objects and arrays it opens or closes.
    #[inline]
    pub fn layout(&mut self, layout: &Layout) -> Option<()> {
        let rest = self.bytes().get(self.at..)?;
        if !starts_with(rest, layout.text.as_bytes()) {
            return None;
        }
        let depth = self.depth.checked_add_signed(layout.depth)?;
        if depth > MAX_DEPTH {
            return None;
        }
        self.depth = depth;
        self.at += layout.text.len();
        Some(())
    }

    /// Consume `null` if it is next; `false` (nothing consumed) if another value is.
    #[inline]
    pub fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal("null").map(|()| true)
    }

    /// Consume `true` or `false` if one is next; `false` (nothing consumed) otherwise.
    pub fn boolean(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal("true").map(|()| true),
            b'f' => self.literal("false").map(|()| true),
            _ => Some(false),
        }
    }

    /// A string: borrowed when it has no escapes, decoded by serde_json when it has.
    #[inline]
    pub fn string(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let stop = next_stop(self.bytes(), start)?;
        if self.bytes().get(stop) == Some(&b'"') {
            self.at = stop + 1;
            return self.text.get(start..stop).map(Cow::Borrowed);
        }
        let (text, end) = decode_escaped(self.bytes(), start, stop, &mut self.scratch)?;
        self.at = end + 1;
        Some(Cow::Owned(text))
    }

    /// An object key; keys with escapes are left to serde (it decodes them before matching).
    #[inline]
    fn key(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let end = next_stop(self.bytes(), self.at + 1)?;
        if self.bytes().get(end) != Some(&b'"') {
            return None;
        }
        let key = self.text.get(self.at + 1..end)?;
        self.at = end + 1;
        Some(key)
    }

    /// A plain non-negative integer that fits in a `u64` (anything else is left to serde).
    pub fn count(&mut self) -> Option<u64> {
        self.peek()?;
        let bytes = self.bytes();
        let start = self.at;
        let mut value: u64 = 0;
        let mut at = start;
        while let Some(&b) = bytes.get(at)
            && b.is_ascii_digit()
        {
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            at += 1;
        }
        let digits = at - start;
        if digits == 0
            || (digits > 1 && bytes.get(start) == Some(&b'0'))
            || matches!(bytes.get(at), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        self.at = at;
        Some(value)
    }

    /// A value as `Option<T>` reads it: `null` is `None`, anything else is read by `read`.
    #[inline]
    pub fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null()? {
            Some(None)
        } else {
            read(self).map(Some)
        }
    }

    /// A count as `Option<u64>` reads it: `null` is `None`; anything but a plain integer is left
    /// to serde.
    pub fn optional_count(&mut self) -> Option<Option<u64>> {
        self.optional(Self::count)
    }

    /// Skip a number as serde_json does when it ignores one (no range check).
    fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes();
        let digits_from = |i: usize| {
            bytes.get(i..).map_or(0, |rest| {
                rest.iter().take_while(|b| b.is_ascii_digit()).count()
            })
        };
        let mut i = self.at;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i += digits_from(i),
            _ => return None,
        }
        if bytes.get(i) == Some(&b'.') {
            let digits = digits_from(i + 1);
            if digits == 0 {
                return None;
            }
            i += 1 + digits;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(bytes.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let digits = digits_from(i);
            if digits == 0 {
                return None;
            }
            i += digits;
        }
        self.at = i;
        Some(())
    }

    /// Skip any value, checking it as serde_json does when it ignores an unknown field.
    pub fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip()),
            b'[' => self.array(Self::skip),
            b'"' => {
                let end = string_end(self.bytes(), self.at + 1)?;
                self.at = end + 1;
                Some(())
            }
            b'n' => self.literal("null"),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            _ => self.skip_number(),
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// An object: `field` reads the value of each key (and must consume it).
    pub fn object(&mut self, field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.enter()?;
        self.object_body(field)
    }

    /// The rest of an object whose `{` was read: its members, if any, and the closing `}`.
    pub fn object_body(
        &mut self,
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if self.peek()? == b'}' {
            self.at += 1;
            self.depth -= 1;
            return Some(());
        }
        self.members(field)
    }

    /// The rest of an object whose `{` (and maybe some members) was read: members up to and
    /// including the closing `}`, starting with a key.
    pub fn members(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        loop {
            self.member_start = self.at;
            let key = self.key()?;
            self.expect(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// An object whose members come in `order` (see [`Self::object_body_in_order`]).
    pub fn object_in_order(
        &mut self,
        order: &[Key],
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.expect(b'{')?;
        self.enter()?;
        self.object_body_in_order(order, field)
    }

    /// The rest of an object whose `{` was read, from a service that writes the members it
    /// sends in one order and spacing: each key is first looked for among `order` (the keys it
    /// may send, in its order) after the last one found there, in one comparison each, and
    /// read as any key only when none of them is next. `field` reads each value, as in
    /// [`Self::object`].
    pub fn object_body_in_order(
        &mut self,
        order: &[Key],
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if self.peek()? == b'}' {
            self.at += 1;
            self.depth -= 1;
            return Some(());
        }
        self.members_in_order(order, field)
    }

    /// [`Self::after_member`] for members in `order` (see [`Self::object_body_in_order`]).
    pub fn after_member_in_order(
        &mut self,
        order: &[Key],
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                self.members_in_order(order, field)
            }
            b'}' => {
                self.at += 1;
                self.depth -= 1;
                Some(())
            }
            _ => None,
        }
    }

    /// [`Self::members`], keys looked for in `order` first.
    fn members_in_order(
        &mut self,
        order: &[Key],
        mut field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut next = 0;
        loop {
            self.member_start = self.at;
            let rest = self.bytes().get(self.at..)?;
            let found = order
                .get(next..)
                .and_then(|keys| keys.iter().position(|k| k.starts(rest)));
            let key = match found {
                Some(i) => {
                    let key = order.get(next + i)?;
                    next += i + 1;
                    self.at += key.text.len();
                    key.name
                }
                None => {
                    let key = self.key()?;
                    self.expect(b':')?;
                    key
                }
            };
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// The rest of an object after a member's value: `,` and more members, or the closing `}`.
    pub fn after_member(
        &mut self,
        field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                self.members(field)
            }
            b'}' => {
                self.at += 1;
                self.depth -= 1;
                Some(())
            }
            _ => None,
        }
    }

    /// An array: `item` reads each element (and must consume it).
    pub fn array(&mut self, item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.enter()?;
        self.array_body(item)
    }

    /// The rest of an array whose `[` was read: its elements, if any, and the closing `]`.
    pub fn array_body(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek()? == b']' {
            self.at += 1;
            self.depth -= 1;
            return Some(());
        }
        item(self)?;
        self.after_item(item)
    }

    /// The rest of an array after an element: `,` and more elements, each read by `item`, up
    /// to and including the closing `]`.
    pub fn after_item(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        loop {
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
            item(self)?;
        }
        self.depth -= 1;
        Some(())
    }
}

/// Debug builds and fuzz targets hold a hand-written reader to serde's answer on every input it
/// reads: `fast` must be what serde makes of `data`.
#[cfg(any(debug_assertions, fuzzing))]
pub(super) fn check_against_serde<'a, T>(data: &'a str, fast: &T)
where
    T: serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    let serde = serde_json::from_str::<T>(data);
    assert!(
        matches!(&serde, Ok(value) if value == fast),
        "a hand-written reader disagrees with serde on {data:?}: fast {fast:?}, serde {serde:?}"
    );
}

/// `fast`, what a hand-written reader made of `data`, passed on; debug builds and fuzz targets
/// first hold it to serde's answer (see [`check`]). Only Bedrock's reader (feature `bedrock`)
/// returns its value; the others fill theirs in place and call [`check`].
#[cfg(feature = "bedrock")]
#[inline]
pub(super) fn checked<'a, T>(data: &'a str, fast: Option<T>) -> Option<T>
where
    T: serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    if let Some(fast) = &fast {
        check(data, fast);
    }
    fast
}

/// Debug builds and fuzz targets hold `fast`, what a hand-written reader made of `data`, to
/// serde's answer (see [`check_against_serde`]); other builds take it as it is.
#[inline]
pub(super) fn check<'a, T>(data: &'a str, fast: &T)
where
    T: serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    #[cfg(any(debug_assertions, fuzzing))]
    check_against_serde(data, fast);
    #[cfg(not(any(debug_assertions, fuzzing)))]
    let _ = (data, fast);
}

/// [`check`] for a reader of bytes not yet known to be UTF-8: `fast` must be what serde makes
/// of `data` read as bytes.
#[cfg(feature = "bedrock")]
#[inline]
pub(super) fn check_slice<'a, T>(data: &'a [u8], fast: &T)
where
    T: serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    #[cfg(any(debug_assertions, fuzzing))]
    {
        let serde = serde_json::from_slice::<T>(data);
        assert!(
            matches!(&serde, Ok(value) if value == fast),
            "a hand-written reader disagrees with serde on {:?}: fast {fast:?}, serde {serde:?}",
            String::from_utf8_lossy(data)
        );
    }
    #[cfg(not(any(debug_assertions, fuzzing)))]
    let _ = (data, fast);
}

/// Note a known member as read, in its own flag; `None` if it was read before: serde rejects a
/// known member given twice.
pub(super) fn first(read: &mut bool) -> Option<()> {
    (!std::mem::replace(read, true)).then_some(())
}

/// A member the hand-written readers take only as `null` (anything else is left to serde);
/// `read` is its flag (see [`first`]).
pub(super) fn null_only(s: &mut Scanner<'_>, read: &mut bool) -> Option<()> {
    first(read)?;
    s.null()?.then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether the scanner skips `json` as one whole value.
    fn skips(json: &str) -> bool {
        let mut s = Scanner::new(json);
        s.skip().is_some() && s.finish().is_some()
    }

    #[test]
    fn skips_exactly_what_serde_json_ignores() {
        for json in [
            "null",
            "true",
            " false ",
            "0",
            "-0",
            "12.5e-3",
            "1E+9",
            "1e999",
            r#""plain""#,
            r#""esc \" \\ \/ \b \f \n \r \t \u00e9 \ud800""#,
            "[]",
            "{}",
            r#"{"a":[1,{"b":null}],"c":"d"}"#,
            " [ 1 , 2 ] ",
        ] {
            assert!(skips(json), "{json}");
            serde_json::from_str::<serde::de::IgnoredAny>(json).unwrap();
        }
        for json in [
            "",
            "nul",
            "nulls",
            "01",
            "-",
            "1.",
            "1e",
            ".5",
            "+1",
            r#""\x""#,
            r#""\u12""#,
            "\"a\u{1}b\"",
            "[1,]",
            "{,}",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            "[1 2]",
            "{1:2}",
            "[",
            r#""open"#,
        ] {
            assert!(!skips(json), "{json:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(json).is_err(),
                "{json:?}"
            );
        }
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let mut s = Scanner::new(r#""plain" "a\nb\u00e9""#);
        assert!(matches!(s.string(), Some(Cow::Borrowed("plain"))));
        assert!(matches!(s.string().as_deref(), Some("a\nb\u{e9}")));
        // A lone surrogate is invalid once decoded: left to serde, which rejects it.
        for lone in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud83d\u0041""#,
            r#""\ud83dx""#,
        ] {
            assert_eq!(Scanner::new(lone).string(), None, "{lone}");
            assert!(serde_json::from_str::<String>(lone).is_err(), "{lone}");
        }
    }

    #[test]
    fn escapes_decode_as_serde_json_decodes_them() {
        for quoted in [
            r#""\" \\ \/ \b \f \n \r \t""#,
            r#""\u0000\u001F\u00e9\u00E9\u20AC\uFFFF""#,
            r#""\ud83d\ude00 and \uD83D\uDE00""#,
            r#""é\n😀\"{\"city\": \"Par""#,
            r#""\\u0041""#,
        ] {
            let expected: String = serde_json::from_str(quoted).unwrap();
            let mut s = Scanner::new(quoted);
            assert_eq!(s.string().as_deref(), Some(expected.as_str()), "{quoted}");
            assert!(s.finish().is_some());
        }
    }

    /// Long strings built of pieces of every length, so that escapes, stops and the end fall at
    /// every offset of the eight-byte words the decoder copies.
    fn long_string() -> impl Strategy<Value = String> {
        strategies::joined(
            vec![
                "a",
                "ab",
                "abc",
                "abcdefg",
                "abcdefghijklm",
                "é",
                "\u{1F600}",
                " ",
                "\\n",
                "\\\"",
                "\\\\",
                "\\/",
                "\\b",
                "\\u00e9",
                "\\u20AC",
                "\\ud83d\\ude00",
                "\\ud800",
                "\\udc00x",
                "\\x",
                "\\u12",
                "\\u12g4",
                "\u{1}",
                "\u{1f}",
                "\"",
            ],
            40,
        )
        .prop_map(|body| format!("\"{body}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Where the scanner reads a string, it reads what serde_json reads, and it reads every
        /// string serde_json accepts.
        #[test]
        fn strings_read_as_serde_json_reads_them(
            body in long_string(),
            after in "[\"\\] ,}]{0,3}",
            padded in any::<bool>(),
        ) {
            let pad = if padded { EXACT_BELOW } else { 0 };
            let json = format!("{body}{after}{:pad$}", "");
            let mut s = Scanner::new(&json);
            let fast = s.string().map(Cow::into_owned);
            let rest = &json[s.position()..];
            // serde_json reads the string up to its closing quote; what follows is not its own.
            let mut values = serde_json::Deserializer::from_str(&json).into_iter::<String>();
            let serde = values.next().and_then(Result::ok);
            prop_assert_eq!(&fast, &serde, "{}", json);
            if fast.is_some() {
                prop_assert_eq!(json.len() - rest.len(), values.byte_offset(), "{}", json);
            }
        }
    }

    #[test]
    fn finds_the_first_stop_byte_in_any_position() {
        for len in 0..20 {
            for at in 0..len {
                for stop in [b'"', b'\\', 0x1f, 0x00] {
                    // Neighbours of the stop bytes before it, which must not match.
                    let near = [0x21, 0x23, 0x5b, 0x5d, 0x20, 0x7f, 0x80, 0xff];
                    let mut bytes: Vec<u8> = near.iter().copied().cycle().take(len).collect();
                    bytes[at] = stop;
                    // Bytes above the stop that could confuse the borrow trick.
                    for later in bytes.iter_mut().skip(at + 1) {
                        *later = 0x01;
                    }
                    assert_eq!(next_stop(&bytes, 0), Some(at), "{len} {at} {stop}");
                }
            }
            let plain = vec![0xC3; len];
            assert_eq!(next_stop(&plain, 0), None);
        }
        assert_eq!(next_stop(b"\x21\x5b\x5d\x7f\xff\"", 0), Some(5));
    }

    #[test]
    fn counts_are_plain_integers() {
        assert_eq!(Scanner::new("0").count(), Some(0));
        assert_eq!(Scanner::new(" 42,").count(), Some(42));
        for odd in [
            "-1",
            "1.0",
            "1e2",
            "01",
            "18446744073709551616",
            "\"1\"",
            "null",
        ] {
            assert_eq!(Scanner::new(odd).count(), None, "{odd}");
        }
    }

    #[test]
    fn gives_up_on_deep_nesting() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(!skips(&deep));
        let shallow = format!("{}{}", "[".repeat(60), "]".repeat(60));
        assert!(skips(&shallow));
    }

    #[test]
    fn layouts_follow_the_depth_of_their_text() {
        const OPENS: Layout = Layout::new(r#"{"a": [{"b": "]}\"{", "c": ["#);
        const CLOSES: Layout = Layout::new("}]]}");
        assert_eq!((OPENS.depth, CLOSES.depth), (4, -4));
        let text = r#"{"a": [{"b": "]}\"{", "c": [1]}]}"#;
        let mut s = Scanner::new(text);
        assert_eq!(s.layout(&CLOSES), None);
        s.layout(&OPENS).expect("opens");
        assert_eq!(s.depth, 4);
        s.array_body(Scanner::skip).expect("the last array");
        s.layout(&Layout::new("}]}")).expect("closes");
        assert_eq!(s.depth, 0);
        assert!(s.finish().is_some());
        // Closing more than is open, or opening past the limit, is left to serde.
        assert_eq!(Scanner::new("}").layout(&Layout::new("}")), None);
        let mut deep = Scanner::new("[[");
        deep.depth = MAX_DEPTH - 1;
        assert_eq!(deep.layout(&Layout::new("[[")), None);
    }

    #[test]
    fn keys_know_their_name() {
        const KEY: Key = Key::new(r#""promptTokenCount": "#);
        assert_eq!(KEY.name, "promptTokenCount");
        assert!(KEY.starts(br#""promptTokenCount": 5"#));
        assert!(!KEY.starts(br#""promptTokenCount":5"#));
        assert!(!KEY.starts(br#""promptTokensDetails": []"#));
        assert!(!KEY.starts(br#""prompt"#));
    }

    #[test]
    fn starts_with_compares_every_byte() {
        for len in 0..40 {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for extra in [0, 1, 9] {
                let mut rest = text.clone();
                rest.extend(std::iter::repeat_n(b'z', extra));
                assert!(starts_with(&rest, &text), "{len} {extra}");
                for at in 0..len {
                    let mut other = rest.clone();
                    other[at] ^= 0x20;
                    assert!(!starts_with(&other, &text), "{len} {extra} {at}");
                }
            }
            if len > 0 {
                assert!(!starts_with(&text[..len - 1], &text), "{len}");
            }
        }
    }

    const ORDER: [Key; 3] = [
        Key::new(r#""alpha": "#),
        Key::new(r#""beta": "#),
        Key::new(r#""gamma":  "#),
    ];

    /// The members of `text`'s object as (key, value text), read with or without `ORDER`.
    fn members_read(text: &str, in_order: bool) -> Option<Vec<(String, String)>> {
        let mut s = Scanner::new(text);
        let mut read = Vec::new();
        let field = |s: &mut Scanner<'_>, key: &str| {
            let start = s.position();
            s.skip()?;
            let value = text.get(start..s.position())?.trim_start();
            read.push((key.to_owned(), value.to_owned()));
            Some(())
        };
        if in_order {
            s.object_in_order(&ORDER, field)?;
        } else {
            s.object(field)?;
        }
        s.finish()?;
        Some(read)
    }

    proptest! {
        /// Keys found through an order are the keys read one by one, whatever the order,
        /// spacing and keys of the text.
        #[test]
        fn members_in_order_read_as_members_do(
            members in prop::collection::vec(
                (
                    prop::sample::select(vec!["alpha", "beta", "gamma", "gam", "betas", "alph\\u0061", ""]),
                    prop::sample::select(vec![":", ": ", ":  ", " : "]),
                    prop::sample::select(vec!["1", "\"x\"", "[]", "{\"a\": 1}", "nul"]),
                ),
                0..5,
            ),
            space in prop::sample::select(vec!["", " ", "\n"]),
        ) {
            let members: Vec<String> = members
                .iter()
                .map(|(key, colon, value)| format!("{space}\"{key}\"{colon}{value}"))
                .collect();
            let text = format!("{{{}}}", members.join(","));
            prop_assert_eq!(members_read(&text, true), members_read(&text, false), "{}", text);
        }
    }

    #[test]
    fn escaped_keys_are_left_to_serde() {
        let mut s = Scanner::new(r#"{"i\u0064":1}"#);
        assert_eq!(s.object(|s, _| s.skip()), None);
    }
}
