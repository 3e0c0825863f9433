//! Each dialect's compiled schema accepts the instances the original accepts, for every
//! checked-in schema (`tests/golden/openai_strict/`, `tests/golden/<dialect>_schema/`):
//! instances generated from the original pass the compiled form, and, for the dialects that
//! keep exactly what the schema accepts (OpenAI and Anthropic strict, Bedrock; Anthropic's up
//! to the value bounds it leaves to our validation), instances generated from the compiled
//! form pass the original once the `null`s OpenAI's strict mode sends for absent optional
//! properties are dropped. Gemini drops the keywords outside its
//! subset, so its form accepts more: only the first direction holds there.
#![cfg(feature = "validation")]

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/openai_strict");

/// Instances of `schema`, a strict schema: every property present, `$ref`s into `root`.
/// `depth` bounds recursion: at 0, arrays are empty.
fn instances(schema: &Value, root: &Value, depth: u32) -> BoxedStrategy<Value> {
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        let target = match target.strip_prefix('#') {
            Some(pointer) => root.pointer(pointer).cloned(),
            None => None,
        };
        return instances(&target.expect("a local $ref"), root, depth);
    }
    if let Some(value) = schema.get("const") {
        return Just(value.clone()).boxed();
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return prop::sample::select(values.clone()).boxed();
    }
    if let Some(branches) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        let options: Vec<_> = branches.iter().map(|b| instances(b, root, depth)).collect();
        return prop::strategy::Union::new(options).boxed();
    }
    let types: Vec<String> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => vec!["null".to_owned()],
    };
    let options: Vec<BoxedStrategy<Value>> = types
        .iter()
        .map(|kind| match kind.as_str() {
            "boolean" => any::<bool>().prop_map(Value::from).boxed(),
            "integer" => {
                let min = schema
                    .get("minimum")
                    .and_then(Value::as_i64)
                    .unwrap_or(-1000);
                let max = schema
                    .get("maximum")
                    .and_then(Value::as_i64)
                    .unwrap_or(1000);
                (min..=max).prop_map(Value::from).boxed()
            }
            "number" => (-1e6f64..1e6).prop_map(Value::from).boxed(),
            "string" => match (
                schema.get("pattern").and_then(Value::as_str),
                schema.get("format").and_then(Value::as_str),
            ) {
                (Some(pattern), _) => {
                    let unanchored = pattern.trim_start_matches('^').trim_end_matches('$');
                    proptest::string::string_regex(unanchored)
                        .expect("a pattern proptest can generate from")
                        .prop_map(Value::from)
                        .boxed()
                }
                (None, Some("date-time")) => Just(Value::from("2026-11-26T13:00:00Z")).boxed(),
                _ => "[a-zé ]{0,6}".prop_map(Value::from).boxed(),
            },
            "array" if depth == 0 => Just(Value::Array(Vec::new())).boxed(),
            "array" => {
                let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
                prop::collection::vec(instances(&items, root, depth - 1), 0..3)
                    .prop_map(Value::Array)
                    .boxed()
            }
            "object" => {
                let props = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let names: Vec<String> = props.keys().cloned().collect();
                let values: Vec<_> = props.values().map(|p| instances(p, root, depth)).collect();
                values
                    .prop_map(move |values| {
                        Value::Object(names.iter().cloned().zip(values).collect::<Map<_, _>>())
                    })
                    .boxed()
            }
            _ => Just(Value::Null).boxed(),
        })
        .collect();
    prop::strategy::Union::new(options).boxed()
}

/// The instance without the properties strict mode sent as `null` for "absent".
fn drop_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(drop_nulls).collect()),
        other => other.clone(),
    }
}

/// The checked-in compiled schemas of a golden directory: (file, original, compiled).
fn goldens(dir: &str, key: &str) -> Vec<(std::path::PathBuf, Value, Value)> {
    let dir = format!("{}/tests/golden/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if let Some(compiled) = golden["compiled"].get(key) {
            found.push((path, golden["schema"].clone(), compiled.clone()));
        }
    }
    found
}

