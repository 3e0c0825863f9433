//! What a security tester tries: empty tokens, unprotected public binds, DNS rebinding, foreign
//! origins, missing headers, absurd `Last-Event-ID`s, and provider details leaking into errors.

mod common;

use std::net::SocketAddr;

use agentloop::Agent;
use agentloop::provider::http::{HttpConfig, RetryPolicy};
use agentloop::provider::openai::OpenAi;
use agentloop_server::{AppState, Server, ServerConfig, ServerError};
use agentloop_testkit::server::{Fault, MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use common::{EventReader, TestServer, client, post_chat};
use serde_json::{Value, json};

fn config() -> ServerConfig {
    ServerConfig::new(Agent::builder(ScriptedModel::new([Turn::text("Hi!")])).build())
        .in_memory_database()
}

async fn error_message(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("errors are JSON");
    body["error"]["message"]
        .as_str()
        .expect("errors have a message")
        .to_owned()
}

// Item 1: an empty token never means "no authentication".

#[tokio::test]
async fn an_empty_or_blank_token_is_refused() {
    for token in ["", "   ", "\n", "\t \r\n"] {
        let error = AppState::new(config().token(Some(token.into())))
            .await
            .expect_err("an empty token must be refused");
        assert!(
            matches!(error, ServerError::EmptyToken),
            "token {token:?}: {error}"
        );
        let message = error.to_string();
        assert!(message.contains("non-empty token"), "{message}");
        assert!(message.contains("--insecure-no-auth"), "{message}");
        let bind = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            config().token(Some(token.into())),
        )
        .await;
        assert!(
            matches!(bind, Err(ServerError::EmptyToken)),
            "token {token:?}"
        );
    }
}

#[tokio::test]
async fn an_empty_token_from_the_environment_is_refused() {
    // SAFETY: no other test of this binary reads or writes this variable.
    unsafe { std::env::set_var(agentloop_server::TOKEN_ENV, "") };
    let config = config().token_from_env();
    unsafe { std::env::remove_var(agentloop_server::TOKEN_ENV) };
    let error = AppState::new(config)
        .await
        .expect_err("an empty AGENTLOOP_TOKEN must be refused");
    assert!(matches!(error, ServerError::EmptyToken), "{error}");
}

#[tokio::test]
async fn a_token_with_spaces_or_control_characters_is_refused() {
    for token in [" padded ", "two words", "tab\there", "nul\0"] {
        let error = AppState::new(config().token(Some(token.into())))
            .await
            .expect_err("a token no client can send must be refused");
        assert!(
            matches!(error, ServerError::InvalidToken { .. }),
            "token {token:?}: {error}"
        );
    }
}

/// 192.0.2.1 (TEST-NET-1) is no address of this machine: binding it fails, so these tests
/// never listen beyond loopback, and the kind of error says whether the check ran first.
const PUBLIC: &str = "192.0.2.1:0";

#[tokio::test]
async fn a_public_address_without_a_token_is_refused() {
    let addr: SocketAddr = PUBLIC.parse().unwrap();
    let error = Server::bind(addr, config())
        .await
        .expect_err("a public bind without a token must be refused");
    assert!(
        matches!(error, ServerError::Unprotected { .. }),
        "the check must come before the bind: {error}"
    );
    let message = error.to_string();
    assert!(message.contains("192.0.2.1"), "{message}");
    assert!(message.contains("--insecure-no-auth"), "{message}");

    // With a token, or with the explicit opt-out, the bind is attempted (and fails here).
    for config in [
        config().token(Some("s3cret".into())),
        config().insecure_no_auth(true),
    ] {
        let error = Server::bind(addr, config)
            .await
            .expect_err("not our address");
        assert!(matches!(error, ServerError::Serve { .. }), "{error}");
    }
}

// Item 2: DNS rebinding and foreign origins.

