//! agentloop: an `Agent` with a typed `get_weather` tool on the OpenAI provider, as a user
//! would write it; streamed runs read the text deltas as they come.

use std::process::ExitCode;
use std::sync::Arc;

use agentloop::provider::openai::OpenAi;
use agentloop::run::RunEvent;
use agentloop::{Agent, StreamEvent, Tool};
use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME};
use agentloop_peers::{Options, Outcome, drive};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;

/// Model calls per run, at most, as the other peers bound them: `max_tool_iterations` rounds of
/// tools and one call for the answer.
const MAX_TURNS: u32 = 4;

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. Paris
    city: String,
}

async fn one_run(agent: Arc<Agent>, stream: bool) -> Outcome {
    if !stream {
        let result = agent
            .run(PROMPT)
            .await
            .and_then(|result| result.finished())
            .map_err(|e| e.to_string())?;
        return workload::check_answer(&result.text());
    }
    let mut events = agent.run_stream(PROMPT);
    let mut text = String::new();
    while let Some(event) = events.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { text: delta }) => text.push_str(&delta),
            // The answer is the text of the last step.
            RunEvent::StepStart { .. } => text.clear(),
            RunEvent::Error { error } => return Err(error.to_string()),
            RunEvent::RunFinish { result } => {
                result.finished().map_err(|e| e.to_string())?;
                return workload::check_answer(&text);
            }
            _ => {}
        }
    }
    Err("the run's events ended without run_finish".into())
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("agentloop: {e}");
            return ExitCode::from(2);
        }
    };
    let provider = match OpenAi::compatible(&options.base_url) {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("agentloop: cannot build the provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    let agent = Agent::builder(provider)
        .model(MODEL)
        .max_tool_iterations(MAX_TURNS - 1)
        .tool(Tool::function(
            TOOL_NAME,
            TOOL_DESCRIPTION,
            |args: GetWeather| async move {
                Ok::<_, std::convert::Infallible>(workload::get_weather(&args.city))
            },
        ))
        .build();
    let agent = Arc::new(agent);
    let stream = options.stream;
    drive("agentloop", &options, move || {
        one_run(Arc::clone(&agent), stream)
    })
    .await
}
