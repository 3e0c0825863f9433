//! Tools as runs use them: handlers attached by name, definition-only tools, the handler's
//! context (state, cancellation), the concurrency bound, schemas of collections, floats and
//! maps, strict tools on the OpenAI wire, and runs from a history or built by hand.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::{RunStopReason, ToolOutcome};
use agentloop::{
    Agent, ContentBlock, Message, Provider, Request, Role, StopReason, Tool, ToolContext,
    ToolError, ToolOutput, ToolResult, ToolResultContent, history,
};
use agentloop_testkit::server::{MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Get the current weather for a city.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct GetWeather {
    /// City name.
    city: String,
}

/// The tool results of a request's message at `index`: (id, text, is_error).
fn results_in(message: &Message) -> Vec<(String, String, bool)> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => {
                Some((r.tool_use_id.clone(), r.content.to_text(), r.is_error))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn agent_builder_handler_makes_a_definition_only_tool_callable() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_ids(["w1"]),
        Turn::text("18 °C."),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(Tool::from_type::<GetWeather>())
        .handler("get_weather", |ctx: ToolContext, input: Value| async move {
            Ok::<_, ToolError>(ToolOutput::text(format!(
                "{} {} {}: 18 °C",
                ctx.tool_name, ctx.call_id, input["city"]
            )))
        })
        .build();
    assert!(agent.tool("get_weather").unwrap().handler().is_some());
    let result = agent.run("Weather?").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(
        results_in(&model.requests()[1].messages[2]),
        [(
            "w1".to_owned(),
            r#"get_weather w1 "Paris": 18 °C"#.to_owned(),
            false
        )]
    );
    // The definition the model sees is the type's, unchanged by the handler.
    assert_eq!(
        agent.tool("get_weather").unwrap().definition(),
        Tool::from_type::<GetWeather>().definition()
    );
}

#[tokio::test]
async fn a_call_to_a_definition_only_tool_is_an_error_result_naming_it() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_ids(["w1"]),
        Turn::text("Sorry."),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(Tool::from_type::<GetWeather>())
        .build();
    let result = agent.run("Weather?").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    assert_eq!(
        result.steps[0].outcomes,
        [ToolOutcome::Failed {
            message: "tool `get_weather` has no handler; register one for it to be callable".into()
        }]
    );
    assert_eq!(
        results_in(&model.requests()[1].messages[2]),
        [(
            "w1".to_owned(),
            "Error: tool `get_weather` has no handler; register one for it to be callable"
                .to_owned(),
            true
        )]
    );
    history::validate(&result.messages).unwrap();
}

/// Shared state a tool reads through its context.
struct Inventory {
    stock: HashMap<&'static str, u32>,
    lookups: AtomicUsize,
}

/// How many of an item are in stock.
#[derive(Deserialize, JsonSchema)]
struct Stock {
    item: String,
}

fn stock_tool() -> Tool {
    Tool::function_with_context(
        "stock",
        "Items in stock",
        |ctx: ToolContext, args: Stock| async move {
            // A state of another type is not handed out as this one.
            assert!(ctx.state::<String>().is_none());
            let Some(inventory) = ctx.state::<Inventory>() else {
                return Err(format!("{} ({}): no inventory", ctx.tool_name, ctx.call_id));
            };
            inventory.lookups.fetch_add(1, Ordering::SeqCst);
            let count = inventory
                .stock
                .get(args.item.as_str())
                .copied()
                .unwrap_or(0);
            Ok(format!(
                "{} ({}): {count} {}",
                ctx.tool_name, ctx.call_id, args.item
            ))
        },
    )
}

