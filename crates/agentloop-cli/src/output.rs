//! The `--json` document of a run: the same names and fields as the library's events.

use agentloop::run::RunResult;
use serde_json::{Value, json};

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
        "steps": steps,
    });
    if let Some(error) = &result.error {
        doc["error"] = json!({"kind": error.kind(), "message": error.to_string()});
    }
    doc
}
