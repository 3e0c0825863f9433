//! Conversations survive a restart, and continuing one sends the model its whole history.

mod common;

use std::convert::Infallible;

use agentloop::cost::{Decimal, PriceSheet, Prices};
use agentloop::{Agent, Message, Tool};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn};
use common::{EventReader, TestServer, client, post_chat};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

fn weather_tool() -> Tool {
    Tool::function("get_weather", "Current weather", |c: City| async move {
        Ok::<_, Infallible>(format!("18 °C in {}", c.city))
    })
}

fn server_config(model: &ScriptedModel, db: &std::path::Path) -> ServerConfig {
    ServerConfig::new(Agent::builder(model.clone()).tool(weather_tool()).build()).database(db)
}

async fn chat(server: &TestServer, body: Value) -> Vec<common::Received> {
    let response = post_chat(server, body).await;
    assert_eq!(response.status(), 200);
    EventReader::new(response).rest().await
}

#[tokio::test]
async fn a_conversation_continues_after_a_restart_with_its_whole_history() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");

    let first_model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("It is 18 °C in Paris."),
    ]);
    let first = TestServer::start(server_config(&first_model, &db)).await;
    let events = chat(&first, json!({"message": "Weather in Paris?"})).await;
    let conversation_id = events[0].data["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let saved: Value = client()
        .get(first.url(&format!("/v1/conversations/{conversation_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let history: Vec<Message> = serde_json::from_value(saved["messages"].clone()).unwrap();
    assert_eq!(history.len(), 4);
    first.stop().await;

    // A new process on the same file: migrations find the schema in place.
    let second_model = ScriptedModel::new([Turn::text("Tomorrow too.")]);
    let second = TestServer::start(server_config(&second_model, &db)).await;
    let events = chat(
        &second,
        json!({"conversation_id": conversation_id, "message": "And tomorrow?"}),
    )
    .await;
    assert_eq!(
        events[0].data["conversation_id"].as_str(),
        Some(conversation_id.as_str())
    );
    assert_eq!(events.last().unwrap().event, "message_end");

    let mut expected = history.clone();
    expected.push(Message::user("And tomorrow?"));
    assert_eq!(second_model.requests()[0].messages, expected);

    let stored = second
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    expected.push(Message::assistant("Tomorrow too."));
    assert_eq!(stored.messages, expected);
    agentloop::history::validate(&stored.messages).unwrap();
}

#[tokio::test]
async fn conversations_can_be_listed_fetched_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new([Turn::text("One."), Turn::text("Two.")]);
    let server = TestServer::start(server_config(&model, &dir.path().join("c.db"))).await;
    let a = chat(&server, json!({"message": "First   question\nhere"})).await;
    let b = chat(&server, json!({"message": "Second question"})).await;
    let id_a = a[0].data["conversation_id"].as_str().unwrap().to_owned();
    let id_b = b[0].data["conversation_id"].as_str().unwrap().to_owned();

    let list: Value = client()
        .get(server.url("/v1/conversations"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = list["conversations"].as_array().unwrap();
    let summary: Vec<(&str, &str, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap(),
                r["title"].as_str().unwrap(),
                r["message_count"].as_i64().unwrap(),
            )
        })
        .collect();
    // Most recently changed first.
    assert_eq!(
        summary,
        vec![
            (id_b.as_str(), "Second question", 2),
            (id_a.as_str(), "First question here", 2)
        ]
    );

    let one: Value = client()
        .get(server.url(&format!("/v1/conversations/{id_a}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["id"], json!(id_a));
    assert_eq!(one["active_message_id"], Value::Null);
    assert_eq!(
        one["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "First   question\nhere"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "One."}]}
        ])
    );

    let deleted = client()
        .delete(server.url(&format!("/v1/conversations/{id_a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    for request in [
        client().get(server.url(&format!("/v1/conversations/{id_a}"))),
        client().delete(server.url(&format!("/v1/conversations/{id_a}"))),
    ] {
        assert_eq!(request.send().await.unwrap().status(), 404);
    }
}

#[tokio::test]
async fn a_database_from_a_newer_server_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("future.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let model = ScriptedModel::new([]);
    let error = agentloop_server::AppState::new(server_config(&model, &db))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "database error: `{}` has schema version 99, newer than this server knows (5); use a newer agentloop",
            db.display()
        )
    );
}

async fn fetch(server: &TestServer, path: &str) -> Value {
    client()
        .get(server.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_conversation_can_be_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new([Turn::text("One.")]);
    let server = TestServer::start(server_config(&model, &dir.path().join("c.db"))).await;
    let events = chat(&server, json!({"message": "First question"})).await;
    let id = events[0].data["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/conversations/{id}");

    let renamed = client()
        .patch(server.url(&path))
        .json(&json!({"title": "  Trip\n planning  "}))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), 200);
    let renamed: Value = renamed.json().await.unwrap();
    assert_eq!(renamed["id"], json!(id));
    assert_eq!(renamed["title"], json!("Trip planning"));
    let list = fetch(&server, "/v1/conversations").await;
    assert_eq!(list["conversations"][0]["title"], json!("Trip planning"));
    assert_eq!(fetch(&server, &path).await["title"], json!("Trip planning"));

    let empty = client()
        .patch(server.url(&path))
        .json(&json!({"title": " \n "}))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 400);
    assert_eq!(
        empty.json::<Value>().await.unwrap(),
        json!({"error": {"message": "a title needs at least one character that is not a space"}})
    );
    let unknown = client()
        .patch(server.url("/v1/conversations/nope"))
        .json(&json!({"title": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        unknown.json::<Value>().await.unwrap(),
        json!({"error": {"message": "no conversation has the id `nope`"}})
    );
}

#[tokio::test]
async fn each_answer_keeps_its_usage_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(10, 3),
        Turn::text("18 °C.").with_usage(20, 4),
        Turn::text("Same tomorrow.").with_usage(30, 5),
    ]);
    let server = TestServer::start(server_config(&model, &db)).await;
    let events = chat(&server, json!({"message": "Weather in Paris?"})).await;
    let id = events[0].data["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    chat(
        &server,
        json!({"conversation_id": id, "message": "And tomorrow?"}),
    )
    .await;
    server.stop().await;

    let again = TestServer::start(server_config(&ScriptedModel::new([]), &db)).await;
    let stored = fetch(&again, &format!("/v1/conversations/{id}")).await;
    // Keyed by the position of the prompt each answer replied to in `messages`.
    assert_eq!(
        stored["answers"],
        json!([
            {"prompt_index": 0, "stop_reason": "end_turn",
             "usage": {"input_tokens": 30, "output_tokens": 7, "cache_read_tokens": 0, "cache_write_tokens": 0}},
            {"prompt_index": 4, "stop_reason": "end_turn",
             "usage": {"input_tokens": 30, "output_tokens": 5, "cache_read_tokens": 0, "cache_write_tokens": 0}},
        ])
    );
}

#[tokio::test]
async fn each_answer_keeps_its_cost_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(1_000, 100),
        Turn::text("18 °C.").with_usage(2_000, 50),
    ]);
    // 2 USD per million tokens in and 8 out, for the model the scripted one answers as.
    let mut prices = Prices::empty();
    prices.set(
        "scripted",
        "scripted",
        PriceSheet::new(Decimal::new(2, 0), Decimal::new(8, 0)),
    );
    let agent = Agent::builder(model.clone())
        .tool(weather_tool())
        .prices(prices)
        .build();
    let server = TestServer::start(ServerConfig::new(agent).database(&db)).await;
    let events = chat(&server, json!({"message": "Weather in Paris?"})).await;
    let id = events[0].data["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.stop().await;

    let again = TestServer::start(server_config(&ScriptedModel::new([]), &db)).await;
    let stored = fetch(&again, &format!("/v1/conversations/{id}")).await;
    // 3,000 in × 2 + 150 out × 8, per million.
    assert_eq!(
        stored["answers"],
        json!([
            {"prompt_index": 0, "stop_reason": "end_turn",
             "usage": {"input_tokens": 3000, "output_tokens": 150, "cache_read_tokens": 0, "cache_write_tokens": 0},
             "cost": {"total": "0.0072", "input": "0.006", "output": "0.0012",
                      "cache_read": "0", "cache_write": "0"}},
        ])
    );
}

