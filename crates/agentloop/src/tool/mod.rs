//! Tools: definitions the model sees, calls it makes, and the handlers that answer them.
//!
//! A [`Tool`] is a definition plus, optionally, a handler. Typed tools derive their JSON Schema
//! from a Rust type with `schemars`; raw tools take a schema value that is checked against the
//! JSON Schema meta-schema.
//!
//! A [`NativeTool`] is defined by a provider: a provider-scoped id and arguments, built with
//! the typed constructors of that provider's module (`provider::anthropic::tools::bash()`).
//! Most run at the provider; the client-side ones (text editor, bash, computer use) are run by
//! you: [`Tool::native`] (or [`crate::AgentBuilder::handler`]) binds a handler to one by the
//! name the model calls it.

mod handler;
pub mod schema;

use std::sync::Arc;
#[cfg(feature = "validation")]
use std::sync::OnceLock;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result, TimeoutKind};
use crate::run::{Approval, ApprovalContext, ApprovalPolicy};

pub use handler::{ToolContext, ToolError, ToolHandler, ToolOutput};
pub use schema::Violation;

/// A function tool as the model sees it: name, description, input schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// Unique name the model calls it by.
    pub name: String,
    /// What it does and when to use it (the model reads this).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object. Kept provider-neutral; adapters shape it.
    pub input_schema: Value,
    /// Ask for strict schema adherence where the provider has it (OpenAI, Anthropic). Used
    /// only where the schema can be made strict without changing what it accepts (see
    /// [`schema::Dialect`]); otherwise the tool is sent non-strict with a warning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

/// A tool the provider defines, the way the Vercel AI SDK's provider tools are: a
/// provider-scoped id (`anthropic.bash`, `openai.web_search`) and arguments in that provider's
/// shape. Build one with the typed constructors of a provider module
/// ([`crate::provider::anthropic::tools`], [`crate::provider::openai::tools`]) or, for a tool
/// they do not know yet, with [`Self::new`]. Each provider maps the ids it knows and refuses
/// the others with [`Error::Unsupported`] naming itself and the id.
///
/// Most run at the provider; the client-side ones (Anthropic's text editor, bash, computer
/// use) are run by you: they carry the name the model calls them by ([`Self::client_name`]),
/// and [`Tool::native`] (or [`crate::AgentBuilder::handler`]) binds a handler to that name.
///
/// ```
/// use agentloop::NativeTool;
/// use agentloop::provider::anthropic::tools;
/// let bash = tools::bash();
/// assert_eq!(bash.id(), "anthropic.bash");
/// assert_eq!(bash.client_name(), Some("bash"));
/// // One no provider module has a constructor for yet:
/// let fetch = NativeTool::new("anthropic.web_fetch", serde_json::json!({"max_uses": 2}));
/// assert_eq!(fetch.args()["max_uses"], 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeTool {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_name: Option<String>,
    #[serde(default, skip_serializing_if = "no_args")]
    args: Value,
}

/// `null` and `{}` both mean "no arguments": left out of a saved request.
fn no_args(args: &Value) -> bool {
    args.is_null() || args.as_object().is_some_and(Map::is_empty)
}

impl NativeTool {
    /// A provider tool by its id (`<provider>.<tool>`) with its arguments (a JSON object, or
    /// `null` for none) in the shape that provider documents.
    pub fn new(id: impl Into<String>, args: Value) -> Self {
        Self {
            id: id.into(),
            client_name: None,
            // One spelling of "none", so a saved request reads back equal.
            args: if no_args(&args) { Value::Null } else { args },
        }
    }

