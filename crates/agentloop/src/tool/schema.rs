//! JSON Schema: generation from Rust types, checking, validation of arguments, and shaping
//! for providers that accept only part of the standard.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

mod dialect;

pub use dialect::{Dialect, NotStrict, anthropic_strict, bedrock, gemini, openai_strict};

/// One way the arguments break the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON pointer to the offending value (`""` is the whole arguments object).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// The schema of `T` (subschemas inlined, no `$schema`/`title`) and its doc comment.
pub fn schema_for<T: JsonSchema>() -> (Value, Option<String>) {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    let mut description = None;
    if let Value::Object(map) = &mut value {
        map.shift_remove("$schema");
        map.shift_remove("title");
        if let Some(Value::String(d)) = map.shift_remove("description") {
            description = Some(d);
        }
        // Tools take an object; a unit struct generates no properties at all.
        if map.get("type") == Some(&Value::String("object".into()))
            && !map.contains_key("properties")
        {
            map.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    (value, description)
}

/// `GetWeather` → `get_weather`.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
            prev_lower = true;
        } else {
            out.push('_');
            prev_lower = false;
        }
    }
    out
}

/// Check that a raw input schema is a valid JSON Schema describing an object: against the
/// meta-schema with the `validation` feature, by its shape alone without it.
pub fn check_input_schema(tool: &str, schema: &Value) -> Result<()> {
    let invalid = |message: String| Error::InvalidToolSchema {
        tool: tool.to_owned(),
        message,
    };
    let map = schema
        .as_object()
        .ok_or_else(|| invalid(format!("the schema must be a JSON object, got `{schema}`")))?;
    #[cfg(feature = "validation")]
    jsonschema::meta::validate(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { "/".to_owned() } else { at };
        invalid(format!("not a valid JSON Schema at {at}: {e}"))
    })?;
    match map.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None if map.contains_key("properties") => {}
        other => {
            return Err(invalid(format!(
                "tool arguments must be an object: expected `\"type\": \"object\"`, got {}",
                other.map_or_else(|| "no type".to_owned(), |t| format!("`{t}`"))
            )));
        }
    }
    #[cfg(feature = "validation")]
    compile(schema).map(|_| ()).map_err(invalid)?;
    Ok(())
}

/// Keywords whose constraint a serde `Deserialize` derive does not check.
const BEYOND_SERDE: &[&str] = &[
    "multipleOf",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "not",
    "if",
    "then",
    "else",
];

/// Whether deserializing into the type a schemars schema came from checks everything the schema
/// says, so a successful deserialization needs no JSON Schema validation (and the validator,
/// whose first compile loads the meta-schemas, about 3 MiB, need not exist). Conservative: any
/// keyword serde does not enforce, anywhere in the document (even as a property name), says no.
/// `minimum`/`maximum` pass only as the natural bounds schemars gives a Rust integer type.
pub(crate) fn serde_enforces(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if BEYOND_SERDE.contains(&key.as_str()) {
                    return false;
                }
                if (key == "minimum" || key == "maximum") && !integer_bound(map, key, value) {
                    return false;
                }
                if !serde_enforces(value) {
                    return false;
                }
            }
            true
        }
        Value::Array(items) => items.iter().all(serde_enforces),
        _ => true,
    }
}

/// `minimum`/`maximum` equal to the bound of the integer `format` schemars emitted beside it.
fn integer_bound(map: &Map<String, Value>, key: &str, value: &Value) -> bool {
    let Some(format) = map.get("format").and_then(Value::as_str) else {
        return false;
    };
    let (min, max): (i128, i128) = match format {
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX.into()),
        "uint128" => (0, i128::MAX),
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "int64" | "int" => (i64::MIN.into(), i64::MAX.into()),
        _ => return false,
    };
    let bound = if key == "minimum" { min } else { max };
    let found = value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from));
    found == Some(bound)
}

#[cfg(feature = "validation")]
pub(crate) fn compile(schema: &Value) -> std::result::Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

