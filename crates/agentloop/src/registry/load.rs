//! Reading descriptor files: JSON, YAML (one tool per document), and the manifest style
//! (`apiVersion`, `kind: Tool`, `metadata.name`, `spec`); scanning directories for them.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::descriptor::{RawDescriptor, ToolDescriptor};
use crate::error::{Error, Result};

/// A manifest: the descriptor in `spec`, its name in `metadata.name`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: RawDescriptor,
}

/// Manifest metadata; labels, annotations and the like are accepted and ignored.
#[derive(Deserialize)]
struct Metadata {
    name: String,
}

/// The keys that make a document a manifest.
const MANIFEST_KEYS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];

/// The syntax of a descriptor text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One tool per file.
    Json,
    /// One tool per document (documents separated by `---`).
    Yaml,
}

fn format_of(path: &Path) -> Option<Format> {
    match path.extension()?.to_str()? {
        "json" => Some(Format::Json),
        "yaml" | "yml" => Some(Format::Yaml),
        _ => None,
    }
}

/// A parser's complaint, with its position when it gave one.
struct Located {
    message: String,
    line: Option<usize>,
    column: Option<usize>,
}

impl Located {
    fn json(e: &serde_json::Error) -> Self {
        Self::new(
            e.to_string(),
            Some((e.line(), e.column())).filter(|(l, _)| *l > 0),
        )
    }

    fn yaml(e: &serde_yaml_ng::Error) -> Self {
        Self::new(e.to_string(), e.location().map(|l| (l.line(), l.column())))
    }

    fn new(message: String, at: Option<(usize, usize)>) -> Self {
        match at {
            // The position goes into the error's own fields; drop the parser's copy.
            Some((line, column)) => Self {
                message: message.replacen(&format!(" at line {line} column {column}"), "", 1),
                line: Some(line),
                column: Some(column),
            },
            None => Self {
                message,
                line: None,
                column: None,
            },
        }
    }

    fn into_error(self, origin: &str, tool: Option<&str>) -> Error {
        Error::ToolLoad {
            path: origin.to_owned(),
            tool: tool.map(str::to_owned),
            line: self.line,
            column: self.column,
            message: self.message,
        }
    }
}

pub(crate) fn load_error(origin: &str, tool: Option<&str>, message: impl Into<String>) -> Error {
    Error::ToolLoad {
        path: origin.to_owned(),
        tool: tool.map(str::to_owned),
        line: None,
        column: None,
        message: message.into(),
    }
}

/// One document of a file, re-read with a typed target so errors keep their position.
enum Document<'a> {
    Json(&'a str),
    Yaml(&'a str, usize),
}

impl Document<'_> {
    fn parse<T: DeserializeOwned>(&self) -> std::result::Result<T, Located> {
        match *self {
            Document::Json(text) => serde_json::from_str(text).map_err(|e| Located::json(&e)),
            Document::Yaml(text, index) => {
                let Some(doc) = serde_yaml_ng::Deserializer::from_str(text).nth(index) else {
                    return Err(Located::new(
                        format!("YAML document {index} vanished"),
                        None,
                    ));
                };
                T::deserialize(doc).map_err(|e| Located::yaml(&e))
            }
        }
    }
}

/// Read the tool descriptors of one file (`.json`, `.yaml` or `.yml`).
///
/// A JSON file holds one tool; a YAML file holds one tool per document (separate them with
/// `---`). Either may be a plain descriptor or a `kind: Tool` manifest.
pub fn read_descriptors(path: &Path) -> Result<Vec<ToolDescriptor>> {
    let origin = path.display().to_string();
    let format = format_of(path).ok_or_else(|| {
        load_error(
            &origin,
            None,
            "not a tool file: tool files end in .json, .yaml or .yml",
        )
    })?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| load_error(&origin, None, format!("could not read the file: {e}")))?;
    parse_descriptors(&text, format, &origin)
}

