//! A streamed run's model call, read by the run's stream itself.
//!
//! The driver starts the call and hands it to the [`RunStream`](super::RunStream) (see
//! `events`), which polls the provider's events directly and hands each one out as it is, in
//! [`RunEvent::Model`]. The call ends by its events, a first-chunk or idle timeout, or the
//! run's stop (cancellation, deadlines); the driver then takes it back to finish the response.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::time::{Instant, Sleep};

use super::armed::Armed;
use super::result::{RunEvent, RunStopReason};
use crate::error::{Error, TimeoutKind};
use crate::message::Response;
use crate::provider::EventStream;
use crate::provider::http::deadline::{FAR, later};
use crate::stream::Accumulator;

/// How a model call ended.
pub(crate) enum CallEnd {
    /// The events ended.
    Finished,
    /// The events failed, or a timeout fired.
    Failed(Error),
    /// The run was stopped.
    Stopped(RunStopReason),
}

/// A model call in flight: the provider's events, what they assembled so far, its first-chunk
/// and idle timeouts, and the run's stop.
pub(crate) struct StreamedCall {
    events: EventStream,
    acc: Accumulator,
    timeouts: Option<Timeouts>,
    /// Checked before every event: a stop ends the call at the next event.
    stop: Armed<BoxFuture<'static, RunStopReason>>,
    /// Set when the call ended; the driver then takes it back.
    end: Option<CallEnd>,
}

impl StreamedCall {
    pub(crate) fn new(
        events: EventStream,
        stop: BoxFuture<'static, RunStopReason>,
        first_chunk: Option<Duration>,
        idle: Option<Duration>,
    ) -> Self {
        // Without either timeout there is no timer, and the clock is never read per event.
        let timeouts =
            (first_chunk.is_some() || idle.is_some()).then(|| Timeouts::new(first_chunk, idle));
        Self {
            events,
            acc: Accumulator::new(),
            timeouts,
            stop: Armed::new(stop),
            end: None,
        }
    }

    /// The response assembled, and how the call ended. Taken only once it ended (see
    /// `events::Outbox::take_ended_call`).
    pub(crate) fn finish(self, provider: &str) -> (Response, CallEnd) {
        let mut acc = self.acc;
        acc.set_provider(provider);
        (acc.finish(), self.end.unwrap_or(CallEnd::Finished))
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
                    if let Some(timeouts) = &mut self.timeouts {
                        timeouts.saw_event();
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
                    let Some(timeouts) = &mut self.timeouts else {
                        return Poll::Pending;
                    };
                    self.end = Some(CallEnd::Failed(ready!(timeouts.poll_expired(cx))));
                }
            }
        }
        Poll::Ready(None)
    }
}

/// First-chunk and idle timeouts on one timer, re-armed when it fires (and once at the first
/// event), never per event.
struct Timeouts {
    first_chunk: Option<Duration>,
    idle: Option<Duration>,
    timer: Pin<Box<Sleep>>,
    last_event: Option<Instant>,
}

impl Timeouts {
    fn new(first_chunk: Option<Duration>, idle: Option<Duration>) -> Self {
        let first = first_chunk.or(idle).unwrap_or(FAR);
        Self {
            first_chunk,
            idle,
            timer: Box::pin(tokio::time::sleep(first)),
            last_event: None,
        }
    }

    fn saw_event(&mut self) {
        let now = Instant::now();
        if self.last_event.is_none() {
            let next = later(now, self.idle.unwrap_or(FAR));
            self.timer.as_mut().reset(next);
        }
        self.last_event = Some(now);
    }

    /// Ready with the timeout error once no event came in time.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Error> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            let next = match (self.last_event, self.idle) {
                (None, _) => {
                    let kind = if self.first_chunk.is_some() {
                        TimeoutKind::FirstChunk
                    } else {
                        TimeoutKind::Idle
                    };
                    let after = self.first_chunk.or(self.idle).unwrap_or(FAR);
                    return Poll::Ready(Error::Timeout { kind, after });
                }
                (Some(last), Some(idle)) => {
                    if later(last, idle) <= Instant::now() {
                        return Poll::Ready(Error::Timeout {
                            kind: TimeoutKind::Idle,
                            after: idle,
                        });
                    }
                    later(last, idle)
                }
                (Some(_), None) => later(Instant::now(), FAR),
            };
            self.timer.as_mut().reset(next);
        }
    }
}
