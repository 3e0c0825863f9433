//! Futures polled again only when they may have finished.
//!
//! A pending future wakes the waker of its last poll. Polling it again for the same task only
//! stores that waker again, and for tokio's timers and notifications that takes a lock or an
//! atomic exchange. Raced against every chunk of a stream, those polls were a few percent of a
//! streamed run's client CPU; [`Armed`] skips them while a cheap check says the future cannot
//! be ready.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A future and the waker it holds, once a poll has left one with it.
#[derive(Debug)]
pub(crate) struct Armed<F> {
    future: F,
    waker: Option<Waker>,
}

impl<F: Future + Unpin> Armed<F> {
    pub(crate) fn new(future: F) -> Self {
        Self {
            future,
            waker: None,
        }
    }

    /// Poll the future, unless it holds this task's waker and `may_be_ready` says it has not
    /// finished: then it will wake the task when it does.
    pub(crate) fn poll_if(
        &mut self,
        cx: &mut Context<'_>,
        may_be_ready: impl FnOnce(&F) -> bool,
    ) -> Poll<F::Output> {
        let armed = self
            .waker
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        if armed && !may_be_ready(&self.future) {
            return Poll::Pending;
        }
        // Out of budget, tokio's resources answer `Pending` without keeping the waker.
        let budget = tokio::task::coop::has_budget_remaining();
        match Pin::new(&mut self.future).poll(cx) {
            Poll::Pending => {
                self.waker = budget.then(|| cx.waker().clone());
                Poll::Pending
            }
            Poll::Ready(output) => {
                self.waker = None;
                Poll::Ready(output)
            }
        }
    }

    /// The future, to change it (a timer's reset): it is polled in full next time.
    pub(crate) fn get_mut(&mut self) -> &mut F {
        self.waker = None;
        &mut self.future
    }
}
