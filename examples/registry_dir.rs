//! Tools described as data: a registry loaded from a directory of descriptor files (JSON, YAML
//! and a `kind: Tool` manifest in `examples/tools/`, answered by mock responses and templates),
//! handed to an agent like any other tools.
//!
//! Runs offline: `cargo run -p agentloop --example registry_dir`. The same directory works from
//! the command line: `agentloop run --tools examples/tools "What's the weather in Lyon?"`.

use std::path::Path;

use agentloop::Agent;
use agentloop::registry::Registry;
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // In your project this is just `Registry::load_dir("tools")`.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tools");
    let registry = Registry::load_dir(&dir)?;
    for descriptor in registry.descriptors() {
        println!(
            "{:<17} {:<5} {}",
            descriptor.name, descriptor.mode, descriptor.description
        );
    }

    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("current_weather", json!({"city": "Lyon"})),
            (
                "convert_currency",
                json!({"amount": 50, "from": "EUR", "to": "USD"}),
            ),
            ("store_hours", json!({})),
        ]),
        Turn::text("Lyon is 21 °C and sunny, 50 EUR is 54 USD, and the store opens at 9:00."),
    ]);
    let agent = Agent::builder(model).tools(registry.tools()).build();
    let result = agent
        .run("Weather in Lyon, 50 EUR in USD, and when does the store open?")
        .await?;

    println!();
    let step = &result.steps[0];
    for (call, output) in step.tool_calls.iter().zip(&step.tool_results) {
        println!("→ {}({})", call.name, call.input);
        println!("  ← {}", output.content.to_text());
    }
    println!("\n{}", result.text());

    let outputs: Vec<String> = step
        .tool_results
        .iter()
        .map(|r| r.content.to_text())
        .collect();
    assert_eq!(
        outputs,
        [
            r#"{"city":"Lyon","temperature_c":21,"conditions":"sunny"}"#,
            r#"{"amount":54.0,"currency":"USD"}"#,
            r#"{"weekdays":"9:00-18:00","saturday":"10:00-16:00","sunday":"closed"}"#,
        ]
    );
    assert_eq!(registry.len(), 3);
    Ok(())
}
