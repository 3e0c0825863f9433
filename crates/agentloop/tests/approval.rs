//! Human approval (issue 39 items 1-3): policies, the pause, the paused run as JSON, and resuming
//! with decisions, over the testkit's OpenAI and Anthropic wire servers and the scripted model.
//!
//! Wire shapes relied on: OpenAI Chat Completions sends each tool result as a
//! `{"role": "tool", "tool_call_id", "content"}` message after the assistant's `tool_calls`
//! (https://platform.openai.com/docs/guides/function-calling); Anthropic Messages sends every
//! `tool_result` of a turn in the next user message, `is_error: true` for a failed call
//! (https://docs.anthropic.com/en/docs/build-with-claude/tool-use).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloop::conversation::Conversation;
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::{Approval, Decision, PausedRun, PendingApproval, RunEvent, RunStopReason};
use agentloop::{Agent, Error, Provider, Tool, history};
use agentloop_testkit::server::{MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

/// Send an email.
#[derive(Deserialize, JsonSchema)]
struct SendEmail {
    /// Recipient.
    to: String,
    /// Body text.
    body: String,
}

/// Transfer money.
#[derive(Deserialize, JsonSchema)]
struct Transfer {
    /// Amount in euros.
    amount: u64,
}

/// Counts of how often each tool ran.
#[derive(Default)]
struct Ran {
    weather: AtomicUsize,
    email: AtomicUsize,
    transfer: AtomicUsize,
}

/// The agent definition every test shares: weather runs freely, email always needs approval,
/// a transfer needs it above 100 (a policy function).
fn tools(ran: &Arc<Ran>) -> Vec<Tool> {
    let (w, e, t) = (ran.clone(), ran.clone(), ran.clone());
    vec![
        Tool::function("get_weather", "Current weather", move |a: GetWeather| {
            w.weather.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(format!("{}: 18 °C", a.city)) }
        }),
        Tool::function("send_email", "Send an email", move |a: SendEmail| {
            e.email.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(format!("sent to {}: {}", a.to, a.body)) }
        })
        .with_approval_required(true),
        Tool::function("transfer", "Transfer money", move |a: Transfer| {
            t.transfer.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(format!("transferred {}", a.amount)) }
        })
        .with_approval_policy(|ctx| match ctx.call.parse::<Transfer>() {
            Ok(t) if t.amount > 100 => {
                Approval::Require(format!("a transfer of {} is over 100", t.amount))
            }
            _ => Approval::Allow,
        }),
    ]
}

fn provider(wire: Wire, server: &MockServer) -> Arc<dyn Provider> {
    let mut config = HttpConfig::new(server.base_url());
    match wire {
        Wire::OpenAi => {
            config.api_key = Some(ApiKey::new("sk-test"));
            Arc::new(OpenAi::new(config).unwrap())
        }
        Wire::Anthropic => {
            config.api_key = Some(ApiKey::new("sk-ant-test"));
            Arc::new(Anthropic::new(config).unwrap())
        }
        Wire::Gemini => {
            config.api_key = Some(ApiKey::new("gemini-test"));
            Arc::new(agentloop::provider::gemini::Gemini::new(config).unwrap())
        }
        Wire::Bedrock => Arc::new(
            agentloop::provider::bedrock::Bedrock::new(
                config,
                "us-east-1",
                agentloop::provider::bedrock::BedrockAuth::Bearer(ApiKey::new("bedrock-test")),
            )
            .unwrap(),
        ),
        Wire::Responses => {
            config.api_key = Some(ApiKey::new("sk-test"));
            Arc::new(agentloop::provider::responses::OpenAiResponses::new(config).unwrap())
        }
    }
}

fn three_calls(ids: [&str; 3]) -> Turn {
    Turn::tool_calls([
        ("get_weather", json!({"city": "Paris"})),
        ("send_email", json!({"to": "bob@example.com", "body": "hi"})),
        ("transfer", json!({"amount": 500})),
    ])
    .with_ids(ids)
}

fn pending_ids(pending: &[PendingApproval]) -> Vec<&str> {
    pending.iter().map(|p| p.id.as_str()).collect()
}

