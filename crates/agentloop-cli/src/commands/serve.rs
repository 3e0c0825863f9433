//! `agentloop serve`: the chat server.

use std::process::ExitCode;

use agentloop_server::ServerConfig;

use crate::cli::ServeArgs;
use crate::model;

/// Serve until the process ends.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, String> {
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    let agent = model::agent(&args.model, &resolved)?;
    let mut config = ServerConfig::new(agent)
        .database(&args.db)
        .token(args.token.clone())
        .max_tool_iterations(args.model.max_turns);
    if let Some(dir) = &args.sandbox {
        config = config
            .sandbox(dir)
            .protect_paths(args.model.tools.clone())
            .allow_broad_sandbox(args.allow_broad_sandbox);
    }
    let server = agentloop_server::Server::bind(args.addr, config)
        .await
        .map_err(|e| e.to_string())?;
    // The first stdout line names the address (useful with --addr 127.0.0.1:0).
    println!("serving on http://{}", server.local_addr());
    eprintln!("agentloop: database {}", args.db.display());
    server.run().await.map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
