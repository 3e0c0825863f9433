//! The `agentloop` binary as a new user meets it: the printed `try:` line, error messages that
//! name flags, format detection in `replay`, `tools` on files, exit codes, and what a terminal
//! (and only a terminal) gets. Each test runs the built binary.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloop"));
    command
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("the agentloop binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Run with `stdin` as standard input.
fn run_with_stdin(command: &mut Command, stdin: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Run in the blocking pool (the mock servers need the runtime's threads).
async fn run_async(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || run(&mut command))
        .await
        .unwrap()
}

/// Walk up from the crate to find `shared/` beside the repository (CI puts it there).
fn streams_path() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|p| p.join("shared/conformance/streams"))
        .find(|p| p.is_dir())
}

/// Split a printed shell command line: words separated by spaces, `"..."` and `'...'` quoted.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            ' ' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

// ---- 12: mock-server's try line --------------------------------------------------------------

#[test]
fn mock_server_try_line_runs_as_printed_and_the_tool_runs() {
    let mut server = bin()
        .args(["mock-server", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = server.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(out).lines();
    let try_line = loop {
        let line = lines
            .next()
            .expect("mock-server prints a try: line")
            .unwrap();
        if let Some(command) = line.strip_prefix("try: ") {
            break command.to_owned();
        }
    };
    let words = shell_words(&try_line);
    assert_eq!(words[0], "agentloop", "{try_line}");
    let output = run(bin().args(&words[1..]));
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let status = server.wait().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{try_line}\n{err}");
    assert!(!err.contains("no tool named"), "{err}");
    assert!(
        err.contains("✓ get_weather → {\"city\":\"Paris\""),
        "the demo tool ran: {err}"
    );
    assert!(stdout(&output).contains("It is 18 °C and sunny in Paris."));
    assert!(status.success(), "mock-server ends cleanly on SIGTERM");
    // The descriptor directory it made for the try line is gone with it.
    if let Some(i) = words.iter().position(|w| w == "--tools") {
        assert!(!Path::new(&words[i + 1]).exists(), "{try_line}");
    }
}

// ---- 13: messages name flags and environment variables ---------------------------------------

#[test]
fn model_errors_name_flags_and_environment_variables() {
    let output = run(bin().args(["run", "--model", "openai-compatible/x", "hi"]));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("--base-url"), "{err}");
    assert!(err.contains("OPENAI_BASE_URL"), "{err}");
    assert!(!err.contains("OpenAi::"), "{err}");

    let output = run(bin().args(["run", "--model", "openai/gpt-4o", "hi"]));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    assert!(!err.contains("HttpConfig"), "{err}");

    let output = run(bin().args(["run", "--model", "anthropic/claude-x", "hi"]));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    assert!(!err.contains("HttpConfig"), "{err}");
    assert!(!err.contains("Anthropic::new"), "{err}");
}

#[test]
fn a_bad_base_url_fails_at_start_up_naming_the_flag() {
    for bad in ["foo", "ftp://127.0.0.1/v1", "http://", "/v1"] {
        let started = Instant::now();
        let output = run(bin().args([
            "run",
            "--model",
            "openai-compatible/x",
            "--base-url",
            bad,
            "hi",
        ]));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--base-url"), "{bad}: {err}");
        assert!(err.contains("http"), "says what is expected: {err}");
        assert!(!err.contains("transport"), "no request was made: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "no retries");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_model_command_takes_a_base_url() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("Hello from the server.")])
        .await
        .unwrap();
    let url = server.base_url();
    let output = tokio::task::spawn_blocking(move || {
        run_with_stdin(
            bin().arg("chat"),
            &format!("/model openai-compatible/served {url}\nHi\n/model nope\n"),
        )
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(
        out.contains("Hello from the server."),
        "{out}\n{}",
        stderr(&output)
    );
    assert_eq!(server.calls(), 1);
    assert_eq!(
        server.last_request().unwrap().body["model"],
        json!("served")
    );
    let err = stderr(&output);
    assert!(
        err.contains("/model NAME [BASE_URL]"),
        "usage is shown: {err}"
    );
}

// ---- 14: replay detects the format -----------------------------------------------------------

const ANTHROPIC_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"c\",\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi there\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

const OPENAI_STREAM: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi there\"}}]}\n\ndata: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

fn replay(args: &[&str], stream: &str) -> Output {
    run_with_stdin(bin().arg("replay").args(args).arg("-"), stream)
}

#[test]
fn replay_detects_the_format_when_none_is_given() {
    for (stream, text) in [(ANTHROPIC_STREAM, "Hi there"), (OPENAI_STREAM, "Hi there")] {
        let output = replay(&[], stream);
        assert!(output.status.success(), "{}", stderr(&output));
        let doc = stdout_json(&output);
        assert_eq!(doc["text"], text);
        assert_eq!(doc["stop_reason"], "end_turn");
    }
    let output = replay(&[], "data: hello\n\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("--format"), "{}", stderr(&output));
}

#[test]
fn replay_with_the_wrong_format_says_what_the_stream_looks_like() {
    let output = replay(&["--format", "openai"], ANTHROPIC_STREAM);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("looks like an Anthropic stream"), "{err}");
    assert!(err.contains("--format anthropic"), "{err}");
    assert!(!stdout(&output).contains("end_turn"), "{}", stdout(&output));

    let output = replay(&["--format", "anthropic"], OPENAI_STREAM);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("looks like an OpenAI stream"), "{err}");
    assert!(!stdout(&output).contains("end_turn"), "{}", stdout(&output));
}

#[test]
fn a_failed_replay_claims_no_stop_reason() {
    let stream = OPENAI_STREAM.replace(
        "data: [DONE]",
        "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}",
    );
    // The error comes before the finish chunk.
    let stream = format!(
        "{}\n\n{}",
        OPENAI_STREAM.split("\n\n").next().unwrap(),
        stream.split("\n\n").nth(2).unwrap()
    );
    let output = replay(&[], &stream);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let doc = stdout_json(&output);
    assert_eq!(doc["stop_reason"], Value::Null, "{doc}");
    assert_eq!(doc["text"], "Hi there");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{doc}"
    );
}

#[test]
fn every_recorded_stream_replays_the_same_without_format() {
    let Some(streams) = streams_path() else {
        agentloop_testkit::skip("../shared/conformance/streams not found");
        return;
    };
    let mut checked = 0;
    for folder in std::fs::read_dir(&streams).unwrap().flatten() {
        let folder = folder.path();
        if !folder.is_dir() {
            continue;
        }
        let anthropic = folder.file_name().unwrap() == "anthropic";
        let (right, wrong) = if anthropic {
            ("anthropic", "openai")
        } else {
            ("openai", "anthropic")
        };
        for file in std::fs::read_dir(&folder).unwrap().flatten() {
            let file = file.path();
            if file.extension().is_none_or(|e| e != "sse") {
                continue;
            }
            let given = run(bin().args(["replay", "--format", right]).arg(&file));
            let detected = run(bin().arg("replay").arg(&file));
            let name = file.display();
            assert_eq!(detected.status.code(), given.status.code(), "{name}");
            assert_eq!(detected.stdout, given.stdout, "{name}");
            if !given.status.success() {
                assert_eq!(
                    stdout_json(&given)["stop_reason"],
                    Value::Null,
                    "{name}: a failed replay claims no stop reason"
                );
            }
            let mismatched = run(bin().args(["replay", "--format", wrong]).arg(&file));
            assert_eq!(mismatched.status.code(), Some(1), "{name}");
            let looks = if anthropic {
                "looks like an Anthropic stream"
            } else {
                "looks like an OpenAI stream"
            };
            assert!(stderr(&mismatched).contains(looks), "{name}");
            checked += 1;
        }
    }
    assert!(checked >= 38, "only {checked} streams checked");
}

// ---- 15: tools on files, empty inputs, names -------------------------------------------------

const WEATHER: &str = r#"{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}, "mock": {"response": {"t": 1}}}"#;

#[test]
fn tools_validate_and_list_accept_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("weather.json");
    std::fs::write(&file, WEATHER).unwrap();
    let output = run(bin().args(["tools", "validate"]).arg(&file));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("ok: 1 tool(s) in 1 file(s): get_weather"));
    let output = run(bin().args(["tools", "list"]).arg(&file));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains("get_weather\tmock\tWeather"));
}