/// The issue's acceptance test over one wire: three parallel calls, two need approval; the
/// third runs and the run pauses; the paused run goes through JSON into a fresh agent, one call
/// is approved with an edited input and the other denied; the next request holds both.
async fn pause_serialize_resume_over(wire: Wire, ids: [&str; 3], model: &str) -> Vec<Value> {
    let server = MockServer::start(wire, [three_calls(ids), Turn::text("Done.")])
        .await
        .unwrap();
    let json = {
        let ran = Arc::new(Ran::default());
        let agent = Agent::builder_shared(provider(wire, &server))
            .model(model)
            .tools(tools(&ran))
            .build();
        let result = agent.run("Weather, mail Bob, pay 500").await.unwrap();
        assert_eq!(result.stop_reason, RunStopReason::AwaitingApproval);
        assert_eq!(ran.weather.load(Ordering::SeqCst), 1, "the free call ran");
        assert_eq!(ran.email.load(Ordering::SeqCst), 0);
        assert_eq!(ran.transfer.load(Ordering::SeqCst), 0);
        assert_eq!(
            result.pending_approvals,
            [
                PendingApproval {
                    id: ids[1].into(),
                    tool: "send_email".into(),
                    input: json!({"to": "bob@example.com", "body": "hi"}),
                    reason: "tool `send_email` needs approval".into(),
                    input_request: None,
                },
                PendingApproval {
                    id: ids[2].into(),
                    tool: "transfer".into(),
                    input: json!({"amount": 500}),
                    reason: "a transfer of 500 is over 100".into(),
                    input_request: None,
                },
            ]
        );
        assert_eq!(server.requests().len(), 1);
        result.paused.unwrap().to_json().unwrap()
        // Everything else is dropped here.
    };

    let paused = PausedRun::from_json(&json).unwrap();
    let ran = Arc::new(Ran::default());
    let fresh = Agent::builder_shared(provider(wire, &server))
        .model(model)
        .tools(tools(&ran))
        .build();
    let result = fresh
        .resume(
            &paused,
            [
                (
                    ids[1],
                    Decision::edited(json!({"to": "alice@example.com", "body": "edited"})),
                ),
                (ids[2], Decision::deny("the user declined the transfer")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "Done.");
    assert_eq!(
        ran.weather.load(Ordering::SeqCst),
        0,
        "a recorded outcome is not re-run"
    );
    assert_eq!(ran.email.load(Ordering::SeqCst), 1);
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 0);
    history::validate(&result.messages).unwrap();
    assert_eq!(result.steps.len(), 2);
    assert_eq!(
        result.steps[0]
            .outcomes
            .iter()
            .map(|o| o.kind())
            .collect::<Vec<_>>(),
        ["completed", "completed", "denied"]
    );
    server.assert_complete();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    requests[1].body["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn approval_over_the_openai_wire_sends_the_edited_input_and_the_denial() {
    let messages =
        pause_serialize_resume_over(Wire::OpenAi, ["call_w", "call_e", "call_t"], "gpt-4o").await;
    assert_eq!(
        messages,
        [
            json!({"role": "user", "content": "Weather, mail Bob, pay 500"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_e", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\":\"alice@example.com\",\"body\":\"edited\"}"}},
                {"id": "call_t", "type": "function", "function": {"name": "transfer", "arguments": "{\"amount\":500}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "call_w", "content": "Paris: 18 °C"}),
            json!({"role": "tool", "tool_call_id": "call_e", "content": "sent to alice@example.com: edited"}),
            json!({"role": "tool", "tool_call_id": "call_t", "content": "Error: the call to `transfer` was denied: the user declined the transfer"}),
        ]
    );
}

#[tokio::test]
async fn approval_over_the_anthropic_wire_sends_the_edited_input_and_the_denial() {
    let messages = pause_serialize_resume_over(
        Wire::Anthropic,
        ["toolu_w", "toolu_e", "toolu_t"],
        "claude-test",
    )
    .await;
    assert_eq!(
        messages,
        [
            json!({"role": "user", "content": [{"type": "text", "text": "Weather, mail Bob, pay 500"}]}),
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_w", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_e", "name": "send_email", "input": {"to": "alice@example.com", "body": "edited"}},
                {"type": "tool_use", "id": "toolu_t", "name": "transfer", "input": {"amount": 500}}
            ]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_w", "content": "Paris: 18 °C", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_e", "content": "sent to alice@example.com: edited", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_t", "content": "Error: the call to `transfer` was denied: the user declined the transfer", "is_error": true}
            ]}),
        ]
    );
}

