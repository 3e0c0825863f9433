//! The file skills stay inside their sandbox, whatever path the model sends.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::{Agent, Tool, ToolContext, ToolError};
use agentloop_server::ServerConfig;
use agentloop_server::skills::{Sandbox, SandboxLimits};
use agentloop_testkit::{ScriptedModel, Turn};
use common::{EventReader, TestServer, named, post_chat};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    tools: Vec<Tool>,
}

const SECRET: &str = "TOPSECRET outside the sandbox\n";

/// root/ is the sandbox; outside/ holds a secret. Inside the root: plain files, a link to `/`,
/// a chain of links leading out, a link to the secret file, a dangling link pointing out, and a
/// file one byte over the read limit.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
    std::fs::write(root.join("notes.txt"), "hello notes\nsecond line\n").unwrap();
    std::fs::write(root.join("sub/deep.txt"), "deep line here\n").unwrap();
    let link =
        |target: &Path, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
    link(Path::new("/"), "to_root");
    link(Path::new("chain2"), "chain1");
    link(Path::new("../outside"), "chain2");
    link(Path::new("../outside/secret.txt"), "evil.txt");
    link(Path::new("../outside/planted.txt"), "dangling");
    let huge = std::fs::File::create(root.join("huge.bin")).unwrap();
    huge.set_len(SandboxLimits::default().max_read_bytes + 1)
        .unwrap();
    let sandbox = Arc::new(Sandbox::new(&root, SandboxLimits::default()).unwrap());
    Fixture {
        _dir: dir,
        tools: sandbox.tools(),
        root,
        outside,
    }
}

impl Fixture {
    async fn call(&self, tool: &str, input: Value) -> Result<String, String> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.tool_name() == tool)
            .unwrap_or_else(|| panic!("tool {tool} exists"));
        let ctx = ToolContext::new("call_1", tool.tool_name(), CancellationToken::new(), None);
        match tool.get_handler().unwrap().call(ctx, input).await {
            Ok(output) => match output.0 {
                agentloop::ToolResultContent::Text(text) => Ok(text),
                other => panic!("text output expected, got {other:?}"),
            },
            Err(ToolError::Failed(message)) => Err(message),
            Err(other) => panic!("a failure expected, got {other:?}"),
        }
    }

    /// Everything under outside/, with contents: must never change.
    fn outside_listing(&self) -> Vec<(String, String)> {
        let mut entries: Vec<(String, String)> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let content = std::fs::read_to_string(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), content)
            })
            .collect();
        entries.sort();
        entries
    }
}

#[tokio::test]
async fn hostile_paths_are_refused_and_nothing_outside_is_touched() {
    let f = fixture();
    let limits = SandboxLimits::default();
    let long = "a/".repeat(600);
    let outside_abs = f.outside.join("secret.txt").display().to_string();
    let escape_through_root = format!("to_root{}/written.txt", f.outside.display());
    let via_link = "leads outside the sandbox (through a symbolic link)";

    let reads: Vec<(String, String)> = vec![
        ("../x".into(), "`../x` leads outside the sandbox".into()),
        (
            "../outside/secret.txt".into(),
            "`../outside/secret.txt` leads outside the sandbox".into(),
        ),
        (
            "/etc/passwd".into(),
            "`/etc/passwd` is outside the sandbox; use a path relative to the sandbox root".into(),
        ),
        (
            outside_abs.clone(),
            format!(
                "`{outside_abs}` is outside the sandbox; use a path relative to the sandbox root"
            ),
        ),
        (
            "a/../../x".into(),
            "`a/../../x` leads outside the sandbox".into(),
        ),
        (
            "to_root/etc/passwd".into(),
            format!("`to_root/etc/passwd` {via_link}"),
        ),
        (
            "chain1/secret.txt".into(),
            format!("`chain1/secret.txt` {via_link}"),
        ),
        ("evil.txt".into(), format!("`evil.txt` {via_link}")),
        (
            long.clone(),
            format!(
                "the path is 1200 bytes long; the limit is {}",
                limits.max_path_bytes
            ),
        ),
        (
            "notes.txt\0.png".into(),
            "the path contains a NUL byte".into(),
        ),
        (
            "huge.bin".into(),
            format!(
                "`huge.bin` is {} bytes, more than the read limit of {} bytes",
                limits.max_read_bytes + 1,
                limits.max_read_bytes
            ),
        ),
        (
            "missing.txt".into(),
            "`missing.txt`: no such file or directory".into(),
        ),
        ("sub".into(), "`sub` is a directory; use list_dir".into()),
    ];
    for (path, expected) in &reads {
        assert_eq!(
            f.call("read_file", json!({ "path": path })).await,
            Err(expected.clone()),
            "read_file {path:?}"
        );
    }

    let writes: Vec<(Value, String)> = vec![
        (
            json!({"path": "../outside/new.txt", "content": "x"}),
            "`../outside/new.txt` leads outside the sandbox".into(),
        ),
        (
            json!({"path": outside_abs, "content": "x"}),
            format!(
                "`{outside_abs}` is outside the sandbox; use a path relative to the sandbox root"
            ),
        ),
        (
            json!({"path": "a/../../outside/new.txt", "content": "x", "create_dirs": true}),
            "`a/../../outside/new.txt` leads outside the sandbox".into(),
        ),
        (
            json!({"path": escape_through_root, "content": "x"}),
            format!("`{escape_through_root}` {via_link}"),
        ),
        (
            json!({"path": escape_through_root, "content": "x", "create_dirs": true}),
            format!("`{escape_through_root}` {via_link}"),
        ),
        (
            json!({"path": "chain1/new.txt", "content": "x"}),
            format!("`chain1/new.txt` {via_link}"),
        ),
        (
            json!({"path": "evil.txt", "content": "overwritten"}),
            format!("`evil.txt` {via_link}"),
        ),
        (
            json!({"path": "dangling", "content": "planted"}),
            "`dangling` is a symbolic link that leads nowhere; not writing through it".into(),
        ),
        (
            json!({"path": long, "content": "x"}),
            format!(
                "the path is 1200 bytes long; the limit is {}",
                limits.max_path_bytes
            ),
        ),
        (
            json!({"path": "a\0b", "content": "x"}),
            "the path contains a NUL byte".into(),
        ),
        (
            json!({"path": "big.txt", "content": "x".repeat(limits.max_write_bytes + 1)}),
            format!(
                "the content is {} bytes, more than the write limit of {} bytes",
                limits.max_write_bytes + 1,
                limits.max_write_bytes
            ),
        ),
        (
            json!({"path": ".", "content": "x"}),
            "`.` names the sandbox root, not a file".into(),
        ),
        (
            json!({"path": "sub", "content": "x"}),
            "`sub` is a directory".into(),
        ),
    ];
    for (input, expected) in &writes {
        assert_eq!(
            f.call("write_file", input.clone()).await,
            Err(expected.clone()),
            "write_file {input}"
        );
    }

    for (path, expected) in [
        ("..", "`..` leads outside the sandbox".to_owned()),
        ("to_root", format!("`to_root` {via_link}")),
        ("chain1", format!("`chain1` {via_link}")),
        (
            "/",
            "`/` is outside the sandbox; use a path relative to the sandbox root".to_owned(),
        ),
    ] {
        assert_eq!(
            f.call("list_dir", json!({ "path": path })).await,
            Err(expected),
            "list_dir {path:?}"
        );
    }
    assert_eq!(
        f.call(
            "search_files",
            json!({"pattern": "TOPSECRET", "path": "chain1"})
        )
        .await,
        Err(format!("`chain1` {via_link}"))
    );
    // Searching the root does not follow the links that lead out.
    assert_eq!(
        f.call("search_files", json!({"pattern": "TOPSECRET"}))
            .await,
        Ok("no matches in 2 files\n".into())
    );

    assert_eq!(
        f.outside_listing(),
        vec![("secret.txt".to_owned(), SECRET.to_owned())]
    );
    assert!(!f.root.join("big.txt").exists());
    assert!(!f.root.join("a").exists());
}

