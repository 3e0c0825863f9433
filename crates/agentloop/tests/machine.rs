//! The state machine on its own: no model, no tools, driven by hand.

use std::time::Duration;

use agentloop::run::{Action, Limits, Machine, RunStopReason, ToolOutcome};
use agentloop::{
    ContentBlock, Error, Message, Request, Response, StopReason, TimeoutKind, ToolCall,
    ToolResultContent, Usage, history,
};
use serde_json::json;

fn tool_response(id: &str, city: &str) -> Response {
    Response {
        id: format!("r-{id}"),
        model: "m".into(),
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "get_weather".into(),
            input: json!({"city": city}),
        }],
        stop_reason: StopReason::ToolUse,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 3,
            ..Usage::default()
        },
    }
}

fn text_response(text: &str) -> Response {
    Response {
        id: "r-final".into(),
        model: "m".into(),
        content: vec![ContentBlock::text(text)],
        stop_reason: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 20,
            output_tokens: 5,
            ..Usage::default()
        },
    }
}

fn completed(text: &str) -> ToolOutcome {
    ToolOutcome::Completed {
        structured: None,
        content: ToolResultContent::Text(text.into()),
    }
}

fn new_machine() -> Machine {
    Machine::new(
        Request::new("m", vec![Message::user("Weather in Paris, then Rome?")]),
        Limits::default(),
    )
}

/// Drive from the state after the first tool step to the end, returning every action seen.
fn finish(machine: &mut Machine) -> Vec<Action> {
    let mut actions = Vec::new();
    let action = machine.next_action();
    actions.push(action.clone());
    assert_eq!(action, Action::CallModel, "expected a model call");
    assert_eq!(machine.request().messages.len(), 3);
    machine.on_response(tool_response("c2", "Rome"), Duration::from_millis(5));
    let action = machine.next_action();
    actions.push(action.clone());
    assert_eq!(
        action,
        Action::RunTools(vec![ToolCall {
            id: "c2".into(),
            name: "get_weather".into(),
            input: json!({"city": "Rome"}),
        }])
    );
    machine.on_tool_outcomes(vec![completed("21 °C")], Duration::from_millis(1));
    let action = machine.next_action();
    actions.push(action.clone());
    assert_eq!(action, Action::CallModel);
    machine.on_response(
        text_response("Paris 18, Rome 21."),
        Duration::from_millis(5),
    );
    actions.push(machine.next_action());
    actions
}

#[test]
fn asks_for_the_right_actions_and_resumes_identically_after_serialization() {
    let mut machine = new_machine();
    assert_eq!(
        machine.next_action(),
        Action::CallModel,
        "a run starts with a model call"
    );
    assert_eq!(
        machine.request().messages,
        vec![Message::user("Weather in Paris, then Rome?")]
    );
    // Asking again before reporting back repeats the action.
    assert_eq!(machine.next_action(), Action::CallModel);
    machine.on_response(tool_response("c1", "Paris"), Duration::from_millis(5));
    let Action::RunTools(calls) = machine.next_action() else {
        panic!("tools come next")
    };
    assert_eq!(calls.len(), 1);
    machine.on_tool_outcomes(vec![completed("18 °C")], Duration::from_millis(1));

    let saved = serde_json::to_string(&machine).unwrap();
    let mut restored: Machine = serde_json::from_str(&saved).unwrap();
    assert_eq!(serde_json::to_string(&restored).unwrap(), saved);

    let original_actions = finish(&mut machine);
    let restored_actions = finish(&mut restored);
    assert_eq!(original_actions, restored_actions);
    assert_eq!(
        original_actions.last(),
        Some(&Action::Stop(RunStopReason::EndTurn))
    );

    let a = machine.into_result();
    let b = restored.into_result();
    assert_eq!(a.messages, b.messages);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.usage.input_tokens, 40);
    assert_eq!(a.turns, 3);
    assert_eq!(a.tool_calls, 2);
    assert_eq!(a.text(), "Paris 18, Rome 21.");
    history::validate(&a.messages).unwrap();
}

/// A saved machine that failed keeps why: the restored run's error has the same kind, text
/// and details (status, provider error type, retry-after, timeout kind).
#[test]
fn a_failed_machine_keeps_its_error_through_serialization() {
    let errors = [
        Error::InvalidRequest {
            provider: "anthropic".into(),
            status: 400,
            error_type: Some("invalid_request_error".into()),
            message: "messages: tool_use ids must be unique".into(),
        },
        Error::RateLimited {
            provider: "openai".into(),
            retry_after: Some(Duration::from_millis(1500)),
            message: "slow down".into(),
        },
        Error::Timeout {
            kind: TimeoutKind::Step,
            after: Duration::from_secs(3),
        },
        Error::Cancelled,
    ];
    for error in errors {
        let mut machine = new_machine();
        assert_eq!(machine.next_action(), Action::CallModel);
        machine.on_error(error.clone());
        let saved = serde_json::to_value(&machine).unwrap();
        let restored: Machine = serde_json::from_value(saved.clone()).unwrap();
        assert_eq!(serde_json::to_value(&restored).unwrap(), saved);
        let result = restored.into_result();
        assert_eq!(result.stop_reason, RunStopReason::Error);
        let restored_error = result.error.expect("the restored run keeps its error");
        assert_eq!(restored_error.kind(), error.kind());
        assert_eq!(restored_error.to_string(), error.to_string());
        assert_eq!(restored_error.retry_after(), error.retry_after());
    }
}

