//! How often a run's spans are recorded after they open: an exporting subscriber pays per
//! record (a span lookup, a lock, its attributes), so each span is recorded at most once, at
//! its end, with everything it learned (usage, finish reason, time to first chunk, error).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentloop::{Agent, RunEvent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use serde_json::json;
use tracing::Subscriber;
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Counts the records of each span, by its name, in the order the spans opened.
#[derive(Clone, Default)]
struct Records {
    spans: Arc<Mutex<Vec<(&'static str, usize)>>>,
    live: Arc<Mutex<HashMap<u64, usize>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Records {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        self.live.lock().unwrap().insert(id.into_u64(), spans.len());
        spans.push((attrs.metadata().name(), 0));
    }

    fn on_record(&self, id: &Id, _: &Record<'_>, _: Context<'_, S>) {
        if let Some(&at) = self.live.lock().unwrap().get(&id.into_u64()) {
            self.spans.lock().unwrap()[at].1 += 1;
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

fn agent(name: Option<&str>) -> Agent {
    let weather = Tool::function("get_weather", "Current weather", |c: City| async move {
        if c.city == "Atlantis" {
            return Err(format!("no weather for {}", c.city));
        }
        Ok(format!("sunny in {}", c.city))
    });
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Atlantis"})),
        ])
        .with_ids(["call_a", "call_b"])
        .with_usage(10, 5),
        Turn::text("Sunny.").with_usage(20, 7),
    ]);
    let agent = Agent::builder(model).model("m").tool(weather).build();
    match name {
        Some(name) => agent.with_options(|o| o.telemetry.agent_name = Some(name.into())),
        None => agent,
    }
}

#[tokio::test]
async fn a_streamed_run_records_each_span_once_at_its_end() {
    let records = Records::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(records.clone()));
    let mut events = agent(Some("weather")).run_stream("Weather?");
    while let Some(event) = events.next().await {
        if let RunEvent::RunFinish { result } = event {
            assert!(result.error.is_none(), "{result:?}");
        }
    }

    // The run's name, agent and conversation are fields it opens with; its usage is recorded
    // at its end. A model call's time to first chunk comes with its response and usage; a
    // tool that failed records its error once, one that completed nothing.
    assert_eq!(
        *records.spans.lock().unwrap(),
        [
            ("invoke_agent", 1),
            ("chat", 1),
            ("execute_tool", 0),
            ("execute_tool", 1),
            ("chat", 1),
        ]
    );
}