#[test]
fn tools_validate_warns_on_an_empty_directory_or_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(bin().args(["tools", "validate"]).arg(dir.path()));
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(err.contains("warning: no tool descriptors"), "{err}");
    assert!(!stdout(&output).contains("ok"), "{}", stdout(&output));

    let file = dir.path().join("empty.yaml");
    std::fs::write(&file, "").unwrap();
    let output = run(bin().args(["tools", "validate"]).arg(&file));
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(err.contains("warning: no tool descriptors"), "{err}");
    assert!(err.contains("empty.yaml"), "{err}");
}

#[test]
fn tools_validate_checks_names_against_what_providers_accept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.json"), WEATHER).unwrap();
    std::fs::write(
        dir.path().join("spaced.json"),
        WEATHER.replace("get_weather", "get weather"),
    )
    .unwrap();
    let long = "x".repeat(65);
    std::fs::write(
        dir.path().join("long.json"),
        WEATHER.replace("get_weather", &long),
    )
    .unwrap();
    let output = run(bin().args(["tools", "validate"]).arg(dir.path()));
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let err = stderr(&output);
    assert!(err.contains("spaced.json"), "{err}");
    assert!(err.contains("`get weather`"), "{err}");
    assert!(err.contains("long.json"), "{err}");
    assert!(err.contains(&format!("`{long}`")), "{err}");
    assert!(err.contains("^[a-zA-Z0-9_-]{1,64}$"), "{err}");
    assert!(err.contains("2 problem(s)"), "{err}");
}

