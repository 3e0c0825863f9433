//! Generated JSON text, valid and not, for the property tests of the hand-written readers: each
//! reader's tests build their event shapes from these pieces and compare the reader with serde.
//! Also where the recorded streams they are checked against live.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// `shared/conformance/streams` above the crate: recorded streams of real services, a folder
/// per service.
pub fn recorded_streams() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|dir| dir.join("shared/conformance/streams"))
        .find(|dir| dir.is_dir())
        .expect("shared/conformance/streams above the crate")
}

/// Up to `most - 1` of `pieces` (repeats included), joined.
pub fn joined(pieces: Vec<&'static str>, most: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..most).prop_map(|parts| parts.concat())
}

/// A JSON string literal, sometimes with invalid escapes or control characters in it.
pub fn string() -> impl Strategy<Value = String> {
    joined(
        vec![
            "a",
            "Paris",
            " ",
            "é",
            "\u{1F600}",
            "\\n",
            "\\\"",
            "\\\\",
            "\\/",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\x",
            "\\u12",
            "\u{1}",
            "{\\\"city\\\":",
        ],
        5,
    )
    .prop_map(|body| format!("\"{body}\""))
}

/// A string, or sometimes `null`.
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![4 => string(), 1 => Just("null".to_owned())].boxed()
}

/// One of `options`, as JSON text.
pub fn one_of(options: Vec<&'static str>) -> BoxedStrategy<String> {
    prop::sample::select(options)
        .prop_map(str::to_owned)
        .boxed()
}

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        one_of(vec![
            "null",
            "true",
            "false",
            "nul",
            "0",
            "7",
            "-1",
            "2.5",
            "1e999",
            "01",
            "1.",
            "-",
            "18446744073709551616",
            "3E+2",
        ]),
        string(),
    ]
}

/// `{...}` with these members, in this order.
pub fn object(fields: &[(String, String)]) -> String {
    let fields: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    format!("{{{}}}", fields.join(","))
}

/// A JSON array of up to two `item`s.
pub fn array(item: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    prop::collection::vec(item, 0..3).prop_map(|items| format!("[{}]", items.join(",")))
}

/// A valid JSON scalar or empty container (no invalid text: for shapes serde must read).
pub fn plain_value() -> BoxedStrategy<String> {
    prop_oneof![
        one_of(vec![
            "null", "true", "false", "[]", "{}", "-1", "0.5", "2.5"
        ]),
        (0u64..u64::MAX).prop_map(|n| n.to_string()),
        ".{0,8}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
    ]
    .boxed()
}

/// An object of up to four members keyed by `keys` (repeats included), each a
/// [`plain_value`] or `inner`: nested event shapes built from the inside out.
pub fn members(
    keys: &'static [&'static str],
    inner: BoxedStrategy<String>,
) -> BoxedStrategy<String> {
    prop::collection::vec(
        (
            prop::sample::select(keys).prop_map(str::to_owned),
            prop_oneof![plain_value(), inner],
        ),
        0..5,
    )
    .prop_map(|fields| object(&fields))
    .boxed()
}

/// Values made of the keys a reader knows (and a few it must not be fooled by).
#[derive(Clone, Copy)]
pub struct Keys(pub &'static [&'static str]);

impl Keys {
    /// Any JSON value, nested up to three deep, with objects keyed by these keys.
    pub fn value(self) -> BoxedStrategy<String> {
        scalar()
            .prop_recursive(3, 16, 4, move |inner| {
                let key = prop::sample::select(self.0).prop_map(str::to_owned);
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4)
                        .prop_map(|items| format!("[{}]", items.join(","))),
                    prop::collection::vec((key, inner), 0..4).prop_map(|fields| object(&fields)),
                ]
            })
            .boxed()
    }

    /// A member: mostly a well-typed value for the key, sometimes any value.
    pub fn field(
        self,
        key: &'static str,
        good: BoxedStrategy<String>,
    ) -> BoxedStrategy<(String, String)> {
        prop_oneof![4 => good, 1 => self.value()]
            .prop_map(move |v| (key.to_owned(), v))
            .boxed()
    }
}

/// An object of up to five members picked from `options`, repeats included.
pub fn fields(options: Vec<BoxedStrategy<(String, String)>>) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select((0..options.len()).collect::<Vec<_>>()),
        0..6,
    )
    .prop_flat_map(move |picks| {
        picks
            .into_iter()
            .map(|i| options[i].clone())
            .collect::<Vec<_>>()
    })
    .prop_map(|fields| object(&fields))
}

/// `json`, sometimes with one of `pieces` put in or a byte cut out.
pub fn mangled(
    json: impl Strategy<Value = String>,
    pieces: Vec<&'static str>,
) -> impl Strategy<Value = String> {
    (
        json,
        0usize..4,
        any::<prop::sample::Index>(),
        prop::sample::select(pieces),
    )
        .prop_map(|(mut text, how, at, piece)| {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match how {
                0 => text.insert_str(at, piece),
                1 if at < text.len() => {
                    text.remove(at);
                }
                _ => {}
            }
            text
        })
}

/// The share of 1,000 generated texts that `fast` reads: a property test whose generator never
/// reached the fast path would pass without testing it.
pub fn share_read(json: impl Strategy<Value = String>, fast: impl Fn(&str) -> bool) -> f64 {
    let mut runner = TestRunner::deterministic();
    let read = (0..1000)
        .filter(|_| {
            fast(
                &json
                    .new_tree(&mut runner)
                    .expect("a generated text")
                    .current(),
            )
        })
        .count();
    read as f64 / 1000.0
}
