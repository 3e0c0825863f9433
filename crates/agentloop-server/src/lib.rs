//! # agentloop-server
//!
//! A chat server for an [`agentloop::Agent`]: streamed chat with tool calls over Server-Sent
//! Events, the same chat in the Vercel AI SDK's UI message stream protocol, conversations stored
//! in SQLite (or Postgres, for many servers), sandboxed file skills, and a web page.
//!
//! ```no_run
//! # async fn demo(agent: agentloop::Agent) -> Result<(), agentloop_server::ServerError> {
//! use agentloop_server::{ServerConfig, serve};
//! let config = ServerConfig::new(agent).database("chats.db").sandbox("./workspace");
//! serve("127.0.0.1:8080".parse().unwrap(), config).await
//! # }
//! ```
//!
//! To mount the routes in an app of your own, build an [`AppState`] and call [`router`]:
//!
//! ```no_run
//! # async fn demo(agent: agentloop::Agent) -> Result<(), agentloop_server::ServerError> {
//! let state = agentloop_server::AppState::new(agentloop_server::ServerConfig::new(agent)).await?;
//! let app = axum::Router::new().merge(agentloop_server::router(state));
//! # let _ = app; Ok(()) }
//! ```
//!
//! ## Endpoints
//!
//! | method and path | what it does |
//! | --- | --- |
//! | `GET /`, `GET /c/{conversation_id}` | the web page (the second opens that chat) |
//! | `POST /v1/chat` | send a message, answer streamed as chat events (below) |
//! | `GET /v1/chat/{message_id}/events` | reconnect to an answer: the events after `Last-Event-ID` |
//! | `POST /v1/chat/{message_id}/cancel` | stop an answer (202); what it produced is kept |
//! | `POST /v1/chat/{message_id}/approvals` | decide the calls an answer waits on (202; see "Approvals") |
//! | `POST /v1/chat/ui-stream` | the same chat for AI SDK frontends (UI message stream v1) |
//! | `GET /v1/chat/ui-stream/{chat_id}/stream` | the AI SDK's resume request (replay, or 204) |
//! | `GET /v1/conversations` | `{"conversations": [{id, title, created_at, updated_at, message_count}]}` |
//! | `GET /v1/conversations/{id}` | one conversation with `messages` (canonical agentloop messages), `answers` (`[{prompt_index, stop_reason, usage}]`: how each answer ended and its tokens, keyed by its prompt's position in `messages`) and `active_message_id` |
//! | `PATCH /v1/conversations/{id}` | rename it: `{"title": "..."}` (one line, 1 to 200 characters); answers its summary |
//! | `DELETE /v1/conversations/{id}` | delete it (204) |
//!
//! A new conversation's title is its first prompt on one line, cut at a word boundary with an
//! ellipsis when longer than 60 characters.
//!
//! Errors are JSON: `{"error": {"message": "..."}}`. Request bodies larger than the configured
//! limit get 413. A conversation answers one message at a time (409 while busy).
//!
//! ## Who may ask
//!
//! - **Token.** When [`ServerConfig::token()`] is set (`agentloop serve --token-file PATH`,
//!   `--token` or `AGENTLOOP_TOKEN`), every `/v1` request needs `Authorization: Bearer <token>`
//!   (401 otherwise). An empty or whitespace-only token is refused at start
//!   ([`ServerError::EmptyToken`]), never taken as "no authentication".
//! - **No token: loopback only.** [`Server::bind`] refuses an address that is not loopback
//!   ([`ServerError::Unprotected`]) unless [`ServerConfig::insecure_no_auth()`] is set
//!   (`--insecure-no-auth`), and warns when the file skills are on.
//! - **No token: `Host` check.** Every route (the page included) answers only requests whose
//!   `Host` is `localhost`, `127.0.0.1` or `[::1]` on any port, or one of
//!   [`ServerConfig::allowed_hosts()`] (`--allowed-host`); others get 403. This defeats DNS
//!   rebinding, where a web page re-resolves its own name to 127.0.0.1.
//! - **`Origin` check.** A `/v1` request with an `Origin` header that is neither the server's
//!   own (its `host:port` equals the `Host` header) nor one of [`ServerConfig::cors_origins()`]
//!   (`--cors-origin`, `*` for any) gets 403. Listed origins also get CORS, preflight included,
//!   so AI SDK frontends on another origin can use `/v1/chat/ui-stream`.
//! - **Headers.** The page and its assets are sent with `Content-Security-Policy: default-src
//!   'self'; frame-ancestors 'none'`, `Referrer-Policy: no-referrer` and, like every answer,
//!   `X-Content-Type-Options: nosniff`. The page renders model output as Markdown and sanitizes
//!   it with DOMPurify before inserting it: HTML in an answer (scripts, event handlers,
//!   `javascript:` links) is removed, not merely blocked by the policy.
//!
//! Errors shown to web users (the `error` event, the UI stream's `error` chunk, 500 answers)
//! name the kind of failure, e.g. "the model provider could not be reached" or "the model
//! provider rejected the request (status 400)"; the details (the provider's URL and answer) are
//! logged with `tracing`.
//!
//! ## File skills
//!
//! With a sandbox ([`ServerConfig::sandbox`], `agentloop serve --sandbox DIR`) the model gets
//! `read_file`, `list_dir`, `write_file` and `search_files`, confined to that directory (the
//! rules are in [`skills`]). Only regular files with a single link are read or written, through
//! a handle on the directory that cannot leave it; a write replaces the file through a
//! temporary one; writes have a total quota and each search a byte budget. The server refuses
//! to start with a sandbox that contains its database (and so its `-wal`/`-shm` files) or a
//! protected path such as the `--tools` directory ([`ServerConfig::protect_paths`]), and with
//! `/` or the home directory unless [`ServerConfig::allow_broad_sandbox()`] is set
//! (`--allow-broad-sandbox`).
//!
//! ## Serving, limits and shutdown
//!
//! [`Server`] (and [`serve`], what `agentloop serve` runs) accepts HTTP/1.1 connections itself
//! rather than through `axum::serve`, to bound what slow or greedy clients can hold:
//!
//! | [`ServerConfig`] field | default | what it does |
//! | --- | --- | --- |
//! | `header_read_timeout` | 10 s | a connection that has not sent a request's headers by then (idle ones included) is closed |
//! | `body_read_timeout` | 30 s | a request body not received by then fails the request (an error answer, then the connection is closed); responses, such as event streams, are not limited |
//! | `max_body_bytes` | 1 MiB | a request announcing a larger `Content-Length` gets 413 before its body is read |
//! | `max_connections` | 4096 | connections beyond it wait to be accepted; lowered to fit the open-file limit |
//! | `drain_timeout` | 8 s | how long a shutdown waits for answers in flight to be saved |
//!
//! Every accepted socket has `TCP_NODELAY` set, so streamed events are not held back, and at
//! start the soft limit on open files is raised to the hard limit. The address is bound before
//! the database is opened: a start that fails on a port in use leaves no database behind.
//! The database file is checked at open (writable, its directory writable, an SQLite file,
//! `PRAGMA quick_check`), and every database error names its path; a new file is created
//! readable and writable by its owner only (0600), and SQLite gives its `-wal` and `-shm` the
//! same mode. Database calls are queued to one worker, so however many chats wait on the
//! database they take one blocking thread, and a chat's stream starts before its conversation
//! is written (on Postgres after it: the answer's row, which keeps the conversation busy
//! across servers, is taken first).
//!
//! [`Server::run`] stops on Ctrl-C or SIGTERM; [`Server::run_until`] on a future of your own.
//! Either way the server stops accepting, cancels the answers in flight (each saves what it
//! produced and its stream ends with `message_end`; on Postgres they are handed over to the
//! other servers instead, see "Many servers on Postgres"), waits for them and the connections
//! to finish, up to `drain_timeout`, and returns. The routes of [`router`] mounted in an app of
//! your own get none of this: apply your own server's limits there.
//!
//! ## Many servers on Postgres
//!
//! With the crate feature `postgres` (on in the `agentloop` CLI), conversations can live in
//! Postgres instead of SQLite: [`ServerConfig::postgres`], or `agentloop serve --db
//! postgres://user[:password]@host[:port]/dbname`. Any number of servers can share the
//! database behind a load balancer. The connection has no TLS: keep Postgres on loopback or a
//! private network. Errors and logs show the URL without its password.
//!
//! - **Schema.** Tables `agentloop_conversations`, `agentloop_messages`, `agentloop_answers` and
//!   `agentloop_paused_answers` (the SQLite tables' columns; JSON kept as text),
//!   `agentloop_chat_runs` and `agentloop_chat_run_events` (SQLite's `chat_runs` and
//!   `chat_run_events`, plus the lease: `owner`, `lease_until`, `live_end`/`live_jumps`
//!   (where the log written between checkpoints ends) and `cancel` (asked through another
//!   server)), and `agentloop_server_migrations` (the
//!   versions applied). The schema is migrated at start in one transaction holding an advisory
//!   lock, so servers starting together migrate it once; a database migrated by a newer server
//!   is refused. The names do not clash with the library's `PostgresStore` (`agentloop_runs`),
//!   which can share the database.
//! - **Connections.** Each server holds two: one for its calls, which run in the order they
//!   are made, as with SQLite, and one that `LISTEN`s for answers decided or written elsewhere
//!   (below). A dropped connection (Postgres restarted) is opened again: the calls' at the next
//!   call (the call that met the loss fails with a database error), the listener's a second
//!   later.
//! - **Answers and leases.** Every answer is a durable run, checkpointed as under "Restarts"
//!   (typed answers too), and its row names the server running it (a random id per
//!   process) and until when: its **lease**, [`ServerConfig::answer_lease`] (15 s by default;
//!   `agentloop serve --answer-lease-ms`). Each server renews the leases of all its answers in
//!   one statement every third of a lease. Every checkpoint and event write is conditioned on
//!   still holding the lease (and the checkpoint on its version), so a server that stalled past
//!   its lease has its late writes refused and stops the answer there, writing nothing more.
//!   Every half lease (and at start) each server takes over the answers whose lease expired
//!   (`SELECT … FOR UPDATE SKIP LOCKED`, a few at a time, so two servers never take the same)
//!   and resumes each as a restart does: the log cut back to the checkpoint, new ids from the
//!   next multiple of 1,000,000,000, a call that was running answered as interrupted unless its
//!   tool is idempotent. A dead server's answers so go on within about 1.5 leases. Answers
//!   waiting for approval hold no lease that matters: they are decided through any server (below).
//! - **Following an answer from any server.** A running answer also writes its new events every
//!   50 ms or so between checkpoints and `NOTIFY`s `agentloop_chat_written` (its message id;
//!   the rows are the truth). `GET /v1/chat/{message_id}/events` on a server that does not run
//!   the answer reads the stored log after `Last-Event-ID`, then follows it live, reading again
//!   on each notification and every second in case one was missed; the AI SDK's resume request
//!   (`GET /v1/chat/ui-stream/{chat_id}/stream`) does the same. An id the running server sent
//!   but had not stored gets 409 naming the last stored event, after a short wait. When another
//!   server takes the answer over, the streams that follow it end; the client reconnects (a
//!   cut id gets 409, as after a restart). A cancel (`POST /v1/chat/{message_id}/cancel`)
//!   through a server that does not run the answer flags its row and `NOTIFY`s
//!   `agentloop_chat_cancel`; the server running it stops it (or at its next heartbeat, when
//!   it missed the notification).
//! - **Across servers.** Conversations are read, listed, continued, renamed and deleted through
//!   any server. A conversation answers one message at a time across all of them: its
//!   unfinished answer row is unique, so a second message gets 409 through any server (and its
//!   `active_message_id` names the answer). An answer waiting for approval can be followed,
//!   decided or cancelled through any server, even one started before the pause or after the
//!   pausing server died: a server that does not hold it loads it from the database, for
//!   `useChat`'s approval response on the UI stream too. Deleting its row is what decides it, so
//!   two servers never run its calls twice; the deciding server takes the answer's lease. The
//!   delete notifies every server (`NOTIFY agentloop_answer_decided`, the message id); one
//!   holding a copy of the answer ends it: its streams close, a decision sent there gets 409. A
//!   copy is also checked against the database whenever it is asked about (a notification
//!   missed while the listener reconnected).
//! - **Load balancer.** Any server can serve any request, so route as you like; sticky sessions
//!   (by client address or cookie) are a preference, not a requirement: a stream served by the
//!   server running the answer has no lag. Turn
//!   off response buffering for `text/event-stream` (the server sends `X-Accel-Buffering: no`
//!   for nginx) and keep idle timeouts above the keep-alive interval (15 s).
//! - **Stopping a server (rolling deploys).** A server stopped by SIGTERM or Ctrl-C
//!   ([`AppState::shutdown`]) hands its answers in flight over: each stops where its last
//!   checkpoint stands, writing nothing more (its clients' streams end without `message_end`,
//!   and they reconnect through any server), its lease ends at once and the other servers are
//!   told (`NOTIFY agentloop_chat_released`), and one of them takes it over as after a crash,
//!   without waiting for the lease. A tool that was running is answered as interrupted (or run
//!   again when idempotent). Answers waiting for approval stay as they are. A server that dies
//!   has its answers taken over when their leases expire.