fn scripted_agent(model: &ScriptedModel, ran: &Arc<Ran>) -> Agent {
    Agent::builder(model.clone()).tools(tools(ran)).build()
}

#[tokio::test]
async fn deciding_some_calls_leaves_the_others_pending_and_the_run_paused() {
    let model = ScriptedModel::new([three_calls(["w", "e", "t"]), Turn::text("Done.")]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let first = agent.run("go").await.unwrap();
    let paused = first.paused.unwrap();

    let second = agent
        .resume(&paused, [("t", Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(second.stop_reason, RunStopReason::AwaitingApproval);
    assert_eq!(pending_ids(&second.pending_approvals), ["e"]);
    assert_eq!(model.calls(), 1, "no model call while a call waits");
    assert_eq!(
        ran.transfer.load(Ordering::SeqCst),
        0,
        "an approved call waits for the others"
    );

    let third = agent
        .resume(&second.paused.unwrap(), [("e", Decision::deny("not now"))])
        .await
        .unwrap();
    assert_eq!(third.stop_reason, RunStopReason::EndTurn);
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 1);
    assert_eq!(ran.email.load(Ordering::SeqCst), 0);
    assert_eq!(ran.weather.load(Ordering::SeqCst), 1);
    history::validate(&third.messages).unwrap();
    let results: Vec<(String, bool)> = third.steps[0]
        .tool_results
        .iter()
        .map(|r| (r.content.to_text(), r.is_error))
        .collect();
    assert_eq!(
        results,
        [
            ("Paris: 18 °C".to_owned(), false),
            (
                "Error: the call to `send_email` was denied: not now".to_owned(),
                true
            ),
            ("transferred 500".to_owned(), false),
        ]
    );
}

#[tokio::test]
async fn always_approve_covers_later_calls_of_the_tool_in_the_run() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("send_email", json!({"to": "a@x", "body": "1"})),
            ("send_email", json!({"to": "b@x", "body": "2"})),
        ])
        .with_ids(["e1", "e2"]),
        Turn::tool_call("send_email", json!({"to": "c@x", "body": "3"})).with_ids(["e3"]),
        Turn::text("Sent three."),
    ]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let first = agent.run("mail everyone").await.unwrap();
    assert_eq!(pending_ids(&first.pending_approvals), ["e1", "e2"]);

    // One sticky decision approves the other pending call of the tool and the later one.
    let json = first.paused.unwrap().to_json().unwrap();
    let done = agent
        .resume(
            &PausedRun::from_json(&json).unwrap(),
            [("e1", Decision::AlwaysApprove)],
        )
        .await
        .unwrap();
    assert_eq!(done.stop_reason, RunStopReason::EndTurn);
    assert_eq!(ran.email.load(Ordering::SeqCst), 3);
    assert_eq!(model.calls(), 3);

    // Without the sticky decision the later call pauses again.
    let model = ScriptedModel::new([
        Turn::tool_call("send_email", json!({"to": "a@x", "body": "1"})).with_ids(["e1"]),
        Turn::tool_call("send_email", json!({"to": "c@x", "body": "3"})).with_ids(["e3"]),
    ]);
    let agent = scripted_agent(&model, &ran);
    let first = agent.run("mail").await.unwrap();
    let again = agent
        .resume(&first.paused.unwrap(), [("e1", Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(again.stop_reason, RunStopReason::AwaitingApproval);
    assert_eq!(pending_ids(&again.pending_approvals), ["e3"]);
}

#[tokio::test]
async fn a_policy_function_asks_only_when_its_condition_holds() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("transfer", json!({"amount": 50})),
            ("transfer", json!({"amount": 150})),
        ])
        .with_ids(["small", "large"]),
        Turn::text("ok"),
    ]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let result = agent.run("pay").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::AwaitingApproval);
    assert_eq!(pending_ids(&result.pending_approvals), ["large"]);
    assert_eq!(
        result.pending_approvals[0].reason,
        "a transfer of 150 is over 100"
    );
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 1, "the small one ran");

    // A run-level policy sees every tool's calls and the run's state; the stricter answer
    // wins over the tool's own.
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Oslo"})).with_ids(["w"]),
        Turn::text("ok"),
    ]);
    let agent = Agent::builder(model)
        .tools(tools(&ran))
        .state("read-only session")
        .approval_policy(|ctx| match ctx.state::<&str>() {
            Some(mode) if ctx.call.name == "get_weather" => {
                Approval::Require(format!("{} (step {})", mode, ctx.step))
            }
            _ => Approval::Allow,
        })
        .build();
    let result = agent.run("weather").await.unwrap();
    assert_eq!(pending_ids(&result.pending_approvals), ["w"]);
    assert_eq!(
        result.pending_approvals[0].reason,
        "read-only session (step 0)"
    );
}

