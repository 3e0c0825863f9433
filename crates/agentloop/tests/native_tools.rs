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

use agentloop::provider::anthropic::{Anthropic, tools};
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};
use agentloop::{Agent, AgentBuilder, RunStopReason, Tool};
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
        .native_tool(tools::text_editor())
        .native_tool(tools::bash())
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
        .native_tool(tools::bash())
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
    .with_handler(|_ctx: ToolContext, input: Value| async move {
        Ok::<_, ToolError>(ToolOutput::text(format!("ran {}", input["command"])))
    });
    let agent = Agent::builder(provider(&server))
        .model("claude-sonnet-4-5")
        .native_tool(tools::bash())
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
    request.tools = vec![ToolDefinition::Native(tools::text_editor())];
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

// --- Code execution and file search: mapped where the provider has them, refused elsewhere.

mod provider_tools {
    use agentloop::provider::anthropic::Anthropic;
    use agentloop::provider::anthropic::tools::{self, CodeExecutionVersion};
    use agentloop::provider::http::{ApiKey, HttpConfig};
    use agentloop::provider::openai::{OpenAi, Preset};
    use agentloop::{Error, Message, NativeTool, Request, ToolDefinition};
    use serde_json::{Value, json};

    fn request(tool: NativeTool) -> Request {
        let mut request = Request::new("claude-sonnet-4-5", vec![Message::user("Compute 2^64.")]);
        request.max_tokens = Some(1024);
        request.tools = vec![ToolDefinition::Native(tool)];
        request
    }

    fn anthropic() -> Anthropic {
        Anthropic::new(HttpConfig::new("http://127.0.0.1:9")).unwrap()
    }

