//! `agentloop mcp serve`: descriptor tools served over MCP (stdio and streamable HTTP), driven
//! by our own client and by the official Python SDK (PyPI `mcp`, installed by `.ci/run`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agentloop::executor::{McpHttp, McpStdio};
use agentloop::registry::Registry;
use serde_json::{Value, json};

fn tools_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("weather.yaml"),
        r#"name: get_weather
description: Current weather for a city
input_schema:
  type: object
  properties: {city: {type: string}}
  required: [city]
output_schema: {type: object, required: [temp_c]}
mock:
  template: '{"city": {{ city | tojson }}, "temp_c": 18}'
"#,
    )
    .unwrap();
    dir
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentloop")
}

#[tokio::test]
async fn our_client_calls_agentloop_mcp_serve_over_stdio() {
    let dir = tools_dir();
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(McpStdio::new(bin()).args([
            "mcp",
            "serve",
            "--tools",
            dir.path().to_str().unwrap(),
        ]))
        .await
        .unwrap();
    assert_eq!(info.name.as_deref(), Some("agentloop"));
    assert_eq!(info.tools, ["get_weather"]);
    let out = registry
        .call("get_weather", json!({"city": "Lima"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), r#"{"city":"Lima","temp_c":18}"#);
    registry.close().await;
}

/// A running `agentloop mcp serve --addr 127.0.0.1:0`, killed when dropped.
struct Served {
    child: tokio::process::Child,
    url: String,
}

async fn serve_http(dir: &Path) -> Served {
    let mut child = tokio::process::Command::new(bin())
        .args(["mcp", "serve", "--tools"])
        .arg(dir)
        .args(["--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the server starts within 30 s")
        .unwrap()
        .expect("the server prints its URL");
    let url = line
        .strip_prefix("serving MCP on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    Served { child, url }
}

#[tokio::test]
async fn our_client_calls_agentloop_mcp_serve_over_http() {
    let dir = tools_dir();
    let mut served = serve_http(dir.path()).await;
    assert!(
        served.url.starts_with("http://127.0.0.1:"),
        "{}",
        served.url
    );
    let mut registry = Registry::new();
    registry
        .add_mcp_http(McpHttp::new(&served.url))
        .await
        .unwrap();
    let out = registry
        .call("get_weather", json!({"city": "Quito"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), r#"{"city":"Quito","temp_c":18}"#);
    registry.close().await;
    served.child.kill().await.unwrap();
}

#[test]
fn mcp_serve_refuses_an_address_that_is_not_loopback() {
    let dir = tools_dir();
    let output = std::process::Command::new(bin())
        .args(["mcp", "serve", "--tools"])
        .arg(dir.path())
        .args(["--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: --addr 0.0.0.0:0: `agentloop mcp serve` listens on loopback only (127.0.0.1 or [::1]); put a reverse proxy in front to expose it\n"
    );
}

/// A Python with the official MCP SDK: `$AGENTLOOP_MCP_PYTHON`, or `target/pyenv` as `.ci/run`
/// sets it up; `None` with a skip notice when there is none.
fn python_with_mcp() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var_os("AGENTLOOP_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/pyenv/bin/python"));
    let ok = std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        agentloop_testkit::skip(&format!(
            "the Python MCP SDK is not installed at {} (bash .ci/run installs it)",
            python.display()
        ));
    }
    ok.then_some(python)
}

async fn python_client(python: &Path, target: &str, mode: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentloop/tests/mcp/client.py");
    let calls = json!([["get_weather", {"city": "Paris"}]]).to_string();
    let output = tokio::process::Command::new(python)
        .arg(script)
        .args([target, mode, &calls])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("the Python client finishes within a minute")
        .unwrap();
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn expected(protocol: &str) -> Value {
    json!({
        "protocol": protocol,
        "server": "agentloop",
        "tools": [{
            "name": "get_weather",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "outputSchema": {"type": "object", "required": ["temp_c"]},
        }],
        "results": [{
            "content": [{"type": "text", "text": r#"{"city":"Paris","temp_c":18}"#}],
            "structuredContent": {"city": "Paris", "temp_c": 18},
            "isError": false,
        }],
    })
}

#[tokio::test]
async fn the_official_python_client_uses_agentloop_mcp_serve_over_stdio_and_http() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let dir = tools_dir();
    let stdio = format!(
        "stdio:{}",
        json!([bin(), "mcp", "serve", "--tools", dir.path()])
    );
    let served = serve_http(dir.path()).await;
    for target in [stdio.as_str(), served.url.as_str()] {
        for (mode, protocol) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
            assert_eq!(
                python_client(&python, target, mode).await,
                expected(protocol),
                "{target} {mode}"
            );
        }
    }
}
