//! The Anthropic provider (Messages API) with several tools: a forced tool choice, parallel
//! calls of one tool, then two different tools in one turn.
//!
//! Runs offline: `cargo run -p agentloop --example anthropic_tools`. The testkit's
//! Anthropic-compatible mock server plays the model on a loopback port, so the real provider,
//! its HTTP client and its stream reader all run; point `HttpConfig::new` at
//! `https://api.anthropic.com` with a key (or use `Agent::from_model("anthropic/claude-sonnet-4-5")`)
//! and nothing else changes.

use std::time::Instant;

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::run::{Hooks, RunEvent};
use agentloop::{Agent, StreamEvent, Tool, ToolChoice};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Look up an order by its number.
#[derive(Deserialize, JsonSchema)]
struct LookupOrder {
    /// Order number, e.g. "A-1001".
    order: String,
}

/// Where a parcel is.
#[derive(Deserialize, JsonSchema)]
struct TrackParcel {
    /// Carrier tracking number.
    tracking: String,
}

/// The refund policy for a product category.
#[derive(Deserialize, JsonSchema)]
struct RefundPolicy {
    category: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // What the model answers, call by call: forced to `lookup_order`, it looks up both orders
    // at once; then it uses two other tools in one turn; then it answers.
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_calls([
                ("lookup_order", json!({"order": "A-1001"})),
                ("lookup_order", json!({"order": "A-1002"})),
            ]),
            Turn::text("Let me check the parcel and the policy.")
                .then_tool_call("track_parcel", json!({"tracking": "TRK-42"}))
                .then_tool_call("refund_policy", json!({"category": "books"})),
            Turn::text("A-1001 arrives tomorrow; A-1002 (books) can be refunded within 30 days."),
        ],
    )
    .await?;

    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-ant-example"));
    let provider = Anthropic::new(config)?;

    let agent = Agent::builder(provider)
        .model("claude-sonnet-4-5")
        .system("You are a concise support assistant.")
        .max_tokens(1024)
        .tool(Tool::function(
            "lookup_order",
            "Look up an order by its number",
            |o: LookupOrder| async move {
                let found = match o.order.as_str() {
                    "A-1001" => {
                        json!({"order": "A-1001", "state": "shipped", "tracking": "TRK-42"})
                    }
                    _ => json!({"order": o.order, "state": "delivered", "category": "books"}),
                };
                Ok::<_, std::io::Error>(found)
            },
        ))
        .tool(Tool::function(
            "track_parcel",
            "Where a parcel is",
            |p: TrackParcel| async move {
                Ok::<_, std::io::Error>(format!(
                    "{}: out for delivery, arrives tomorrow",
                    p.tracking
                ))
            },
        ))
        .tool(Tool::function(
            "refund_policy",
            "The refund policy for a product category",
            |r: RefundPolicy| async move {
                Ok::<_, std::io::Error>(format!("{}: refundable within 30 days", r.category))
            },
        ))
        // Force the order lookup on the first step only; later steps let the model choose.
        .hooks(Hooks::new().prepare_step(|mut step| async move {
            if step.step == 0 {
                step.request.tool_choice = Some(ToolChoice::tool("lookup_order"));
            }
            step.request
        }))
        .build();

    let started = Instant::now();
    let mut events =
        agent.run_stream("Where are my orders A-1001 and A-1002, and can I return A-1002?");
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
            .filter_map(|t| t["name"].as_str())
            .collect();
        println!(
            "  {i}: POST {} tools={tools:?} tool_choice={} messages={}",
            request.path,
            body.get("tool_choice")
                .map_or("(none)".to_owned(), |c| c.to_string()),
            body["messages"].as_array().map_or(0, Vec::len),
        );
    }
    server.assert_complete();
    let first = &server.requests()[0].body;
    if first["tool_choice"] != json!({"type": "tool", "name": "lookup_order"}) {
        return Err(format!("unexpected tool_choice: {}", first["tool_choice"]).into());
    }
    Ok(())
}