/// Instances generated from `from` (those `from_validator` accepts) pass `to` after `map`.
fn accepted_across(
    path: &std::path::Path,
    from: &Value,
    to: &Value,
    map: fn(&Value) -> Value,
) -> Result<(), TestCaseError> {
    let source = jsonschema::validator_for(from).unwrap();
    let target = jsonschema::validator_for(to).unwrap();
    let mut runner = TestRunner::new(Config::with_cases(200));
    runner
        .run(&instances(from, from, 3), |instance| {
            // The generator ignores some keywords (`allOf`, overlapping `oneOf`): what it
            // gives that the source refuses says nothing.
            if !source.is_valid(&instance) {
                return Ok(());
            }
            let mapped = map(&instance);
            prop_assert!(
                target.is_valid(&mapped),
                "{path:?}: {instance} is accepted by {from}, {mapped} refused by {to}"
            );
            Ok(())
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

#[test]
fn every_dialect_accepts_what_the_original_accepts() {
    let mut checked = 0;
    for (dir, key) in [
        ("openai_strict", "strict"),
        ("anthropic_schema", "ok"),
        ("gemini_schema", "ok"),
        ("bedrock_schema", "ok"),
    ] {
        for (path, original, compiled) in goldens(dir, key) {
            accepted_across(&path, &original, &compiled, Value::clone).unwrap();
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} compiled schemas checked");
}

/// The value bounds Anthropic's strict dialect leaves to our validation.
const ANTHROPIC_RELAXED: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
];

/// `schema` without the value bounds Anthropic's strict dialect leaves out (`minItems` above
/// 1 included); property names are kept, whatever they are called.
fn without_value_bounds(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                let bound = ANTHROPIC_RELAXED.contains(&key.as_str())
                    || (key == "minItems" && value.as_u64().is_none_or(|n| n > 1));
                if bound {
                    continue;
                }
                let value = match key.as_str() {
                    // Maps of names to schemas: each schema loses its bounds, names stay.
                    "properties" | "$defs" | "definitions" => Value::Object(
                        value
                            .as_object()
                            .into_iter()
                            .flatten()
                            .map(|(name, s)| (name.clone(), without_value_bounds(s)))
                            .collect(),
                    ),
                    "enum" | "const" | "required" | "default" | "examples" => value.clone(),
                    _ => without_value_bounds(value),
                };
                out.insert(key.clone(), value);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(without_value_bounds).collect()),
        other => other.clone(),
    }
}

#[test]
fn the_exact_dialects_accept_nothing_the_original_refuses() {
    let mut checked = 0;
    for (dir, key) in [("anthropic_schema", "ok"), ("bedrock_schema", "ok")] {
        for (path, original, compiled) in goldens(dir, key) {
            // Anthropic's strict form is exact up to the value bounds it leaves to our
            // validation (which checks the original schema).
            let original = match dir {
                "anthropic_schema" => without_value_bounds(&original),
                _ => original,
            };
            accepted_across(&path, &compiled, &original, drop_nulls).unwrap();
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} compiled schemas checked");
}

#[test]
fn what_strict_mode_sends_passes_the_original_schema() {
    let mut checked = 0;
    for entry in std::fs::read_dir(GOLDEN).unwrap() {
        let path = entry.unwrap().path();
        let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let Some(strict) = golden["compiled"].get("strict") else {
            continue;
        };
        let original = jsonschema::validator_for(&golden["schema"]).unwrap();
        let compiled = jsonschema::validator_for(strict).unwrap();
        let mut runner = TestRunner::new(Config::with_cases(200));
        runner
            .run(&instances(strict, strict, 3), |instance| {
                prop_assert!(
                    compiled.is_valid(&instance),
                    "{path:?}: generator gave {instance}"
                );
                let sent = drop_nulls(&instance);
                prop_assert!(
                    original.is_valid(&sent),
                    "{path:?}: strict mode allows {instance}, the original refuses {sent}"
                );
                Ok(())
            })
            .unwrap();
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} strict schemas checked");
}
