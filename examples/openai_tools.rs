//! The OpenAI provider (Chat Completions, and every OpenAI-compatible server) with several tools:
//! a forced tool choice, parallel calls of one tool, then two different tools in one turn.
//!
//! Runs offline: `cargo run -p agentloop --example openai_tools`. The testkit's OpenAI-compatible
//! mock server plays the model on a loopback port, so the real provider, its HTTP client and
//! its stream reader all run; point `HttpConfig::new` at `https://api.openai.com/v1` with a key
//! (or use `Agent::from_model("openai/gpt-4o")`) and nothing else changes.

use std::time::{Duration, Instant};

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::{Hooks, RunEvent};
use agentloop::{Agent, StreamEvent, Tool, ToolChoice};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
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

/// Convert an amount between currencies.
#[derive(Deserialize, JsonSchema)]
struct ConvertCurrency {
    amount: f64,
    /// ISO 4217 code, e.g. "EUR".
    from: String,
    /// ISO 4217 code, e.g. "USD".
    to: String,
}

/// Local time in a city.
#[derive(Deserialize, JsonSchema)]
struct LocalTime {
    city: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What the model answers, call by call: forced to `get_weather`, it asks for two cities at
    // once; then it uses two other tools in one turn; then it answers.
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_calls([
                ("get_weather", json!({"city": "Paris"})),
                ("get_weather", json!({"city": "Rome"})),
            ]),
            Turn::tool_calls([
                (
                    "convert_currency",
                    json!({"amount": 100.0, "from": "EUR", "to": "USD"}),
                ),
                ("local_time", json!({"city": "Rome"})),
            ]),
            Turn::text(
                "Rome is warmer (24 °C vs 18 °C), it is 15:00 there, and 100 EUR is 108 USD.",
            ),
        ],
    )
    .await?;

    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-example"));
    let provider = OpenAi::new(config)?;

    let agent = Agent::builder(provider)
        .model("gpt-4o")
        .system("You are a concise travel assistant.")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |w: GetWeather| async move {
                // Slow enough that running the two calls side by side shows.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let temp = if w.city == "Rome" { 24 } else { 18 };
                Ok::<_, std::io::Error>(format!("{}: {temp} °C, sunny", w.city))
            },
        ))
        .tool(Tool::function(
            "convert_currency",
            "Convert an amount between currencies",
            |c: ConvertCurrency| async move {
                Ok::<_, std::io::Error>(
                    json!({"amount": c.amount * 1.08, "currency": c.to, "from": c.from}),
                )
            },
        ))
        .tool(Tool::function(
            "local_time",
            "Local time in a city",
            |t: LocalTime| async move { Ok::<_, std::io::Error>(format!("15:00 in {}", t.city)) },
        ))
        .parallel_tool_calls(true)
        // Force the weather tool on the first step only; later steps let the model choose.
        .hooks(Hooks::new().prepare_step(|mut step| async move {
            if step.step == 0 {
                step.request.tool_choice = Some(ToolChoice::tool("get_weather"));
            }
            step.request
        }))
        .build();

    let started = Instant::now();
    let mut events = agent.run_stream("Paris or Rome this weekend? And what is 100 EUR in USD?");
    let mut result = None;
    // Whether answer text left the cursor mid-line.
    let mut mid_line = false;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::StepStart { step } => println!("— step {step}"),
            RunEvent::Model(StreamEvent::TextDelta { text }) => {
                print!("{text}");
                mid_line = true;
            }
            RunEvent::ToolCallReady { call } => {
                if std::mem::take(&mut mid_line) {
                    println!();
                }
                println!("  → {}({})", call.name, call.input)
            }
            RunEvent::ToolCallResult { name, result, .. } => {
                println!("  ← {name}: {}", result.content.to_text())
            }
            RunEvent::RunFinish { result: finished } => result = Some(finished),
            RunEvent::Error { error } => return Err(error.into()),
            _ => {}
        }
    }
    let result = result.ok_or("the run ended without a result")?;
    println!(
        "\n\n[{} steps, {} tool calls, {} tokens, stop: {}, {} ms]",
        result.steps.len(),
        result.tool_calls,
        result.usage.total_tokens(),
        result.stop_reason,
        started.elapsed().as_millis()
    );

    // What went over the wire: the forced choice on the first request only.
    println!("\nRequests the server received:");
    for (i, request) in server.requests().iter().enumerate() {
        let body = &request.body;
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        println!(
            "  {i}: POST {} tools={tools:?} tool_choice={} parallel_tool_calls={} messages={}",
            request.path,
            body.get("tool_choice")
                .map_or("(none)".to_owned(), |c| c.to_string()),
            body["parallel_tool_calls"],
            body["messages"].as_array().map_or(0, Vec::len),
        );
    }
    server.assert_complete();
    let first = &server.requests()[0].body;
    if first["tool_choice"] != json!({"type": "function", "function": {"name": "get_weather"}}) {
        return Err(format!("unexpected tool_choice: {}", first["tool_choice"]).into());
    }
    Ok(())
}
