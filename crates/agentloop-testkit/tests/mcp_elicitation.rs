//! An MCP server's request for user input pauses the run like an approval, and the person's
//! answer resumes it, in this agent or a fresh one from the saved run. Both forms the spec
//! has: `elicitation/create` sent by the server during `tools/call` (MCP 2025-06-18 and
//! 2025-11-25, "Client Features > Elicitation") and the `input_required` result the client
//! answers by calling again with `inputResponses` and the echoed `requestState` (2026-07-28,
//! multi round-trip requests, SEP-2322), as rmcp 3.9 implements them.

#![cfg(feature = "mcp")]

use agentloop::executor::{McpHttp, McpProtocol, McpStdio};
use agentloop::registry::Registry;
use agentloop::run::{Decision, InputRequest, PausedRun, PendingApproval};
use agentloop::{Agent, Error, RunStopReason, history};
use agentloop_testkit::mcp::{TestMcpServer, serve_http_with};
use agentloop_testkit::{ScriptedModel, Turn};
use serde_json::{Value, json};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_agentloop-mcp-test-server");

/// How the test reaches the eliciting server.
#[derive(Clone, Copy)]
enum Via {
    Stateless,
    Handshake,
    StdioHandshake,
}

/// A registry connected to an eliciting test server (kept alive with it).
async fn connect(via: Via, url: &str) -> Registry {
    let mut registry = Registry::new();
    let info = match via {
        Via::Stateless => registry
            .add_mcp_http(McpHttp::new(url).protocol(McpProtocol::Stateless))
            .await
            .unwrap(),
        Via::Handshake => registry
            .add_mcp_http(McpHttp::new(url).protocol(McpProtocol::Handshake("2025-11-25".into())))
            .await
            .unwrap(),
        Via::StdioHandshake => registry
            .add_mcp_stdio(
                McpStdio::new(TEST_SERVER)
                    .env("AGENTLOOP_TEST_MCP_ELICIT", "1")
                    .protocol(McpProtocol::Handshake("2025-06-18".into())),
            )
            .await
            .unwrap(),
    };
    let agreed = match via {
        Via::Stateless => "2026-07-28",
        Via::Handshake => "2025-11-25",
        Via::StdioHandshake => "2025-06-18",
    };
    assert_eq!(info.protocol_version.as_deref(), Some(agreed));
    registry
}

fn agent(model: &ScriptedModel, registry: &Registry) -> Agent {
    Agent::builder(model.clone())
        .tools(registry.tools())
        .build()
}

/// The schema `greet` asks with, as rmcp's `ElicitationSchema` puts it on the wire.
fn name_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"]
    })
}

/// The run pauses with the server's question; the saved run resumes in a fresh agent (a new
/// connection, a new model) with `decision`, and the call's result is `expected`.
async fn pause_and_answer(via: Via, decision: Decision, expected: &str) {
    let server = serve_http_with(TestMcpServer::new().eliciting())
        .await
        .unwrap();
    let model = ScriptedModel::new([Turn::tool_call("greet", json!({})).with_ids(["call_1"])]);
    let registry = connect(via, &server.url).await;
    let first = agent(&model, &registry).run("Greet me").await.unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingApproval);
    let resume = match via {
        // The key of the request in `inputRequests`; rmcp's server sends no state here.
        Via::Stateless => json!({"key": "name"}),
        _ => Value::Null,
    };
    assert_eq!(
        first.pending_approvals,
        [PendingApproval {
            id: "call_1".into(),
            tool: "greet".into(),
            input: json!({}),
            reason: "What is your name?".into(),
            input_request: Some(InputRequest {
                message: "What is your name?".into(),
                schema: name_schema(),
                resume,
            }),
        }]
    );
    let saved = first.paused.unwrap().to_json().unwrap();
    drop(registry);

    let model = ScriptedModel::new([Turn::text("Greeted.")]);
    let registry = connect(via, &server.url).await;
    let fresh = agent(&model, &registry);
    let done = fresh
        .resume(
            &PausedRun::from_json(&saved).unwrap(),
            [("call_1", decision)],
        )
        .await
        .unwrap();
    assert_eq!(done.stop_reason, RunStopReason::EndTurn, "{:?}", done.error);
    history::validate(&done.messages).unwrap();
    let results: Vec<(String, bool)> = done.steps[0]
        .tool_results
        .iter()
        .map(|r| (r.content.to_text(), r.is_error))
        .collect();
    assert_eq!(results, [(expected.to_owned(), false)]);
    // The model's next request carries the answer's result.
    let sent = model.last_request().unwrap();
    assert_eq!(
        sent.messages.last().unwrap().content,
        done.messages[2].content
    );
}

#[tokio::test]
async fn a_stateless_server_asking_in_its_result_pauses_and_the_answer_resumes_a_fresh_agent() {
    pause_and_answer(
        Via::Stateless,
        Decision::accept(json!({"name": "Ada"})),
        "Hello, Ada!",
    )
    .await;
}

#[tokio::test]
async fn a_handshake_server_asking_with_elicitation_create_pauses_and_the_answer_resumes() {
    pause_and_answer(
        Via::Handshake,
        Decision::accept(json!({"name": "Ada"})),
        "Hello, Ada!",
    )
    .await;
}

#[tokio::test]
async fn a_stdio_server_asking_pauses_too() {
    pause_and_answer(
        Via::StdioHandshake,
        Decision::accept(json!({"name": "Bob"})),
        "Hello, Bob!",
    )
    .await;
}

