//! Tools on Gemini: function declarations from our tool schemas, and Gemini's own tools
//! (Google Search grounding, code execution, URL context, File Search) as native tools.
//!
//! Function parameters go out as `parametersJsonSchema` (Gemini API reference,
//! `FunctionDeclaration`), which takes JSON Schema instead of the older OpenAPI subset in
//! `parameters`, compiled to Gemini's subset ([`crate::tool::schema::gemini`]: `$ref`s
//! inlined, keywords it does not know dropped). What it cannot express is refused before
//! sending: parameters that are not an object schema, and recursive types.
//!
//! ```
//! use agentloop::provider::gemini::tools;
//! assert_eq!(tools::google_search().id(), "gemini.google_search");
//! assert_eq!(tools::code_execution().id(), "gemini.code_execution");
//! ```

use serde_json::{Map, Value, json};

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::tool::{FunctionDefinition, NativeTool, ToolDefinition, WEB_SEARCH};

const GOOGLE_SEARCH: &str = "gemini.google_search";
const CODE_EXECUTION: &str = "gemini.code_execution";
const URL_CONTEXT: &str = "gemini.url_context";
const FILE_SEARCH: &str = "gemini.file_search";

/// Grounding with Google Search (`{"googleSearch": {}}`); its results come back as the
/// response's `groundingMetadata` native block.
pub fn google_search() -> NativeTool {
    NativeTool::new(GOOGLE_SEARCH, Value::Null)
}

/// Python code execution on Google's side (`{"codeExecution": {}}`); its `executableCode` and
/// `codeExecutionResult` parts come back as native blocks.
pub fn code_execution() -> NativeTool {
    NativeTool::new(CODE_EXECUTION, Value::Null)
}

/// Let the model read URLs named in the prompt (`{"urlContext": {}}`).
pub fn url_context() -> NativeTool {
    NativeTool::new(URL_CONTEXT, Value::Null)
}

/// File Search over the named stores (`{"fileSearch": {"fileSearchStoreNames": [...]}}`).
pub fn file_search(store_names: impl IntoIterator<Item = impl Into<String>>) -> NativeTool {
    let names: Vec<String> = store_names.into_iter().map(Into::into).collect();
    NativeTool::new(FILE_SEARCH, json!({ "fileSearchStoreNames": names }))
}

/// The request's `tools`: one entry with every function declaration, then one per native tool.
pub(super) fn wire_tools(tools: &[ToolDefinition]) -> Result<Vec<Value>> {
    let mut declarations = Vec::new();
    let mut natives = Vec::new();
    for tool in tools {
        match tool {
            ToolDefinition::Function(function) => declarations.push(declaration(function)?),
            ToolDefinition::Native(native) => natives.push(native_tool(native)?),
        }
    }
    let mut out = Vec::new();
    if !declarations.is_empty() {
        out.push(json!({ "functionDeclarations": declarations }));
    }
    out.extend(natives);
    Ok(out)
}

fn declaration(function: &FunctionDefinition) -> Result<Value> {
    let mut out = Map::new();
    out.insert("name".into(), function.name.clone().into());
    if !function.description.is_empty() {
        out.insert("description".into(), function.description.clone().into());
    }
    match &function.input_schema {
        Value::Null => {}
        Value::Object(schema) if schema.is_empty() => {}
        Value::Object(schema) => {
            let kind = schema.get("type");
            let is_object = kind.is_none_or(|t| t == "object");
            if !is_object {
                return Err(Error::InvalidToolSchema {
                    tool: function.name.clone(),
                    message: format!(
                        "Gemini takes function parameters as an object schema (\"type\": \"object\"), not {}; wrap the value in an object property",
                        kind.map(Value::to_string).unwrap_or_default()
                    ),
                });
            }
            let schema = crate::tool::schema::gemini(&function.input_schema).map_err(|why| {
                Error::InvalidToolSchema {
                    tool: function.name.clone(),
                    message: format!(
                        "{why}; Gemini cannot take it (give a recursive type a fixed depth)"
                    ),
                }
            })?;
            out.insert("parametersJsonSchema".into(), schema);
        }
        other => {
            return Err(Error::InvalidToolSchema {
                tool: function.name.clone(),
                message: format!("the input schema must be a JSON object, not {other}"),
            });
        }
    }
    Ok(Value::Object(out))
}

fn native_tool(tool: &NativeTool) -> Result<Value> {
    let key = match tool.id() {
        GOOGLE_SEARCH => "googleSearch",
        WEB_SEARCH => {
            tool.check_neutral()?;
            "googleSearch"
        }
        CODE_EXECUTION => "codeExecution",
        URL_CONTEXT => "urlContext",
        FILE_SEARCH => "fileSearch",
        _ => {
            return Err(Error::Unsupported {
                provider: PROVIDER_NAME.to_owned(),
                feature: format!(
                    "{} (Gemini's native tools are gemini.google_search, gemini.code_execution, gemini.url_context and gemini.file_search)",
                    tool.feature()
                ),
            });
        }
    };
    let args = tool.args_object()?.map_or_else(
        || Value::Object(Map::new()),
        |args| Value::Object(args.clone()),
    );
    Ok(json!({ key: args }))
}
