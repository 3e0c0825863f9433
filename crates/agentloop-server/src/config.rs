//! What a server is built from: the agent it talks through, where it stores conversations, and
//! its limits.

use std::path::PathBuf;
use std::time::Duration;

use agentloop::Agent;
use agentloop::run::ApprovalPolicy;

use crate::error::ServerError;
use crate::skills::SandboxLimits;

/// The environment variable [`ServerConfig::token_from_env`] reads.
pub const TOKEN_ENV: &str = "AGENTLOOP_TOKEN";

/// The database file used when none is configured, relative to the working directory.
pub const DEFAULT_DATABASE: &str = "agentloop.db";

/// Where conversations are stored.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite file (created, and migrated, at start).
    File(PathBuf),
    /// An SQLite database in memory, gone when the server stops (tests, demos).
    InMemory,
    /// A Postgres database, `postgres://user[:password]@host[:port]/dbname` (no TLS), shared by
    /// any number of servers; migrated at start. Needs the crate feature `postgres`.
    Postgres(String),
}

impl Database {
    /// `--db`'s value: a `postgres://` or `postgresql://` URL, or else an SQLite file path.
    pub fn parse(value: &str) -> Self {
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            Self::Postgres(value.to_owned())
        } else {
            Self::File(PathBuf::from(value))
        }
    }
}

/// A Postgres URL without its password, to show in logs and errors.
pub(crate) fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:<redacted>@{host}{path}")
        }
        _ => url.to_owned(),
    }
}

impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::InMemory => f.write_str("in memory"),
            Self::Postgres(url) => f.write_str(&redacted_url(url)),
        }
    }
}

// By hand: a Postgres URL may hold a password.
impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::InMemory => f.write_str("InMemory"),
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&redacted_url(url)).finish(),
        }
    }
}

/// Everything a server needs. Build it with [`ServerConfig::new`] and the builder methods, then
/// hand it to [`crate::AppState::new`] or [`crate::serve`].
///
/// ```no_run
/// # use agentloop::Agent;
/// # use agentloop_server::ServerConfig;
/// # fn agent() -> Agent { unimplemented!() }
/// let config = ServerConfig::new(agent())
///     .database("chats.db")
///     .sandbox("./workspace")
///     .max_tool_iterations(8)
///     .token_from_env();
/// ```
#[derive(Clone)]
pub struct ServerConfig {
    /// The agent every chat runs through (provider, model, system prompt, tools, hooks).
    pub agent: Agent,
    /// Where conversations are stored.
    pub database: Database,
    /// When set, the file skills (`read_file`, `list_dir`, `write_file`, `search_files`) are
    /// offered, confined to this directory.
    pub sandbox: Option<PathBuf>,
    /// Size limits of the file skills.
    pub sandbox_limits: SandboxLimits,
    /// Whether the sandbox's `write_file` asks the chat's user before it runs (on by default):
    /// the chat pauses with an `approval_requested` event until a decision is posted.
    pub sandbox_writes_need_approval: bool,
    /// A policy deciding, for every tool call of every chat, whether it runs, needs the user's
    /// approval, or is refused (besides the tools' own approval settings; the stricter wins).
    pub approval_policy: Option<ApprovalPolicy>,
    /// When set, every `/v1` request must carry `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Rounds of tools per chat message, after which the model is asked for its answer; a chat
    /// whose model still calls tools then ends with an `error` event naming the limit (the
    /// library's [`agentloop::run::Limits::max_tool_iterations`]).
    pub max_tool_iterations: u32,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a chat keeps running after its last listener disconnected, waiting for a
    /// reconnect; after that it is cancelled and what it produced so far is saved.
    pub disconnect_grace: Duration,
    /// How long the events of a finished chat stay available for reconnecting clients.
    pub retain_finished: Duration,
    /// On a shared (Postgres) database: how long a server's lease on an answer it runs lasts
    /// without renewal. The server renews its leases every third of it; another server takes
    /// an answer over once its lease has expired (it checks every half of it), so a dead
    /// server's answers go on within about 1.5 leases.
    pub answer_lease: Duration,
    /// Interval of keep-alive comments on idle event streams.
    pub keep_alive: Duration,
    /// Origins allowed to call the API from a browser (`*` for any), besides the page's own
    /// origin. Empty: CORS is off and requests from other origins are refused.
    pub cors_origins: Vec<String>,
    /// Paths the sandbox must neither contain nor lie inside (the tools directory, for
    /// instance); the database is always protected. Checked at start.
    pub protected_paths: Vec<PathBuf>,
    /// Accept `/`, the home directory or a directory containing it as the sandbox.
    pub allow_broad_sandbox: bool,
    /// How long a connection may take to send a request's headers (also how long an idle
    /// connection is kept open). [`crate::Server`] closes it after that; slow or stalled clients
    /// cannot hold connections open.
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive, from the end of its headers. A handler
    /// still waiting for the body after that answers with an error and the connection is
    /// closed. Responses (the long-lived event streams) are not limited.
    pub body_read_timeout: Duration,
    /// Most connections [`crate::Server`] serves at once; more wait to be accepted until one
    /// closes. Lowered at start-up to fit the process's open-file limit.
    pub max_connections: usize,
    /// How long a shutdown (Ctrl-C, SIGTERM) waits for the answers in flight to be saved and
    /// their streams to end before the remaining connections are dropped.
    pub drain_timeout: Duration,
    /// Host names (or `host:port`) accepted in the `Host` header when no token is configured,
    /// besides `localhost`, `127.0.0.1` and `[::1]`. Without a token every other `Host` is
    /// refused, which defeats DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Serve without a token on an address that is not loopback. Off by default:
    /// [`crate::Server::bind`] refuses such a bind.
    pub insecure_no_auth: bool,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("agent", &self.agent)
            .field("database", &self.database)
            .field("sandbox", &self.sandbox)
            .field("sandbox_limits", &self.sandbox_limits)
            .field(
                "sandbox_writes_need_approval",
                &self.sandbox_writes_need_approval,
            )
            .field("approval_policy", &self.approval_policy)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_tool_iterations", &self.max_tool_iterations)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("disconnect_grace", &self.disconnect_grace)
            .field("retain_finished", &self.retain_finished)
            .field("answer_lease", &self.answer_lease)
            .field("keep_alive", &self.keep_alive)
            .field("cors_origins", &self.cors_origins)
            .field("protected_paths", &self.protected_paths)
            .field("allow_broad_sandbox", &self.allow_broad_sandbox)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("drain_timeout", &self.drain_timeout)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("insecure_no_auth", &self.insecure_no_auth)
            .finish()
    }
}