#[tokio::test]
async fn declining_and_cancelling_reach_the_server_in_both_generations() {
    pause_and_answer(Via::Stateless, Decision::decline(), "You declined.").await;
    pause_and_answer(Via::Handshake, Decision::decline(), "You declined.").await;
    pause_and_answer(Via::Stateless, Decision::cancel(), "You cancelled.").await;
    pause_and_answer(Via::Handshake, Decision::cancel(), "You cancelled.").await;
}

#[tokio::test]
async fn an_answer_must_fit_the_requested_schema_and_an_approval_is_no_answer() {
    let server = serve_http_with(TestMcpServer::new().eliciting())
        .await
        .unwrap();
    let model = ScriptedModel::new([Turn::tool_call("greet", json!({})).with_ids(["call_1"])]);
    let registry = connect(Via::Stateless, &server.url).await;
    let agent = agent(&model, &registry);
    let paused = agent.run("Greet me").await.unwrap().paused.unwrap();

    let wrong = agent
        .resume(&paused, [("call_1", Decision::accept(json!({"name": 5})))])
        .await
        .unwrap_err();
    let Error::InvalidDecision { call_id, message } = wrong else {
        panic!("expected InvalidDecision, got {wrong:?}");
    };
    assert_eq!(call_id, "call_1");
    assert!(
        message.starts_with("the input does not fit the requested schema: "),
        "{message}"
    );

    let approval = agent
        .resume(&paused, [("call_1", Decision::Approve)])
        .await
        .unwrap_err();
    assert_eq!(
        approval.to_string(),
        Error::InvalidDecision {
            call_id: "call_1".into(),
            message: "the call asks for input (\"What is your name?\"): answer it with \
                      Decision::accept, decline or cancel"
                .into()
        }
        .to_string()
    );
    assert_eq!(model.calls(), 1, "nothing ran on a refused decision");
}

#[tokio::test]
async fn a_run_that_cannot_pause_refuses_the_request_and_the_model_is_told() {
    let server = serve_http_with(TestMcpServer::new().eliciting())
        .await
        .unwrap();
    for via in [Via::Stateless, Via::Handshake] {
        let model = ScriptedModel::new([
            Turn::tool_call("greet", json!({})).with_ids(["call_1"]),
            Turn::text("I could not ask."),
        ]);
        let registry = connect(via, &server.url).await;
        let result = agent(&model, &registry)
            .with_options(|o| o.non_interactive = true)
            .run("Greet me")
            .await
            .unwrap();
        assert_eq!(result.stop_reason, RunStopReason::EndTurn);
        assert!(result.pending_approvals.is_empty());
        let results: Vec<(String, bool)> = result.steps[0]
            .tool_results
            .iter()
            .map(|r| (r.content.to_text(), r.is_error))
            .collect();
        assert_eq!(
            results,
            [(
                "Error: the tool asks a person for input (\"What is your name?\"), but nobody \
                 can answer in this run (it is not interactive); go on without it"
                    .to_owned(),
                true
            )]
        );
    }
}

/// A durable run records the question as the call's state, and `decide_run` answers it: the
/// call runs again with the answer, once.
#[tokio::test]
async fn a_durable_run_pauses_for_input_and_decide_run_answers_it() {
    use agentloop::run::MemoryStore;

    let server = serve_http_with(TestMcpServer::new().eliciting())
        .await
        .unwrap();
    let model = ScriptedModel::new([
        Turn::tool_call("greet", json!({})).with_ids(["call_1"]),
        Turn::text("Greeted."),
    ]);
    let registry = connect(Via::Stateless, &server.url).await;
    let agent = agent(&model, &registry);
    let store = MemoryStore::new();
    let first = agent.run_durable("r1", "Greet me", &store).await.unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingApproval);
    assert_eq!(
        first.pending_approvals[0]
            .input_request
            .as_ref()
            .map(|r| r.message.as_str()),
        Some("What is your name?")
    );
    let done = agent
        .decide_run(
            "r1",
            [("call_1", Decision::accept(json!({"name": "Eve"})))],
            &store,
        )
        .await
        .unwrap();
    assert_eq!(done.stop_reason, RunStopReason::EndTurn, "{:?}", done.error);
    assert_eq!(done.tool_calls, 1);
    assert_eq!(
        done.steps[0].tool_results[0].content.to_text(),
        "Hello, Eve!"
    );
}

/// A streamed run announces the question as `approval_requested`, after the call started.
#[tokio::test]
async fn the_stream_announces_the_question() {
    use agentloop::run::RunEvent;
    use futures::StreamExt;

    let server = serve_http_with(TestMcpServer::new().eliciting())
        .await
        .unwrap();
    let model = ScriptedModel::new([Turn::tool_call("greet", json!({})).with_ids(["call_1"])]);
    let registry = connect(Via::Handshake, &server.url).await;
    let events: Vec<RunEvent> = agent(&model, &registry)
        .run_stream("Greet me")
        .collect()
        .await;
    let asked: Vec<&PendingApproval> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ApprovalRequested(pending) => Some(&**pending),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].id, "call_1");
    assert_eq!(
        asked[0].input_request.as_ref().map(|r| &r.schema),
        Some(&name_schema())
    );
    let finished = events.iter().find_map(|e| match e {
        RunEvent::RunFinish { result } => Some(result),
        _ => None,
    });
    assert_eq!(
        finished.map(|r| r.stop_reason.clone()),
        Some(RunStopReason::AwaitingApproval)
    );
}
