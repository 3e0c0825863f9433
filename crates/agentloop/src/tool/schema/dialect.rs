//! Schema dialects: one JSON Schema compiled to what each provider's tool and structured-output
//! schemas take.
//!
//! | dialect | where it goes | what it does |
//! | --- | --- | --- |
//! | [`openai_strict`] | OpenAI `strict: true` tools, `response_format` | every property required (optional ones nullable), objects closed, refs inlined (recursive ones kept) |
//! | [`anthropic_strict`] | Anthropic `strict: true` tools, `output_config.format` | objects closed, refs inlined, no recursion; numeric, length and count bounds left to our validation |
//! | [`gemini`] | Gemini `parametersJsonSchema`, `responseJsonSchema` | refs inlined (recursion refused), keywords outside Gemini's subset dropped, `oneOf` as `anyOf` |
//! | [`bedrock`] | Bedrock Converse `toolSpec.inputSchema.json` | refs inlined, `$schema` dropped; the root must be an object |
//!
//! The strict dialects either keep exactly what the schema accepts (Anthropic's: up to the
//! value bounds it refuses, which our validation checks) or fail with [`NotStrict`] (the
//! keyword and its path), and the provider then sends the tool non-strict with a `tracing`
//! warning. [`gemini`] and [`bedrock`] have no strict mode: what they drop, our own
//! validation (always against the original schema) still checks.

use serde_json::{Map, Value, json};

use super::inline_refs;

/// A provider's schema dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI's strict mode (Chat Completions and Responses).
    OpenAiStrict,
    /// Anthropic's strict tool use and structured outputs.
    AnthropicStrict,
    /// Gemini's JSON Schema subset.
    Gemini,
    /// Bedrock Converse's tool input schemas.
    Bedrock,
}

impl Dialect {
    /// Every dialect, in a fixed order.
    pub const ALL: [Dialect; 4] = [
        Dialect::OpenAiStrict,
        Dialect::AnthropicStrict,
        Dialect::Gemini,
        Dialect::Bedrock,
    ];

    /// Compile `schema` to this dialect: [`openai_strict`], [`anthropic_strict`], [`gemini`] or
    /// [`bedrock`], whose docs say what each keeps, drops or refuses.
    pub fn compile(self, schema: &Value) -> Result<Value, NotStrict> {
        match self {
            Dialect::OpenAiStrict => openai_strict(schema),
            Dialect::AnthropicStrict => anthropic_strict(schema),
            Dialect::Gemini => gemini(schema),
            Dialect::Bedrock => bedrock(schema),
        }
    }

    /// A short name (`openai_strict`, `anthropic_strict`, `gemini`, `bedrock`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::OpenAiStrict => "openai_strict",
            Dialect::AnthropicStrict => "anthropic_strict",
            Dialect::Gemini => "gemini",
            Dialect::Bedrock => "bedrock",
        }
    }

    fn target(self) -> &'static str {
        match self {
            Dialect::OpenAiStrict => "OpenAI's strict mode",
            Dialect::AnthropicStrict => "Anthropic's strict mode",
            Dialect::Gemini => "Gemini's schema subset",
            Dialect::Bedrock => "Bedrock's tool input schemas",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.target())
    }
}

/// Why a schema cannot go to a dialect without changing what it accepts: the keyword, and
/// where it is in the schema (a JSON pointer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{keyword}` at {path} has no equivalent in {dialect}")]
pub struct NotStrict {
    /// The keyword (`additionalProperties`, `allOf`, `minLength`, ...).
    pub keyword: String,
    /// Its JSON pointer in the schema (`""` is the root).
    pub path: String,
    /// The dialect that refused it.
    pub dialect: Dialect,
}

