//! The `agentloop` command line.

mod cli;
mod commands;
mod display;
mod exit;
mod model;
mod output;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, McpCommand, RunsCommand, ToolsCommand};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Run(_) | Command::Chat(_) | Command::Serve(_)
    ) {
        telemetry::start();
    }
    let outcome = match cli.command {
        Command::Run(args) => commands::run::run(args).await,
        Command::Chat(args) => commands::chat::chat(args).await,
        Command::Serve(args) => commands::serve::serve(args).await,
        Command::Tools(ToolsCommand::List { path }) => commands::tools::list(&path),
        Command::Tools(ToolsCommand::Validate { path }) => commands::tools::validate(&path),
        Command::Replay(args) => commands::replay::replay(&args),
        Command::Mcp(McpCommand::Serve(args)) => commands::mcp::serve(args).await,
        Command::Runs(RunsCommand::List { db }) => commands::runs::list(&db).await,
        Command::Runs(RunsCommand::Show { id, db }) => commands::runs::show(&id, &db).await,
        Command::Runs(RunsCommand::Resume(args)) => commands::runs::resume(args).await,
        Command::MockServer(args) => commands::mock_server::serve(&args).await,
    };
    // The exporters run on threads of their own: flushing them blocks this one, which is fine
    // at the end of the program.
    tokio::task::block_in_place(telemetry::finish);
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::ERROR)
        }
    }
}
