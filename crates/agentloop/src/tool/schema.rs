//! JSON Schema: generation from Rust types, checking, validation of arguments, and shaping
//! for providers that accept only part of the standard.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

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

/// Why a schema cannot go to OpenAI in strict mode without changing what it accepts: the
/// keyword, and where it is in the schema (a JSON pointer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{keyword}` at {path} has no equivalent in OpenAI's strict mode")]
pub struct NotStrict {
    /// The keyword (`additionalProperties`, `allOf`, `minLength`, ...).
    pub keyword: String,
    /// Its JSON pointer in the schema (`""` is the root).
    pub path: String,
}

/// Keywords OpenAI's strict mode does not take, whose constraint would be lost without them.
const NOT_STRICT: &[&str] = &[
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
    "prefixItems",
];

/// String formats strict mode takes; others are dropped (a `format` is an annotation in JSON
/// Schema 2020-12, so dropping it accepts the same values).
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Compile a schema to OpenAI's strict dialect: `$ref`s inlined (recursive ones kept with
/// their `$defs`), every object closed (`additionalProperties: false`) with all its
/// properties required, the optional ones made nullable, a `oneOf` whose branches a constant
/// property tells apart turned into `anyOf`, and annotations strict mode refuses dropped
/// (`default`, number formats, string formats it does not know).
///
/// Fails, naming the keyword and its path, when strict mode would change what the schema
/// accepts: a map (`additionalProperties` with a schema), an object without `properties`, a
/// root that is not an object, or a keyword strict mode does not take (`allOf`, `minLength`,
/// `patternProperties`, ...). Send such a schema non-strict.
pub fn openai_strict(schema: &Value) -> std::result::Result<Value, NotStrict> {
    let mut out = inline_refs(schema);
    if let Value::Object(map) = &mut out {
        map.shift_remove("$schema");
        for keyword in ["anyOf", "oneOf"] {
            if map.contains_key(keyword) {
                return Err(NotStrict {
                    keyword: keyword.to_owned(),
                    path: String::new(),
                });
            }
        }
    }
    make_strict(&mut out, "")?;
    Ok(out)
}

/// `path` joined with one reference token, escaped as JSON pointers want.
fn pointer(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

fn make_strict(value: &mut Value, path: &str) -> std::result::Result<(), NotStrict> {
    let Value::Object(map) = value else {
        return Ok(());
    };
    if let Some(keyword) = NOT_STRICT.iter().find(|k| map.contains_key(**k)) {
        return Err(NotStrict {
            keyword: (*keyword).to_owned(),
            path: pointer(path, keyword),
        });
    }
    if let Some(Value::Array(branches)) = map.get("oneOf") {
        if !told_apart(branches) {
            return Err(NotStrict {
                keyword: "oneOf".into(),
                path: pointer(path, "oneOf"),
            });
        }
        // At most one branch matches either way, so `anyOf` accepts the same.
        if let Some(branches) = map.shift_remove("oneOf") {
            map.insert("anyOf".into(), branches);
        }
    }
    map.shift_remove("default");
    // Strict mode takes `format` on strings only, from its own list; schemars gives every
    // Rust number one ("uint8", "double").
    let kind = map.get("type");
    let number = has_type(kind, "integer") || has_type(kind, "number");
    let unknown_format = map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STRICT_FORMATS.contains(&f));
    if number || unknown_format {
        map.shift_remove("format");
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            make_strict(prop, &pointer(&pointer(path, "properties"), name))?;
        }
    }
    for keyword in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(keyword) {
            for (name, def) in defs.iter_mut() {
                make_strict(def, &pointer(&pointer(path, keyword), name))?;
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        make_strict(items, &pointer(path, "items"))?;
    }
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        for (i, branch) in branches.iter_mut().enumerate() {
            make_strict(branch, &pointer(&pointer(path, "anyOf"), &i.to_string()))?;
        }
    }
    // Last, so that paths in errors point into the schema as written, not into the nullable
    // wrappers closing adds.
    if has_type(map.get("type"), "object") || map.contains_key("properties") {
        close_object(map, path)?;
    }
    Ok(())
}

/// Close an object schema: every property required (optional ones nullable) and no others.
fn close_object(map: &mut Map<String, Value>, path: &str) -> std::result::Result<(), NotStrict> {
    match map.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        // A map, or an object open to any property: closing it would refuse what it accepts.
        Some(_) => {
            return Err(NotStrict {
                keyword: "additionalProperties".into(),
                path: pointer(path, "additionalProperties"),
            });
        }
    }
    if !map.contains_key("properties") {
        // `{"type": "object"}` takes any object; closed, it would take only `{}`.
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(NotStrict {
                keyword: "type".into(),
                path: pointer(path, "type"),
            });
        }
        map.insert("properties".into(), Value::Object(Map::new()));
    }
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if !required.contains(name) {
                make_nullable(prop);
            }
        }
        let all: Vec<Value> = props.keys().cloned().map(Value::String).collect();
        map.insert("required".into(), Value::Array(all));
    }
    map.insert("additionalProperties".into(), Value::Bool(false));
    Ok(())
}

/// Whether every branch is an object that one required property, constant in each, tells
/// apart from the others (a serde tagged enum).
fn told_apart(branches: &[Value]) -> bool {
    let constant = |branch: &Value, name: &str| -> Option<Value> {
        let required = branch.get("required")?.as_array()?;
        if !required.iter().any(|r| r == name) {
            return None;
        }
        let prop = branch.get("properties")?.get(name)?;
        match (
            prop.get("const"),
            prop.get("enum").and_then(Value::as_array),
        ) {
            (Some(value), _) => Some(value.clone()),
            (None, Some(values)) if values.len() == 1 => values.first().cloned(),
            _ => None,
        }
    };
    let Some(first) = branches
        .first()
        .and_then(|b| b.get("properties")?.as_object())
    else {
        return false;
    };
    first.keys().any(|name| {
        let tags: Option<Vec<Value>> = branches.iter().map(|b| constant(b, name)).collect();
        tags.is_some_and(|tags| {
            tags.iter()
                .enumerate()
                .all(|(i, tag)| !tags[..i].contains(tag))
        })
    })
}

/// Whether a schema's `type` is `kind` (or a list holding it).
fn has_type(kind: Option<&Value>, wanted: &str) -> bool {
    match kind {
        Some(Value::Array(types)) => types.iter().any(|t| t == wanted),
        Some(t) => t == wanted,
        None => false,
    }
}

/// Let an optional property also be `null`, which strict mode sends for "absent".
fn make_nullable(prop: &mut Value) {
    let Value::Object(map) = prop else { return };
    let null_schema = serde_json::json!({"type": "null"});
    if has_type(map.get("type"), "null")
        || map
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.contains(&null_schema))
    {
        return;
    }
    // A constant or an enumeration would refuse the null a wider `type` lets in.
    let constrained = map.contains_key("enum") || map.contains_key("const");
    match map.get_mut("type") {
        Some(Value::String(t)) if !constrained => {
            let t = std::mem::take(t);
            map.insert("type".into(), serde_json::json!([t, "null"]));
        }
        Some(Value::Array(types)) if !constrained => {
            types.push(Value::String("null".into()));
        }
        _ => {
            let inner = std::mem::take(map);
            map.insert(
                "anyOf".into(),
                Value::Array(vec![Value::Object(inner), null_schema]),
            );
        }
    }
}
