//! The Gemini provider end to end against the testkit's Gemini wire server: a run with two
//! parallel calls after signed reasoning (blocking and streamed) whose second request carries
//! the signature back on the part Gemini signed, Vertex AI routing with a bearer token, and
//! errors typed from Google's error bodies (a streamed call's 404 labelled `text/event-stream`
//! with plain JSON included).

use std::convert::Infallible;

use agentloop::provider::gemini::{Gemini, GeminiOptions, VertexLocation};
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::route::{self, RouteOptions};
use agentloop::{Agent, ContentBlock, Error, Message, Provider, Request, Role, Tool};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};
use serde_json::json;

fn config(server: &MockServer) -> HttpConfig {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("AIza-wire-test"));
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    config
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn agent(provider: impl Provider) -> Agent {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move {
            let degrees = if args.city == "Paris" { 18 } else { 17 };
            Ok::<_, Infallible>(format!("{degrees} °C in {}", args.city))
        },
    );
    Agent::builder(provider)
        .model("gemini-3-pro-preview")
        .tool(tool)
        .build()
}

fn script() -> [Turn; 2] {
    [
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ])
        .with_thinking("Two cities: call the tool twice.", Some("sig-wire-1"))
        .with_ids(["fc_paris", "fc_rome"])
        .with_usage(300, 40),
        Turn::text("Paris 18 °C, Rome 17 °C.").with_usage(380, 12),
    ]
}

/// The second request's history: the model turn with the signature back on the first call
/// (the part the server signed) and no thought text, then both results by id and name.
fn assert_second_request(server: &MockServer, path: &str) {
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests.iter().all(|r| r.path == path),
        "{:?}",
        requests[0].path
    );
    assert_eq!(
        requests[1].body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
            {"role": "model", "parts": [
                {"functionCall": {"id": "fc_paris", "name": "get_weather", "args": {"city": "Paris"}},
                 "thoughtSignature": "sig-wire-1"},
                {"functionCall": {"id": "fc_rome", "name": "get_weather", "args": {"city": "Rome"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "fc_paris", "name": "get_weather", "response": {"output": "18 °C in Paris"}}},
                {"functionResponse": {"id": "fc_rome", "name": "get_weather", "response": {"output": "17 °C in Rome"}}}
            ]}
        ])
    );
}

#[tokio::test]
async fn a_tool_run_sends_the_signature_back_on_the_signed_call() {
    for streamed in [false, true] {
        let server = MockServer::start(Wire::Gemini, script()).await.unwrap();
        let agent = agent(Gemini::new(config(&server)).unwrap());
        let result = if streamed {
            use futures::StreamExt;
            let events: Vec<_> = agent
                .run_stream("Weather in Paris and Rome?")
                .collect()
                .await;
            match events.last() {
                Some(agentloop::RunEvent::RunFinish { result }) => (**result).clone(),
                other => panic!("{other:?}"),
            }
        } else {
            agent.run("Weather in Paris and Rome?").await.unwrap()
        };
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
        let method = if streamed {
            "streamGenerateContent"
        } else {
            "generateContent"
        };
        assert_second_request(
            &server,
            &format!("/v1beta/models/gemini-3-pro-preview:{method}"),
        );
        for request in server.requests() {
            assert_eq!(request.header("x-goog-api-key"), Some("AIza-wire-test"));
        }
        // The reasoning block holds the summary and the signature, tagged with the provider.
        let assistant = &result.messages[1];
        assert_eq!(assistant.role, Role::Assistant);
        assert!(
            matches!(
                &assistant.content[0],
                ContentBlock::Thinking { thinking, signature: Some(s), provider: Some(p) }
                    if thinking == "Two cities: call the tool twice." && s == "sig-wire-1" && p == "gemini"
            ),
            "{:?}",
            assistant.content[0]
        );
        server.assert_complete();
    }
}

#[tokio::test]
async fn vertex_routes_to_the_project_path_with_a_bearer_token() {
    let server = MockServer::start(Wire::Gemini, [Turn::text("OK")])
        .await
        .unwrap();
    let (provider, model) = route::from_model(
        "vertex/gemini-2.5-pro",
        RouteOptions {
            base_url: Some(server.base_url()),
            api_key: Some(ApiKey::new("ya29.token")),
            project: Some("proj-1".into()),
            location: Some("us-central1".into()),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    let response = provider
        .complete(&Request::new(model, vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(response.text(), "OK");
    let request = server.last_request().unwrap();
    assert_eq!(
        request.path,
        "/v1/projects/proj-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent"
    );
    assert_eq!(request.header("authorization"), Some("Bearer ya29.token"));
    assert_eq!(request.header("x-goog-api-key"), None);

    let vertex = Gemini::vertex(
        config(&server),
        VertexLocation {
            project: "p".into(),
            location: "global".into(),
        },
        GeminiOptions::default(),
    )
    .unwrap();
    assert_eq!(vertex.name(), "vertex");
}

#[tokio::test]
async fn google_error_bodies_become_typed_errors() {
    let server = MockServer::builder(Wire::Gemini)
        .turn(Turn::text("never"))
        .inject(Fault::bad_request("Invalid JSON payload"), 1)
        .start()
        .await
        .unwrap();
    let provider = Gemini::new(config(&server)).unwrap();
    let error = provider
        .complete(&Request::new("m", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest { status: 400, error_type: Some(t), message, .. }
            if t == "INVALID_ARGUMENT" && message == "Invalid JSON payload"),
        "{error:?}"
    );
}

/// A streamed call to a model that does not exist: Gemini answers 404 with `content-type:
/// text/event-stream` and a bare JSON error body, no `data:` line (the recording
/// `streams-batch2/gemini/error-404-plain-json-body-on-event-stream.sse`, status and header as
/// its SOURCES.md entry says). Served as recorded from a loopback socket, it is a typed
/// not-found error with Google's message, not an empty answer, and is not retried.
#[tokio::test]
async fn a_streamed_404_labelled_event_stream_with_plain_json_is_a_typed_error() {
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let body = br#"{"error":{"code":404,"message":"models/gemini-nonexistent is not found for API version v1beta, or is not supported for generateContent.","status":"NOT_FOUND"}}"#;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut requests = 0;
        // Bounded: the client must not retry, so a second connection would be a failure.
        while let Ok(Ok((mut socket, _))) =
            tokio::time::timeout(std::time::Duration::from_millis(300), listener.accept()).await
        {
            requests += 1;
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let head = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await.unwrap();
            socket.write_all(body).await.unwrap();
            socket.shutdown().await.ok();
            if requests > 3 {
                break;
            }
        }
        requests
    });
    let mut config = HttpConfig::new(format!("http://{address}"));
    config.api_key = Some(ApiKey::new("AIza-wire-test"));
    let provider = Gemini::new(config).unwrap();
    let request = Request::new("gemini-nonexistent", vec![Message::user("hi")]);
    let mut stream = provider.stream(&request);
    let first = stream.next().await.expect("an item");
    let error = first.expect_err("an error, not an answer");
    assert!(
        matches!(&error, Error::InvalidRequest { status: 404, error_type: Some(t), message, .. }
            if t == "NOT_FOUND" && message.starts_with("models/gemini-nonexistent is not found")),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(server.await.unwrap(), 1, "sent once");
}
