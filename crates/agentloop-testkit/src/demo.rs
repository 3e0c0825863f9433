//! The built-in demo: a model that calls a weather tool once and then answers, and that tool.
//! `agentloop run` uses it when no model is configured, and `agentloop mock-server` serves it,
//! so the whole loop can be seen with no API key.

use agentloop::{Message, Request, Role, Tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

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

/// The built-in mock model.
pub fn demo_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &Request, _| demo_turn_for(&request.messages)).named("mock")
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