/// Parse descriptors from text (for files, see [`read_descriptors`]); `origin` names the
/// text in errors.
pub fn parse_descriptors(text: &str, format: Format, origin: &str) -> Result<Vec<ToolDescriptor>> {
    match format {
        Format::Json => {
            let value: Value = serde_json::from_str(text)
                .map_err(|e| Located::json(&e).into_error(origin, None))?;
            Ok(vec![descriptor(&value, &Document::Json(text), origin)?])
        }
        Format::Yaml => {
            let mut found = Vec::new();
            for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
                let value = Value::deserialize(doc)
                    .map_err(|e| Located::yaml(&e).into_error(origin, None))?;
                // An empty document (a trailing `---`, a file of comments) holds no tool.
                if value.is_null() {
                    continue;
                }
                found.push(descriptor(&value, &Document::Yaml(text, index), origin)?);
            }
            Ok(found)
        }
    }
}

fn descriptor(value: &Value, doc: &Document<'_>, origin: &str) -> Result<ToolDescriptor> {
    let Value::Object(map) = value else {
        return Err(load_error(
            origin,
            None,
            format!(
                "expected a tool (an object), got {}; put several tools in one YAML file as documents separated by `---`",
                kind_of(value)
            ),
        ));
    };
    if MANIFEST_KEYS.iter().any(|k| map.contains_key(*k)) {
        let hint = value.pointer("/metadata/name").and_then(Value::as_str);
        let manifest: Manifest = doc.parse().map_err(|e| e.into_error(origin, hint))?;
        let name = manifest.metadata.name;
        let fail = |message: String| load_error(origin, Some(&name), message);
        if manifest.kind != "Tool" {
            return Err(fail(format!(
                "`kind: {}` is not a tool manifest: expected `kind: Tool`",
                manifest.kind
            )));
        }
        if manifest.api_version.trim().is_empty() {
            return Err(fail("`apiVersion` is empty".to_owned()));
        }
        if let Some(spec_name) = &manifest.spec.name
            && *spec_name != name
        {
            return Err(fail(format!(
                "`spec.name` (`{spec_name}`) differs from `metadata.name`"
            )));
        }
        manifest.spec.into_descriptor(name.clone()).map_err(fail)
    } else {
        let hint = map.get("name").and_then(Value::as_str);
        let raw: RawDescriptor = doc.parse().map_err(|e| e.into_error(origin, hint))?;
        let Some(name) = raw.name.clone() else {
            return Err(load_error(origin, None, "missing field `name`"));
        };
        raw.into_descriptor(name.clone())
            .map_err(|message| load_error(origin, Some(&name), message))
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The tool files under `dir`, recursively, sorted by path. Hidden files and directories
/// (names starting with `.`) are skipped; symbolic links to directories are not followed.
pub fn tool_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    Ok(files)
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let origin = dir.display().to_string();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| load_error(&origin, None, format!("could not read the directory: {e}")))?;
    for entry in entries {
        let entry = entry
            .map_err(|e| load_error(&origin, None, format!("could not read the directory: {e}")))?;
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let file_type = entry.file_type().map_err(|e| {
            load_error(
                &path.display().to_string(),
                None,
                format!("could not stat: {e}"),
            )
        })?;
        if file_type.is_dir() {
            collect(&path, files)?;
        } else if format_of(&path).is_some() && path.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Vec<ToolDescriptor>> {
        parse_descriptors(text, Format::Yaml, "t.yaml")
    }

    #[test]
    fn yaml_documents_are_tools_and_empty_ones_are_skipped() {
        let tools =
            yaml("name: a\n---\n# nothing\n---\nname: b\nmock: {response: 1}\n---\n").unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn typed_errors_in_later_documents_keep_their_line() {
        let err = yaml("name: a\n---\nname: b\ntimeout_ms: soon\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.yaml:4:13: tool `b`: timeout_ms: invalid type: string \"soon\", expected u64"
        );
    }
}