#[tokio::test]
async fn a_guardrail_denies_without_asking_and_the_model_sees_its_message() {
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("transfer", json!({"amount": 5000})),
            ("get_weather", json!({"city": "Paris"})),
        ])
        .with_ids(["t", "w"]),
        Turn::text("I cannot transfer that much."),
    ]);
    let ran = Arc::new(Ran::default());
    let agent = Agent::builder(model.clone())
        .tools(tools(&ran))
        .approval_policy(|ctx| match ctx.call.parse::<Transfer>() {
            Ok(t) if ctx.call.name == "transfer" && t.amount > 1000 => {
                Approval::Deny("transfers over 1000 are not allowed".into())
            }
            _ => Approval::Allow,
        })
        .build();
    let result = agent.run("pay 5000").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert!(result.pending_approvals.is_empty());
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 0);
    let sent = &model.requests()[1].messages[2];
    let results: Vec<Value> = sent
        .content
        .iter()
        .map(|b| serde_json::to_value(b).unwrap())
        .collect();
    assert_eq!(
        results,
        [
            json!({"type": "tool_result", "tool_use_id": "t", "content": "Error: the call to `transfer` was denied: transfers over 1000 are not allowed", "is_error": true}),
            json!({"type": "tool_result", "tool_use_id": "w", "content": "Paris: 18 °C"}),
        ]
    );
}

#[tokio::test]
async fn a_paused_run_of_another_format_version_is_refused() {
    let model = ScriptedModel::new([three_calls(["w", "e", "t"])]);
    let ran = Arc::new(Ran::default());
    let result = scripted_agent(&model, &ran).run("go").await.unwrap();
    let mut saved: Value =
        serde_json::from_str(&result.paused.unwrap().to_json().unwrap()).unwrap();
    assert_eq!(saved["version"], 1);
    saved["version"] = json!(2);
    let error = PausedRun::from_json(&saved.to_string()).unwrap_err();
    assert!(
        matches!(
            error,
            Error::UnsupportedVersion {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the paused run was saved in format version 2, but this version of agentloop reads only version 1; resume it with the agentloop version that saved it"
    );
    // Through serde too, e.g. inside a caller's own saved struct.
    let through_serde = serde_json::from_value::<PausedRun>(saved).unwrap_err();
    assert!(
        through_serde.to_string().contains("format version 2"),
        "{through_serde}"
    );
}

#[tokio::test]
async fn an_invalid_edit_is_an_error_to_the_caller_and_nothing_runs() {
    let model = ScriptedModel::new([three_calls(["w", "e", "t"]), Turn::text("Done.")]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let paused = agent.run("go").await.unwrap().paused.unwrap();

    let error = agent
        .resume(
            &paused,
            [
                ("e", Decision::edited(json!({"to": "alice@example.com"}))),
                ("t", Decision::Approve),
            ],
        )
        .await
        .unwrap_err();
    match &error {
        Error::ToolArgumentParse { tool, message } => {
            assert_eq!(tool, "send_email");
            assert!(
                message.starts_with("the edited input of call `e` does not fit: "),
                "{message}"
            );
            assert!(message.contains("body"), "{message}");
        }
        other => panic!("expected ToolArgumentParse, got {other:?}"),
    }
    let unknown = agent
        .resume(&paused, [("nope", Decision::Approve)])
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, Error::InvalidDecision { call_id, .. } if call_id == "nope"),
        "{unknown:?}"
    );
    assert_eq!(model.calls(), 1, "nothing was sent to the model");
    assert_eq!(ran.email.load(Ordering::SeqCst), 0);
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 0);

    // The paused value is intact: a valid decision goes on from it.
    let done = agent
        .resume(
            &paused,
            [("e", Decision::Approve), ("t", Decision::Approve)],
        )
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
}

