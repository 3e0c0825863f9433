//! Model routing: `provider/model` strings such as `anthropic/claude-sonnet-4-5`,
//! `openai/gpt-4o`, `xai/grok-4`, `ollama/qwen2.5`, `openai-compatible/<model>`,
//! `openai-responses/gpt-5` (the OpenAI Responses API; `openai/<model>` with
//! [`RouteOptions::responses`] too), `gemini/gemini-2.5-flash` (key from `GEMINI_API_KEY` or `GOOGLE_API_KEY`) or
//! `vertex/gemini-2.5-pro` (token from `VERTEX_ACCESS_TOKEN` or `GOOGLE_ACCESS_TOKEN`, project
//! and location from [`RouteOptions`] or `GOOGLE_CLOUD_PROJECT` / `GOOGLE_CLOUD_LOCATION`) or
//! `bedrock/<modelId>` (feature `bedrock`: region from [`RouteOptions::region`] or
//! `AWS_REGION` / `AWS_DEFAULT_REGION`, a Bedrock API key from the options or
//! `AWS_BEARER_TOKEN_BEDROCK`, else AWS keys from the environment or `~/.aws/credentials`)
//! turned into a configured provider. An unknown prefix is an error that lists the known ones, never a
//! silent fallback.
//!
//! ```
//! use agentloop::provider::route::{self, RouteOptions};
//! let (provider, model) = route::from_model(
//!     "ollama/qwen2.5",
//!     RouteOptions::default(),
//! ).unwrap();
//! assert_eq!((provider.name(), model.as_str()), ("ollama", "qwen2.5"));
//! let error = route::from_model("mistral-cloud/large", RouteOptions::default()).err().unwrap();
//! assert!(error.to_string().contains("known providers: anthropic, openai, xai"));
//! ```

use std::sync::Arc;

use super::Provider;
use super::anthropic::{self, Anthropic};
use super::gemini::{self, Gemini, GeminiOptions, VertexLocation};
use super::http::{ApiKey, HttpConfig};
use super::openai::{OpenAi, Preset};
use super::responses::{self, OpenAiResponses};
use crate::error::{Error, Result};

/// Overrides for [`from_model`]; unset fields come from the provider's defaults and
/// environment variables.
#[derive(Debug, Clone, Default)]
pub struct RouteOptions {
    /// Base URL (required for `openai-compatible` unless `OPENAI_BASE_URL` is set).
    pub base_url: Option<String>,
    /// API key (instead of the provider's environment variable); for `vertex`, the access
    /// token.
    pub api_key: Option<ApiKey>,
    /// Vertex AI: the Google Cloud project (instead of `GOOGLE_CLOUD_PROJECT`).
    pub project: Option<String>,
    /// Vertex AI: the location (instead of `GOOGLE_CLOUD_LOCATION`; default `global`).
    pub location: Option<String>,
    /// Bedrock: the AWS region (instead of `AWS_REGION` / `AWS_DEFAULT_REGION`).
    pub region: Option<String>,
    /// `openai/<model>`: use the Responses API instead of Chat Completions (what
    /// `openai-responses/<model>` selects).
    pub responses: bool,
}

/// Every provider prefix [`from_model`] knows, in the order errors list them.
pub fn known_providers() -> Vec<&'static str> {
    let mut names = vec![anthropic::PROVIDER_NAME];
    names.extend(Preset::ALL.iter().map(|p| p.name()));
    names.push(responses::PROVIDER_NAME);
    names.extend([gemini::PROVIDER_NAME, gemini::VERTEX_PROVIDER_NAME]);
    #[cfg(feature = "bedrock")]
    names.push(super::bedrock::PROVIDER_NAME);
    names
}

/// Split `provider/model` (the model part may itself contain slashes).
pub fn split(spec: &str) -> Result<(&str, &str)> {
    match spec.split_once('/') {
        Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
            Ok((provider, model))
        }
        _ => Err(Error::config(format!(
            "model `{spec}` is not of the form provider/model (e.g. openai/gpt-4o); known providers: {}",
            known_providers().join(", ")
        ))),
    }
}