//! ## The chat event protocol, version 1
//!
//! `POST /v1/chat` takes `{"conversation_id"?: "...", "message": "...", "output_schema"?: {...}}`
//! (no id: a new conversation; an unknown id: 404; an `output_schema`, a JSON Schema, asks for
//! a typed answer: checked and retried like `Agent::run_output`) and answers `text/event-stream` with the header
//! `x-agentloop-protocol: 1`, plus `x-agentloop-conversation-id` and `x-agentloop-message-id`.
//! Every event is `id: <n>`, `event: <name>`, `data: <json>` (see [`ChatEvent`]). The server
//! records the library's run events as they come and both this protocol and the UI stream are
//! projections of them; the table of which layer emits what is in [`agentloop::run`]'s docs
//! ("Events"). Every tool call, one refused by a hook or answered without running (past a
//! limit) included, gets `tool_call_start` then `tool_call_result`:
//!
//! | event | data |
//! | --- | --- |
//! | `message_start` | `{conversation_id, message_id}` — always first |
//! | `text_delta` | `{text}` |
//! | `thinking_delta` | `{text}` — reasoning, from models that stream it |
//! | `tool_call_start` | `{id, name, arguments}` — the call is complete and about to run |
//! | `tool_call_result` | `{id, content, is_error}` — `content` is a string, or content blocks |
//! | `approval_requested` | `{id, name, arguments, reason}` — the call (after its `tool_call_start`) waits for a decision |
//! | `output` | `{value}` — the checked answer of a chat with an `output_schema` |
//! | `message_end` | `{stop_reason, usage}` — always sent |
//! | `error` | `{message}` — after `message_end` when the answer did not complete |
//!
//! A chat without tool use is `message_start`, `text_delta`s, `message_end`. An answer that hits
//! the tool-iteration limit, fails at the model, or has its prompt refused by a hook ends with
//! `message_end` followed by `error` naming the cause. Clients should ignore events they do not
//! know: new events may be added within version 1; a change to existing ones bumps the version.
//! Idle streams carry `: keep-alive` comments.
//!
//! **Reconnecting.** An answer runs in a task of its own; the HTTP response only follows it.
//! Event ids increase (they may skip numbers). A client that lost the connection calls
//! `GET /v1/chat/{message_id}/events` with `Last-Event-ID: <last id it saw>` and receives the
//! events it missed, then the rest live — no duplicates. Without the header it gets the whole
//! answer again; an id that is not a number, or past the last event sent, gets 400. A finished answer stays available for reconnects for a while (default 60 s), a restart included.
//! When no client has followed an answer for the grace period (default 10 s) it is cancelled:
//! the text produced so far is saved, unfinished tool calls get an error result saying they were
//! not run, and the history stays valid.
//!
//! **Approvals.** A call needs the user's approval when its tool says so (a descriptor's
//! `needs_approval: true`, [`agentloop::Tool::with_approval_required`]), when the sandbox's
//! `write_file` is on ([`ServerConfig::sandbox_writes_need_approval()`], on by default), or when
//! the server's policy asks ([`ServerConfig::approval_policy()`]; `agentloop serve
//! --approve-tools all|none|NAME,...` sets both from the command line). Each such call gets
//! `approval_requested` after its `tool_call_start`; once the step's other calls have run, the
//! answer waits, its stream open (a paused answer is not cancelled when its listeners leave).
//! `POST /v1/chat/{message_id}/approvals` with `{"decisions": [{"id": "call_1", "decision":
//! "approve"}, {"id": "call_2", "decision": "approve_edited", "input": {...}}, {"id": "call_3",
//! "decision": "deny", "message": "..."}]}` (or `"always_approve"`: this tool for the rest of
//! the answer) decides every pending call at once; the answer goes on in the same stream (or a
//! reconnect) with the calls' `tool_call_result`s. An edited input the tool's schema refuses, an
//! unknown or undecided call get 422 and the answer keeps waiting; an answer not waiting gets
//! 409. The model sees what ran: the edited input in its history, or the denial's message as
//! the call's error result. A cancel ends a waiting answer as `interrupted` without running the
//! calls. Waiting answers are stored in the database (table `paused_answers`) and wait again
//! after a restart, with their events up to the pause (kept with the pause, under the same
//! ids: a reconnect with `Last-Event-ID` gets exactly what it missed, then the rest once
//! decided). The conversation stays busy (409) while its answer waits.
//!
//! **Persistence.** The history is saved after every step (each model call and its tools).
//! Continuing a conversation sends the model its whole stored history.
//!
//! **Restarts.** Every answer is a durable run of the library
//! ([`agentloop::Agent::run_durable_stream`], or
//! [`agentloop::Agent::run_output_durable_stream_with`] for a typed answer with an
//! `output_schema`, which keeps its schema in its checkpoints; run id = the message id) checkpointed in
//! the database (table `chat_runs`), after each model response, before a step's tools start,
//! after each tool outcome and at each step's end. Each checkpoint is written in one
//! transaction with the answer's events since the previous one (table `chat_run_events`,
//! under their event ids), so the stored log ends exactly at the stored checkpoint; a
//! finished answer's last events are written when it ends. (On Postgres the same happens
//! across servers, another server taking over a dead one's answers: see "Many servers on
//! Postgres".) With SQLite, when the process dies, even by
//! SIGKILL, the next start on the same database resumes every answer that was in flight from
//! its last checkpoint ([`agentloop::Agent::resume_run_stream`]), with the same agent: a tool
//! whose outcome was recorded is not run again, a call that was running gets an error result
//! saying it was interrupted (or runs again when its tool is idempotent,
//! [`agentloop::Tool::with_idempotent`]), a model call in flight is made again. Its log comes
//! back under the same ids, **cut back to the checkpoint**: events sent after it (the deltas of
//! a model call in flight, say) are dropped, and the resumed answer's events get new ids, from
//! the next multiple of 1,000,000,000, so no id ever names two events. A reconnect with an id
//! from before the checkpoint gets exactly the events it missed, then the rest live; one with
//! an id that was cut gets 409 whose message names the last kept event: drop what came after
//! it and reconnect from it (the page reconnects by itself for about 20 s, and on that 409 shows
//! the answer again from its first event). An answer waiting for approval waits again (see
//! "Approvals"). With SQLite a shutdown by Ctrl-C or SIGTERM is not a crash: it ends the
//! answers in flight as `interrupted`, and nothing is resumed (on Postgres they are handed over). An answer resumed by approval decisions goes on from
//! its paused checkpoint ([`agentloop::Agent::decide_run_stream`]) and is checkpointed the same
//! way.
//!
//! ## The AI SDK UI message stream
//!
//! `POST /v1/chat/ui-stream` takes what the AI SDK's `DefaultChatTransport` sends
//! (`{id, messages, trigger, ...}`) and answers with the UI message stream protocol v1 (`data:
//! <chunk json>` events: `start`, `start-step`, `text-start`/`text-delta`/`text-end`,
//! `reasoning-*`, `tool-input-start`/`tool-input-delta`/`tool-input-available`,
//! `tool-output-available`/`tool-output-error`, `tool-approval-request`/`tool-output-denied`,
//! `finish-step`, `error`, `finish`, then
//! `data: [DONE]`; header `x-vercel-ai-ui-message-stream: v1`). The chat id is the conversation
//! id. For a conversation the server knows, only the client's last user message is used (the
//! stored history is the faithful one); `regenerate-message` answers the last prompt again. For
//! an unknown id the client's messages (text and finished tool parts) become the history.
//! Tool outputs that are JSON objects or arrays are sent parsed. Every tool call gets
//! `tool-input-start`, its `tool-input-delta`s, `tool-input-available` and its output, like in
//! the run's events it is projected from.
//!
//! Approvals use the AI SDK's own parts (`ai` 6 and 7): a call waiting for approval gets
//! `tool-approval-request {approvalId, toolCallId}` (the approval id is the call id) and the
//! response ends there (`finish`, `[DONE]`). The client's next request, which `useChat` sends
//! after `addToolApprovalResponse` with `sendAutomaticallyWhen:
//! lastAssistantMessageIsCompleteWithApprovalResponses`, ends with the assistant message whose
//! tool parts are `approval-responded` (`approval: {id, approved, reason?}`); the answer goes on
//! with those decisions (a denial's `reason` is what the model reads) and the response continues
//! the same assistant message: `start` with its id, each approved call's output, a denied call's
//! `tool-output-denied`, then the rest. The protocol has no edited arguments; use
//! `/v1/chat/{message_id}/approvals` for those.

