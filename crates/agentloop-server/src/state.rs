//! The shared state behind the router.

use std::sync::Arc;

use agentloop::Agent;
use agentloop::run::{Approval, ApprovalPolicy};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::runs::Runs;
use crate::skills::Sandbox;
use crate::store::{ConversationSummary, Store, StoredConversation};

/// What every request handler shares: the configuration, the agent (with the file skills when
/// a sandbox is configured), the database and the chats in flight. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: ServerConfig,
    pub(crate) agent: Agent,
    pub(crate) store: Store,
    pub(crate) runs: Runs,
    pub(crate) tasks: TaskTracker,
    /// Parent of every chat's cancellation token.
    pub(crate) shutdown: CancellationToken,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The agent chats run through: the configured one with the file skills added and the
/// server's approval policy applied.
fn chat_agent(config: &ServerConfig) -> Result<Agent, ServerError> {
    let agent = agent_with_skills(config)?;
    let Some(policy) = config.approval_policy.clone() else {
        return Ok(agent);
    };
    Ok(agent.with_options(|options| {
        options.approval_policy = Some(match options.approval_policy.take() {
            None => policy,
            Some(own) => {
                ApprovalPolicy::new(move |ctx| stricter(own.check(ctx), policy.check(ctx)))
            }
        });
    }))
}

/// The stricter of two answers: deny over require over allow (the first of equals).
fn stricter(a: Approval, b: Approval) -> Approval {
    fn rank(a: &Approval) -> u8 {
        match a {
            Approval::Allow => 0,
            Approval::Require(_) => 1,
            Approval::Deny(_) => 2,
        }
    }
    if rank(&b) > rank(&a) { b } else { a }
}

/// The agent with the file skills added (the agent's own tools win on a name clash).
fn agent_with_skills(config: &ServerConfig) -> Result<Agent, ServerError> {
    let Some(dir) = &config.sandbox else {
        return Ok(config.agent.clone());
    };
    let sandbox = Sandbox::new(dir, config.sandbox_limits.clone()).map_err(|message| {
        ServerError::Sandbox {
            path: dir.clone(),
            message,
        }
    })?;
    let agent = &config.agent;
    let base = agent.base_request().clone();
    Ok(Agent::builder_shared(agent.provider().clone())
        .request(move |request| *request = base)
        .tools(Arc::new(sandbox).tools().into_iter().map(|tool| {
            if tool.name() == "write_file" && config.sandbox_writes_need_approval {
                tool.with_approval_required(true)
            } else {
                tool
            }
        }))
        .tools(agent.tools().iter().cloned())
        .options(agent.options())
        .build())
}

impl AppState {
    /// Check the configuration (an empty token is refused), open the database (running
    /// migrations) and prepare the agent.
    pub async fn new(config: ServerConfig) -> Result<Self, ServerError> {
        config.check()?;
        crate::skills::check_sandbox_placement(&config)?;
        let agent = chat_agent(&config)?;
        let store = Store::open_leased(config.database.clone(), config.answer_lease).await?;
        let state = Self {
            inner: Arc::new(Inner {
                // A token the embedding program set on the agent stops the server's answers too.
                shutdown: agent
                    .options()
                    .cancel
                    .map_or_else(CancellationToken::new, |agent| agent.child_token()),
                config,
                agent,
                store,
                runs: Runs::default(),
                tasks: TaskTracker::new(),
            }),
        };
        crate::chat::restore_paused(&state).await?;
        crate::chat::restore_running(&state).await?;
        crate::chat::keep_leases(&state);
        Ok(state)
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The agent chats run through (the configured one plus the file skills).
    pub fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// All stored conversations, most recently changed first.
    pub async fn conversations(&self) -> Result<Vec<ConversationSummary>, ServerError> {
        self.inner.store.list().await
    }

    /// One stored conversation with its history.
    pub async fn conversation(&self, id: &str) -> Result<Option<StoredConversation>, ServerError> {
        self.inner.store.get(id.to_owned()).await
    }

    /// Wait until the chat answer `message_id` has finished and been saved. `false` when no
    /// such answer is known (never started, or finished long ago).
    pub async fn wait_for_message(&self, message_id: &str) -> bool {
        match self.inner.runs.get(message_id) {
            Some(run) => {
                run.finished().await;
                true
            }
            None => false,
        }
    }

    /// Cancel every chat in flight and wait until each has saved what it produced. With a
    /// database shared by many servers the chats are handed over instead: each stops here as
    /// it stands at its last checkpoint, writing nothing more, and another server takes it
    /// over at once and finishes it (see the crate docs, "Many servers on Postgres").
    pub async fn shutdown(&self) {
        let hand_over = self.inner.store.is_shared();
        if hand_over {
            for run in self.inner.runs.running() {
                run.lose();
            }
        }
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        if hand_over {
            match self.inner.store.release_leases().await {
                Ok(0) => {}
                Ok(n) => tracing::info!("handed {n} answers in flight over to the other servers"),
                Err(e) => tracing::warn!(
                    "could not hand the answers in flight over (another server takes them when their leases expire): {e}"
                ),
            }
        }
    }
}
