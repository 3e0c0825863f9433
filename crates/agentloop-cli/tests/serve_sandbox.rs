//! `agentloop serve --sandbox`: directories the file skills must not be given are refused at
//! start-up, process by process.

use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a `serve` process did.
#[derive(Debug)]
enum Outcome {
    /// It printed `serving on ...` (and was then stopped).
    Serving,
    /// It exited by itself, with this status and standard error.
    Exited(Option<i32>, String),
}

/// Run `agentloop serve` on 127.0.0.1:0 with `args`, `HOME` set to `home`, until it either
/// serves or exits (at most 30 s).
fn serve(home: &Path, args: &[&std::ffi::OsStr]) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("AGENTLOOP_TOKEN")
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agentloop binary runs");
    let stdout = child.stdout.take().unwrap();
    let (lines, first_line) = mpsc::channel();
    std::thread::spawn(move || {
        let line = std::io::BufReader::new(stdout).lines().next();
        let _ = lines.send(line);
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(Ok(line))) = first_line.recv_timeout(Duration::from_millis(50))
            && line.starts_with("serving on ")
        {
            child.kill().unwrap();
            child.wait().unwrap();
            return Outcome::Serving;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            return Outcome::Exited(status.code(), stderr);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("agentloop serve neither served nor exited within 30 s");
        }
    }
}

#[test]
fn a_sandbox_holding_the_tools_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let sandbox = base.join("work");
    let tools = sandbox.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join("echo.json"),
        r#"{"name": "echo", "description": "Echo", "input_schema": {"type": "object"}, "mock": {"template": "{}"}}"#,
    )
    .unwrap();
    let db = base.join("chats.db");
    let outcome = serve(
        &base,
        &[
            "--sandbox".as_ref(),
            sandbox.as_os_str(),
            "--tools".as_ref(),
            tools.as_os_str(),
            "--db".as_ref(),
            db.as_os_str(),
        ],
    );
    let Outcome::Exited(code, stderr) = outcome else {
        panic!("a sandbox holding the tools directory was served");
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "sandbox directory `{}`: it contains `{}`",
            sandbox.display(),
            tools.display()
        )),
        "{stderr}"
    );

    // A sandbox inside the tools directory would let the model write tool descriptors.
    let outcome = serve(
        &base,
        &[
            "--sandbox".as_ref(),
            tools.as_os_str(),
            "--tools".as_ref(),
            sandbox.as_os_str(),
            "--db".as_ref(),
            db.as_os_str(),
        ],
    );
    assert!(
        matches!(outcome, Outcome::Exited(Some(1), _)),
        "{outcome:?}"
    );
}

#[test]
fn the_home_directory_needs_allow_broad_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    std::fs::create_dir(&home).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let db = elsewhere.path().join("chats.db");
    let args = [
        "--sandbox".as_ref(),
        home.as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
    ];
    let Outcome::Exited(code, stderr) = serve(&home, &args) else {
        panic!("the home directory was served as a sandbox");
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "sandbox directory `{}`: it is your home directory, so the model could read and rewrite your keys and settings",
            home.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-broad-sandbox"), "{stderr}");
    // A directory holding the home directory is refused as well.
    let outcome = serve(
        &home,
        &[
            "--sandbox".as_ref(),
            base.as_os_str(),
            "--db".as_ref(),
            db.as_os_str(),
        ],
    );
    let Outcome::Exited(Some(1), stderr) = outcome else {
        panic!("a directory holding the home directory was served: {outcome:?}");
    };
    assert!(
        stderr.contains(&format!(
            "it contains your home directory `{}`",
            home.display()
        )),
        "{stderr}"
    );

    let mut allowed = args.to_vec();
    allowed.push("--allow-broad-sandbox".as_ref());
    assert!(matches!(serve(&home, &allowed), Outcome::Serving));
}
