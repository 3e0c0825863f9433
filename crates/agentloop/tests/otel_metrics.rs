//! The GenAI metrics (feature `otel`) are recorded by every run once `record_metrics` set them
//! up, with no `tracing` subscriber and no tracer, and by none whose `Telemetry::metrics` is
//! off. `record_metrics` sets the process's instruments, so this file holds one test.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::Agent;
use agentloop_testkit::{ScriptedModel, Turn};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};

/// Each histogram's measurement count, by metric name, as last exported.
#[derive(Debug, Clone, Default)]
struct Counts(Arc<Mutex<BTreeMap<String, u64>>>);

impl PushMetricExporter for Counts {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let mut counts = self.0.lock().unwrap();
        for scope in metrics.scope_metrics() {
            for metric in scope.metrics() {
                let count = match metric.data() {
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| p.count()).sum()
                    }
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| p.count()).sum()
                    }
                    _ => 0,
                };
                counts.insert(metric.name().to_owned(), count);
            }
        }
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn agent() -> Agent {
    let model = ScriptedModel::new([Turn::text("Hi").with_usage(10, 2)]);
    Agent::builder(model).model("m").build()
}

#[tokio::test]
async fn runs_record_the_metrics_without_a_subscriber_unless_told_not_to() {
    let counts = Counts::default();
    let meter = SdkMeterProvider::builder()
        .with_periodic_exporter(counts.clone())
        .build();
    assert!(agentloop::telemetry::record_metrics(&meter));
    assert!(
        !agentloop::telemetry::record_metrics(&meter),
        "the first set stays"
    );

    agent().run("Hello").await.unwrap();
    agent().run("Hello").await.unwrap();
    agent()
        .with_options(|o| o.telemetry.metrics = false)
        .run("Hello")
        .await
        .unwrap();
    meter.force_flush().unwrap();

    let counts = counts.0.lock().unwrap().clone();
    assert_eq!(
        counts,
        BTreeMap::from([
            ("gen_ai.client.operation.duration".to_owned(), 2),
            // Input and output, per call.
            ("gen_ai.client.token.usage".to_owned(), 4),
            ("gen_ai.invoke_agent.duration".to_owned(), 2),
        ])
    );
}