// ---- 16: exit codes, parse-time checks, timeouts, stdin --------------------------------------

#[test]
fn exit_codes_are_distinct_and_documented() {
    let output = run(bin().args(["run", "--max-tool-calls", "0", "Weather?"]));
    assert_eq!(output.status.code(), Some(3), "stopped by a limit");
    let output = run(bin().args(["run", "--nope"]));
    assert_eq!(output.status.code(), Some(2), "usage error");

    let help = stdout(&run(bin().args(["run", "--help"])));
    for line in ["0  ", "1  ", "2  ", "3  ", "4  ", "130  "] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(line)),
            "exit code {line} is documented: {help}"
        );
    }
}

#[test]
fn zero_limits_and_bad_timeouts_are_rejected_at_parse_time() {
    for (flag, value) in [
        ("--max-tool-iterations", "0"),
        ("--timeout", "0"),
        ("--timeout", "-1"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "soon"),
    ] {
        let output = run(bin().args(["run", flag, value, "hi"]));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(output.stdout.is_empty(), "nothing ran: {}", stdout(&output));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_says_so_in_one_sentence_and_exits_4() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text("too late").with_delay(Duration::from_secs(10))],
    )
    .await
    .unwrap();
    let mut command = bin();
    command.args([
        "run",
        "--model",
        "openai-compatible/slow",
        "--base-url",
        &server.base_url(),
        "--timeout",
        "0.3",
        "hi",
    ]);
    let output = run_async(command).await;
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(4), "{err}");
    let timeout_lines: Vec<&str> = err.lines().filter(|l| l.contains("timed out")).collect();
    assert_eq!(timeout_lines.len(), 1, "one sentence: {err}");
    assert!(timeout_lines[0].contains("--timeout"), "{err}");
    assert!(timeout_lines[0].contains("0.3"), "{err}");
    assert!(!err.contains("stop: timeout"), "no second report: {err}");
}

