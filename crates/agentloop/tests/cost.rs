//! What runs cost: steps priced from their usage over each wire, the run's sum, a missing
//! price said as such, and the cost budget.

use std::str::FromStr;

use agentloop::cost::{Decimal, PriceSheet, Prices};
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::RunStopReason;
use agentloop::{Agent, Tool, history};
use agentloop_testkit::server::{MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::json;

fn usd(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// 2 USD per million input tokens, 8 out, cache reads 0.5 and writes 2.5.
fn sheet() -> PriceSheet {
    PriceSheet::new(usd("2"), usd("8")).with_cache(usd("0.5"), usd("2.5"))
}

fn echo() -> Tool {
    Tool::function("echo", "Echo", |v: serde_json::Value| async move {
        Ok::<_, String>(v.to_string())
    })
}

fn turns() -> Vec<Turn> {
    vec![
        Turn::tool_call("echo", json!({"x": 1}))
            .with_usage(1_000, 100)
            .with_cache_usage(400, 0),
        Turn::text("done")
            .with_usage(2_000, 50)
            .with_cache_usage(0, 1_000),
    ]
}

#[tokio::test]
async fn openai_usage_counts_cached_tokens_inside_the_input() {
    let server = MockServer::start(Wire::OpenAi, turns()).await.unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let provider = OpenAi::new(config).unwrap();
    let mut prices = Prices::empty();
    prices.set("openai", "gpt-test", sheet());
    let agent = Agent::builder(provider)
        .model("gpt-test")
        .tool(echo())
        .prices(prices)
        .build();
    let result = agent.run("go").await.unwrap();
    let costs: Vec<_> = result.steps.iter().map(|s| s.cost.unwrap()).collect();
    // Step 1: 600 uncached × 2 + 400 read × 0.5 + 100 out × 8, per million.
    assert_eq!(costs[0].input, usd("0.0012"));
    assert_eq!(costs[0].cache_read, usd("0.0002"));
    assert_eq!(costs[0].output, usd("0.0008"));
    assert_eq!(costs[0].total, usd("0.0022"));
    // Step 2: Chat Completions reports no cache writes, so 2,000 uncached × 2 + 50 out × 8.
    assert_eq!(costs[1].cache_write, usd("0"));
    assert_eq!(costs[1].total, usd("0.0044"));
    assert_eq!(result.cost.unwrap().total, usd("0.0066"));
}

#[tokio::test]
async fn anthropic_usage_counts_cached_tokens_apart_from_the_input() {
    let server = MockServer::start(Wire::Anthropic, turns()).await.unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-ant-test"));
    let provider = Anthropic::new(config).unwrap();
    let mut prices = Prices::empty();
    prices.set("anthropic", "claude-test", sheet());
    let agent = Agent::builder(provider)
        .model("claude-test")
        .tool(echo())
        .prices(prices)
        .build();
    let result = agent.run("go").await.unwrap();
    let costs: Vec<_> = result.steps.iter().map(|s| s.cost.unwrap()).collect();
    // Step 1: 1,000 uncached × 2 + 400 read × 0.5 + 100 out × 8.
    assert_eq!(costs[0].total, usd("0.0030"));
    // Step 2: 2,000 uncached × 2 + 1,000 written × 2.5 + 50 out × 8.
    assert_eq!(costs[1].total, usd("0.0069"));
    assert_eq!(result.cost.unwrap().total, usd("0.0099"));
}

#[tokio::test]
async fn a_model_without_a_price_has_no_cost_rather_than_a_zero() {
    let model = ScriptedModel::new(turns());
    let mut prices = Prices::empty();
    prices.set("scripted", "other-model", sheet());
    let agent = Agent::builder(model)
        .model("unpriced")
        .tool(echo())
        .prices(prices)
        .build();
    let result = agent.run("go").await.unwrap();
    assert!(result.steps.iter().all(|s| s.cost.is_none()));
    assert_eq!(result.cost, None);
    let saved = serde_json::to_value(&result).unwrap();
    assert!(saved.get("cost").is_none(), "{saved}");
}

#[tokio::test]
async fn the_cost_budget_stops_before_the_call_that_would_pass_it() {
    // Each call reads 100,000 tokens (0.2 USD) and writes 1,000 (0.008 USD).
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("echo", json!({"i": i})).with_usage(100_000, 1_000)
    });
    // The scripted model answers as model `scripted`: steps are priced by the model that
    // answered.
    let mut prices = Prices::empty();
    prices.set("scripted", "scripted", sheet());
    let agent = Agent::builder(model.clone())
        .model("m")
        .tool(echo())
        .prices(prices)
        .max_cost(usd("0.5"))
        .build();
    let result = agent.run("go").await.unwrap();
    // After two calls 0.416 USD is spent; a third would add about 0.2 more.
    assert_eq!(result.stop_reason, RunStopReason::CostBudget);
    assert_eq!(model.calls(), 2);
    assert_eq!(result.cost.unwrap().total, usd("0.416"));
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn without_a_budget_or_a_price_the_run_goes_on() {
    let model = ScriptedModel::from_fn(|_, i| {
        if i < 4 {
            Turn::tool_call("echo", json!({"i": i})).with_usage(100_000, 1_000)
        } else {
            Turn::text("done")
        }
    });
    // A budget, but no price for the model: it cannot be enforced and does not stop the run.
    let agent = Agent::builder(model.clone())
        .model("m")
        .tool(echo())
        .prices(Prices::empty())
        .max_cost(usd("0.000001"))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(model.calls(), 5);
}

#[test]
fn the_refresh_script_runs_offline_on_a_packaged_dataset() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("agentloop-prices-{}.json", std::process::id()));
    let status = std::process::Command::new("python3")
        .arg(root.join("scripts/refresh-prices.py"))
        .arg(root.join("crates/agentloop/tests/data/genai-prices-sample.json"))
        .arg(&out)
        .status();
    let Ok(status) = status else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    assert!(status.success());
    let table = Prices::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).ok();
    let claude = table
        .find("anthropic", "claude-sonnet-4-5-20250929")
        .unwrap();
    assert_eq!(claude.context_window, Some(1_000_000));
    assert_eq!(claude.sheet.input.at(250_000), usd("6"));
    // A dated price: the latest that has started applies.
    assert_eq!(
        table.find("openai", "o3").unwrap().sheet.input.at(0),
        usd("2")
    );
    // Time-of-day windows are dropped in favour of the base price.
    assert_eq!(
        table
            .find("deepseek", "deepseek-chat")
            .unwrap()
            .sheet
            .input
            .at(0),
        usd("0.135")
    );
    assert!(table.find("openai", "gpt-5.6-sol-2026-01-01").is_some());
}

/// The Responses API bills as OpenAI: same prices, and `input_tokens` include the cached ones.
#[test]
fn responses_usage_is_priced_as_openai() {
    let prices = Prices::builtin();
    let usage = agentloop::Usage {
        input_tokens: 1_000,
        output_tokens: 500,
        cache_read_tokens: 400,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
    };
    let openai = prices
        .cost("openai", "gpt-4o", &usage)
        .expect("gpt-4o is priced");
    let responses = prices
        .cost("openai-responses", "gpt-4o", &usage)
        .expect("gpt-4o is priced on the Responses API too");
    assert_eq!(responses, openai);
}