    /// Mark this as a tool you run, which the model calls `name`: bind its handler by that
    /// name.
    pub fn client_side(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Provider-neutral web search with the provider's defaults: Anthropic's web search
    /// tool, OpenAI's `web_search_options`, Gemini's Google Search grounding. Its settings
    /// differ between providers; set them with [`crate::provider::anthropic::tools::web_search`]
    /// or [`crate::provider::openai::tools::web_search`].
    pub fn web_search() -> Self {
        Self::new(WEB_SEARCH, Value::Null)
    }

    /// The provider-scoped id, e.g. `anthropic.code_execution` (`web_search` for
    /// [`Self::web_search`], which every provider with a search maps).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The arguments, in the provider's shape (`null` for none).
    pub fn args(&self) -> &Value {
        &self.args
    }

    /// The name the model calls a client-side native tool by (Anthropic's names: the text
    /// editor is `str_replace_based_edit_tool`, bash `bash`, computer use `computer`); bind a
    /// handler to it with [`crate::AgentBuilder::handler`] or [`Tool::native`]. `None` for the
    /// tools the provider runs itself.
    pub fn client_name(&self) -> Option<&str> {
        self.client_name.as_deref()
    }

    /// The arguments as an object (`None` for no arguments), or a configuration error saying
    /// they must be one: providers merge them into their wire tool.
    pub(crate) fn args_object(&self) -> Result<Option<&Map<String, Value>>> {
        match &self.args {
            Value::Null => Ok(None),
            Value::Object(map) => Ok(Some(map)),
            other => Err(Error::config(format!(
                "the arguments of native tool {} must be a JSON object, not {other}",
                self.id
            ))),
        }
    }

    /// "native tool <id>", the feature an [`Error::Unsupported`] names.
    pub(crate) fn feature(&self) -> String {
        format!("native tool {}", self.id)
    }

    /// For the provider-neutral web search: an error when it carries arguments, which only a
    /// provider's own web search tool knows how to read.
    pub(crate) fn check_neutral(&self) -> Result<()> {
        if no_args(&self.args) {
            return Ok(());
        }
        Err(Error::config(format!(
            "the provider-neutral native tool {} takes no arguments; use a provider's own \
             (e.g. provider::anthropic::tools::web_search or provider::openai::tools::web_search) \
             for its settings",
            self.id
        )))
    }
}

/// The id of the provider-neutral web search ([`NativeTool::web_search`]).
pub(crate) const WEB_SEARCH: &str = "web_search";

/// What goes into a request's tool list.
///
/// A function definition is shared (`Arc`): every run puts its agent's tools into its request,
/// and copying schemas there would cost an allocation per schema node per run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolDefinition {
    /// A tool we run.
    Function(Arc<FunctionDefinition>),
    /// A tool the provider defines (it runs it, or you do for client-side ones).
    Native(NativeTool),
}

impl ToolDefinition {
    /// The function tool's name; `None` for native tools.
    pub fn function_name(&self) -> Option<&str> {
        match self {
            Self::Function(f) => Some(&f.name),
            Self::Native(_) => None,
        }
    }

    /// Whether `tools` holds a client-side native tool the model calls `name`: a function
    /// definition of that name would then be a second definition of one tool.
    pub(crate) fn native_claims(tools: &[ToolDefinition], name: &str) -> bool {
        tools.iter().any(|tool| match tool {
            Self::Native(native) => native.client_name() == Some(name),
            Self::Function(_) => false,
        })
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call some tool (OpenAI `required`, Anthropic `any`).
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Tool {
        /// The tool's name.
        name: String,
    },
}

impl ToolChoice {
    /// Force a specific tool.
    pub fn tool(name: impl Into<String>) -> Self {
        Self::Tool { name: name.into() }
    }
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON.
    pub input: Value,
}

impl ToolCall {
    /// Deserialize the arguments into the tool's input type.
    ///
    /// ```
    /// # use agentloop::ToolCall;
    /// #[derive(serde::Deserialize)]
    /// struct Weather { city: String }
    /// let call = ToolCall { id: "1".into(), name: "get_weather".into(),
    ///                       input: serde_json::json!({"city": "Paris"}) };
    /// assert_eq!(call.parse::<Weather>().unwrap().city, "Paris");
    /// ```
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&self.input).map_err(|e| Error::ToolArgumentParse {
            tool: self.name.clone(),
            message: e.to_string(),
        })
    }
}

/// A tool: its definition, and optionally the handler that runs it. Settings are `with_*`
/// methods that return the tool; getters take the plain name (`name()`, `timeout()`).
///
/// ```
/// use agentloop::Tool;
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// /// Get the current weather for a city.
/// #[derive(Deserialize, JsonSchema)]
/// struct GetWeather {
///     /// City name, e.g. "Paris".
///     city: String,
/// }
///
/// let tool = Tool::function("get_weather", "Current weather for a city", |args: GetWeather| async move {
///     Ok::<_, std::convert::Infallible>(format!("18 °C in {}", args.city))
/// });
/// let tool = tool.with_timeout(std::time::Duration::from_secs(5));
/// assert_eq!(tool.name(), "get_weather");
/// assert_eq!(tool.timeout(), Some(std::time::Duration::from_secs(5)));
/// ```
#[derive(Clone)]
pub struct Tool {
    /// Shared: runs clone their tools, and a schema is a tree of allocations.
    definition: Arc<FunctionDefinition>,
    handler: Option<Arc<dyn ToolHandler>>,
    timeout: Option<Duration>,
    #[cfg(feature = "validation")]
    validator: Arc<OnceLock<std::result::Result<jsonschema::Validator, String>>>,
    /// For typed tools whose schema serde fully enforces (or every typed tool, without the
    /// `validation` feature): deserializing into the type decides validity, and the validator
    /// is only compiled to explain a rejection.
    accepts: Option<Deserializes>,
    /// Answers a client-side native tool: the request's native tool is its definition.
    native: bool,
    /// Whether its calls may run without a person's approval.
    approval: Option<ApprovalPolicy>,
    /// Whether running a call twice does no harm (see [`Tool::with_idempotent`]).
    idempotent: bool,
}

