//! agentloop without default features: no JSON Schema validation (so no `jsonschema` and no
//! regex engines in the binary), no registry, no MCP. Typed tools still run, and arguments
//! that do not deserialize into a tool's type are answered with serde's message without
//! reaching the handler.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use agentloop::run::ToolOutcome;
use agentloop::tool::Violation;
use agentloop::{Agent, EventStream, Provider, Request, StopReason, StreamEvent, Tool};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Answers each request with the next scripted turn's events.
struct Scripted {
    turns: Mutex<VecDeque<Vec<StreamEvent>>>,
    requests: Mutex<Vec<Request>>,
}

impl Scripted {
    fn new(turns: impl IntoIterator<Item = Vec<StreamEvent>>) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::new(turns.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        })
    }
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(&self, request: &Request) -> EventStream {
        self.requests.lock().unwrap().push(request.clone());
        let events = self.turns.lock().unwrap().pop_front().expect("a turn left");
        futures::stream::iter(events.into_iter().map(Ok)).boxed()
    }
}

fn start(id: &str) -> StreamEvent {
    StreamEvent::MessageStart {
        id: id.into(),
        model: "m".into(),
    }
}

fn tool_call(id: &str, arguments: &str) -> Vec<StreamEvent> {
    vec![
        start(id),
        StreamEvent::ToolCallStart {
            index: 0,
            id: id.into(),
            name: "get_weather".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: arguments.into(),
        },
        StreamEvent::ToolCallEnd { index: 0 },
        StreamEvent::MessageStop {
            stop_reason: StopReason::ToolUse,
        },
    ]
}

fn answer(text: &str) -> Vec<StreamEvent> {
    vec![
        start("answer"),
        StreamEvent::TextDelta { text: text.into() },
        StreamEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        },
    ]
}

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
    /// Days ahead; schemars writes `minimum: 0` for it, which serde does not check.
    #[schemars(range(max = 7))]
    days: Option<u8>,
}

#[tokio::test]
async fn arguments_that_do_not_deserialize_get_serdes_message_and_the_run_goes_on() {
    let provider = Scripted::new([
        tool_call("call_1", r#"{"city": 7}"#),
        tool_call("call_2", r#"{"city": "Paris", "days": 9}"#),
        answer("18 °C in Paris."),
    ]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let agent = Agent::builder(provider.clone())
        .model("m")
        .tool(Tool::function(
            "get_weather",
            "Current weather",
            move |args: GetWeather| {
                log.lock().unwrap().push((args.city.clone(), args.days));
                async move { Ok::<_, Infallible>(format!("18 °C in {}", args.city)) }
            },
        ))
        .build();

    let result = agent.run("Weather in Paris?").await.unwrap();

    assert_eq!(result.text(), "18 °C in Paris.");
    // Without a JSON Schema validator, `maximum: 7` is not checked: only serde's rules are.
    assert_eq!(*seen.lock().unwrap(), vec![("Paris".to_owned(), Some(9))]);
    let rejected = Violation {
        path: String::new(),
        message: "invalid type: integer `7`, expected a string".into(),
    };
    assert_eq!(
        result.steps[0].outcomes,
        vec![ToolOutcome::InvalidArguments {
            violations: vec![rejected],
        }]
    );
    let second = &provider.requests.lock().unwrap()[1];
    let sent = serde_json::to_value(&second.messages[2]).unwrap();
    assert!(
        sent.to_string()
            .contains("invalid type: integer `7`, expected a string"),
        "{sent}"
    );
}

#[test]
fn raw_schemas_are_checked_by_shape_alone() {
    // Not a valid JSON Schema (`strnig`), but without the meta-schema only its shape is known.
    let tool = Tool::from_schema(
        "lookup",
        "Look something up",
        json!({"type": "object", "properties": {"key": {"type": "strnig"}}}),
    )
    .unwrap();
    assert_eq!(tool.validate(&json!({"key": 1})), Ok(()));

    let error = Tool::from_schema("lookup", "", json!({"type": "string"})).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("tool arguments must be an object"),
        "{error}"
    );
}
