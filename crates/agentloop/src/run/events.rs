//! Where a streamed run's driver leaves its events for the stream to hand out.
//!
//! The driver runs only inside its stream's `poll_next`, so events never cross threads between
//! being made and being handed out. The stream lends its queue to the thread for the length of
//! one poll of the driver; the driver pushes to whatever queue the thread holds. That costs no
//! lock per event (a shared `Mutex<VecDeque>` was ~4% of a streamed run's client CPU) and
//! nests: a run streamed inside a tool of another lends its own queue and then gives the outer
//! one back.

use std::cell::RefCell;
use std::collections::VecDeque;

use super::result::RunEvent;

thread_local! {
    static LENT: RefCell<VecDeque<RunEvent>> = const { RefCell::new(VecDeque::new()) };
}

/// Run `poll` with `queue` lent to this thread; events pushed meanwhile land in `queue`.
pub(crate) fn lend<R>(queue: &mut VecDeque<RunEvent>, poll: impl FnOnce() -> R) -> R {
    /// Swaps the queues back even if `poll` panics.
    struct Restore<'a>(&'a mut VecDeque<RunEvent>);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            swap_lent(self.0);
        }
    }
    // While lent, `queue` holds what the thread held before: the queue of an outer run, or an
    // empty one. Swapping (rather than taking and replacing) leaves no queue to drop.
    swap_lent(queue);
    let _restore = Restore(queue);
    poll()
}

/// Exchange `queue` with the one lent to this thread.
fn swap_lent(queue: &mut VecDeque<RunEvent>) {
    LENT.with(|lent| std::mem::swap(&mut *lent.borrow_mut(), queue));
}

/// Queue an event for the stream whose driver is being polled on this thread.
pub(crate) fn push(event: RunEvent) {
    LENT.with(|lent| lent.borrow_mut().push_back(event));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: usize) -> RunEvent {
        RunEvent::StepStart { step: n }
    }

    fn steps(queue: &VecDeque<RunEvent>) -> Vec<usize> {
        queue
            .iter()
            .map(|e| match e {
                RunEvent::StepStart { step } => *step,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn events_land_in_the_lent_queue_and_nested_lends_give_the_outer_back() {
        let mut outer = VecDeque::from([step(0)]);
        let mut inner = VecDeque::new();
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
        let mut queue = VecDeque::new();
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