/// Keywords OpenAI's strict mode does not take, whose constraint would be lost without them.
const OPENAI_REFUSED: &[&str] = &[
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

/// Keywords Anthropic's strict mode refuses that change which shapes a schema takes: OpenAI's
/// list. Its value bounds are [`ANTHROPIC_RELAXED`].
const ANTHROPIC_REFUSED: &[&str] = &[
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
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
    "prefixItems",
];

/// Value bounds Anthropic's strict mode refuses
/// (platform.claude.com/docs/en/build-with-claude/structured-outputs, "JSON Schema
/// limitations": no numerical constraints, no string length constraints, array `minItems`
/// of 0 or 1 only): left out of the strict form, as Anthropic's SDKs do, because our own
/// validation checks answers and arguments against the original schema and sends a value out
/// of bounds back to the model. Without this every `u32` (`minimum: 0`) would cost the tool
/// its strictness. `minItems` is checked apart, by value.
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

/// String formats OpenAI's strict mode takes; others are dropped (a `format` is an annotation
/// in JSON Schema 2020-12, so dropping it accepts the same values).
const OPENAI_FORMATS: &[&str] = &[
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

/// String formats Anthropic's strict mode takes.
const ANTHROPIC_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// What a strict dialect refuses and how it closes objects.
struct Rules {
    dialect: Dialect,
    refused: &'static [&'static str],
    /// Value bounds left out rather than refused (our validation checks them).
    relaxed: &'static [&'static str],
    formats: &'static [&'static str],
    /// Every property required, optional ones made nullable (OpenAI); else `required` stays.
    all_required: bool,
}

const OPENAI: Rules = Rules {
    dialect: Dialect::OpenAiStrict,
    refused: OPENAI_REFUSED,
    relaxed: &[],
    formats: OPENAI_FORMATS,
    all_required: true,
};

const ANTHROPIC: Rules = Rules {
    dialect: Dialect::AnthropicStrict,
    refused: ANTHROPIC_REFUSED,
    relaxed: ANTHROPIC_RELAXED,
    formats: ANTHROPIC_FORMATS,
    all_required: false,
};

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
pub fn openai_strict(schema: &Value) -> Result<Value, NotStrict> {
    strict(schema, &OPENAI)
}

/// Compile a schema to Anthropic's strict dialect (strict tools, `output_config.format`):
/// `$ref`s inlined, every object closed (`additionalProperties: false`) with `required` as it
/// was, a `oneOf` whose branches a constant property tells apart turned into `anyOf`, number
/// formats and unknown string formats dropped, and the value bounds Anthropic refuses left
/// out (`minimum`, `multipleOf`, `minLength`, `maxItems`, `minItems` above 1, ...): the strict
/// form then takes values out of those bounds, which our validation, always against the
/// original schema, sends back to the model.
///
/// Fails, naming the keyword and its path, where Anthropic would refuse the schema or accept
/// other shapes: a recursive `$ref`, a map or an object without `properties`, a root that is
/// not an object, `allOf`, `uniqueItems` and the other keywords OpenAI's strict mode refuses
/// too. Send such a schema non-strict.
pub fn anthropic_strict(schema: &Value) -> Result<Value, NotStrict> {
    let out = strict(schema, &ANTHROPIC)?;
    if let Some(path) = find_ref(&out, "") {
        return Err(NotStrict {
            keyword: "$ref".into(),
            path,
            dialect: Dialect::AnthropicStrict,
        });
    }
    Ok(out)
}

fn strict(schema: &Value, rules: &Rules) -> Result<Value, NotStrict> {
    let mut out = inline_refs(schema);
    if let Value::Object(map) = &mut out {
        map.shift_remove("$schema");
        for keyword in ["anyOf", "oneOf"] {
            if map.contains_key(keyword) {
                return Err(NotStrict {
                    keyword: keyword.to_owned(),
                    path: String::new(),
                    dialect: rules.dialect,
                });
            }
        }
    }
    make_strict(&mut out, "", rules)?;
    Ok(out)
}

/// The path of the first `$ref` left in a schema (a recursive one `inline_refs` kept).
fn find_ref(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(map) => {
            if map.contains_key("$ref") {
                return Some(pointer(path, "$ref"));
            }
            map.iter()
                .filter(|(key, _)| *key != "$defs" && *key != "definitions")
                .find_map(|(key, child)| find_ref(child, &pointer(path, key)))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_ref(item, &pointer(path, &i.to_string()))),
        _ => None,
    }
}

/// `path` joined with one reference token, escaped as JSON pointers want.
fn pointer(path: &str, token: &str) -> String {
    format!("{path}/{}", token.replace('~', "~0").replace('/', "~1"))
}

