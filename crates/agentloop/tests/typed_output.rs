//! Typed answers over real HTTP against the testkit's wire servers, for OpenAI, Anthropic,
//! Gemini, OpenAI Responses and Bedrock Converse:
//! a tool call and then a typed answer (native and tool strategies), an invalid answer
//! corrected on the second try, the retry budget, and repeated identical invalid answers.
//!
//! Wire shapes relied on: OpenAI Chat Completions `response_format: {"type": "json_schema",
//! "json_schema": {"name", "schema", "strict"}}` (`ResponseFormatJsonSchema` in
//! openai/openai-openapi) and `tool_choice: "required"`; Anthropic Messages structured outputs
//! `output_config: {"format": {"type": "json_schema", "schema"}}`
//! (platform.claude.com/docs/en/build-with-claude/structured-outputs) and
//! `tool_choice: {"type": "any"}`, with `strict: true` tools in Anthropic's strict dialect;
//! Gemini `generationConfig: {"responseMimeType": "application/json", "responseJsonSchema"}`
//! (ai.google.dev/api/generate-content, `GenerationConfig`) and
//! `toolConfig: {"functionCallingConfig": {"mode": "ANY"}}`; Responses `text: {"format":
//! {"type": "json_schema", "name", "schema", "strict"}}` (platform.openai.com/docs/api-reference/
//! responses/create, `text.format`) and `tool_choice: "required"`; Bedrock Converse
//! `outputConfig: {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {"schema":
//! "<the schema as a JSON string>", "name"}}}}` (Bedrock API reference: `OutputConfig`,
//! `OutputFormat`, `OutputFormatStructure`, `JsonSchemaDefinition`, whose `schema` is a string)
//! and `toolConfig.toolChoice: {"any": {}}`.

use std::sync::Arc;

use agentloop::output::{Output, OutputStrategy};
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::RunStore;
use agentloop::{Agent, Error, Provider, RunEvent, RunStopReason, Tool};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, RecordedRequest, Wire};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

/// A weather report.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Report {
    city: String,
    temp_c: i32,
}

fn provider(server: &MockServer) -> Arc<dyn Provider> {
    let mut config = HttpConfig::new(server.base_url());
    match server.wire() {
        Wire::OpenAi => {
            config.api_key = Some(ApiKey::new("sk-test"));
            Arc::new(OpenAi::new(config).unwrap())
        }
        Wire::Anthropic => {
            config.api_key = Some(ApiKey::new("sk-ant-test"));
            Arc::new(Anthropic::new(config).unwrap())
        }
        Wire::Gemini => {
            config.api_key = Some(ApiKey::new("gemini-test"));
            Arc::new(agentloop::provider::gemini::Gemini::new(config).unwrap())
        }
        Wire::Bedrock => Arc::new(
            agentloop::provider::bedrock::Bedrock::new(
                config,
                "eu-west-1",
                agentloop::provider::bedrock::BedrockAuth::Bearer(ApiKey::new("bedrock-test")),
            )
            .unwrap(),
        ),
        Wire::Responses => {
            config.api_key = Some(ApiKey::new("sk-test"));
            Arc::new(agentloop::provider::responses::OpenAiResponses::new(config).unwrap())
        }
    }
}

fn agent(server: &MockServer) -> Agent {
    Agent::builder_shared(provider(server))
        .model("m")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |w: GetWeather| async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) },
        ))
        .build()
}

fn report_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temp_c": {"type": "integer", "format": "int32"}
        },
        "required": ["city", "temp_c"]
    })
}

/// The report's schema in OpenAI's and Anthropic's strict dialects: closed, numbers without
/// `format`.
fn strict_report_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
        "required": ["city", "temp_c"],
        "additionalProperties": false
    })
}

fn last_message(request: &RecordedRequest) -> Value {
    if request.body.get("input").is_some() {
        return request.body["input"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
    }
    if request.body.get("contents").is_some() {
        return request.body["contents"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
    }
    request.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone()
}

const WIRES: [Wire; 5] = [
    Wire::OpenAi,
    Wire::Anthropic,
    Wire::Gemini,
    Wire::Responses,
    Wire::Bedrock,
];

/// Bedrock's `outputConfig` for the report: the schema in the strict (closed) form, as a
/// string.
fn bedrock_output_config() -> Value {
    json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
        "schema": strict_report_schema().to_string(),
        "name": "final_answer"
    }}}})
}

/// The tools of a request, in the wire's own list.
fn wire_tools(wire: Wire, body: &Value) -> Vec<Value> {
    match wire {
        Wire::Gemini => &body["tools"][0]["functionDeclarations"],
        Wire::Bedrock => &body["toolConfig"]["tools"],
        _ => &body["tools"],
    }
    .as_array()
    .cloned()
    .unwrap_or_default()
}

fn native() -> Output<Report> {
    Output::new().with_strategy(OutputStrategy::Native)
}

#[tokio::test]
async fn openai_answers_natively_and_anthropic_and_gemini_by_the_final_answer_tool_by_default() {
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Tool),
        (Wire::Gemini, OutputStrategy::Tool),
        (Wire::Responses, OutputStrategy::Native),
        // Converse's structured output is for some models only; every model with tools
        // takes the final-answer tool.
        (Wire::Bedrock, OutputStrategy::Tool),
    ] {
        let server = MockServer::start(wire, []).await.unwrap();
        assert_eq!(provider(&server).output_strategy(), strategy, "{wire:?}");
    }
}