#![warn(missing_docs)]

mod chat;
mod config;
mod error;
mod events;
mod http;
mod listen;
mod runs;
pub mod skills;
mod state;
mod store;

use std::future::Future;
use std::net::SocketAddr;

/// What the HTTP API decodes from requests (the bodies, and the `Last-Event-ID` header), public
/// so fuzzers and clients' tests can decode bytes exactly as the server does
/// (`serde_json::from_slice::<ChatRequest>(body)`, [`requests::resume_after`]).
pub mod requests {
    pub use crate::http::chat::{
        ApprovalsRequest, ChatRequest, DecisionItem, InvalidLastEventId, resume_after,
    };
    pub use crate::http::ui_stream::{UiChatRequest, UiMessage};
}

pub use config::{DEFAULT_DATABASE, Database, ServerConfig, TOKEN_ENV};
pub use error::ServerError;
pub use events::{ChatEvent, PROTOCOL_HEADER, PROTOCOL_VERSION};
pub use http::{CONVERSATION_HEADER, MESSAGE_HEADER, router};
pub use state::AppState;
pub use store::{AnswerRecord, ConversationSummary, StoredConversation};

/// A server bound to its address, not serving yet. Bind to port 0 and read
/// [`Server::local_addr`] to get a free port.
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    state: AppState,
    addr: SocketAddr,
    limits: listen::Limits,
}

