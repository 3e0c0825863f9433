//! genai: no tool loop of its own, so the loop is written by hand as its tool-use examples do
//! (c20-tooluse, c21-tooluse-streaming): call the model, take the captured tool calls, run them,
//! append the calls and the results, call again; at most 4 model calls.

use std::process::ExitCode;
use std::sync::Arc;

use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME};
use agentloop_peers::{Options, Outcome, drive};
use futures::StreamExt;
use genai::adapter::AdapterKind;
use genai::chat::{
    ChatMessage, ChatOptions, ChatRequest, ChatStreamEvent, Tool, ToolCall, ToolResponse,
};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{Client, ModelIden, ServiceTarget};
use serde::Deserialize;

const MAX_MODEL_CALLS: usize = 4;

#[derive(Deserialize)]
struct WeatherArgs {
    city: String,
}

/// What one model call produced.
struct Answer {
    text: String,
    calls: Vec<ToolCall>,
}

async fn call_model(
    client: &Client,
    request: ChatRequest,
    options: &ChatOptions,
    stream: bool,
) -> Result<Answer, String> {
    if !stream {
        let response = client
            .exec_chat(MODEL, request, Some(options))
            .await
            .map_err(|e| e.to_string())?;
        let text = response.first_text().unwrap_or_default().to_owned();
        return Ok(Answer {
            text,
            calls: response.into_tool_calls(),
        });
    }
    let mut response = client
        .exec_chat_stream(MODEL, request, Some(options))
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Answer {
        text: String::new(),
        calls: Vec::new(),
    };
    while let Some(event) = response.stream.next().await {
        match event.map_err(|e| e.to_string())? {
            ChatStreamEvent::Chunk(chunk) => answer.text.push_str(&chunk.content),
            ChatStreamEvent::End(end) => {
                answer.calls = end.captured_into_tool_calls().unwrap_or_default();
            }
            _ => {}
        }
    }
    Ok(answer)
}

async fn one_run(
    client: Client,
    tool: Arc<Tool>,
    options: Arc<ChatOptions>,
    stream: bool,
) -> Outcome {
    let mut request =
        ChatRequest::new(vec![ChatMessage::user(PROMPT)]).with_tools(vec![tool.as_ref().clone()]);
    for _ in 0..MAX_MODEL_CALLS {
        let answer = call_model(&client, request.clone(), &options, stream).await?;
        if answer.calls.is_empty() {
            return workload::check_answer(&answer.text);
        }
        let results: Vec<ToolResponse> = answer.calls.iter().map(run_tool).collect();
        request = request.append_message(answer.calls);
        for result in results {
            request = request.append_message(result);
        }
    }
    Err(format!(
        "no final answer after {MAX_MODEL_CALLS} model calls"
    ))
}

fn run_tool(call: &ToolCall) -> ToolResponse {
    let content = if call.fn_name != TOOL_NAME {
        format!("Error: unknown tool {}", call.fn_name)
    } else {
        match serde_json::from_value::<WeatherArgs>(call.fn_arguments.clone()) {
            Ok(args) => serde_json::to_string(&workload::get_weather(&args.city))
                .unwrap_or_else(|e| format!("Error: {e}")),
            Err(e) => format!("Error: invalid arguments: {e}"),
        }
    };
    ToolResponse::new(call.call_id.clone(), content)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("genai: {e}");
            return ExitCode::from(2);
        }
    };
    // genai appends `chat/completions` to the endpoint, so the base URL ends with a slash.
    let base_url: Arc<str> = format!("{}/", options.base_url).into();
    let resolver = ServiceTargetResolver::from_resolver_fn(
        move |target: ServiceTarget| -> Result<ServiceTarget, genai::resolver::Error> {
            Ok(ServiceTarget {
                endpoint: Endpoint::from_owned(Arc::clone(&base_url)),
                auth: AuthData::from_single("genai"),
                model: ModelIden::new(AdapterKind::OpenAI, target.model.model_name),
            })
        },
    );
    let client = match Client::builder()
        .with_service_target_resolver(resolver)
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("genai: cannot build the client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tool = Arc::new(
        Tool::new(TOOL_NAME)
            .with_description(TOOL_DESCRIPTION)
            .with_schema(workload::tool_schema()),
    );
    let chat_options = Arc::new(
        ChatOptions::default()
            .with_capture_usage(true)
            .with_capture_tool_calls(true),
    );
    let stream = options.stream;
    drive("genai", &options, move || {
        one_run(
            client.clone(),
            Arc::clone(&tool),
            Arc::clone(&chat_options),
            stream,
        )
    })
    .await
}
