//! agentloop's provider layer with the loop written by hand, as async-openai's and genai's
//! are: no `Agent`, no run driver, no events. Not one of the compared clients: it bounds what
//! agentloop's run layer costs on top of the provider stream.

use std::process::ExitCode;
use std::sync::Arc;

use agentloop::message::{Message, Request, ToolResult};
use agentloop::provider::Provider;
use agentloop::provider::openai::OpenAi;
use agentloop::stream::{Accumulator, StreamEvent};
use agentloop::{Tool, ToolDefinition};
use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME};
use agentloop_peers::{Options, Outcome, drive};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;

const MAX_MODEL_CALLS: usize = 4;

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. Paris
    city: String,
}

async fn one_run(provider: Arc<OpenAi>, tool: ToolDefinition, stream: bool) -> Outcome {
    let mut request = Request::new(MODEL, vec![Message::user(PROMPT)]);
    request.tools.push(tool);
    for _ in 0..MAX_MODEL_CALLS {
        let response = if stream {
            let mut events = provider.stream(&request);
            let mut acc = Accumulator::new();
            let mut text = String::new();
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| e.to_string())?;
                if let StreamEvent::TextDelta { text: delta } = &event {
                    text.push_str(delta);
                }
                acc.push(&event);
            }
            let response = acc.finish();
            if response.tool_uses().is_empty() {
                return workload::check_answer(&text);
            }
            response
        } else {
            let response = provider
                .complete(&request)
                .await
                .map_err(|e| e.to_string())?;
            if response.tool_uses().is_empty() {
                return workload::check_answer(&response.text());
            }
            response
        };
        let calls = response.tool_uses();
        request.messages.push(response.to_message());
        let results = calls.iter().map(|call| {
            let args: GetWeather = call.parse().map_err(|e| e.to_string())?;
            ToolResult::json(&call.id, &workload::get_weather(&args.city))
                .map_err(|e| e.to_string())
        });
        let results = results.collect::<Result<Vec<_>, String>>()?;
        request.messages.push(Message::tool_results(results));
    }
    Err("no answer after 4 model calls".into())
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("agentloop-provider: {e}");
            return ExitCode::from(2);
        }
    };
    let provider = match OpenAi::compatible(&options.base_url) {
        Ok(provider) => Arc::new(provider),
        Err(e) => {
            eprintln!("agentloop-provider: cannot build the provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tool = ToolDefinition::from(
        &Tool::from_type::<GetWeather>()
            .with_name(TOOL_NAME)
            .with_description(TOOL_DESCRIPTION),
    );
    let stream = options.stream;
    drive("agentloop-provider", &options, move || {
        one_run(Arc::clone(&provider), tool.clone(), stream)
    })
    .await
}
