//! `agentloop run` with a tool that needs approval: refused without `--approve` or `--yes`,
//! approved by `--yes`, and asked y/n/e(dit) on standard input with `--approve`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloop"));
    command.env_remove("AGENTLOOP_MODEL").env("NO_COLOR", "1");
    command
}

/// A tools directory with one tool, `deploy`, whose every call needs approval (the built-in
/// mock model calls it with `{"env": "prod"}`, its schema's example).
fn tools_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("deploy.json"),
        serde_json::to_vec_pretty(&json!({
            "name": "deploy",
            "description": "Deploy the service",
            "needs_approval": true,
            "input_schema": {
                "type": "object",
                "properties": {"env": {"type": "string", "examples": ["prod"]}},
                "required": ["env"]
            },
            "mock": {"template": "deployed to {{ env }}"}
        }))
        .unwrap(),
    )
    .unwrap();
    dir
}

/// `agentloop run --json --tools DIR [flags] "Deploy"`, with `stdin` as standard input.
fn run(flags: &[&str], stdin: &str) -> Output {
    let tools = tools_dir();
    let mut child = bin()
        .args(["run", "--json", "--tools"])
        .arg(tools.path())
        .args(flags)
        .arg("Deploy the service")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agentloop binary runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn doc(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The deploy call's outcome and result text.
fn deploy_call(doc: &Value) -> (Value, Value, Value) {
    let call = &doc["steps"][0]["tool_calls"][0];
    assert_eq!(call["name"], "deploy", "{doc}");
    (
        call["input"].clone(),
        call["outcome"].clone(),
        call["result"]["content"].clone(),
    )
}

#[test]
fn without_approve_or_yes_a_call_needing_approval_is_refused() {
    let output = run(&[], "");
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let stderr = stderr(&output);
    assert!(
        stderr.contains(
            "error: tool call `call_0_0` to `deploy` needs approval (tool `deploy` needs approval): \
             run with --approve to be asked, or --yes to approve every call"
        ),
        "{stderr}"
    );
    let doc = doc(&output);
    assert_eq!(doc["stop_reason"], "awaiting_approval");
    assert_eq!(doc["tool_calls"], 0, "the tool did not run");
}

#[test]
fn yes_approves_every_call() {
    let output = run(&["--yes"], "");
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = doc(&output);
    assert_eq!(doc["stop_reason"], "end_turn");
    assert_eq!(
        deploy_call(&doc),
        (
            json!({"env": "prod"}),
            json!("completed"),
            json!("deployed to prod")
        )
    );
    assert!(stderr(&output).contains("approved (--yes): deploy {\"env\":\"prod\"}"));
}

#[test]
fn approve_asks_and_y_runs_the_call() {
    let output = run(&["--approve"], "y\n");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        deploy_call(&doc(&output)),
        (
            json!({"env": "prod"}),
            json!("completed"),
            json!("deployed to prod")
        )
    );
    let stderr = stderr(&output);
    assert!(
        stderr
            .contains("approve deploy {\"env\":\"prod\"}? (tool `deploy` needs approval) [y/n/e] "),
        "{stderr}"
    );
}

#[test]
fn approve_n_denies_and_the_model_is_told() {
    let output = run(&["--approve"], "n\n");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        deploy_call(&doc(&output)),
        (
            json!({"env": "prod"}),
            json!("denied"),
            json!("Error: the call to `deploy` was denied: the user declined it")
        )
    );
}

#[test]
fn approve_e_edits_the_input_and_asks_again_after_an_invalid_edit() {
    let output = run(
        &["--approve"],
        "e\n{\"env\": 5}\ne\n{\"env\": \"staging\"}\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        deploy_call(&doc(&output)),
        (
            json!({"env": "staging"}),
            json!("completed"),
            json!("deployed to staging")
        )
    );
    let stderr = stderr(&output);
    assert!(stderr.contains("new input for deploy (JSON): "), "{stderr}");
    assert!(
        stderr.contains("that input does not fit `deploy`: /env:"),
        "{stderr}"
    );
}

#[test]
fn approve_with_no_answer_refuses_the_call() {
    let output = run(&["--approve"], "");
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no answer (standard input ended)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn approve_and_yes_are_exclusive_and_approve_needs_the_prompt_as_an_argument() {
    let output = run(&["--approve", "--yes"], "");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let tools = tools_dir();
    let output = bin()
        .args(["run", "--approve", "--tools"])
        .arg(tools.path())
        .arg("-")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("--approve reads its answers from standard input"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_live_display_shows_the_call_once_and_what_waits_for_approval() {
    let tools = tools_dir();
    let mut child = bin()
        .args(["run", "--approve", "--tools"])
        .arg(tools.path())
        .arg("Deploy the service")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stderr = stderr(&output);
    assert_eq!(stderr.matches("tool: deploy").count(), 1, "{stderr}");
    assert!(
        stderr.contains(
            "tool: deploy {\"env\":\"prod\"}\n? deploy {\"env\":\"prod\"} needs approval: tool `deploy` needs approval\n"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("✓ deploy → deployed to prod (completed)"),
        "{stderr}"
    );
}

#[test]
fn chat_asks_on_its_input_and_goes_on_with_the_answer() {
    let tools = tools_dir();
    let mut child = bin()
        .args(["chat", "--tools"])
        .arg(tools.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Deploy the service\nn\nDeploy it again\ny\n/history\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stderr = stderr(&output);
    assert_eq!(
        stderr
            .matches("approve deploy {\"env\":\"prod\"}? (tool `deploy` needs approval) [y/n/e] ")
            .count(),
        2,
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout
            .contains("[tool result Error: the call to `deploy` was denied: the user declined it]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[tool result deployed to prod]"),
        "{stdout}"
    );
}

/// `--output-schema` with `--approve`: the typed run pauses for the deploy call, and after the
/// "y" it goes on as a typed run (an invalid answer goes back with its pointer errors) and
/// prints the checked JSON as the document's `output`.
#[tokio::test(flavor = "multi_thread")]
async fn a_typed_run_pauses_for_approval_and_ends_with_the_checked_json() {
    use agentloop_testkit::Turn;
    use agentloop_testkit::server::{MockServer, Wire};
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("deploy", json!({"env": "prod"})),
            Turn::text(r#"{"deployed": "yes"}"#),
            Turn::text(r#"{"deployed": true}"#),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("deployed.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"deployed": {"type": "boolean"}},
            "required": ["deployed"]}"#,
    )
    .unwrap();
    let url = server.base_url();
    let schema = schema.to_str().unwrap().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        let flags = [
            "--model",
            "openai-compatible/m",
            "--base-url",
            &url,
            "--output-schema",
            &schema,
            "--approve",
        ];
        run(&flags, "y\n")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let doc = doc(&output);
    assert_eq!(doc["output"], json!({"deployed": true}), "{doc}");
    assert_eq!(doc["stop_reason"], "end_turn");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // The resumed run still asks for the schema and sends the pointer errors back.
    assert_eq!(
        requests[2].body["response_format"]["json_schema"]["schema"]["required"],
        json!(["deployed"])
    );
    let retry = requests[2].body["messages"].as_array().unwrap();
    assert_eq!(
        retry.last().unwrap()["content"],
        "Error: your answer is not a valid `final_answer`:\n\
         - /deployed: \"yes\" is not of type \"boolean\"\n\
         Fix it and answer again (retry 1 of 2)."
    );
}
