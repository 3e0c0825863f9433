//! A streamed run's model call, read by the run's stream itself.
//!
//! The driver starts the call and hands it to the [`RunStream`](super::RunStream) (see
//! `events`), which polls the provider's events directly and hands each one out as it is, in
//! [`RunEvent::Model`]. The call ends by its events (a silence too long is the transport's
//! timeout error, see [`crate::provider::http::HttpConfig::idle_timeout`]) or the run's stop
//! (cancellation, deadlines); the driver then takes it back to finish the response.

use std::task::{Context, Poll};

use futures::StreamExt;
use futures::future::BoxFuture;

use super::armed::Armed;
use super::result::{RunEvent, RunStopReason};
use crate::error::Error;
use crate::message::Response;
use crate::provider::EventStream;
use crate::stream::Accumulator;
use crate::telemetry::CallTrace;

/// How a model call ended.
pub(crate) enum CallEnd {
    /// The events ended.
    Finished,
    /// The events failed (a transport timeout included).
    Failed(Error),
    /// The run was stopped.
    Stopped(RunStopReason),
}

/// A model call in flight: the provider's events, what they assembled so far, and the run's
/// stop.
pub(crate) struct StreamedCall {
    events: EventStream,
    acc: Accumulator,
    /// Checked before every event: a stop ends the call at the next event.
    stop: Armed<BoxFuture<'static, RunStopReason>>,
    /// Set when the call ended; the driver then takes it back.
    end: Option<CallEnd>,
    /// The call's `chat` span, when a subscriber wants it.
    trace: Option<Box<CallTrace>>,
}

impl StreamedCall {
    pub(crate) fn new(
        events: EventStream,
        stop: BoxFuture<'static, RunStopReason>,
        trace: Option<CallTrace>,
    ) -> Self {
        Self {
            events,
            acc: Accumulator::new(),
            stop: Armed::new(stop),
            end: None,
            trace: trace.map(Box::new),
        }
    }

    /// The response assembled, and how the call ended. Taken only once it ended (see
    /// `events::Outbox::take_ended_call`).
    pub(crate) fn finish(self, provider: &str) -> (Response, CallEnd) {
        let mut acc = self.acc;
        acc.set_provider(provider);
        let (response, end) = (acc.finish(), self.end.unwrap_or(CallEnd::Finished));
        if let Some(mut trace) = self.trace {
            match &end {
                CallEnd::Finished => trace.chat_ended(Ok(&response)),
                CallEnd::Failed(error) => trace.chat_ended(Err(error)),
                CallEnd::Stopped(_) => trace.chat_stopped(),
            }
        }
        (response, end)
    }

    /// The next event for the run's stream. `Ready(None)` once the call ended: the driver
    /// must be polled to take it back. Inlined into the stream's `poll_next`, so an event is
    /// built once, in the slot it is returned in.
    #[inline(always)]
    pub(crate) fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        while self.end.is_none() {
            // Between events the stop is polled only once it woke: one atomic load, even for a
            // task that `will_wake` cannot recognize. While the events are pending it is
            // polled as well, which makes its wake-ups reach the task polling now.
            if self.stop.woke()
                && let Poll::Ready(reason) = self.stop.poll(cx)
            {
                self.end = Some(CallEnd::Stopped(reason));
                break;
            }
            match self.events.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(event))) => {
                    if let Some(trace) = self.trace.as_mut() {
                        trace.chunk();
                    }
                    self.acc.push(&event);
                    // The event itself, moved: a run shows its model call's events as they came.
                    return Poll::Ready(Some(RunEvent::Model(event)));
                }
                Poll::Ready(Some(Err(error))) => self.end = Some(CallEnd::Failed(error)),
                Poll::Ready(None) => self.end = Some(CallEnd::Finished),
                Poll::Pending => {
                    if let Poll::Ready(reason) = self.stop.poll(cx) {
                        self.end = Some(CallEnd::Stopped(reason));
                        break;
                    }
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(None)
    }
}
