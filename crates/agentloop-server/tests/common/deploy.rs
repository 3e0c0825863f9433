//! The `deploy` tool the approval tests pause on, and a record of its runs.

use std::sync::{Arc, Mutex};

use agentloop::Tool;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's input.
#[derive(Deserialize, JsonSchema)]
pub struct Deploy {
    pub env: String,
}

/// Where each run of the tool is written down, to count runs.
pub type Ran = Arc<Mutex<Vec<String>>>;

/// `deploy`, which needs approval and writes each run's `env` to `ran`.
pub fn deploy_tool(ran: &Ran) -> Tool {
    let ran = ran.clone();
    Tool::function("deploy", "Deploy the app", move |d: Deploy| {
        let ran = ran.clone();
        async move {
            ran.lock().unwrap().push(d.env.clone());
            Ok::<_, String>(format!("deployed to {}", d.env))
        }
    })
    .with_approval_required(true)
}