/// Claude 4.5 and later take structured output, on the Messages API and through Converse
/// (platform.claude.com/docs/en/build-with-claude/structured-outputs; Bedrock user guide, "Get
/// validated JSON results from models"): a typed run on one answers natively unless told
/// otherwise, and one on an older Claude by the final-answer tool.
#[tokio::test]
async fn a_claude_4_5_answers_natively_by_default_and_an_older_claude_by_the_final_answer_tool() {
    for (wire, model, native) in [
        (Wire::Anthropic, "claude-sonnet-4-5-20250929", true),
        (Wire::Anthropic, "claude-sonnet-4-20250514", false),
        (
            Wire::Bedrock,
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            true,
        ),
        (
            Wire::Bedrock,
            "anthropic.claude-3-5-sonnet-20240620-v1:0",
            false,
        ),
    ] {
        let answer = r#"{"city": "Paris", "temp_c": 18}"#;
        let server = MockServer::start(
            wire,
            [if native {
                Turn::text(answer)
            } else {
                Turn::tool_call("final_answer", serde_json::from_str(answer).unwrap())
            }],
        )
        .await
        .unwrap();
        let typed = Agent::builder_shared(provider(&server))
            .model(model)
            .build()
            .run_output::<Report>("Weather in Paris?")
            .await
            .unwrap();
        assert_eq!(typed.value.city, "Paris", "{model}");
        let body = &server.requests()[0].body;
        let (format, tools) = match wire {
            Wire::Bedrock => (body.get("outputConfig"), wire_tools(wire, body)),
            _ => (body.get("output_config"), wire_tools(wire, body)),
        };
        let names: Vec<&str> = tools
            .iter()
            .map(|t| {
                t["name"]
                    .as_str()
                    .or(t["toolSpec"]["name"].as_str())
                    .unwrap()
            })
            .collect();
        if native {
            assert!(format.is_some(), "{model}: {body}");
            assert!(names.is_empty(), "{model}: {names:?}");
        } else {
            assert_eq!(format, None, "{model}");
            assert_eq!(names, ["final_answer"], "{model}");
        }
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_tool_call_then_a_native_typed_answer() {
    for wire in WIRES {
        let server = MockServer::start(
            wire,
            [
                Turn::tool_call("get_weather", json!({"city": "Paris"})),
                Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
            ],
        )
        .await
        .unwrap();
        let typed = agent(&server)
            .run_output_with("Weather in Paris?", native())
            .await
            .unwrap();
        assert_eq!(
            typed.value,
            Report {
                city: "Paris".into(),
                temp_c: 18
            }
        );
        assert_eq!(typed.result.stop_reason, RunStopReason::EndTurn);
        assert_eq!(typed.result.tool_calls, 1);
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        for request in &requests {
            match wire {
                // Gemini's subset keeps `format`; it has no strict mode to close objects.
                Wire::Gemini => assert_eq!(
                    request.body["generationConfig"],
                    json!({
                        "responseMimeType": "application/json",
                        "responseJsonSchema": report_schema()
                    }),
                ),
                Wire::Responses => assert_eq!(
                    request.body["text"],
                    json!({"format": {
                        "type": "json_schema",
                        "name": "final_answer",
                        "schema": strict_report_schema(),
                        "strict": true
                    }}),
                ),
                Wire::Bedrock => {
                    assert_eq!(request.body["outputConfig"], bedrock_output_config());
                }
                // Strict: every property required (both are), objects closed, numbers
                // without `format`.
                Wire::OpenAi => assert_eq!(
                    request.body["response_format"],
                    json!({
                        "type": "json_schema",
                        "json_schema": {
                            "name": "final_answer",
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "city": {"type": "string"},
                                    "temp_c": {"type": "integer"}
                                },
                                "required": ["city", "temp_c"],
                                "additionalProperties": false
                            },
                            "strict": true
                        }
                    }),
                    "{wire:?}"
                ),
                Wire::Anthropic => assert_eq!(
                    request.body["output_config"],
                    json!({"format": {"type": "json_schema", "schema": strict_report_schema()}}),
                    "{wire:?}"
                ),
            }
            // The native strategy adds no tool and leaves the tool choice alone.
            assert_eq!(wire_tools(wire, &request.body).len(), 1, "{wire:?}");
            assert_eq!(request.body.get("tool_choice"), None, "{wire:?}");
            match wire {
                Wire::Bedrock => assert_eq!(
                    request.body["toolConfig"].get("toolChoice"),
                    None,
                    "{wire:?}"
                ),
                _ => assert_eq!(request.body.get("toolConfig"), None, "{wire:?}"),
            }
        }
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_tool_call_then_a_typed_answer_by_the_final_answer_tool() {
    for wire in WIRES {
        let server = MockServer::start(
            wire,
            [
                Turn::tool_call("get_weather", json!({"city": "Paris"})),
                Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
            ],
        )
        .await
        .unwrap();
        let typed = agent(&server)
            .run_output_with(
                "Weather in Paris?",
                Output::<Report>::new().with_strategy(OutputStrategy::Tool),
            )
            .await
            .unwrap();
        assert_eq!(typed.value.temp_c, 18);
        assert_eq!(typed.result.stop_reason, RunStopReason::EndTurn);
        // Both calls answered: the history stays valid to send on.
        assert_eq!(typed.result.tool_calls, 2);
        let request = server.last_request().unwrap();
        assert_eq!(request.body.get("response_format"), None);
        assert_eq!(request.body.get("output_config"), None);
        assert_eq!(request.body.get("generationConfig"), None);
        assert_eq!(request.body.get("text"), None);
        assert_eq!(request.body.get("outputConfig"), None);
        let tools = wire_tools(wire, &request.body);
        let names: Vec<&str> = tools
            .iter()
            .map(|t| {
                t.get("name")
                    .or_else(|| t["function"].get("name"))
                    .or_else(|| t["toolSpec"].get("name"))
                    .and_then(Value::as_str)
                    .unwrap()
            })
            .collect();
        assert_eq!(names, ["get_weather", "final_answer"], "{wire:?}");
        let description = "A weather report. Give your final answer by calling this tool; the \
                           run ends when it is called with valid arguments.";
        match wire {
            Wire::Gemini => {
                assert_eq!(
                    request.body["toolConfig"],
                    json!({"functionCallingConfig": {"mode": "ANY"}})
                );
                assert_eq!(tools[1]["parametersJsonSchema"], report_schema());
            }
            Wire::Responses => {
                assert_eq!(request.body["tool_choice"], json!("required"));
                assert_eq!(
                    tools[1],
                    json!({
                        "type": "function",
                        "name": "final_answer",
                        "description": description,
                        "parameters": strict_report_schema(),
                        "strict": true
                    })
                );
            }
            // Bedrock's dialect: refs inlined, the schema otherwise as written.
            Wire::Bedrock => {
                assert_eq!(request.body["toolConfig"]["toolChoice"], json!({"any": {}}));
                assert_eq!(
                    tools[1],
                    json!({"toolSpec": {
                        "name": "final_answer",
                        "description": description,
                        "inputSchema": {"json": report_schema()}
                    }})
                );
            }
            Wire::OpenAi => {
                assert_eq!(request.body["tool_choice"], json!("required"));
                assert_eq!(
                    tools[1],
                    json!({"type": "function", "function": {
                        "name": "final_answer",
                        "description": description,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "city": {"type": "string"},
                                "temp_c": {"type": "integer"}
                            },
                            "required": ["city", "temp_c"],
                            "additionalProperties": false
                        },
                        "strict": true
                    }})
                );
            }
            Wire::Anthropic => {
                assert_eq!(request.body["tool_choice"], json!({"type": "any"}));
                assert_eq!(tools[1]["input_schema"], strict_report_schema());
                assert_eq!(tools[1]["strict"], json!(true));
            }
        }
        server.assert_complete();
    }
}

