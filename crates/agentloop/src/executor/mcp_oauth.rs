//! OAuth 2.1 for streamable-HTTP MCP servers, through rmcp's `auth` support: the MCP
//! authorization flow of the 2025-06-18 revision and later (protected resource metadata, RFC
//! 9728; authorization server metadata, RFC 8414; dynamic client registration, RFC 7591, when
//! the server offers it; authorization code with PKCE; refresh tokens).
//!
//! The application opens the authorization URL for a person and hands back the URL the browser
//! was redirected to ([`McpOAuth::new`]). Tokens live in a credential store: in memory by
//! default, or the application's ([`McpOAuth::credential_store`]), which also lets a later
//! connection skip the person when its tokens are still good. Tokens are never kept in these
//! values, printed by `Debug`, or logged by agentloop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, OAuthState,
};
pub use rmcp::transport::auth::{CredentialStore, InMemoryCredentialStore, StoredCredentials};

/// Opens an authorization URL for a person and returns the URL they were redirected to (with
/// `code` and `state`), or why not.
pub type Authorize =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// How to authorize with an MCP server behind OAuth 2.1 ([`super::McpHttp::oauth`]).
#[derive(Clone)]
pub struct McpOAuth {
    redirect_uri: String,
    scopes: Vec<String>,
    client_name: String,
    client_id: Option<String>,
    authorize: Authorize,
    store: Arc<dyn CredentialStore>,
}

impl std::fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpOAuth")
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .field("client_name", &self.client_name)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl McpOAuth {
    /// Authorize with the redirect URI `redirect_uri` (where the application receives the
    /// code, e.g. `http://127.0.0.1:8976/callback`); `authorize` gets the authorization URL
    /// and returns the URL the person's browser was sent back to.
    pub fn new<F, Fut>(redirect_uri: impl Into<String>, authorize: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, String>> + Send + 'static,
    {
        Self {
            redirect_uri: redirect_uri.into(),
            scopes: Vec::new(),
            client_name: "agentloop".to_owned(),
            client_id: None,
            authorize: Arc::new(move |url| Box::pin(authorize(url))),
            store: Arc::new(InMemoryCredentialStore::new()),
        }
    }

    /// Authorize in the person's browser, as a command-line program does: `show` presents the
    /// authorization URL (prints it, opens a browser), and the browser's redirect is received
    /// by `listener` (bind it to `127.0.0.1`), which answers it with a page saying the window
    /// may be closed. The redirect URI is `http://127.0.0.1:<port>/callback`.
    pub fn loopback(
        listener: tokio::net::TcpListener,
        show: impl Fn(&str) + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let port = listener.local_addr()?.port();
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let listener = Arc::new(tokio::sync::Mutex::new(listener));
        Ok(Self::new(redirect_uri, move |url: String| {
            show(&url);
            let listener = listener.clone();
            async move {
                let listener = listener.lock().await;
                receive_redirect(&listener, port).await
            }
        }))
    }

    /// Ask for these scopes (by default, what the server's metadata and challenge suggest).
    pub fn scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The client name sent with dynamic client registration (default `agentloop`).
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// Use a client registered beforehand instead of dynamic registration.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = Some(id.into());
        self
    }

    /// Keep tokens here instead of in memory: a store that still holds good tokens (or a
    /// refresh token) lets the next connection skip the person.
    pub fn credential_store(mut self, store: impl CredentialStore + 'static) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// An HTTP client that authorizes every request to the MCP server at `url`, refreshing
    /// the access token when it is about to expire.
    pub(crate) async fn client(&self, url: &str) -> Result<AuthClient<reqwest::Client>, String> {
        let failed = |what: &str, e: AuthError| format!("OAuth {what} failed: {e}");
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| failed("setup", e))?;
        manager.set_credential_store(SharedStore(self.store.clone()));
        if manager
            .initialize_from_store()
            .await
            .map_err(|e| failed("reading the credential store", e))?
        {
            return Ok(AuthClient::new(reqwest::Client::new(), manager));
        }
        let mut state = OAuthState::Unauthorized(manager);
        let mut request = AuthorizationRequest::new(self.redirect_uri.as_str())
            .with_client_name(&self.client_name);
        if !self.scopes.is_empty() {
            request = request.with_scopes(self.scopes.iter().map(String::as_str));
        }
        if let Some(id) = &self.client_id {
            request = request.with_preregistered_client(id.as_str());
        }
        state
            .start_authorization(request)
            .await
            .map_err(|e| failed("discovery or client registration", e))?;
        let url = state
            .get_authorization_url()
            .await
            .map_err(|e| failed("authorization", e))?;
        let redirected = (self.authorize)(url)
            .await
            .map_err(|e| format!("OAuth authorization failed: {e}"))?;
        state
            .handle_callback_url(&redirected)
            .await
            .map_err(|e| failed("the token exchange", e))?;
        let manager = state
            .into_authorization_manager()
            .ok_or("OAuth authorization did not complete")?;
        Ok(AuthClient::new(reqwest::Client::new(), manager))
    }
}

/// How many connections the loopback listener takes before giving up on the redirect (a
/// browser may ask for a favicon first).
const REDIRECT_ATTEMPTS: usize = 8;

/// Wait for the browser's request to `/callback` with a code or an error, answer it, and
/// return its URL.
async fn receive_redirect(listener: &tokio::net::TcpListener, port: u16) -> Result<String, String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    for _ in 0..REDIRECT_ATTEMPTS {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("waiting for the browser's redirect failed: {e}"))?;
        let mut stream = BufReader::new(stream);
        let mut line = String::new();
        if stream.read_line(&mut line).await.is_err() {
            continue;
        }
        // `GET /callback?code=...&state=... HTTP/1.1`
        let target = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let is_callback = target.starts_with("/callback?")
            && (target.contains("code=") || target.contains("error="));
        let (status, body) = if is_callback {
            ("200 OK", "Authorized: you can close this window.")
        } else {
            ("404 Not Found", "Not found.")
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.get_mut().write_all(response.as_bytes()).await;
        let _ = stream.get_mut().shutdown().await;
        if is_callback {
            return Ok(format!("http://127.0.0.1:{port}{target}"));
        }
    }
    Err(format!(
        "no redirect to /callback came in {REDIRECT_ATTEMPTS} requests to the loopback listener"
    ))
}

/// The application's store, shared: rmcp takes a store by value.
struct SharedStore(Arc<dyn CredentialStore>);

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuthError>> + Send + 'a>>;

// What `#[async_trait]` would write, without depending on it.
impl CredentialStore for SharedStore {
    fn load<'a, 'b>(&'a self) -> StoreFuture<'b, Option<StoredCredentials>>
    where
        'a: 'b,
        Self: 'b,
    {
        self.0.load()
    }

    fn save<'a, 'b>(&'a self, credentials: StoredCredentials) -> StoreFuture<'b, ()>
    where
        'a: 'b,
        Self: 'b,
    {
        self.0.save(credentials)
    }

    fn clear<'a, 'b>(&'a self) -> StoreFuture<'b, ()>
    where
        'a: 'b,
        Self: 'b,
    {
        self.0.clear()
    }

    fn on_refresh_token_rejected<'a, 'b, 'c>(
        &'a self,
        credentials: &'b StoredCredentials,
    ) -> StoreFuture<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.0.on_refresh_token_rejected(credentials)
    }

    fn acquire_refresh_guard<'a, 'b>(
        &'a self,
    ) -> StoreFuture<'b, Option<rmcp::transport::auth::CredentialRefreshGuard>>
    where
        'a: 'b,
        Self: 'b,
    {
        self.0.acquire_refresh_guard()
    }
}
