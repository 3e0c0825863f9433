//! The tool registry: one place that holds every tool — typed Rust functions, descriptors
//! loaded from files (mock and HTTP executors), and the tools of connected MCP servers — and
//! hands them to the run loop, the conversation client, the server and the CLI as ordinary
//! [`Tool`]s.
//!
//! Arguments are checked against each tool's input schema by the run loop before the tool
//! runs ([`Tool::validate`]); results are checked against the output schema, when the
//! descriptor has one, by the executor.
//!
//! # Descriptors
//!
//! A descriptor has a `name`, a `description`, an `input_schema` (JSON Schema of the arguments;
//! `{"type": "object", "properties": {}}` when left out), an optional `output_schema` every
//! result must match, a `mode` saying how it runs, the section for that mode, `timeout_ms`, and
//! `needs_approval: true` for a tool whose every call waits for a person's approval (see
//! [`crate::run::PausedRun`]).
//! The modes: `function` (a handler bound in code with [`Registry::bind`]), `mock` (a
//! `response`, a minijinja `template` rendered with the arguments, or a `sequence` with
//! `on_exhausted: repeat_last | error`), `http` (`url`, `method` — POST by default —,
//! `headers` whose values may say `${ENV_VAR}`, `allowed_hosts`) and `mcp` (listed from a
//! server). `mode` can be left out when exactly one section is present. Multi-word keys may
//! also be written in camelCase (`inputSchema`, `outputSchema`, `timeoutMs`, `needsApproval`), and PromptKit's
//! `mockResponse`, `mockTemplate`, `endpoint` and `mode: live` are accepted too. A pack
//! bundles several tools with shared defaults ([`Registry::from_pack`]); the aliases and the
//! pack format are below.
//!
//! ```yaml
//! # tools/weather.yaml: one tool per YAML document (separate several with `---`)
//! name: get_weather
//! description: Current weather for a city
//! input_schema:
//!   type: object
//!   properties:
//!     city: {type: string}
//!   required: [city]
//! output_schema: {type: object, required: [temp_c]}
//! mock:
//!   template: '{"city": {{ city | tojson }}, "temp_c": 18}'
//! timeout_ms: 5000
//! ```
//!
//! ```json
//! {
//!   "name": "lookup_order",
//!   "description": "Look up an order",
//!   "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
//!   "mode": "http",
//!   "http": {
//!     "url": "https://shop.example.com/api/orders/lookup",
//!     "headers": {"Authorization": "Bearer ${SHOP_TOKEN}"},
//!     "allowed_hosts": ["shop.example.com"]
//!   },
//!   "mock": {"response": {"id": 1, "state": "shipped"}},
//!   "timeout_ms": 10000
//! }
//! ```
//!
//! The manifest style puts the name in `metadata` and the descriptor in `spec`:
//!
//! ```yaml
//! apiVersion: agentloop/v1
//! kind: Tool
//! metadata: {name: deploy_status}
//! spec:
//!   description: Status of the latest deployment
//!   mock:
//!     sequence: [{status: pending}, {status: done}]
//!     on_exhausted: repeat_last
//! ```
//!
//! Loading one of them and calling it:
//!
//! ```
//! use agentloop::registry::{Syntax, Registry, parse_descriptors};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let yaml = r#"
//! name: get_weather
//! input_schema:
//!   type: object
//!   properties: {city: {type: string}}
//!   required: [city]
//! mock:
//!   template: '{"city": {{ city | tojson }}, "temp_c": 18}'
//! "#;
//! let mut registry = Registry::new();
//! for descriptor in parse_descriptors(yaml, Syntax::Yaml, "weather.yaml")? {
//!     registry.add_descriptor(descriptor)?;
//! }
//! let output = registry.call("get_weather", serde_json::json!({"city": "Paris"})).await;
//! assert_eq!(output.unwrap().0.to_text(), r#"{"city":"Paris","temp_c":18}"#);
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! ```
//!
//! Every load error names the file, the tool and the problem, with line and column where the
//! parser gives them (`tools/weather.yaml:7:13: tool `get_weather`: timeout_ms: invalid type:
//! string "soon", expected u64`).
//!
//! # PromptKit's spellings
//!
//! Descriptors written for PromptKit load as they are; its spellings are aliases of ours:
//!
//! | PromptKit          | agentloop                          |
//! |--------------------|------------------------------------|
//! | `inputSchema`      | `input_schema`                     |
//! | `outputSchema`     | `output_schema`                    |
//! | `timeoutMs`        | `timeout_ms`                       |
//! | `mode: live`       | `mode: http`                       |
//! | `mockResponse: V`  | `mock: {response: V}`              |
//! | `mockTemplate: T`  | `mock: {template: T}` (minijinja)  |
//! | `endpoint: URL`    | `http: {url: URL}` (POST)          |
//!
//! Giving both spellings of one thing (`mockResponse` and a `mock` section) is an error.
//!
//! # Packs
//!
//! A **pack** bundles tools with shared `defaults` (`mode`, `timeout_ms`, `base_url` against
//! which relative endpoints resolve, `headers`, `allowed_hosts`); each tool's own value wins,
//! and `defaults.mode` applies only to tools that have the section it runs from (so
//! `mode: mock` switches a whole pack to its canned answers). `tools` is a list of
//! descriptors or a map from name to descriptor:
//!
//! ```yaml
//! name: shop
//! defaults: {mode: live, timeoutMs: 4000, baseUrl: "https://shop.example.com/api/"}
//! tools:
//!   lookup_order: {description: Look up an order, endpoint: orders/lookup}
//!   store_hours: {mode: mock, mockResponse: Open 9 to 5}
//! ```
//!
//! A pack file is also a tool file ([`Registry::from_file`] reads it). A pack directory has a
//! `pack.yaml` (or `.yml`, `.json`) at its root whose defaults also apply to every tool file
//! under it: load it with [`Registry::from_pack`] (or [`Registry::load_dir`]).

