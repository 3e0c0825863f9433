//! Context-window management: a run whose history grows past a small window runs to the end
//! with each strategy, no request goes over the window by the estimate, and the history stays
//! valid; summaries by the scripted model; Anthropic's native context management as request
//! fields.

use std::sync::Arc;

use agentloop::context::{
    AnthropicEdit, ContextPolicy, Family, OnSummaryFailure, Strategy, Summarizer,
    anthropic_context_management, estimate,
};
use agentloop::provider::anthropic::{Anthropic, AnthropicOptions};
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::RunStopReason;
use agentloop::{Agent, ContentBlock, Error, Message, Provider, Request, Role, Tool, history};
use agentloop_testkit::server::{MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::{Value, json};

/// The window of these tests, and the room kept for the answer.
const WINDOW: u64 = 3_000;
const RESERVE: u64 = 500;
const ROUNDS: usize = 12;

/// A tool whose every result is about 1,500 bytes (some 400 tokens): a dozen of them overflow
/// the window.
fn fetch() -> Tool {
    Tool::function("fetch", "Fetch a page", |v: Value| async move {
        let page = v["page"].as_u64().unwrap_or(0);
        Ok::<_, String>(format!("page {page}: {}", "lorem ipsum ".repeat(125)))
    })
}

/// Calls `fetch` for `ROUNDS` rounds, then answers, reporting the estimate as its input
/// tokens (so the run's correction keeps the estimate as it is).
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &Request, i| {
        let turn = if i < ROUNDS {
            Turn::tool_call("fetch", json!({"page": i}))
        } else {
            Turn::text("read them all")
        };
        turn.with_usage(estimate(request, Family::OpenAi), 5)
    })
}

fn policy(strategy: Strategy) -> ContextPolicy {
    ContextPolicy::new()
        .window(WINDOW)
        .reserve_output(RESERVE)
        .strategy(strategy)
}

fn agent(model: impl Provider, policy: Option<ContextPolicy>) -> Agent {
    let mut builder = Agent::builder(model)
        .model("m")
        .system("Read every page.")
        .tool(fetch())
        .max_tool_iterations(ROUNDS as u32 + 1);
    if let Some(policy) = policy {
        builder = builder.context(policy);
    }
    builder.build()
}

/// Every request fits the window by the estimate, and is a valid history.
fn assert_fitted(requests: &[Request], family: Family) {
    for (i, request) in requests.iter().enumerate() {
        let tokens = estimate(request, family);
        assert!(
            tokens <= WINDOW - RESERVE,
            "request {i} is estimated at {tokens} tokens"
        );
        history::validate(&request.messages).unwrap();
    }
}

#[tokio::test]
async fn without_a_policy_the_history_outgrows_the_window() {
    let model = model();
    let result = agent(model.clone(), None).run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    let last = model.last_request().unwrap();
    assert!(estimate(&last, Family::OpenAi) > WINDOW);
}

#[tokio::test]
async fn a_policy_without_a_strategy_that_helps_refuses_to_send() {
    let model = model();
    let result = agent(
        model.clone(),
        Some(policy(Strategy::ClearToolResults { keep_last: 20 })),
    )
    .run("go")
    .await
    .unwrap();
    let error = result.error.unwrap();
    assert!(
        matches!(
            error,
            Error::ContextWindow {
                budget: 2_500,
                window: 3_000,
                ..
            }
        ),
        "{error}"
    );
    assert_fitted(&model.requests(), Family::OpenAi);
}

#[tokio::test]
async fn clearing_old_tool_results_keeps_the_calls_and_their_results_paired() {
    let model = model();
    let result = agent(
        model.clone(),
        Some(policy(Strategy::ClearToolResults { keep_last: 2 })),
    )
    .run("go")
    .await
    .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "read them all");
    assert_eq!(model.calls(), ROUNDS + 1);
    assert_fitted(&model.requests(), Family::OpenAi);
    history::validate(&result.messages).unwrap();
    // Every call is still there, with a result: the oldest ones now say they were cleared.
    assert_eq!(result.messages.len(), 2 + 2 * ROUNDS);
    let results: Vec<String> = result
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.content.to_text()),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], agentloop::context::CLEARED_NOTE);
    assert!(results[ROUNDS - 1].starts_with("page 11: lorem"));
}

#[tokio::test]
async fn trimming_turns_keeps_the_task_and_never_orphans_a_result() {
    let model = model();
    let result = agent(model.clone(), Some(policy(Strategy::TrimTurns)))
        .run("go")
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(model.calls(), ROUNDS + 1);
    assert_fitted(&model.requests(), Family::OpenAi);
    history::validate(&result.messages).unwrap();
    // The task stays first; the oldest rounds are gone, the last ones kept whole.
    assert_eq!(result.messages[0], Message::user("go"));
    assert!(result.messages.len() < 2 + 2 * ROUNDS);
    assert_eq!(result.messages[1].role, Role::Assistant);
}