#[tokio::test]
async fn a_finished_answers_events_can_be_read_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("It is 18 °C in Paris."),
    ]);
    let first = TestServer::start(server_config(&model, &db)).await;
    let events = chat(&first, json!({"message": "Weather in Paris?"})).await;
    assert_eq!(events.last().unwrap().event, "message_end");
    let message_id = events[0].data["message_id"].as_str().unwrap().to_owned();
    first.stop().await;

    // The log, terminal events included, was stored as the answer ended.
    let second = TestServer::start(server_config(&ScriptedModel::new([]), &db)).await;
    let again = client()
        .get(second.url(&format!("/v1/chat/{message_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(EventReader::new(again).rest().await, events);
    let rest = client()
        .get(second.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", events[1].id.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(EventReader::new(rest).rest().await, events[2..]);
    assert_eq!(model.requests().len(), 2, "nothing ran again");
}

#[tokio::test]
async fn durable_answers_run_with_an_in_memory_database() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("It is 18 °C in Paris."),
    ]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).tool(weather_tool()).build())
            .in_memory_database(),
    )
    .await;
    let events = chat(&server, json!({"message": "Weather in Paris?"})).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "tool_call_start",
            "tool_call_result",
            "text_delta",
            "text_delta",
            "text_delta",
            "message_end"
        ]
    );
    server.stop().await;
}
