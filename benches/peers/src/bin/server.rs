//! The benchmark's server: the testkit's pre-rendered OpenAI-compatible server playing the
//! workload (a `get_weather` call for Paris with its arguments in 8 fragments, then a 155-word
//! answer in 60 deltas plus usage). Prints `listening on http://ADDR/v1` once it accepts
//! connections, then serves until killed.
//!
//! `server --addr 127.0.0.1:8080 --write-mode event|body`

use std::net::SocketAddr;
use std::process::ExitCode;

use agentloop_peers::workload::{
    ARGUMENT_FRAGMENTS, ARGUMENTS, FINAL_TEXT, TEXT_DELTAS, TOOL_NAME,
};
use agentloop_testkit::{MockServer, Turn, Wire, WriteMode};

fn usage(problem: &str) -> ExitCode {
    eprintln!("server: {problem}\nusage: server [--addr 127.0.0.1:0] [--write-mode event|body]");
    ExitCode::from(2)
}

/// The two turns of one run, in the order the server plays them.
fn turns() -> [Turn; 2] {
    [
        Turn::tool_call_raw(TOOL_NAME, ARGUMENTS)
            .with_argument_pieces(ARGUMENT_FRAGMENTS)
            .with_usage(120, 18),
        Turn::text(FINAL_TEXT)
            .with_text_pieces(TEXT_DELTAS)
            .with_usage(160, 210),
    ]
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut addr: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut mode = WriteMode::PerEvent;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--addr", Some(value)) => match value.parse() {
                Ok(value) => addr = value,
                Err(e) => return usage(&format!("--addr {value:?}: {e}")),
            },
            ("--write-mode", Some(value)) => match value.as_str() {
                "event" => mode = WriteMode::PerEvent,
                "body" => mode = WriteMode::WholeBody,
                other => return usage(&format!("unknown write mode {other:?}")),
            },
            (other, _) => return usage(&format!("unknown or incomplete argument {other:?}")),
        }
    }
    let server = match MockServer::builder(Wire::OpenAi)
        .turns(turns())
        .write_mode(mode)
        .addr(addr)
        .start_prerendered()
        .await
    {
        Ok(server) => server,
        Err(e) => {
            eprintln!("server: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {}", server.base_url());
    std::future::pending::<()>().await;
    ExitCode::SUCCESS
}
