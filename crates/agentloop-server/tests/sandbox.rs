//! The file skills stay inside their sandbox, whatever path the model sends.

mod common;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::{Agent, Tool, ToolContext, ToolError};
use agentloop_server::skills::{Sandbox, SandboxLimits, SearchFiles};
use agentloop_server::{AppState, ServerConfig};
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
            .find(|t| t.name() == tool)
            .unwrap_or_else(|| panic!("tool {tool} exists"));
        let ctx = ToolContext::new("call_1", tool.name(), CancellationToken::new(), None);
        match tool.handler().unwrap().call(ctx, input).await {
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

/// The tool result events of a chat whose model makes `call` and then answers.
async fn chat_tool_results(root: &Path, call: Turn) -> Vec<(String, Value)> {
    let model = ScriptedModel::new([call, Turn::text("Done.")]);
    let config = ServerConfig::new(Agent::builder(model).build())
        .in_memory_database()
        .sandbox(root)
        .sandbox_writes_need_approval(false);
    let server = TestServer::start(config).await;
    let events = EventReader::new(post_chat(&server, json!({"message": "Go"})).await)
        .rest()
        .await;
    named(&events)
        .into_iter()
        .filter(|(name, _)| name == "tool_call_result")
        .collect()
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[tokio::test]
async fn a_fifo_is_refused_at_once_instead_of_blocking_a_thread() {
    let f = fixture();
    let fifo = f.root.join("pipe");
    mkfifo(&fifo);
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        chat_tool_results(
            &f.root,
            Turn::tool_call("write_file", json!({"path": "pipe", "content": "x"})),
        ),
    )
    .await;
    let Ok(results) = answer else {
        // Free the writer stuck in open(2) so the runtime can shut down, then fail.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        panic!("write_file to a FIFO did not answer within 20 s");
    };
    assert_eq!(
        results,
        vec![(
            "tool_call_result".to_owned(),
            json!({"id": "call_0_0", "content": "Error: `pipe` is not a regular file (a FIFO, socket or device); only regular files are read and written", "is_error": true})
        )]
    );
    for tool in ["read_file", "write_file"] {
        let input = json!({"path": "pipe", "content": "x"});
        let result = tokio::time::timeout(std::time::Duration::from_secs(20), f.call(tool, input))
            .await
            .expect("answers at once");
        assert_eq!(
            result,
            Err(
                "`pipe` is not a regular file (a FIFO, socket or device); only regular files are read and written"
                    .into()
            ),
            "{tool}"
        );
    }
    // The FIFO is still there and still a FIFO.
    use std::os::unix::fs::FileTypeExt;
    assert!(fifo.symlink_metadata().unwrap().file_type().is_fifo());
}

#[tokio::test]
async fn a_hard_link_to_a_file_outside_is_neither_read_nor_written() {
    let f = fixture();
    std::fs::hard_link(f.outside.join("secret.txt"), f.root.join("linked.txt")).unwrap();
    let refused = "`linked.txt` has other hard links, so it may be a file outside the sandbox; only files with a single link are read and written".to_owned();
    assert_eq!(
        f.call("read_file", json!({"path": "linked.txt"})).await,
        Err(refused.clone())
    );
    assert_eq!(
        f.call(
            "write_file",
            json!({"path": "linked.txt", "content": "overwritten"})
        )
        .await,
        Err(refused)
    );
    // Searching skips it too.
    assert_eq!(
        f.call("search_files", json!({"pattern": "TOPSECRET"}))
            .await,
        Ok("no matches in 2 files\n".into())
    );
    assert_eq!(
        f.outside_listing(),
        vec![("secret.txt".to_owned(), SECRET.to_owned())]
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("linked.txt")).unwrap(),
        SECRET
    );
}

#[tokio::test]
async fn a_write_replaces_the_file_instead_of_rewriting_it_in_place() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    let before = f.root.join("notes.txt").metadata().unwrap().ino();
    assert_eq!(
        f.call(
            "write_file",
            json!({"path": "notes.txt", "content": "new notes"})
        )
        .await,
        Ok("wrote 9 bytes to notes.txt".into())
    );
    let after = f.root.join("notes.txt").metadata().unwrap();
    assert_ne!(after.ino(), before, "a new file took the old one's place");
    assert_eq!(
        std::fs::read_to_string(f.root.join("notes.txt")).unwrap(),
        "new notes"
    );
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

#[tokio::test]
async fn a_sandbox_holding_the_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let db = root.join("agentloop.db");
    let config = ServerConfig::new(Agent::builder(ScriptedModel::new([])).build())
        .database(&db)
        .sandbox(&root);
    let error = AppState::new(config)
        .await
        .expect_err("a sandbox holding the database is refused")
        .to_string();
    assert_eq!(
        error,
        format!(
            "sandbox directory `{}`: it contains the server's database `{}` (and its -wal and -shm files), which the file skills could then rewrite; keep the database outside the sandbox (--db) or choose a sandbox that does not contain it",
            root.display(),
            db.display()
        )
    );
    assert!(
        !db.exists(),
        "no database is created when the start is refused"
    );

    // A relative sandbox and database name the same place: also refused.
    let sub = root.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let config = ServerConfig::new(Agent::builder(ScriptedModel::new([])).build())
        .database(sub.join("../sub/chats.db"))
        .sandbox(root.join("sub/."));
    assert!(AppState::new(config).await.is_err());
}

