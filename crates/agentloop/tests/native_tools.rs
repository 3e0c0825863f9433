//! Client-side native tools (Anthropic's text editor, bash and computer) in automatic runs:
//! handlers bound by the name the model calls them with, over HTTP against the testkit's
//! Anthropic wire server.
//!
//! Names and type strings from Anthropic's tool docs: the text editor for Claude 4 is
//! `text_editor_20250728` called `str_replace_based_edit_tool` (commands `view`,
//! `str_replace`, `create`, `insert`); bash is `bash_20250124` called `bash` (input
//! `{"command": ...}` or `{"restart": true}`); both are client tools: the model sends a
//! `tool_use` and the caller answers with a `tool_result`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};
use agentloop::{Agent, AgentBuilder, NativeTool, RunStopReason, Tool};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

fn provider(server: &MockServer) -> Anthropic {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-ant-native-test"));
    Anthropic::new(config).expect("provider")
}

fn builder(server: &MockServer) -> AgentBuilder {
    Agent::builder(provider(server))
        .model("claude-sonnet-4-5")
        .max_tokens(1024)
        .native_tool(NativeTool::TextEditor)
        .native_tool(NativeTool::Bash)
}

/// The inputs a handler saw, in order.
type Seen = Arc<Mutex<Vec<Value>>>;

/// A handler that records its input and answers `answer`.
fn recording(seen: &Seen, answer: &'static str) -> impl ToolHandler {
    let seen = Arc::clone(seen);
    move |_ctx: ToolContext, input: Value| {
        seen.lock().unwrap().push(input);
        async move { Ok::<_, ToolError>(ToolOutput::text(answer)) }
    }
}

fn script() -> [Turn; 3] {
    [
        Turn::tool_call(
            "str_replace_based_edit_tool",
            json!({"command": "view", "path": "/repo/src/lib.rs", "view_range": [1, 2]}),
        )
        .with_ids(["toolu_edit"]),
        Turn::tool_call("bash", json!({"command": "cargo test --quiet"})).with_ids(["toolu_bash"]),
        Turn::text("The file compiles and every test passes."),
    ]
}

/// Exactly one definition per native tool, in Anthropic's shape, and nothing else.
fn assert_one_definition_each(request: &Value) {
    assert_eq!(
        request["tools"],
        json!([
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            {"type": "bash_20250124", "name": "bash"}
        ]),
        "{request}"
    );
}

#[tokio::test]
async fn text_editor_and_bash_handlers_run_in_an_automatic_run() {
    let server = MockServer::start(Wire::Anthropic, script()).await.unwrap();
    let (editor, shell): (Seen, Seen) = Default::default();
    let handlers: HashMap<String, Arc<dyn ToolHandler>> = HashMap::from([(
        "bash".to_owned(),
        Arc::new(recording(&shell, "test result: ok. 12 passed")) as Arc<dyn ToolHandler>,
    )]);
    let agent = builder(&server)
        // One tool by name, the other from a map of handlers.
        .handler(
            "str_replace_based_edit_tool",
            recording(
                &editor,
                "1: pub fn add(a: i32, b: i32) -> i32 {\n2:     a + b",
            ),
        )
        .handlers(handlers)
        .build();

    let result = agent.run("Check that src/lib.rs builds.").await.unwrap();

    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(result.text(), "The file compiles and every test passes.");
    assert_eq!(result.tool_calls, 2);
    // Each handler got the input exactly as the model sent it.
    assert_eq!(
        *editor.lock().unwrap(),
        vec![json!({"command": "view", "path": "/repo/src/lib.rs", "view_range": [1, 2]})]
    );
    assert_eq!(
        *shell.lock().unwrap(),
        vec![json!({"command": "cargo test --quiet"})]
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_one_definition_each(&request.body);
    }
    let last_message = |at: usize| {
        let messages = requests[at].body["messages"].as_array().unwrap().clone();
        messages.last().cloned().unwrap()
    };
    assert_eq!(
        last_message(1),
        json!({"role": "user", "content": [{
            "type": "tool_result",
            "tool_use_id": "toolu_edit",
            "content": "1: pub fn add(a: i32, b: i32) -> i32 {\n2:     a + b",
            "is_error": false
        }]})
    );
    assert_eq!(
        last_message(2),
        json!({"role": "user", "content": [{
            "type": "tool_result",
            "tool_use_id": "toolu_bash",
            "content": "test result: ok. 12 passed",
            "is_error": false
        }]})
    );
    server.assert_complete();
}

