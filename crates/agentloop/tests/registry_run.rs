//! A run whose model breaks a registry tool's schema: the tool does not run, the model sees
//! every violation, retries with valid arguments and the run finishes.

#![cfg(feature = "registry")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloop::registry::{Registry, ToolDescriptor};
use agentloop::tool::{ToolContext, ToolOutput};
use agentloop::{Agent, ContentBlock, RunStopReason, ToolResult, ToolResultContent};
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::{Value, json};

#[tokio::test]
async fn invalid_arguments_go_back_to_the_model_and_the_retry_runs() {
    let mut descriptor = ToolDescriptor::new("convert", "Convert an amount to USD");
    descriptor.input_schema = json!({
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "currency": {"enum": ["EUR", "GBP"]}
        },
        "required": ["amount", "currency"]
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::new();
    registry.add_descriptor(descriptor).unwrap();
    let counter = runs.clone();
    registry
        .bind("convert", move |_ctx: ToolContext, input: Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let amount = input["amount"].as_f64().unwrap_or_default();
                Ok(ToolOutput::json(json!({"usd": amount * 1.1})))
            }
        })
        .unwrap();

    let model = ScriptedModel::new([
        Turn::tool_call("convert", json!({"amount": "ten", "currency": "CHF"})),
        Turn::tool_call("convert", json!({"amount": 10, "currency": "EUR"})),
        Turn::text("10 EUR is 11 USD."),
    ]);
    let agent = Agent::builder(model.clone())
        .tools(registry.tools())
        .build();
    let result = agent.run("How much is 10 EUR in USD?").await.unwrap();

    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "10 EUR is 11 USD.");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the valid call ran");
    model.assert_complete();

    let requests = model.requests();
    let last_message = |i: usize| requests[i].messages.last().unwrap().content.clone();
    // One error result listing each violation with its JSON pointer (and the run loop's
    // retry note).
    let expected_error = "Error: invalid arguments for tool `convert`:\n\
        - /amount: \"ten\" is not of type \"number\"\n\
        - /currency: \"CHF\" is not one of \"EUR\" or \"GBP\"\n\
        Fix the arguments and call the tool again (retry 1 of 2).";
    assert_eq!(
        last_message(1),
        [ContentBlock::ToolResult(ToolResult {
            tool_use_id: "call_0_0".to_owned(),
            content: ToolResultContent::Text(expected_error.to_owned()),
            is_error: true,
        })]
    );
    let ContentBlock::ToolResult(retry) = &last_message(2)[0] else {
        panic!("expected the retry's result");
    };
    assert!(!retry.is_error);
    let usd: Value = serde_json::from_str(&retry.content.to_text()).unwrap();
    assert!((usd["usd"].as_f64().unwrap() - 11.0).abs() < 1e-9);
    agentloop::history::validate(&result.messages).unwrap();
}
