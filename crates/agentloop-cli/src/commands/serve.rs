//! `agentloop serve`: the chat server.

use std::net::SocketAddr;
use std::process::ExitCode;

use agentloop::Agent;
use agentloop::run::{Approval, ApprovalPolicy};
use agentloop_server::{Database, ServerConfig, TOKEN_ENV};

use crate::cli::ServeArgs;
use crate::model;

/// The token from `--token-file`, `--token` or `AGENTLOOP_TOKEN` (in that order), or none.
/// An empty one is an error naming where it came from: it must never mean "no authentication".
fn token(args: &ServeArgs) -> Result<Option<String>, String> {
    let (token, source) = if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        let token = text.trim_end_matches(['\n', '\r']).to_owned();
        (token, format!("the token file {}", path.display()))
    } else if let Some(token) = &args.token {
        (token.clone(), "--token".to_owned())
    } else if let Some(token) = std::env::var_os(TOKEN_ENV) {
        let token = token.into_string().map_err(|_| {
            format!("{TOKEN_ENV} is not valid UTF-8; a bearer token is printable ASCII")
        })?;
        (token, TOKEN_ENV.to_owned())
    } else {
        return Ok(None);
    };
    if token.trim().is_empty() {
        return Err(format!(
            "the token from {source} is empty (an unset variable in `--token \"$SECRET\"`?); \
             give a non-empty token, or no token at all to serve without authentication on a \
             loopback address"
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the token from {source} contains spaces, control characters or non-ASCII \
             characters; a bearer token is printable ASCII without spaces"
        ));
    }
    Ok(Some(token))
}

/// `--addr` resolved: IP:PORT as is, HOST:PORT through the system resolver.
async fn resolve_addr(addr: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(addr) = addr.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    if !addr.contains(':') {
        return Err(format!(
            "--addr {addr}: give HOST:PORT or IP:PORT, e.g. 127.0.0.1:8080 or localhost:8080"
        ));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("--addr {addr}: cannot resolve the host name: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("--addr {addr}: the host name has no address"));
    }
    Ok(addrs)
}

/// A `--cors-origin` value must be an origin as browsers send it: `scheme://host[:port]`.
fn check_origin(origin: &str) -> Result<(), String> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match rest {
        _ if origin == "*" => Ok(()),
        Some(rest) if !rest.is_empty() && !rest.trim_end_matches('/').contains('/') => Ok(()),
        _ => Err(format!(
            "--cors-origin {origin}: give an origin as scheme://host[:port], e.g. \
             http://localhost:3000 (no path), or `*` for any"
        )),
    }
}

/// The names of the sandbox's file skills (see `agentloop_server::skills`).
const SANDBOX_TOOLS: [&str; 4] = ["read_file", "list_dir", "write_file", "search_files"];

/// Apply `--approve-tools` to `config`: `all`, `none`, or tool names that must each be a tool
/// the chats have.
fn approve_tools(
    config: ServerConfig,
    value: &str,
    agent: &Agent,
    sandbox: bool,
) -> Result<ServerConfig, String> {
    match value.trim() {
        "all" => {
            return Ok(config.approval_policy(ApprovalPolicy::always(
                "every tool call needs approval on this server (--approve-tools all)",
            )));
        }
        "none" => return Ok(config.sandbox_writes_need_approval(false)),
        _ => {}
    }
    let mut known: Vec<String> = agent.tools().iter().map(|t| t.name().to_owned()).collect();
    if sandbox {
        known.extend(SANDBOX_TOOLS.iter().map(|name| (*name).to_owned()));
    }
    let mut names = Vec::new();
    for name in value.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(format!(
                "--approve-tools {value}: give `all`, `none`, or tool names separated by commas"
            ));
        }
        if !known.iter().any(|k| k == name) {
            let listed = if known.is_empty() {
                "the chats have no tools".to_owned()
            } else {
                format!("the tools are {}", known.join(", "))
            };
            return Err(format!(
                "--approve-tools: no tool `{name}` ({listed}); give `all`, `none`, or tool names \
                 separated by commas"
            ));
        }
        names.push(name.to_owned());
    }
    Ok(config.approval_policy(ApprovalPolicy::new(move |context| {
        if names.contains(&context.call.name) {
            Approval::Require(format!(
                "tool `{}` needs approval on this server (--approve-tools)",
                context.call.name
            ))
        } else {
            Approval::Allow
        }
    })))
}

/// Serve until the process ends.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, String> {
    let token = token(&args)?;
    for origin in &args.cors_origin {
        check_origin(origin)?;
    }
    let addrs = resolve_addr(&args.addr).await?;
    // A name that resolves to several addresses must not reach beyond loopback through any.
    if token.is_none()
        && !args.insecure_no_auth
        && let Some(public) = addrs.iter().find(|a| !a.ip().to_canonical().is_loopback())
    {
        return Err(format!(
            "refusing to serve {} ({public}) without authentication: it is not a loopback \
             address, so anyone who can reach it could read every conversation and chat. Set a \
             token with --token-file FILE (or {TOKEN_ENV}), or pass --insecure-no-auth if \
             something in front of the server authenticates",
            args.addr
        ));
    }
    let resolved = model::resolve(args.model.model.as_deref(), args.model.base_url.as_deref())?;
    if resolved.mock {
        eprintln!(
            "agentloop: no model given (--model or AGENTLOOP_MODEL): using the built-in mock model"
        );
    }
    let agent = model::agent(&args.model, &resolved)?;
    let authenticated = token.is_some();
    let mut config = ServerConfig::new(agent.clone())
        .database_at(Database::parse(&args.db))
        .token(token)
        .max_tool_iterations(args.model.max_tool_iterations)
        .answer_lease(std::time::Duration::from_millis(args.answer_lease_ms))
        .insecure_no_auth(args.insecure_no_auth)
        .allowed_hosts(args.allowed_host.iter().cloned())
        .cors_origins(args.cors_origin.iter().cloned());
    if let Some(dir) = &args.sandbox {
        config = config
            .sandbox(dir)
            .protect_paths(args.model.tools.clone())
            .allow_broad_sandbox(args.allow_broad_sandbox);
    }
    if let Some(value) = &args.approve_tools {
        config = approve_tools(config, value, &agent, args.sandbox.is_some())?;
    }
    // Like a listener bound to a host name: the first address that binds.
    let mut last_error = String::new();
    let mut server = None;
    for addr in addrs {
        match agentloop_server::Server::bind(addr, config.clone()).await {
            Ok(bound) => {
                server = Some(bound);
                break;
            }
            Err(e) => last_error = e.to_string(),
        }
    }
    let server = server.ok_or(last_error)?;
    eprintln!("agentloop: database {}", Database::parse(&args.db));
    if authenticated {
        eprintln!("agentloop: auth: bearer token required");
    } else if server.local_addr().ip().to_canonical().is_loopback() {
        eprintln!("agentloop: auth: none (loopback only)");
    } else {
        eprintln!(
            "agentloop: auth: none, on {} (--insecure-no-auth): anyone who can reach it can use the API",
            server.local_addr()
        );
    }
    if !authenticated && let Some(dir) = &args.sandbox {
        eprintln!(
            "agentloop: warning: --sandbox {} without a token: any program or web page allowed to \
             reach this server can make the model write files there",
            dir.display()
        );
    }
    // The first stdout line names the address (useful with --addr 127.0.0.1:0); it comes
    // last, so whoever waits for it has the stderr lines above too.
    println!("serving on http://{}", server.local_addr());
    server.run().await.map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
