//! Providers: one trait for every model service.
//!
//! A provider turns a canonical [`Request`] into its wire format, and the answer back into
//! normalized [`StreamEvent`]s. Everything provider-specific stays behind this trait.

pub mod anthropic;
#[cfg(feature = "bedrock")]
pub mod bedrock;
pub mod gemini;
pub mod http;
pub mod openai;
mod rendered;
pub mod replay;
pub mod responses;
pub mod route;
pub(crate) mod scan;

use std::pin::Pin;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};

use crate::error::Result;
use crate::message::{Request, Response};
use crate::output::OutputStrategy;
use crate::stream::{Accumulator, StreamEvent};

/// A stream of normalized events. Errors end it.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent>> + Send + 'static>>;

/// A model service.
///
/// `stream` is required; `complete` defaults to collecting the stream, and providers with a
/// non-streaming endpoint override it. Both take the request by reference and serialize it
/// before returning, so the returned stream or future owns everything it needs.
pub trait Provider: Send + Sync + 'static {
    /// A short name used in errors and to tag reasoning blocks (`openai`, `anthropic`, ...).
    fn name(&self) -> &str;

    /// Stream the answer to `request`.
    fn stream(&self, request: &Request) -> EventStream;

    /// The whole answer to `request`.
    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        let mut stream = self.stream(request);
        let provider = self.name().to_owned();
        Box::pin(async move {
            let mut acc = Accumulator::new();
            while let Some(event) = stream.next().await {
                acc.push(&event?);
            }
            acc.set_provider(&provider);
            Ok(acc.finish())
        })
    }

    /// How a typed run gets its answer in shape on this provider unless it names a strategy
    /// (see [`crate::output`]): a final-answer tool, which every provider with tools takes,
    /// unless the provider has structured output of its own.
    fn output_strategy(&self) -> OutputStrategy {
        OutputStrategy::Tool
    }

    /// [`Self::output_strategy`] for one request, for providers whose models differ in what
    /// they take (Gemini 3 combines structured output with function calling, earlier Geminis
    /// do not). Typed runs use this one.
    fn output_strategy_for(&self, request: &Request) -> OutputStrategy {
        let _ = request;
        self.output_strategy()
    }
}

impl<P: Provider + ?Sized> Provider for Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn output_strategy(&self) -> OutputStrategy {
        (**self).output_strategy()
    }
    fn output_strategy_for(&self, request: &Request) -> OutputStrategy {
        (**self).output_strategy_for(request)
    }
    fn stream(&self, request: &Request) -> EventStream {
        (**self).stream(request)
    }
    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        (**self).complete(request)
    }
}

impl<P: Provider + ?Sized> Provider for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn output_strategy(&self) -> OutputStrategy {
        (**self).output_strategy()
    }
    fn output_strategy_for(&self, request: &Request) -> OutputStrategy {
        (**self).output_strategy_for(request)
    }
    fn stream(&self, request: &Request) -> EventStream {
        (**self).stream(request)
    }
    fn complete(&self, request: &Request) -> BoxFuture<'static, Result<Response>> {
        (**self).complete(request)
    }
}
