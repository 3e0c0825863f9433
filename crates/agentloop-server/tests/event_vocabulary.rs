//! One event vocabulary: a scripted run with parallel calls, a call refused by a hook, an
//! invalid-arguments retry and a call skipped past the tool-call limit, played through the
//! library's stream, `/v1/chat` and the AI SDK UI stream. Every tool call gets its full
//! sequence in all three: the model's input start and fragments, the complete call, its result.
//!
//! The UI chunk names and fields are the AI SDK's `uiMessageChunkSchema` (packages/ai/src/
//! ui-message-stream/ui-message-chunks.ts): `tool-input-start {toolCallId, toolName}`,
//! `tool-input-delta {toolCallId, inputTextDelta}`, `tool-input-available {toolCallId,
//! toolName, input}`, `tool-output-available {toolCallId, output}`, `tool-output-error
//! {toolCallId, errorText}`.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;

use agentloop::run::{Hooks, ToolDecision};
use agentloop::{Agent, RunEvent, StreamEvent, Tool};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, TurnItem, split_pieces};
use common::{EventReader, TestServer, client, post_chat};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

#[derive(Deserialize, JsonSchema)]
struct FilePath {
    path: String,
}

fn call(name: &str, arguments: &str) -> TurnItem {
    TurnItem::ToolCall {
        id: None,
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// Step 0: three calls side by side (two weather look-ups and a delete the hook refuses) and a
/// call with invalid arguments; step 1: its retry, and one call past `max_tool_calls` (5).
fn model() -> ScriptedModel {
    ScriptedModel::new([
        Turn {
            items: vec![
                call("get_weather", r#"{"city": "Paris"}"#),
                call("get_weather", r#"{"city": "Rome"}"#),
                call("delete_file", r#"{"path": "notes.txt"}"#),
                call("get_weather", r#"{"town": "Oslo"}"#),
            ],
            ..Turn::default()
        },
        Turn {
            items: vec![
                call("get_weather", r#"{"city": "Oslo"}"#),
                call("get_weather", r#"{"city": "Bern"}"#),
            ],
            ..Turn::default()
        },
    ])
}

fn agent(model: &ScriptedModel) -> Agent {
    let weather = Tool::function("get_weather", "Current weather", |c: City| async move {
        Ok::<_, Infallible>(format!("18 °C in {}", c.city))
    });
    let delete = Tool::function("delete_file", "Delete a file", |p: FilePath| async move {
        Ok::<_, Infallible>(format!("deleted {}", p.path))
    });
    let hooks = Hooks::new().before_tool(|call| async move {
        if call.name == "delete_file" {
            ToolDecision::Block("deleting files is not allowed".into())
        } else {
            ToolDecision::Continue
        }
    });
    Agent::builder(model.clone())
        .tools([weather, delete])
        .max_tool_calls(5)
        .hooks(hooks)
        .build()
}

/// One call as the model makes it, and the result the model gets.
struct Expected {
    id: &'static str,
    name: &'static str,
    arguments: &'static str,
    result: &'static str,
    is_error: bool,
}

const INVALID: &str = "Error: invalid arguments for tool `get_weather`:\n- /: \"city\" is a required property\nFix the arguments and call the tool again (retry 1 of 2).";

fn expected() -> Vec<Expected> {
    vec![
        Expected {
            id: "call_0_0",
            name: "get_weather",
            arguments: r#"{"city": "Paris"}"#,
            result: "18 °C in Paris",
            is_error: false,
        },
        Expected {
            id: "call_0_1",
            name: "get_weather",
            arguments: r#"{"city": "Rome"}"#,
            result: "18 °C in Rome",
            is_error: false,
        },
        Expected {
            id: "call_0_2",
            name: "delete_file",
            arguments: r#"{"path": "notes.txt"}"#,
            result: "Error: the call to `delete_file` was denied: deleting files is not allowed",
            is_error: true,
        },
        Expected {
            id: "call_0_3",
            name: "get_weather",
            arguments: r#"{"town": "Oslo"}"#,
            result: INVALID,
            is_error: true,
        },
        Expected {
            id: "call_1_0",
            name: "get_weather",
            arguments: r#"{"city": "Oslo"}"#,
            result: "18 °C in Oslo",
            is_error: false,
        },
        Expected {
            id: "call_1_1",
            name: "get_weather",
            arguments: r#"{"city": "Bern"}"#,
            result: "Error: the call to `get_weather` was not run: the run's limit of 5 tool calls was reached",
            is_error: true,
        },
    ]
}

fn input(call: &Expected) -> Value {
    serde_json::from_str(call.arguments).unwrap()
}

/// Each call's events, in order, by call id.
type Sequences = BTreeMap<String, Vec<String>>;

fn push(sequences: &mut Sequences, id: &str, line: String) {
    sequences.entry(id.to_owned()).or_default().push(line);
}

/// The full sequence every call gets: the model's input start and fragments (the scripted
/// model cuts arguments into 4), the complete call, its result.
fn full_sequences(with_input_stream: bool) -> Sequences {
    let mut out = Sequences::new();
    for call in expected() {
        if with_input_stream {
            push(&mut out, call.id, format!("input_start {}", call.name));
            for piece in split_pieces(call.arguments, 4) {
                push(&mut out, call.id, format!("input_delta {piece}"));
            }
        }
        push(&mut out, call.id, format!("ready {}", input(&call)));
        push(
            &mut out,
            call.id,
            format!("result error={} {}", call.is_error, call.result),
        );
    }
    out
}

#[tokio::test]
async fn every_tool_call_gets_its_full_sequence_in_the_library_stream_v1_chat_and_the_ui_stream() {
    // The library's stream.
    let scripted = model();
    let mut events = agent(&scripted).run_stream("Weather, and tidy up");
    let mut library = Sequences::new();
    let mut ids_by_index: Vec<String> = Vec::new();
    let mut stop_reason = None;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::StepStart { .. } => ids_by_index.clear(),
            RunEvent::Model(StreamEvent::ToolCallStart { index, id, name }) => {
                assert_eq!(index, ids_by_index.len());
                push(&mut library, &id, format!("input_start {name}"));
                ids_by_index.push(id);
            }
            RunEvent::Model(StreamEvent::ToolCallDelta { index, arguments }) => {
                push(
                    &mut library,
                    &ids_by_index[index],
                    format!("input_delta {arguments}"),
                );
            }
            RunEvent::ToolCallReady { call } => {
                push(&mut library, &call.id, format!("ready {}", call.input));
            }
            RunEvent::ToolCallResult { id, result, .. } => {
                let line = format!(
                    "result error={} {}",
                    result.is_error,
                    result.content.to_text()
                );
                push(&mut library, &id, line);
            }
            RunEvent::RunFinish { result } => stop_reason = Some(result.stop_reason),
            _ => {}
        }
    }
    assert_eq!(library, full_sequences(true));
    assert_eq!(
        stop_reason,
        Some(agentloop::run::RunStopReason::MaxToolCalls)
    );
    scripted.assert_complete();

    // `/v1/chat`: its documented events show each call once complete, then its result.
    let scripted = model();
    let server = TestServer::start(ServerConfig::new(agent(&scripted)).in_memory_database()).await;
    let events =
        EventReader::new(post_chat(&server, json!({"message": "Weather, and tidy up"})).await)
            .rest()
            .await;
    let mut chat = Sequences::new();
    for event in &events {
        let data = &event.data;
        let id = data["id"].as_str().unwrap_or_default();
        match event.event.as_str() {
            "tool_call_start" => push(&mut chat, id, format!("ready {}", data["arguments"])),
            "tool_call_result" => {
                let line = format!(
                    "result error={} {}",
                    data["is_error"],
                    data["content"].as_str().unwrap()
                );
                push(&mut chat, id, line);
            }
            _ => {}
        }
    }
    assert_eq!(chat, full_sequences(false));
    let end = &events[events.len() - 2..];
    assert_eq!(end[0].event, "message_end");
    assert_eq!(end[0].data["stop_reason"], "max_tool_calls");
    assert_eq!(
        end[1].data,
        json!({"message": "the max_tool_calls limit of the agent was reached"})
    );

    // The AI SDK UI stream: the same calls with their input streamed.
    let scripted = model();
    let server = TestServer::start(ServerConfig::new(agent(&scripted)).in_memory_database()).await;
    let response = client()
        .post(server.url("/v1/chat/ui-stream"))
        .json(&json!({"id": "chat-1", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Weather, and tidy up"}]}
        ]}))
        .send()
        .await
        .unwrap();
    let chunks: Vec<Value> = EventReader::new(response)
        .rest()
        .await
        .into_iter()
        .map(|e| e.data)
        .collect();
    let mut ui = Sequences::new();
    for chunk in &chunks {
        let id = chunk["toolCallId"].as_str().unwrap_or_default();
        match chunk["type"].as_str().unwrap_or_default() {
            "tool-input-start" => push(
                &mut ui,
                id,
                format!("input_start {}", chunk["toolName"].as_str().unwrap()),
            ),
            "tool-input-delta" => push(
                &mut ui,
                id,
                format!("input_delta {}", chunk["inputTextDelta"].as_str().unwrap()),
            ),
            "tool-input-available" => push(&mut ui, id, format!("ready {}", chunk["input"])),
            "tool-output-available" => push(
                &mut ui,
                id,
                format!("result error=false {}", chunk["output"].as_str().unwrap()),
            ),
            "tool-output-error" => push(
                &mut ui,
                id,
                format!("result error=true {}", chunk["errorText"].as_str().unwrap()),
            ),
            _ => {}
        }
    }
    assert_eq!(ui, full_sequences(true));
    assert_eq!(
        chunks[chunks.len() - 3..].to_vec(),
        vec![
            json!({"type": "error", "errorText": "the max_tool_calls limit of the agent was reached"}),
            json!({"type": "finish", "finishReason": "error"}),
            json!("[DONE]"),
        ]
    );
}
