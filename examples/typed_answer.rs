//! A typed answer after a tool call: the model looks the weather up, then answers with a
//! `Report` instead of text. Its first answer breaks a rule the validator checks, so it goes
//! back to the model with the problem, and the second one passes. The answer streams: the
//! partial value shows the fields as they arrive.
//!
//! Runs offline: `cargo run -p agentloop --example typed_answer`. The scripted model plays the
//! LLM; swap it for a real provider and nothing else changes (OpenAI constrains the answer
//! natively; other providers answer by the same final-answer tool).

use agentloop::output::Output;
use agentloop::{Agent, RunEvent, Tool};
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

/// A weather report.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Report {
    city: String,
    /// Temperature in °C.
    temp_c: i32,
    /// One word: "sunny", "cloudy", "rain", ...
    sky: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        // The scripted model has no structured output of its own, so the answer is a call to
        // the final-answer tool. 180 °C: valid for the schema, refused by the validator.
        Turn::tool_call(
            "final_answer",
            json!({"city": "Paris", "temp_c": 180, "sky": "sunny"}),
        ),
        Turn::tool_call(
            "final_answer",
            json!({"city": "Paris", "temp_c": 18, "sky": "sunny"}),
        ),
    ]);
    let agent =
        Agent::builder(model)
            .tool(Tool::function(
                "get_weather",
                "Current weather for a city",
                |w: GetWeather| async move {
                    Ok::<_, std::io::Error>(format!("{}: 18 °C, sunny", w.city))
                },
            ))
            .build();
    let output = Output::<Report>::new().with_validator(|report| {
        if (-90..=60).contains(&report.temp_c) {
            Ok(())
        } else {
            Err(format!("{} °C is not a weather temperature", report.temp_c))
        }
    });

    let mut events = agent.run_output_stream_with("Weather in Paris?", output);
    let mut partials = 0;
    let mut finished = None;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::ToolCallReady { call } => println!("→ {}({})", call.name, call.input),
            RunEvent::PartialOutput { .. } => partials += 1,
            RunEvent::Output { value } => println!("✓ {value}"),
            RunEvent::RunFinish { result } => finished = Some(result),
            _ => {}
        }
    }
    let result = finished.ok_or("the run did not finish")?;
    let report: Report = serde_json::from_value(result.output.clone().ok_or("no answer")?)?;
    println!(
        "{report:?} after {} model calls, {partials} partial values",
        result.turns
    );

    assert_eq!(
        report,
        Report {
            city: "Paris".into(),
            temp_c: 18,
            sky: "sunny".into()
        }
    );
    assert_eq!(result.turns, 3);
    assert!(partials > 0);
    // The model saw why its first answer was refused.
    let feedback = result.steps[1].tool_results[0].content.to_text();
    println!("first answer refused: {feedback}");
    assert!(
        feedback.contains("/: 180 °C is not a weather temperature"),
        "{feedback}"
    );
    Ok(())
}