mod descriptor;
mod load;
mod pack;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::executor::{FunctionExecutor, HttpExecutor, MockExecutor, OutputCheck};
use crate::tool::{Tool, ToolContext, ToolError, ToolHandler, ToolOutput};

pub use descriptor::{
    HttpSpec, McpSource, MockSpec, OnExhausted, ToolDescriptor, ToolMode, empty_object_schema,
};
pub use load::{Syntax, pack_file, parse_descriptors, read_descriptors, read_pack, tool_files};

pub(crate) use load::load_error;

/// The HTTP executor's timeout when the descriptor sets none (the run's default tool
/// timeout).
const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Registry::call`] waits for a tool that sets no timeout of its own: the same as a
/// run's default tool timeout, so a tool cannot hang a direct call forever.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a registered tool came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// Registered in code.
    Code,
    /// Loaded from this file.
    File(PathBuf),
    /// Listed by this MCP server (command line or URL).
    Mcp(String),
}

impl std::fmt::Display for ToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code => f.write_str("code"),
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Mcp(server) => write!(f, "MCP server `{server}`"),
        }
    }
}

struct Entry {
    descriptor: ToolDescriptor,
    tool: Tool,
    source: ToolSource,
}

/// Tools by name, with their descriptors and executors.
///
/// ```
/// use agentloop::registry::Registry;
/// use agentloop::Tool;
///
/// # fn main() -> agentloop::Result<()> {
/// let mut registry = Registry::new();
/// registry.register(Tool::function("add", "Add two numbers", |a: Add| async move {
///     Ok::<_, std::convert::Infallible>(a.x + a.y)
/// }))?;
/// assert_eq!(registry.descriptors()[0].name, "add");
/// assert!(registry.get("add").is_some());
/// # Ok(()) }
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { x: i64, y: i64 }
/// ```
#[derive(Default)]
pub struct Registry {
    entries: Vec<Entry>,
    http: OnceLock<reqwest::Client>,
    #[cfg(feature = "mcp")]
    mcp: Vec<mcp_sources::McpServer>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .entries
            .iter()
            .map(|e| e.descriptor.name.as_str())
            .collect();
        f.debug_struct("Registry")
            .field("tools", &names)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the tools of one descriptor file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let mut registry = Self::new();
        registry.add_file(path)?;
        Ok(registry)
    }

    /// A registry holding the tools of a pack: a pack file, or a directory with a
    /// `pack.yaml` (see [`read_pack`]).
    pub fn from_pack(path: impl AsRef<Path>) -> Result<Self> {
        let mut registry = Self::new();
        registry.add_pack(path)?;
        Ok(registry)
    }

    /// A registry holding the tools of every `.json`, `.yaml` and `.yml` file under `dir`
    /// (recursively, in path order). Fails at the first problem, naming the file. A directory
    /// with a pack file at its root is read as a pack ([`Registry::add_pack`]).
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let mut registry = Self::new();
        registry.add_dir(dir)?;
        Ok(registry)
    }

    /// Add the tools of one descriptor file; returns their names.
    pub fn add_file(&mut self, path: impl AsRef<Path>) -> Result<Vec<String>> {
        let path = path.as_ref();
        let descriptors = read_descriptors(path)?;
        self.add_all(descriptors, ToolSource::File(path.to_owned()))
    }

    /// Add the tools of a pack file or pack directory (see [`read_pack`]); returns their
    /// names. Nothing is added when any tool of the pack is wrong.
    pub fn add_pack(&mut self, path: impl AsRef<Path>) -> Result<Vec<String>> {
        let tools = read_pack(path.as_ref())?
            .into_iter()
            .flat_map(|(file, descriptors)| {
                descriptors
                    .into_iter()
                    .map(move |d| (d, ToolSource::File(file.clone())))
            })
            .collect();
        self.add_sourced(tools)
    }

    /// Add the tools of every descriptor file under `dir`, or of the pack `dir` is when it has
    /// a pack file at its root; returns their names.
    pub fn add_dir(&mut self, dir: impl AsRef<Path>) -> Result<Vec<String>> {
        if pack_file(dir.as_ref()).is_some() {
            return self.add_pack(dir);
        }
        let mut names = Vec::new();
        for file in tool_files(dir.as_ref())? {
            names.extend(self.add_file(file)?);
        }
        Ok(names)
    }

    /// Add a descriptor built in code. A `function` descriptor is definition-only until a
    /// handler is attached with [`Registry::bind`].
    pub fn add_descriptor(&mut self, descriptor: ToolDescriptor) -> Result<()> {
        self.add_all(vec![descriptor], ToolSource::Code).map(drop)
    }

    /// Register an in-code tool (typed function tools from [`Tool::function`] included).
    pub fn register(&mut self, tool: Tool) -> Result<()> {
        let name = tool.name().to_owned();
        self.check_free(&name, &ToolSource::Code)?;
        let definition = tool.definition();
        let descriptor = ToolDescriptor {
            name: name.clone(),
            description: definition.description.clone(),
            input_schema: definition.input_schema.clone(),
            output_schema: None,
            mode: ToolMode::Function,
            mock: None,
            http: None,
            mcp: None,
            timeout_ms: tool
                .timeout()
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            needs_approval: false,
        };
        self.entries.push(Entry {
            descriptor,
            tool,
            source: ToolSource::Code,
        });
        Ok(())
    }

    /// Attach an in-process handler to the `function` tool `name` (for instance one whose
    /// definition came from a file). Its results are checked against the output schema.
    pub fn bind(&mut self, name: &str, handler: impl ToolHandler) -> Result<()> {
        let index = self
            .entries
            .iter()
            .position(|e| e.descriptor.name == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "cannot bind a handler: there is no tool named `{name}`"
                ))
            })?;
        let entry = &self.entries[index];
        if entry.descriptor.mode != ToolMode::Function {
            return Err(Error::config(format!(
                "cannot bind a handler to tool `{name}`: it runs in `{}` mode, not `function`",
                entry.descriptor.mode
            )));
        }
        let handler: Arc<dyn ToolHandler> = Arc::new(handler);
        let tool = build_tool(&entry.descriptor, Some(handler), self.http_client_lazy())
            .map_err(|message| load_error(&entry.source.to_string(), Some(name), message))?;
        self.entries[index].tool = tool;
        Ok(())
    }

    /// Every tool, in registration order, ready for [`crate::Agent`] or [`crate::run::run`].
    pub fn tools(&self) -> Vec<Tool> {
        self.entries.iter().map(|e| e.tool.clone()).collect()
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.entry(name).map(|e| &e.tool)
    }

    /// The descriptor of the tool named `name`.
    pub fn descriptor(&self, name: &str) -> Option<&ToolDescriptor> {
        self.entry(name).map(|e| &e.descriptor)
    }

    /// Where the tool named `name` came from.
    pub fn source(&self, name: &str) -> Option<&ToolSource> {
        self.entry(name).map(|e| &e.source)
    }

    /// Every descriptor, in registration order.
    pub fn descriptors(&self) -> Vec<&ToolDescriptor> {
        self.entries.iter().map(|e| &e.descriptor).collect()
    }

    /// The tool names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|e| e.descriptor.name.as_str())
            .collect()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Remove a tool; returns whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.descriptor.name != name);
        self.entries.len() != before
    }

    /// Call a tool directly, outside a run: the arguments are checked against the input
    /// schema first and the tool's timeout applies ([`DEFAULT_CALL_TIMEOUT`] when it sets
    /// none).
    pub async fn call(
        &self,
        name: &str,
        input: Value,
    ) -> std::result::Result<ToolOutput, ToolError> {
        let tool = self
            .get(name)
            .ok_or_else(|| ToolError::Failed(format!("there is no tool named `{name}`")))?;
        let input = if input.is_null() {
            Value::Object(Default::default())
        } else {
            input
        };
        tool.validate(&input).map_err(ToolError::InvalidArguments)?;
        let handler = tool.handler().ok_or_else(|| {
            ToolError::Failed(format!(
                "tool `{name}` has no handler; register one for it to be callable"
            ))
        })?;
        let cancel = CancellationToken::new();
        let ctx = ToolContext::new(format!("direct_{name}"), name, cancel.clone(), None);
        let _cancel_on_exit = cancel.drop_guard();
        let timeout = tool.timeout().unwrap_or(DEFAULT_CALL_TIMEOUT);
        tokio::time::timeout(timeout, handler.call(ctx, input))
            .await
            .unwrap_or_else(|_| {
                Err(ToolError::Failed(format!(
                    "tool `{name}` timed out after {} ms",
                    timeout.as_millis()
                )))
            })
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.descriptor.name == name)
    }

    fn check_free(&self, name: &str, source: &ToolSource) -> Result<()> {
        match self.entry(name) {
            Some(existing) => Err(load_error(
                &source.to_string(),
                Some(name),
                format!(
                    "duplicate tool name: it is already defined in {}",
                    existing.source
                ),
            )),
            None => Ok(()),
        }
    }

    fn http_client_lazy(
        &self,
    ) -> impl FnOnce() -> std::result::Result<reqwest::Client, String> + '_ {
        move || {
            if let Some(client) = self.http.get() {
                return Ok(client.clone());
            }
            let client = crate::executor::http_client()?;
            Ok(self.http.get_or_init(|| client).clone())
        }
    }

    /// Build every descriptor first, so that a bad one adds nothing.
    fn add_all(
        &mut self,
        descriptors: Vec<ToolDescriptor>,
        source: ToolSource,
    ) -> Result<Vec<String>> {
        let tools = descriptors
            .into_iter()
            .map(|d| (d, source.clone()))
            .collect();
        self.add_sourced(tools)
    }

    /// [`Registry::add_all`] for tools from several sources (the files of a pack).
    fn add_sourced(&mut self, tools: Vec<(ToolDescriptor, ToolSource)>) -> Result<Vec<String>> {
        let mut built: Vec<Entry> = Vec::with_capacity(tools.len());
        for (descriptor, source) in tools {
            let origin = source.to_string();
            let name = descriptor.name.clone();
            self.check_free(&name, &source)?;
            if let Some(earlier) = built.iter().find(|e| e.descriptor.name == name) {
                let message = if earlier.source == source {
                    "duplicate tool name: it is defined twice in this file".to_owned()
                } else {
                    format!(
                        "duplicate tool name: it is already defined in {}",
                        earlier.source
                    )
                };
                return Err(load_error(&origin, Some(&name), message));
            }
            let tool = build_tool(&descriptor, None, self.http_client_lazy())
                .map_err(|message| load_error(&origin, Some(&name), message))?;
            built.push(Entry {
                descriptor,
                tool,
                source,
            });
        }
        let names = built.iter().map(|e| e.descriptor.name.clone()).collect();
        self.entries.extend(built);
        Ok(names)
    }
}

