//! The built-in demo: a model that calls a weather tool once and then answers, and that tool.
//! `agentloop run` uses it when no model is configured, and `agentloop mock-server` serves it,
//! so the whole loop can be seen with no API key.
//!
//! Offered other tools (`agentloop run --tools DIR`), the mock model calls one of them instead:
//! the tool whose name and description share the most words (of four letters or more) with
//! the prompt (the first offered on a tie), with each required argument taken from its
//! schema's `default`, `const`, first `examples` or first `enum` value, else a placeholder of
//! its type. After the result it answers with what the tool returned.

use std::collections::HashSet;

use agentloop::{ContentBlock, FunctionDefinition, Message, Request, Role, Tool, ToolDefinition};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{ScriptedModel, Turn};

/// The demo tool's name.
pub const DEMO_TOOL: &str = "get_weather";

/// The demo script: a tool call, then an answer.
pub fn demo_turns() -> Vec<Turn> {
    vec![
        Turn::text("Let me check the weather.")
            .then_tool_call(DEMO_TOOL, json!({"city": "Paris"}))
            .with_usage(42, 18),
        Turn::text(
            "It is 18 °C and sunny in Paris. (This answer comes from agentloop's built-in mock \
             model: pass --model to talk to a real one.)",
        )
        .with_usage(77, 31),
    ]
}

/// Which demo turn answers `messages`: the tool call when the last message is a prompt, the
/// answer after a tool result. A conversation can go on forever.
pub fn demo_turn_for(messages: &[Message]) -> Turn {
    let mut turns = demo_turns();
    let after_tool = messages.last().is_some_and(|m| {
        m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, agentloop::ContentBlock::ToolResult(_)))
    });
    if after_tool {
        turns.remove(1)
    } else {
        turns.remove(0)
    }
}

/// The built-in mock model: the demo script when the request offers the demo tool or no
/// function tool at all, else a call of the offered tool the prompt is about (see the module
/// docs for the rule).
pub fn demo_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &Request, _| mock_turn(request)).named("mock")
}

/// What the mock model answers to `request`.
fn mock_turn(request: &Request) -> Turn {
    let functions: Vec<&FunctionDefinition> = request
        .tools
        .iter()
        .filter_map(|tool| match tool {
            ToolDefinition::Function(f) => Some(f.as_ref()),
            ToolDefinition::Native(_) => None,
        })
        .collect();
    if functions.is_empty() || functions.iter().any(|f| f.name == DEMO_TOOL) {
        return demo_turn_for(&request.messages);
    }
    if let Some(answer) = report_results(&request.messages) {
        return Turn::text(answer).with_usage(77, 31);
    }
    let prompt = last_prompt(&request.messages);
    let tool = pick_tool(&functions, &prompt);
    Turn::tool_call(tool.name.clone(), example_arguments(&tool.input_schema)).with_usage(42, 18)
}

/// The mock's answer after tool results: what each tool returned. `None` when the last message
/// is not tool results.
fn report_results(messages: &[Message]) -> Option<String> {
    let (last, earlier) = messages.split_last()?;
    let results: Vec<&agentloop::ToolResult> = last
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect();
    if last.role != Role::User || results.is_empty() {
        return None;
    }
    let name_of = |id: &str| {
        earlier
            .iter()
            .rev()
            .flat_map(|m| &m.content)
            .find_map(|block| match block {
                ContentBlock::ToolUse {
                    id: use_id, name, ..
                } if use_id == id => Some(name.as_str()),
                _ => None,
            })
            .unwrap_or("the tool")
    };
    let reports: Vec<String> = results
        .iter()
        .map(|r| {
            let verb = if r.is_error {
                "failed with"
            } else {
                "returned"
            };
            format!("{} {verb} {}", name_of(&r.tool_use_id), r.content.to_text())
        })
        .collect();
    Some(format!(
        "{}. (This answer comes from agentloop's built-in mock model: pass --model to talk to a \
         real one.)",
        reports.join("; ")
    ))
}

/// The text of the last user message that has any.
fn last_prompt(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .map(Message::text)
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

/// Lowercase words of four letters or more, so "the" and "for" match nothing
/// (`current_weather` gives `current`, `weather`).
fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect()
}