#[tokio::test]
async fn an_invalid_native_answer_goes_back_with_pointer_errors_and_is_corrected() {
    for wire in WIRES {
        let server = MockServer::start(
            wire,
            [
                Turn::text(r#"{"city": "Paris", "temp_c": "warm"}"#),
                Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
            ],
        )
        .await
        .unwrap();
        let typed = agent(&server)
            .run_output_with("Weather in Paris?", native())
            .await
            .unwrap();
        assert_eq!(typed.value.temp_c, 18);
        let retry = &server.requests()[1];
        let feedback = "Error: your answer is not a valid `final_answer`:\n\
                        - /temp_c: \"warm\" is not of type \"integer\"\n\
                        Fix it and answer again (retry 1 of 2).";
        let answer = r#"{"city": "Paris", "temp_c": "warm"}"#;
        let weather = json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name."}},
            "required": ["city"]
        });
        let expected = match wire {
            Wire::Gemini => json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                    {"role": "model", "parts": [{"text": answer}]},
                    {"role": "user", "parts": [{"text": feedback}]}
                ],
                "tools": [{"functionDeclarations": [{
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parametersJsonSchema": weather
                }]}],
                "generationConfig": {
                    "responseMimeType": "application/json",
                    "responseJsonSchema": report_schema()
                }
            }),
            Wire::Responses => json!({
                "model": "m",
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                    {"role": "assistant", "content": [{"type": "output_text", "text": answer}]},
                    {"role": "user", "content": [{"type": "input_text", "text": feedback}]}
                ],
                "tools": [{
                    "type": "function",
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": weather,
                    "strict": false
                }],
                "text": {"format": {
                    "type": "json_schema",
                    "name": "final_answer",
                    "schema": strict_report_schema(),
                    "strict": true
                }},
                "store": false,
                "include": ["reasoning.encrypted_content"]
            }),
            Wire::Bedrock => json!({
                "messages": [
                    {"role": "user", "content": [{"text": "Weather in Paris?"}]},
                    {"role": "assistant", "content": [{"text": answer}]},
                    {"role": "user", "content": [{"text": feedback}]}
                ],
                "toolConfig": {"tools": [{"toolSpec": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "inputSchema": {"json": weather}
                }}]},
                "outputConfig": bedrock_output_config()
            }),
            Wire::OpenAi => json!({
                "model": "m",
                "messages": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": feedback}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": weather
                }}],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "final_answer",
                    "schema": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
                        "required": ["city", "temp_c"],
                        "additionalProperties": false
                    },
                    "strict": true
                }}
            }),
            Wire::Anthropic => json!({
                "model": "m",
                "max_tokens": 4096,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": answer}]},
                    {"role": "user", "content": [{"type": "text", "text": feedback}]}
                ],
                "tools": [{
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "input_schema": weather
                }],
                "output_config": {"format": {"type": "json_schema", "schema": strict_report_schema()}}
            }),
        };
        assert_eq!(retry.body, expected, "{wire:?}");
        server.assert_complete();
    }
}

