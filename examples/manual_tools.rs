//! A conversation in manual mode: the reply stops at the model's tool calls, your code runs
//! them (here a lookup table; in an app, perhaps after asking the user), adds the results and
//! resumes. The conversation keeps the history, so the next prompt goes on from it.
//!
//! Runs offline: `cargo run -p agentloop --example manual_tools`.

use agentloop::conversation::{Conversation, ToolExecution};
use agentloop::{Agent, RunStopReason, Tool, ToolCall, ToolResult};
use agentloop_testkit::{ScriptedModel, Turn};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Look up the stock level of a product.
#[derive(Deserialize, JsonSchema)]
struct StockLevel {
    /// The product's SKU.
    sku: String,
}

/// Your side of the tool: anything that turns a call into a result.
fn run_tool(call: &ToolCall) -> ToolResult {
    match call.parse::<StockLevel>() {
        Ok(args) => {
            let units = match args.sku.as_str() {
                "LAMP-01" => 12,
                _ => 0,
            };
            ToolResult::text(&call.id, format!("{units} units of {}", args.sku))
        }
        Err(error) => ToolResult::error(&call.id, error.to_string()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("stock_level", json!({"sku": "LAMP-01"})),
            ("stock_level", json!({"sku": "DESK-07"})),
        ]),
        Turn::text("12 lamps are in stock; the desk is sold out."),
        Turn::text("You asked about LAMP-01 and DESK-07."),
    ]);
    // A definition-only tool: the model sees its name, description and schema, and no handler
    // is needed because this code answers the calls.
    let agent = Agent::builder(model)
        .tool(Tool::from_type::<StockLevel>())
        .build();
    let mut chat = Conversation::new(&agent).with_tool_execution(ToolExecution::Manual);

    let reply = chat
        .send("Are LAMP-01 and DESK-07 in stock?")
        .await?
        .finish()
        .await?;
    assert_eq!(reply.stop_reason, RunStopReason::AwaitingToolResults);

    let pending = chat.pending_tool_calls();
    for call in &pending {
        let result = run_tool(call);
        println!(
            "→ {}({}) ← {}",
            call.name,
            call.input,
            result.content.to_text()
        );
        chat.add_tool_result(result)?;
    }
    let answer = chat.resume()?.finish().await?;
    println!("{}", answer.text());

    let follow_up = chat
        .send("Which products did I ask about?")
        .await?
        .finish()
        .await?;
    println!("{}", follow_up.text());

    assert_eq!(pending.len(), 2);
    assert_eq!(answer.stop_reason, RunStopReason::EndTurn);
    assert_eq!(
        answer.text(),
        "12 lamps are in stock; the desk is sold out."
    );
    // prompt, tool calls, results, answer, follow-up prompt, answer.
    assert_eq!(chat.history().len(), 6);
    Ok(())
}
