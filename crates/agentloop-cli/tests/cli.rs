//! The `agentloop` binary, process by process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agentloop_testkit::Turn;
use agentloop_testkit::demo::demo_turns;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloop"));
    command.env_remove("AGENTLOOP_MODEL").env("NO_COLOR", "1");
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("the agentloop binary runs")
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// Walk up from the crate to find `shared/` beside the repository (CI puts it there).
fn shared_path() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|p| p.join("shared/conformance/streams"))
        .find(|p| p.is_dir())
}

fn tools_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("weather.json"),
        serde_json::to_vec_pretty(&json!({
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "mock": {"template": "{\"city\": {{ city | tojson }}, \"temperature_c\": 21}"}
        }))
        .unwrap(),
    )
    .unwrap();
    dir
}

fn without_durations(mut doc: Value) -> Value {
    if let Some(steps) = doc["steps"].as_array_mut() {
        for step in steps {
            step.as_object_mut().unwrap().remove("duration_ms");
        }
    }
    doc
}

async fn run_json_against(wire: Wire, model: &str, cost: Value, step_costs: [Value; 2]) {
    let server = MockServer::start(
        wire,
        [
            Turn::tool_call("get_weather", json!({"city": "Lyon"})).with_usage(30, 9),
            Turn::text("It is 21 °C in Lyon.").with_usage(50, 8),
        ],
    )
    .await
    .unwrap();
    let tools = tools_dir();
    let output = tokio::task::spawn_blocking({
        let url = server.base_url();
        let tools = tools.path().to_owned();
        let model = model.to_owned();
        move || {
            run(bin()
                .args([
                    "run",
                    "--json",
                    "--model",
                    &model,
                    "--base-url",
                    &url,
                    "--tools",
                ])
                .arg(&tools)
                .arg("Weather in Lyon?")
                .env("ANTHROPIC_API_KEY", "test-key"))
        }
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        without_durations(stdout_json(&output)),
        json!({
            "text": "It is 21 °C in Lyon.",
            "stop_reason": "end_turn",
            "turns": 2,
            "tool_calls": 1,
            "usage": {"input_tokens": 80, "output_tokens": 17, "cache_read_tokens": 0, "cache_write_tokens": 0},
            "cost": cost,
            "steps": [
                {
                    "index": 0,
                    "text": "",
                    "stop_reason": "tool_use",
                    "tool_calls": [{
                        "id": "call_0_0",
                        "name": "get_weather",
                        "input": {"city": "Lyon"},
                        "outcome": "completed",
                        "result": {"content": "{\"city\":\"Lyon\",\"temperature_c\":21}", "is_error": false}
                    }],
                    "usage": {"input_tokens": 30, "output_tokens": 9, "cache_read_tokens": 0, "cache_write_tokens": 0},
                    "cost": step_costs[0]
                },
                {
                    "index": 1,
                    "text": "It is 21 °C in Lyon.",
                    "stop_reason": "end_turn",
                    "tool_calls": [],
                    "usage": {"input_tokens": 50, "output_tokens": 8, "cache_read_tokens": 0, "cache_write_tokens": 0},
                    "cost": step_costs[1]
                }
            ]
        })
    );
    server.assert_complete();
}

#[tokio::test(flavor = "multi_thread")]
async fn run_json_over_the_openai_wire_with_a_descriptor_tool() {
    // No price table knows a local model: the cost says so instead of claiming zero.
    let unknown = json!({
        "total": null,
        "currency": "USD",
        "unknown": "no price for model test-model, test-model",
    });
    run_json_against(
        Wire::OpenAi,
        "openai-compatible/test-model",
        unknown,
        [Value::Null, Value::Null],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_json_over_the_anthropic_wire_with_a_descriptor_tool() {
    // The built-in table (genai-prices): Claude Sonnet 4.5 at 3 USD per million tokens in and
    // 15 out, so 30 × 3 + 9 × 15 and 50 × 3 + 8 × 15 per million.
    let cost = json!({
        "total": "0.000495",
        "currency": "USD",
        "input": "0.00024",
        "output": "0.000255",
        "cache_read": "0",
        "cache_write": "0",
    });
    run_json_against(
        Wire::Anthropic,
        "anthropic/claude-sonnet-4-5",
        cost,
        [json!("0.000225"), json!("0.00027")],
    )
    .await;
}

#[test]
fn run_without_a_model_uses_the_built_in_mock() {
    let output = run(bin().args(["run", "What's the weather in Paris?"]));
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("using the built-in mock model"), "{stderr}");
    assert!(
        stderr.contains("get_weather"),
        "the tool call is shown: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("It is 18 °C and sunny in Paris."),
        "{stdout}"
    );
}

#[test]
fn unknown_provider_prefix_is_an_error_listing_the_known_ones() {
    let output = run(bin().args(["run", "--model", "nope/x", "hi"]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown provider `nope`"), "{stderr}");
    assert!(stderr.contains("anthropic, openai, xai"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_server_and_run_end_to_end() {
    let mut server = bin()
        .args(["mock-server", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    // The rest of the banner is read too, to the end: a server whose stdout closed early
    // would fail printing it.
    let (first, url) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = first.send(line.rsplit(' ').next().unwrap_or_default().to_owned());
        }
        for _ in lines {}
    });
    let url = tokio::task::spawn_blocking(move || url.recv().unwrap())
        .await
        .unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let output = tokio::task::spawn_blocking(move || {
        run(bin().args([
            "run",
            "--json",
            "--model",
            "openai-compatible/demo",
            "--base-url",
            &url,
            "Weather?",
        ]))
    })
    .await
    .unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = stdout_json(&output);
    assert_eq!(doc["stop_reason"], "end_turn");
    assert_eq!(doc["tool_calls"], 1);
    assert_eq!(doc["steps"][0]["tool_calls"][0]["name"], "get_weather");
    assert_eq!(
        doc["steps"][0]["tool_calls"][0]["input"],
        json!({"city": "Paris"})
    );
    assert_eq!(
        doc["text"],
        demo_turns()[1]
            .items
            .first()
            .map(|i| match i {
                agentloop_testkit::TurnItem::Text(t) => t.clone(),
                _ => String::new(),
            })
            .unwrap()
    );
}

#[test]
fn replay_matches_every_recorded_stream() {
    let Some(streams) = shared_path() else {
        agentloop_testkit::skip("../shared/conformance/streams not found");
        return;
    };
    let expected_dir = repo_path("crates/agentloop/tests/conformance");
    let mut checked = 0;
    let mut folders: Vec<_> = std::fs::read_dir(&streams)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    folders.sort();
    for folder in folders.into_iter().filter(|p| p.is_dir()) {
        let provider = folder.file_name().unwrap().to_string_lossy().into_owned();
        let format = if provider == "anthropic" {
            "anthropic"
        } else {
            "openai"
        };
        let mut files: Vec<_> = std::fs::read_dir(&folder)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for file in files
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        {
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let expected: Value = serde_json::from_slice(
                &std::fs::read(expected_dir.join(&provider).join(format!("{stem}.json"))).unwrap(),
            )
            .unwrap();
            let output = run(bin().args(["replay", "--format", format]).arg(&file));
            let name = format!("{provider}/{stem}");
            if let Some(error) = expected.get("error") {
                assert!(
                    !output.status.success(),
                    "{name}: a stream with an error exits non-zero"
                );
                let stderr = String::from_utf8_lossy(&output.stderr);
                let message = error["message"].as_str().unwrap();
                assert!(
                    stderr.contains(message),
                    "{name}: stderr names the error {message:?}: {stderr}"
                );
                continue;
            }
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let mut want = expected.clone();
            let want = want.as_object_mut().unwrap();
            want.remove("thinking");
            for call in want["tool_calls"].as_array_mut().unwrap() {
                // The expected files say "invalid JSON"; the CLI gives the parser's reason.
                if call.get("input_error").is_some() {
                    call["input_error"] = Value::Null;
                }
            }
            let mut got = stdout_json(&output);
            for call in got["tool_calls"].as_array_mut().unwrap() {
                if call.get("input_error").is_some() {
                    assert!(
                        call["input_error"].as_str().unwrap().contains("EOF"),
                        "{name}: {call}"
                    );
                    call["input_error"] = Value::Null;
                }
            }
            assert_eq!(got, Value::Object(want.clone()), "{name}");
            checked += 1;
        }
    }
    assert!(checked >= 38, "only {checked} streams checked");
}

#[test]
fn replay_gemini_matches_every_recorded_gemini_stream_and_recognises_the_format() {
    let Some(streams) = shared_path() else {
        agentloop_testkit::skip("../shared/conformance/streams not found");
        return;
    };
    let folder = streams.with_file_name("streams-batch2").join("gemini");
    let expected_dir = repo_path("crates/agentloop/tests/conformance/gemini");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 20);
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let expected: Value = serde_json::from_slice(
            &std::fs::read(expected_dir.join(format!("{stem}.json"))).unwrap(),
        )
        .unwrap();
        for args in [&["replay", "--format", "gemini"][..], &["replay"][..]] {
            let output = run(bin().args(args).arg(&file));
            let name = format!("gemini/{stem} {args:?}");
            if let Some(error) = expected.get("error") {
                assert!(!output.status.success(), "{name}: exits non-zero");
                let stderr = String::from_utf8_lossy(&output.stderr);
                let message = error["message"].as_str().unwrap();
                assert!(stderr.contains(message), "{name}: {stderr}");
                continue;
            }
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let got = stdout_json(&output);
            assert_eq!(got["text"], expected["text"], "{name}");
            assert_eq!(got["tool_calls"], expected["tool_calls"], "{name}");
            assert_eq!(got["stop_reason"], expected["stop_reason"], "{name}");
            assert_eq!(
                got["usage"]["input_tokens"], expected["usage"]["input_tokens"],
                "{name}"
            );
            assert_eq!(
                got["usage"]["output_tokens"], expected["usage"]["output_tokens"],
                "{name}"
            );
        }
    }
}

#[test]
fn replay_openai_responses_matches_every_recorded_stream_and_recognises_the_format() {
    let Some(streams) = shared_path() else {
        agentloop_testkit::skip("../shared/conformance/streams not found");
        return;
    };
    let folder = streams
        .with_file_name("streams-batch2")
        .join("openai-responses");
    let expected_dir = repo_path("crates/agentloop/tests/conformance/openai-responses");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 19);
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let expected: Value = serde_json::from_slice(
            &std::fs::read(expected_dir.join(format!("{stem}.json"))).unwrap(),
        )
        .unwrap();
        for args in [
            &["replay", "--format", "openai-responses"][..],
            &["replay"][..],
        ] {
            let output = run(bin().args(args).arg(&file));
            let name = format!("openai-responses/{stem} {args:?}");
            if let Some(error) = expected.get("error") {
                assert!(!output.status.success(), "{name}: exits non-zero");
                let stderr = String::from_utf8_lossy(&output.stderr);
                let message = error["message"].as_str().unwrap();
                assert!(stderr.contains(message), "{name}: {stderr}");
                continue;
            }
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let mut got = stdout_json(&output);
            // The CLI says why arguments did not parse; the expectations only that they did not.
            for call in got["tool_calls"].as_array_mut().unwrap() {
                if call.get("input_error").is_some() {
                    call["input_error"] = "invalid JSON".into();
                }
            }
            assert_eq!(got["text"], expected["text"], "{name}");
            assert_eq!(got["tool_calls"], expected["tool_calls"], "{name}");
            assert_eq!(got["stop_reason"], expected["stop_reason"], "{name}");
            assert_eq!(
                got["usage"]["input_tokens"], expected["usage"]["input_tokens"],
                "{name}"
            );
            assert_eq!(
                got["usage"]["output_tokens"], expected["usage"]["output_tokens"],
                "{name}"
            );
        }
    }
}

#[test]
fn replay_bedrock_matches_every_recorded_bedrock_stream_and_recognises_the_format() {
    let Some(streams) = shared_path() else {
        agentloop_testkit::skip("../shared/conformance/streams not found");
        return;
    };
    let folder = streams.with_file_name("streams-batch2").join("bedrock");
    let expected_dir = repo_path("crates/agentloop/tests/conformance/bedrock");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    // The binary bodies and their decoded copies (one recording is kept decoded only).
    assert_eq!(files.len(), 13);
    for file in files {
        let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
        let stem = file_name
            .trim_end_matches(".eventstream")
            .trim_end_matches(".decoded.jsonl");
        let expected: Value = serde_json::from_slice(
            &std::fs::read(expected_dir.join(format!("{stem}.json"))).unwrap(),
        )
        .unwrap();
        for args in [&["replay", "--format", "bedrock"][..], &["replay"][..]] {
            let output = run(bin().args(args).arg(&file));
            let name = format!("bedrock/{file_name} {args:?}");
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let got = stdout_json(&output);
            assert_eq!(got["text"], expected["text"], "{name}");
            assert_eq!(got["tool_calls"], expected["tool_calls"], "{name}");
            assert_eq!(got["stop_reason"], expected["stop_reason"], "{name}");
            assert_eq!(
                got["usage"]["input_tokens"], expected["usage"]["input_tokens"],
                "{name}"
            );
            assert_eq!(
                got["usage"]["output_tokens"], expected["usage"]["output_tokens"],
                "{name}"
            );
        }
    }
}

#[test]
fn replay_reads_stdin_with_multi_line_data_and_parallel_calls() {
    // Multi-line `data:` joins with a newline (valid JSON whitespace); CRLF line ends; the two
    // calls' argument fragments interleave.
    let stream = concat!(
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\r\n",
        "data: \"content\":\"Checking \"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\"\"}}]}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"y\\\":\"}}]}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"2}\"}}]}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\r\n",
        "data: \"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\r\n\r\n",
        "data: [DONE]\r\n\r\n",
    );
    let mut child = bin()
        .args(["replay", "--format", "openai", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout_json(&output),
        json!({
            "text": "Checking ",
            "tool_calls": [
                {"id": "a", "name": "f", "input": {"x": 1}},
                {"id": "b", "name": "g", "input": {"y": 2}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 7, "output_tokens": 3}
        })
    );
}

#[test]
fn tools_validate_and_list() {
    let good = repo_path("crates/agentloop/tests/fixtures/tools/good");
    let output = run(bin().args(["tools", "validate"]).arg(&good));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("ok: "));
    let output = run(bin().args(["tools", "list"]).arg(&good));
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("get_weather\tmock\t"));

    let bad = repo_path("crates/agentloop/tests/fixtures/tools/bad");
    let output = run(bin().args(["tools", "validate"]).arg(&bad));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wrong_type.yaml:4:13: tool `slow_tool`: timeout_ms: invalid type"),
        "{stderr}"
    );
    assert!(stderr.contains("syntax.json"), "{stderr}");
    let files = std::fs::read_dir(&bad).unwrap().count();
    assert!(
        stderr.contains(&format!("{files} problem(s)")),
        "every bad file is reported: {stderr}"
    );

    let dup = repo_path("crates/agentloop/tests/fixtures/tools/dup");
    let output = run(bin().args(["tools", "validate"]).arg(&dup));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("duplicate tool name"));
}