#[tokio::test]
async fn an_invalid_final_answer_call_goes_back_as_a_tool_error_and_is_corrected() {
    for wire in WIRES {
        let server = MockServer::start(
            wire,
            [
                Turn::tool_call("final_answer", json!({"city": "Paris"})).with_ids(["call_a"]),
                Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
            ],
        )
        .await
        .unwrap();
        let typed = agent(&server)
            .run_output_with(
                "Weather in Paris?",
                Output::<Report>::new().with_strategy(OutputStrategy::Tool),
            )
            .await
            .unwrap();
        assert_eq!(typed.value.temp_c, 18);
        let text = "Error: invalid arguments for tool `final_answer`:\n\
                    - /: \"temp_c\" is a required property\n\
                    Fix the arguments and call the tool again (retry 1 of 2).";
        let expected = match wire {
            Wire::Gemini => json!({"role": "user", "parts": [{"functionResponse": {
                "id": "call_a", "name": "final_answer", "response": {"error": text}
            }}]}),
            Wire::Responses => json!({
                "type": "function_call_output", "call_id": "call_a", "output": text
            }),
            Wire::Bedrock => json!({"role": "user", "content": [{"toolResult": {
                "toolUseId": "call_a", "content": [{"text": text}], "status": "error"
            }}]}),
            Wire::OpenAi => json!({
                "role": "tool", "tool_call_id": "call_a", "content": text
            }),
            Wire::Anthropic => json!({"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": "call_a", "content": text, "is_error": true
            }]}),
        };
        assert_eq!(last_message(&server.requests()[1]), expected, "{wire:?}");
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_validator_rejects_a_value_with_a_message_the_model_sees() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::text(r#"{"city": "Paris", "temp_c": 99}"#),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
        ],
    )
    .await
    .unwrap();
    let output = Output::<Report>::new().with_validator(|r| {
        if r.temp_c > 60 {
            Err(format!("{} °C is not a weather temperature", r.temp_c))
        } else {
            Ok(())
        }
    });
    let typed = agent(&server)
        .run_output_with("Weather in Paris?", output)
        .await
        .unwrap();
    assert_eq!(typed.value.temp_c, 18);
    assert_eq!(
        last_message(&server.requests()[1])["content"],
        "Error: your answer is not a valid `final_answer`:\n\
         - /: 99 °C is not a weather temperature\n\
         Fix it and answer again (retry 1 of 2)."
    );
}

#[tokio::test]
async fn the_retry_budget_ends_the_run_with_a_typed_error() {
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Native),
        (Wire::OpenAi, OutputStrategy::Tool),
        (Wire::Anthropic, OutputStrategy::Tool),
        (Wire::Gemini, OutputStrategy::Native),
        (Wire::Gemini, OutputStrategy::Tool),
        (Wire::Responses, OutputStrategy::Native),
        (Wire::Responses, OutputStrategy::Tool),
        (Wire::Bedrock, OutputStrategy::Native),
        (Wire::Bedrock, OutputStrategy::Tool),
    ] {
        let answers = match strategy {
            OutputStrategy::Tool => [
                Turn::tool_call_raw("final_answer", "not json"),
                Turn::tool_call("final_answer", json!({"city": "Paris"})),
                Turn::tool_call("final_answer", json!({"temp_c": 3})),
            ],
            _ => [
                Turn::text("not json"),
                Turn::text(r#"{"city": "Paris"}"#),
                Turn::text(r#"{"temp_c": 3}"#),
            ],
        };
        let server = MockServer::start(wire, answers).await.unwrap();
        let error = agent(&server)
            .run_output_with(
                "Weather in Paris?",
                Output::<Report>::new().with_strategy(strategy),
            )
            .await
            .unwrap_err();
        let Error::InvalidOutput { name, violations } = error else {
            panic!("{wire:?} {strategy:?}: expected InvalidOutput, got {error:?}");
        };
        assert_eq!(name, "final_answer");
        assert_eq!(
            violations,
            [agentloop::tool::Violation {
                path: String::new(),
                message: "\"city\" is a required property".into()
            }],
            "{wire:?} {strategy:?}"
        );
        // Two retries after the first answer, then no more calls.
        assert_eq!(server.calls(), 3, "{wire:?} {strategy:?}");
        server.assert_complete();
    }
}

#[tokio::test]
async fn repeated_identical_invalid_answers_stop_early() {
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Native),
        (Wire::OpenAi, OutputStrategy::Tool),
        (Wire::Anthropic, OutputStrategy::Tool),
        (Wire::Gemini, OutputStrategy::Native),
        (Wire::Gemini, OutputStrategy::Tool),
        (Wire::Responses, OutputStrategy::Native),
        (Wire::Responses, OutputStrategy::Tool),
        (Wire::Bedrock, OutputStrategy::Native),
        (Wire::Bedrock, OutputStrategy::Tool),
    ] {
        let answer = |_| match strategy {
            OutputStrategy::Tool => Turn::tool_call("final_answer", json!({"city": "Paris"})),
            _ => Turn::text(r#"{"city": "Paris"}"#),
        };
        let server = MockServer::start(wire, (0..2).map(answer)).await.unwrap();
        let agent = agent(&server).with_options(|o| o.limits.invalid_argument_retries = 5);
        let result = agent
            .run_output_stream_with(
                "Weather in Paris?",
                Output::<Report>::new().with_strategy(strategy),
            )
            .into_output()
            .await;
        assert!(
            matches!(result, Err(Error::InvalidOutput { .. })),
            "{wire:?} {strategy:?}: {result:?}"
        );
        // Stopped at the second identical answer, with retries left.
        assert_eq!(server.calls(), 2, "{wire:?} {strategy:?}");
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_repeated_invalid_answer_stops_with_its_reason() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text(r#"{"city": 1}"#), Turn::text(r#"{"city": 1}"#)],
    )
    .await
    .unwrap();
    let agent = agent(&server).with_options(|o| o.limits.invalid_argument_retries = 5);
    let mut stream = agent.run_output_stream::<Report>("Weather?");
    let mut finish = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    let result = finish.unwrap();
    assert_eq!(
        result.stop_reason,
        RunStopReason::RepeatedInvalidCall("final_answer".into())
    );
    assert!(matches!(result.error, Some(Error::InvalidOutput { .. })));
    server.assert_complete();
}

#[tokio::test]
async fn a_streamed_typed_run_shows_the_partial_answer_then_the_checked_value() {
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Tool),
        (Wire::Gemini, OutputStrategy::Native),
        (Wire::Responses, OutputStrategy::Native),
        (Wire::Bedrock, OutputStrategy::Tool),
        (Wire::Bedrock, OutputStrategy::Native),
    ] {
        let answer = json!({"city": "Paris", "temp_c": 18});
        let turn = match strategy {
            OutputStrategy::Tool => Turn::tool_call("final_answer", answer.clone()),
            _ => Turn::text(answer.to_string()),
        };
        let server = MockServer::start(wire, [turn]).await.unwrap();
        let mut stream = agent(&server)
            .run_output_stream_with("Weather?", Output::<Report>::new().with_strategy(strategy));
        let mut partials = Vec::new();
        let mut kinds = Vec::new();
        while let Some(event) = stream.next().await {
            match &event {
                RunEvent::PartialOutput { value } => partials.push((**value).clone()),
                RunEvent::Output { value } => assert_eq!(**value, answer),
                _ => {}
            }
            kinds.push(event.kind());
        }
        assert!(!partials.is_empty(), "{wire:?}");
        assert_eq!(partials.last(), Some(&answer), "{wire:?}");
        let n = kinds.len();
        assert_eq!(kinds[n - 2..], ["output", "run_finish"], "{wire:?}");
    }
}