/// A descriptor's [`Tool`]: definition, timeout, and the executor its mode names.
fn build_tool(
    descriptor: &ToolDescriptor,
    handler: Option<Arc<dyn ToolHandler>>,
    http_client: impl FnOnce() -> std::result::Result<reqwest::Client, String>,
) -> std::result::Result<Tool, String> {
    let name = &descriptor.name;
    let (tool, output) = definition(descriptor)?;
    let executor: Option<Arc<dyn ToolHandler>> = match descriptor.mode {
        ToolMode::Function => {
            handler.map(|h| Arc::new(FunctionExecutor::new(h, output)) as Arc<dyn ToolHandler>)
        }
        ToolMode::Mock => {
            let spec = descriptor
                .mock
                .as_ref()
                .ok_or("`mode: mock` needs a `mock` section")?;
            Some(Arc::new(MockExecutor::new(name, spec, output)?))
        }
        ToolMode::Http => {
            let spec = descriptor
                .http
                .as_ref()
                .ok_or("`mode: http` needs an `http` section")?;
            let timeout = descriptor.timeout().unwrap_or(DEFAULT_HTTP_TIMEOUT);
            Some(Arc::new(HttpExecutor::new(
                name,
                spec,
                timeout,
                http_client()?,
                output,
            )?))
        }
        ToolMode::Mcp => {
            return Err(
                "`mode: mcp` tools are listed by their server: connect it with `Registry::add_mcp_stdio` or `Registry::add_mcp_http`"
                    .to_owned(),
            );
        }
    };
    Ok(finish(tool, executor, descriptor))
}

