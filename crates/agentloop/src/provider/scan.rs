//! A small JSON scanner for the providers' hand-written stream readers (`openai::stream::fast`,
//! `anthropic::stream::fast`).
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

/// The first byte at or after `from` that ends a run of string characters: `"`, `\\` or a
/// control character. Eight bytes at a time: a byte's high bit marks a match, and the lowest
/// marked byte is exact (borrows only ever mark bytes above a real match).
#[inline]
fn next_stop(bytes: &[u8], mut from: usize) -> Option<usize> {
    let is_stop = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
    while let Some(word) = bytes.get(from..from + 8) {
        let word = u64::from_le_bytes(word.try_into().ok()?);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let marks = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word);
        let marks = marks & HIGHS;
        if marks != 0 {
            return Some(from + (marks.trailing_zeros() / 8) as usize);
        }
        from += 8;
    }
    let tail = bytes.get(from..)?;
    tail.iter().position(|&b| is_stop(b)).map(|at| from + at)
}

/// The text of a string body whose escapes `Scanner::string_end` checked, decoded as serde_json
/// decodes it; `None` for a surrogate escape that is not a valid pair (left to serde).
fn unescape(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = memchr::memchr(b'\\', rest.as_bytes()) {
        out.push_str(rest.get(..at)?);
        let (decoded, used) = match *rest.as_bytes().get(at + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => match hex4(rest.get(at + 2..at + 6)?)? {
                lead @ 0xD800..=0xDBFF => {
                    let trail = rest.get(at + 6..at + 12)?.strip_prefix("\\u")?;
                    let trail = hex4(trail)?;
                    if !(0xDC00..=0xDFFF).contains(&trail) {
                        return None;
                    }
                    let code = 0x10000 + ((lead - 0xD800) << 10) + (trail - 0xDC00);
                    (char::from_u32(code)?, 12)
                }
                code => (char::from_u32(code)?, 6),
            },
            _ => return None,
        };
        out.push(decoded);
        rest = rest.get(at + used..)?;
    }
    out.push_str(rest);
    Some(out)
}

/// Four hex digits (`from_str_radix` alone would also take a sign).
fn hex4(digits: &str) -> Option<u32> {
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// A cursor over one JSON text.
pub(super) struct Scanner<'a> {
    text: &'a str,
    at: usize,
    depth: u8,
    /// Where the key of the object member being read starts.
    member_start: usize,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `text`.
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            depth: 0,
            member_start: 0,
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

    #[inline]
    fn expect(&mut self, byte: u8) -> Option<()> {
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
        let start = self.at;
        let end = next_stop(self.bytes(), start + 1)?;
        if self.bytes().get(end) == Some(&b'"') {
            self.at = end + 1;
            return self.text.get(start + 1..end).map(Cow::Borrowed);
        }
        let (end, _) = self.string_end(end)?;
        self.at = end + 1;
        unescape(self.text.get(start + 1..end)?).map(Cow::Owned)
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

    /// The index of the closing quote of a string whose body starts at `from`, and whether
    /// the string holds escapes (each checked as serde_json checks them).
    #[inline]
    fn string_end(&self, from: usize) -> Option<(usize, bool)> {
        let bytes = self.bytes();
        let mut i = from;
        let mut escaped = false;
        loop {
            i = next_stop(bytes, i)?;
            match *bytes.get(i)? {
                b'"' => return Some((i, escaped)),
                b'\\' => {
                    escaped = true;
                    i += match *bytes.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => {
                            let hex = bytes.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            6
                        }
                        _ => return None,
                    };
                }
                // A control character, which JSON forbids inside strings.
                _ => return None,
            }
        }
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

    /// A count as `Option<u64>` reads it: `null` is `None`; anything but a plain integer is left
    /// to serde.
    pub fn optional_count(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            Some(None)
        } else {
            self.count().map(Some)
        }
    }

    /// A string as `Option<Cow<str>>` reads it: `null` is `None`; anything but a string is
    /// left to serde.
    #[inline]
    pub fn optional_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            Some(None)
        } else {
            self.string().map(Some)
        }
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
                let (end, _) = self.string_end(self.at + 1)?;
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
    pub fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.enter()?;
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                item(self)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
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

/// A member the hand-written readers take only as `null` (anything else is left to serde);
/// `field` is its bit in the object's `seen`.
pub(super) fn null_only(s: &mut Scanner<'_>, seen: &mut Seen, field: u8) -> Option<()> {
    seen.first(field)?;
    s.null()?.then_some(())
}

/// Which known fields of one object were read: serde rejects a known field given twice.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Seen(u8);

impl Seen {
    /// Note `field` as read; `None` if it was read before.
    pub fn first(&mut self, field: u8) -> Option<()> {
        if self.has(field) {
            return None;
        }
        self.0 |= 1 << field;
        Some(())
    }

    /// Whether `field` was read.
    pub fn has(self, field: u8) -> bool {
        self.0 & (1 << field) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn escaped_keys_are_left_to_serde() {
        let mut s = Scanner::new(r#"{"i\u0064":1}"#);
        assert_eq!(s.object(|s, _| s.skip()), None);
    }
}
