//! Streaming with a live display: answer text printed as it arrives, each tool call shown when
//! the model begins it, when it is ready to run and when it finishes.
//!
//! Runs offline: `cargo run -p agentloop --example streaming`. The scripted model streams its
//! turns in small pieces with a pause between them, as a real model does.

use std::io::Write;
use std::time::Duration;

use agentloop::run::RunEvent;
use agentloop::{Agent, RunResult, StreamEvent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. "Paris".
    city: String,
}

/// What the display has shown, for the checks at the end.
#[derive(Default)]
struct Screen {
    /// Answer text, as printed.
    text: String,
    /// One line per tool-call event: `start get_weather`, `ready get_weather`, `done ...`.
    tool_log: Vec<String>,
    /// Whether answer text left the cursor mid-line.
    mid_line: bool,
    result: Option<RunResult>,
}

impl Screen {
    /// Show one event. All the event handling is here: adapt this function when you want a
    /// different display.
    fn show(&mut self, event: RunEvent) -> Result<(), agentloop::Error> {
        match event {
            // The model call's own events come through as they are.
            RunEvent::Model(StreamEvent::TextDelta { text }) => {
                print!("{text}");
                std::io::stdout().flush().ok();
                self.text.push_str(&text);
                self.mid_line = true;
            }
            RunEvent::Model(StreamEvent::ToolCallStart { name, .. }) => {
                self.end_line();
                println!("  ⋯ {name} (the model is writing its arguments)");
                self.tool_log.push(format!("start {name}"));
            }
            RunEvent::ToolCallReady { call } => {
                println!("  → {}({})", call.name, call.input);
                self.tool_log.push(format!("ready {}", call.name));
            }
            RunEvent::ToolCallResult { name, result, .. } => {
                println!("  ✓ {name} → {}", result.content.to_text());
                self.tool_log.push(format!("done {name}"));
            }
            RunEvent::RunFinish { result } => {
                self.end_line();
                self.result = Some(*result);
            }
            RunEvent::Error { error } => return Err(error),
            _ => {}
        }
        Ok(())
    }

    fn end_line(&mut self) {
        if std::mem::take(&mut self.mid_line) {
            println!();
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pause = Duration::from_millis(40);
    let model = ScriptedModel::new([
        Turn::text("Let me check both cities.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .then_tool_call("get_weather", json!({"city": "Oslo"}))
            .with_chunk_delay(pause),
        Turn::text("Paris is 18 °C and sunny; Oslo is 4 °C with rain, so bring a coat.")
            .with_text_pieces(8)
            .with_chunk_delay(pause),
    ]);
    let agent = Agent::builder(model)
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |w: GetWeather| async move {
                let report = if w.city == "Oslo" {
                    "4 °C, rain"
                } else {
                    "18 °C, sunny"
                };
                Ok::<_, std::io::Error>(format!("{}: {report}", w.city))
            },
        ))
        .build();

    let mut screen = Screen::default();
    let mut events = agent.run_stream("Weather in Paris and Oslo?");
    while let Some(event) = events.next().await {
        screen.show(event)?;
    }

    let result = screen.result.ok_or("the run ended without a result")?;
    println!(
        "\n[{} steps, stop: {}]",
        result.steps.len(),
        result.stop_reason
    );
    // The deltas add up to the run's text, and every call went start → ready → done.
    assert_eq!(
        screen.text,
        "Let me check both cities.Paris is 18 °C and sunny; Oslo is 4 °C with rain, so bring a coat."
    );
    assert_eq!(
        screen.tool_log,
        [
            "start get_weather",
            "start get_weather",
            "ready get_weather",
            "ready get_weather",
            "done get_weather",
            "done get_weather",
        ]
    );
    Ok(())
}
