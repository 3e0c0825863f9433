//! More of the conversation client with the scripted model: a send after a failed reply, a
//! send while a reply streams, a conversation started from a history, and interrupts that
//! come twice or before any send.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentloop::conversation::Conversation;
use agentloop::run::{Hooks, PromptDecision, RunEvent, RunStopReason};
use agentloop::{Agent, ContentBlock, Error, Message, Role, StreamEvent, history};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use serde_json::json;

fn overloaded() -> Turn {
    Turn::error(Error::Overloaded {
        provider: "scripted".into(),
        message: "busy".into(),
    })
}

#[tokio::test]
async fn a_send_after_a_failed_reply_goes_on_from_a_valid_history() {
    let model = ScriptedModel::new([overloaded(), Turn::text("Hello again.")]);
    let mut chat = Conversation::new(&Agent::builder(model.clone()).model("m").build());
    let failed = chat.send("Hi").await.unwrap().finish().await.unwrap();
    assert_eq!(failed.stop_reason, RunStopReason::Error);
    assert_eq!(
        failed.error.as_ref().map(ToString::to_string).as_deref(),
        Some("scripted is overloaded: busy")
    );
    // The unanswered prompt stays in the history.
    assert_eq!(chat.history(), [Message::user("Hi")]);

    let result = chat
        .send("Anyone there?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    let sent = model.requests()[1].messages.clone();
    history::validate(&sent).unwrap();
    assert_eq!(sent, [Message::user("Hi"), Message::user("Anyone there?")]);
    assert_eq!(
        chat.history(),
        [
            Message::user("Hi"),
            Message::user("Anyone there?"),
            Message::assistant("Hello again.")
        ]
    );
}

#[tokio::test]
async fn a_send_while_a_reply_streams_is_refused_without_running_the_prompt_hook() {
    let prompts = Arc::new(AtomicUsize::new(0));
    let seen = prompts.clone();
    let model = ScriptedModel::new([Turn::text("first answer"), Turn::text("second answer")]);
    let agent = Agent::builder(model.clone())
        .hooks(Hooks::new().on_prompt(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { PromptDecision::Continue }
        }))
        .build();
    let mut chat = Conversation::new(&agent);
    let mut reply = chat.send("one").await.unwrap();
    assert!(matches!(reply.next().await, Some(RunEvent::RunStart)));
    assert_eq!(prompts.load(Ordering::SeqCst), 1);

    let error = chat.send("two").await.unwrap_err();
    assert!(
        matches!(&error, Error::Config { message } if message == "a reply is still streaming: finish or drop it before sending again"),
        "{error:?}"
    );
    // Refused before the prompt hook, like a send refused for pending tool calls.
    assert_eq!(prompts.load(Ordering::SeqCst), 1);
    assert_eq!(model.calls(), 1);

    // The reply in flight is unharmed, and once it is read to the end the next send works.
    assert_eq!(reply.finish().await.unwrap().text(), "first answer");
    let result = chat.send("two").await.unwrap().finish().await.unwrap();
    assert_eq!(result.text(), "second answer");
    assert_eq!(prompts.load(Ordering::SeqCst), 2);
    assert_eq!(
        chat.history(),
        [
            Message::user("one"),
            Message::assistant("first answer"),
            Message::user("two"),
            Message::assistant("second answer")
        ]
    );
}

#[tokio::test]
async fn a_conversation_starts_from_the_history_it_is_given() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Rome"})).with_ids(["w1"]),
        Turn::text("Rome is warmer."),
    ]);
    let agent = Agent::builder(model.clone())
        .model("m")
        .tool(agentloop::Tool::function(
            "get_weather",
            "Weather",
            |args: serde_json::Map<String, serde_json::Value>| async move {
                Ok::<_, String>(format!("{}: 24 °C", args["city"].as_str().unwrap_or("?")))
            },
        ))
        .build();
    let earlier = vec![
        Message::user("Weather in Paris?"),
        Message::assistant("18 °C in Paris."),
    ];
    let mut chat = Conversation::new(&agent).with_history(earlier.clone());
    assert_eq!(chat.history(), earlier);
    let result = chat
        .send("Is Rome warmer?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(result.text(), "Rome is warmer.");
    let mut expected = earlier.clone();
    expected.push(Message::user("Is Rome warmer?"));
    assert_eq!(model.requests()[0].messages, expected);
    expected.push(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolUse {
            id: "w1".into(),
            name: "get_weather".into(),
            input: json!({"city": "Rome"}),
        }],
    ));
    expected.push(Message::tool_results([agentloop::ToolResult::text(
        "w1",
        "Rome: 24 °C",
    )]));
    expected.push(Message::assistant("Rome is warmer."));
    assert_eq!(chat.history(), expected);

    // A history that cannot be sent is refused at the send, saying why, and nothing is sent.
    let model = ScriptedModel::new([]);
    let dangling = vec![
        Message::user("Weather?"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "w9".into(),
                name: "get_weather".into(),
                input: json!({}),
            }],
        ),
    ];
    let mut chat =
        Conversation::new(&Agent::builder(model.clone()).build()).with_history(dangling.clone());
    let error = chat.send("hello?").await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidHistory { message } if message.contains("w9")),
        "{error}"
    );
    assert_eq!(model.calls(), 0);
    assert_eq!(chat.history(), dangling);
}

