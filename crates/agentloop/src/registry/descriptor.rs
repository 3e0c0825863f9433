//! Tool descriptors: everything needed to show a tool to a model and to run it, as data.
//!
//! A descriptor is what a tool file holds (the [`registry`](crate::registry) module docs give
//! the file format) and what [`crate::registry::Registry::descriptors`] lists, whatever the
//! tool's source.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::pack::PackDefaults;

/// A tool as data: name, description, schemas, how it runs, and its timeout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawDescriptor", into = "RawDescriptor")]
pub struct ToolDescriptor {
    /// Unique name the model calls it by.
    pub name: String,
    /// What it does and when to use it (the model reads this).
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// JSON Schema every successful result must match, when given.
    pub output_schema: Option<Value>,
    /// How the tool runs.
    pub mode: ToolMode,
    /// Canned answers, for `mode: mock` (may be present in other modes, to switch back).
    pub mock: Option<MockSpec>,
    /// The endpoint, for `mode: http` (may be present in other modes, to switch back).
    pub http: Option<HttpSpec>,
    /// The MCP server the tool lives on, for `mode: mcp` (set by the registry; MCP tools are
    /// listed from their server, not written in files).
    pub mcp: Option<McpSource>,
    /// Per-call timeout in milliseconds (the run's default applies otherwise).
    pub timeout_ms: Option<u64>,
    /// Every call needs a person's approval before it runs (see
    /// [`crate::Tool::with_approval_required`]).
    pub needs_approval: bool,
}

impl ToolDescriptor {
    /// A function-mode descriptor (its handler is registered in code) with an empty object
    /// schema.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: empty_object_schema(),
            output_schema: None,
            mode: ToolMode::Function,
            mock: None,
            http: None,
            mcp: None,
            timeout_ms: None,
            needs_approval: false,
        }
    }

    /// The timeout as a duration.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_ms.map(Duration::from_millis)
    }
}

/// How a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// An in-process handler registered in code.
    Function,
    /// Canned answers from the descriptor's `mock` section.
    Mock,
    /// A POST (or the configured method) of the arguments to the `http` endpoint. Files may
    /// also say `live`, PromptKit's name for it.
    #[serde(alias = "live")]
    Http,
    /// A tool of a connected MCP server.
    Mcp,
}

impl ToolMode {
    /// The name used in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Function => "function",
            Self::Mock => "mock",
            Self::Http => "http",
            Self::Mcp => "mcp",
        }
    }
}

impl std::fmt::Display for ToolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Canned answers of a mock tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawMock", into = "RawMock")]
pub enum MockSpec {
    /// The same JSON value for every call (a string is returned as plain text).
    Response(Value),
    /// A minijinja template rendered with the arguments: each top-level argument is a
    /// variable, and `args` is the whole arguments object. Output that parses as JSON is the
    /// JSON result; anything else is returned as text.
    Template(String),
    /// One response per call, in order.
    Sequence {
        /// The responses.
        responses: Vec<Value>,
        /// What happens once every response has been used.
        on_exhausted: OnExhausted,
    },
}

/// What a scripted mock does after its last response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// Keep answering with the last response.
    #[default]
    RepeatLast,
    /// Answer with an error result.
    Error,
}

/// An HTTP endpoint that runs a tool.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSpec {
    /// The endpoint (http or https).
    pub url: String,
    /// The method; the arguments are the JSON body (for `GET`, too).
    #[serde(default = "default_method")]
    pub method: String,
    /// Request headers. Values may reference environment variables as `${NAME}` (write `$$`
    /// for a literal `$`), so secrets stay out of files.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// When not empty, the endpoint's host must be one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
}

impl HttpSpec {
    /// A POST endpoint with no headers.
    pub fn post(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            method: default_method(),
            headers: BTreeMap::new(),
            allowed_hosts: Vec::new(),
        }
    }

    /// Add a header (the value may reference `${VAR}`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

impl std::fmt::Debug for HttpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may hold secrets written inline; only their names are shown.
        let headers: Vec<&str> = self.headers.keys().map(String::as_str).collect();
        f.debug_struct("HttpSpec")
            .field("url", &self.url)
            .field("method", &self.method)
            .field("headers", &headers)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