#[tokio::test]
async fn the_skills_work_inside_the_sandbox() {
    let f = fixture();
    assert_eq!(
        f.call("read_file", json!({"path": "sub/../notes.txt"}))
            .await,
        Ok("hello notes\nsecond line\n".into())
    );
    let absolute = f.root.join("notes.txt").display().to_string();
    assert_eq!(
        f.call("read_file", json!({ "path": absolute })).await,
        Ok("hello notes\nsecond line\n".into())
    );
    assert_eq!(
        f.call(
            "write_file",
            json!({"path": "new/dir/out.txt", "content": "made line", "create_dirs": true})
        )
        .await,
        Ok("wrote 9 bytes to new/dir/out.txt".into())
    );
    assert_eq!(
        f.call("write_file", json!({"path": "nodir/out.txt", "content": "x"})).await,
        Err("the directory of `nodir/out.txt`: no such file or directory (set create_dirs to create it)".into())
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("new/dir/out.txt")).unwrap(),
        "made line"
    );
    assert_eq!(
        f.call("list_dir", json!({})).await,
        Ok(format!(
            "chain1@\nchain2@\ndangling@\nevil.txt@\nhuge.bin ({} bytes)\nnew/\nnotes.txt (24 bytes)\nsub/\nto_root@\n",
            SandboxLimits::default().max_read_bytes + 1
        ))
    );
    assert_eq!(
        f.call("search_files", json!({"pattern": "LINE", "ignore_case": true})).await,
        Ok("new/dir/out.txt:1: made line\nnotes.txt:2: second line\nsub/deep.txt:1: deep line here\n".into())
    );
    assert_eq!(
        f.call(
            "search_files",
            json!({"pattern": "^s\\w+ line$", "regex": true})
        )
        .await,
        Ok("notes.txt:2: second line\n".into())
    );
    assert_eq!(
        f.call("search_files", json!({"pattern": "(", "regex": true}))
            .await
            .unwrap_err()
            .lines()
            .next(),
        Some("invalid regular expression: regex parse error:")
    );
}

#[tokio::test]
async fn a_refused_path_reaches_the_model_as_an_error_result() {
    let f = fixture();
    let model = ScriptedModel::new([
        Turn::tool_call("read_file", json!({"path": "../outside/secret.txt"})),
        Turn::text("I cannot read that."),
    ]);
    let config = ServerConfig::new(Agent::builder(model.clone()).build())
        .in_memory_database()
        .sandbox(&f.root);
    let server = TestServer::start(config).await;
    let events = EventReader::new(post_chat(&server, json!({"message": "Read the secret"})).await)
        .rest()
        .await;
    let tool_events: Vec<_> = named(&events)
        .into_iter()
        .filter(|(name, _)| name.starts_with("tool_"))
        .collect();
    assert_eq!(
        tool_events,
        vec![
            (
                "tool_call_start".to_owned(),
                json!({"id": "call_0_0", "name": "read_file", "arguments": {"path": "../outside/secret.txt"}})
            ),
            (
                "tool_call_result".to_owned(),
                json!({"id": "call_0_0", "content": "Error: `../outside/secret.txt` leads outside the sandbox", "is_error": true})
            ),
        ]
    );
    // The model was offered the four skills.
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .filter_map(|t| t.function_name().map(str::to_owned))
        .collect();
    assert_eq!(
        offered,
        ["read_file", "list_dir", "write_file", "search_files"]
    );
}
