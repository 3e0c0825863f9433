//! The message model and tool definitions: serde round trips, helpers, schemas, typed parsing.

use agentloop::{
    ContentBlock, Error, ImageSource, Message, Response, Role, StopReason, Tool, ToolCall,
    ToolResult, ToolResultContent, Usage,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

mod common;

#[test]
fn a_history_round_trips_through_json_unchanged() {
    let mut request = common::canonical_request();
    request.messages.push(Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: Some("sig".into()),
                provider: Some("anthropic".into()),
            },
            ContentBlock::RedactedThinking {
                data: "opaque".into(),
                provider: Some("anthropic".into()),
            },
            ContentBlock::Native {
                provider: "anthropic".into(),
                value: json!({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "x"}}),
            },
            ContentBlock::image_url("https://example.com/a.png"),
            ContentBlock::ToolUse {
                id: "bad".into(),
                name: "t".into(),
                input: json!("{not json"),
            },
        ],
    ));
    request
        .messages
        .push(Message::tool_results([ToolResult::blocks(
            "bad",
            vec![
                ContentBlock::text("a"),
                ContentBlock::image_base64("image/png", "AAAA"),
            ],
        )]));
    let text = serde_json::to_string(&request.messages).unwrap();
    let back: Vec<Message> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, request.messages);
    let full = serde_json::to_string(&request).unwrap();
    assert_eq!(
        serde_json::from_str::<agentloop::Request>(&full).unwrap(),
        request
    );
}

#[test]
fn content_blocks_serialize_in_the_documented_shape() {
    assert_eq!(
        serde_json::to_value(ContentBlock::ToolUse {
            id: "c1".into(),
            name: "f".into(),
            input: json!({"a": 1}),
        })
        .unwrap(),
        json!({"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}})
    );
    assert_eq!(
        serde_json::to_value(ContentBlock::ToolResult(ToolResult::error("c1", "bad"))).unwrap(),
        json!({"type": "tool_result", "tool_use_id": "c1", "content": "bad", "is_error": true})
    );
    assert_eq!(
        serde_json::to_value(ContentBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "AA".into()
            }
        })
        .unwrap(),
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}})
    );
    assert_eq!(
        serde_json::to_value(StopReason::Other("pause_turn".into())).unwrap(),
        json!("pause_turn")
    );
    assert_eq!(
        serde_json::from_value::<StopReason>(json!("tool_use")).unwrap(),
        StopReason::ToolUse
    );
}

#[test]
fn usage_adds_up() {
    let a = Usage {
        input_tokens: 1,
        output_tokens: 2,
        cache_read_tokens: 3,
        cache_write_tokens: 4,
        reasoning_tokens: 0,
    };
    let mut b = a + a;
    b += a;
    assert_eq!(b.input_tokens, 3);
    assert_eq!(b.cache_write_tokens, 12);
    assert_eq!([a, a, a].into_iter().sum::<Usage>(), b);
    assert_eq!(b.total_tokens(), 9);
}

#[test]
fn response_helpers() {
    let response = Response {
        content: vec![
            ContentBlock::text("Hello "),
            ContentBlock::ToolUse {
                id: "1".into(),
                name: "f".into(),
                input: json!({}),
            },
            ContentBlock::text("world"),
        ],
        ..Response::default()
    };
    assert_eq!(response.text(), "Hello world");
    assert_eq!(response.tool_uses().len(), 1);
    assert_eq!(response.to_message().role, Role::Assistant);
}

#[test]
fn tool_result_constructors_convert_outputs() {
    assert_eq!(
        ToolResult::json("1", &"plain").unwrap().content,
        ToolResultContent::Text("plain".into())
    );
    assert_eq!(
        ToolResult::json("1", &json!({"a": [1, 2]}))
            .unwrap()
            .content,
        ToolResultContent::Text(r#"{"a":[1,2]}"#.into())
    );
    let blocks = ToolResult::blocks("1", vec![ContentBlock::text("x")]);
    assert_eq!(blocks.content.to_text(), "x");
    assert!(ToolResult::error("1", "no").is_error);
}

/// Search for flights.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct SearchFlights {
    /// IATA code of the departure airport.
    from_airport: String,
    /// Cabin class.
    cabin: Cabin,
    /// Maximum number of stops, if any.
    max_stops: Option<u8>,
    /// Passenger details.
    passenger: Passenger,
    #[serde(default)]
    flexible: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Cabin {
    Economy,
    PremiumEconomy,
    Business,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Passenger {
    /// Full name.
    name: String,
    age: u32,
}

#[test]
fn schemas_from_types_respect_docs_enums_options_nesting_and_serde() {
    let tool = Tool::from_type::<SearchFlights>();
    let def = tool.definition();
    assert_eq!(def.name, "search_flights");
    assert_eq!(def.description, "Search for flights.");
    assert_eq!(
        def.input_schema,
        json!({
            "type": "object",
            "properties": {
                "fromAirport": {"type": "string", "description": "IATA code of the departure airport."},
                "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business"], "description": "Cabin class."},
                "maxStops": {"type": ["integer", "null"], "format": "uint8", "minimum": 0, "maximum": 255, "description": "Maximum number of stops, if any."},
                "passenger": {
                    "type": "object",
                    "description": "Passenger details.",
                    "properties": {
                        "name": {"type": "string", "description": "Full name."},
                        "age": {"type": "integer", "format": "uint32", "minimum": 0}
                    },
                    "required": ["name", "age"]
                },
                "flexible": {"type": "boolean", "default": false}
            },
            "required": ["fromAirport", "cabin", "passenger"]
        })
    );
    let renamed = Tool::from_type::<SearchFlights>()
        .with_name("flights")
        .with_description("Find flights");
    assert_eq!(renamed.definition().name, "flights");
    assert_eq!(renamed.definition().description, "Find flights");
    assert!(renamed.handler().is_none());
}