#[tokio::test]
async fn calls_needing_no_approval_can_wait_with_the_others() {
    let model = ScriptedModel::new([three_calls(["w", "e", "t"]), Turn::text("Done.")]);
    let ran = Arc::new(Ran::default());
    let agent = Agent::builder(model)
        .tools(tools(&ran))
        .with_options(|o| o.hold_for_approval = true)
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(pending_ids(&result.pending_approvals), ["e", "t"]);
    assert_eq!(
        ran.weather.load(Ordering::SeqCst),
        0,
        "held until the decisions"
    );
    let done = agent
        .resume(
            &result.paused.unwrap(),
            [("e", Decision::Approve), ("t", Decision::Approve)],
        )
        .await
        .unwrap();
    assert_eq!(done.text(), "Done.");
    assert_eq!(ran.weather.load(Ordering::SeqCst), 1);
    assert_eq!(ran.email.load(Ordering::SeqCst), 1);
    assert_eq!(ran.transfer.load(Ordering::SeqCst), 1);
}

/// Event kinds, with the call id for tool events.
fn kinds(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            !matches!(
                e.kind(),
                "message_start" | "tool_call_delta" | "usage" | "message_stop" | "tool_call_end"
            )
        })
        .map(|e| match e {
            RunEvent::ToolCallReady { call } => format!("tool_call_ready {}", call.id),
            RunEvent::ToolCallResult { id, .. } => format!("tool_call_result {id}"),
            RunEvent::ApprovalRequested(p) => format!("approval_requested {} ({})", p.id, p.reason),
            RunEvent::RunFinish { result } => format!("run_finish {}", result.stop_reason),
            RunEvent::Model(agentloop::StreamEvent::ToolCallStart { id, .. }) => {
                format!("tool_call_start {id}")
            }
            other => other.kind().to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_run_reports_each_approval_after_the_ready_events_and_resumes() {
    let model = ScriptedModel::new([three_calls(["w", "e", "t"]), Turn::text("Done.")]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
    assert_eq!(
        kinds(&events),
        [
            "run_start",
            "step_start",
            "tool_call_start w",
            "tool_call_start e",
            "tool_call_start t",
            "tool_call_ready w",
            "tool_call_ready e",
            "tool_call_ready t",
            "approval_requested e (tool `send_email` needs approval)",
            "approval_requested t (a transfer of 500 is over 100)",
            "tool_call_result w",
            "run_finish awaiting_approval",
        ]
    );
    let requested = events
        .iter()
        .find(|e| e.kind() == "approval_requested")
        .unwrap();
    assert_eq!(
        serde_json::to_value(requested).unwrap(),
        json!({
            "type": "approval_requested",
            "id": "e",
            "tool": "send_email",
            "input": {"to": "bob@example.com", "body": "hi"},
            "reason": "tool `send_email` needs approval"
        })
    );
    let Some(RunEvent::RunFinish { result }) = events.last() else {
        panic!("no run_finish");
    };
    let paused = result.paused.as_deref().unwrap();
    let events: Vec<RunEvent> = agent
        .resume_stream(
            paused,
            [("e", Decision::Approve), ("t", Decision::deny("no"))],
        )
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        kinds(&events),
        [
            "run_start",
            "tool_call_result e",
            "tool_call_result t",
            "step_finish",
            "step_start",
            "text_delta",
            "text_delta",
            "text_delta",
            "step_finish",
            "run_finish end_turn",
        ]
    );
}

#[tokio::test]
async fn a_conversation_pauses_resumes_and_keeps_sticky_approvals() {
    let model = ScriptedModel::new([
        Turn::tool_call("send_email", json!({"to": "a@x", "body": "1"})).with_ids(["e1"]),
        Turn::text("Sent."),
        Turn::tool_call("send_email", json!({"to": "b@x", "body": "2"})).with_ids(["e2"]),
        Turn::text("Sent again."),
    ]);
    let ran = Arc::new(Ran::default());
    let mut chat = Conversation::new(&scripted_agent(&model, &ran));
    let first = chat.send("mail a").await.unwrap().finish().await.unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingApproval);
    assert_eq!(pending_ids(&chat.pending_approvals()), ["e1"]);
    // A new prompt waits for the decisions.
    let refused = chat.send("something else").await.unwrap_err();
    assert!(
        refused.to_string().contains("wait for approval"),
        "{refused}"
    );

    // A bad decision is an error and leaves the conversation paused as it was.
    let bad = chat
        .decide([("e1", Decision::edited(json!({"to": 5})))])
        .unwrap_err();
    assert!(matches!(bad, Error::ToolArgumentParse { .. }), "{bad:?}");
    assert_eq!(pending_ids(&chat.pending_approvals()), ["e1"]);
    assert_eq!(model.calls(), 1);

    let reply = chat
        .decide([("e1", Decision::AlwaysApprove)])
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Sent.");
    assert!(chat.pending_approvals().is_empty());
    history::validate(&chat.history()).unwrap();

    // Sticky for the conversation: the next send's call runs without asking.
    let second = chat.send("mail b").await.unwrap().finish().await.unwrap();
    assert_eq!(second.stop_reason, RunStopReason::EndTurn);
    assert_eq!(second.text(), "Sent again.");
    assert_eq!(ran.email.load(Ordering::SeqCst), 2);
    assert_eq!(chat.history().len(), 8);
    history::validate(&chat.history()).unwrap();
}

#[tokio::test]
async fn a_descriptor_file_can_require_approval() {
    let yaml = r#"
name: deploy
description: Deploy the service
needs_approval: true
mock: {response: deployed}
"#;
    let mut registry = agentloop::Registry::new();
    for descriptor in
        agentloop::registry::parse_descriptors(yaml, agentloop::registry::Syntax::Yaml, "d.yaml")
            .unwrap()
    {
        assert!(descriptor.needs_approval);
        // Written back as it was read; PromptKit's camelCase spelling reads the same.
        let written = serde_json::to_value(&descriptor).unwrap();
        assert_eq!(written["needs_approval"], true);
        let mut camel = written.clone();
        camel.as_object_mut().unwrap().remove("needs_approval");
        camel["needsApproval"] = json!(true);
        let reread: agentloop::ToolDescriptor = serde_json::from_value(camel).unwrap();
        assert_eq!(reread, descriptor);
        registry.add_descriptor(descriptor).unwrap();
    }
    let plain: agentloop::ToolDescriptor =
        serde_json::from_value(json!({"name": "free", "description": "no approval"})).unwrap();
    assert!(!plain.needs_approval);
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("needs_approval")
            .is_none()
    );
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({})).with_ids(["d"]),
        Turn::text("Deployed."),
    ]);
    let agent = Agent::builder(model).tools(registry.tools()).build();
    let result = agent.run("deploy").await.unwrap();
    assert_eq!(pending_ids(&result.pending_approvals), ["d"]);
    assert_eq!(
        result.pending_approvals[0].reason,
        "tool `deploy` needs approval"
    );
    let done = agent
        .resume(&result.paused.unwrap(), [("d", Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(done.text(), "Deployed.");
    assert_eq!(done.steps[0].tool_results[0].content.to_text(), "deployed");
}

#[tokio::test]
async fn a_run_cancelled_before_its_pause_answers_every_call() {
    let model = ScriptedModel::new([Turn::tool_calls([
        ("slow", json!({})),
        ("send_email", json!({"to": "a@x", "body": "1"})),
    ])
    .with_ids(["s", "e"])]);
    let ran = Arc::new(Ran::default());
    let token = tokio_util::sync::CancellationToken::new();
    let cancel = token.clone();
    let slow = Tool::from_schema("slow", "Waits", json!({"type": "object"}))
        .unwrap()
        .with_handler(move |_ctx: agentloop::ToolContext, _input: Value| {
            let cancel = cancel.clone();
            async move {
                // Cancel the run while the free call runs, and never finish.
                cancel.cancel();
                std::future::pending::<()>().await;
                Ok::<_, agentloop::ToolError>(agentloop::ToolOutput::text("unreachable"))
            }
        });
    let agent = Agent::builder(model).tools(tools(&ran)).tool(slow).build();
    let result = agent
        .with_options(|o| o.cancel = Some(token))
        .run("go")
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    assert!(result.paused.is_none());
    history::validate(&result.messages).unwrap();
    let answered: Vec<(&str, &str)> = result.steps[0]
        .tool_calls
        .iter()
        .zip(&result.steps[0].outcomes)
        .map(|(c, o)| (c.id.as_str(), o.kind()))
        .collect();
    assert_eq!(answered, [("s", "cancelled"), ("e", "cancelled")]);
}

#[tokio::test]
async fn a_resumed_stream_does_not_repeat_the_ready_events_when_nothing_ran_before_the_pause() {
    let model = ScriptedModel::new([
        Turn::tool_call("send_email", json!({"to": "a@x", "body": "1"})).with_ids(["e"]),
        Turn::text("Sent."),
    ]);
    let ran = Arc::new(Ran::default());
    let agent = scripted_agent(&model, &ran);
    let result = agent.run("mail").await.unwrap();
    let events: Vec<RunEvent> = agent
        .resume_stream(
            result.paused.as_deref().unwrap(),
            [("e", Decision::Approve)],
        )
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        kinds(&events),
        [
            "run_start",
            "tool_call_result e",
            "step_finish",
            "step_start",
            "text_delta",
            "text_delta",
            "text_delta",
            "step_finish",
            "run_finish end_turn",
        ]
    );
}

#[tokio::test]
async fn approving_everything_gives_the_same_run_as_never_pausing() {
    // The free call in the middle: its result, recorded first, must still go back in call order.
    let turns = || {
        [
            Turn::tool_calls([
                ("send_email", json!({"to": "bob@example.com", "body": "hi"})),
                ("get_weather", json!({"city": "Paris"})),
                ("transfer", json!({"amount": 500})),
            ])
            .with_ids(["e", "w", "t"]),
            Turn::text("Done."),
        ]
    };
    let ran = Arc::new(Ran::default());

    let free: Vec<Tool> = tools(&ran)
        .into_iter()
        .map(|t| t.with_approval_required(false))
        .collect();
    let never = Agent::builder(ScriptedModel::new(turns()))
        .tools(free)
        .build()
        .run("go")
        .await
        .unwrap();

    let agent = scripted_agent(&ScriptedModel::new(turns()), &ran);
    let json = agent
        .run("go")
        .await
        .unwrap()
        .paused
        .unwrap()
        .to_json()
        .unwrap();
    let resumed = agent
        .resume(
            &PausedRun::from_json(&json).unwrap(),
            [("e", Decision::Approve), ("t", Decision::Approve)],
        )
        .await
        .unwrap();

    assert_eq!(resumed.messages, never.messages);
    assert_eq!(resumed.stop_reason, never.stop_reason);
    assert_eq!(
        (resumed.turns, resumed.tool_calls, resumed.usage),
        (never.turns, never.tool_calls, never.usage)
    );
    let results = |r: &agentloop::RunResult| -> Vec<_> {
        r.steps
            .iter()
            .map(|s| {
                (
                    s.tool_calls.clone(),
                    s.outcomes.clone(),
                    s.tool_results.clone(),
                )
            })
            .collect()
    };
    assert_eq!(results(&resumed), results(&never));
}