/// The tool whose name and description share the most words with the prompt; the first
/// offered on a tie. `tools` is not empty.
fn pick_tool<'a>(tools: &[&'a FunctionDefinition], prompt: &str) -> &'a FunctionDefinition {
    let prompt = words(prompt);
    let score = |tool: &FunctionDefinition| {
        words(&format!("{} {}", tool.name, tool.description))
            .intersection(&prompt)
            .count()
    };
    let mut best = tools[0];
    let mut best_score = score(best);
    for &tool in &tools[1..] {
        let s = score(tool);
        if s > best_score {
            (best, best_score) = (tool, s);
        }
    }
    best
}

/// Arguments for an object schema: each required property's example value.
fn example_arguments(schema: &Value) -> Value {
    let required = schema["required"].as_array().into_iter().flatten();
    let arguments: Map<String, Value> = required
        .filter_map(Value::as_str)
        .map(|name| (name.to_owned(), example_value(&schema["properties"][name])))
        .collect();
    Value::Object(arguments)
}

/// A value the schema accepts: its `default`, `const`, first `examples` or `enum` value, else a
/// placeholder of its (first) type.
fn example_value(schema: &Value) -> Value {
    let given = [
        schema.get("default"),
        schema.get("const"),
        schema["examples"].get(0),
        schema["enum"].get(0),
    ];
    if let Some(value) = given.into_iter().flatten().next() {
        return value.clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds.first().and_then(Value::as_str),
        kind => kind.as_str(),
    };
    match kind {
        Some("integer" | "number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => example_arguments(schema),
        Some("null") => Value::Null,
        _ => json!("example"),
    }
}

/// Get the current weather for a city (demo data).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DemoWeather {
    /// City name.
    pub city: String,
}

/// The demo tool: fixed weather for any city.
pub fn demo_tool() -> Tool {
    Tool::function(
        DEMO_TOOL,
        "Current weather for a city (demo data)",
        |args: DemoWeather| async move {
            Ok::<_, std::convert::Infallible>(json!({
                "city": args.city,
                "temperature_c": 18,
                "conditions": "sunny",
            }))
        },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn function(name: &str, description: &str, input_schema: Value) -> ToolDefinition {
        ToolDefinition::Function(Arc::new(FunctionDefinition {
            name: name.into(),
            description: description.into(),
            input_schema,
            strict: false,
        }))
    }

    #[test]
    fn required_arguments_come_from_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "unit": {"type": "string", "enum": ["c", "f"], "default": "f"},
                "city": {"type": "string", "enum": ["Oslo", "Rome"]},
                "days": {"type": ["integer", "null"]},
                "tags": {"type": "array"},
                "exact": {"type": "boolean"},
                "note": {"description": "no type"},
                "where": {
                    "type": "object",
                    "properties": {"lat": {"type": "number", "examples": [48.8]}, "lon": {"type": "number"}},
                    "required": ["lat"]
                },
                "optional": {"type": "string"}
            },
            "required": ["unit", "city", "days", "tags", "exact", "note", "where"]
        });
        assert_eq!(
            example_arguments(&schema),
            json!({
                "unit": "f", "city": "Oslo", "days": 1, "tags": [], "exact": true,
                "note": "example", "where": {"lat": 48.8}
            })
        );
    }

    #[test]
    fn the_mock_calls_the_tool_the_prompt_is_about_then_reports_its_result() {
        let schema = json!({"type": "object", "properties": {}});
        let mut request = Request {
            tools: vec![
                function("store_hours", "Opening hours of the store", schema.clone()),
                function(
                    "current_weather",
                    "Current weather for a city",
                    schema.clone(),
                ),
            ],
            messages: vec![Message::user("Is the weather nice today?")],
            ..Request::default()
        };
        let call = |turn: Turn| turn.resolved_calls(0);
        assert_eq!(
            call(mock_turn(&request)),
            [("call_0_0".into(), "current_weather".into(), "{}".into())]
        );
        // No word in common: the first tool offered.
        request.messages = vec![Message::user("Hello")];
        assert_eq!(call(mock_turn(&request))[0].1, "store_hours");

        request.messages.push(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "store_hours".into(),
                input: json!({}),
            }],
        ));
        request.messages.push(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(agentloop::ToolResult::text(
                "c1", "9 to 5",
            ))],
        ));
        let answer = mock_turn(&request);
        assert!(!answer.has_tool_calls());
        assert!(
            format!("{:?}", answer.items).contains("store_hours returned 9 to 5. (This answer"),
            "{:?}",
            answer.items
        );
    }
}
