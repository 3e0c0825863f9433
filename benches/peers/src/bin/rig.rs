//! rig (rig-core + rig-agent): its Agent with a typed Tool, on rig's OpenAI client's Chat
//! Completions route, with a turn budget; streamed runs read the text deltas as they come.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;

use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME, Weather};
use agentloop_peers::{Options, Outcome, drive};
use futures::StreamExt;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::streaming::{Item, StreamEvent};
use rig_agent::tool::{Tool, ToolContext};
use rig_agent::{Agent, AgentBuilder};
use rig_core::providers::openai::OpenAIConfig;
use serde::Deserialize;

const MAX_TURNS: usize = 4;

#[derive(Deserialize)]
struct WeatherArgs {
    city: String,
}

struct GetWeather;

impl Tool for GetWeather {
    const NAME: &'static str = TOOL_NAME;
    type Args = WeatherArgs;
    type Output = Weather;
    type Error = Infallible;

    fn description(&self) -> String {
        TOOL_DESCRIPTION.to_owned()
    }

    fn parameters(&self) -> serde_json::Value {
        workload::tool_schema()
    }

    async fn call(&self, _: &mut ToolContext, args: WeatherArgs) -> Result<Weather, Infallible> {
        Ok(workload::get_weather(&args.city))
    }
}

async fn one_run(agent: Arc<Agent>, stream: bool) -> Outcome {
    if !stream {
        let response = agent
            .prompt(PROMPT)
            .max_turns(MAX_TURNS)
            .await
            .map_err(|e| e.to_string())?;
        return workload::check_answer(&response.output());
    }
    let mut items = agent.prompt(PROMPT).max_turns(MAX_TURNS).stream();
    let mut text = String::new();
    let mut finished = false;
    while let Some(item) = items.next().await {
        match item.map_err(|e| e.to_string())? {
            MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
                text: delta,
                ..
            })) => text.push_str(&delta),
            // Text streamed before a tool call belongs to an earlier turn: the answer is the
            // text of the last turn.
            MultiTurnStreamItem::ToolResult { .. } => text.clear(),
            MultiTurnStreamItem::FinalResponse(_) => finished = true,
            _ => {}
        }
    }
    if !finished {
        return Err("the stream ended without a final response".into());
    }
    workload::check_answer(&text)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("rig: {e}");
            return ExitCode::from(2);
        }
    };
    let model = OpenAIConfig::new("rig")
        .with_base_url(&options.base_url)
        .client()
        .chat(MODEL);
    let agent = Arc::new(AgentBuilder::new(model).tool(GetWeather).build());
    let stream = options.stream;
    drive("rig", &options, move || one_run(Arc::clone(&agent), stream)).await
}
