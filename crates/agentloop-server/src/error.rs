//! Errors of starting and running a server.

use std::path::PathBuf;

/// Why a server could not start or keep running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The database could not be opened, migrated, read or written.
    #[error("database error: {message}")]
    Database {
        /// What went wrong.
        message: String,
    },
    /// The sandbox directory is unusable.
    #[error("sandbox directory `{}`: {message}", path.display())]
    Sandbox {
        /// The configured directory.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The configured bearer token is empty or only whitespace: most often an unset shell
    /// variable in `--token "$SECRET"`. Refused so that it never silently means "no
    /// authentication".
    #[error(
        "the bearer token is empty or only whitespace (an unset variable in `--token \"$SECRET\"`?): \
         set a non-empty token (--token-file, --token or AGENTLOOP_TOKEN; ServerConfig::token in code), \
         or leave the token out to serve without authentication, which is allowed on loopback \
         addresses only unless --insecure-no-auth (ServerConfig::insecure_no_auth) is given"
    )]
    EmptyToken,
    /// The configured bearer token is one no HTTP client could send.
    #[error("the bearer token is not usable: {message}")]
    InvalidToken {
        /// What is wrong with it.
        message: String,
    },
    /// A server without authentication was asked to listen on an address other machines can
    /// reach.
    #[error(
        "refusing to serve {addr} without authentication: it is not a loopback address, so anyone \
         who can reach it could read every conversation and chat (and use the file skills). Set a \
         token (--token-file FILE, --token or AGENTLOOP_TOKEN; ServerConfig::token in code), or pass \
         --insecure-no-auth (ServerConfig::insecure_no_auth) when something in front of the server \
         authenticates"
    )]
    Unprotected {
        /// The address.
        addr: String,
    },
    /// The listening socket could not be bound or served.
    #[error("could not serve on {addr}: {message}")]
    Serve {
        /// The address.
        addr: String,
        /// What went wrong.
        message: String,
    },
}

impl ServerError {
    pub(crate) fn database(message: impl std::fmt::Display) -> Self {
        Self::Database {
            message: message.to_string(),
        }
    }
}

impl From<rusqlite::Error> for ServerError {
    fn from(e: rusqlite::Error) -> Self {
        Self::database(e)
    }
}

/// What a web user is told about a chat that failed at the model: the kind of failure in a
/// sentence, never the provider's URL, response body or transport details (those can name
/// internal hosts; the server log gets the full error).
pub(crate) fn user_message(error: &agentloop::Error) -> String {
    use agentloop::{Error, TimeoutKind};
    match error {
        Error::Http { .. } => "the model provider could not be reached".into(),
        Error::Api { status, .. } => {
            format!("the model provider failed to answer (status {status})")
        }
        Error::RateLimited { .. } => {
            "the model provider is rate limiting requests; try again later".into()
        }
        Error::Overloaded { .. } => "the model provider is overloaded; try again later".into(),
        Error::Auth { status, .. } => format!(
            "the model provider refused the server's credentials (status {status}); the server's \
             operator needs to check its API key"
        ),
        Error::InvalidRequest { status, .. } => {
            format!("the model provider rejected the request (status {status})")
        }
        Error::Stream { .. } => "the model provider reported an error during the answer".into(),
        Error::Timeout { kind, .. } => match kind {
            TimeoutKind::Step | TimeoutKind::Run => {
                "the answer took longer than the server allows".into()
            }
            _ => "the model provider did not answer in time".into(),
        },
        Error::Parse { .. } => "the model provider's answer could not be understood".into(),
        Error::IncompleteStream { .. } => {
            "the connection to the model provider broke off during the answer".into()
        }
        Error::Cancelled => "the answer was cancelled".into(),
        // The operator's hooks word their refusals for the people they refuse.
        Error::HookBlocked { .. } => error.to_string(),
        Error::InvalidHistory { .. } => "the conversation's history is not valid to send".into(),
        other => format!("the answer failed ({})", other.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_messages_leave_out_provider_details() {
        let errors = [
            agentloop::Error::Http {
                message: "error sending request for url (http://10.0.0.5:8000/v1/chat)".into(),
            },
            agentloop::Error::InvalidRequest {
                provider: "openai".into(),
                status: 400,
                error_type: None,
                message: "model at http://10.0.0.5 not found".into(),
            },
            agentloop::Error::Parse {
                what: "stream chunk".into(),
                message: "secret body http://10.0.0.5".into(),
            },
            agentloop::Error::ToolLoad {
                path: "/srv/tools/a.json".into(),
                tool: None,
                line: None,
                column: None,
                message: "bad".into(),
            },
        ];
        for error in errors {
            let message = user_message(&error);
            assert!(!message.contains("10.0.0.5"), "{message}");
            assert!(!message.contains("/srv"), "{message}");
        }
    }
}
