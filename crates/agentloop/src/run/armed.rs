//! Futures polled again only after they woke their task.
//!
//! A streamed model call races the run's stop (cancellation and deadlines) against every event.
//! Polling that pending future again before it woke only stores the same waker again, which for
//! tokio's cancellation token and timers takes locks on every event. [`Armed`] polls its future
//! with a waker of its own that records the wake-up before passing it on, so a poll that cannot
//! make progress costs one atomic load.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// A future and the wake-ups it has sent since its last poll.
pub(crate) struct Armed<F> {
    future: F,
    signal: Arc<Signal>,
    /// `signal` as a waker, built once: futures that keep a waker compare it with
    /// `Waker::will_wake` and find it unchanged, so they never clone it again.
    waker: Waker,
    /// The task waker `signal` forwards to, kept here to compare without atomics.
    task: Option<Waker>,
}

impl<F> std::fmt::Debug for Armed<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Armed")
            .field("woken", &self.signal.woken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Shared with the waker handed to the future.
#[derive(Default)]
struct Signal {
    /// Set by every wake-up; cleared just before the future is polled.
    woken: AtomicBool,
    /// The first task to poll: nearly always the only one, so waking it takes no lock.
    first: OnceLock<Waker>,
    /// Set while a task other than `first` polls the future; it waits in `other`.
    moved: AtomicBool,
    other: Mutex<Option<Waker>>,
}

impl Signal {
    /// Make `task` the one wake-ups go to. Only [`Armed::wants_poll`] calls this, with `&mut`.
    fn register(&self, task: &Waker) {
        match self.first.get() {
            None => {
                // Cannot fail: `Armed::wants_poll` is the only writer and holds `&mut`.
                let _ = self.first.set(task.clone());
            }
            Some(first) if first.will_wake(task) => self.moved.store(false, Ordering::Release),
            Some(_) => {
                // A poisoned lock only means a panic elsewhere; the slot is still whole.
                *self.other.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.clone());
                self.moved.store(true, Ordering::Release);
            }
        }
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if self.moved.load(Ordering::Acquire) {
            if let Some(task) = self
                .other
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
            {
                task.wake_by_ref();
            }
        } else if let Some(task) = self.first.get() {
            task.wake_by_ref();
        }
    }
}

impl<F: Future + Unpin> Armed<F> {
    pub(crate) fn new(future: F) -> Self {
        let signal = Arc::new(Signal {
            // The first poll must happen.
            woken: AtomicBool::new(true),
            ..Signal::default()
        });
        Self {
            future,
            waker: Waker::from(Arc::clone(&signal)),
            signal,
            task: None,
        }
    }

    /// Poll the future if it woke since its last poll or the task polling it changed;
    /// otherwise it is still pending and will wake this task when it can progress.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        if self.wants_poll(cx) {
            self.poll_now()
        } else {
            Poll::Pending
        }
    }

    /// Whether a poll could make progress: the future woke since its last poll, or `cx`
    /// belongs to a task it did not know (which is now the one it wakes).
    pub(crate) fn wants_poll(&mut self, cx: &Context<'_>) -> bool {
        let same_task = self
            .task
            .as_ref()
            .is_some_and(|task| task.will_wake(cx.waker()));
        if !same_task {
            self.signal.register(cx.waker());
            self.task = Some(cx.waker().clone());
            return true;
        }
        self.woke()
    }

    /// Whether the future woke since its last poll (or was never polled). Unlike
    /// [`Self::wants_poll`] it does not look at the task, so it costs one atomic load even
    /// where `Waker::will_wake` cannot recognize the task: for checks between the polls that
    /// register the task.
    pub(crate) fn woke(&self) -> bool {
        self.signal.woken.load(Ordering::Acquire)
    }

    /// Poll the future now; its wake-ups reach the task of the last [`Self::wants_poll`].
    pub(crate) fn poll_now(&mut self) -> Poll<F::Output> {
        // Cleared before polling, so a wake-up during or after the poll is never lost.
        self.signal.woken.store(false, Ordering::SeqCst);
        Pin::new(&mut self.future).poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `open` is set, waking the stored waker when opened.
    #[derive(Default)]
    struct Gate {
        open: AtomicBool,
        waker: Mutex<Option<Waker>>,
        polls: AtomicUsize,
    }

    struct GateFuture(Arc<Gate>);

    impl Future for GateFuture {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.polls.fetch_add(1, Ordering::SeqCst);
            if self.0.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.0.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    impl Gate {
        fn open(&self) {
            self.open.store(true, Ordering::SeqCst);
            if let Some(waker) = self.waker.lock().unwrap().take() {
                waker.wake();
            }
        }
    }

    /// A task waker that counts its wake-ups.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A closed gate armed, and one task to poll it from.
    fn armed_gate() -> (Arc<Gate>, Arc<Task>, Waker, Armed<GateFuture>) {
        let gate = Arc::new(Gate::default());
        let task = Arc::new(Task::default());
        let waker = Waker::from(Arc::clone(&task));
        let armed = Armed::new(GateFuture(Arc::clone(&gate)));
        (gate, task, waker, armed)
    }

    #[test]
    fn a_pending_future_is_polled_again_only_after_it_woke_the_task() {
        let (gate, task, waker, mut armed) = armed_gate();
        let mut cx = Context::from_waker(&waker);

        assert!(armed.poll(&mut cx).is_pending());
        assert!(armed.poll(&mut cx).is_pending());
        gate.open.store(true, Ordering::SeqCst); // ready, but it has not said so
        assert!(armed.poll(&mut cx).is_pending());
        assert_eq!(gate.polls.load(Ordering::SeqCst), 1);
        gate.open.store(false, Ordering::SeqCst);

        gate.open();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the wake-up reaches the task"
        );
        assert!(armed.poll(&mut cx).is_ready());
        assert_eq!(gate.polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_new_task_is_registered_and_the_future_polled_for_it() {
        let gate = Arc::new(Gate::default());
        let first = Arc::new(Task::default());
        let second = Arc::new(Task::default());
        let mut armed = Armed::new(GateFuture(Arc::clone(&gate)));

        let waker = Waker::from(Arc::clone(&first));
        assert!(armed.poll(&mut Context::from_waker(&waker)).is_pending());
        let waker = Waker::from(Arc::clone(&second));
        assert!(armed.poll(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(gate.polls.load(Ordering::SeqCst), 2);

        // A wake-up now goes to the second task only.
        let stored = gate.waker.lock().unwrap().clone().unwrap();
        stored.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);

        let waker = Waker::from(Arc::clone(&first));
        assert!(armed.poll(&mut Context::from_waker(&waker)).is_pending());
        assert_eq!(
            gate.polls.load(Ordering::SeqCst),
            3,
            "back to the first task"
        );

        gate.open();
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            first.0.load(Ordering::SeqCst),
            1,
            "only the latest task is woken"
        );
    }
}