#[tokio::test]
async fn without_a_token_a_foreign_host_is_rejected_on_every_route() {
    let server = TestServer::start(config().allowed_hosts(["chat.internal"])).await;
    for path in ["/", "/assets/app.js", "/v1/conversations", "/nowhere"] {
        let response = client()
            .get(server.url(path))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{path}");
        let message = error_message(response).await;
        assert!(message.contains("evil.example"), "{message}");
        assert!(message.contains("--allowed-host"), "{message}");
    }
    // A rebinding page cannot start a chat either.
    let chat = client()
        .post(server.url("/v1/chat"))
        .header("host", "evil.example:8080")
        .json(&json!({"message": "write a file"}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 403);

    let port = server.url.rsplit(':').next().unwrap().to_owned();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LocalHost".to_owned(),
        format!("[::1]:{port}"),
        "chat.internal:9999".to_owned(),
        "CHAT.internal".to_owned(),
    ] {
        let response = client()
            .get(server.url("/v1/conversations"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "Host: {host}");
    }
    for host in ["localhost.evil.example", "127.0.0.1.evil.example", "[::2]"] {
        let response = client()
            .get(server.url("/"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "Host: {host}");
    }
}

#[tokio::test]
async fn with_a_token_any_host_may_ask() {
    let server = TestServer::start(config().token(Some("s3cret".into()))).await;
    let response = client()
        .get(server.url("/v1/conversations"))
        .header("host", "chat.example.org")
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_foreign_origin_is_rejected_on_the_api() {
    let server = TestServer::start(config()).await;
    let response = client()
        .get(server.url("/v1/conversations"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let message = error_message(response).await;
    assert!(message.contains("http://evil.example"), "{message}");
    assert!(message.contains("--cors-origin"), "{message}");

    let chat = client()
        .post(server.url("/v1/chat"))
        .header("origin", "http://evil.example")
        .json(&json!({"message": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 403);
    // An origin on the same host but another port is another origin.
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    let other_port = client()
        .get(server.url("/v1/conversations"))
        .header("origin", format!("http://127.0.0.1:{}", port ^ 1))
        .send()
        .await
        .unwrap();
    assert_eq!(other_port.status(), 403);
    let null = client()
        .get(server.url("/v1/conversations"))
        .header("origin", "null")
        .send()
        .await
        .unwrap();
    assert_eq!(null.status(), 403);

    // The page's own requests are same-origin.
    let same = client()
        .get(server.url("/v1/conversations"))
        .header("origin", &server.url)
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), 200);
    // The page itself may be linked from anywhere.
    let page = client()
        .get(server.url("/"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
}

#[tokio::test]
async fn a_listed_origin_gets_cors_on_the_ui_stream() {
    let origin = "http://app.example:3000";
    for token in [None, Some("s3cret")] {
        let server = TestServer::start(
            config()
                .cors_origins([origin])
                .token(token.map(str::to_owned)),
        )
        .await;
        let url = server.url("/v1/chat/ui-stream");
        let preflight = client()
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
            .await
            .unwrap();
        assert!(
            preflight.status().is_success(),
            "{token:?}: {}",
            preflight.status()
        );
        let headers = preflight.headers();
        assert_eq!(headers["access-control-allow-origin"], origin);
        let methods = headers["access-control-allow-methods"].to_str().unwrap();
        assert!(methods.contains("POST"), "{methods}");
        let allowed = headers["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        assert!(allowed.contains("content-type"), "{allowed}");
        assert!(allowed.contains("authorization"), "{allowed}");

        let mut request = client().post(&url).header("origin", origin).json(&json!({
            "id": "chat-cors",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
        }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{token:?}");
        assert_eq!(response.headers()["access-control-allow-origin"], origin);
        let exposed = response.headers()["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            exposed.contains("x-vercel-ai-ui-message-stream"),
            "{exposed}"
        );
        let body = response.text().await.unwrap();
        assert!(body.contains(r#"{"type":"finish""#), "{body}");

        // Another origin still gets nothing.
        let other = client()
            .get(server.url("/v1/conversations"))
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert!(
            other.status() == 403 || other.status() == 401,
            "{token:?}: {}",
            other.status()
        );
        assert!(!other.headers().contains_key("access-control-allow-origin"));
    }
}

// Item 6: response headers.

#[tokio::test]
async fn the_page_and_its_assets_send_security_headers() {
    let server = TestServer::start(config()).await;
    let page = [
        "/",
        "/c/conv_0123abc",
        "/assets/app.js",
        "/assets/app.css",
        "/assets/vendor/marked.js",
        "/assets/vendor/purify.js",
        "/assets/vendor/highlight.js",
    ];
    for path in page {
        let response = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        let expected_type = match path.rsplit_once('.') {
            Some((_, "js")) => "text/javascript; charset=utf-8",
            Some((_, "css")) => "text/css; charset=utf-8",
            _ => "text/html; charset=utf-8",
        };
        assert_eq!(headers["content-type"], expected_type, "{path}");
        assert_eq!(
            headers["content-security-policy"], "default-src 'self'; frame-ancestors 'none'",
            "{path}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
    }
    let api = client()
        .get(server.url("/v1/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test]
async fn a_chat_url_serves_the_page() {
    let server = TestServer::start(config()).await;
    let index = client().get(server.url("/")).send().await.unwrap();
    let index = index.text().await.unwrap();
    let chat = client().get(server.url("/c/conv_42")).send().await.unwrap();
    assert_eq!(chat.status(), 200);
    assert_eq!(chat.text().await.unwrap(), index);
}

#[test]
fn the_page_needs_nothing_the_policy_forbids() {
    let html = include_str!("../static/index.html");
    let lower = html.to_ascii_lowercase();
    // Inline scripts, inline styles and inline event handlers are blocked by `default-src 'self'`.
    assert!(!lower.contains("<style"), "inline <style> in index.html");
    assert!(!lower.contains(" style="), "inline style attribute");
    for (at, _) in lower.match_indices(" on") {
        let name: String = lower[at + 3..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        let rest = &lower[at + 3 + name.len()..];
        assert!(
            name.is_empty() || !rest.starts_with('='),
            "inline event handler on{name}"
        );
    }
    for script in lower.split("<script").skip(1) {
        let tag = script.split('>').next().unwrap();
        assert!(tag.contains("src="), "inline <script>: {tag}");
    }
    for external in ["http://", "https://", "//cdn"] {
        assert!(!lower.contains(external), "external resource {external}");
    }
    let js = include_str!("../static/app.js");
    for forbidden in [
        "eval(",
        "new Function",
        "setAttribute('style'",
        "cssText",
        "fetch('http",
    ] {
        assert!(!js.contains(forbidden), "app.js uses {forbidden}");
    }
}

// Item 7: Last-Event-ID.

#[tokio::test]
async fn absurd_last_event_ids_are_a_400_not_an_overflow() {
    let server = TestServer::start(config()).await;
    let reader = EventReader::new(post_chat(&server, json!({"message": "Hi"})).await);
    let message_id = reader.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = reader.rest().await;
    let last_id = events.last().unwrap().id_number();
    let url = server.url(&format!("/v1/chat/{message_id}/events"));
    for id in [
        "18446744073709551615".to_owned(),
        "18446744073709551616".to_owned(),
        "99999999999999999999999999999".to_owned(),
        "-1".to_owned(),
        "1e3".to_owned(),
        "+1".to_owned(),
        (last_id + 1).to_string(),
        "4294967296".to_owned(),
    ] {
        let response = client()
            .get(&url)
            .header("last-event-id", &id)
            .send()
            .await
            .unwrap_or_else(|e| panic!("Last-Event-ID {id}: the server dropped the request: {e}"));
        assert_eq!(response.status(), 400, "Last-Event-ID {id}");
        let message = error_message(response).await;
        assert!(message.contains("Last-Event-ID"), "{message}");
    }
    // The last id is valid: nothing after it, and the stream ends.
    let after_last = client()
        .get(&url)
        .header("last-event-id", format!(" {last_id} "))
        .send()
        .await
        .unwrap();
    assert_eq!(after_last.status(), 200);
    assert!(EventReader::new(after_last).rest().await.is_empty());
    // The server still answers.
    let again = client()
        .get(server.url("/v1/conversations"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
}

// Item 11: what web users see of a provider failure.

fn provider_agent(base_url: &str) -> Agent {
    let mut http = HttpConfig::new(base_url);
    http.retry = RetryPolicy::none();
    let provider = OpenAi::new(http).expect("the provider builds");
    Agent::builder(provider).model("test-model").build()
}

fn assert_no_internals(message: &str, base_url: &str) {
    assert!(!message.contains(base_url), "{message}");
    assert!(!message.contains("127.0.0.1"), "{message}");
    assert!(!message.contains("http://"), "{message}");
    assert!(!message.contains("error sending request"), "{message}");
    assert!(!message.contains("transport"), "{message}");
}

async fn chat_error(server: &TestServer) -> String {
    let events = EventReader::new(post_chat(server, json!({"message": "Hi"})).await)
        .rest()
        .await;
    let last = events.last().expect("the stream has events");
    assert_eq!(last.event, "error", "{events:?}");
    last.data["message"].as_str().unwrap().to_owned()
}

async fn ui_error(server: &TestServer) -> String {
    let response = client()
        .post(server.url("/v1/chat/ui-stream"))
        .json(&json!({
            "id": "chat-error",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
        }))
        .send()
        .await
        .unwrap();
    let chunks = EventReader::new(response).rest().await;
    let error = chunks
        .iter()
        .find(|c| c.data["type"] == "error")
        .unwrap_or_else(|| panic!("no error chunk: {chunks:?}"));
    error.data["errorText"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_unreachable_provider_is_reported_without_its_address() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let base_url = format!("http://{closed}/v1");
    let server =
        TestServer::start(ServerConfig::new(provider_agent(&base_url)).in_memory_database()).await;
    let message = chat_error(&server).await;
    assert_no_internals(&message, &base_url);
    assert!(message.contains("could not be reached"), "{message}");
    let message = ui_error(&server).await;
    assert_no_internals(&message, &base_url);
    assert!(message.contains("could not be reached"), "{message}");
}

#[tokio::test]
async fn a_provider_rejection_is_reported_by_status_only() {
    let provider = MockServer::builder(Wire::OpenAi)
        .inject(
            Fault::bad_request("model `test-model` not found at http://10.1.2.3/internal"),
            2,
        )
        .start()
        .await
        .unwrap();
    let base_url = provider.base_url();
    let server =
        TestServer::start(ServerConfig::new(provider_agent(&base_url)).in_memory_database()).await;
    for message in [chat_error(&server).await, ui_error(&server).await] {
        assert_no_internals(&message, &base_url);
        assert!(!message.contains("10.1.2.3"), "{message}");
        assert!(message.contains("rejected the request"), "{message}");
        assert!(message.contains("400"), "{message}");
    }
}

#[tokio::test]
async fn a_listed_origin_is_matched_as_browsers_send_it() {
    let server = TestServer::start(config().cors_origins(["HTTP://App.Example:3000/"])).await;
    let preflight = client()
        .request(reqwest::Method::OPTIONS, server.url("/v1/chat/ui-stream"))
        .header("origin", "http://app.example:3000")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "http://app.example:3000"
    );
    let get = client()
        .get(server.url("/v1/conversations"))
        .header("origin", "http://app.example:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
}
