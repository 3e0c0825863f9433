//! The optional bearer token.

mod common;

use agentloop::Agent;
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn};
use common::{TestServer, client};
use serde_json::{Value, json};

#[tokio::test]
async fn requests_need_the_right_token() {
    let model = ScriptedModel::new([Turn::text("Hi!")]);
    let config = ServerConfig::new(Agent::builder(model.clone()).build())
        .in_memory_database()
        .token(Some("s3cret-token".into()));
    let server = TestServer::start(config).await;
    let url = server.url("/v1/conversations");

    let missing = client().get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        missing.json::<Value>().await.unwrap(),
        json!({"error": {"message": "this server needs `Authorization: Bearer <token>`"}})
    );

    for wrong in ["s3cret-tokeN", "s3cret-token-and-more", "s3cret", ""] {
        let response = client().get(&url).bearer_auth(wrong).send().await.unwrap();
        assert_eq!(response.status(), 401, "token {wrong:?}");
    }
    let basic = client()
        .get(&url)
        .basic_auth("user", Some("s3cret-token"))
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 401);

    let right = client()
        .get(&url)
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);

    // The chat endpoint is protected too, and the model is never reached without the token.
    let chat = client()
        .post(server.url("/v1/chat"))
        .json(&json!({"message": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 401);
    assert_eq!(model.calls(), 0);
    let chat = client()
        .post(server.url("/v1/chat"))
        .bearer_auth("s3cret-token")
        .json(&json!({"message": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    chat.text().await.unwrap();
    assert_eq!(model.calls(), 1);

    // The page itself holds no data and stays public.
    let page = client().get(server.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
}

#[tokio::test]
async fn without_a_token_the_api_is_open() {
    let model = ScriptedModel::new([]);
    let server =
        TestServer::start(ServerConfig::new(Agent::builder(model).build()).in_memory_database())
            .await;
    let response = client()
        .get(server.url("/v1/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"conversations": []})
    );
}