/// The definition (input schema checked) and the compiled output schema.
fn definition(
    descriptor: &ToolDescriptor,
) -> std::result::Result<(Tool, Option<Arc<OutputCheck>>), String> {
    if descriptor.timeout_ms == Some(0) {
        return Err("`timeout_ms` must be greater than 0".to_owned());
    }
    let tool = Tool::from_schema(
        descriptor.name.clone(),
        descriptor.description.clone(),
        descriptor.input_schema.clone(),
    )
    .map_err(|e| match e {
        Error::InvalidToolSchema { message, .. } => format!("invalid input schema: {message}"),
        other => other.to_string(),
    })?;
    let output = descriptor
        .output_schema
        .as_ref()
        .map(|schema| OutputCheck::compile(&descriptor.name, schema).map(Arc::new))
        .transpose()?;
    Ok((tool, output))
}

fn finish(
    mut tool: Tool,
    executor: Option<Arc<dyn ToolHandler>>,
    descriptor: &ToolDescriptor,
) -> Tool {
    if let Some(executor) = executor {
        tool = tool.with_shared_handler(executor);
    }
    if let Some(timeout) = descriptor.timeout() {
        tool = tool.with_timeout(timeout);
    }
    if descriptor.needs_approval {
        tool = tool.with_approval_required(true);
    }
    // An MCP server's schema goes to each provider in its strict dialect where that keeps
    // what it accepts (non-strict with a warning otherwise), like a strict tool of our own.
    if descriptor.mode == ToolMode::Mcp {
        tool = tool.with_strict(true);
    }
    tool
}