#[tokio::test]
async fn function_with_context_reads_the_state_of_the_run_options_or_the_agent() {
    let turns = || {
        [
            Turn::tool_calls([
                ("stock", json!({"item": "apples"})),
                ("stock", json!({"item": "pears"})),
            ])
            .with_ids(["s1", "s2"]),
            Turn::text("done"),
        ]
    };
    let inventory = || Inventory {
        stock: HashMap::from([("apples", 3), ("pears", 0)]),
        lookups: AtomicUsize::new(0),
    };

    // From `RunOptions::state`, for one run.
    let model = ScriptedModel::new(turns());
    let agent = Agent::builder(model.clone()).tool(stock_tool()).build();
    let options = agent.options().state(inventory());
    let state = options.state.clone().unwrap();
    agent
        .with_options(|o| *o = options)
        .run(vec![Message::user("stock?")])
        .await
        .unwrap();
    assert_eq!(
        results_in(&model.requests()[1].messages[2]),
        [
            ("s1".to_owned(), "stock (s1): 3 apples".to_owned(), false),
            ("s2".to_owned(), "stock (s2): 0 pears".to_owned(), false),
        ]
    );
    let inventory_seen = state.downcast_ref::<Inventory>().unwrap();
    assert_eq!(inventory_seen.lookups.load(Ordering::SeqCst), 2);

    // From `AgentBuilder::state`, for every run of the agent.
    let model = ScriptedModel::new(turns());
    let agent = Agent::builder(model.clone())
        .tool(stock_tool())
        .state(inventory())
        .build();
    agent.run("stock?").await.unwrap();
    assert_eq!(
        results_in(&model.requests()[1].messages[2])[0].1,
        "stock (s1): 3 apples"
    );

    // Without state, the handler is told so.
    let model = ScriptedModel::new(turns());
    let agent = Agent::builder(model.clone()).tool(stock_tool()).build();
    agent.run("stock?").await.unwrap();
    assert_eq!(
        results_in(&model.requests()[1].messages[2]),
        [
            (
                "s1".to_owned(),
                "Error: stock (s1): no inventory".to_owned(),
                true
            ),
            (
                "s2".to_owned(),
                "Error: stock (s2): no inventory".to_owned(),
                true
            ),
        ]
    );
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
struct Empty {}

/// A tool that waits for an hour and reports, from a task of its own, when its context's
/// token fires (the tool itself is aborted then, so it could not say).
fn watching_tool(fired: Arc<Mutex<Vec<Duration>>>, started: Instant) -> Tool {
    Tool::function_with_context("wait", "Waits", move |ctx: ToolContext, _: Empty| {
        let fired = fired.clone();
        async move {
            assert!(!ctx.cancel.is_cancelled());
            let token = ctx.cancel.clone();
            tokio::spawn(async move {
                token.cancelled().await;
                fired.lock().unwrap().push(started.elapsed());
            });
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, String>("woke up")
        }
    })
}

#[tokio::test(start_paused = true)]
async fn the_tool_context_token_fires_when_the_tool_times_out() {
    let model = ScriptedModel::new([Turn::tool_call("wait", json!({})), Turn::text("ok")]);
    let fired = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let agent = Agent::builder(model)
        .tool(watching_tool(fired.clone(), started).with_timeout(Duration::from_secs(2)))
        .build();
    let result = agent.run("go").await.unwrap();
    assert_eq!(
        result.steps[0].outcomes,
        [ToolOutcome::TimedOut {
            after: Duration::from_secs(2)
        }]
    );
    tokio::task::yield_now().await;
    assert_eq!(*fired.lock().unwrap(), [Duration::from_secs(2)]);
}

#[tokio::test(start_paused = true)]
async fn the_tool_context_token_fires_when_the_run_is_cancelled() {
    let model = ScriptedModel::new([Turn::tool_call("wait", json!({})), Turn::text("never")]);
    let fired = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let agent = Agent::builder(model.clone())
        .tool(watching_tool(fired.clone(), started))
        .build();
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        canceller.cancel();
    });
    let result = agent
        .with_options(|o| o.cancel = Some(cancel))
        .run(vec![Message::user("go")])
        .await
        .unwrap();
    assert_eq!(result.stop_reason, RunStopReason::Cancelled);
    tokio::task::yield_now().await;
    assert_eq!(*fired.lock().unwrap(), [Duration::from_secs(5)]);
    assert_eq!(model.calls(), 1);
    history::validate(&result.messages).unwrap();
}

/// Tools that count how many of them run at once.
fn counting_tool(running: Arc<AtomicUsize>, most: Arc<AtomicUsize>) -> Tool {
    Tool::function("count", "Counts", move |_: Empty| {
        let (running, most) = (running.clone(), most.clone());
        async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, String>("counted")
        }
    })
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_bounds_how_many_tools_run_at_once() {
    for (limit, expected) in [(Some(2), 2), (Some(1), 1), (Some(5), 5), (None, 6)] {
        let calls: Vec<(&str, Value)> = (0..6).map(|_| ("count", json!({}))).collect();
        let model = ScriptedModel::new([Turn::tool_calls(calls), Turn::text("ok")]);
        let (running, most) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let agent = Agent::builder(model)
            .tool(counting_tool(running, most.clone()))
            .build();
        let mut options = agent.options();
        if let Some(limit) = limit {
            options = options.max_concurrency(limit);
        }
        let result = agent
            .with_options(|o| *o = options)
            .run(vec![Message::user("go")])
            .await
            .unwrap();
        assert_eq!(result.tool_calls, 6);
        assert_eq!(
            most.load(Ordering::SeqCst),
            expected,
            "max_concurrency {limit:?}"
        );
    }
}

