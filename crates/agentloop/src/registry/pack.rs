//! Packs: several tools in one document (a `tools` list, or a map from name to tool) with
//! `defaults` they share, or a directory whose `pack.yaml` gives the defaults of every tool file
//! under it.

use std::collections::BTreeMap;

use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use super::descriptor::{RawDescriptor, ToolMode};

/// What a pack's tools share. A tool's own value always wins.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PackDefaults {
    /// The mode of tools that set none and have the section it runs from.
    #[serde(default)]
    mode: Option<ToolMode>,
    #[serde(default, alias = "timeoutMs")]
    timeout_ms: Option<u64>,
    /// Relative endpoints are resolved against it (URL rules: keep the trailing `/`).
    #[serde(default, alias = "baseUrl")]
    base_url: Option<String>,
    /// Sent by every HTTP tool, unless it sets a header of the same name.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The hosts of HTTP tools that list none.
    #[serde(default, alias = "allowedHosts")]
    allowed_hosts: Vec<String>,
}

impl PackDefaults {
    /// Problems found before any tool is read.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.timeout_ms == Some(0) {
            return Err("`defaults.timeout_ms` must be greater than 0".to_owned());
        }
        if let Some(base) = &self.base_url {
            let url = Url::parse(base)
                .map_err(|e| format!("`defaults.base_url` `{base}` is not a valid URL: {e}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!(
                    "`defaults.base_url` must be http or https, got `{}`",
                    url.scheme()
                ));
            }
        }
        Ok(())
    }

    /// These defaults layered over `outer` (a pack file inside a pack directory): each value
    /// set here wins, headers are merged.
    pub(crate) fn over(self, outer: &PackDefaults) -> PackDefaults {
        let mut headers = outer.headers.clone();
        for (name, value) in self.headers {
            headers.retain(|k, _| !k.eq_ignore_ascii_case(&name));
            headers.insert(name, value);
        }
        PackDefaults {
            mode: self.mode.or(outer.mode),
            timeout_ms: self.timeout_ms.or(outer.timeout_ms),
            base_url: self.base_url.or_else(|| outer.base_url.clone()),
            headers,
            allowed_hosts: if self.allowed_hosts.is_empty() {
                outer.allowed_hosts.clone()
            } else {
                self.allowed_hosts
            },
        }
    }

    /// Fill in what the descriptor leaves out. Expects its aliases folded already.
    pub(crate) fn apply(&self, raw: &mut RawDescriptor) -> Result<(), String> {
        if raw.mode.is_none()
            && let Some(mode) = self.mode
            && raw.has_section_for(mode)
        {
            raw.mode = Some(mode);
        }
        if raw.timeout_ms.is_none() {
            raw.timeout_ms = self.timeout_ms;
        }
        let Some(http) = raw.http.as_mut() else {
            return Ok(());
        };
        if let Some(base) = &self.base_url
            && Url::parse(&http.url).is_err()
        {
            let joined = Url::parse(base)
                .and_then(|base| base.join(&http.url))
                .map_err(|e| {
                    format!(
                        "the endpoint `{}` does not resolve against `defaults.base_url` `{base}`: {e}",
                        http.url
                    )
                })?;
            http.url = joined.to_string();
        }
        for (name, value) in &self.headers {
            if !http.headers.keys().any(|k| k.eq_ignore_ascii_case(name)) {
                http.headers.insert(name.clone(), value.clone());
            }
        }
        if http.allowed_hosts.is_empty() {
            http.allowed_hosts = self.allowed_hosts.clone();
        }
        Ok(())
    }
}

/// The keys that make a document a pack (no descriptor has them).
pub(crate) const PACK_KEYS: [&str; 2] = ["tools", "defaults"];

/// A pack document as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPack {
    // Describe the pack to its readers; accepted so that typos elsewhere are still caught.
    #[serde(default)]
    #[expect(dead_code, reason = "read by people, not by the loader")]
    name: Option<String>,
    #[serde(default)]
    #[expect(dead_code, reason = "read by people, not by the loader")]
    description: Option<String>,
    #[serde(default)]
    #[expect(dead_code, reason = "read by people, not by the loader")]
    version: Option<Value>,
    #[serde(default)]
    pub(crate) defaults: PackDefaults,
    #[serde(default)]
    tools: Value,
}

/// A pack tool that could not be read: its name when known, and the problem.
pub(crate) struct PackToolError {
    pub(crate) tool: Option<String>,
    pub(crate) message: String,
}

impl RawPack {
    /// The tools with their names, in the order written.
    pub(crate) fn tools(self) -> Result<Vec<(String, RawDescriptor)>, PackToolError> {
        let fail = |tool: Option<String>, message: String| PackToolError { tool, message };
        match self.tools {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    let hint = item.get("name").and_then(Value::as_str).map(str::to_owned);
                    let mut raw = RawDescriptor::deserialize(item)
                        .map_err(|e| fail(hint.clone(), e.to_string()))?;
                    let name = raw.name.take().ok_or_else(|| {
                        fail(None, format!("`tools[{index}]`: missing field `name`"))
                    })?;
                    Ok((name, raw))
                })
                .collect(),
            Value::Object(map) => map
                .into_iter()
                .map(|(key, item)| {
                    let mut raw = RawDescriptor::deserialize(item)
                        .map_err(|e| fail(Some(key.clone()), e.to_string()))?;
                    if let Some(name) = raw.name.take()
                        && name != key
                    {
                        return Err(fail(
                            Some(key),
                            format!("`name` (`{name}`) differs from its key in `tools`"),
                        ));
                    }
                    Ok((key, raw))
                })
                .collect(),
            other => Err(fail(
                None,
                format!(
                    "`tools` must be a list of tools or a map from name to tool, got {}",
                    super::load::kind_of(&other)
                ),
            )),
        }
    }
}