#[tokio::test]
async fn the_whole_file_system_is_refused_as_a_sandbox() {
    let config = ServerConfig::new(Agent::builder(ScriptedModel::new([])).build())
        .in_memory_database()
        .sandbox("/");
    let error = AppState::new(config)
        .await
        .expect_err("`/` is refused")
        .to_string();
    assert_eq!(
        error,
        "sandbox directory `/`: it is the whole file system, so the model could read and rewrite every file the server can; choose a project directory, or pass --allow-broad-sandbox (ServerConfig::allow_broad_sandbox) if that is really meant"
    );
}

#[tokio::test]
async fn broad_sandboxes_and_protected_paths_need_an_explicit_choice() {
    let agent = || Agent::builder(ScriptedModel::new([])).build();
    let config = ServerConfig::new(agent())
        .in_memory_database()
        .sandbox("/")
        .allow_broad_sandbox(true);
    assert!(
        AppState::new(config).await.is_ok(),
        "the opt-in is honoured"
    );

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let tools = root.join("tools");
    std::fs::create_dir(&tools).unwrap();
    let config = ServerConfig::new(agent())
        .in_memory_database()
        .sandbox(&root)
        .protect_paths([&tools]);
    assert_eq!(
        AppState::new(config).await.unwrap_err().to_string(),
        format!(
            "sandbox directory `{}`: it contains `{}`, which the server keeps out of the file skills' reach (such as the --tools directory); choose a sandbox that does not contain it",
            root.display(),
            tools.display()
        )
    );
    // A sibling is fine, and so is a database beside the sandbox.
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    let config = ServerConfig::new(agent())
        .database(root.join("chats.db"))
        .sandbox(&work)
        .protect_paths([&tools]);
    assert!(AppState::new(config).await.is_ok());
}

#[tokio::test]
async fn writes_stop_at_the_sandbox_quota() {
    let dir = tempfile::tempdir().unwrap();
    let limits = SandboxLimits {
        max_total_write_bytes: 10,
        ..SandboxLimits::default()
    };
    let sandbox = Arc::new(Sandbox::new(dir.path(), limits).unwrap());
    let tools = sandbox.clone().tools();
    let write = |path: &str, content: &str| {
        let tool = tools.iter().find(|t| t.name() == "write_file").unwrap();
        let ctx = ToolContext::new("call_1", "write_file", CancellationToken::new(), None);
        tool.handler()
            .unwrap()
            .call(ctx, json!({"path": path, "content": content}))
    };
    assert!(write("a.txt", "123456").await.is_ok());
    match write("b.txt", "123456").await {
        Err(ToolError::Failed(message)) => assert_eq!(
            message,
            "the sandbox's write quota is used up: 6 of 10 bytes written since the server started, and this write needs 6 more; no more files can be written until the server restarts"
        ),
        other => panic!("the quota is enforced, got {other:?}"),
    }
    assert!(!dir.path().join("b.txt").exists());
    assert!(write("c.txt", "1234").await.is_ok());
    assert_eq!(sandbox.bytes_written(), 10);
    assert!(write("d.txt", "").await.is_ok());
    assert!(write("d.txt", "x").await.is_err());
}

#[tokio::test]
async fn a_search_stops_at_its_byte_budget_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(dir.path().join(name), "needle 0123456789\n").unwrap();
    }
    let limits = SandboxLimits {
        max_search_bytes: 40,
        ..SandboxLimits::default()
    };
    let sandbox = Sandbox::new(dir.path(), limits).unwrap();
    let search = |pattern: &str| SearchFiles {
        pattern: pattern.into(),
        regex: false,
        ignore_case: false,
        path: None,
    };
    assert_eq!(
        sandbox.search_files(&search("needle")),
        Ok("a.txt:1: needle 0123456789\nb.txt:1: needle 0123456789\n… search cut short after reading 36 bytes of 2 files (the limit is 40 bytes); not every file was searched: narrow the path\n".into())
    );
    assert_eq!(
        sandbox.search_files(&search("missing")),
        Ok("no matches in 2 files\n… search cut short after reading 36 bytes of 2 files (the limit is 40 bytes); not every file was searched: narrow the path\n".into())
    );
}

#[tokio::test]
async fn links_that_stay_inside_still_work() {
    let f = fixture();
    std::os::unix::fs::symlink("notes.txt", f.root.join("inner")).unwrap();
    std::os::unix::fs::symlink("sub", f.root.join("subdir")).unwrap();
    assert_eq!(
        f.call("read_file", json!({"path": "inner"})).await,
        Ok("hello notes\nsecond line\n".into())
    );
    assert_eq!(
        f.call("read_file", json!({"path": "subdir/deep.txt"}))
            .await,
        Ok("deep line here\n".into())
    );
    assert_eq!(
        f.call(
            "write_file",
            json!({"path": "inner", "content": "via link"})
        )
        .await,
        Ok("wrote 8 bytes to notes.txt".into())
    );
    assert_eq!(
        f.call(
            "write_file",
            json!({"path": "subdir/new.txt", "content": "x"})
        )
        .await,
        Ok("wrote 1 bytes to sub/new.txt".into())
    );
    // The link still points at the file, which has the new content.
    assert!(
        f.root
            .join("inner")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("notes.txt")).unwrap(),
        "via link"
    );
    assert_eq!(
        f.call("list_dir", json!({"path": "subdir"})).await,
        Ok("deep.txt (15 bytes)\nnew.txt (1 bytes)\n".into())
    );
}