#[test]
fn zero_tool_calls_output_is_not_glued_together() {
    // stdout and stderr into one file, as a terminal shows them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let file = std::fs::File::create(&path).unwrap();
    let status = bin()
        .args(["run", "--max-tool-calls", "0", "Weather?"])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    let all = std::fs::read_to_string(&path).unwrap();
    assert!(all.contains("Let me check the weather.\n"), "{all}");
    for line in all.lines() {
        assert!(
            !(line.contains("weather.") && line.contains("get_weather")),
            "glued: {line:?} in {all}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_dash_reads_the_prompt_from_stdin() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("ok")])
        .await
        .unwrap();
    let url = server.base_url();
    let output = tokio::task::spawn_blocking(move || {
        run_with_stdin(
            bin().args([
                "run",
                "--model",
                "openai-compatible/m",
                "--base-url",
                &url,
                "-",
            ]),
            "A prompt\nover two lines\n",
        )
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let body = server.last_request().unwrap().body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        json!("A prompt\nover two lines")
    );
}

// ---- 17: spinner and line editing on a terminal only -----------------------------------------

/// Spinner frames and escape codes that must never reach a pipe.
fn assert_plain(text: &str) {
    assert!(!text.contains('\x1b'), "escape code in {text:?}");
    for frame in ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏', '⠁', '⠂']
    {
        assert!(!text.contains(frame), "spinner frame in {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn piped_output_has_no_spinner_or_escape_codes() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("get_weather", json!({"city": "Paris"}))
                .with_delay(Duration::from_millis(400)),
            Turn::text("Sunny.").with_delay(Duration::from_millis(400)),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.json"), WEATHER).unwrap();
    let mut command = bin();
    command
        .env_remove("NO_COLOR")
        .args(["run", "--model", "openai-compatible/m", "--base-url"])
        .arg(server.base_url())
        .arg("--tools")
        .arg(dir.path())
        .arg("Weather?");
    let output = run_async(command).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_plain(&stdout(&output));
    assert_plain(&stderr(&output));
}

/// Run `agentloop ARGS` under a pseudo-terminal (`script`), feeding `input` slowly.
fn under_pty(args: &[&str], input: &[&str]) -> Option<String> {
    if Command::new("script").arg("--version").output().is_err() {
        agentloop_testkit::skip("`script` (util-linux) is not installed");
        return None;
    }
    let mut line = shell_quote(env!("CARGO_BIN_EXE_agentloop"));
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    let mut child = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for chunk in input {
        std::thread::sleep(Duration::from_millis(300));
        stdin.write_all(chunk.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_gets_a_spinner_while_waiting_for_the_model() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text("Sunny.").with_delay(Duration::from_millis(800))],
    )
    .await
    .unwrap();
    let url = server.base_url();
    let Some(screen) = tokio::task::spawn_blocking(move || {
        under_pty(
            &[
                "run",
                "--model",
                "openai-compatible/m",
                "--base-url",
                &url,
                "Weather?",
            ],
            &[],
        )
    })
    .await
    .unwrap() else {
        return;
    };
    assert!(screen.contains("Sunny."), "{screen:?}");
    assert!(
        screen.contains("waiting for the model"),
        "a spinner shows while waiting: {screen:?}"
    );
    let before_answer = screen.split("Sunny.").next().unwrap();
    assert!(
        ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏']
            .iter()
            .any(|f| before_answer.contains(*f)),
        "{screen:?}"
    );
}

#[test]
fn chat_on_a_terminal_has_line_history() {
    // Up arrow recalls the previous prompt; Enter sends it again.
    let Some(screen) = under_pty(
        &["chat"],
        &["Weather in Lyon?\r", "\x1b[A\r", "/history\r", "/quit\r"],
    ) else {
        return;
    };
    assert_eq!(
        screen.matches("user: Weather in Lyon?").count(),
        2,
        "{screen:?}"
    );
}