#[tokio::test]
async fn an_interrupt_before_any_send_does_not_stop_the_next_reply() {
    let model = ScriptedModel::new([Turn::text("Hello.")]);
    let mut chat = Conversation::new(&Agent::builder(model.clone()).build());
    let handle = chat.interrupt_handle();
    handle.interrupt();
    handle.interrupt();
    let result = chat.send("Hi").await.unwrap().finish().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "Hello.");
    assert_eq!(chat.history().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn interrupting_twice_stops_the_reply_once_and_the_next_send_works() {
    let story = "word ".repeat(20);
    // The text the interrupt lets through: the first of the three deltas.
    let first_delta = agentloop_testkit::split_pieces(&story, 3)[0].clone();
    let model = ScriptedModel::new([
        Turn::text(story.clone()).with_chunk_delay(Duration::from_secs(1)),
        Turn::text("Short."),
    ]);
    let mut chat = Conversation::new(&Agent::builder(model.clone()).build());
    let handle = chat.interrupt_handle();
    let mut reply = chat.send("Tell me a story").await.unwrap();
    let mut kinds = Vec::new();
    let mut result = None;
    while let Some(event) = reply.next().await {
        kinds.push(event.kind());
        match event {
            RunEvent::Model(StreamEvent::TextDelta { .. }) => {
                handle.interrupt();
                handle.interrupt();
            }
            RunEvent::RunFinish { result: finished } => result = Some(finished),
            _ => {}
        }
    }
    assert_eq!(
        kinds,
        [
            "run_start",
            "step_start",
            "message_start",
            "text_delta",
            "run_finish"
        ]
    );
    let result = result.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    // The partial text is kept in the history (below), not as the run's last response.
    assert_eq!(result.text(), "");
    // Interrupting again with nothing in flight changes nothing.
    handle.interrupt();
    history::validate(&chat.history()).unwrap();

    let result = chat.send("Shorter").await.unwrap().finish().await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "Short.");
    assert_eq!(
        chat.history(),
        [
            Message::user("Tell me a story"),
            Message::assistant(first_delta),
            Message::user("Shorter"),
            Message::assistant("Short.")
        ]
    );
}

/// `options()` shows what every send starts from: the agent's limits and timeouts.
#[tokio::test]
async fn options_are_the_agents_run_options() {
    let agent = Agent::builder(ScriptedModel::new([Turn::text("ok")]))
        .max_tool_iterations(3)
        .max_tool_calls(7)
        .tool_timeout(Duration::from_secs(9))
        .build();
    let chat = Conversation::new(&agent);
    let options = chat.options();
    assert_eq!(options.limits.max_tool_iterations, 3);
    assert_eq!(options.limits.max_tool_calls, Some(7));
    assert_eq!(options.tool_timeout, Duration::from_secs(9));
}

#[tokio::test]
async fn a_conversation_talks_through_its_agent_and_set_model_changes_only_its_own() {
    let first = ScriptedModel::new([Turn::text("one")]);
    let second = ScriptedModel::new([Turn::text("two")]);
    let agent = Agent::builder(first.clone())
        .model("m1")
        .system("Be brief.")
        .max_tool_iterations(3)
        .build();
    let mut chat = Conversation::new(&agent);
    assert_eq!(chat.agent().base_request().model, "m1");
    assert_eq!(chat.agent().options().limits.max_tool_iterations, 3);
    chat.send("a").await.unwrap().finish().await.unwrap();

    chat.set_model(Arc::new(second.clone()), "m2");
    assert_eq!(chat.agent().base_request().model, "m2");
    assert_eq!(chat.agent().provider().name(), "scripted");
    assert_eq!(
        chat.agent().base_request().system.as_deref(),
        Some("Be brief.")
    );
    // The agent it was made from is not changed.
    assert_eq!(agent.base_request().model, "m1");
    let result = chat.send("b").await.unwrap().finish().await.unwrap();
    assert_eq!(result.text(), "two");
    assert_eq!(second.requests()[0].model, "m2");
    assert_eq!(second.requests()[0].messages.len(), 3);
    first.assert_complete();
    second.assert_complete();
}