fn default_method() -> String {
    "POST".to_owned()
}

/// Where an MCP tool lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSource {
    /// The server: its command line (stdio) or URL (streamable HTTP).
    pub server: String,
    /// The tool's name on that server (it may be registered under a prefixed name).
    pub tool: String,
}

/// `{"type": "object", "properties": {}}`: the schema of a tool without arguments.
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// The descriptor as written in files: every field optional, so that what is missing or
/// contradictory is reported with the tool's name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDescriptor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    #[serde(
        default,
        alias = "inputSchema",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) input_schema: Option<Value>,
    #[serde(
        default,
        alias = "outputSchema",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<ToolMode>,
    // Kept raw so that its problems are reported with the tool's name, after parsing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mock: Option<RawMock>,
    // PromptKit's flat spellings of `mock.response`, `mock.template` and `http.url`; folded
    // into their sections by `fold_aliases`, never written back.
    #[serde(default, rename = "mockResponse", skip_serializing)]
    pub(crate) mock_response: Option<Value>,
    #[serde(default, rename = "mockTemplate", skip_serializing)]
    pub(crate) mock_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) http: Option<HttpSpec>,
    #[serde(default, skip_serializing)]
    pub(crate) endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mcp: Option<McpSource>,
    #[serde(default, alias = "timeoutMs", skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    #[serde(
        default,
        alias = "needsApproval",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub(crate) needs_approval: bool,
}

impl RawDescriptor {
    /// Move the flat PromptKit fields (`mockResponse`, `mockTemplate`, `endpoint`) into the
    /// sections they stand for. Giving both spellings of one thing is an error rather than a
    /// silent choice.
    pub(crate) fn fold_aliases(&mut self) -> Result<(), String> {
        let response = self.mock_response.take();
        let template = self.mock_template.take();
        if response.is_some() || template.is_some() {
            if response.is_some() && template.is_some() {
                return Err("`mockResponse` and `mockTemplate` are both given: keep one".to_owned());
            }
            if self.mock.is_some() {
                let given = if response.is_some() {
                    "mockResponse"
                } else {
                    "mockTemplate"
                };
                return Err(format!(
                    "`{given}` and a `mock` section are both given: keep one"
                ));
            }
            self.mock = Some(RawMock {
                response,
                template,
                ..RawMock::default()
            });
        }
        if let Some(url) = self.endpoint.take() {
            if self.http.is_some() {
                return Err(
                    "`endpoint` and an `http` section are both given: put the URL in `http.url`"
                        .to_owned(),
                );
            }
            self.http = Some(HttpSpec::post(url));
        }
        Ok(())
    }

    /// Whether the section `mode` runs from is present (after [`Self::fold_aliases`]).
    pub(crate) fn has_section_for(&self, mode: ToolMode) -> bool {
        match mode {
            ToolMode::Function => true,
            ToolMode::Mock => self.mock.is_some(),
            ToolMode::Http => self.http.is_some(),
            ToolMode::Mcp => self.mcp.is_some(),
        }
    }