/// An order with collections, floats, maps and a field the model never sees.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Order {
    /// Item names.
    items: Vec<String>,
    quantities: Vec<u32>,
    /// Discount as a fraction.
    discount: f64,
    weight_kg: f32,
    /// Price per item.
    prices: HashMap<String, f64>,
    notes: BTreeMap<String, String>,
    #[serde(skip)]
    internal_id: u64,
}

#[test]
fn schemas_of_vecs_floats_maps_and_skipped_fields() {
    let tool = Tool::from_type::<Order>();
    assert_eq!(
        tool.definition().input_schema,
        json!({
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "string"}, "description": "Item names."},
                "quantities": {"type": "array", "items": {"type": "integer", "format": "uint32", "minimum": 0}},
                "discount": {"type": "number", "format": "double", "description": "Discount as a fraction."},
                "weight_kg": {"type": "number", "format": "float"},
                "prices": {"type": "object", "additionalProperties": {"type": "number", "format": "double"}, "description": "Price per item."},
                "notes": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "required": ["items", "quantities", "discount", "weight_kg", "prices", "notes"]
        })
    );

    let typed = Tool::function("order", "", |order: Order| async move {
        Ok::<_, String>(format!("{} {}", order.internal_id, order.prices.len()))
    });
    let valid = json!({
        "items": ["apple"], "quantities": [2], "discount": 0.5, "weight_kg": 1,
        "prices": {"apple": 1.25}, "notes": {}
    });
    for tool in [&tool, &typed] {
        assert_eq!(tool.validate(&valid), Ok(()));
        // A skipped field is no argument: sent anyway, it is an unknown key, which is allowed.
        let mut with_skipped = valid.clone();
        with_skipped["internal_id"] = json!(7);
        assert_eq!(tool.validate(&with_skipped), Ok(()));
        let invalid = json!({
            "items": "apple", "quantities": [-1], "discount": "half", "weight_kg": 1,
            "prices": {"apple": "cheap"}, "notes": {"a": 1}
        });
        let paths: Vec<String> = tool
            .validate(&invalid)
            .unwrap_err()
            .into_iter()
            .map(|v| v.path)
            .collect();
        assert_eq!(
            paths,
            [
                "/items",
                "/quantities/0",
                "/discount",
                "/prices/apple",
                "/notes/a"
            ]
        );
    }
}

#[tokio::test]
async fn a_typed_tool_gets_vecs_floats_maps_and_defaults_for_skipped_fields() {
    let model = ScriptedModel::new([
        Turn::tool_call(
            "order",
            json!({
                "items": ["apple", "pear"], "quantities": [2, 1], "discount": 0.25,
                "weight_kg": 1.5, "prices": {"apple": 1.25, "pear": 2.0},
                "notes": {"gift": "yes"}, "internal_id": 99
            }),
        ),
        Turn::text("ok"),
    ]);
    let agent = Agent::builder(model.clone())
        .tool(Tool::function("order", "", |o: Order| async move {
            let total: f64 = o
                .items
                .iter()
                .zip(&o.quantities)
                .map(|(item, n)| o.prices[item] * f64::from(*n))
                .sum();
            Ok::<_, String>(format!(
                "total {} after {} off, {} kg, notes {:?}, internal id {}",
                total * (1.0 - o.discount),
                o.discount,
                o.weight_kg,
                o.notes,
                o.internal_id
            ))
        }))
        .build();
    let result = agent.run("order").await.unwrap();
    assert_eq!(
        result.steps[0].outcomes,
        [ToolOutcome::Completed {
            structured: None,
            content: ToolResultContent::Text(
                r#"total 3.375 after 0.25 off, 1.5 kg, notes {"gift": "yes"}, internal id 0"#
                    .into()
            )
        }]
    );
}

/// Book a table.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct BookTable {
    /// Restaurant name.
    restaurant: String,
    guests: u8,
    /// Any note for the staff.
    note: Option<String>,
    /// Spending limit per guest.
    budget: Option<f64>,
}