/// A check that arguments deserialize into a tool's type: serde's message when they do not.
type Deserializes = fn(&Value) -> std::result::Result<(), String>;

/// A native tool's input is the provider's to define: whatever the model sent is passed on.
fn any_input(_input: &Value) -> std::result::Result<(), String> {
    Ok(())
}

/// Whether `input` deserializes into `T`; serde's message when it does not.
fn deserializes_into<T: DeserializeOwned>(input: &Value) -> std::result::Result<(), String> {
    T::deserialize(input).map(drop).map_err(|e| e.to_string())
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("definition", &self.definition)
            .field("has_handler", &self.handler.is_some())
            .field("timeout", &self.timeout)
            .field("native", &self.native)
            .field("approval", &self.approval.is_some())
            .finish()
    }
}

impl Tool {
    pub(crate) fn from_definition(definition: FunctionDefinition) -> Self {
        Self {
            definition: Arc::new(definition),
            handler: None,
            timeout: None,
            #[cfg(feature = "validation")]
            validator: Arc::new(OnceLock::new()),
            accepts: None,
            native: false,
            approval: None,
            idempotent: false,
        }
    }

    /// The handler of a client-side native tool (Anthropic's text editor, bash, computer),
    /// bound by the name the model calls it ([`NativeTool::client_name`]). It adds no
    /// definition to the request: the [`NativeTool`] in the request's tools is the one the
    /// model sees. The handler gets the call's input as the model sent it (e.g.
    /// `{"command": "view", "path": "src/lib.rs"}`), and its output is the tool result.
    ///
    /// ```
    /// use agentloop::provider::anthropic::tools;
    /// use agentloop::{Tool, ToolContext, ToolError, ToolOutput};
    /// let bash = Tool::native("bash", |_ctx: ToolContext, input: serde_json::Value| async move {
    ///     Ok::<_, ToolError>(ToolOutput::text(format!("would run {}", input["command"])))
    /// });
    /// assert!(bash.is_native());
    /// assert_eq!(tools::bash().client_name(), Some(bash.name()));
    /// ```
    pub fn native(name: impl Into<String>, handler: impl ToolHandler) -> Self {
        Self::native_slot(name).with_handler(handler)
    }

    /// [`Self::native`] before its handler is attached.
    pub(crate) fn native_slot(name: impl Into<String>) -> Self {
        let mut tool = Self::from_definition(FunctionDefinition {
            name: name.into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            strict: false,
        });
        tool.accepts = Some(any_input);
        tool.native = true;
        tool
    }

    /// Whether this answers a client-side native tool (see [`Self::native`]); such a tool
    /// sends no definition of its own.
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// A definition-only tool whose schema comes from `T`. The name defaults to the type's
    /// name in snake_case and the description to its doc comment; set both with the builder.
    pub fn from_type<T: JsonSchema>() -> Self {
        let (schema, description) = schema::schema_for::<T>();
        Self::from_definition(FunctionDefinition {
            name: schema::snake_case(&T::schema_name()),
            description: description.unwrap_or_default(),
            input_schema: schema,
            strict: false,
        })
    }