#[test]
fn errors_serialize_with_kind_message_and_details() {
    let error = Error::Api {
        provider: "openai".into(),
        status: 502,
        error_type: None,
        message: "bad gateway".into(),
    };
    let value = serde_json::to_value(&error).unwrap();
    assert_eq!(
        value,
        json!({
            "kind": "api",
            "message": "openai API error 502: bad gateway",
            "details": {"provider": "openai", "status": 502, "error_type": null, "message": "bad gateway"}
        })
    );
    // The message is derived from the details, so a tampered one is not believed.
    let mut tampered = value;
    tampered["message"] = json!("something else");
    let back: Error = serde_json::from_value(tampered).unwrap();
    assert_eq!(back.to_string(), "openai API error 502: bad gateway");
    assert_eq!(
        serde_json::to_value(Error::Cancelled).unwrap(),
        json!({"kind": "cancelled", "message": "cancelled"})
    );
    assert!(serde_json::from_value::<Error>(json!({"kind": "no_such_kind"})).is_err());
}

#[test]
fn interrupting_while_tools_are_pending_closes_every_call() {
    let mut machine = new_machine();
    machine.next_action();
    let mut response = tool_response("c1", "Paris");
    response.content.push(ContentBlock::ToolUse {
        id: "c2".into(),
        name: "get_weather".into(),
        input: json!({"city": "Rome"}),
    });
    machine.on_response(response, Duration::ZERO);
    assert!(matches!(machine.next_action(), Action::RunTools(calls) if calls.len() == 2));
    machine.interrupt(RunStopReason::Cancelled, None);
    assert_eq!(
        machine.next_action(),
        Action::Stop(RunStopReason::Cancelled)
    );
    let result = machine.into_result();
    history::validate(&result.messages).unwrap();
    assert_eq!(result.tool_calls, 0);
    assert_eq!(result.steps[0].outcomes.len(), 2);
}

#[test]
fn interrupting_mid_response_keeps_only_the_partial_text() {
    let mut machine = new_machine();
    machine.next_action();
    let partial = Response {
        content: vec![
            ContentBlock::text("Let me check"),
            ContentBlock::ToolUse {
                id: "c1".into(),
                name: "get_weather".into(),
                input: json!("{\"ci"),
            },
        ],
        ..Response::default()
    };
    machine.interrupt(RunStopReason::Cancelled, Some(partial));
    let result = machine.into_result();
    assert_eq!(result.messages.len(), 2);
    assert_eq!(
        result.messages[1].content,
        vec![ContentBlock::text("Let me check")]
    );
    history::validate(&result.messages).unwrap();
}

#[test]
fn missing_outcomes_are_recorded_as_cancelled() {
    let mut machine = new_machine();
    machine.next_action();
    machine.on_response(tool_response("c1", "Paris"), Duration::ZERO);
    machine.next_action();
    machine.on_tool_outcomes(Vec::new(), Duration::ZERO);
    let result = machine.into_result();
    assert!(result.steps[0].tool_results[0].is_error);
    history::validate(&result.messages).unwrap();
}

#[test]
fn history_validity_rules() {
    let use_block = |id: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: "t".into(),
        input: json!({}),
    };
    let result = |id: &str| ContentBlock::ToolResult(agentloop::ToolResult::text(id, "ok"));
    let assistant = |blocks| Message::new(agentloop::Role::Assistant, blocks);
    let user = |blocks| Message::new(agentloop::Role::User, blocks);

    let good = vec![
        Message::user("hi"),
        assistant(vec![use_block("a"), use_block("b")]),
        user(vec![result("b"), result("a")]),
        Message::assistant("done"),
    ];
    history::validate(&good).unwrap();

    let cases: Vec<(Vec<Message>, &str)> = vec![
        (
            vec![Message::user("hi"), assistant(vec![use_block("a")])],
            "the last message (1) has tool uses without results: [\"a\"]",
        ),
        (
            vec![
                Message::user("hi"),
                assistant(vec![use_block("a"), use_block("b")]),
                user(vec![result("a")]),
            ],
            "tool use `b` in message 1 has no result in message 2",
        ),
        (
            vec![
                Message::user("hi"),
                assistant(vec![use_block("a")]),
                user(vec![result("a"), result("a")]),
            ],
            "tool use `a` in message 1 has 2 results in message 2",
        ),
        (
            vec![Message::user("hi"), user(vec![result("x")])],
            "tool result `x` in message 1 does not follow an assistant tool use",
        ),
        (
            vec![
                Message::user("hi"),
                assistant(vec![use_block("a")]),
                user(vec![result("a"), result("z")]),
            ],
            "tool result `z` in message 2 answers no tool use of message 1",
        ),
        (
            vec![
                Message::user("hi"),
                assistant(vec![use_block("a")]),
                Message::assistant("oops"),
            ],
            "message 1 has tool uses [\"a\"] but message 2 is not a user message with their results",
        ),
    ];
    for (messages, expected) in cases {
        let error = history::validate(&messages).unwrap_err();
        assert_eq!(error.to_string(), format!("invalid history: {expected}"));
        assert!(!history::is_valid(&messages));
    }
}
