//! Where a streamed run's driver leaves its events, and its model call, for the stream.
//!
//! The driver runs only inside its stream's `poll_next`, so events never cross threads between
//! being made and being handed out. The stream lends its [`Lent`] to the thread for the length
//! of one poll of the driver; the driver pushes to whatever the thread holds. That takes no
//! lock per event and nests: a run streamed inside a tool of another lends its own and then gives the outer one
//! back.

use std::cell::RefCell;
use std::collections::VecDeque;

use super::result::RunEvent;
use super::streamed::StreamedCall;

/// What a streamed run's driver leaves for its stream.
pub(crate) struct Lent {
    /// Events made by the driver, not handed out yet.
    pub(crate) events: VecDeque<RunEvent>,
    /// The model call in flight, which the stream reads until it ends. Boxed: every poll of
    /// the driver lends this struct to the thread and takes it back, two swaps that would
    /// otherwise copy the whole call each time.
    pub(crate) call: Option<Box<StreamedCall>>,
}

impl Lent {
    pub(crate) const fn new() -> Self {
        Self {
            events: VecDeque::new(),
            call: None,
        }
    }
}

thread_local! {
    static LENT: RefCell<Lent> = const { RefCell::new(Lent::new()) };
}

/// Run `poll` with `lent` lent to this thread; what the driver leaves meanwhile lands there.
pub(crate) fn lend<R>(lent: &mut Lent, poll: impl FnOnce() -> R) -> R {
    /// Swaps back even if `poll` panics.
    struct Restore<'a>(&'a mut Lent);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            swap_lent(self.0);
        }
    }
    // While lent, `lent` holds what the thread held before: an outer run's, or an empty one.
    // Swapping (rather than taking and replacing) leaves nothing to drop.
    swap_lent(lent);
    let _restore = Restore(lent);
    poll()
}

/// Exchange `lent` with what is lent to this thread.
fn swap_lent(lent: &mut Lent) {
    LENT.with(|held| std::mem::swap(&mut *held.borrow_mut(), lent));
}

/// Queue an event for the stream whose driver is being polled on this thread.
pub(crate) fn push(event: RunEvent) {
    LENT.with(|held| held.borrow_mut().events.push_back(event));
}

/// Leave a model call for the stream to read.
pub(crate) fn start_call(call: StreamedCall) {
    let call = Box::new(call);
    LENT.with(|held| held.borrow_mut().call = Some(call));
}

/// Take back the call left with [`start_call`] once it has ended.
pub(crate) fn take_ended_call() -> Option<Box<StreamedCall>> {
    LENT.with(|held| {
        let mut held = held.borrow_mut();
        if held.call.as_ref().is_some_and(|call| call.has_ended()) {
            held.call.take()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: usize) -> RunEvent {
        RunEvent::StepStart { step: n }
    }

    fn lent(events: impl IntoIterator<Item = RunEvent>) -> Lent {
        Lent {
            events: events.into_iter().collect(),
            call: None,
        }
    }

    fn steps(lent: &Lent) -> Vec<usize> {
        lent.events
            .iter()
            .map(|e| match e {
                RunEvent::StepStart { step } => *step,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn events_land_in_the_lent_queue_and_nested_lends_give_the_outer_back() {
        let mut outer = lent([step(0)]);
        let mut inner = lent([]);
        lend(&mut outer, || {
            push(step(1));
            lend(&mut inner, || push(step(10)));
            push(step(2));
        });
        assert_eq!(steps(&outer), [0, 1, 2]);
        assert_eq!(steps(&inner), [10]);
        // Nothing is left behind on the thread.
        lend(&mut inner, || {});
        assert_eq!(steps(&inner), [10]);
    }

    #[test]
    fn a_panicking_poll_still_gives_the_queue_back() {
        let mut queue = lent([]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lend(&mut queue, || {
                push(step(1));
                panic!("tool panicked");
            })
        }));
        assert!(caught.is_err());
        assert_eq!(steps(&queue), [1]);
    }
}