#[tokio::test]
async fn trimming_removes_whole_old_turns_of_a_conversation_first() {
    // A history of earlier turns, each a prompt and an answer, then a new task.
    let mut messages = Vec::new();
    for i in 0..6 {
        messages.push(Message::user(format!(
            "question {i}: {}",
            "why ".repeat(400)
        )));
        messages.push(Message::assistant(format!("answer {i}")));
    }
    messages.push(Message::user("now this"));
    let model = ScriptedModel::new([Turn::text("ok")]);
    let result = agent(
        model.clone(),
        Some(policy(Strategy::TrimTurns).keep_first_user(false)),
    )
    .run(messages)
    .await
    .unwrap();
    assert_fitted(&model.requests(), Family::OpenAi);
    let sent = &model.requests()[0].messages;
    // Whole turns went, from the oldest: what is left starts with a prompt.
    assert!(sent.len() < 13);
    assert!(sent.len() % 2 == 1);
    assert!(sent[0].text().starts_with("question "), "{:?}", sent[0]);
    assert_eq!(sent.last().unwrap().text(), "now this");
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn trimming_keeps_the_first_prompt_and_drops_its_answer_and_later_turns() {
    let mut messages = Vec::new();
    for i in 0..6 {
        messages.push(Message::user(format!(
            "question {i}: {}",
            "why ".repeat(400)
        )));
        messages.push(Message::assistant(format!(
            "answer {i}: {}",
            "because ".repeat(50)
        )));
    }
    messages.push(Message::user("now this"));
    let model = ScriptedModel::new([Turn::text("ok")]);
    let result = agent(model.clone(), Some(policy(Strategy::TrimTurns)))
        .run(messages.clone())
        .await
        .unwrap();
    assert_fitted(&model.requests(), Family::OpenAi);
    let sent = &model.requests()[0].messages;
    // The first question stays, its answer went first, then the oldest whole turns.
    assert_eq!(sent[0], messages[0]);
    assert!(sent[1].text().starts_with("question "), "{:?}", sent[1]);
    assert_eq!(sent.last().unwrap().text(), "now this");
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn summaries_replace_older_messages_with_one() {
    let model = model();
    let summarizer = ScriptedModel::from_fn(|_, i| Turn::text(format!("summary {i}")));
    let result = agent(
        model.clone(),
        Some(policy(Strategy::Summarize(
            Summarizer::new()
                .with_model(Arc::new(summarizer.clone()), "small")
                .keep_last(1),
        ))),
    )
    .run("go")
    .await
    .unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::EndTurn,
        "{:?}",
        result.error
    );
    assert_eq!(model.calls(), ROUNDS + 1);
    assert_fitted(&model.requests(), Family::OpenAi);
    history::validate(&result.messages).unwrap();
    assert!(summarizer.calls() >= 1);
    // The summary call: the summarizer's model, its instructions, the messages as text.
    let asked = &summarizer.requests()[0];
    assert_eq!(asked.model, "small");
    assert!(asked.system.as_deref().unwrap().starts_with("Summarize"));
    assert!(
        asked.messages[0]
            .text()
            .contains("assistant called tool fetch with")
    );
    // The task, then the latest summary as one message, then the kept calls.
    let last = summarizer.calls() - 1;
    assert_eq!(result.messages[0], Message::user("go"));
    assert_eq!(
        result.messages[1],
        Message::user(format!(
            "Summary of the earlier part of this conversation:\nsummary {last}"
        ))
    );
    assert_eq!(result.messages[2].role, Role::Assistant);
    // The summaries' tokens count in the run's usage.
    let steps: u64 = result
        .steps
        .iter()
        .map(|s| s.response.usage.input_tokens)
        .sum();
    let summaries: u64 = summarizer.calls() as u64 * 10;
    assert_eq!(result.usage.input_tokens, steps + summaries);
}

#[tokio::test]
async fn a_failing_summary_ends_the_run_or_falls_back_to_trimming() {
    let failing = || {
        ScriptedModel::from_fn(|_, _| {
            Turn::error(Error::Overloaded {
                provider: "scripted".into(),
                message: "busy".into(),
            })
        })
    };
    let error = agent(
        model(),
        Some(policy(Strategy::Summarize(
            Summarizer::new().with_model(Arc::new(failing()), "small"),
        ))),
    )
    .run("go")
    .await
    .unwrap()
    .error
    .unwrap();
    assert!(matches!(error, Error::Overloaded { .. }), "{error}");

    let model = model();
    let result = agent(
        model.clone(),
        Some(policy(Strategy::Summarize(
            Summarizer::new()
                .with_model(Arc::new(failing()), "small")
                .on_failure(OnSummaryFailure::Trim),
        ))),
    )
    .run("go")
    .await
    .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_fitted(&model.requests(), Family::OpenAi);
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn reported_usage_corrects_the_estimate() {
    // The provider reports twice the estimate: the run learns it after the first call
    // and fits the window by the corrected figure, so it trims much earlier than by bytes.
    let model = ScriptedModel::from_fn(|request: &Request, i| {
        let reported = 2 * estimate(request, Family::OpenAi);
        let turn = if i < ROUNDS {
            Turn::tool_call("fetch", json!({"page": i}))
        } else {
            Turn::text("done")
        };
        turn.with_usage(reported, 5)
    });
    let result = agent(model.clone(), Some(policy(Strategy::TrimTurns)))
        .run("go")
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    for request in &model.requests()[1..] {
        assert!(2 * estimate(request, Family::OpenAi) <= WINDOW - RESERVE);
    }
}

async fn over_the_wire(wire: Wire, strategy: Strategy) -> (MockServer, Vec<Message>) {
    let mut turns: Vec<Turn> = (0..ROUNDS)
        .map(|i| Turn::tool_call("fetch", json!({"page": i})))
        .collect();
    turns.push(Turn::text("read them all"));
    let server = MockServer::start(wire, turns).await.unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let provider: Arc<dyn Provider> = match wire {
        Wire::Anthropic => Arc::new(Anthropic::new(config).unwrap()),
        _ => Arc::new(OpenAi::new(config).unwrap()),
    };
    let agent = Agent::builder(provider)
        .model("m")
        .tool(fetch())
        .max_tool_iterations(ROUNDS as u32 + 1)
        .context(policy(strategy))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.text(), "read them all");
    server.assert_complete();
    (server, result.messages)
}

#[tokio::test]
async fn strategies_fit_the_requests_sent_to_openai_and_anthropic() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        for strategy in [
            Strategy::ClearToolResults { keep_last: 1 },
            Strategy::TrimTurns,
        ] {
            let (server, messages) = over_the_wire(wire, strategy.clone()).await;
            history::validate(&messages).unwrap();
            let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
            assert_eq!(bodies.len(), ROUNDS + 1);
            let last = bodies.last().unwrap();
            let sent = last["messages"].as_array().unwrap().len();
            let text = last.to_string();
            match strategy {
                Strategy::ClearToolResults { .. } => {
                    // Every call and result went, the oldest results cleared.
                    assert!(text.contains(agentloop::context::CLEARED_NOTE), "{wire:?}");
                    assert!(sent >= 2 * ROUNDS, "{wire:?}: {sent}");
                }
                _ => {
                    assert!(!text.contains("page 0: lorem"), "{wire:?}");
                    assert!(sent < 2 * ROUNDS, "{wire:?}: {sent}");
                }
            }
            // The body's text is within the window at the family's byte ratio.
            assert!(
                text.len() < 4 * WINDOW as usize,
                "{wire:?} {strategy:?}: {}",
                text.len()
            );
        }
    }
}

