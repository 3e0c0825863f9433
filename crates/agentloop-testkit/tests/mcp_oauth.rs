//! A streamable-HTTP MCP server behind OAuth 2.1, with a small authorization server on
//! loopback: the MCP authorization flow (2025-11-25 "Basic > Authorization": protected
//! resource metadata, RFC 9728; authorization server metadata, RFC 8414; dynamic client
//! registration, RFC 7591; authorization code with PKCE S256, RFC 7636; refresh tokens,
//! OAuth 2.1 §4.3) through rmcp's `auth` client.

#![cfg(feature = "mcp")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentloop::executor::mcp_oauth::{CredentialStore, InMemoryCredentialStore};
use agentloop::executor::{McpHttp, McpOAuth};
use agentloop::registry::Registry;
use agentloop_testkit::mcp::TestMcpServer;
use axum::extract::{Form, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use sha2::Digest;

/// What the authorization server and the protected MCP endpoint saw.
#[derive(Default)]
struct Seen {
    base: String,
    registrations: Vec<Value>,
    challenge: Option<String>,
    grants: Vec<String>,
    bearer: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

async fn resource_metadata(State(seen): State<Shared>) -> Json<Value> {
    let base = seen.lock().unwrap().base.clone();
    Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "bearer_methods_supported": ["header"]
    }))
}

async fn server_metadata(State(seen): State<Shared>) -> Json<Value> {
    let base = seen.lock().unwrap().base.clone();
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"]
    }))
}

async fn register(State(seen): State<Shared>, Json(body): Json<Value>) -> Response {
    seen.lock().unwrap().registrations.push(body.clone());
    let answer = json!({
        "client_id": "client-1",
        "redirect_uris": body["redirect_uris"],
        "client_name": body["client_name"],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"]
    });
    (StatusCode::CREATED, Json(answer)).into_response()
}

/// Approves at once: back to the redirect URI with a code and the client's state.
async fn authorize(
    State(seen): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if query.get("code_challenge_method").map(String::as_str) != Some("S256")
        || query.get("client_id").map(String::as_str) != Some("client-1")
        || query.get("response_type").map(String::as_str) != Some("code")
    {
        return (StatusCode::BAD_REQUEST, format!("bad request: {query:?}")).into_response();
    }
    seen.lock().unwrap().challenge = query.get("code_challenge").cloned();
    let location = format!(
        "{}?code=code-1&state={}",
        query["redirect_uri"], query["state"]
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

fn token(access: &str, expires_in: u64, refresh: &str) -> Response {
    Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "refresh_token": refresh
    }))
    .into_response()
}

/// The first access token expires within rmcp's 30 s refresh margin, so the first MCP request
/// refreshes it; the refreshed one lasts.
async fn token_endpoint(
    State(seen): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut seen = seen.lock().unwrap();
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    seen.grants.push(grant.clone());
    match grant.as_str() {
        "authorization_code" => {
            let verifier = form.get("code_verifier").cloned().unwrap_or_default();
            let digest = sha2::Sha256::digest(verifier.as_bytes());
            let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
            if form.get("code").map(String::as_str) != Some("code-1")
                || seen.challenge.as_deref() != Some(challenge.as_str())
            {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": "invalid_grant"})),
                )
                    .into_response();
            }
            token("at-1", 10, "rt-1")
        }
        "refresh_token" if form.get("refresh_token").map(String::as_str) == Some("rt-1") => {
            token("at-2", 3600, "rt-2")
        }
        _ => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response(),
    }
}

/// The MCP endpoint takes only tokens the authorization server issued.
async fn bearer_only(State(seen): State<Shared>, request: Request, next: Next) -> Response {
    let auth = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let base = {
        let mut seen = seen.lock().unwrap();
        seen.bearer.push(auth.clone());
        seen.base.clone()
    };
    if auth == "Bearer at-1" || auth == "Bearer at-2" {
        return next.run(request).await;
    }
    let challenge =
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response()
}

/// The authorization server and the protected MCP server, on one loopback port.
async fn start() -> (String, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Shared = Arc::new(Mutex::new(Seen {
        base: base.clone(),
        ..Seen::default()
    }));
    let mcp: StreamableHttpService<TestMcpServer, LocalSessionManager> = StreamableHttpService::new(
        || Ok(TestMcpServer::new()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let protected =
        Router::new()
            .nest_service("/mcp", mcp)
            .layer(axum::middleware::from_fn_with_state(
                seen.clone(),
                bearer_only,
            ));
    let app = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token_endpoint))
        .with_state(seen.clone())
        .merge(protected);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, seen)
}

