//! async-openai: no tool loop of its own, so the loop is written by hand as its tool-call
//! examples do: call the model, assemble the calls (from stream chunks, by index), run them,
//! append the results, call again; at most 4 model calls.

use std::process::ExitCode;
use std::sync::Arc;

use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME};
use agentloop_peers::{Options, Outcome, drive};
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestToolMessageContent,
    ChatCompletionRequestUserMessage, ChatCompletionStreamOptions, ChatCompletionTool,
    ChatCompletionTools, CreateChatCompletionRequest, FunctionCall, FunctionObject,
};
use futures::StreamExt;
use serde::Deserialize;

const MAX_MODEL_CALLS: usize = 4;

#[derive(Deserialize)]
struct WeatherArgs {
    city: String,
}

/// What one model call produced.
struct Answer {
    text: String,
    calls: Vec<ChatCompletionMessageToolCall>,
}

async fn call_model(
    client: &Client<OpenAIConfig>,
    request: CreateChatCompletionRequest,
    stream: bool,
) -> Result<Answer, String> {
    if !stream {
        let response = client
            .chat()
            .create(request)
            .await
            .map_err(|e| e.to_string())?;
        let choice = response.choices.into_iter().next().ok_or("no choice")?;
        let calls = choice
            .message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .filter_map(|call| match call {
                ChatCompletionMessageToolCalls::Function(call) => Some(call),
                ChatCompletionMessageToolCalls::Custom(_) => None,
            })
            .collect();
        return Ok(Answer {
            text: choice.message.content.unwrap_or_default(),
            calls,
        });
    }
    let mut events = client
        .chat()
        .create_stream(request)
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Answer {
        text: String::new(),
        calls: Vec::new(),
    };
    while let Some(chunk) = events.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        for choice in chunk.choices {
            if let Some(text) = choice.delta.content {
                answer.text.push_str(&text);
            }
            for delta in choice.delta.tool_calls.unwrap_or_default() {
                let index = delta.index as usize;
                if answer.calls.len() <= index {
                    answer
                        .calls
                        .resize_with(index + 1, ChatCompletionMessageToolCall::default);
                }
                let call = &mut answer.calls[index];
                if let Some(id) = delta.id {
                    call.id = id;
                }
                if let Some(function) = delta.function {
                    if let Some(name) = function.name {
                        call.function.name = name;
                    }
                    if let Some(arguments) = function.arguments {
                        call.function.arguments.push_str(&arguments);
                    }
                }
            }
        }
    }
    Ok(answer)
}

async fn one_run(
    client: Arc<Client<OpenAIConfig>>,
    tools: Arc<Vec<ChatCompletionTools>>,
    stream: bool,
) -> Outcome {
    let mut messages: Vec<ChatCompletionRequestMessage> =
        vec![ChatCompletionRequestUserMessage::from(PROMPT).into()];
    for _ in 0..MAX_MODEL_CALLS {
        let request = CreateChatCompletionRequest {
            model: MODEL.to_owned(),
            messages: messages.clone(),
            tools: Some(tools.as_ref().clone()),
            stream_options: stream.then_some(ChatCompletionStreamOptions {
                include_usage: Some(true),
                include_obfuscation: None,
            }),
            ..Default::default()
        };
        let answer = call_model(&client, request, stream).await?;
        if answer.calls.is_empty() {
            return workload::check_answer(&answer.text);
        }
        messages.push(
            ChatCompletionRequestAssistantMessage {
                content: (!answer.text.is_empty()).then(|| answer.text.into()),
                tool_calls: Some(
                    answer
                        .calls
                        .iter()
                        .cloned()
                        .map(ChatCompletionMessageToolCalls::Function)
                        .collect(),
                ),
                ..Default::default()
            }
            .into(),
        );
        for call in answer.calls {
            let result = run_tool(&call.function);
            messages.push(
                ChatCompletionRequestToolMessage {
                    content: ChatCompletionRequestToolMessageContent::Text(result),
                    tool_call_id: call.id,
                }
                .into(),
            );
        }
    }
    Err(format!(
        "no final answer after {MAX_MODEL_CALLS} model calls"
    ))
}

fn run_tool(function: &FunctionCall) -> String {
    if function.name != TOOL_NAME {
        return format!("Error: unknown tool {}", function.name);
    }
    match serde_json::from_str::<WeatherArgs>(&function.arguments) {
        Ok(args) => serde_json::to_string(&workload::get_weather(&args.city))
            .unwrap_or_else(|e| format!("Error: {e}")),
        Err(e) => format!("Error: invalid arguments: {e}"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("async-openai: {e}");
            return ExitCode::from(2);
        }
    };
    let config = OpenAIConfig::new()
        .with_api_base(&options.base_url)
        .with_api_key("async-openai");
    let client = Arc::new(Client::with_config(config));
    let tools = Arc::new(vec![ChatCompletionTools::Function(ChatCompletionTool {
        function: FunctionObject {
            name: TOOL_NAME.to_owned(),
            description: Some(TOOL_DESCRIPTION.to_owned()),
            parameters: Some(workload::tool_schema()),
            strict: None,
        },
    })]);
    let stream = options.stream;
    drive("async-openai", &options, move || {
        one_run(Arc::clone(&client), Arc::clone(&tools), stream)
    })
    .await
}