#[cfg(feature = "mcp")]
mod mcp_sources {
    use std::sync::Arc;

    use super::{Entry, Registry, ToolSource, definition, finish, load_error};
    use crate::error::Result;
    use crate::executor::mcp::McpConnection;
    use crate::executor::{McpExecutor, McpHttp, McpServerInfo, McpStdio};

    /// A connected server: its session, the prefix of its tools, and their names now.
    pub(super) struct McpServer {
        connection: Arc<McpConnection>,
        prefix: Option<String>,
        names: Vec<String>,
    }

    impl Registry {
        /// Start an MCP server as a child process (stdio), list its tools and register them.
        /// The connection is shared by its tools and reused across calls; the child is
        /// killed when the registry (and every tool taken from it) is dropped, or cleanly
        /// stopped by [`Registry::close`].
        pub async fn add_mcp_stdio(&mut self, server: McpStdio) -> Result<McpServerInfo> {
            let origin = ToolSource::Mcp(server.label()).to_string();
            let connection = McpConnection::connect_stdio(&server)
                .await
                .map_err(|message| load_error(&origin, None, message))?;
            self.add_mcp(connection, server.name_prefix()).await
        }

        /// Connect to an MCP server over streamable HTTP, list its tools and register them.
        pub async fn add_mcp_http(&mut self, server: McpHttp) -> Result<McpServerInfo> {
            let origin = ToolSource::Mcp(server.url().to_owned()).to_string();
            let connection = McpConnection::connect_http(&server)
                .await
                .map_err(|message| load_error(&origin, None, message))?;
            self.add_mcp(connection, server.name_prefix()).await
        }