/// A pack file and a pack directory (whose `pack.yaml` gives every file under it its defaults)
/// validate and list as one set of tools.
#[test]
fn tools_validate_and_list_packs() {
    let fixtures = repo_path("crates/agentloop/tests/fixtures/tools/promptkit");
    let output = run(bin()
        .args(["tools", "validate"])
        .arg(fixtures.join("pack_dir")));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "ok: 3 tool(s) in 3 file(s): forecast, weather_alerts, current_weather\n"
    );
    let output = run(bin().args(["tools", "list"]).arg(fixtures.join("pack_dir")));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "current_weather\tmock\tCurrent weather for a city\n\
         forecast\tmock\tTomorrow's forecast for a city\n\
         weather_alerts\thttp\tActive weather alerts\n"
    );
    let output = run(bin()
        .args(["tools", "list"])
        .arg(fixtures.join("pack.yaml")));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "cancel_order\thttp\tCancel an order\n\
         lookup_order\thttp\tLook up an order\n\
         store_hours\tmock\tOpening hours of the store\n"
    );
}

#[test]
fn chat_through_stdin_keeps_history_and_clears() {
    let mut child = bin()
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Weather in Paris?\nAnd tomorrow?\n/history\n/clear\n/history\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Two answers, then a history of 2 turns × (prompt, tool call, tool result, answer).
    assert_eq!(
        stdout.matches("It is 18 °C and sunny in Paris.").count(),
        2 + 2,
        "{stdout}"
    );
    assert!(stdout.contains("user: Weather in Paris?"), "{stdout}");
    assert!(stdout.contains("user: And tomorrow?"), "{stdout}");
    assert!(
        stdout.contains("[tool call get_weather {\"city\":\"Paris\"}]"),
        "{stdout}"
    );
    let after_clear = stdout.split("(conversation cleared)").nth(1).unwrap();
    assert!(after_clear.contains("(no messages)"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_a_chat_over_sse() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = bin()
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("chat.db"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let line = std::io::BufReader::new(stdout)
            .lines()
            .next()
            .unwrap()
            .unwrap();
        line.trim_start_matches("serving on ").to_owned()
    })
    .await
    .unwrap();
    let body = reqwest::Client::new()
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Weather in Paris?"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    let events: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"), "{body}");
    assert!(events.contains(&"tool_call_start"), "{body}");
    assert!(events.contains(&"tool_call_result"), "{body}");
    assert_eq!(events.last(), Some(&"message_end"), "{body}");
    assert!(body.contains("It is 18"), "{body}");
}

