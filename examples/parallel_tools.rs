//! Several tools, called in parallel: the model asks for three tools in one turn, the run loop
//! runs them at the same time (results stay in call order), then the model answers.
//!
//! Runs offline: `cargo run -p agentloop --example parallel_tools`. The scripted model plays the
//! LLM; swap it for a real provider and nothing else changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentloop::{Agent, Tool, ToolContext};
use agentloop_testkit::{ScriptedModel, Turn};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. "Paris".
    city: String,
}

/// Local time in a city.
#[derive(Deserialize, JsonSchema)]
struct LocalTime {
    /// City name.
    city: String,
}

/// Convert an amount between currencies.
#[derive(Deserialize, JsonSchema)]
struct ConvertCurrency {
    amount: f64,
    /// ISO 4217 code, e.g. "EUR".
    from: String,
    /// ISO 4217 code, e.g. "USD".
    to: String,
}

/// Counts the tools running right now and the most that ever ran at once. The agent shares it
/// with every tool handler through [`ToolContext::state`].
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// Stand in for a slow lookup (an API call, a database query) while counting it.
async fn slow_lookup(ctx: &ToolContext) {
    let Some(in_flight) = ctx.state::<Arc<InFlight>>() else {
        return;
    };
    let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
    in_flight.peak.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    in_flight.now.fetch_sub(1, Ordering::SeqCst);
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The model asks for three tools in one turn, then answers.
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Rome"})),
            ("local_time", json!({"city": "Rome"})),
            (
                "convert_currency",
                json!({"amount": 100.0, "from": "EUR", "to": "USD"}),
            ),
        ]),
        Turn::text("Rome: 24 °C and sunny, 15:00 local time; 100 EUR is 108 USD."),
    ]);

    let in_flight = Arc::new(InFlight::default());
    let agent = Agent::builder(model)
        .system("You are a concise travel assistant.")
        .state(in_flight.clone())
        .tool(Tool::function_with_context(
            "get_weather",
            "Current weather for a city",
            |ctx, w: GetWeather| async move {
                slow_lookup(&ctx).await;
                Ok::<_, std::io::Error>(format!("{}: 24 °C, sunny", w.city))
            },
        ))
        .tool(Tool::function_with_context(
            "local_time",
            "Local time in a city",
            |ctx, t: LocalTime| async move {
                slow_lookup(&ctx).await;
                Ok::<_, std::io::Error>(format!("15:00 in {}", t.city))
            },
        ))
        .tool(Tool::function_with_context(
            "convert_currency",
            "Convert an amount between currencies",
            |ctx, c: ConvertCurrency| async move {
                slow_lookup(&ctx).await;
                Ok::<_, std::io::Error>(
                    json!({"amount": c.amount * 1.08, "currency": c.to, "from": c.from}),
                )
            },
        ))
        .build();

    let result = agent
        .run("Weather, time and 100 EUR in USD for Rome?")
        .await?;

    for step in &result.steps {
        for (call, output) in step.tool_calls.iter().zip(&step.tool_results) {
            println!("→ {}({})", call.name, call.input);
            println!("  ← {}", output.content.to_text());
        }
    }
    let peak = in_flight.peak.load(Ordering::SeqCst);
    println!("\n{}", result.text());
    println!(
        "\n[{} tool calls, at most {peak} running at once]",
        result.tool_calls
    );

    assert_eq!(result.tool_calls, 3);
    // All three ran side by side (set `.max_concurrency(1)` on the builder and this is 1).
    assert_eq!(peak, 3);
    // Results come back in call order, whichever finished first.
    let names: Vec<&str> = result.steps[0]
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["get_weather", "local_time", "convert_currency"]);
    assert_eq!(
        result.steps[0].tool_results[2].content.to_text(),
        r#"{"amount":108.0,"currency":"USD","from":"EUR"}"#
    );
    Ok(())
}