        async fn add_mcp(
            &mut self,
            connection: McpConnection,
            prefix: Option<&str>,
        ) -> Result<McpServerInfo> {
            let connection = Arc::new(connection);
            // The listing below is the current one, whatever was announced before it.
            connection.take_tools_changed();
            match self.mcp_entries(&connection, prefix).await {
                Ok(entries) => {
                    let names: Vec<String> =
                        entries.iter().map(|e| e.descriptor.name.clone()).collect();
                    self.entries.extend(entries);
                    self.mcp.push(McpServer {
                        connection: connection.clone(),
                        prefix: prefix.map(str::to_owned),
                        names: names.clone(),
                    });
                    Ok(connection.info(names))
                }
                Err(error) => {
                    connection.close().await;
                    Err(error)
                }
            }
        }

        async fn mcp_entries(
            &self,
            connection: &Arc<McpConnection>,
            prefix: Option<&str>,
        ) -> Result<Vec<Entry>> {
            let source = ToolSource::Mcp(connection.info(Vec::new()).server);
            let label = source.to_string();
            let descriptors = connection
                .descriptors(prefix)
                .await
                .map_err(|message| load_error(&label, None, message))?;
            let mut entries: Vec<Entry> = Vec::with_capacity(descriptors.len());
            for descriptor in descriptors {
                let name = descriptor.name.clone();
                self.check_free(&name, &source)?;
                if entries.iter().any(|e| e.descriptor.name == name) {
                    return Err(load_error(
                        &label,
                        Some(&name),
                        "duplicate tool name: the server lists it twice",
                    ));
                }
                let remote = descriptor
                    .mcp
                    .as_ref()
                    .map_or_else(|| name.clone(), |m| m.tool.clone());
                let (tool, output) = definition(&descriptor)
                    .map_err(|message| load_error(&label, Some(&name), message))?;
                let executor = McpExecutor::new(connection.clone(), remote, output);
                let tool = finish(tool, Some(Arc::new(executor)), &descriptor);
                entries.push(Entry {
                    descriptor,
                    tool,
                    source: source.clone(),
                });
            }
            Ok(entries)
        }

