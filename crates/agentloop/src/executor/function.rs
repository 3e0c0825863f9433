//! The function executor: an in-process handler, with the descriptor's output schema.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::OutputCheck;
use crate::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};

/// Runs an in-process handler and checks its results against the output schema, if any.
#[derive(Clone)]
pub struct FunctionExecutor {
    handler: Arc<dyn ToolHandler>,
    output: Option<Arc<OutputCheck>>,
}

impl std::fmt::Debug for FunctionExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionExecutor")
            .field("checks_output", &self.output.is_some())
            .finish_non_exhaustive()
    }
}

impl FunctionExecutor {
    pub(crate) fn new(handler: Arc<dyn ToolHandler>, output: Option<Arc<OutputCheck>>) -> Self {
        Self { handler, output }
    }
}

impl ToolHandler for FunctionExecutor {
    fn call(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let fut = self.handler.call(ctx, input);
        let Some(output) = self.output.clone() else {
            return fut;
        };
        Box::pin(async move {
            let result = fut.await?;
            output.check_output(&result)?;
            Ok(result)
        })
    }
}