fn make_strict(value: &mut Value, path: &str, rules: &Rules) -> Result<(), NotStrict> {
    let Value::Object(map) = value else {
        return Ok(());
    };
    let refuse = |keyword: &str| NotStrict {
        keyword: keyword.to_owned(),
        path: pointer(path, keyword),
        dialect: rules.dialect,
    };
    if let Some(keyword) = rules.refused.iter().find(|k| map.contains_key(**k)) {
        return Err(refuse(keyword));
    }
    for keyword in rules.relaxed {
        map.shift_remove(*keyword);
    }
    if rules.dialect == Dialect::AnthropicStrict
        && map
            .get("minItems")
            .is_some_and(|n| n.as_u64().is_none_or(|n| n > 1))
    {
        map.shift_remove("minItems");
    }
    if let Some(Value::Array(branches)) = map.get("oneOf") {
        if !told_apart(branches) {
            return Err(refuse("oneOf"));
        }
        // At most one branch matches either way, so `anyOf` accepts the same.
        if let Some(branches) = map.shift_remove("oneOf") {
            map.insert("anyOf".into(), branches);
        }
    }
    if rules.dialect == Dialect::OpenAiStrict {
        map.shift_remove("default");
    }
    // Strict modes take `format` on strings only, from their own list; schemars gives every
    // Rust number one ("uint8", "double").
    let kind = map.get("type");
    let number = has_type(kind, "integer") || has_type(kind, "number");
    let unknown_format = map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !rules.formats.contains(&f));
    if number || unknown_format {
        map.shift_remove("format");
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            make_strict(prop, &pointer(&pointer(path, "properties"), name), rules)?;
        }
    }
    for keyword in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(keyword) {
            for (name, def) in defs.iter_mut() {
                make_strict(def, &pointer(&pointer(path, keyword), name), rules)?;
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        make_strict(items, &pointer(path, "items"), rules)?;
    }
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        for (i, branch) in branches.iter_mut().enumerate() {
            make_strict(
                branch,
                &pointer(&pointer(path, "anyOf"), &i.to_string()),
                rules,
            )?;
        }
    }
    // Last, so that paths in errors point into the schema as written, not into the nullable
    // wrappers closing adds.
    if has_type(map.get("type"), "object") || map.contains_key("properties") {
        close_object(map, path, rules)?;
    }
    Ok(())
}

/// Close an object schema: no properties but its own (and, for OpenAI, every property
/// required, optional ones nullable).
fn close_object(map: &mut Map<String, Value>, path: &str, rules: &Rules) -> Result<(), NotStrict> {
    match map.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        // A map, or an object open to any property: closing it would refuse what it accepts.
        Some(_) => {
            return Err(NotStrict {
                keyword: "additionalProperties".into(),
                path: pointer(path, "additionalProperties"),
                dialect: rules.dialect,
            });
        }
    }
    if !map.contains_key("properties") {
        // `{"type": "object"}` takes any object; closed, it would take only `{}`.
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(NotStrict {
                keyword: "type".into(),
                path: pointer(path, "type"),
                dialect: rules.dialect,
            });
        }
        map.insert("properties".into(), Value::Object(Map::new()));
    }
    if rules.all_required {
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
    let null_schema = json!({"type": "null"});
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
            map.insert("type".into(), json!([t, "null"]));
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

/// The keywords Gemini's `responseJsonSchema` and `parametersJsonSchema` take (Gemini API
/// reference, `GenerationConfig.responseJsonSchema`: "only the following properties are
/// supported"); `$ref`s are inlined first, so the `$`-keywords are not needed.
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

/// The `format`s Gemini knows (`Schema.format`: float and double for numbers, int32 and int64
/// for integers, date-time, date, time and enum for strings); others are dropped.
const GEMINI_FORMATS: &[&str] = &[
    "float",
    "double",
    "int32",
    "int64",
    "date-time",
    "date",
    "time",
    "enum",
];

/// Compile a schema to Gemini's subset: `$ref`s inlined, `oneOf` sent as `anyOf` (which Gemini
/// reads it as), `const` as a one-value `enum`, the branches of an `allOf` of objects merged
/// into one object, formats it does not know and every other keyword outside the subset
/// dropped (`pattern`, `minLength`, `default`, ...). The result accepts at least what the schema accepts; our own
/// validation still checks the original.
///
/// Fails on a recursive `$ref` (Gemini unrolls cycles only a little way, and only through
/// optional properties) and on an `allOf` that does not merge; say the shape without them.
pub fn gemini(schema: &Value) -> Result<Value, NotStrict> {
    let out = inline_refs(schema);
    if let Some(path) = find_ref(&out, "") {
        return Err(NotStrict {
            keyword: "$ref".into(),
            path,
            dialect: Dialect::Gemini,
        });
    }
    gemini_subset(&out, "")
}

fn gemini_subset(value: &Value, path: &str) -> Result<Value, NotStrict> {
    let Value::Object(map) = value else {
        return Ok(value.clone());
    };
    let mut map = map.clone();
    if let Some(Value::Array(branches)) = map.shift_remove("allOf") {
        for (i, branch) in branches.iter().enumerate() {
            merge_object(&mut map, branch).ok_or_else(|| NotStrict {
                keyword: "allOf".into(),
                path: pointer(&pointer(path, "allOf"), &i.to_string()),
                dialect: Dialect::Gemini,
            })?;
        }
    }
    if let Some(branches) = map.shift_remove("oneOf") {
        map.entry("anyOf").or_insert(branches);
    }
    if let Some(value) = map.shift_remove("const") {
        map.entry("enum").or_insert(json!([value]));
    }
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !GEMINI_FORMATS.contains(&f))
    {
        map.shift_remove("format");
    }
    let mut out = Map::new();
    for (key, child) in map {
        if !GEMINI_KEYWORDS.contains(&key.as_str()) {
            continue;
        }
        let at = pointer(path, &key);
        let child = match (key.as_str(), child) {
            ("properties", Value::Object(props)) => Value::Object(
                props
                    .into_iter()
                    .map(|(name, prop)| {
                        let prop = gemini_subset(&prop, &pointer(&at, &name))?;
                        Ok((name, prop))
                    })
                    .collect::<Result<_, NotStrict>>()?,
            ),
            ("anyOf" | "prefixItems", Value::Array(branches)) => Value::Array(
                branches
                    .iter()
                    .enumerate()
                    .map(|(i, b)| gemini_subset(b, &pointer(&at, &i.to_string())))
                    .collect::<Result<_, _>>()?,
            ),
            ("items" | "additionalProperties", child @ Value::Object(_)) => {
                gemini_subset(&child, &at)?
            }
            (_, child) => child,
        };
        out.insert(key, child);
    }
    Ok(Value::Object(out))
}