/// Against the real model (see crates/agentloop/tests/real_model.rs); skipped without it.
#[test]
fn real_model_run_json_with_a_mock_descriptor_tool() {
    let Some(url) = std::env::var("AGENTLOOP_REAL_MODEL_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        agentloop_testkit::skip(
            "real-model CLI test: AGENTLOOP_REAL_MODEL_URL is not set (CI runs it in its real-model stage)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("weather.yaml"),
        "name: get_weather\ndescription: Get the current weather for a city\ninput_schema:\n  type: object\n  properties:\n    city: {type: string}\n  required: [city]\nmock:\n  response: {temperature_c: 18}\n",
    )
    .unwrap();
    let output = run(bin()
        .args([
            "run",
            "--json",
            "--model",
            "llamacpp/gemma",
            "--temperature",
            "0",
            "--max-tool-iterations",
            "2",
            "--base-url",
            &url,
            "--tools",
        ])
        .arg(dir.path())
        .arg("What is the weather in Paris? Use the tool."));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = stdout_json(&output);
    assert_eq!(doc["stop_reason"], "end_turn", "{doc}");
    assert_eq!(doc["tool_calls"], 1, "{doc}");
    let call = &doc["steps"][0]["tool_calls"][0];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["input"]["city"], "Paris");
    assert_eq!(call["outcome"], "completed");
    assert_eq!(call["result"]["content"], "{\"temperature_c\":18}");
    assert!(doc["text"].as_str().unwrap().contains("18"), "{doc}");
    assert!(doc["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

// ---- serve: authentication, hosts and origins (issue 38, items 1 and 2) ----

/// Run a command that should exit quickly; kill it (and fail) if it is still running after
/// `secs` seconds, e.g. a server that started when it should have refused to.
fn run_bounded(command: &mut Command, secs: u64) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agentloop binary runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "still running after {secs} s; stdout: {}\nstderr: {}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `agentloop serve` with these arguments, an in-temp-dir database and no token in the
/// environment.
fn serve_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = bin();
    command
        .env_remove("AGENTLOOP_TOKEN")
        .arg("serve")
        .arg("--db")
        .arg(dir.join("chat.db"))
        .args(args);
    command
}

/// A running `agentloop serve`: its URL, and its stderr once it is stopped.
struct Served {
    child: std::process::Child,
    url: String,
}

impl Served {
    async fn start(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout).lines().next()
        })
        .await
        .unwrap();
        let Some(Ok(line)) = line else {
            let output = child.wait_with_output().unwrap();
            panic!(
                "the server did not start: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let url = line.trim_start_matches("serving on ").to_owned();
        Self { child, url }
    }

    /// Stop it and return what it wrote on stderr.
    fn stop(mut self) -> String {
        self.child.kill().unwrap();
        let output = self.child.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}

fn failure_stderr(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "expected a failure; stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn serve_refuses_an_empty_token() {
    let dir = tempfile::tempdir().unwrap();
    for token in ["", "  "] {
        let output = run_bounded(
            &mut serve_command(dir.path(), &["--addr", "127.0.0.1:0", "--token", token]),
            20,
        );
        let stderr = failure_stderr(&output);
        assert!(stderr.contains("--token"), "{stderr}");
        assert!(stderr.contains("empty"), "{stderr}");
    }
    let mut command = serve_command(dir.path(), &["--addr", "127.0.0.1:0"]);
    command.env("AGENTLOOP_TOKEN", "");
    let stderr = failure_stderr(&run_bounded(&mut command, 20));
    assert!(stderr.contains("AGENTLOOP_TOKEN"), "{stderr}");
    assert!(stderr.contains("empty"), "{stderr}");

    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    let mut command = serve_command(dir.path(), &["--addr", "127.0.0.1:0", "--token-file"]);
    command.arg(&empty);
    let stderr = failure_stderr(&run_bounded(&mut command, 20));
    assert!(stderr.contains("empty-token"), "{stderr}");
    assert!(stderr.contains("empty"), "{stderr}");

    let mut command = serve_command(dir.path(), &["--addr", "127.0.0.1:0", "--token-file"]);
    command.arg(dir.path().join("missing"));
    let stderr = failure_stderr(&run_bounded(&mut command, 20));
    assert!(stderr.contains("missing"), "{stderr}");
    // No empty database is left behind by a refused start.
    assert!(!dir.path().join("chat.db").exists());

    let output = run_bounded(
        &mut serve_command(
            dir.path(),
            &["--addr", "127.0.0.1:0", "--cors-origin", "app.example"],
        ),
        20,
    );
    let stderr = failure_stderr(&output);
    assert!(stderr.contains("--cors-origin app.example"), "{stderr}");

    let mut both = serve_command(dir.path(), &["--token", "a", "--token-file"]);
    both.arg(&empty);
    let stderr = failure_stderr(&run_bounded(&mut both, 20));
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_reads_the_token_from_a_file_and_says_how_it_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret-from-file\n").unwrap();
    let mut command = serve_command(dir.path(), &["--addr", "127.0.0.1:0", "--token-file"]);
    command.arg(&file);
    let served = Served::start(command).await;
    let url = format!("{}/v1/conversations", served.url);
    let anonymous = reqwest::get(&url).await.unwrap().status();
    let authorized = reqwest::Client::new()
        .get(&url)
        .bearer_auth("s3cret-from-file")
        .send()
        .await
        .unwrap()
        .status();
    let stderr = served.stop();
    assert_eq!(anonymous, 401);
    assert_eq!(authorized, 200);
    assert!(
        stderr.contains("agentloop: auth: bearer token required"),
        "{stderr}"
    );

    let served = Served::start(serve_command(dir.path(), &["--addr", "127.0.0.1:0"])).await;
    let stderr = served.stop();
    assert!(
        stderr.contains("agentloop: auth: none (loopback only)"),
        "{stderr}"
    );
}

#[test]
fn serve_refuses_a_public_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    // 192.0.2.1 (TEST-NET-1) is no address of this machine: if the check did not come first,
    // the bind would fail with another message (and nothing ever listens beyond loopback).
    let output = run_bounded(
        &mut serve_command(dir.path(), &["--addr", "192.0.2.1:8080"]),
        20,
    );
    let stderr = failure_stderr(&output);
    assert!(stderr.contains("192.0.2.1"), "{stderr}");
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
    assert!(stderr.contains("--token-file"), "{stderr}");

    let output = run_bounded(
        &mut serve_command(
            dir.path(),
            &["--addr", "192.0.2.1:8080", "--insecure-no-auth"],
        ),
        20,
    );
    let stderr = failure_stderr(&output);
    assert!(stderr.contains("could not serve"), "{stderr}");
    assert!(!stderr.contains("--insecure-no-auth"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_resolves_host_names_and_warns_about_an_open_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = tempfile::tempdir().unwrap();
    let mut command = serve_command(dir.path(), &["--addr", "localhost:0", "--sandbox"]);
    command.arg(sandbox.path());
    let served = Served::start(command).await;
    let url = served.url.clone();
    let status = reqwest::get(format!("{url}/v1/conversations"))
        .await
        .unwrap()
        .status();
    let stderr = served.stop();
    assert!(
        url.starts_with("http://127.0.0.1:") || url.starts_with("http://[::1]:"),
        "{url}"
    );
    assert_eq!(status, 200);
    assert!(stderr.contains("warning"), "{stderr}");
    assert!(stderr.contains("--sandbox"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_checks_hosts_and_origins_from_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(serve_command(
        dir.path(),
        &[
            "--addr",
            "127.0.0.1:0",
            "--allowed-host",
            "chat.internal",
            "--cors-origin",
            "http://app.example:3000",
        ],
    ))
    .await;
    let url = format!("{}/v1/conversations", served.url);
    let client = reqwest::Client::new();
    let get = |host: &'static str, origin: Option<&'static str>| {
        let mut request = client.get(&url).header("host", host);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let evil_host = get("evil.example", None).await.unwrap().status();
    let allowed_host = get("chat.internal", None).await.unwrap().status();
    let evil_origin = get("localhost", Some("http://evil.example"))
        .await
        .unwrap()
        .status();
    let listed = get("localhost", Some("http://app.example:3000"))
        .await
        .unwrap();
    let _ = served.stop();
    assert_eq!(evil_host, 403);
    assert_eq!(allowed_host, 200);
    assert_eq!(evil_origin, 403);
    assert_eq!(listed.status(), 200);
    assert_eq!(
        listed.headers()["access-control-allow-origin"],
        "http://app.example:3000"
    );
}

/// `examples/tools` is the directory the README points at: with the built-in mock, the run
/// calls the tool the prompt is about, with arguments from its schema's examples, and answers
/// with what the tool returned.
#[test]
fn run_with_the_example_tools_and_the_mock_calls_the_matching_tool() {
    let output = run(bin()
        .args(["run", "--json", "--tools"])
        .arg(repo_path("examples/tools"))
        .arg("What's the weather in Lyon?"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = without_durations(stdout_json(&output));
    let result = r#"{"city":"Lyon","temperature_c":21,"conditions":"sunny"}"#;
    assert_eq!(
        doc["steps"][0]["tool_calls"],
        json!([{
            "id": "call_0_0",
            "name": "current_weather",
            "input": {"city": "Lyon"},
            "outcome": "completed",
            "result": {"content": result, "is_error": false}
        }])
    );
    assert_eq!(
        doc["text"],
        format!(
            "current_weather returned {result}. (This answer comes from agentloop's built-in \
             mock model: pass --model to talk to a real one.)"
        )
    );
    assert_eq!(doc["tool_calls"], 1);
}

/// The same run as a person sees it: the call and its result on stderr, the answer on stdout.
#[test]
fn run_with_the_example_tools_shows_the_tool_call() {
    let output = run(bin()
        .args(["run", "--tools"])
        .arg(repo_path("examples/tools"))
        .arg("Convert 100 EUR to USD"));
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"tool: convert_currency {"amount":100,"from":"EUR","to":"USD"}"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"✓ convert_currency → {"amount":108.0,"currency":"USD"}"#),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with(r#"convert_currency returned {"amount":108.0,"currency":"USD"}."#),
        "{stdout}"
    );
}

/// `--max-cost` stops the run before the call that would pass the budget: the first step
/// cost 0.000225 USD (see above) and the next request's projected input passes 0.0003.
#[tokio::test(flavor = "multi_thread")]
async fn run_max_cost_stops_before_the_call_that_would_pass_it() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("get_weather", json!({"city": "Lyon"})).with_usage(30, 9),
            Turn::text("never asked").with_usage(50, 8),
        ],
    )
    .await
    .unwrap();
    let tools = tools_dir();
    let output = tokio::task::spawn_blocking({
        let url = server.base_url();
        let tools = tools.path().to_owned();
        move || {
            run(bin()
                .args([
                    "run",
                    "--json",
                    "--max-cost",
                    "0.0003",
                    "--model",
                    "anthropic/claude-sonnet-4-5",
                    "--base-url",
                    &url,
                    "--tools",
                ])
                .arg(&tools)
                .arg("Weather in Lyon?")
                .env("ANTHROPIC_API_KEY", "test-key"))
        }
    })
    .await
    .unwrap();
    // A limit stopped the run: exit code 3.
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc = stdout_json(&output);
    assert_eq!(doc["stop_reason"], "cost_budget");
    assert_eq!(doc["turns"], 1);
    assert_eq!(doc["cost"]["total"], "0.000225");
    assert_eq!(server.calls(), 1);

    let refused = run(bin().args(["run", "--max-cost=-1", "hi"]));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("must not be negative"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// `--context-window` sets the run's context policy: a window too small for even the first
/// request ends the run with the error that says so, before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn run_context_window_refuses_a_request_that_cannot_fit() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("never asked")])
        .await
        .unwrap();
    let tools = tools_dir();
    let output = tokio::task::spawn_blocking({
        let url = server.base_url();
        let tools = tools.path().to_owned();
        move || {
            run(bin()
                .args([
                    "run",
                    "--context-window",
                    "4150",
                    "--model",
                    "openai-compatible/test-model",
                    "--base-url",
                    &url,
                    "--tools",
                ])
                .arg(&tools)
                .arg("Weather in Lyon?"))
        }
    })
    .await
    .unwrap();
    // 4,150 tokens less the 4,096 kept for the answer leave too little for the tool schema.
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("context window leaves 54 of its 4150"),
        "{stderr}"
    );
    assert_eq!(server.calls(), 0);
}

/// `run --output-schema FILE`: the answer is asked for in the schema (OpenAI's
/// `response_format`), an invalid one goes back with its pointer errors, and stdout holds only
/// the checked JSON; with `--json` it is the document's `output`; answers that never pass end
/// with exit code 3 (the retry budget is a limit).
#[tokio::test(flavor = "multi_thread")]
async fn run_output_schema_prints_the_checked_json() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("report.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"city": {"type": "string"},
            "temp_c": {"type": "integer"}}, "required": ["city", "temp_c"]}"#,
    )
    .unwrap();
    let run_with = |turns: Vec<Turn>, json: bool| {
        let schema = schema.clone();
        async move {
            let server = MockServer::start(Wire::OpenAi, turns).await.unwrap();
            let url = server.base_url();
            let output = tokio::task::spawn_blocking(move || {
                let mut command = bin();
                command.args(["run", "--model", "openai-compatible/m", "--base-url", &url]);
                if json {
                    command.arg("--json");
                }
                run(command
                    .arg("--output-schema")
                    .arg(&schema)
                    .arg("Weather in Lyon?"))
            })
            .await
            .unwrap();
            (server, output)
        }
    };
    let answers = || {
        vec![
            Turn::text(r#"{"city": "Lyon"}"#),
            Turn::text(r#"{"city": "Lyon", "temp_c": 21}"#),
        ]
    };
    let (server, output) = run_with(answers(), false).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout_json(&output), json!({"city": "Lyon", "temp_c": 21}));
    let requests = server.requests();
    assert_eq!(
        requests[0].body["response_format"]["json_schema"]["schema"]["additionalProperties"],
        json!(false)
    );
    let retry = requests[1].body["messages"].as_array().unwrap();
    assert!(
        retry.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("- /: \"temp_c\" is a required property"),
        "{retry:?}"
    );

    let (_, output) = run_with(answers(), true).await;
    assert!(output.status.success());
    let doc = stdout_json(&output);
    assert_eq!(doc["output"], json!({"city": "Lyon", "temp_c": 21}));
    assert_eq!(doc["stop_reason"], "end_turn");

    let never = (0..3)
        .map(|i| Turn::text(format!(r#"{{"city": "Lyon", "try": {i}}}"#)))
        .collect();
    let (_, output) = run_with(never, true).await;
    assert_eq!(output.status.code(), Some(3));
    let doc = stdout_json(&output);
    assert_eq!(doc["output"], Value::Null);
    assert_eq!(doc["stop_reason"], "invalid_output");
    assert_eq!(doc["error"]["kind"], "invalid_output");
}