/// The provider and model name for `spec`.
pub fn from_model(spec: &str, options: RouteOptions) -> Result<(Arc<dyn Provider>, String)> {
    let (prefix, model) = split(spec)?;
    let provider: Arc<dyn Provider> = if prefix == anthropic::PROVIDER_NAME {
        Arc::new(anthropic_provider(options)?)
    } else if prefix == responses::PROVIDER_NAME
        || (prefix == Preset::OpenAi.name() && options.responses)
    {
        Arc::new(responses_provider(options)?)
    } else if prefix == gemini::PROVIDER_NAME {
        Arc::new(gemini_provider(options)?)
    } else if prefix == gemini::VERTEX_PROVIDER_NAME {
        Arc::new(vertex_provider(options)?)
    } else if cfg!(feature = "bedrock") && prefix == "bedrock" {
        bedrock_provider(options)?
    } else if let Some(preset) = Preset::from_name(prefix) {
        Arc::new(openai_provider(preset, options)?)
    } else {
        return Err(Error::config(format!(
            "unknown provider `{prefix}` in model `{spec}`; known providers: {}",
            known_providers().join(", ")
        )));
    };
    Ok((provider, model.to_owned()))
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

fn anthropic_provider(options: RouteOptions) -> Result<Anthropic> {
    let Some(base_url) = options
        .base_url
        .clone()
        .or_else(|| env(anthropic::BASE_URL_ENV))
    else {
        return match options.api_key {
            Some(key) => {
                let mut config = HttpConfig::new(anthropic::DEFAULT_BASE_URL);
                config.api_key = Some(key);
                Anthropic::new(config)
            }
            None => Anthropic::from_env(),
        };
    };
    // A custom endpoint (a proxy, a gateway, the testkit server) may need no key.
    let mut config = HttpConfig::new(base_url);
    config.api_key = options
        .api_key
        .or_else(|| ApiKey::from_env(anthropic::API_KEY_ENV));
    Anthropic::new(config)
}

fn openai_provider(preset: Preset, options: RouteOptions) -> Result<OpenAi> {
    let Some(base_url) = options.base_url else {
        return match options.api_key {
            Some(key) => {
                let url = preset
                    .default_base_url()
                    .map(str::to_owned)
                    .or_else(|| env("OPENAI_BASE_URL"))
                    .ok_or_else(|| {
                        Error::config(format!(
                            "the {} preset needs a base URL: pass one (--base-url) or set OPENAI_BASE_URL",
                            preset.name()
                        ))
                    })?;
                let mut config = HttpConfig::new(url);
                config.api_key = Some(key);
                OpenAi::from_preset(preset, config)
            }
            None => OpenAi::preset(preset.name()),
        };
    };
    let mut config = HttpConfig::new(base_url);
    config.api_key = options
        .api_key
        .or_else(|| preset.api_key_var().and_then(ApiKey::from_env));
    OpenAi::from_preset(preset, config)
}

fn responses_provider(options: RouteOptions) -> Result<OpenAiResponses> {
    let key = options
        .api_key
        .or_else(|| ApiKey::from_env(responses::API_KEY_ENV));
    let base_url = options.base_url.or_else(|| env(responses::BASE_URL_ENV));
    if key.is_none() && base_url.is_none() {
        return Err(Error::config(
            "openai-responses/<model> needs OPENAI_API_KEY (or a base URL for a compatible server that takes none)",
        ));
    }
    // A custom endpoint (OpenRouter, a gateway, the testkit server) may need no key.
    let mut config =
        HttpConfig::new(base_url.unwrap_or_else(|| responses::DEFAULT_BASE_URL.to_owned()));
    config.api_key = key;
    OpenAiResponses::new(config)
}

fn gemini_provider(options: RouteOptions) -> Result<Gemini> {
    let key = options.api_key.or_else(|| {
        gemini::API_KEY_ENVS
            .iter()
            .find_map(|var| ApiKey::from_env(var))
    });
    let Some(base_url) = options.base_url.or_else(|| env(gemini::BASE_URL_ENV)) else {
        let Some(key) = key else {
            return Gemini::from_env();
        };
        let mut config = HttpConfig::new(gemini::DEFAULT_BASE_URL);
        config.api_key = Some(key);
        return Gemini::new(config);
    };
    // A custom endpoint (a proxy, the testkit server) may need no key.
    let mut config = HttpConfig::new(base_url);
    config.api_key = key;
    Gemini::new(config)
}

fn vertex_provider(options: RouteOptions) -> Result<Gemini> {
    let project = options
        .project
        .or_else(|| env(gemini::VERTEX_PROJECT_ENV))
        .ok_or_else(|| {
            Error::config(format!(
                "vertex/<model> needs a Google Cloud project: set {} or pass one in RouteOptions::project",
                gemini::VERTEX_PROJECT_ENV
            ))
        })?;
    let location = VertexLocation {
        project,
        location: options
            .location
            .or_else(|| env(gemini::VERTEX_LOCATION_ENV))
            .unwrap_or_else(|| "global".to_owned()),
    };
    let token = options.api_key.or_else(|| {
        gemini::VERTEX_TOKEN_ENVS
            .iter()
            .find_map(|var| ApiKey::from_env(var))
    });
    let custom = options.base_url.is_some();
    let mut config = HttpConfig::new(options.base_url.unwrap_or_else(|| location.base_url()));
    if token.is_none() && !custom {
        return Err(Error::config(
            "vertex/<model> needs an access token: set VERTEX_ACCESS_TOKEN (e.g. from `gcloud auth print-access-token`) or pass one as the API key",
        ));
    }
    config.api_key = token;
    Gemini::vertex(config, location, GeminiOptions::default())
}

#[cfg(feature = "bedrock")]
fn bedrock_provider(options: RouteOptions) -> Result<Arc<dyn Provider>> {
    use super::bedrock::{self, Bedrock, BedrockAuth};
    let region = options
        .region
        .or_else(bedrock::region_from_env)
        .ok_or_else(|| {
            Error::config(
                "bedrock/<model> needs a region: set AWS_REGION (or AWS_DEFAULT_REGION) or pass one in RouteOptions::region",
            )
        })?;
    let auth = match options.api_key {
        Some(key) => Some(BedrockAuth::Bearer(key)),
        None => BedrockAuth::from_env(),
    };
    let custom = options.base_url.or_else(|| env(bedrock::BASE_URL_ENV));
    let auth = match (auth, &custom) {
        (Some(auth), _) => auth,
        // A custom endpoint (a proxy that signs, the testkit server) may need no credentials.
        (None, Some(_)) => BedrockAuth::None,
        (None, None) => {
            return Err(Error::config(format!(
                "bedrock/<model> needs credentials: set {} (a Bedrock API key), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials (AWS_PROFILE)",
                bedrock::BEARER_TOKEN_ENV
            )));
        }
    };
    let base_url = custom.unwrap_or_else(|| bedrock::endpoint(&region));
    Ok(Arc::new(Bedrock::new(
        HttpConfig::new(base_url),
        region,
        auth,
    )?))
}

#[cfg(not(feature = "bedrock"))]
fn bedrock_provider(_: RouteOptions) -> Result<Arc<dyn Provider>> {
    Err(Error::config(
        "bedrock/<model> needs agentloop's `bedrock` feature (on by default)",
    ))
}
