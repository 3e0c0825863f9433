//! What a streamed run's driver hands its stream: events, and its model calls.
//!
//! The driver runs only inside its stream's `poll_next`, so the two never touch the mailbox at
//! the same time and the lock is never contended. A model call is handed over whole: the stream
//! reads its events itself, with no queue and no pass through the driver's nested futures, and
//! hands the call back once it ended, then polls the driver, which was waiting for it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::model_call::StreamedCall;
use super::result::RunEvent;

/// The mailbox shared by a streamed run's driver and its stream.
#[derive(Clone, Default)]
pub(crate) struct Outbox(Arc<Mutex<Mailbox>>);

#[derive(Default)]
struct Mailbox {
    /// Events sent by the driver, not handed out yet.
    events: VecDeque<RunEvent>,
    /// A call the driver started, for the stream to read. Boxed: it moves twice per call.
    started: Option<Box<StreamedCall>>,
    /// A call the stream read to its end, for the driver to finish.
    ended: Option<Box<StreamedCall>>,
}

/// What the stream finds in the mailbox.
pub(crate) enum Delivery {
    Event(RunEvent),
    Call(Box<StreamedCall>),
    Nothing,
}

impl Outbox {
    fn mailbox(&self) -> MutexGuard<'_, Mailbox> {
        // A poisoned lock only means a tool panicked elsewhere; the mailbox is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Driver: queue `event` for the stream.
    pub(crate) fn send(&self, event: RunEvent) {
        self.mailbox().events.push_back(event);
    }

    /// Driver: leave a model call for the stream to read.
    pub(crate) fn start_call(&self, call: StreamedCall) {
        self.mailbox().started = Some(Box::new(call));
    }

    /// Driver: the call handed to the stream, once the stream read it to its end.
    pub(crate) fn take_ended_call(&self) -> Option<Box<StreamedCall>> {
        self.mailbox().ended.take()
    }

    /// Stream: the oldest event, else a call started after the events; a call comes after
    /// the events sent before it.
    pub(crate) fn deliver(&self) -> Delivery {
        let mut mailbox = self.mailbox();
        if let Some(event) = mailbox.events.pop_front() {
            return Delivery::Event(event);
        }
        match mailbox.started.take() {
            Some(call) => Delivery::Call(call),
            None => Delivery::Nothing,
        }
    }

    /// Stream: give back a call read to its end.
    pub(crate) fn end_call(&self, call: Box<StreamedCall>) {
        self.mailbox().ended = Some(call);
    }

    /// Stream: whether the driver left an event or a call.
    pub(crate) fn has_mail(&self) -> bool {
        let mailbox = self.mailbox();
        !mailbox.events.is_empty() || mailbox.started.is_some()
    }
}
