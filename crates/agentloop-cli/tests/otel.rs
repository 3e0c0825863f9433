//! `agentloop run` exports its spans over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
//! before it exits: a receiver on loopback decodes them (protobuf, `opentelemetry-proto`).

use std::process::Command;
use std::sync::{Arc, Mutex};

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;

type Names = Arc<Mutex<Vec<String>>>;

async fn traces(State(names): State<Names>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            for span in scope.spans {
                names.lock().unwrap().push(span.name);
            }
        }
    }
    Vec::new()
}

/// Metrics are accepted and not looked at here (the library's tests check them).
async fn metrics() -> Vec<u8> {
    Vec::new()
}

#[tokio::test(flavor = "multi_thread")]
async fn run_exports_its_spans_before_exiting() {
    let names = Names::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(names.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = MockServer::start(Wire::OpenAi, [Turn::text("Hello.")])
        .await
        .unwrap();

    let url = server.base_url();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_agentloop"))
            .env_remove("AGENTLOOP_MODEL")
            .env("NO_COLOR", "1")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .args([
                "run",
                "--model",
                "openai-compatible/test-model",
                "--base-url",
                &url,
                "Hi",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();

    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut names = names.lock().unwrap().clone();
    names.sort();
    assert_eq!(names, ["chat test-model", "invoke_agent"]);
    server.assert_complete();
}
