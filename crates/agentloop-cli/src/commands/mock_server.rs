//! `agentloop mock-server`: the testkit's OpenAI- and Anthropic-compatible servers playing the
//! built-in demo (a tool call, then an answer), for trying agentloop with no API key.
//!
//! The demo calls `get_weather`, a tool the client must have: the server writes its descriptor
//! (a mock tool) to a temporary directory, names it with `--tools` in the printed `try:` line,
//! and removes it when it stops.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use agentloop_testkit::demo::{DEMO_TOOL, demo_turns};
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::json;

use crate::cli::MockServerArgs;

/// The demo tool as a descriptor file: the same answer as the built-in mock model's tool.
fn write_demo_tool(dir: &Path) -> Result<(), String> {
    let descriptor = json!({
        "name": DEMO_TOOL,
        "description": "Current weather for a city (demo data)",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"]
        },
        "mock": {
            "template": "{\"city\": {{ city | tojson }}, \"temperature_c\": 18, \"conditions\": \"sunny\"}"
        }
    });
    let path = dir.join(format!("{DEMO_TOOL}.json"));
    let text = serde_json::to_string_pretty(&descriptor).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("could not write {}: {e}", path.display()))
}

/// `word` as one shell word.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Until Ctrl-C or (on Unix) SIGTERM.
pub async fn stopped() -> Result<(), String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| format!("could not wait for SIGTERM: {e}"))?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.map_err(|e| format!("could not wait for Ctrl-C: {e}")),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
            .await
            .map_err(|e| format!("could not wait for Ctrl-C: {e}"))
    }
}

/// Serve until stopped. OpenAI on `--port`, Anthropic on the next port (or both on free ports
/// with `--port 0`).
pub async fn serve(args: &MockServerArgs) -> Result<ExitCode, String> {
    let openai_addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let anthropic_port = if args.port == 0 {
        0
    } else {
        args.port.wrapping_add(1)
    };
    let anthropic_addr = SocketAddr::from(([127, 0, 0, 1], anthropic_port));
    let openai = MockServer::builder(Wire::OpenAi)
        .turns(demo_turns())
        .addr(openai_addr)
        .start_prerendered()
        .await
        .map_err(|e| format!("could not listen on {openai_addr}: {e}"))?;
    let anthropic = MockServer::builder(Wire::Anthropic)
        .turns(demo_turns())
        .addr(anthropic_addr)
        .start_prerendered()
        .await
        .map_err(|e| format!("could not listen on {anthropic_addr}: {e}"))?;
    let tools = tempfile::Builder::new()
        .prefix("agentloop-mock-tools-")
        .tempdir()
        .map_err(|e| format!("could not create a directory for the demo tool: {e}"))?;
    write_demo_tool(tools.path())?;
    let tools_arg = shell_word(&tools.path().to_string_lossy());
    // The banner is for whoever reads it; a reader that went away (`| head -1`) must not
    // take the servers down, so write errors are ignored rather than panicking in `println!`.
    let banner = format!(
        "OpenAI-compatible:    {openai}\n\
         Anthropic-compatible: {anthropic}\n\
         demo tool:            {tools_arg} (removed when this server stops)\n\
         try: agentloop run --model openai-compatible/demo --base-url {openai} --tools {tools_arg} \"What's the weather in Paris?\"\n",
        openai = openai.base_url(),
        anthropic = anthropic.base_url(),
    );
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = stdout
            .write_all(banner.as_bytes())
            .and_then(|()| stdout.flush());
    }
    stopped().await?;
    tools
        .close()
        .map_err(|e| format!("could not remove the demo tool's directory: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