#[tokio::test]
async fn a_prompted_answer_is_found_in_the_text() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text(
            "Here it is:\n```json\n{\"city\": \"Paris\", \"temp_c\": 18}\n```\nAnything else?",
        )],
    )
    .await
    .unwrap();
    let typed = agent(&server)
        .run_output_with(
            "Weather in Paris?",
            Output::<Report>::new().with_strategy(OutputStrategy::Prompted),
        )
        .await
        .unwrap();
    assert_eq!(typed.value.temp_c, 18);
    let request = server.last_request().unwrap();
    assert_eq!(
        request.body["messages"][0],
        json!({"role": "system", "content": format!(
            "Give your final answer as one JSON value, and nothing else, that follows this \
             JSON Schema:\n{}",
            report_schema()
        )})
    );
    assert_eq!(request.body.get("response_format"), None);
    assert_eq!(request.body["tools"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_rejected_answer_past_the_token_budget_ends_the_run() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text(r#"{"city": "Paris"}"#).with_usage(100, 100)],
    )
    .await
    .unwrap();
    let agent = agent(&server).with_options(|o| o.limits.max_total_tokens = Some(150));
    let mut stream = agent.run_output_stream_with("Weather?", native());
    let mut finish = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    assert_eq!(finish.unwrap().stop_reason, RunStopReason::TokenBudget);
    server.assert_complete();
}

#[tokio::test]
async fn a_stop_condition_ends_the_run_after_a_rejected_answer() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text(r#"{"city": "Paris"}"#)])
        .await
        .unwrap();
    let agent = agent(&server).with_options(|o| {
        o.stop_when
            .push(agentloop::run::StopCondition::new("one_step", |m| {
                m.turns() >= 1
            }))
    });
    let mut stream = agent.run_output_stream_with("Weather?", native());
    let mut finish = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    assert_eq!(
        finish.unwrap().stop_reason,
        RunStopReason::Custom("one_step".into())
    );
    server.assert_complete();
}

#[tokio::test]
async fn the_final_answer_call_is_taken_at_the_tool_iteration_limit() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("get_weather", json!({"city": "Paris"})),
            Turn::tool_calls([
                ("get_weather", json!({"city": "Rome"})),
                ("final_answer", json!({"city": "Paris", "temp_c": 18})),
            ])
            .with_ids(["call_rome", "call_answer"]),
        ],
    )
    .await
    .unwrap();
    let agent = agent(&server).with_options(|o| o.limits.max_tool_iterations = 1);
    let typed = agent
        .run_output::<Report>("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(typed.value.temp_c, 18);
    // The other call of the answer's step is answered as not run, in the same message.
    let results = &typed.result.steps[1].tool_results;
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].tool_use_id, "call_rome");
    assert!(results[0].is_error);
    assert_eq!(
        results[0].content.to_text(),
        "Error: the call to `get_weather` was not run: the run's limit of 1 tool iterations \
         was reached"
    );
    agentloop::history::validate(&typed.result.messages).unwrap();
    server.assert_complete();
}

#[tokio::test]
async fn a_schema_given_at_run_time_is_asked_for_and_checked() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::text(r#"{"city": "Paris", "temp_c": "warm"}"#),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
        ],
    )
    .await
    .unwrap();
    let output = Output::<Value>::new().with_schema(report_schema());
    let typed = agent(&server)
        .run_output_with("Weather in Paris?", output)
        .await
        .unwrap();
    assert_eq!(typed.value, json!({"city": "Paris", "temp_c": 18}));
    let requests = server.requests();
    assert_eq!(
        requests[0].body["response_format"]["json_schema"]["schema"],
        strict_report_schema()
    );
    assert!(
        last_message(&requests[1])["content"]
            .as_str()
            .unwrap()
            .contains("- /temp_c: \"warm\" is not of type \"integer\""),
    );
}

