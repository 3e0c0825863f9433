//! Every schema of the table (`schema_table/`) compiled to the Anthropic strict, Gemini and
//! Bedrock dialects, each checked in under `tests/golden/<dialect>_schema/` (`UPDATE_GOLDEN=1`
//! rewrites them); OpenAI's strict dialect has its own directory (`openai_strict.rs`).
//!
//! References relied on:
//! - Anthropic: platform.claude.com/docs/en/build-with-claude/structured-outputs, "JSON Schema
//!   limitations": `additionalProperties: false` on objects, local `$ref`/`$defs` but no
//!   recursive schemas, no numerical constraints (`minimum`, `maximum`, `multipleOf`), no
//!   string length constraints, array `minItems` of 0 or 1 only, string formats date-time,
//!   time, date, duration, email, hostname, uri, ipv4, ipv6, uuid; the same page's SDK
//!   section: the SDKs remove those constraints and validate the response against the
//!   original schema, as our own validation does.
//! - Gemini: ai.google.dev/api/generate-content, `GenerationConfig.responseJsonSchema` (and
//!   `FunctionDeclaration.parametersJsonSchema`): only `$id`, `$defs`, `$ref`, `$anchor`,
//!   `type`, `format`, `title`, `description`, `enum`, `items`, `prefixItems`, `minItems`,
//!   `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf` (read as `anyOf`), `properties`,
//!   `additionalProperties`, `required` and `propertyOrdering`; cycles unrolled only a little.
//! - Bedrock: docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ToolInputSchema.html,
//!   `json`: "The JSON schema for the tool", an object schema for the tool's input.

mod schema_table;

use agentloop::tool::schema::{Dialect, NotStrict};
use serde_json::{Value, json};

use schema_table::table;

fn dir(dialect: Dialect) -> String {
    format!(
        "{}/tests/golden/{}_schema",
        env!("CARGO_MANIFEST_DIR"),
        dialect.name().trim_end_matches("_strict")
    )
}

/// What the golden files hold: the compiled schema, or why there is none.
fn compiled(dialect: Dialect, schema: &Value) -> Value {
    match dialect.compile(schema) {
        Ok(compiled) => json!({"ok": compiled}),
        Err(NotStrict { keyword, path, .. }) => {
            json!({"refused": {"keyword": keyword, "path": path}})
        }
    }
}

#[test]
fn the_table_compiles_to_the_golden_schemas_of_every_dialect() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    let dialects = [Dialect::AnthropicStrict, Dialect::Gemini, Dialect::Bedrock];
    for dialect in dialects {
        let dir = dir(dialect);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, schema) in table() {
            let path = format!("{dir}/{name}.json");
            let actual = json!({"schema": schema, "compiled": compiled(dialect, &schema)});
            if update {
                let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
                std::fs::write(&path, text).unwrap();
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let expected: Value = serde_json::from_str(&text).unwrap();
            if expected != actual {
                mismatched.push(format!("{path}:\n{actual:#}"));
            }
        }
    }
    assert!(mismatched.is_empty(), "{}", mismatched.join("\n\n"));
}

#[test]
fn recursion_is_refused_by_anthropic_and_gemini_with_its_path() {
    let schema = schema_table::schema_of::<schema_table::types::Node>();
    for dialect in [Dialect::AnthropicStrict, Dialect::Gemini] {
        let err = dialect.compile(&schema).unwrap_err();
        assert_eq!(err.keyword, "$ref", "{dialect:?}");
        assert_eq!(err.path, "/properties/children/items/$ref", "{dialect:?}");
        assert_eq!(
            err.to_string(),
            format!("`$ref` at /properties/children/items/$ref has no equivalent in {dialect}")
        );
    }
    // OpenAI's strict mode and Bedrock keep recursive references.
    assert!(Dialect::OpenAiStrict.compile(&schema).is_ok());
    let bedrock = Dialect::Bedrock.compile(&schema).unwrap();
    assert_eq!(
        bedrock["properties"]["children"]["items"],
        json!({"$ref": "#"})
    );
}

#[test]
fn anthropic_stays_strict_for_unsigned_and_bounded_fields_by_leaving_bounds_to_our_checks() {
    let optional = schema_table::schema_of::<schema_table::types::Optional>();
    // `days: Option<u32>` carries `minimum: 0`, which Anthropic's strict mode refuses; our
    // validation (the original schema) still enforces it, so only the bound is left out.
    let strict = Dialect::AnthropicStrict.compile(&optional).unwrap();
    assert_eq!(
        strict["properties"]["days"],
        json!({"type": ["integer", "null"]})
    );
    assert_eq!(strict["additionalProperties"], json!(false));
    let bounded = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 80},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 5},
            "one": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "multipleOf": 0.5},
            "minimum": {"type": "integer", "minimum": 3}
        },
        "required": ["name"]
    });
    assert_eq!(
        Dialect::AnthropicStrict.compile(&bounded).unwrap(),
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "one": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "score": {"type": "number"},
                "minimum": {"type": "integer"}
            },
            "required": ["name"],
            "additionalProperties": false
        })
    );
    // What changes the shape, not a value's range, still sends the schema non-strict.
    let unique = json!({"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true}
    }});
    assert_eq!(
        Dialect::AnthropicStrict.compile(&unique).unwrap_err().path,
        "/properties/ids/uniqueItems"
    );
    let place = schema_table::schema_of::<schema_table::types::Place>();
    let strict = Dialect::AnthropicStrict.compile(&place).unwrap();
    assert_eq!(strict["required"], json!(["city"]));
    assert_eq!(strict["additionalProperties"], json!(false));
}
