//! One module per subcommand.

pub mod approve;
pub mod chat;
pub mod mcp;
pub mod mock_server;
pub mod replay;
pub mod run;
pub mod runs;
pub mod serve;
pub mod tools;
