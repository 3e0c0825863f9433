//! OpenAI's strict dialect: a table of schemas compiled to the strict form, each checked in
//! under `tests/golden/openai_strict/` (`UPDATE_GOLDEN=1` rewrites them), and the fallback to
//! non-strict, with a warning naming the tool, the keyword and its path, for schemas that
//! cannot be made strict without changing what they accept.
//!
//! The strict subset relied on is OpenAI's Structured Outputs guide, "Supported schemas"
//! (platform.openai.com/docs/guides/structured-outputs#supported-schemas): every property in
//! `required` (optional ones nullable), `additionalProperties: false` on every object,
//! `anyOf` (not at the root), `$defs`/`$ref` with recursion, `enum`/`const`; strings' `pattern`
//! and the formats date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid;
//! numbers' `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`/`multipleOf`; arrays'
//! `minItems`/`maxItems`. Not supported: `allOf`, `not`, `if`/`then`/`else`,
//! `dependentRequired`, `dependentSchemas`, `patternProperties`, `unevaluatedProperties`,
//! `propertyNames`, `minProperties`, `maxProperties`, `minLength`, `maxLength`, `contains`,
//! `uniqueItems`, `unevaluatedItems`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::{OpenAi, Preset};
use agentloop::tool::schema::{Dialect, NotStrict, openai_strict};
use agentloop::{FunctionDefinition, Message, Request, ToolDefinition};
use serde_json::{Value, json};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/openai_strict");

mod schema_table;

use schema_table::{schema_of, table, types};

/// What the golden files hold: the compiled schema, or why there is none.
fn compiled(schema: &Value) -> Value {
    match openai_strict(schema) {
        Ok(strict) => json!({"strict": strict}),
        Err(NotStrict { keyword, path, .. }) => {
            json!({"not_strict": {"keyword": keyword, "path": path}})
        }
    }
}

#[test]
fn the_table_compiles_to_the_golden_strict_schemas() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    for (name, schema) in table() {
        let path = format!("{GOLDEN}/{name}.json");
        let actual = json!({"schema": schema, "compiled": compiled(&schema)});
        if update {
            let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let expected: Value = serde_json::from_str(&text).unwrap();
        if expected != actual {
            mismatched.push(format!("{name}:\n{actual:#}"));
        }
    }
    assert!(mismatched.is_empty(), "{}", mismatched.join("\n\n"));
}

#[test]
fn maps_keep_their_values_schema_and_refuse_strict() {
    // The bug: strict shaping overwrote a map's `additionalProperties` with false, so the only
    // map the model could send was `{}`.
    let schema = schema_of::<types::Maps>();
    assert_eq!(
        openai_strict(&schema),
        Err(NotStrict {
            keyword: "additionalProperties".into(),
            path: "/properties/counts/additionalProperties".into(),
            dialect: Dialect::OpenAiStrict,
        })
    );
}

#[test]
fn a_tagged_union_becomes_any_of_since_its_tags_tell_the_branches_apart() {
    let strict = openai_strict(&schema_of::<types::Tagged>()).unwrap();
    let shape = &strict["properties"]["shape"];
    assert!(shape.get("oneOf").is_none(), "{shape:#}");
    assert_eq!(shape["anyOf"].as_array().unwrap().len(), 2, "{shape:#}");
}

/// Held by the tests that make the strict-fallback warning: `tracing` caches whether a
/// callsite is wanted when it is first hit, and a test hitting it with no subscriber while
/// another installs its own can leave it cached as unwanted.
static WARNING_CALLSITE: Mutex<()> = Mutex::new(());

/// Captures what `tracing` writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_tool_that_cannot_be_strict_is_sent_non_strict_with_a_warning() {
    let _serial = WARNING_CALLSITE.lock().unwrap_or_else(|e| e.into_inner());
    let schema = schema_of::<types::Maps>();
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.tools = vec![ToolDefinition::from(FunctionDefinition {
        name: "count_words".into(),
        description: String::new(),
        input_schema: schema,
        strict: true,
    })];
    let mut config = HttpConfig::new("http://127.0.0.1:9/v1");
    config.api_key = Some(ApiKey::new("sk-test"));
    let openai = OpenAi::from_preset(Preset::OpenAi, config).unwrap();

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .finish();
    let bytes = tracing::subscriber::with_default(subscriber, || {
        openai.request_body(&request, false).unwrap()
    });
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "count_words", "parameters": {
            "type": "object",
            "properties": {
                "counts": {
                    "type": "object",
                    "additionalProperties": {"type": "integer", "format": "uint32", "minimum": 0}
                }
            },
            "required": ["counts"],
            "title": "Maps"
        }}})
    );
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("WARN")
            && log.contains("tool=\"count_words\"")
            && log.contains("keyword=\"additionalProperties\"")
            && log.contains("path=\"/properties/counts/additionalProperties\""),
        "{log}"
    );
}

#[test]
fn a_response_format_that_cannot_be_strict_is_sent_non_strict() {
    let _serial = WARNING_CALLSITE.lock().unwrap_or_else(|e| e.into_inner());
    let mut request = Request::new("gpt-4.1", vec![Message::user("hi")]);
    request.output = Some(Box::new(agentloop::OutputFormat {
        name: "counts".into(),
        schema: json!({"type": "object", "additionalProperties": {"type": "integer"}}),
        strict: true,
    }));
    let openai = OpenAi::from_preset(Preset::OpenAi, {
        let mut config = HttpConfig::new("http://127.0.0.1:9/v1");
        config.api_key = Some(ApiKey::new("sk-test"));
        config
    })
    .unwrap();
    let body: Value =
        serde_json::from_slice(&openai.request_body(&request, false).unwrap()).unwrap();
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {
            "name": "counts",
            "schema": {"type": "object", "additionalProperties": {"type": "integer"}}
        }})
    );
}