impl ServerConfig {
    /// A configuration for `agent` with the defaults: database [`DEFAULT_DATABASE`] in the
    /// working directory, no sandbox, no token, the agent's tool-iteration limit (10 unless set), 1 MiB request bodies, a 10 s reconnect grace, finished chats kept
    /// 60 s for reconnects, keep-alive every 15 s, CORS off; for [`crate::Server`], 10 s to send
    /// headers, 30 s to send a body, 4096 connections, 8 s to drain at shutdown.
    pub fn new(agent: Agent) -> Self {
        let max_tool_iterations = agent.options().limits.max_tool_iterations;
        Self {
            agent,
            database: Database::File(PathBuf::from(DEFAULT_DATABASE)),
            sandbox: None,
            sandbox_limits: SandboxLimits::default(),
            sandbox_writes_need_approval: true,
            approval_policy: None,
            token: None,
            max_tool_iterations,
            max_body_bytes: 1024 * 1024,
            disconnect_grace: Duration::from_secs(10),
            retain_finished: Duration::from_secs(60),
            answer_lease: Duration::from_secs(15),
            keep_alive: Duration::from_secs(15),
            cors_origins: Vec::new(),
            protected_paths: Vec::new(),
            allow_broad_sandbox: false,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 4096,
            drain_timeout: Duration::from_secs(8),
            allowed_hosts: Vec::new(),
            insecure_no_auth: false,
        }
    }

    /// Store conversations in this SQLite file.
    pub fn database(mut self, path: impl Into<PathBuf>) -> Self {
        self.database = Database::File(path.into());
        self
    }

    /// Store conversations in Postgres (`postgres://user@host:port/dbname`), which many servers
    /// can share. Needs the crate feature `postgres`; without it the server refuses to start.
    pub fn postgres(mut self, url: impl Into<String>) -> Self {
        self.database = Database::Postgres(url.into());
        self
    }

    /// Store conversations where [`Database`] says.
    pub fn database_at(mut self, database: Database) -> Self {
        self.database = database;
        self
    }

    /// Keep conversations in memory only.
    pub fn in_memory_database(mut self) -> Self {
        self.database = Database::InMemory;
        self
    }

    /// Offer the file skills, confined to `dir`.
    pub fn sandbox(mut self, dir: impl Into<PathBuf>) -> Self {
        self.sandbox = Some(dir.into());
        self
    }

    /// Whether the sandbox's `write_file` needs the user's approval (on by default).
    pub fn sandbox_writes_need_approval(mut self, needed: bool) -> Self {
        self.sandbox_writes_need_approval = needed;
        self
    }

