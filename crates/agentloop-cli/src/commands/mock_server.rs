//! `agentloop mock-server`: the testkit's OpenAI- and Anthropic-compatible servers playing the
//! built-in demo (a tool call, then an answer), for trying agentloop with no API key.

use std::net::SocketAddr;
use std::process::ExitCode;

use agentloop_testkit::demo::demo_turns;
use agentloop_testkit::server::{MockServer, Wire};

use crate::cli::MockServerArgs;

/// Serve until Ctrl-C. OpenAI on `--port`, Anthropic on the next port (or both on free ports
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
    println!("OpenAI-compatible:    {}", openai.base_url());
    println!("Anthropic-compatible: {}", anthropic.base_url());
    println!(
        "try: agentloop run --model openai-compatible/demo --base-url {} \"What's the weather in Paris?\"",
        openai.base_url()
    );
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("could not wait for Ctrl-C: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
