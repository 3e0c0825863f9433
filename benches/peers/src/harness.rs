//! Drives the runs: `concurrency` tasks each take the next run until all are taken, then the
//! results are checked and summed up on stderr.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::options::Options;
use crate::workload;

/// What one run ended with: `Ok` when the final answer was received in full, else why not.
pub type Outcome = Result<(), String>;

/// Run `one_run` `options.runs` times with `options.concurrency` in flight, then check that
/// every run succeeded and the tool was called once per run, for Paris. Returns the process's
/// exit code: success only if all of that holds.
pub async fn drive<F, Fut>(client: &str, options: &Options, one_run: F) -> ExitCode
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let started = Instant::now();
    let one_run = Arc::new(one_run);
    let next = Arc::new(AtomicUsize::new(0));
    let runs = options.runs;
    let workers: Vec<_> = (0..options.concurrency)
        .map(|_| {
            let one_run = Arc::clone(&one_run);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let (mut ok, mut first_error) = (0usize, None);
                while next.fetch_add(1, Ordering::Relaxed) < runs {
                    match one_run().await {
                        Ok(()) => ok += 1,
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (ok, first_error)
            })
        })
        .collect();
    let (mut ok, mut first_error) = (0usize, None);
    for worker in workers {
        match worker.await {
            Ok((n, error)) => {
                ok += n;
                if let Some(error) = error {
                    first_error.get_or_insert(error);
                }
            }
            Err(e) => {
                first_error.get_or_insert(format!("a worker task failed: {e}"));
            }
        }
    }
    let elapsed = started.elapsed();
    let (paris, other) = workload::tool_calls();
    eprintln!(
        "{client}: {ok}/{runs} runs ok, tool called {paris}x for Paris and {other}x otherwise, \
         concurrency {}, stream {}, {:.3}s",
        options.concurrency,
        options.stream,
        elapsed.as_secs_f64()
    );
    if let Some(error) = first_error {
        eprintln!("{client}: first failure: {error}");
    }
    if ok == runs && paris == runs as u64 && other == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
