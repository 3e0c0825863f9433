//! The `--json` document of a run: the same names and fields as the library's events.

use agentloop::run::RunResult;
use serde_json::{Value, json};

/// The run's cost in USD, or why there is none: a missing price is not a zero.
fn cost_json(result: &RunResult) -> Value {
    match &result.cost {
        Some(cost) => json!({
            "total": cost.total,
            "currency": agentloop::cost::Cost::CURRENCY,
            "input": cost.input,
            "output": cost.output,
            "cache_read": cost.cache_read,
            "cache_write": cost.cache_write,
        }),
        None => {
            let unpriced: Vec<&str> = result
                .steps
                .iter()
                .filter(|s| s.cost.is_none())
                .map(|s| s.response.model.as_str())
                .collect();
            json!({
                "total": null,
                "currency": agentloop::cost::Cost::CURRENCY,
                "unknown": if unpriced.is_empty() {
                    "no model call was made".to_owned()
                } else {
                    format!("no price for model {}", unpriced.join(", "))
                },
            })
        }
    }
}

/// One JSON document describing a finished run.
pub fn run_json(result: &RunResult) -> Value {
    let steps: Vec<Value> = result
        .steps
        .iter()
        .map(|step| {
            let calls: Vec<Value> = step
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let result = step.tool_results.get(i);
                    json!({
                        "id": call.id,
                        "name": call.name,
                        "input": call.input,
                        "outcome": step.outcomes.get(i).map(|o| o.kind()),
                        "result": result.map(|r| json!({
                            "content": r.content.to_text(),
                            "is_error": r.is_error,
                        })),
                    })
                })
                .collect();
            json!({
                "index": step.index,
                "text": step.response.text(),
                "stop_reason": step.response.stop_reason,
                "tool_calls": calls,
                "usage": step.response.usage,
                "cost": step.cost.map(|c| c.total),
                "duration_ms": step.duration.as_millis() as u64,
            })
        })
        .collect();
    let mut doc = json!({
        "text": result.text(),
        "stop_reason": result.stop_reason.as_str(),
        "turns": result.turns,
        "tool_calls": result.tool_calls,
        "usage": result.usage,
        "cost": cost_json(result),
        "steps": steps,
    });
    if let Some(error) = &result.error {
        doc["error"] = json!({"kind": error.kind(), "message": error.to_string()});
    }
    doc
}