#[cfg(feature = "validation")]
pub(crate) fn violations(
    validator: &jsonschema::Validator,
    input: &Value,
) -> std::result::Result<(), Vec<Violation>> {
    let found: Vec<Violation> = validator
        .iter_errors(input)
        .map(|e| Violation {
            path: e.instance_path().to_string(),
            message: e.to_string(),
        })
        .collect();
    if found.is_empty() { Ok(()) } else { Err(found) }
}

/// Replace `$ref`s into `$defs`/`definitions` by the schemas they point to, for providers that
/// do not resolve references. Recursive references are left as they are (they cannot be
/// inlined); the definitions they need are kept.
pub fn inline_refs(schema: &Value) -> Value {
    let defs = collect_defs(schema);
    let mut out = schema.clone();
    let mut stack = Vec::new();
    let recursive = inline_in(&mut out, &defs, &mut stack);
    if let Value::Object(map) = &mut out
        && !recursive
    {
        map.shift_remove("$defs");
        map.shift_remove("definitions");
    }
    out
}

fn collect_defs(schema: &Value) -> Map<String, Value> {
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(found)) = schema.get(key) {
            for (name, def) in found {
                defs.insert(format!("#/{key}/{name}"), def.clone());
            }
        }
    }
    defs
}

/// Returns whether a recursive reference had to be kept.
fn inline_in(value: &mut Value, defs: &Map<String, Value>, stack: &mut Vec<String>) -> bool {
    let mut kept = false;
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref").cloned()
                && let Some(def) = defs.get(&target)
            {
                if stack.contains(&target) {
                    return true;
                }
                let mut replacement = def.clone();
                stack.push(target);
                kept |= inline_in(&mut replacement, defs, stack);
                stack.pop();
                map.shift_remove("$ref");
                if let Value::Object(rep) = replacement {
                    for (k, v) in rep {
                        map.entry(k).or_insert(v);
                    }
                }
                return kept;
            }
            for (key, child) in map.iter_mut() {
                if key == "$defs" || key == "definitions" {
                    continue;
                }
                kept |= inline_in(child, defs, stack);
            }
        }
        Value::Array(items) => {
            for item in items {
                kept |= inline_in(item, defs, stack);
            }
        }
        _ => {}
    }
    kept
}

/// Drop the `null`s a strict dialect sends for absent optional properties (OpenAI's strict
/// mode makes every property required and the optional ones nullable) where the schema itself
/// does not take `null` there, so the input is what the schema, and the tool behind it, expect.
pub(crate) fn drop_absent_nulls(schema: &Value, input: &mut Value) {
    let (Value::Object(map), Some(props)) =
        (input, schema.get("properties").and_then(Value::as_object))
    else {
        return;
    };
    let required = |name: &str| {
        schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|n| n == name))
    };
    map.retain(|name, value| {
        let Some(prop) = props.get(name) else {
            return true;
        };
        if value.is_null() {
            return required(name) || takes_null(prop);
        }
        drop_absent_nulls(prop, value);
        if let (Value::Array(items), Some(item)) = (value, prop.get("items")) {
            for value in items {
                drop_absent_nulls(item, value);
            }
        }
        true
    });
}

/// Whether a property's schema may take `null` (conservatively: yes unless it says a type).
fn takes_null(prop: &Value) -> bool {
    let types = |schema: &Value| match schema.get("type") {
        Some(Value::String(t)) => Some(t == "null"),
        Some(Value::Array(ts)) => Some(ts.iter().any(|t| t == "null")),
        _ => None,
    };
    if let Some(branches) = prop
        .get("anyOf")
        .or_else(|| prop.get("oneOf"))
        .and_then(Value::as_array)
    {
        return branches.iter().any(|b| types(b).unwrap_or(true));
    }
    if prop
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.contains(&Value::Null))
    {
        return false;
    }
    types(prop).unwrap_or(true)
}