/// An agent whose `send_email` tool waits for approval, for the paused typed runs.
fn approving_agent(server: &MockServer) -> Agent {
    Agent::builder_shared(provider(server))
        .model("m")
        .tool(
            Tool::function(
                "send_email",
                "Send an email",
                |_: serde_json::Map<String, Value>| async move { Ok::<_, String>("sent") },
            )
            .with_approval_required(true),
        )
        .build()
}

#[tokio::test]
async fn a_typed_run_paused_for_approval_resumes_as_a_typed_run_in_a_fresh_agent() {
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Tool),
        (Wire::Gemini, OutputStrategy::Prompted),
        (Wire::Responses, OutputStrategy::Native),
        (Wire::Bedrock, OutputStrategy::Tool),
    ] {
        let answer = |report: Value| match strategy {
            OutputStrategy::Tool => Turn::tool_call("final_answer", report),
            _ => Turn::text(report.to_string()),
        };
        let server = MockServer::start(
            wire,
            [
                Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"]),
                // Invalid first: the resumed run still checks against the schema.
                answer(json!({"city": "Paris"})),
                answer(json!({"city": "Paris", "temp_c": 18})),
            ],
        )
        .await
        .unwrap();
        let output = Output::<Report>::new().with_strategy(strategy);
        let mut stream =
            approving_agent(&server).run_output_stream_with("Weather in Paris?", output);
        let mut finish = None;
        while let Some(event) = stream.next().await {
            if let RunEvent::RunFinish { result } = event {
                finish = Some(result);
            }
        }
        let paused = finish.unwrap().paused.expect("paused for approval");
        assert!(paused.is_typed(), "{wire:?}");
        // Kept as JSON, resumed by a fresh agent of the same definition.
        let saved = serde_json::to_string(&paused).unwrap();
        let paused: agentloop::run::PausedRun = serde_json::from_str(&saved).unwrap();
        let typed = approving_agent(&server)
            .resume_output::<Report>(&paused, [("e", agentloop::run::Decision::Approve)])
            .await
            .unwrap();
        assert_eq!(
            typed.value,
            Report {
                city: "Paris".into(),
                temp_c: 18
            },
            "{wire:?}"
        );
        assert_eq!(typed.result.stop_reason, RunStopReason::EndTurn, "{wire:?}");
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{wire:?}");
        // The resumed run asks in the same way (tools, native format, prompt) and sends the
        // pointer errors back.
        let without_history = |body: &Value| {
            let mut body = body.clone();
            // The first request streamed; the resumed run calls without streaming.
            for key in [
                "messages",
                "input",
                "contents",
                "stream",
                "stream_options",
                "include",
            ] {
                body.as_object_mut().unwrap().remove(key);
            }
            body
        };
        assert_eq!(
            without_history(&requests[1].body),
            without_history(&requests[0].body),
            "{wire:?}"
        );
        let feedback = match strategy {
            OutputStrategy::Tool => {
                "Error: invalid arguments for tool `final_answer`:\n\
                                     - /: \"temp_c\" is a required property\n\
                                     Fix the arguments and call the tool again (retry 1 of 2)."
            }
            _ => {
                "Error: your answer is not a valid `final_answer`:\n\
                  - /: \"temp_c\" is a required property\n\
                  Fix it and answer again (retry 1 of 2)."
            }
        };
        let last = last_message(&requests[2]).to_string();
        let escaped = Value::String(feedback.into()).to_string();
        assert!(
            last.contains(&escaped[1..escaped.len() - 1]),
            "{wire:?}: {last}"
        );
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_resumed_typed_run_streams_its_output_event_and_keeps_the_validator() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"]),
            Turn::text(r#"{"city": "Paris", "temp_c": 99}"#),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
        ],
    )
    .await
    .unwrap();
    let agent = approving_agent(&server);
    let mut stream = agent.run_output_stream::<Report>("Weather in Paris?");
    let mut finish = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    let paused = finish.unwrap().paused.expect("paused for approval");
    let output = Output::<Report>::new().with_validator(|r| {
        if r.temp_c > 60 {
            Err(format!("{} °C is not a weather temperature", r.temp_c))
        } else {
            Ok(())
        }
    });
    let mut stream = agent
        .resume_output_stream_with(&paused, [("e", agentloop::run::Decision::Approve)], output)
        .unwrap();
    let mut kinds = Vec::new();
    let mut value = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::Output { value: v } = &event {
            value = Some((**v).clone());
        }
        kinds.push(event.kind());
    }
    assert_eq!(value, Some(json!({"city": "Paris", "temp_c": 18})));
    let n = kinds.len();
    assert_eq!(kinds[n - 2..], ["output", "run_finish"]);
    assert_eq!(
        last_message(&server.requests()[2])["content"],
        "Error: your answer is not a valid `final_answer`:\n\
         - /: 99 °C is not a weather temperature\n\
         Fix it and answer again (retry 1 of 2)."
    );
    server.assert_complete();
}

#[tokio::test]
async fn resume_keeps_the_schema_of_a_paused_typed_run() {
    // Plain `resume` (no type at hand) still checks the answer and sets `output`.
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"]),
            Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": "warm"})),
            Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
        ],
    )
    .await
    .unwrap();
    let agent = approving_agent(&server);
    let mut stream = agent.run_output_stream::<Report>("Weather in Paris?");
    let mut finish = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result } = event {
            finish = Some(result);
        }
    }
    let paused = finish.unwrap().paused.expect("paused for approval");
    let result = agent
        .resume(&paused, [("e", agentloop::run::Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(result.output, Some(json!({"city": "Paris", "temp_c": 18})));
    assert_eq!(result.tool_calls, 3);
    server.assert_complete();
}

#[tokio::test]
async fn an_untyped_paused_run_is_refused_by_a_typed_resume() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"])],
    )
    .await
    .unwrap();
    let agent = approving_agent(&server);
    let result = agent.run("Mail a").await.unwrap();
    let paused = result.paused.expect("paused for approval");
    assert!(!paused.is_typed());
    let error = agent
        .resume_output::<Report>(&paused, [("e", agentloop::run::Decision::Approve)])
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "configuration error: this paused run is not a typed run; resume it with Agent::resume"
    );
}