    /// Check the parts against each other and settle the mode, with a pack's defaults for
    /// what the descriptor leaves out. `name` is the tool's name, known by now (from the
    /// descriptor, the manifest's metadata or the pack's key).
    pub(crate) fn into_descriptor(
        mut self,
        name: String,
        defaults: &PackDefaults,
    ) -> Result<ToolDescriptor, String> {
        if name.trim().is_empty() {
            return Err("the tool name is empty".to_owned());
        }
        self.fold_aliases()?;
        defaults.apply(&mut self)?;
        let mode = match self.mode {
            Some(mode) => mode,
            None => match (&self.mock, &self.http, &self.mcp) {
                (None, None, None) => ToolMode::Function,
                (Some(_), None, None) => ToolMode::Mock,
                (None, Some(_), None) => ToolMode::Http,
                (None, None, Some(_)) => ToolMode::Mcp,
                _ => {
                    return Err(
                        "several executors are configured (`mock`, `http`, `mcp`): say which one runs the tool with `mode`"
                            .to_owned(),
                    );
                }
            },
        };
        let missing = match mode {
            ToolMode::Mock if self.mock.is_none() => Some("mock"),
            ToolMode::Http if self.http.is_none() => Some("http"),
            ToolMode::Mcp if self.mcp.is_none() => Some("mcp"),
            _ => None,
        };
        if let Some(section) = missing {
            let (article, what) = match mode {
                ToolMode::Mock => ("a", "the canned response"),
                ToolMode::Http => ("an", "the endpoint (`url`)"),
                _ => ("an", "the server"),
            };
            return Err(format!(
                "`mode: {mode}` needs {article} `{section}` section describing {what}"
            ));
        }
        if let Some(0) = self.timeout_ms {
            return Err("`timeout_ms` must be greater than 0".to_owned());
        }
        let mock = self.mock.map(MockSpec::try_from).transpose()?;
        Ok(ToolDescriptor {
            name,
            description: self.description.unwrap_or_default(),
            input_schema: self.input_schema.unwrap_or_else(empty_object_schema),
            output_schema: self.output_schema,
            mode,
            mock,
            http: self.http,
            mcp: self.mcp,
            timeout_ms: self.timeout_ms,
            needs_approval: self.needs_approval,
        })
    }
}

impl TryFrom<RawDescriptor> for ToolDescriptor {
    type Error = String;

    fn try_from(mut raw: RawDescriptor) -> Result<Self, String> {
        let name = raw.name.take().ok_or("missing field `name`")?;
        raw.into_descriptor(name, &PackDefaults::default())
    }
}

impl From<ToolDescriptor> for RawDescriptor {
    fn from(d: ToolDescriptor) -> Self {
        Self {
            name: Some(d.name),
            description: Some(d.description),
            input_schema: Some(d.input_schema),
            output_schema: d.output_schema,
            mode: Some(d.mode),
            mock: d.mock.map(RawMock::from),
            mock_response: None,
            mock_template: None,
            http: d.http,
            endpoint: None,
            mcp: d.mcp,
            timeout_ms: d.timeout_ms,
            needs_approval: d.needs_approval,
        }
    }
}

/// The `mock` section as written: exactly one of `response`, `template`, `sequence`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sequence: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_exhausted: Option<OnExhausted>,
}

impl TryFrom<RawMock> for MockSpec {
    type Error = String;

    fn try_from(raw: RawMock) -> Result<Self, String> {
        let given: Vec<&str> = [
            raw.response.as_ref().map(|_| "`response`"),
            raw.template.as_ref().map(|_| "`template`"),
            raw.sequence.as_ref().map(|_| "`sequence`"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() != 1 {
            return Err(format!(
                "`mock` needs exactly one of `response`, `template` or `sequence`, found {}",
                if given.is_empty() {
                    "none".to_owned()
                } else {
                    given.join(" and ")
                }
            ));
        }
        if raw.on_exhausted.is_some() && raw.sequence.is_none() {
            return Err("`on_exhausted` only applies to a `sequence`".to_owned());
        }
        if let Some(response) = raw.response {
            return Ok(Self::Response(response));
        }
        if let Some(template) = raw.template {
            return Ok(Self::Template(template));
        }
        let responses = raw.sequence.unwrap_or_default();
        if responses.is_empty() {
            return Err("the mock `sequence` is empty".to_owned());
        }
        Ok(Self::Sequence {
            responses,
            on_exhausted: raw.on_exhausted.unwrap_or_default(),
        })
    }
}

impl From<MockSpec> for RawMock {
    fn from(spec: MockSpec) -> Self {
        match spec {
            MockSpec::Response(response) => Self {
                response: Some(response),
                ..Self::default()
            },
            MockSpec::Template(template) => Self {
                template: Some(template),
                ..Self::default()
            },
            MockSpec::Sequence {
                responses,
                on_exhausted,
            } => Self {
                sequence: Some(responses),
                on_exhausted: Some(on_exhausted),
                ..Self::default()
            },
        }
    }
}