/// Merge an `allOf` branch that only adds object keywords into `map`; `None` when it says
/// something a merge cannot keep (a different `type`, a conflicting property).
fn merge_object(map: &mut Map<String, Value>, branch: &Value) -> Option<()> {
    let branch = branch.as_object()?;
    for (key, value) in branch {
        match key.as_str() {
            "type" if map.get("type").is_none_or(|t| t == value) => {
                map.insert(key.clone(), value.clone());
            }
            "properties" => {
                let props = map
                    .entry("properties")
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()?;
                for (name, prop) in value.as_object()? {
                    if props.get(name).is_some_and(|p| p != prop) {
                        return None;
                    }
                    props.insert(name.clone(), prop.clone());
                }
            }
            "required" => {
                let required = map
                    .entry("required")
                    .or_insert_with(|| Value::Array(Vec::new()))
                    .as_array_mut()?;
                for name in value.as_array()? {
                    if !required.contains(name) {
                        required.push(name.clone());
                    }
                }
            }
            "description" | "title" => {}
            _ => return None,
        }
    }
    Some(())
}

/// Compile a schema for Bedrock Converse (`toolConfig.tools[].toolSpec.inputSchema.json`):
/// a plain JSON Schema object that Bedrock hands to the model behind it, so `$ref`s are
/// inlined (recursive ones kept with their `$defs`: the Anthropic models resolve local refs,
/// others may not) and `$schema` dropped. Fails when the root is not an object schema, which
/// the Converse reference requires of a tool's input.
pub fn bedrock(schema: &Value) -> Result<Value, NotStrict> {
    let mut out = inline_refs(schema);
    let Value::Object(map) = &mut out else {
        return Err(NotStrict {
            keyword: "type".into(),
            path: String::new(),
            dialect: Dialect::Bedrock,
        });
    };
    map.shift_remove("$schema");
    let object = match map.get("type") {
        Some(t) => t == "object",
        None => map.contains_key("properties"),
    };
    if !object {
        return Err(NotStrict {
            keyword: "type".into(),
            path: "/type".into(),
            dialect: Dialect::Bedrock,
        });
    }
    Ok(out)
}
