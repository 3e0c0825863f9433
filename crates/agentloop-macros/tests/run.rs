//! A run with the scripted model calling `#[tool]` tools: the model's arguments reach the
//! function, `Ok` comes back as the result and `Err` as an error result the model sees.

use agentloop::{Agent, ContentBlock, ToolResult, ToolResultContent, tool};
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::json;

/// Current weather for a city.
#[tool]
async fn get_weather(
    /// City name.
    city: String,
) -> Result<String, String> {
    if city == "Atlantis" {
        return Err(format!("no weather station in {city}"));
    }
    Ok(format!("18 °C in {city}"))
}

#[tokio::test]
async fn a_scripted_run_calls_a_macro_tool() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Atlantis"})),
        ]),
        Turn::text("Paris is mild; Atlantis has no station."),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(get_weather_tool())
        .build();
    let result = agent.run("Weather in Paris and Atlantis?").await.unwrap();
    assert_eq!(result.text(), "Paris is mild; Atlantis has no station.");
    model.assert_complete();

    let requests = model.requests();
    // The model was offered the tool as the macro described it.
    let offered: Vec<_> = requests[0]
        .tools
        .iter()
        .filter_map(|t| t.function_name())
        .collect();
    assert_eq!(offered, ["get_weather"]);
    let results: Vec<ToolResult> = requests[1].messages[2]
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ToolResult {
                tool_use_id: "call_0_0".into(),
                content: ToolResultContent::Text("18 °C in Paris".into()),
                is_error: false,
            },
            ToolResult {
                tool_use_id: "call_0_1".into(),
                content: ToolResultContent::Text("Error: no weather station in Atlantis".into()),
                is_error: true,
            },
        ]
    );
}
