//! Turning `--model`, `--base-url` and `--tools` into an agent.

use std::sync::Arc;

use agentloop::provider::route::{self, RouteOptions};
use agentloop::{Agent, Provider};

use crate::cli::ModelArgs;

/// Where the model comes from.
pub struct Resolved {
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// The model name without the provider prefix.
    pub model: String,
    /// Whether this is the built-in mock.
    pub mock: bool,
}

/// The model the arguments name, or the built-in mock when none is named.
pub fn resolve(model: Option<&str>, base_url: Option<&str>) -> Result<Resolved, String> {
    match model.map(str::trim).filter(|m| !m.is_empty()) {
        None | Some("mock") | Some("mock/demo") => Ok(Resolved {
            provider: Arc::new(agentloop_testkit::demo::demo_model()),
            model: "demo".into(),
            mock: true,
        }),
        Some(spec) => {
            let options = RouteOptions {
                base_url: base_url.map(str::to_owned),
                ..RouteOptions::default()
            };
            let (provider, model) = route::from_model(spec, options).map_err(cli_message)?;
            Ok(Resolved {
                provider,
                model,
                mock: false,
            })
        }
    }
}

/// Build the agent for `run` and `chat`.
pub fn agent(args: &ModelArgs, resolved: &Resolved) -> Result<Agent, String> {
    let mut builder = Agent::builder_shared(resolved.provider.clone())
        .model(resolved.model.clone())
        .max_tool_iterations(args.max_tool_iterations);
    if let Some(system) = &args.system {
        builder = builder.system(system.clone());
    }
    if let Some(n) = args.max_tool_calls {
        builder = builder.max_tool_calls(n);
    }
    if let Some(timeout) = args.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(t) = args.temperature {
        builder = builder.temperature(t);
    }
    if let Some(usd) = args.max_cost {
        builder = builder.max_cost(usd);
    }
    if let Some(n) = args.max_total_tokens {
        builder = builder.max_total_tokens(n);
    }
    if let Some(window) = args.context_window {
        use agentloop::context::{ContextPolicy, Strategy};
        builder = builder.context(
            ContextPolicy::new()
                .window(window)
                .strategy(Strategy::ClearToolResults { keep_last: 2 })
                .strategy(Strategy::TrimTurns),
        );
    }
    let mut tools = Vec::new();
    if let Some(path) = &args.tools {
        tools = crate::commands::tools::load(path)?.tools();
    }
    // Given tools, the mock calls one of them (see `agentloop_testkit::demo`); without any, it
    // plays its demo script, which needs the demo tool.
    if resolved.mock && tools.is_empty() {
        tools.push(agentloop_testkit::demo::demo_tool());
    }
    builder = builder.tools(tools);
    Ok(builder.build())
}

/// The library's configuration messages are written for code that builds providers; on the
/// command line the same fix is a flag or an environment variable, so say that instead.
fn cli_message(error: agentloop::Error) -> String {
    const REWORDED: [(&str, &str); 3] = [
        (
            "set OPENAI_BASE_URL or use OpenAi::compatible(url)",
            "pass --base-url URL or set OPENAI_BASE_URL",
        ),
        (
            " (or configure one explicitly with HttpConfig)",
            ": export it, or pass --base-url for a server that needs no key",
        ),
        (
            "; export your Anthropic API key or build the provider with Anthropic::new(HttpConfig)",
            ": export it with your Anthropic API key, or pass --base-url for a gateway that adds one",
        ),
    ];
    REWORDED
        .iter()
        .fold(error.to_string(), |text, (library, cli)| {
            text.replace(library, cli)
        })
}
