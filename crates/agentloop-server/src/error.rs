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
