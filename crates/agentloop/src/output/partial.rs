//! A tolerant parser for JSON that is still being written.

use serde_json::{Map, Value};

/// The value a prefix of a JSON text shows so far: objects and arrays closed where the text
/// stops, a string cut off kept as far as it goes, and what cannot be known yet left out (a
/// number or `true`/`false`/`null` still being written, an object key without its value).
/// `None` when nothing is known yet. Never fails: text that stops making sense ends the value
/// there.
///
/// Every value shown is consistent with the final one: the same where complete, a prefix of
/// the final string, a subset of the final object's properties, the first items of the final
/// array.
///
/// ```
/// use agentloop::output::partial_json;
/// use serde_json::json;
/// assert_eq!(partial_json(r#"{"city": "Par"#), Some(json!({"city": "Par"})));
/// assert_eq!(partial_json(r#"{"temps": [18, 2"#), Some(json!({"temps": [18]})));
/// assert_eq!(partial_json(""), None);
/// ```
pub fn partial_json(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        // A number with nothing after it may still be growing: `1` may be the start of `10`.
        let may_grow = value.is_number() && !text.ends_with([' ', '\t', '\n', '\r']);
        return (!may_grow).then_some(value);
    }
    Parser { text, at: 0 }.value().map(|(value, _)| value)
}

/// Longest escape sequence a cut-off string can end in: a surrogate pair, `\uD83D\uDE0`.
const LONGEST_ESCAPE: usize = 12;

struct Parser<'a> {
    text: &'a str,
    /// Byte offset; only ever moved over ASCII, so always on a char boundary.
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The value at the cursor and whether it is complete.
    fn value(&mut self) -> Option<(Value, bool)> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => Some(self.object()),
            b'[' => Some(self.array()),
            b'"' => self.string().map(|(s, done)| (Value::String(s), done)),
            _ => self.scalar().map(|v| (v, true)),
        }
    }

    fn object(&mut self) -> (Value, bool) {
        self.at += 1;
        let mut map = Map::new();
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b'}') => {
                    self.at += 1;
                    return (Value::Object(map), true);
                }
                Some(b',') => {
                    self.at += 1;
                    continue;
                }
                Some(b'"') => {}
                _ => return (Value::Object(map), false),
            }
            let Some((key, true)) = self.string() else {
                return (Value::Object(map), false);
            };
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return (Value::Object(map), false);
            }
            self.at += 1;
            match self.value() {
                Some((value, done)) => {
                    map.insert(key, value);
                    if !done {
                        return (Value::Object(map), false);
                    }
                }
                None => return (Value::Object(map), false),
            }
        }
    }

    fn array(&mut self) -> (Value, bool) {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b']') => {
                    self.at += 1;
                    return (Value::Array(items), true);
                }
                Some(b',') => {
                    self.at += 1;
                    continue;
                }
                None => return (Value::Array(items), false),
                Some(_) => {}
            }
            match self.value() {
                Some((value, done)) => {
                    items.push(value);
                    if !done {
                        return (Value::Array(items), false);
                    }
                }
                None => return (Value::Array(items), false),
            }
        }
    }

    /// A string at the cursor: complete, or cut off (then as far as it decodes).
    fn string(&mut self) -> Option<(String, bool)> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let mut i = start + 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => {
                    self.at = i + 1;
                    let decoded = serde_json::from_str(self.text.get(start..=i)?).ok()?;
                    return Some((decoded, true));
                }
                _ => i += 1,
            }
        }
        self.at = bytes.len();
        // Cut off: drop the end of an escape sequence until what is left decodes.
        let mut candidate = self.text.get(start..)?.to_owned();
        for _ in 0..=LONGEST_ESCAPE {
            candidate.push('"');
            if let Ok(decoded) = serde_json::from_str::<String>(&candidate) {
                return Some((decoded, false));
            }
            candidate.pop();
            if candidate.len() <= 1 {
                return Some((String::new(), false));
            }
            candidate.pop();
        }
        None
    }

    /// A number or literal; `None` while it may still be growing (nothing after it yet) or
    /// when it is not JSON.
    fn scalar(&mut self) -> Option<Value> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let mut end = start;
        while end < bytes.len()
            && !matches!(
                bytes[end],
                b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'
            )
        {
            end += 1;
        }
        if end == bytes.len() {
            return None;
        }
        self.at = end;
        serde_json::from_str(self.text.get(start..end)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cut_off_text_shows_what_is_known() {
        let cases = [
            ("{", json!({})),
            (r#"{"a""#, json!({})),
            (r#"{"a": "x\"#, json!({"a": "x"})),
            (r#"{"a": "\u00e"#, json!({"a": ""})),
            (r#"{"a": tru"#, json!({})),
            (r#"{"a": true,"#, json!({"a": true})),
            (r#"[1, [2, {"b": null}"#, json!([1, [2, {"b": null}]])),
            (r#"{"a": 1} trailing"#, json!({"a": 1})),
        ];
        for (text, expected) in cases {
            assert_eq!(partial_json(text), Some(expected), "{text}");
        }
        assert_eq!(partial_json("12"), None);
        assert_eq!(partial_json("12 "), Some(json!(12)));
        assert_eq!(partial_json("-"), None);
    }
}