/// The handler may come before the native tool is added; the binding happens at `build`.
#[tokio::test]
async fn a_handler_bound_before_its_native_tool_still_runs() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("bash", json!({"restart": true})).with_ids(["toolu_restart"]),
            Turn::text("Restarted."),
        ],
    )
    .await
    .unwrap();
    let shell: Seen = Default::default();
    let agent = Agent::builder(provider(&server))
        .model("claude-sonnet-4-5")
        .handler("bash", recording(&shell, "bash restarted"))
        .native_tool(NativeTool::Bash)
        .build();
    let result = agent.run("Restart the shell.").await.unwrap();
    assert_eq!(result.text(), "Restarted.");
    assert_eq!(*shell.lock().unwrap(), vec![json!({"restart": true})]);
    let requests = server.requests();
    for request in &requests {
        assert_eq!(
            request.body["tools"],
            json!([{"type": "bash_20250124", "name": "bash"}])
        );
    }
    assert_eq!(
        requests[1].body["messages"][2]["content"][0]["content"],
        "bash restarted"
    );
}

/// A function tool of the same name as a client-side native tool answers its calls, and its
/// definition is not sent next to the native one.
#[tokio::test]
async fn a_same_named_function_tool_is_not_sent_twice() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("bash", json!({"command": "ls"})).with_ids(["toolu_ls"]),
            Turn::text("Two files."),
        ],
    )
    .await
    .unwrap();
    let bash = Tool::from_schema(
        "bash",
        "",
        json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    )
    .unwrap()
    .handler(|_ctx: ToolContext, input: Value| async move {
        Ok::<_, ToolError>(ToolOutput::text(format!("ran {}", input["command"])))
    });
    let agent = Agent::builder(provider(&server))
        .model("claude-sonnet-4-5")
        .native_tool(NativeTool::Bash)
        .tool(bash)
        .build();
    let result = agent.run("List the files.").await.unwrap();
    assert_eq!(result.text(), "Two files.");
    let requests = server.requests();
    for request in &requests {
        assert_eq!(
            request.body["tools"],
            json!([{"type": "bash_20250124", "name": "bash"}])
        );
    }
    assert_eq!(
        requests[1].body["messages"][2]["content"][0]["content"],
        "ran \"ls\""
    );
}

/// Without a handler, a call to a client-side native tool is answered as a call to an unknown
/// tool: the model gets an error result naming the tools that can run, and the run goes on.
#[tokio::test]
async fn a_native_tool_without_a_handler_gets_an_unknown_tool_result() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("bash", json!({"command": "ls"})).with_ids(["toolu_ls"]),
            Turn::text("I cannot run commands here."),
        ],
    )
    .await
    .unwrap();
    let editor: Seen = Default::default();
    let agent = builder(&server)
        .handler("str_replace_based_edit_tool", recording(&editor, "unused"))
        .build();
    let result = agent.run("List the files.").await.unwrap();
    assert_eq!(result.text(), "I cannot run commands here.");
    let requests = server.requests();
    assert_eq!(
        requests[1].body["messages"][2]["content"][0],
        json!({
            "type": "tool_result",
            "tool_use_id": "toolu_ls",
            "content": "Error: there is no tool named `bash`; available tools: str_replace_based_edit_tool",
            "is_error": true
        })
    );
    assert!(editor.lock().unwrap().is_empty());
}

/// Without an agent: `Tool::native` in a streamed `run::run_stream`, the native tool in the
/// request; the handler's output streams back as the call's result.
#[tokio::test]
async fn tool_native_answers_a_streamed_run() {
    use agentloop::{Message, Request, RunEvent, ToolDefinition};
    use futures::StreamExt;

    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call(
                "str_replace_based_edit_tool",
                json!({"command": "create", "path": "/tmp/notes.md", "file_text": "# Notes\n"}),
            )
            .with_ids(["toolu_create"]),
            Turn::text("Created."),
        ],
    )
    .await
    .unwrap();
    let editor: Seen = Default::default();
    let mut request = Request::new("claude-sonnet-4-5", vec![Message::user("Start notes.")]);
    request.tools = vec![ToolDefinition::Native(NativeTool::TextEditor)];
    let tools = vec![Tool::native(
        "str_replace_based_edit_tool",
        recording(&editor, "File created successfully at: /tmp/notes.md"),
    )];
    let mut stream = agentloop::run::run_stream(
        Arc::new(provider(&server)),
        request,
        tools,
        agentloop::RunOptions::default(),
    );
    let mut results = Vec::new();
    let mut finished = None;
    while let Some(event) = stream.next().await {
        match event {
            RunEvent::ToolCallResult { name, result, .. } => results.push((name, *result)),
            RunEvent::RunFinish { result } => finished = Some(*result),
            _ => {}
        }
    }
    assert_eq!(finished.expect("the run finishes").text(), "Created.");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, "str_replace_based_edit_tool");
    assert_eq!(
        results[0].1,
        agentloop::ToolResult::text(
            "toolu_create",
            "File created successfully at: /tmp/notes.md"
        )
    );
    assert_eq!(
        *editor.lock().unwrap(),
        vec![json!({"command": "create", "path": "/tmp/notes.md", "file_text": "# Notes\n"})]
    );
    for recorded in server.requests() {
        assert_eq!(
            recorded.body["tools"],
            json!([{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}])
        );
    }
}
