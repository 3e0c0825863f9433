//! The Gemini wire server, exercised over real HTTP with reqwest. Expected bodies are written
//! out byte for byte in the shape of the recordings in `shared/conformance/streams-batch2/
//! gemini/` (`data: {...}\r\n\r\n`, `responseId` and `modelVersion` on every chunk, the finish
//! reason and usage on a last chunk with an empty text part) and the Gemini API reference
//! ("Generating content", "Function calling": `functionCall` with `id`, `name`, `args`).

use agentloop_testkit::{Fault, MockServer, Turn, Wire};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client")
}

fn request() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]})
}

async fn call(server: &MockServer, model: &str, stream: bool) -> (u16, String, String) {
    let method = if stream {
        "streamGenerateContent?alt=sse"
    } else {
        "generateContent"
    };
    let url = format!("{}/v1beta/models/{model}:{method}", server.base_url());
    let response = client().post(url).json(&request()).send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn a_streamed_turn_is_whole_gemini_chunks() {
    let turn = Turn::text("Paris is sunny")
        .with_thinking("Look it up", Some("sig-1"))
        .then_tool_call("get_weather", json!({"city": "Paris"}))
        .with_usage(12, 7)
        .with_text_pieces(2);
    let server = MockServer::start(Wire::Gemini, [turn]).await.unwrap();
    let (status, kind, body) = call(&server, "gemini-2.5-flash", true).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    let tail = r#""modelVersion":"gemini-2.5-flash","responseId":"mock-response-0"}"#;
    let chunk = |parts: &str| {
        format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":{parts},\"role\":\"model\"}},\"index\":0}}],{tail}\r\n\r\n"
        )
    };
    let expected = [
        chunk(r#"[{"text":"Look ","thought":true}]"#),
        chunk(r#"[{"text":"it up","thought":true}]"#),
        chunk(r#"[{"text":"Paris i"}]"#),
        chunk(r#"[{"text":"s sunny"}]"#),
        // Signed is the turn's first function call, as Gemini does.
        chunk(r#"[{"functionCall":{"id":"call_0_0","name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"sig-1"}]"#),
        concat!(
            r#"data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],"#,
            r#""usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":7,"totalTokenCount":19},"#,
            r#""modelVersion":"gemini-2.5-flash","responseId":"mock-response-0"}"#,
            "\r\n\r\n"
        )
        .to_owned(),
    ]
    .concat();
    assert_eq!(body, expected);
    let recorded = server.last_request().unwrap();
    assert_eq!(
        recorded.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    );
    server.assert_complete();
}

#[tokio::test]
async fn without_calls_the_first_answer_text_is_signed() {
    let turn = Turn::text("Hi")
        .with_thinking("Greet", Some("sig-2"))
        .with_text_pieces(1)
        .with_usage(1, 1);
    let server = MockServer::start(Wire::Gemini, [turn]).await.unwrap();
    let (_, _, body) = call(&server, "m", true).await;
    assert!(
        body.contains(r#"{"text":"Hi","thoughtSignature":"sig-2"}"#),
        "{body}"
    );
}

#[tokio::test]
async fn a_whole_answer_is_one_generate_content_response() {
    let turn = Turn::text("Hi").then_tool_call("f", json!({}));
    let server = MockServer::start(Wire::Gemini, [turn]).await.unwrap();
    let (status, _, body) = call(&server, "m", false).await;
    assert_eq!(status, 200);
    let value: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        value["candidates"][0],
        json!({
            "content": {"role": "model", "parts": [
                {"text": "Hi"},
                {"functionCall": {"id": "call_0_0", "name": "f", "args": {}}}
            ]},
            "finishReason": "STOP",
            "index": 0
        })
    );
}

#[tokio::test]
async fn errors_use_google_status_names_and_retry_headers() {
    let server = MockServer::builder(Wire::Gemini)
        .turn(Turn::text("later"))
        .inject(Fault::rate_limited(3), 1)
        .start()
        .await
        .unwrap();
    let (status, _, body) = call(&server, "m", true).await;
    assert_eq!(status, 429);
    let value: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(value["error"]["code"], 429);

    let (status, _, body) = call(&server, "m", true).await;
    assert_eq!(status, 200, "{body}");
    server.assert_complete();

    // Any other path is a 404 in Google's shape, and recorded.
    let url = format!("{}/v1/chat/completions", server.base_url());
    let response = client().post(url).json(&request()).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let value: Value = response.json().await.unwrap();
    assert_eq!(value["error"]["status"], "NOT_FOUND");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Gemini generateContent"),
        "{value}"
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_an_error_chunk() {
    let turn = Turn::text("Hello there").with_fault(Fault::ErrorEvent { after_events: 1 });
    let server = MockServer::start(Wire::Gemini, [turn]).await.unwrap();
    let (_, _, body) = call(&server, "m", true).await;
    let frames: Vec<&str> = body.split("\r\n\r\n").filter(|f| !f.is_empty()).collect();
    assert_eq!(frames.len(), 2, "{body}");
    assert_eq!(
        frames[1],
        r#"data: {"error":{"code":503,"message":"Overloaded","status":"UNAVAILABLE"}}"#
    );
}