#[test]
fn anthropic_context_management_is_sent_with_its_betas() {
    // Golden body from Anthropic's context editing and compaction pages (see
    // tests/golden/anthropic/README.md).
    let provider = Anthropic::with_options(
        HttpConfig::new("http://127.0.0.1:9"),
        AnthropicOptions::default(),
    )
    .unwrap();
    let mut request = Request {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::user("Hello")],
        max_tokens: Some(1024),
        ..Request::default()
    };
    anthropic_context_management(
        &mut request,
        &[
            AnthropicEdit::ClearToolUses {
                trigger: Some(30_000),
                keep: Some(3),
                clear_at_least: Some(5_000),
                exclude_tools: vec!["web_search".into()],
            },
            AnthropicEdit::Compact {
                trigger: Some(150_000),
            },
        ],
    );
    let wire = provider.prepare(&request, false).unwrap();
    let body: Value = serde_json::from_slice(&wire.body).unwrap();
    let path = format!(
        "{}/tests/golden/anthropic/context_management.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(body, expected);
    assert_eq!(
        wire.headers.get("anthropic-beta").unwrap(),
        "context-management-2025-06-27,compact-2026-01-12"
    );
}

// The token budget counts what the provider bills: Anthropic reports cached tokens apart from
// `input_tokens`, and they count; the run stops before a call whose input, by the estimate,
// would take it over.

#[tokio::test]
async fn the_token_budget_counts_anthropic_cache_tokens() {
    // 10 input + 5 output + 1,000 read from the cache: 1,015 billed tokens.
    let turns = vec![
        Turn::tool_call("fetch", json!({"page": 0}))
            .with_usage(10, 5)
            .with_cache_usage(1_000, 0),
        Turn::text("never asked"),
    ];
    let server = MockServer::start(Wire::Anthropic, turns).await.unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let agent = Agent::builder(Anthropic::new(config).unwrap())
        .model("m")
        .tool(fetch())
        .max_total_tokens(1_000)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::TokenBudget);
    assert_eq!(server.calls(), 1);
    history::validate(&result.messages).unwrap();
}

#[tokio::test]
async fn the_token_budget_stops_before_a_call_that_would_pass_it() {
    let model = model();
    // The first request is small; by the third the history holds two long results, and
    // what was spent plus the next request's estimate passes the budget.
    let agent =
        agent(model.clone(), None).with_options(|o| o.limits.max_total_tokens = Some(1_500));
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::TokenBudget);
    let spent = result.usage.total_tokens();
    assert!(spent <= 1_500, "{spent}");
    let next = {
        let mut request = model.last_request().unwrap();
        request.messages = result.messages.clone();
        estimate(&request, Family::OpenAi)
    };
    assert!(spent + next > 1_500, "{spent} + {next}");
    history::validate(&result.messages).unwrap();
}