    /// A definition-only tool from a raw JSON Schema, checked against the meta-schema.
    pub fn from_schema(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<Self> {
        let name = name.into();
        schema::check_input_schema(&name, &input_schema)?;
        Ok(Self::from_definition(FunctionDefinition {
            name,
            description: description.into(),
            input_schema,
            strict: false,
        }))
    }

    /// A typed function tool: `handler` receives the deserialized arguments. Its output is
    /// converted with [`ToolOutput`]: strings become text, other values JSON text.
    pub fn function<T, R, E, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + Send + 'static,
        E: std::fmt::Display + Send + 'static,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<R, E>> + Send + 'static,
    {
        Self::function_with_context(name, description, move |_ctx: ToolContext, input: T| {
            handler(input)
        })
    }

    /// A typed function tool whose handler also gets the [`ToolContext`] (call id,
    /// cancellation, shared state).
    pub fn function_with_context<T, R, E, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + Send + 'static,
        E: std::fmt::Display + Send + 'static,
        F: Fn(ToolContext, T) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<R, E>> + Send + 'static,
    {
        let description = description.into();
        let mut tool = Self::from_type::<T>().with_name(name);
        if !cfg!(feature = "validation") || schema::serde_enforces(&tool.definition.input_schema) {
            tool.accepts = Some(deserializes_into::<T>);
        }
        if !description.is_empty() {
            tool = tool.with_description(description);
        }
        tool.with_handler(handler::TypedHandler::new(handler))
    }

    /// Set the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.definition).name = name.into();
        self
    }

