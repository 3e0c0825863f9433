//! Randomized runs with the scripted model: random scripts (text, single and parallel tool
//! calls, bad arguments, unknown tools, model errors, cut streams), random tool behaviour (ok,
//! failing, panicking, slow past its timeout), random limits and cancellation at random points,
//! blocking and streamed. After every run the invariants of SPEC §4 must hold: the history is
//! valid to send again, usage and counts add up, every call has exactly one outcome and result.
//!
//! The same scripts also play over real loopback HTTP (OpenAI and Anthropic wire servers) with a
//! random wire fault on each turn and random retries, so the providers' failure paths are held
//! to the same invariants.

mod common;

use std::time::Duration;

use agentloop::provider::http::RetryPolicy;
use agentloop::run::{RunEvent, RunStopReason, ToolOutcome};
use agentloop::{Agent, AgentBuilder, Error, RunResult, Tool, Usage, history};
use agentloop_testkit::server::{Fault, MockServer, Wire};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Arguments of every test tool.
#[derive(Debug, Deserialize, JsonSchema)]
struct Args {
    /// A number.
    n: Option<i64>,
}

/// The per-tool timeout; the slow tool sleeps for a random time around it.
const TOOL_TIMEOUT: Duration = Duration::from_millis(100);

const TOOL_NAMES: [&str; 5] = ["ok", "fail", "panic", "slow", "missing"];

fn tools(slow_ms: u64) -> Vec<Tool> {
    vec![
        Tool::function("ok", "succeeds", |a: Args| async move {
            Ok::<_, String>(json!({"n": a.n}))
        }),
        Tool::function("fail", "fails", |_: Args| async {
            Err::<String, _>("disk full")
        }),
        Tool::function("panic", "panics", |_: Args| async {
            if true {
                panic!("tool panicked on purpose");
            }
            Ok::<String, String>(String::new())
        }),
        Tool::function("slow", "sleeps", move |_: Args| async move {
            tokio::time::sleep(Duration::from_millis(slow_ms)).await;
            Ok::<_, String>("slept")
        })
        .with_timeout(TOOL_TIMEOUT),
    ]
}

#[derive(Debug, Clone)]
enum CallArgs {
    Valid,
    /// Valid JSON that violates the schema.
    WrongType,
    /// Not JSON at all.
    Broken,
}

#[derive(Debug, Clone)]
enum TurnSpec {
    Text,
    /// Tool calls by index into `TOOL_NAMES` (the last one is not registered).
    Calls(Vec<(usize, CallArgs)>),
    /// The model call fails.
    ModelError,
    /// The stream is cut after this many events.
    CutAfter(usize),
}

#[derive(Debug, Clone)]
struct Scenario {
    turns: Vec<(TurnSpec, u64, (u64, u64))>,
    streaming: bool,
    slow_ms: u64,
    max_tool_iterations: u32,
    max_tool_calls: Option<u32>,
    max_total_tokens: Option<u64>,
    run_timeout_ms: Option<u64>,
    cancel_after_ms: Option<u64>,
}

fn call_args() -> impl Strategy<Value = CallArgs> {
    prop_oneof![
        6 => Just(CallArgs::Valid),
        1 => Just(CallArgs::WrongType),
        1 => Just(CallArgs::Broken),
    ]
}

fn turn_spec() -> impl Strategy<Value = TurnSpec> {
    prop_oneof![
        2 => Just(TurnSpec::Text),
        6 => prop::collection::vec((0..TOOL_NAMES.len(), call_args()), 1..4).prop_map(TurnSpec::Calls),
        1 => Just(TurnSpec::ModelError),
        1 => (0usize..8).prop_map(TurnSpec::CutAfter),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec((turn_spec(), 0u64..60, (0u64..200, 0u64..100)), 1..7),
        any::<bool>(),
        0u64..250,
        0u32..7,
        prop::option::of(0u32..6),
        prop::option::of(10u64..800),
        prop::option::of(1u64..400),
        prop::option::of(0u64..400),
    )
        .prop_map(
            |(
                turns,
                streaming,
                slow_ms,
                max_tool_iterations,
                max_tool_calls,
                max_total_tokens,
                run_timeout_ms,
                cancel_after_ms,
            )| Scenario {
                turns,
                streaming,
                slow_ms,
                max_tool_iterations,
                max_tool_calls,
                max_total_tokens,
                run_timeout_ms,
                cancel_after_ms,
            },
        )
}