impl Server {
    /// Check the configuration, bind `addr`, then open the database and prepare the agent.
    /// The address is bound first, so a start that fails on it (the port is in use) leaves no
    /// new database behind. Also raises the soft limit on open files to the hard limit.
    ///
    /// Without a token, an address that is not loopback is refused
    /// ([`ServerError::Unprotected`]) unless [`ServerConfig::insecure_no_auth()`] is set.
    pub async fn bind(addr: SocketAddr, config: ServerConfig) -> Result<Self, ServerError> {
        config.check()?;
        if config.token.is_none() {
            if !addr.ip().to_canonical().is_loopback() && !config.insecure_no_auth {
                return Err(ServerError::Unprotected {
                    addr: addr.to_string(),
                });
            }
            if let Some(dir) = &config.sandbox {
                tracing::warn!(
                    "the file skills are on (sandbox {}) without a token: anyone who can reach {addr} can make the model write files there",
                    dir.display()
                );
            }
        }
        let open_files = listen::raise_open_file_limit();
        let serve_error = |e: std::io::Error| ServerError::Serve {
            addr: addr.to_string(),
            message: e.to_string(),
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(serve_error)?;
        let addr = listener.local_addr().map_err(serve_error)?;
        let limits = listen::Limits::new(&config, open_files);
        let state = AppState::new(config).await?;
        Ok(Self {
            listener,
            state,
            addr,
            limits,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (to inspect conversations or wait for answers).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve until `shutdown` completes; then stop accepting, cancel the answers in flight,
    /// wait (up to [`ServerConfig::drain_timeout`]) until they are saved and their streams have
    /// ended, and return.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let app = router(self.state.clone());
        listen::serve(self.listener, app, self.state, self.limits, shutdown).await;
        Ok(())
    }

    /// Serve until Ctrl-C (SIGINT) or SIGTERM (what docker and systemd send); both shut down
    /// as [`Server::run_until`] does.
    pub async fn run(self) -> Result<(), ServerError> {
        let signal = shutdown_signal();
        self.run_until(signal).await
    }
}

/// Completes on Ctrl-C or SIGTERM. The SIGTERM handler is installed now, not when the future
/// is first polled, so a signal sent right after start-up is not missed.
fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => Some(signal),
            Err(e) => {
                tracing::warn!("could not listen for SIGTERM (Ctrl-C still works): {e}");
                None
            }
        };
    async move {
        #[cfg(unix)]
        let terminated = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let terminated = std::future::pending::<()>();
        let interrupted = async {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!("could not listen for Ctrl-C: {e}");
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = interrupted => tracing::info!("Ctrl-C: shutting down"),
            () = terminated => tracing::info!("SIGTERM: shutting down"),
        }
    }
}

/// Serve `config` on `addr` until Ctrl-C or SIGTERM: what `agentloop serve` runs.
pub async fn serve(addr: SocketAddr, config: ServerConfig) -> Result<(), ServerError> {
    let server = Server::bind(addr, config).await?;
    tracing::info!(
        "agentloop server listening on http://{}",
        server.local_addr()
    );
    server.run().await
}