#[test]
fn raw_schemas_are_checked_against_the_meta_schema() {
    let ok = Tool::from_schema(
        "lookup",
        "Look up",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    );
    assert!(ok.is_ok());
    let cases = [
        (
            json!({"type": "object", "properties": {"q": {"type": "strng"}}}),
            "not a valid JSON Schema at /properties/q/type",
        ),
        (
            json!({"type": "object", "required": "q"}),
            "not a valid JSON Schema at /required",
        ),
        (
            json!({"type": "string"}),
            "tool arguments must be an object",
        ),
        (json!([1, 2]), "the schema must be a JSON object"),
    ];
    for (schema, expected) in cases {
        match Tool::from_schema("lookup", "", schema.clone()) {
            Err(Error::InvalidToolSchema { tool, message }) => {
                assert_eq!(tool, "lookup");
                assert!(message.contains(expected), "{schema}: {message}");
            }
            other => panic!("{schema}: expected InvalidToolSchema, got {other:?}"),
        }
    }
}

#[test]
fn tool_calls_parse_into_types_with_named_errors() {
    let call = ToolCall {
        id: "1".into(),
        name: "search_flights".into(),
        input: json!({"fromAirport": "CDG", "cabin": "business", "passenger": {"name": "A", "age": 3}}),
    };
    let parsed: SearchFlights = call.parse().unwrap();
    assert_eq!(parsed.from_airport, "CDG");
    assert!(parsed.max_stops.is_none());
    let bad = ToolCall {
        input: json!({"fromAirport": "CDG", "cabin": "first"}),
        ..call
    };
    let error = bad.parse::<SearchFlights>().unwrap_err();
    assert!(matches!(&error, Error::ToolArgumentParse { tool, .. } if tool == "search_flights"));
    assert!(
        error.to_string().contains("unknown variant `first`"),
        "{error}"
    );
}

#[test]
fn tool_validation_lists_every_violation_with_its_pointer() {
    let tool = Tool::from_type::<SearchFlights>();
    let violations = tool
        .validate(&json!({"fromAirport": 5, "cabin": "first", "passenger": {"name": "A"}}))
        .unwrap_err();
    let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(paths, ["/fromAirport", "/cabin", "/passenger"]);
}

/// A stay with constraints serde does not check by itself.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Stay {
    #[schemars(range(min = 1, max = 30))]
    nights: u32,
    #[schemars(length(min = 3, max = 3))]
    airport: String,
}

/// Typed function tools decide validity by deserializing when their schema says nothing serde
/// does not check (no validator is compiled then), and still report every violation with its
/// pointer, and still enforce constraints serde cannot (ranges, lengths).
#[test]
fn typed_function_tools_validate_through_serde_and_keep_every_constraint() {
    let flights = Tool::function("search_flights", "", |_: SearchFlights| async {
        Ok::<_, String>("ok")
    });
    let valid = json!({"fromAirport": "CDG", "cabin": "business", "passenger": {"name": "A", "age": 3}, "maxStops": 255});
    assert!(flights.validate(&valid).is_ok());
    let out_of_range = json!({"fromAirport": "CDG", "cabin": "business", "passenger": {"name": "A", "age": 3}, "maxStops": 256});
    let paths = |violations: Vec<agentloop::tool::Violation>| {
        violations.into_iter().map(|v| v.path).collect::<Vec<_>>()
    };
    assert_eq!(
        paths(flights.validate(&out_of_range).unwrap_err()),
        ["/maxStops"]
    );
    let violations = flights
        .validate(&json!({"fromAirport": 5, "cabin": "first", "passenger": {"name": "A"}}))
        .unwrap_err();
    assert_eq!(paths(violations), ["/fromAirport", "/cabin", "/passenger"]);

    let stay = Tool::function("book_stay", "", |_: Stay| async { Ok::<_, String>("ok") });
    assert!(
        stay.validate(&json!({"nights": 2, "airport": "CDG"}))
            .is_ok()
    );
    // Serde alone would accept both values.
    let violations = stay
        .validate(&json!({"nights": 0, "airport": "CDGX"}))
        .unwrap_err();
    assert_eq!(paths(violations), ["/nights", "/airport"]);
}

#[test]
fn schema_shaping_inlines_refs_and_builds_strict_schemas() {
    use agentloop::tool::schema::{inline_refs, openai_strict};
    let schema = json!({
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}, "n": {"type": "integer"}},
        "required": ["p"],
        "$defs": {"P": {"type": "object", "properties": {"x": {"type": "string"}}}}
    });
    assert_eq!(
        inline_refs(&schema),
        json!({
            "type": "object",
            "properties": {"p": {"type": "object", "properties": {"x": {"type": "string"}}}, "n": {"type": "integer"}},
            "required": ["p"]
        })
    );
    assert_eq!(
        openai_strict(&schema).unwrap(),
        json!({
            "type": "object",
            "properties": {
                "p": {"type": "object", "properties": {"x": {"type": ["string", "null"]}}, "required": ["x"], "additionalProperties": false},
                "n": {"type": ["integer", "null"]}
            },
            "required": ["p", "n"],
            "additionalProperties": false
        })
    );
    let recursive = json!({
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}
    });
    let shaped = inline_refs(&recursive);
    assert!(
        shaped.get("$defs").is_some(),
        "recursive definitions are kept"
    );
    assert_eq!(
        shaped["properties"]["node"]["properties"]["next"],
        json!({"$ref": "#/$defs/Node"})
    );
}
