//! The Bedrock provider end to end against the testkit's Bedrock wire server: a run with two
//! parallel calls after signed reasoning (Converse and ConverseStream) whose second request
//! carries the reasoning back, every request SigV4-signed, a Bedrock API key sent as a bearer
//! token, and errors typed from status and `x-amzn-ErrorType` or from exception frames.

use std::convert::Infallible;

use agentloop::provider::bedrock::{AwsCredentials, Bedrock, BedrockAuth};
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::route::{self, RouteOptions};
use agentloop::{Agent, ContentBlock, Error, Provider, Request, Role, Tool};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};
use serde_json::json;

const MODEL: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

fn config(server: &MockServer) -> HttpConfig {
    let mut config = HttpConfig::new(server.base_url());
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    config
}

fn credentials() -> AwsCredentials {
    AwsCredentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: ApiKey::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
        session_token: Some(ApiKey::new("session-token-wire")),
    }
}

fn signed(server: &MockServer) -> Bedrock {
    Bedrock::new(
        config(server),
        "eu-west-1",
        BedrockAuth::SigV4(credentials()),
    )
    .unwrap()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn agent(provider: impl Provider) -> Agent {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move {
            let degrees = if args.city == "Paris" { 18 } else { 17 };
            Ok::<_, Infallible>(format!("{degrees} °C in {}", args.city))
        },
    );
    Agent::builder(provider).model(MODEL).tool(tool).build()
}

fn script() -> [Turn; 2] {
    [
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ])
        .with_thinking("Two cities: call the tool twice.", Some("sig-wire-1"))
        .with_ids(["tooluse_paris", "tooluse_rome"])
        .with_usage(300, 40),
        Turn::text("Paris 18 °C, Rome 17 °C.").with_usage(380, 12),
    ]
}

#[tokio::test]
async fn a_tool_run_sends_the_signed_reasoning_back_and_every_call_is_signed() {
    for streamed in [false, true] {
        let server = MockServer::start(Wire::Bedrock, script()).await.unwrap();
        let agent = agent(signed(&server));
        let result = if streamed {
            use futures::StreamExt;
            let events: Vec<_> = agent
                .run_stream("Weather in Paris and Rome?")
                .collect()
                .await;
            match events.last() {
                Some(agentloop::RunEvent::RunFinish { result }) => (**result).clone(),
                other => panic!("{other:?}"),
            }
        } else {
            agent.run("Weather in Paris and Rome?").await.unwrap()
        };
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
        assert_eq!(result.usage.input_tokens, 680);
        let method = if streamed {
            "converse-stream"
        } else {
            "converse"
        };
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        for request in &requests {
            assert_eq!(
                request.path,
                format!("/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/{method}")
            );
            let auth = request.header("authorization").unwrap();
            assert!(
                auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                    && auth.contains("/eu-west-1/bedrock/aws4_request")
                    && auth.contains("SignedHeaders=host;x-amz-date;x-amz-security-token"),
                "{auth}"
            );
            assert!(request.header("x-amz-date").is_some());
            assert_eq!(
                request.header("x-amz-security-token"),
                Some("session-token-wire")
            );
        }
        assert_eq!(
            requests[1].body["messages"],
            json!([
                {"role": "user", "content": [{"text": "Weather in Paris and Rome?"}]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Two cities: call the tool twice.", "signature": "sig-wire-1"}}},
                    {"toolUse": {"toolUseId": "tooluse_paris", "name": "get_weather", "input": {"city": "Paris"}}},
                    {"toolUse": {"toolUseId": "tooluse_rome", "name": "get_weather", "input": {"city": "Rome"}}}
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "tooluse_paris", "content": [{"text": "18 °C in Paris"}]}},
                    {"toolResult": {"toolUseId": "tooluse_rome", "content": [{"text": "17 °C in Rome"}]}}
                ]}
            ])
        );
        let assistant = &result.messages[1];
        assert_eq!(assistant.role, Role::Assistant);
        assert!(
            matches!(
                &assistant.content[0],
                ContentBlock::Thinking { thinking, signature: Some(s), provider: Some(p) }
                    if thinking == "Two cities: call the tool twice." && s == "sig-wire-1" && p == "bedrock"
            ),
            "{:?}",
            assistant.content[0]
        );
        server.assert_complete();
    }
}