/// Gemini 3 models combine structured output with function calling ("Structured outputs with
/// tools", ai.google.dev/gemini-api/docs/structured-output, and the Gemini 3 developer guide);
/// earlier ones refuse `responseMimeType: application/json` beside function declarations, so
/// they answer by the final-answer tool.
#[tokio::test]
async fn gemini_3_answers_natively_beside_its_tools_and_earlier_geminis_by_the_tool() {
    for (model, strategy) in [
        ("gemini-3-pro-preview", OutputStrategy::Native),
        ("gemini-3.1-flash", OutputStrategy::Native),
        ("models/gemini-3-flash-preview", OutputStrategy::Native),
        ("gemini-2.5-flash", OutputStrategy::Tool),
        ("gemini-flash-latest", OutputStrategy::Tool),
    ] {
        let server = MockServer::start(Wire::Gemini, []).await.unwrap();
        let request = agentloop::Request {
            model: model.into(),
            ..Default::default()
        };
        assert_eq!(
            provider(&server).output_strategy_for(&request),
            strategy,
            "{model}"
        );
    }
    let server = MockServer::start(
        Wire::Gemini,
        [
            Turn::tool_call("get_weather", json!({"city": "Paris"})),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
        ],
    )
    .await
    .unwrap();
    let agent = Agent::builder_shared(provider(&server))
        .model("gemini-3-pro-preview")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |w: GetWeather| async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) },
        ))
        .build();
    let typed = agent
        .run_output::<Report>("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(typed.value.temp_c, 18);
    for request in server.requests() {
        assert_eq!(
            request.body["generationConfig"],
            json!({
                "responseMimeType": "application/json",
                "responseJsonSchema": report_schema()
            })
        );
        assert_eq!(wire_tools(Wire::Gemini, &request.body).len(), 1);
        assert_eq!(request.body.get("toolConfig"), None);
    }
    server.assert_complete();
}

/// A count of days.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Days {
    days: u32,
}

/// An unsigned field (`minimum: 0`) keeps Anthropic's strict mode: the bound, which Anthropic
/// refuses, is left out of what is sent, and our validation still sends a negative back.
#[tokio::test]
async fn an_unsigned_field_keeps_anthropic_strict_and_its_bound_is_checked_on_our_side() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("final_answer", json!({"days": -1})).with_ids(["call_a"]),
            Turn::tool_call("final_answer", json!({"days": 3})),
        ],
    )
    .await
    .unwrap();
    let typed = agent(&server)
        .run_output_with("How long?", Output::<Days>::new())
        .await
        .unwrap();
    assert_eq!(typed.value, Days { days: 3 });
    let requests = server.requests();
    let tool = &requests[0].body["tools"][1];
    assert_eq!(tool["strict"], json!(true));
    assert_eq!(
        tool["input_schema"],
        json!({
            "type": "object",
            "properties": {"days": {"type": "integer"}},
            "required": ["days"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        last_message(&requests[1])["content"][0]["content"],
        "Error: invalid arguments for tool `final_answer`:\n\
         - /days: -1 is less than the minimum of 0\n\
         Fix the arguments and call the tool again (retry 1 of 2)."
    );
    server.assert_complete();
}

/// The blocking typed run hands over its pause: the error carries the paused run, which
/// resumes as a typed run to the checked value.
#[tokio::test]
async fn a_blocking_typed_run_that_pauses_returns_the_paused_run_to_resume() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"]),
            Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
        ],
    )
    .await
    .unwrap();
    let agent = approving_agent(&server);
    let error = agent
        .run_output::<Report>("Weather in Paris?")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "awaiting_approval");
    assert_eq!(
        error.to_string(),
        "the run paused for approval of 1 call (`send_email`): decide it and resume the paused run"
    );
    let agentloop::Error::AwaitingApproval { paused } = error else {
        unreachable!()
    };
    let typed = agent
        .resume_output::<Report>(&paused, [("e", agentloop::run::Decision::Approve)])
        .await
        .unwrap();
    assert_eq!(typed.value.temp_c, 18);
    server.assert_complete();
}

