//! A typed weather tool, a scripted model, and a streamed run printed as it happens.
//!
//! Runs offline: `cargo run -p agentloop --example weather`. Swap the scripted model for a real
//! provider (see the README) and nothing else changes.

use agentloop::run::RunEvent;
use agentloop::{Agent, StreamEvent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Get the current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. "Paris".
    city: String,
}

#[derive(Serialize)]
struct Weather {
    city: String,
    temperature_c: f32,
    conditions: &'static str,
}

#[tokio::main]
async fn main() -> Result<(), agentloop::Error> {
    // The scripted model plays the part of an LLM: first it asks for the tool, then it answers.
    let model = ScriptedModel::new([
        Turn::text("Let me look that up.").then_tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("It is 18 °C and partly cloudy in Paris — a light jacket will do."),
    ]);

    let agent = Agent::builder(model)
        .system("You are a concise weather assistant.")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |args: GetWeather| async move {
                Ok::<_, std::io::Error>(Weather {
                    city: args.city,
                    temperature_c: 18.0,
                    conditions: "partly cloudy",
                })
            },
        ))
        .build();

    let mut events = agent.run_stream("What's the weather in Paris?");
    while let Some(event) = events.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { text }) => print!("{text}"),
            RunEvent::ToolCallReady { call } => println!("\n→ {}({})", call.name, call.input),
            RunEvent::ToolCallResult { result, .. } => {
                println!("← {}", result.content.to_text())
            }
            RunEvent::RunFinish { result } => println!(
                "\n\n[{} steps, {} tool call(s), {} tokens, stop: {}]",
                result.steps.len(),
                result.tool_calls,
                result.usage.total_tokens(),
                result.stop_reason
            ),
            RunEvent::Error { error } => return Err(error),
            _ => {}
        }
    }
    Ok(())
}