#[tokio::test]
async fn a_bedrock_api_key_goes_as_a_bearer_token_without_signing() {
    let server = MockServer::start(Wire::Bedrock, [Turn::text("OK")])
        .await
        .unwrap();
    let (provider, model) = route::from_model(
        "bedrock/amazon.nova-lite-v1:0",
        RouteOptions {
            base_url: Some(server.base_url()),
            api_key: Some(ApiKey::new("ABSK-wire-key")),
            region: Some("us-east-1".into()),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    let response = provider
        .complete(&Request::new(model, vec![agentloop::Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(response.text(), "OK");
    let request = server.last_request().unwrap();
    assert_eq!(request.path, "/model/amazon.nova-lite-v1%3A0/converse");
    assert_eq!(
        request.header("authorization"),
        Some("Bearer ABSK-wire-key")
    );
    assert!(request.header("x-amz-date").is_none());
}

#[tokio::test]
async fn throttling_is_retried_and_exceptions_mid_stream_are_typed() {
    // A 429 ThrottlingException is retried, then the answer comes.
    let server = MockServer::builder(Wire::Bedrock)
        .turn(Turn::text("after the wait"))
        .inject(Fault::rate_limited(0), 1)
        .start()
        .await
        .unwrap();
    let result = agent(signed(&server)).run("hi").await.unwrap();
    assert_eq!(result.text(), "after the wait");
    assert_eq!(server.calls(), 2);

    // A throttlingException frame after the stream started: typed as a rate limit.
    let server = MockServer::start(
        Wire::Bedrock,
        [Turn::text("partial answer").fail_after(
            2,
            Error::RateLimited {
                provider: "bedrock".into(),
                retry_after: None,
                message: "Too many tokens, please wait before trying again.".into(),
            },
        )],
    )
    .await
    .unwrap();
    let provider = signed(&server);
    let mut stream = provider.stream(&Request::new(MODEL, vec![agentloop::Message::user("hi")]));
    let mut error = None;
    use futures::StreamExt;
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            error = Some(e);
        }
    }
    let error = error.expect("the exception frame ends the stream");
    assert!(
        matches!(&error, Error::RateLimited { message, .. } if message.starts_with("Too many tokens")),
        "{error:?}"
    );

    // A ValidationException: not retried, typed invalid request with its name.
    let server = MockServer::builder(Wire::Bedrock)
        .turn(Turn::text("never"))
        .inject(
            Fault::BadRequest {
                message: "The model returned the following errors: messages: roles must alternate"
                    .into(),
            },
            1,
        )
        .start()
        .await
        .unwrap();
    let result = agent(signed(&server)).run("hi").await.unwrap();
    assert!(
        matches!(
            &result.error,
            Some(Error::InvalidRequest { status: 400, error_type: Some(t), .. }) if t == "ValidationException"
        ),
        "{:?}",
        result.error
    );
    assert_eq!(server.calls(), 1);
}

/// The streamed answer assembled, or the error that ended it.
async fn streamed(provider: &Bedrock, request: &Request) -> Result<agentloop::Response, Error> {
    use futures::StreamExt;
    let mut acc = agentloop::Accumulator::new();
    let mut stream = provider.stream(request);
    while let Some(event) = stream.next().await {
        acc.push(&event?);
    }
    Ok(acc.finish())
}

/// ConverseStream's exception frames that say to try again (API reference,
/// "ConverseStreamOutput": `modelStreamErrorException`, HTTP 424, "A streaming error occurred.
/// Retry your request."; `throttlingException`, 429; `serviceUnavailableException`, 503) are
/// retried like the same errors as HTTP statuses when they come before any content (here
/// right after `messageStart`), and typed when content came first: nothing is sent twice.
#[tokio::test]
async fn exception_frames_before_content_are_retried_and_typed_after_it() {
    let model_stream_error = || Error::Stream {
        provider: "bedrock".into(),
        error_type: Some("ModelStreamErrorException".into()),
        message:
            "The system encountered an unexpected error during processing. Try your request again."
                .into(),
    };
    let throttled = || Error::RateLimited {
        provider: "bedrock".into(),
        retry_after: None,
        message: "Too many tokens, please wait before trying again.".into(),
    };
    let unavailable = || Error::Overloaded {
        provider: "bedrock".into(),
        message: "Bedrock is unable to process your request.".into(),
    };
    let request = Request::new(MODEL, vec![agentloop::Message::user("hi")]);
    for error in [model_stream_error(), throttled(), unavailable()] {
        let server = MockServer::start(
            Wire::Bedrock,
            [
                Turn::text("never seen").fail_after(1, error.clone()),
                Turn::text("after the retry"),
            ],
        )
        .await
        .unwrap();
        let response = streamed(&signed(&server), &request).await;
        let response = response.unwrap_or_else(|e| panic!("{error:?}: {e:?}"));
        assert_eq!(response.text(), "after the retry", "{error:?}");
        assert_eq!(server.calls(), 2, "{error:?}");
    }

    // After content: typed by its name, not retried.
    let server = MockServer::start(
        Wire::Bedrock,
        [
            Turn::text("partial answer").fail_after(3, model_stream_error()),
            Turn::text("never sent"),
        ],
    )
    .await
    .unwrap();
    let error = streamed(&signed(&server), &request)
        .await
        .expect_err("the exception ends the stream");
    assert!(
        matches!(&error, Error::Api { status: 424, error_type: Some(t), message, .. }
            if t == "modelStreamErrorException" && message.starts_with("The system encountered")),
        "{error:?}"
    );
    assert!(error.is_retryable(), "a new request may succeed: {error:?}");
    assert_eq!(server.calls(), 1);
}

/// Cache reads and writes come from `metadata.usage` (`cacheReadInputTokens`,
/// `cacheWriteInputTokens`, apart from `inputTokens` as Bedrock counts them), and the run is
/// priced from the built-in table's `aws` prices (amazon.nova-lite: input 0.06, output 0.24,
/// cache read 0.015 per million tokens).
#[tokio::test]
async fn cache_tokens_are_reported_and_priced() {
    for streamed in [false, true] {
        let server = MockServer::start(
            Wire::Bedrock,
            [Turn::text("cached")
                .with_usage(1000, 100)
                .with_cache_usage(500, 0)],
        )
        .await
        .unwrap();
        let agent = Agent::builder(signed(&server))
            .model("amazon.nova-lite-v1:0")
            .build();
        let result = if streamed {
            use futures::StreamExt;
            let events: Vec<_> = agent.run_stream("hi").collect().await;
            match events.last() {
                Some(agentloop::RunEvent::RunFinish { result }) => (**result).clone(),
                other => panic!("{other:?}"),
            }
        } else {
            agent.run("hi").await.unwrap()
        };
        assert_eq!(result.usage.input_tokens, 1000);
        assert_eq!(result.usage.cache_read_tokens, 500);
        let cost = result.cost.expect("nova-lite is in the price table");
        // 1000 × 0.06 + 100 × 0.24 + 500 × 0.015, per million.
        assert_eq!(cost.total.to_string(), "0.0000915");
    }
}

/// A stream sent again after an error before any content starts over unseen: its consumer
/// gets the events of the attempt that answered, one message start included, exactly as if
/// the first attempt had not happened.
#[tokio::test]
async fn a_retried_stream_shows_only_the_attempt_that_answered() {
    use futures::StreamExt;
    async fn events(server: &MockServer) -> Vec<agentloop::StreamEvent> {
        let request = Request::new(MODEL, vec![agentloop::Message::user("hi")]);
        let provider = signed(server);
        let stream = provider.stream(&request);
        stream.map(|event| event.unwrap()).collect().await
    }
    let overloaded = Error::Overloaded {
        provider: "bedrock".into(),
        message: "Bedrock is unable to process your request.".into(),
    };
    let retried = MockServer::start(
        Wire::Bedrock,
        [
            Turn::text("never seen")
                .with_usage(7, 1)
                .fail_after(1, overloaded),
            Turn::text("after the retry"),
        ],
    )
    .await
    .unwrap();
    let clean = MockServer::start(Wire::Bedrock, [Turn::text("after the retry")])
        .await
        .unwrap();
    let seen = events(&retried).await;
    assert_eq!(retried.calls(), 2);
    assert_eq!(seen, events(&clean).await);
    let starts = seen
        .iter()
        .filter(|e| matches!(e, agentloop::StreamEvent::MessageStart { .. }))
        .count();
    assert_eq!(starts, 1, "{seen:?}");
}