/// A typed durable run whose stream is dropped after its tool step (as a crash would stop
/// it) is continued by a fresh agent from its checkpoint: the tool does not run again, the
/// answer is asked for and checked as the run started (native on OpenAI, the final-answer tool
/// on Anthropic), the caller's validator applies, and the stream shows the partial answer,
/// then `output` before `run_finish`.
#[tokio::test]
async fn a_typed_durable_run_resumes_from_its_checkpoint_as_a_typed_run() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for (wire, strategy) in [
        (Wire::OpenAi, OutputStrategy::Native),
        (Wire::Anthropic, OutputStrategy::Tool),
    ] {
        let answer = |temp_c: i32| match strategy {
            OutputStrategy::Tool => {
                Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": temp_c}))
            }
            _ => Turn::text(format!(r#"{{"city": "Paris", "temp_c": {temp_c}}}"#)),
        };
        let server = MockServer::start(
            wire,
            [
                Turn::tool_call("get_weather", json!({"city": "Paris"})).with_ids(["w"]),
                answer(99),
                answer(18),
            ],
        )
        .await
        .unwrap();
        let lookups = Arc::new(AtomicUsize::new(0));
        let agent = || {
            let lookups = lookups.clone();
            Agent::builder_shared(provider(&server))
                .model("m")
                .tool(Tool::function(
                    "get_weather",
                    "Current weather for a city",
                    move |w: GetWeather| {
                        lookups.fetch_add(1, Ordering::SeqCst);
                        async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) }
                    },
                ))
                .build()
        };
        let store = agentloop::run::MemoryStore::new();
        let mut stream = agent().run_output_durable_stream_with(
            "r1",
            "Weather in Paris?",
            Output::<Report>::new(),
            &store,
        );
        while let Some(event) = stream.next().await {
            if matches!(event, RunEvent::StepStart { step: 1 }) {
                break;
            }
        }
        drop(stream);

        let output = Output::<Report>::new().with_validator(|r| {
            if r.temp_c > 60 {
                Err(format!("{} °C is not a weather temperature", r.temp_c))
            } else {
                Ok(())
            }
        });
        let mut stream = agent()
            .resume_output_run_stream_with("r1", output, &store)
            .await
            .unwrap();
        let mut kinds = Vec::new();
        let mut value = None;
        let mut partials = 0;
        while let Some(event) = stream.next().await {
            match &event {
                RunEvent::Output { value: v } => value = Some((**v).clone()),
                RunEvent::PartialOutput { .. } => partials += 1,
                _ => {}
            }
            kinds.push(event.kind());
        }
        assert_eq!(
            value,
            Some(json!({"city": "Paris", "temp_c": 18})),
            "{wire:?}"
        );
        let n = kinds.len();
        assert_eq!(kinds[n - 2..], ["output", "run_finish"], "{wire:?}");
        assert!(partials > 0, "{wire:?}: {kinds:?}");
        assert_eq!(lookups.load(Ordering::SeqCst), 1, "{wire:?}");
        assert_eq!(
            store.load("r1").await.unwrap().unwrap().status,
            agentloop::run::RunStatus::Done
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{wire:?}");
        let retry = requests[2].body.to_string();
        assert!(
            retry.contains("99 °C is not a weather temperature"),
            "{wire:?}: {retry}"
        );
        server.assert_complete();

        // The blocking form resumes the same way; a run that is missing or not typed is
        // refused before anything runs.
        let typed = agent()
            .resume_output_run_with("r1", Output::<Report>::new(), &store)
            .await
            .unwrap();
        assert_eq!(
            typed.value,
            Report {
                city: "Paris".into(),
                temp_c: 18
            }
        );
        let missing = agent()
            .resume_output_run_stream_with("r9", Output::<Report>::new(), &store)
            .await
            .unwrap_err();
        assert!(matches!(missing, Error::RunNotFound { .. }), "{missing:?}");
    }
}

#[tokio::test]
async fn an_untyped_durable_run_is_refused_by_a_typed_resume() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("Sunny.")])
        .await
        .unwrap();
    let store = agentloop::run::MemoryStore::new();
    agent(&server)
        .run_durable("r1", "Weather?", &store)
        .await
        .unwrap();
    let error = agent(&server)
        .resume_output_run_with("r1", Output::<Report>::new(), &store)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "configuration error: run `r1` is not a typed run; resume it with Agent::resume_run"
    );
}

/// The blocking durable typed run checkpoints like the untyped one and returns the value.
#[tokio::test]
async fn a_blocking_typed_durable_run_returns_its_value_and_ends_done_in_the_store() {
    let server = MockServer::start(
        Wire::OpenAi,
        [Turn::text(r#"{"city": "Paris", "temp_c": 18}"#)],
    )
    .await
    .unwrap();
    let store = agentloop::run::MemoryStore::new();
    let typed = agent(&server)
        .run_output_durable_with("r1", "Weather?", Output::<Report>::new(), &store)
        .await
        .unwrap();
    assert_eq!(
        typed.value,
        Report {
            city: "Paris".into(),
            temp_c: 18
        }
    );
    let saved = store.load("r1").await.unwrap().unwrap();
    assert_eq!(saved.status, agentloop::run::RunStatus::Done);
    assert!(
        agentloop::run::PausedRun::from_json(&saved.state)
            .unwrap()
            .is_typed()
    );
}

/// A typed durable run paused for approval is decided through the store by a fresh agent and
/// ends in its checked value, with its `output` event.
#[tokio::test]
async fn a_paused_typed_durable_run_is_decided_in_the_store() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_call("send_email", json!({"to": "a@example.com"})).with_ids(["e"]),
            Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
        ],
    )
    .await
    .unwrap();
    let store = agentloop::run::MemoryStore::new();
    let paused = approving_agent(&server)
        .run_output_durable_with("r1", "Weather?", Output::<Report>::new(), &store)
        .await
        .unwrap_err();
    assert!(
        matches!(paused, Error::AwaitingApproval { .. }),
        "{paused:?}"
    );

    let mut stream = approving_agent(&server)
        .decide_output_run_stream_with(
            "r1",
            [("e", agentloop::run::Decision::Approve)],
            Output::<Report>::new(),
            &store,
        )
        .await
        .unwrap();
    let mut kinds = Vec::new();
    let mut value = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::Output { value: v } = &event {
            value = Some((**v).clone());
        }
        kinds.push(event.kind());
    }
    assert_eq!(value, Some(json!({"city": "Paris", "temp_c": 18})));
    assert_eq!(kinds[kinds.len() - 2..], ["output", "run_finish"]);
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().status,
        agentloop::run::RunStatus::Done
    );
    server.assert_complete();
}