/// The person's browser: follows the authorization URL to the redirect, without serving it.
fn browser(
    asked: Arc<AtomicUsize>,
) -> impl Fn(String) -> futures::future::BoxFuture<'static, Result<String, String>> + Send + Sync + 'static
{
    move |url: String| {
        asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| e.to_string())?;
            let response = client.get(&url).send().await.map_err(|e| e.to_string())?;
            response
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .ok_or_else(|| format!("no redirect: HTTP {}", response.status()))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_discovers_registers_authorizes_with_pkce_and_refreshes() {
    let (base, seen) = start().await;
    let url = format!("{base}/mcp");
    let callback = format!("{base}/callback");

    // Without authorization the server says so.
    let mut registry = Registry::new();
    let refused = registry.add_mcp_http(McpHttp::new(&url)).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("requires authorization (HTTP 401"),
        "{refused}"
    );

    let asked = Arc::new(AtomicUsize::new(0));
    let store = InMemoryCredentialStore::new();
    let oauth = McpOAuth::new(&callback, browser(asked.clone()))
        .client_name("agentloop-test")
        .credential_store(store.clone());
    let server = McpHttp::new(&url).oauth(oauth.clone());
    registry.add_mcp_http(server.clone()).await.unwrap();
    let out = registry
        .call("echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), "Echo: hi");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the person was asked once");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.registrations.len(), 1);
        assert_eq!(seen.registrations[0]["redirect_uris"], json!([callback]));
        assert_eq!(seen.registrations[0]["client_name"], "agentloop-test");
        assert_eq!(seen.grants, ["authorization_code", "refresh_token"]);
        // The first unauthenticated probe, then every MCP request with the refreshed token.
        let authorized: Vec<&String> = seen.bearer.iter().filter(|b| !b.is_empty()).collect();
        assert!(!authorized.is_empty());
        assert!(
            authorized.iter().all(|b| *b == "Bearer at-2"),
            "{authorized:?}"
        );
    }

    // Tokens are redacted wherever agentloop or rmcp print them.
    let stored = store.load().await.unwrap().unwrap();
    for printed in [
        format!("{stored:?}"),
        format!("{server:?}"),
        format!("{oauth:?}"),
        format!("{:?}", registry.get("echo")),
    ] {
        assert!(
            !printed.contains("at-2") && !printed.contains("rt-2"),
            "a token in {printed}"
        );
    }

    // A second connection with the same store needs nobody: the tokens are still good.
    let mut again = Registry::new();
    again.add_mcp_http(server).await.unwrap();
    assert_eq!(
        again
            .call("echo", json!({"message": "again"}))
            .await
            .unwrap()
            .0
            .to_text(),
        "Echo: again"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(seen.lock().unwrap().registrations.len(), 1);
}

/// The command-line flow: the URL is shown, the browser (here reqwest following redirects)
/// ends at the loopback listener, which takes the code and answers the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loopback_listener_receives_the_browsers_redirect() {
    let (base, seen) = start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let page = Arc::new(Mutex::new(None::<(u16, String)>));
    let shown = page.clone();
    let oauth = McpOAuth::loopback(listener, move |url| {
        let url = url.to_owned();
        let page = shown.clone();
        tokio::spawn(async move {
            let response = reqwest::get(&url).await.unwrap();
            let status = response.status().as_u16();
            *page.lock().unwrap() = Some((status, response.text().await.unwrap()));
        });
    })
    .unwrap();
    let mut registry = Registry::new();
    registry
        .add_mcp_http(McpHttp::new(format!("{base}/mcp")).oauth(oauth))
        .await
        .unwrap();
    assert_eq!(
        registry
            .call("echo", json!({"message": "cli"}))
            .await
            .unwrap()
            .0
            .to_text(),
        "Echo: cli"
    );
    assert_eq!(
        seen.lock().unwrap().registrations[0]["redirect_uris"],
        json!([format!("http://127.0.0.1:{port}/callback")])
    );
    // The browser got the page (it may arrive just after the connection completes).
    for _ in 0..100 {
        if page.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        page.lock().unwrap().clone(),
        Some((200, "Authorized: you can close this window.".to_owned()))
    );
}

/// Log lines, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything agentloop, rmcp and the HTTP stack log at every level during an OAuth flow
/// (registration, code exchange, refresh, authorized MCP calls) names no access or refresh
/// token.
#[tokio::test(flavor = "current_thread")]
async fn no_token_reaches_the_logs() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime has one thread, so every task of the flow logs through this.
    let _guard = tracing::subscriber::set_default(subscriber);

    let (base, _seen) = start().await;
    let oauth = McpOAuth::new(format!("{base}/callback"), browser(Arc::default()));
    let mut registry = Registry::new();
    registry
        .add_mcp_http(McpHttp::new(format!("{base}/mcp")).oauth(oauth))
        .await
        .unwrap();
    registry
        .call("echo", json!({"message": "logged"}))
        .await
        .unwrap();
    registry.close().await;

    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!text.is_empty(), "nothing was logged");
    // rmcp 3.9 logs the authorization code at debug level ("start exchange code for
    // token"); it is single-use and worthless without the PKCE verifier, which is not logged.
    for secret in ["at-1", "at-2", "rt-1", "rt-2"] {
        assert!(!text.contains(secret), "`{secret}` in the logs:\n{text}");
    }
}
