//! API keys never leak: not in Debug or Display output, not in error messages, not in logs.

use std::io::Write;
use std::sync::{Arc, Mutex};

use agentloop::Agent;
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::gemini::{Gemini, GeminiOptions, VertexLocation};
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::openai::OpenAi;
use agentloop::provider::route::{self, RouteOptions};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};

const KEY: &str = "sk-SECRET-0123456789abcdef";

/// Collects everything the tracing subscriber writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn config(url: String) -> HttpConfig {
    let mut config = HttpConfig::new(url);
    config.api_key = Some(ApiKey::new(KEY));
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_stay_out_of_debug_errors_and_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut seen = Vec::new();
    for wire in [
        Wire::OpenAi,
        Wire::Anthropic,
        Wire::Gemini,
        Wire::Bedrock,
        Wire::Responses,
    ] {
        let server = MockServer::builder(wire)
            .turn(Turn::text("hi"))
            .inject(Fault::ServerError, 1)
            .inject(
                Fault::Status {
                    status: 401,
                    error_type: "authentication_error".into(),
                    message: "invalid x-api-key".into(),
                },
                1,
            )
            .start()
            .await
            .unwrap();
        let provider: Arc<dyn agentloop::Provider> = match wire {
            Wire::OpenAi => Arc::new(OpenAi::new(config(server.base_url())).unwrap()),
            Wire::Anthropic => Arc::new(Anthropic::new(config(server.base_url())).unwrap()),
            Wire::Gemini => Arc::new(Gemini::new(config(server.base_url())).unwrap()),
            Wire::Bedrock => Arc::new(
                agentloop::provider::bedrock::Bedrock::new(
                    config(server.base_url()),
                    "us-east-1",
                    agentloop::provider::bedrock::BedrockAuth::Bearer(ApiKey::new(KEY)),
                )
                .unwrap(),
            ),
            Wire::Responses => Arc::new(
                agentloop::provider::responses::OpenAiResponses::new(config(server.base_url()))
                    .unwrap(),
            ),
        };
        seen.push(format!(
            "{provider:?}",
            provider = Agent::builder_shared(provider.clone()).build()
        ));
        let result = Agent::builder_shared(provider)
            .model("m")
            .build()
            .run("hello")
            .await
            .unwrap();
        let error = result.error.expect("the 401 ends the run");
        assert!(matches!(error, agentloop::Error::Auth { .. }), "{error:?}");
        seen.push(error.to_string());
        seen.push(format!("{error:?}"));
        // The key did reach the server, so the test would notice a redaction that drops it.
        let headers = &server.requests()[0].headers;
        let sent = headers
            .get("authorization")
            .or_else(|| headers.get("x-api-key"))
            .or_else(|| headers.get("x-goog-api-key"))
            .unwrap();
        assert!(sent.to_str().unwrap().contains(KEY));
    }
    let (provider, _) = route::from_model(
        "openai/gpt-4o",
        RouteOptions {
            api_key: Some(ApiKey::new(KEY)),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    seen.push(format!("{:?}", Agent::builder_shared(provider).build()));
    seen.push(format!("{:?} {}", ApiKey::new(KEY), ApiKey::new(KEY)));
    seen.push(format!("{:?}", config("http://127.0.0.1:1".into())));
    seen.push(format!(
        "{:?}",
        OpenAi::new(config("http://127.0.0.1:1".into())).unwrap()
    ));
    seen.push(format!(
        "{:?}",
        Anthropic::new(config("http://127.0.0.1:1".into())).unwrap()
    ));
    seen.push(format!(
        "{:?}",
        Gemini::new(config("http://127.0.0.1:1".into())).unwrap()
    ));
    seen.push(format!(
        "{:?}",
        Gemini::vertex(
            config("http://127.0.0.1:1".into()),
            VertexLocation {
                project: "p".into(),
                location: "global".into(),
            },
            GeminiOptions::default(),
        )
        .unwrap()
    ));

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("retrying"),
        "the retry was logged, so logs were captured: {logs}"
    );
    for text in seen.iter().chain([&logs]) {
        assert!(!text.contains(KEY), "the key leaked into: {text}");
        assert!(
            !text.contains("SECRET"),
            "part of the key leaked into: {text}"
        );
    }
}