fn turn(spec: &TurnSpec, delay_ms: u64, (input, output): (u64, u64)) -> Turn {
    let turn = match spec {
        TurnSpec::Text => Turn::text("the answer"),
        TurnSpec::Calls(calls) => {
            if let Some((tool, CallArgs::Broken)) = calls.first() {
                Turn::tool_call_raw(TOOL_NAMES[*tool], "{\"n\": 1")
            } else {
                Turn::tool_calls(calls.iter().map(|(tool, args)| {
                    let arguments = match args {
                        CallArgs::WrongType => json!({"n": "one"}),
                        _ => json!({"n": 1}),
                    };
                    (TOOL_NAMES[*tool], arguments)
                }))
            }
        }
        TurnSpec::ModelError => Turn::error(Error::Overloaded {
            provider: "scripted".into(),
            message: "try later".into(),
        }),
        TurnSpec::CutAfter(events) => Turn::text("a long answer that is cut").fail_after(
            *events,
            Error::IncompleteStream {
                message: "connection reset".into(),
            },
        ),
    };
    turn.with_usage(input, output)
        .with_delay(Duration::from_millis(delay_ms))
}

/// A wire fault for one turn, or none.
fn wire_fault() -> impl Strategy<Value = Option<Fault>> {
    prop_oneof![
        4 => Just(None),
        1 => (1u64..3).prop_map(|ms| Some(Fault::SlowChunks(Duration::from_millis(ms)))),
        1 => Just(Some(Fault::OneByteWrites)),
        1 => (0usize..6).prop_map(|after_events| Some(Fault::MalformedChunk { after_events })),
        1 => (0usize..6).prop_map(|after_events| Some(Fault::ErrorEvent { after_events })),
        1 => (0usize..300).prop_map(|after_bytes| Some(Fault::Disconnect { after_bytes })),
        1 => (0u64..30).prop_map(|ms| Some(Fault::Delay(Duration::from_millis(ms)))),
        1 => (1u64..5).prop_map(|ms| Some(Fault::rate_limited_ms(ms))),
        1 => Just(Some(Fault::ServerError)),
    ]
}

/// A scenario played over the wire: which server, a fault per turn, and the retry budget.
#[derive(Debug, Clone)]
struct WireScenario {
    scenario: Scenario,
    wire: Wire,
    faults: Vec<Option<Fault>>,
    max_retries: u32,
}

fn wire_scenario() -> impl Strategy<Value = WireScenario> {
    (
        scenario(),
        prop_oneof![
            Just(Wire::OpenAi),
            Just(Wire::Anthropic),
            Just(Wire::Gemini),
            Just(Wire::Bedrock),
            Just(Wire::Responses)
        ],
        prop::collection::vec(wire_fault(), 7),
        0u32..3,
    )
        .prop_map(|(scenario, wire, faults, max_retries)| WireScenario {
            scenario,
            wire,
            faults,
            max_retries,
        })
}

fn turns(scenario: &Scenario) -> impl Iterator<Item = Turn> + '_ {
    scenario
        .turns
        .iter()
        .map(|(spec, delay, usage)| turn(spec, *delay, *usage))
}

async fn run(scenario: &Scenario) -> RunResult {
    let model = ScriptedModel::new(turns(scenario));
    run_with(scenario, Agent::builder(model)).await
}

async fn run_over_wire(case: &WireScenario) -> RunResult {
    let faulted = turns(&case.scenario)
        .zip(&case.faults)
        .map(|(turn, fault)| match fault {
            Some(fault) => turn.with_fault(fault.clone()),
            None => turn,
        });
    let server = MockServer::builder(case.wire)
        .turns(faulted)
        .start()
        .await
        .unwrap();
    let retry = RetryPolicy {
        max_retries: case.max_retries,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(3),
        max_retry_after: Duration::from_millis(50),
    };
    let builder = common::wire_agent(&server, case.wire, retry);
    run_with(&case.scenario, builder).await
}

async fn run_with(scenario: &Scenario, builder: AgentBuilder) -> RunResult {
    let cancel = CancellationToken::new();
    let mut builder = builder
        .model("scripted")
        .tools(tools(scenario.slow_ms))
        .max_tool_iterations(scenario.max_tool_iterations)
        .with_options({
            let cancel = cancel.clone();
            move |o| o.cancel = Some(cancel)
        });
    if let Some(n) = scenario.max_tool_calls {
        builder = builder.max_tool_calls(n);
    }
    if let Some(n) = scenario.max_total_tokens {
        builder = builder.max_total_tokens(n);
    }
    if let Some(ms) = scenario.run_timeout_ms {
        builder = builder.timeout(Duration::from_millis(ms));
    }
    let agent = builder.build();
    if let Some(ms) = scenario.cancel_after_ms {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            cancel.cancel();
        });
    }
    if scenario.streaming {
        let events: Vec<RunEvent> = agent.run_stream("go").collect().await;
        let finishes = events
            .iter()
            .filter(|e| matches!(e, RunEvent::RunFinish { .. }))
            .count();
        assert_eq!(finishes, 1, "exactly one run_finish");
        match events.last() {
            Some(RunEvent::RunFinish { result }) => (**result).clone(),
            other => panic!("the stream ended with {other:?}"),
        }
    } else {
        agent.run("go").await.expect("no prompt hook can block")
    }
}