#[tokio::test]
async fn a_strict_tool_goes_out_strict_with_the_strict_schema_and_others_do_not() {
    // OpenAI's function-calling guide, "Strict mode": `strict: true` on the function, every
    // object with `additionalProperties: false`, every property listed in `required`, and
    // optional ones made nullable (`"type": ["string", "null"]`); `format` is supported for
    // strings only (date-time, email, uuid, ...): a number's `format`, which schemars writes
    // for every Rust integer and float ("uint8", "double"), is refused with a 400 ("In
    // context=('properties', 'guests'), 'format' is not permitted"), so it is left out, while
    // `minimum`/`maximum` are supported and stay.
    let server = MockServer::start(Wire::OpenAi, [Turn::text("booked")])
        .await
        .unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let provider: Arc<dyn Provider> = Arc::new(OpenAi::new(config).unwrap());
    let agent = Agent::builder_shared(provider)
        .model("gpt-4o")
        .tool(
            Tool::function("book_table", "Book a table", |_: BookTable| async {
                Ok::<_, String>("booked")
            })
            .with_strict(true),
        )
        .tool(Tool::function(
            "get_weather",
            "Weather",
            |_: GetWeather| async { Ok::<_, String>("sunny") },
        ))
        .build();
    assert!(agent.tool("book_table").unwrap().definition().strict);
    agent.run("book").await.unwrap();
    let body = server.last_request().unwrap().body;
    assert_eq!(
        body["tools"],
        json!([
            {
                "type": "function",
                "function": {
                    "name": "book_table",
                    "description": "Book a table",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "restaurant": {"type": "string", "description": "Restaurant name."},
                            "guests": {"type": "integer", "minimum": 0, "maximum": 255},
                            "note": {"type": ["string", "null"], "description": "Any note for the staff."},
                            "budget": {"type": ["number", "null"], "description": "Spending limit per guest."}
                        },
                        "required": ["restaurant", "guests", "note", "budget"],
                        "additionalProperties": false
                    },
                    "strict": true
                }
            },
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string", "description": "City name."}},
                        "required": ["city"]
                    }
                }
            }
        ])
    );
    server.assert_complete();
}

#[tokio::test]
async fn run_messages_runs_from_a_whole_history() {
    let model = ScriptedModel::new([Turn::text("Rome is warmer.")]);
    let agent = Agent::builder(model.clone())
        .model("m")
        .system("Be brief.")
        .build();
    let history = vec![
        Message::user("Weather in Paris?"),
        Message::assistant("18 °C."),
        Message::user("And is Rome warmer?"),
    ];
    let result = agent.run(history.clone()).await.unwrap();
    assert_eq!(result.text(), "Rome is warmer.");
    let sent = &model.requests()[0];
    assert_eq!(sent.messages, history);
    assert_eq!(sent.system.as_deref(), Some("Be brief."));
    let mut expected = history;
    expected.push(Message::assistant("Rome is warmer."));
    assert_eq!(result.messages, expected);
}

#[tokio::test]
async fn continue_from_and_tool_result_build_the_next_request_by_hand() {
    let model = ScriptedModel::new([
        Turn::text("Checking.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .then_tool_call("get_weather", json!({"city": "Rome"}))
            .with_ids(["c1", "c2"]),
        Turn::text("Paris 18, Rome 24."),
    ]);
    let first = Request::new("m", vec![Message::user("Weather?")]);
    let response = model.complete(&first).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);

    let next = first
        .continue_from(&response)
        .tool_result("c1", "18 °C")
        .with_tool_result(ToolResult::error("c2", "Rome is unknown"));
    assert_eq!(
        next.messages,
        [
            Message::user("Weather?"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris"})
                    },
                    ContentBlock::ToolUse {
                        id: "c2".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Rome"})
                    },
                ]
            ),
            // Both results of the turn in one user message, in the order given.
            Message::tool_results([
                ToolResult::text("c1", "18 °C"),
                ToolResult::error("c2", "Rome is unknown")
            ]),
        ]
    );
    history::validate(&next.messages).unwrap();
    let answer = model.complete(&next).await.unwrap();
    assert_eq!(answer.text(), "Paris 18, Rome 24.");
    assert_eq!(model.requests()[1].messages, next.messages);

    // After a plain user message, a result starts a message of its own.
    let fresh = Request::new("m", vec![Message::user("hi")]).tool_result("c9", "x");
    assert_eq!(
        fresh.messages,
        [
            Message::user("hi"),
            Message::tool_results([ToolResult::text("c9", "x")])
        ]
    );
}
