//! Reading descriptor files: JSON, YAML (one tool per document), the manifest style
//! (`apiVersion`, `kind: Tool`, `metadata.name`, `spec`) and packs (`defaults` and `tools`);
//! scanning directories for them.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::descriptor::{RawDescriptor, ToolDescriptor};
use super::pack::{PACK_KEYS, PackDefaults, RawPack};
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
pub enum Syntax {
    /// One tool per file.
    Json,
    /// One tool per document (documents separated by `---`).
    Yaml,
}

fn format_of(path: &Path) -> Option<Syntax> {
    match path.extension()?.to_str()? {
        "json" => Some(Syntax::Json),
        "yaml" | "yml" => Some(Syntax::Yaml),
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
/// `---`). Either may be a plain descriptor, a `kind: Tool` manifest, or a pack (`defaults`
/// and `tools`), which gives all of its tools.
pub fn read_descriptors(path: &Path) -> Result<Vec<ToolDescriptor>> {
    read_with(path, &PackDefaults::default())
}

fn read_with(path: &Path, defaults: &PackDefaults) -> Result<Vec<ToolDescriptor>> {
    let (format, text) = read_text(path)?;
    parse_with(&text, format, &path.display().to_string(), defaults)
}

fn read_text(path: &Path) -> Result<(Syntax, String)> {
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
    Ok((format, text))
}

/// Parse descriptors from text (for files, see [`read_descriptors`]); `origin` names the
/// text in errors.
pub fn parse_descriptors(text: &str, format: Syntax, origin: &str) -> Result<Vec<ToolDescriptor>> {
    parse_with(text, format, origin, &PackDefaults::default())
}

/// Parse with the defaults of the pack directory the text belongs to.
fn parse_with(
    text: &str,
    format: Syntax,
    origin: &str,
    defaults: &PackDefaults,
) -> Result<Vec<ToolDescriptor>> {
    let mut found = Vec::new();
    for_each_document(text, format, origin, |value, doc| {
        found.extend(descriptors(value, doc, origin, defaults)?);
        Ok(())
    })?;
    Ok(found)
}

/// Call `f` with every non-empty document of the text.
fn for_each_document(
    text: &str,
    format: Syntax,
    origin: &str,
    mut f: impl FnMut(&Value, &Document<'_>) -> Result<()>,
) -> Result<()> {
    match format {
        Syntax::Json => {
            let value: Value = serde_json::from_str(text)
                .map_err(|e| Located::json(&e).into_error(origin, None))?;
            f(&value, &Document::Json(text))
        }
        Syntax::Yaml => {
            for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
                let value = Value::deserialize(doc)
                    .map_err(|e| Located::yaml(&e).into_error(origin, None))?;
                // An empty document (a trailing `---`, a file of comments) holds no tool.
                if value.is_null() {
                    continue;
                }
                f(&value, &Document::Yaml(text, index))?;
            }
            Ok(())
        }
    }
}

/// The tools of one document: one descriptor or manifest, or every tool of a pack.
fn descriptors(
    value: &Value,
    doc: &Document<'_>,
    origin: &str,
    defaults: &PackDefaults,
) -> Result<Vec<ToolDescriptor>> {
    if let Value::Object(map) = value
        && PACK_KEYS.iter().any(|k| map.contains_key(*k))
    {
        return pack(doc, origin, defaults).map(|(_, tools)| tools);
    }
    descriptor(value, doc, origin, defaults).map(|d| vec![d])
}

/// A pack document: its defaults (over `outer`) and its tools, those defaults applied.
fn pack(
    doc: &Document<'_>,
    origin: &str,
    outer: &PackDefaults,
) -> Result<(PackDefaults, Vec<ToolDescriptor>)> {
    let raw: RawPack = doc.parse().map_err(|e| e.into_error(origin, None))?;
    raw.defaults
        .check()
        .map_err(|message| load_error(origin, None, message))?;
    let defaults = raw.defaults.clone().over(outer);
    let tools = raw
        .tools()
        .map_err(|e| load_error(origin, e.tool.as_deref(), e.message))?
        .into_iter()
        .map(|(name, raw)| {
            raw.into_descriptor(name.clone(), &defaults)
                .map_err(|message| load_error(origin, Some(&name), message))
        })
        .collect::<Result<_>>()?;
    Ok((defaults, tools))
}

fn descriptor(
    value: &Value,
    doc: &Document<'_>,
    origin: &str,
    defaults: &PackDefaults,
) -> Result<ToolDescriptor> {
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
        manifest
            .spec
            .into_descriptor(name.clone(), defaults)
            .map_err(fail)
    } else {
        let hint = map.get("name").and_then(Value::as_str);
        let raw: RawDescriptor = doc.parse().map_err(|e| e.into_error(origin, hint))?;
        let Some(name) = raw.name.clone() else {
            return Err(load_error(origin, None, "missing field `name`"));
        };
        raw.into_descriptor(name.clone(), defaults)
            .map_err(|message| load_error(origin, Some(&name), message))
    }
}

pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The names a pack directory's own file may have, at the directory's root.
const PACK_FILES: [&str; 3] = ["pack.yaml", "pack.yml", "pack.json"];

/// The pack file at the root of `dir` (`pack.yaml`, `pack.yml` or `pack.json`), if there is
/// one: its presence makes `dir` a pack directory.
pub fn pack_file(dir: &Path) -> Option<PathBuf> {
    PACK_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

/// Read a pack: a pack file (any tool file; its `defaults` apply to its own `tools`), or a
/// pack directory, whose pack file's `defaults` apply to its own tools and then to every tool
/// file under the directory (in path order). Returns each file with its tools.
pub fn read_pack(path: &Path) -> Result<Vec<(PathBuf, Vec<ToolDescriptor>)>> {
    if !path.is_dir() {
        return Ok(vec![(path.to_owned(), read_descriptors(path)?)]);
    }
    let origin = path.display().to_string();
    let found: Vec<PathBuf> = PACK_FILES
        .iter()
        .map(|name| path.join(name))
        .filter(|p| p.is_file())
        .collect();
    let pack_path = match found.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(load_error(
                &origin,
                None,
                "not a pack directory: it has no `pack.yaml`, `pack.yml` or `pack.json` at its root",
            ));
        }
        several => {
            let names: Vec<String> = several
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            return Err(load_error(
                &origin,
                None,
                format!("several pack files ({}): keep one", names.join(", ")),
            ));
        }
    };
    let (defaults, own) = read_pack_file(&pack_path)?;
    let mut files = vec![(pack_path.clone(), own)];
    for file in tool_files(path)? {
        if file == pack_path {
            continue;
        }
        let tools = read_with(&file, &defaults)?;
        files.push((file, tools));
    }
    Ok(files)
}

/// A pack directory's own file: one pack document (it may hold no tools).
fn read_pack_file(path: &Path) -> Result<(PackDefaults, Vec<ToolDescriptor>)> {
    let origin = path.display().to_string();
    let (format, text) = read_text(path)?;
    let mut found = None;
    for_each_document(&text, format, &origin, |value, doc| {
        if found.is_some() {
            return Err(load_error(
                &origin,
                None,
                "a pack file holds one document: put its tools in `tools`",
            ));
        }
        if !value.is_object() {
            return Err(load_error(
                &origin,
                None,
                format!(
                    "expected a pack (an object with `defaults` and `tools`), got {}",
                    kind_of(value)
                ),
            ));
        }
        found = Some(pack(doc, &origin, &PackDefaults::default())?);
        Ok(())
    })?;
    Ok(found.unwrap_or_default())
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
        parse_descriptors(text, Syntax::Yaml, "t.yaml")
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