fn check(scenario: &Scenario, result: &RunResult) {
    assert_ne!(result.stop_reason, RunStopReason::AwaitingToolResults);
    history::validate(&result.messages).unwrap_or_else(|e| panic!("invalid history: {e}"));
    // An error exactly when the run stopped on one, or on a timeout (which names itself).
    match (&result.stop_reason, &result.error) {
        (RunStopReason::Error, Some(_)) | (RunStopReason::Timeout, Some(Error::Timeout { .. })) => {
        }
        (RunStopReason::Error | RunStopReason::Timeout, _) | (_, Some(_)) => panic!(
            "stop reason {:?} with error {:?}",
            result.stop_reason, result.error
        ),
        (_, None) => {}
    }

    let step_usage: Usage = result.steps.iter().map(|s| s.response.usage).sum();
    assert_eq!(result.usage, step_usage, "usage is the sum of the steps'");
    assert_eq!(
        result.turns as usize,
        result.steps.len(),
        "one step per turn"
    );
    assert!(
        result.turns <= scenario.max_tool_iterations + 1,
        "N tool iterations and the answer"
    );

    let mut non_cancelled = 0;
    let mut outcomes = 0;
    for (i, step) in result.steps.iter().enumerate() {
        assert_eq!(step.index, i);
        assert_eq!(step.tool_calls, step.response.tool_uses());
        assert_eq!(
            step.outcomes.len(),
            step.tool_calls.len(),
            "one outcome per call"
        );
        assert_eq!(
            step.tool_results.len(),
            step.tool_calls.len(),
            "one result per call"
        );
        for ((call, outcome), result) in step
            .tool_calls
            .iter()
            .zip(&step.outcomes)
            .zip(&step.tool_results)
        {
            assert_eq!(result.tool_use_id, call.id, "results in call order");
            let expect_error = !matches!(outcome, ToolOutcome::Completed { .. });
            assert_eq!(result.is_error, expect_error, "{outcome:?} → {result:?}");
            outcomes += 1;
            if !matches!(outcome, ToolOutcome::Cancelled { .. }) {
                non_cancelled += 1;
            }
            check_outcome(call.name.as_str(), &call.input, outcome);
        }
    }
    let tool_calls = result.tool_calls as usize;
    assert!(
        non_cancelled <= tool_calls && tool_calls <= outcomes,
        "tool_calls {tool_calls} counts the calls run ({non_cancelled} not cancelled, {outcomes} in all)"
    );
    if scenario.cancel_after_ms.is_none() && scenario.run_timeout_ms.is_none() {
        assert_eq!(
            tool_calls, non_cancelled,
            "without cancellation, every run call counts"
        );
    }
    if let Some(max) = scenario.max_tool_calls {
        assert!(result.tool_calls <= max, "tool-call limit");
    }
}

/// An outcome that is not cancelled must be the one the tool and its input call for.
fn check_outcome(name: &str, input: &Value, outcome: &ToolOutcome) {
    if matches!(outcome, ToolOutcome::Cancelled { .. }) {
        return;
    }
    let valid = input.get("n").is_some_and(Value::is_i64);
    let fits = match name {
        "missing" => matches!(outcome, ToolOutcome::UnknownTool { .. }),
        _ if !valid => matches!(outcome, ToolOutcome::InvalidArguments { .. }),
        "ok" => matches!(outcome, ToolOutcome::Completed { .. }),
        "fail" | "panic" => matches!(outcome, ToolOutcome::Failed { .. }),
        "slow" => matches!(
            outcome,
            ToolOutcome::Completed { .. } | ToolOutcome::TimedOut { .. }
        ),
        _ => false,
    };
    assert!(fits, "{name}({input}) ended {outcome:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_run_leaves_a_valid_consistent_history(scenario in scenario()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let result = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(3600), run(&scenario)).await
        });
        let result = result.expect("the run finished");
        check(&scenario, &result);
    }
}

proptest! {
    // Real time over loopback (paused time would fire the transport's idle timeouts while
    // tasks wait on sockets); each case takes well under a second.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_run_over_a_faulty_wire_leaves_a_valid_consistent_history(case in wire_scenario()) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(30), run_over_wire(&case)).await
        });
        let result = result.expect("the run finished within 30 s");
        check(&case.scenario, &result);
    }
}
