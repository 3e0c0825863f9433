//! The options every client binary takes: `--base-url URL --runs N --concurrency N --stream`.

use std::fmt;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The OpenAI-compatible base URL, ending in `/v1`.
    pub base_url: String,
    /// How many runs in total.
    pub runs: usize,
    /// How many runs in flight at once.
    pub concurrency: usize,
    /// Stream the model's answers (SSE) instead of asking for whole bodies.
    pub stream: bool,
}

/// A command line that could not be read.
#[derive(Debug)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\nusage: CLIENT --base-url http://127.0.0.1:PORT/v1 [--runs 2000] [--concurrency 1] [--stream]",
            self.0
        )
    }
}

impl std::error::Error for UsageError {}

impl Options {
    /// Read the options from the process's arguments.
    pub fn from_env() -> Result<Self, UsageError> {
        Self::parse(std::env::args().skip(1))
    }

    /// Read the options from `args` (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, UsageError> {
        let mut base_url = None;
        let mut runs = 2000;
        let mut concurrency = 1;
        let mut stream = false;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| UsageError(format!("{name} needs a value")))
            };
            match arg.as_str() {
                "--base-url" => base_url = Some(value("--base-url")?),
                "--runs" => runs = count(&value("--runs")?, "--runs")?,
                "--concurrency" => concurrency = count(&value("--concurrency")?, "--concurrency")?,
                "--stream" => stream = true,
                other => return Err(UsageError(format!("unknown argument {other:?}"))),
            }
        }
        let base_url = base_url.ok_or_else(|| UsageError("--base-url is required".into()))?;
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            runs,
            concurrency: concurrency.min(runs.max(1)),
            stream,
        })
    }
}

fn count(text: &str, name: &str) -> Result<usize, UsageError> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(UsageError(format!(
            "{name} takes a positive whole number, got {text:?}"
        ))),
    }
}
