//! The HTTP executor: the arguments as a JSON request to an endpoint; a 2xx JSON body is the
//! result, anything else an error result the model can read.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::Value;

use super::OutputCheck;
use crate::registry::HttpSpec;
use crate::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};

/// Bodies larger than this are refused rather than buffered.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// How much of a body an error result quotes.
const EXCERPT_CHARS: usize = 200;
/// Same-origin redirects followed at most.
const MAX_REDIRECTS: usize = 5;

/// Sends the arguments as JSON to an endpoint.
pub struct HttpExecutor {
    tool: String,
    client: reqwest::Client,
    method: Method,
    url: Url,
    headers: HeaderMap,
    timeout: Duration,
    output: Option<Arc<OutputCheck>>,
}

impl std::fmt::Debug for HttpExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may hold secrets from the environment: names only.
        let headers: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("HttpExecutor")
            .field("tool", &self.tool)
            .field("method", &self.method)
            .field("url", &self.url.as_str())
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The client every HTTP tool of a registry shares (one connection pool).
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(redirect_policy())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))
}

/// Follow redirects only within the endpoint's origin (scheme, host and port), so a tool
/// cannot be bounced to another host with its headers.
pub(crate) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.follow();
        };
        if attempt.url().origin() != first.origin() {
            let message = format!(
                "redirect to {} refused: it leaves the endpoint's origin {}",
                attempt.url(),
                first.origin().ascii_serialization()
            );
            return attempt.error(message);
        }
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        attempt.follow()
    })
}

impl HttpExecutor {
    /// Check the endpoint, expand `${VAR}` in headers (from the process environment).
    pub(crate) fn new(
        tool: &str,
        spec: &HttpSpec,
        timeout: Duration,
        client: reqwest::Client,
        output: Option<Arc<OutputCheck>>,
    ) -> Result<Self, String> {
        let url = Url::parse(&spec.url)
            .map_err(|e| format!("`http.url` `{}` is not a valid URL: {e}", spec.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "`http.url` must be http or https, got `{}`",
                url.scheme()
            ));
        }
        if !spec.allowed_hosts.is_empty() {
            let host = url.host_str().unwrap_or_default();
            if !spec
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(host))
            {
                return Err(format!(
                    "the endpoint host `{host}` is not in `http.allowed_hosts` ({})",
                    spec.allowed_hosts.join(", ")
                ));
            }
        }
        let method = Method::from_bytes(spec.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("`http.method` `{}` is not an HTTP method", spec.method))?;
        let mut headers = HeaderMap::new();
        for (name, template) in &spec.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a valid header name"))?;
            let (value, from_env) = expand_env(template, |var| std::env::var(var).ok())
                .map_err(|e| format!("header `{name}`: {e}"))?;
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                format!("header `{name}`: the value contains characters not allowed in a header")
            })?;
            if from_env || is_sensitive(&header) {
                value.set_sensitive(true);
            }
            headers.insert(header, value);
        }
        Ok(Self {
            tool: tool.to_owned(),
            client,
            method,
            url,
            headers,
            timeout,
            output,
        })
    }

    async fn send(
        client: reqwest::Client,
        request: reqwest::Request,
        what: String,
    ) -> Result<Value, ToolError> {
        let mut response = client
            .execute(request)
            .await
            .map_err(|e| ToolError::Failed(format!("{what} failed: {}", error_chain(&e))))?;
        let status = response.status();
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(ToolError::Failed(format!(
                            "{what} answered {status} with a body larger than {} MiB",
                            MAX_BODY_BYTES / (1024 * 1024)
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(ToolError::Failed(format!(
                        "{what} answered {status} but the body could not be read: {}",
                        error_chain(&e)
                    )));
                }
            }
        }
        if !status.is_success() {
            return Err(ToolError::Failed(format!(
                "{what} answered {status}: {}",
                excerpt(&body)
            )));
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| {
            ToolError::Failed(format!(
                "{what} answered {status} with a body that is not JSON ({e}): {}",
                excerpt(&body)
            ))
        })
    }
}

impl ToolHandler for HttpExecutor {
    fn call(
        &self,
        _ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let what = format!("{} {}", self.method, self.url);
        let request = self
            .client
            .request(self.method.clone(), self.url.clone())
            .headers(self.headers.clone())
            .json(&input)
            .build();
        let client = self.client.clone();
        let timeout = self.timeout;
        let output = self.output.clone();
        Box::pin(async move {
            let request = request.map_err(|e| {
                ToolError::Failed(format!("{what}: could not build the request: {e}"))
            })?;
            let value = match tokio::time::timeout(
                timeout,
                Self::send(client, request, what.clone()),
            )
            .await
            {
                Ok(result) => result?,
                Err(_) => {
                    return Err(ToolError::Failed(format!(
                        "{what} timed out after {} ms",
                        timeout.as_millis()
                    )));
                }
            };
            if let Some(output) = output {
                output.check(&value)?;
            }
            Ok(ToolOutput::json(value))
        })
    }
}

/// Names whose values are secrets even when written inline.
fn is_sensitive(name: &HeaderName) -> bool {
    let name = name.as_str();
    matches!(
        name,
        "authorization" | "proxy-authorization" | "cookie" | "x-api-key" | "api-key"
    ) || name.contains("token")
        || name.contains("secret")
}

/// Replace `${NAME}` by the variable's value and `$$` by `$`. Returns the text and whether
/// a variable was used.
pub(crate) fn expand_env(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(String, bool), String> {
    let mut out = String::with_capacity(template.len());
    let mut used = false;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| format!("`${{` without a closing `}}` in `{template}`"))?;
            let name = &tail[..end];
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "`${{{name}}}` is not a valid environment variable reference"
                ));
            }
            let value = lookup(name)
                .ok_or_else(|| format!("the environment variable `{name}` is not set"))?;
            out.push_str(&value);
            used = true;
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok((out, used))
}

/// The start of a body, as text, for error results.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut chars = text.chars();
    let cut: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// An error and its sources, without repeating a message a wrapper already shows.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let message = e.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn expands_variables_and_escapes() {
        assert_eq!(
            expand_env("Bearer ${TOKEN}", env),
            Ok(("Bearer s3cret".to_owned(), true))
        );
        assert_eq!(
            expand_env("costs $$5 or $x", env),
            Ok(("costs $5 or $x".to_owned(), false))
        );
    }

    #[test]
    fn reports_bad_references() {
        assert_eq!(
            expand_env("${MISSING}", env),
            Err("the environment variable `MISSING` is not set".to_owned())
        );
        assert_eq!(
            expand_env("${1X}", env),
            Err("`${1X}` is not a valid environment variable reference".to_owned())
        );
        assert_eq!(
            expand_env("a ${TOKEN", env),
            Err("`${` without a closing `}` in `a ${TOKEN`".to_owned())
        );
    }

    #[test]
    fn excerpts_are_short_and_char_safe() {
        let long = "é".repeat(300);
        let cut = excerpt(long.as_bytes());
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt(b"  \n"), "(empty body)");
    }
}