    fn golden(name: &str) -> Value {
        let path = format!(
            "{}/tests/golden/anthropic/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Each code execution version with its type string and beta header. Sources: Anthropic's
    /// "Code execution tool" docs (`code_execution_20250825` with beta
    /// `code-execution-2025-08-25`; the legacy Python-only `code_execution_20250522` with beta
    /// `code-execution-2025-05-22`) and the Messages API types of anthropic-sdk-python
    /// (`CodeExecutionTool20260120Param`, REPL state kept between calls, among the generally
    /// available tool types, so no beta header).
    #[test]
    fn anthropic_code_execution_versions_and_their_beta_headers() {
        for (version, file, beta) in [
            (
                CodeExecutionVersion::V20250825,
                "code_execution_20250825",
                Some("code-execution-2025-08-25"),
            ),
            (
                CodeExecutionVersion::V20250522,
                "code_execution_20250522",
                Some("code-execution-2025-05-22"),
            ),
            (
                CodeExecutionVersion::V20260120,
                "code_execution_20260120",
                None,
            ),
        ] {
            let wire = anthropic()
                .prepare(&request(tools::code_execution(version)), false)
                .expect("prepares");
            let body: Value = serde_json::from_slice(&wire.body).unwrap();
            assert_eq!(body, golden(file), "{file}");
            assert_eq!(
                wire.headers
                    .get("anthropic-beta")
                    .and_then(|v| v.to_str().ok()),
                beta,
                "{file}"
            );
        }
        assert_eq!(
            CodeExecutionVersion::default(),
            CodeExecutionVersion::V20250825
        );
    }

    fn refusal(result: agentloop::Result<impl std::fmt::Debug>) -> (String, String) {
        match result {
            Err(error @ Error::Unsupported { .. }) => {
                let message = error.to_string();
                let Error::Unsupported { provider, feature } = error else {
                    unreachable!()
                };
                assert_eq!(message, format!("{feature} is not supported by {provider}"));
                (provider, feature)
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }

    fn openai(preset: Preset) -> OpenAi {
        let mut config = HttpConfig::new("http://127.0.0.1:9/v1");
        config.api_key = Some(ApiKey::new("sk-test"));
        OpenAi::from_preset(preset, config).unwrap()
    }

    fn file_search() -> NativeTool {
        NativeTool::new(
            "openai.file_search",
            json!({"vector_store_ids": ["vs_docs"], "max_num_results": 5}),
        )
    }

    /// The Messages API has no vector-store search (its server tools are web search, web
    /// fetch, code execution, tool search, memory): file search is refused with what to do.
    #[test]
    fn anthropic_refuses_file_search_and_says_what_to_do() {
        let (provider, feature) = refusal(anthropic().prepare(&request(file_search()), false));
        assert_eq!(provider, "anthropic");
        assert_eq!(
            feature,
            "native tool openai.file_search (the Messages API has no vector-store search; \
             give the model a function tool that queries your store)"
        );
    }

    /// OpenAI's `POST /chat/completions` takes function (and custom) tools and
    /// `web_search_options` only; `code_interpreter` and `file_search` are Responses API tools
    /// (openai-openapi `CreateChatCompletionRequest`, `ChatCompletionTool`).
    #[test]
    fn openai_chat_completions_refuses_code_execution_and_file_search() {
        let openai = openai(Preset::OpenAi);
        let code_interpreter = NativeTool::new(
            "openai.code_interpreter",
            json!({"container": {"type": "auto"}}),
        );
        let (provider, feature) = refusal(openai.request_body(&request(code_interpreter), false));
        assert_eq!(provider, "openai");
        assert_eq!(
            feature,
            "native tool openai.code_interpreter on Chat Completions \
             (OpenAI offers it only in the Responses API)"
        );
        let (provider, feature) = refusal(openai.request_body(&request(file_search()), false));
        assert_eq!(provider, "openai");
        assert_eq!(
            feature,
            "native tool openai.file_search on Chat Completions \
             (OpenAI offers it only in the Responses API)"
        );
    }

    /// xAI's Chat Completions takes function tools only; its code execution and collections
    /// search are Responses API tools (docs.x.ai, "Comparison with Chat Completions API").
    #[test]
    fn xai_chat_completions_refuses_code_execution_and_file_search() {
        let xai = openai(Preset::Xai);
        for id in ["xai.code_execution", "xai.collections_search"] {
            let tool = NativeTool::new(id, Value::Null);
            let (provider, feature) = refusal(xai.request_body(&request(tool), false));
            assert_eq!(provider, "xai");
            assert_eq!(
                feature,
                format!(
                    "native tool {id} on Chat Completions (xAI offers its server-side tools, \
                     web and X search, code execution and collections search, only in its \
                     Responses API; Live Search via `search_parameters` was retired)"
                )
            );
        }
    }

    /// Native tools are a provider-scoped id plus arguments, as in the Vercel AI SDK's
    /// provider tools (vercel/ai, `LanguageModelV2ProviderDefinedTool`: `id` of the form
    /// `<provider-name>.<unique-tool-name>`, `name`, `args`). A saved run serializes its
    /// `Request`: the tools come back equal, and build the same body.
    #[test]
    fn a_request_with_native_tools_round_trips_through_json() {
        let mut request = request(tools::bash());
        request.tools.extend(
            [
                tools::text_editor(),
                tools::code_execution(CodeExecutionVersion::V20260120),
                tools::web_search(tools::WebSearch {
                    max_uses: Some(2),
                    ..Default::default()
                }),
                NativeTool::web_search(),
                agentloop::provider::openai::tools::web_search(Default::default()),
                NativeTool::new("acme.search", json!({"index": "docs"})).client_side("search"),
            ]
            .map(ToolDefinition::Native),
        );
        let saved = serde_json::to_value(&request).unwrap();
        assert_eq!(
            saved["tools"][0],
            json!({"type": "native", "id": "anthropic.bash", "client_name": "bash",
                   "args": {"type": "bash_20250124"}})
        );
        assert_eq!(
            saved["tools"][4],
            json!({"type": "native", "id": "web_search"})
        );
        let restored: Request = serde_json::from_value(saved).unwrap();
        assert_eq!(restored, request);
        let ToolDefinition::Native(custom) = &restored.tools[6] else {
            panic!("a native tool")
        };
        assert_eq!(
            (custom.id(), custom.client_name(), custom.args()),
            ("acme.search", Some("search"), &json!({"index": "docs"}))
        );
        // The Anthropic tools alone build the same body from the restored request.
        let anthropic_only = |mut request: Request| {
            request
                .tools
                .retain(|t| matches!(t, ToolDefinition::Native(n) if !n.id().contains("search") || n.id() == "anthropic.web_search"));
            let wire = anthropic().prepare(&request, false).unwrap();
            serde_json::from_slice::<Value>(&wire.body).unwrap()
        };
        assert_eq!(anthropic_only(restored), anthropic_only(request));
    }

    /// The provider-neutral web search maps to each provider's defaults; its settings differ
    /// between providers, so it takes none.
    #[test]
    fn the_neutral_web_search_maps_on_both_providers_and_takes_no_arguments() {
        let wire = anthropic()
            .prepare(&request(NativeTool::web_search()), false)
            .unwrap();
        let body: Value = serde_json::from_slice(&wire.body).unwrap();
        assert_eq!(
            body["tools"],
            json!([{"type": "web_search_20250305", "name": "web_search"}])
        );
        let body: Value = serde_json::from_slice(
            &openai(Preset::OpenAi)
                .request_body(&request(NativeTool::web_search()), false)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(body["web_search_options"], json!({}));

        let with_settings = NativeTool::new("web_search", json!({"max_uses": 2}));
        for result in [
            anthropic()
                .prepare(&request(with_settings.clone()), false)
                .map(drop),
            openai(Preset::OpenAi)
                .request_body(&request(with_settings), false)
                .map(drop),
        ] {
            match result {
                Err(Error::Config { message }) => assert!(
                    message.contains("takes no arguments")
                        && message.contains("provider::anthropic::tools::web_search"),
                    "{message}"
                ),
                other => panic!("expected a configuration error, got {other:?}"),
            }
        }
    }

    /// A version this crate does not know yet is sent as given (without a beta header: the
    /// caller configures it), so a new tool version needs no new release.
    #[test]
    fn an_anthropic_tool_version_the_crate_does_not_know_is_sent_as_given() {
        let newer = NativeTool::new(
            "anthropic.code_execution",
            json!({"type": "code_execution_20990101"}),
        );
        let wire = anthropic().prepare(&request(newer), false).unwrap();
        let body: Value = serde_json::from_slice(&wire.body).unwrap();
        assert_eq!(
            body["tools"],
            json!([{"type": "code_execution_20990101", "name": "code_execution"}])
        );
        assert!(wire.headers.get("anthropic-beta").is_none());
    }

    /// Arguments are an object (or none): anything else is a configuration error naming the
    /// tool, on every provider.
    #[test]
    fn arguments_that_are_not_an_object_are_a_configuration_error() {
        let odd = NativeTool::new("anthropic.bash", json!(["bash_20250124"]));
        match anthropic().prepare(&request(odd), false) {
            Err(Error::Config { message }) => assert_eq!(
                message,
                "the arguments of native tool anthropic.bash must be a JSON object, not [\"bash_20250124\"]"
            ),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    /// A compatible server without such tools names itself and the tool.
    #[test]
    fn other_chat_completions_servers_refuse_them_by_name() {
        let groq = openai(Preset::Groq);
        for tool in [
            tools::code_execution(CodeExecutionVersion::default()),
            file_search(),
        ] {
            let feature = format!("native tool {}", tool.id());
            let (provider, refused) = refusal(groq.request_body(&request(tool), false));
            assert_eq!(
                (provider.as_str(), refused.as_str()),
                ("groq", feature.as_str())
            );
        }
    }
}
