//! The table of schemas every dialect is compiled from (tests/golden/openai_strict/ and
//! tests/golden/<dialect>_schema/): Rust types through schemars, hand-written shapes, and real
//! MCP tool schemas.

#![allow(dead_code)]

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[allow(dead_code)]
pub mod types {
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    pub struct Optional {
        pub city: String,
        pub days: Option<u32>,
        #[serde(default)]
        pub note: String,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Place {
        pub city: String,
        pub country: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Nested {
        pub from: Place,
        pub to: Vec<Place>,
    }

    #[derive(Deserialize, JsonSchema)]
    pub enum Unit {
        Celsius,
        Fahrenheit,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Enums {
        pub unit: Unit,
        pub fallback: Option<Unit>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    pub enum Shape {
        Circle { radius: f64 },
        Square { side: f64 },
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Tagged {
        pub shape: Shape,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Maps {
        pub counts: std::collections::HashMap<String, u32>,
    }

    #[derive(Deserialize, JsonSchema)]
    pub struct Node {
        pub name: String,
        pub children: Vec<Node>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Closed {
        pub id: String,
    }
}

pub fn schema_of<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The table: name → schema.
pub fn table() -> BTreeMap<&'static str, Value> {
    use types::*;
    BTreeMap::from([
        ("optional_fields", schema_of::<Optional>()),
        ("nested_structs", schema_of::<Nested>()),
        ("enums", schema_of::<Enums>()),
        ("tagged_union", schema_of::<Tagged>()),
        ("map", schema_of::<Maps>()),
        ("recursive", schema_of::<Node>()),
        ("closed", schema_of::<Closed>()),
        (
            "formats_pattern_minimum",
            json!({"type": "object", "properties": {
                "when": {"type": "string", "format": "date-time"},
                "site": {"type": "string", "format": "uri"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "count": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 9}
            }, "required": ["when", "site", "code", "count"]}),
        ),
        (
            "any_of",
            json!({"type": "object", "properties": {
                "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
            }, "required": ["id"]}),
        ),
        (
            "one_of_overlapping",
            json!({"type": "object", "properties": {
                "id": {"oneOf": [{"type": "string"}, {"type": "string", "pattern": "^a"}]}
            }, "required": ["id"]}),
        ),
        (
            "all_of",
            json!({"type": "object", "properties": {
                "p": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]}
            }}),
        ),
        (
            "ref_chain",
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
            "$defs": {
                "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                "B": {"type": "object", "properties": {"c": {"$ref": "#/$defs/C"}}},
                "C": {"type": "string", "enum": ["x", "y"]}
            }}),
        ),
        (
            "free_form_object",
            json!({"type": "object", "properties": {"meta": {"type": "object"}}}),
        ),
        (
            "min_length",
            json!({"type": "object", "properties": {"name": {"type": "string", "minLength": 1}}}),
        ),
        (
            "pattern_properties",
            json!({"type": "object", "properties": {}, "patternProperties": {"^x-": {"type": "string"}}}),
        ),
        (
            "unique_items",
            json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}}),
        ),
        (
            "root_any_of",
            json!({"anyOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}},
                {"type": "object", "properties": {"b": {"type": "string"}}}
            ]}),
        ),
        // `@modelcontextprotocol/server-everything`'s `annotatedMessage` tool: its zod schema
        // (src/everything/everything.ts, `AnnotatedMessageSchema`) as `zodToJsonSchema` sends
        // it in tools/list.
        (
            "mcp_everything_annotated_message",
            json!({
                "type": "object",
                "properties": {
                    "messageType": {
                        "type": "string",
                        "enum": ["error", "success", "debug"],
                        "description": "Type of message to demonstrate different annotation patterns"
                    },
                    "includeImage": {
                        "type": "boolean",
                        "default": false,
                        "description": "Whether to include an example image"
                    }
                },
                "required": ["messageType"],
                "additionalProperties": false,
                "$schema": "http://json-schema.org/draft-07/schema#"
            }),
        ),
        // `@modelcontextprotocol/server-filesystem`'s `edit_file` tool (src/filesystem/index.ts,
        // `EditFileArgsSchema` with its `EditOperation` items), as `zodToJsonSchema` sends it.
        (
            "mcp_filesystem_edit_file",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "edits": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "oldText": {
                                    "type": "string",
                                    "description": "Text to search for - must match exactly"
                                },
                                "newText": {
                                    "type": "string",
                                    "description": "Text to replace with"
                                }
                            },
                            "required": ["oldText", "newText"],
                            "additionalProperties": false
                        }
                    },
                    "dryRun": {
                        "type": "boolean",
                        "default": false,
                        "description": "Preview changes using git-style diff format"
                    }
                },
                "required": ["path", "edits"],
                "additionalProperties": false,
                "$schema": "http://json-schema.org/draft-07/schema#"
            }),
        ),
    ])
}