    /// Decide for every tool call whether it runs, needs the user's approval, or is refused.
    pub fn approval_policy(mut self, policy: ApprovalPolicy) -> Self {
        self.approval_policy = Some(policy);
        self
    }

    /// Size limits of the file skills.
    pub fn sandbox_limits(mut self, limits: SandboxLimits) -> Self {
        self.sandbox_limits = limits;
        self
    }

    /// Require this bearer token (`None`: no authentication). An empty or whitespace-only
    /// token is not "no authentication": the server refuses to start with it
    /// ([`ServerError::EmptyToken`]), as it does with a token containing spaces or characters
    /// other than printable ASCII.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Require the bearer token in `AGENTLOOP_TOKEN`, when that variable is set and no token
    /// was configured explicitly. Set but empty, it is refused at start like any empty token.
    pub fn token_from_env(mut self) -> Self {
        if self.token.is_none() {
            self.token = std::env::var_os(TOKEN_ENV).map(|t| t.to_string_lossy().into_owned());
        }
        self
    }

    /// Rounds of tools per chat message before the model must answer (at least 1).
    pub fn max_tool_iterations(mut self, n: u32) -> Self {
        self.max_tool_iterations = n.max(1);
        self
    }

    /// Largest accepted request body, in bytes.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// How long a chat waits for a reconnect after its last listener left.
    pub fn disconnect_grace(mut self, d: Duration) -> Self {
        self.disconnect_grace = d;
        self
    }

    /// How long a finished chat's events stay available for reconnects.
    pub fn retain_finished(mut self, d: Duration) -> Self {
        self.retain_finished = d;
        self
    }

    /// How long a lease on a running answer lasts on a shared database (see
    /// [`Self::answer_lease`]); at least 100 ms.
    pub fn answer_lease(mut self, d: Duration) -> Self {
        self.answer_lease = d.max(Duration::from_millis(100));
        self
    }

    /// Interval of keep-alive comments.
    pub fn keep_alive(mut self, d: Duration) -> Self {
        self.keep_alive = d;
        self
    }

    /// Allow browser calls from these origins (`*` for any), e.g. `http://localhost:3000` for
    /// an AI SDK frontend served from another port.
    pub fn cors_origins<S: Into<String>>(mut self, origins: impl IntoIterator<Item = S>) -> Self {
        self.cors_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Keep these paths out of the sandbox: a sandbox that contains one, or lies inside one,
    /// is refused at start (the CLI passes `--tools`).
    pub fn protect_paths<P: Into<PathBuf>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        self.protected_paths
            .extend(paths.into_iter().map(Into::into));
        self
    }

    /// Accept `/` or the home directory (or a directory containing it) as the sandbox, which
    /// is refused otherwise.
    pub fn allow_broad_sandbox(mut self, allow: bool) -> Self {
        self.allow_broad_sandbox = allow;
        self
    }

    /// How long a connection may take to send a request's headers (default 10 s; at least
    /// 1 ms).
    pub fn header_read_timeout(mut self, d: Duration) -> Self {
        self.header_read_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// How long a request's body may take to arrive after its headers (default 30 s; at least
    /// 1 ms).
    pub fn body_read_timeout(mut self, d: Duration) -> Self {
        self.body_read_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// Most connections served at once (default 4096; at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long a shutdown waits for answers in flight to be saved (default 8 s, under the
    /// 10 s docker waits between SIGTERM and SIGKILL).
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.drain_timeout = d;
        self
    }

    /// Accept these `Host` names too when no token is configured (a name without a port
    /// matches any port), e.g. the name a reverse proxy forwards.
    pub fn allowed_hosts<S: Into<String>>(mut self, hosts: impl IntoIterator<Item = S>) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Allow serving a non-loopback address without a token (when something in front of the
    /// server authenticates). Without it [`crate::Server::bind`] refuses.
    pub fn insecure_no_auth(mut self, yes: bool) -> Self {
        self.insecure_no_auth = yes;
        self
    }

    /// Refuse what would make the server less safe than it looks: an empty token, or one no
    /// client can send (it would lock everyone out).
    pub(crate) fn check(&self) -> Result<(), ServerError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if token.trim().is_empty() {
            return Err(ServerError::EmptyToken);
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ServerError::InvalidToken {
                message: "it contains spaces, control characters or non-ASCII characters; a \
                          bearer token is printable ASCII without spaces (a stray newline or \
                          space from a file or variable?)"
                    .into(),
            });
        }
        Ok(())
    }
}