    /// Set the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.definition).description = description.into();
        self
    }

    /// Ask for strict schema adherence where the provider supports it (OpenAI, Anthropic) and
    /// the schema allows it (a map, `allOf` or `minLength`, say, sends the tool non-strict, with a
    /// `tracing` warning naming the keyword and its path).
    pub fn with_strict(mut self, strict: bool) -> Self {
        Arc::make_mut(&mut self.definition).strict = strict;
        self
    }

    /// Attach or replace the handler.
    pub fn with_handler(mut self, handler: impl ToolHandler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Attach a shared handler.
    pub fn with_shared_handler(mut self, handler: Arc<dyn ToolHandler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Per-tool timeout (the run's default applies otherwise). Like any async timeout it takes
    /// effect where the tool awaits: run blocking work with `tokio::task::spawn_blocking`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Whether every call needs a person's approval before it runs (`false` removes any
    /// approval policy). A run stops with [`crate::RunStopReason::AwaitingApproval`] for such
    /// calls; see [`crate::run::PausedRun`].
    pub fn with_approval_required(mut self, needed: bool) -> Self {
        self.approval = needed
            .then(|| ApprovalPolicy::always(format!("tool `{}` needs approval", self.name())));
        self
    }

    /// Decide per call whether it runs, needs approval, or is refused (see [`ApprovalPolicy`]).
    ///
    /// ```
    /// use agentloop::Tool;
    /// use agentloop::run::Approval;
    /// let schema = serde_json::json!({"type": "object", "properties": {"amount": {"type": "number"}}});
    /// let pay = Tool::from_schema("pay", "Pay an invoice", schema)?.with_approval_policy(|ctx| {
    ///     match ctx.call.input["amount"].as_f64() {
    ///         Some(amount) if amount > 100.0 => Approval::Require(format!("pays {amount}")),
    ///         _ => Approval::Allow,
    ///     }
    /// });
    /// # let _ = pay;
    /// # Ok::<(), agentloop::Error>(())
    /// ```
    pub fn with_approval_policy(
        mut self,
        policy: impl Fn(&ApprovalContext<'_>) -> Approval + Send + Sync + 'static,
    ) -> Self {
        self.approval = Some(ApprovalPolicy::new(policy));
        self
    }

    /// The tool's approval policy, if it has one.
    pub fn approval(&self) -> Option<&ApprovalPolicy> {
        self.approval.as_ref()
    }

    /// Whether running a call twice does no harm. A durable run whose process died while this
    /// tool ran runs the call again when it resumes; a tool not marked idempotent (the
    /// default) gets an [`crate::run::ToolOutcome::Interrupted`] outcome instead, which the model
    /// sees. See [`crate::run::RunStore`].
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Whether the tool is marked idempotent ([`Self::with_idempotent`]).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// The tool's description.
    pub fn description(&self) -> &str {
        &self.definition.description
    }

    /// The definition sent to the model.
    pub fn definition(&self) -> &FunctionDefinition {
        &self.definition
    }

    /// The handler, if one is attached.
    pub fn handler(&self) -> Option<&Arc<dyn ToolHandler>> {
        self.handler.as_ref()
    }

    /// The per-tool timeout, if set.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Check arguments against the input schema; the schema is compiled once per tool.
    /// Returns every violation with its JSON pointer.
    ///
    /// Without the `validation` feature, a typed tool's arguments are checked by deserializing
    /// them into its type (one violation, serde's message, at the root) and a raw schema's are
    /// not checked.
    pub fn validate(&self, input: &Value) -> std::result::Result<(), Vec<Violation>> {
        let rejected = match self.accepts.map(|accepts| accepts(input)) {
            Some(Ok(())) => return Ok(()),
            Some(Err(message)) => Some(message),
            None => None,
        };
        self.explain(input, rejected)
    }

    /// The schema's violations by `input`; serde's rejection only says that there are some.
    #[cfg(feature = "validation")]
    fn explain(
        &self,
        input: &Value,
        _rejected: Option<String>,
    ) -> std::result::Result<(), Vec<Violation>> {
        let compiled = self
            .validator
            .get_or_init(|| schema::compile(&self.definition.input_schema));
        match compiled {
            Ok(validator) => schema::violations(validator, input),
            // A schema we cannot compile cannot reject anything; it was reported at creation.
            Err(_) => Ok(()),
        }
    }

    /// Without a JSON Schema validator, serde's rejection is the only violation known.
    #[cfg(not(feature = "validation"))]
    fn explain(
        &self,
        _input: &Value,
        rejected: Option<String>,
    ) -> std::result::Result<(), Vec<Violation>> {
        match rejected {
            Some(message) => Err(vec![Violation {
                path: String::new(),
                message,
            }]),
            None => Ok(()),
        }
    }
}

impl From<&Tool> for ToolDefinition {
    fn from(tool: &Tool) -> Self {
        ToolDefinition::Function(Arc::clone(&tool.definition))
    }
}

impl From<FunctionDefinition> for ToolDefinition {
    fn from(definition: FunctionDefinition) -> Self {
        ToolDefinition::Function(Arc::new(definition))
    }
}

/// How long [`Tool::execute`] waits for a tool that sets no timeout of its own: a run's default
/// tool timeout.
pub const DEFAULT_EXECUTE_TIMEOUT: Duration = Duration::from_secs(30);

impl Tool {
    /// Run the tool directly, outside a run (as a model's call would run it): `input` is checked
    /// against the input schema (`null` counts as `{}`), the tool's timeout applies
    /// ([`DEFAULT_EXECUTE_TIMEOUT`] when it sets none), and the handler's cancellation token
    /// fires when the call ends.
    ///
    /// Failures are typed: [`Error::ToolArgumentParse`] for arguments that do not fit,
    /// [`Error::ToolExecution`] when the handler fails, panics or is missing, and
    /// [`Error::Timeout`] with [`TimeoutKind::Tool`].
    pub async fn execute(&self, input: Value) -> Result<ToolOutput> {
        use futures::FutureExt;

        let tool = self.name();
        let bad_arguments = |message: String| Error::ToolArgumentParse {
            tool: tool.to_owned(),
            message,
        };
        let input = match input {
            Value::Null => Value::Object(Default::default()),
            Value::Object(map) => Value::Object(map),
            other => {
                return Err(bad_arguments(format!(
                    "the arguments must be a JSON object, got {other}"
                )));
            }
        };
        let failed = |message: String| Error::ToolExecution {
            tool: tool.to_owned(),
            message,
        };
        let explain = |violations: Vec<Violation>| {
            let each: Vec<String> = violations.iter().map(ToString::to_string).collect();
            bad_arguments(each.join("; "))
        };
        self.validate(&input).map_err(explain)?;
        let handler = self.handler().ok_or_else(|| {
            failed("it has no handler; attach one with `Tool::handler` to run it".to_owned())
        })?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let _cancel_on_exit = cancel.clone().drop_guard();
        let ctx = ToolContext::new(format!("direct_{tool}"), tool, cancel, None);
        let after = self.timeout.unwrap_or(DEFAULT_EXECUTE_TIMEOUT);
        // A panicking handler is the handler's failure, as it is in a run.
        let call = std::panic::AssertUnwindSafe(handler.call(ctx, input)).catch_unwind();
        match tokio::time::timeout(after, call).await {
            Err(_) => Err(Error::Timeout {
                kind: TimeoutKind::Tool,
                after,
            }),
            Ok(Err(panic)) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_owned());
                Err(failed(format!("the tool panicked: {message}")))
            }
            Ok(Ok(Ok(output))) => Ok(output),
            Ok(Ok(Err(ToolError::Failed(message)))) => Err(failed(message)),
            Ok(Ok(Err(ToolError::InputRequired(request)))) => Err(failed(format!(
                "the tool asks a person for input (\"{}\"), which a direct call cannot answer",
                request.message
            ))),
            Ok(Ok(Err(ToolError::InvalidArguments(violations)))) => Err(explain(violations)),
        }
    }
}