        /// Close every MCP connection (stdio children are asked to exit, then stopped).
        /// Their tools stay registered but fail with a clear error when called.
        pub async fn close(&mut self) {
            for server in self.mcp.drain(..) {
                server.connection.close().await;
            }
        }

        /// List the tools again of every MCP server whose tools may have changed: one that
        /// sent `notifications/tools/list_changed` since it was last listed, and any
        /// stateless (2026-07-28) server. Its tools are replaced where they were (new ones
        /// after them, gone ones removed); every page of `tools/list` is read. Returns
        /// whether any name, description or schema changed. Call it between runs, or
        /// between the steps of a conversation, then hand the agent [`Registry::tools`]
        /// again; within a run, a registry in a `tokio::sync::Mutex` given as
        /// [`crate::RunOptions::tool_updates`] is refreshed before each model call. When listing fails, that server keeps the tools it had and the error
        /// names it.
        pub async fn refresh(&mut self) -> Result<bool> {
            let mut changed = false;
            for index in 0..self.mcp.len() {
                if !self.mcp[index].connection.take_tools_changed() {
                    continue;
                }
                changed |= self.relist(index).await?;
            }
            Ok(changed)
        }

        /// Whether a server announced that its tools changed since they were last listed
        /// (without clearing it; [`Registry::refresh`] does).
        pub fn mcp_tools_changed(&self) -> bool {
            self.mcp
                .iter()
                .any(|server| server.connection.tools_changed_pending())
        }

        async fn relist(&mut self, index: usize) -> Result<bool> {
            let connection = self.mcp[index].connection.clone();
            let prefix = self.mcp[index].prefix.clone();
            let old_names = std::mem::take(&mut self.mcp[index].names);
            let at = self
                .entries
                .iter()
                .position(|e| old_names.contains(&e.descriptor.name))
                .unwrap_or(self.entries.len());
            let (old, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.entries)
                .into_iter()
                .partition(|e| old_names.contains(&e.descriptor.name));
            self.entries = kept;
            match self.mcp_entries(&connection, prefix.as_deref()).await {
                Ok(new) => {
                    let changed = old.len() != new.len()
                        || old
                            .iter()
                            .zip(&new)
                            .any(|(a, b)| a.descriptor != b.descriptor);
                    self.mcp[index].names = new.iter().map(|e| e.descriptor.name.clone()).collect();
                    let at = at.min(self.entries.len());
                    self.entries.splice(at..at, new);
                    Ok(changed)
                }
                Err(error) => {
                    let at = at.min(self.entries.len());
                    self.entries.splice(at..at, old);
                    self.mcp[index].names = old_names;
                    Err(error)
                }
            }
        }
    }
    /// A registry shared with runs ([`crate::RunOptions::tool_updates`]): before each model
    /// call, the MCP servers that announced `notifications/tools/list_changed` are listed
    /// again, and the run takes the registry's tools when any changed. Stateless (2026-07-28)
    /// servers announce nothing, so they are not listed again within a run.
    impl crate::run::ToolUpdates for tokio::sync::Mutex<Registry> {
        fn changed(&self) -> futures::future::BoxFuture<'_, Result<Option<Vec<crate::Tool>>>> {
            Box::pin(async move {
                let mut registry = self.lock().await;
                if !registry.mcp_tools_changed() {
                    return Ok(None);
                }
                Ok(registry.refresh().await?.then(|| registry.tools()))
            })
        }
    }
}
