//! Traces and metrics over OTLP whenever the standard `OTEL_EXPORTER_OTLP_*` variables name an
//! endpoint (see `agentloop::telemetry::init_from_env`), flushed before the process exits.

use std::sync::Mutex;

use agentloop::telemetry::{TelemetryGuard, init_from_env};

/// The exporters of this process, kept until [`finish`].
static GUARD: Mutex<Option<TelemetryGuard>> = Mutex::new(None);

/// Start exporting if an endpoint is set. A setup that fails is reported and the command runs
/// without telemetry: it must not stop the work.
pub fn start() {
    match init_from_env() {
        Ok(Some(guard)) => {
            if let Ok(mut slot) = GUARD.lock() {
                *slot = Some(guard);
            }
        }
        Ok(None) => {}
        Err(error) => eprintln!("warning: telemetry is off: {error}"),
    }
}

/// Flush and stop the exporters; call before the process exits, on every path.
pub fn finish() {
    let guard = GUARD.lock().ok().and_then(|mut slot| slot.take());
    drop(guard);
}
