//! The partial-JSON parser behind streamed typed answers: every prefix of a valid answer
//! parses, without error, to a view consistent with the final value.

use agentloop::output::partial_json;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        // Quotes, backslashes, control characters and non-ASCII text, all escaped or not.
        "[a-z\"\\\\\n\t\u{1}é€😀 ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-z\"é]{0,4}", inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Whether `partial` shows only what `complete` holds: equal where complete, a prefix of a
/// string, some of an object's properties, the first items of an array.
fn consistent(partial: &Value, complete: &Value) -> bool {
    match (partial, complete) {
        (Value::Object(p), Value::Object(c)) => p
            .iter()
            .all(|(key, value)| c.get(key).is_some_and(|full| consistent(value, full))),
        (Value::Array(p), Value::Array(c)) => {
            p.len() <= c.len() && p.iter().zip(c).all(|(p, c)| consistent(p, c))
        }
        (Value::String(p), Value::String(c)) => c.starts_with(p.as_str()),
        (p, c) => p == c,
    }
}

fn check_prefixes(text: &str, complete: &Value) -> Result<(), TestCaseError> {
    for (at, _) in text.char_indices().chain([(text.len(), ' ')]) {
        let prefix = &text[..at];
        if let Some(partial) = partial_json(prefix) {
            prop_assert!(
                consistent(&partial, complete),
                "prefix {prefix:?} gave {partial}, not a view of {complete}"
            );
        }
    }
    // A whole number may still be growing; anything else whole is the value itself.
    if !complete.is_number() {
        prop_assert_eq!(partial_json(text), Some(complete.clone()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_prefix_of_an_answer_is_a_view_of_the_final_value(value in json_value()) {
        check_prefixes(&value.to_string(), &value)?;
        check_prefixes(&serde_json::to_string_pretty(&value).unwrap(), &value)?;
    }
}

#[test]
fn a_streamed_object_fills_in_field_by_field() {
    let text = r#"{"city": "Paris", "temps": [18, 21], "ok": true}"#;
    let views: Vec<Value> = (0..=text.len())
        .filter_map(|at| partial_json(&text[..at]))
        .fold(Vec::new(), |mut views, view| {
            if views.last() != Some(&view) {
                views.push(view);
            }
            views
        });
    assert_eq!(
        views,
        [
            json!({}),
            json!({"city": ""}),
            json!({"city": "P"}),
            json!({"city": "Pa"}),
            json!({"city": "Par"}),
            json!({"city": "Pari"}),
            json!({"city": "Paris"}),
            json!({"city": "Paris", "temps": []}),
            json!({"city": "Paris", "temps": [18]}),
            json!({"city": "Paris", "temps": [18, 21]}),
            json!({"city": "Paris", "temps": [18, 21], "ok": true}),
        ]
    );
}
