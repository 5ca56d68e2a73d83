//! One request's answer, handed from the reader thread to whoever waits for it.
//!
//! A mutex and a condition variable, not a channel: a general channel spins and yields the
//! CPU several times before its receiver sleeps, which on a small machine shared with the
//! server costs more than the hand-over itself (four `sched_yield` calls per answer, measured
//! with `perf stat`; see `benches/RESULTS.md`). Here the waiter sleeps at once and the reader
//! wakes it with one futex call.
//!
//! A caller that stops waiting can forward the answer instead (to the janitor, which finishes
//! the request's work when it is answered).

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A pair: the reader fills the [`Promise`], the caller waits on the [`Awaited`].
pub(crate) fn slot<T>() -> (Promise<T>, Awaited<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::Empty),
        ready: Condvar::new(),
    });
    (Promise(Some(shared.clone())), Awaited(shared))
}

/// Where a forwarded answer goes; `None` if the promise was dropped unfilled.
type Forward<T> = Box<dyn FnOnce(Option<T>) + Send>;

enum State<T> {
    Empty,
    /// `None`: the promise was dropped unfilled.
    Filled(Option<T>),
    /// The caller gave up waiting: the answer goes here instead.
    Forward(Forward<T>),
    /// The answer was taken (or forwarded).
    Taken,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

impl<T> Shared<T> {
    fn put(&self, answer: Option<T>) {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, State::Taken) {
            State::Empty => {
                *state = State::Filled(answer);
                drop(state);
                self.ready.notify_one();
            }
            State::Forward(to) => {
                drop(state);
                to(answer);
            }
            // Filled twice cannot happen (the promise is consumed); keep the first.
            other => *state = other,
        }
    }
}

/// The reader's side. Dropped unfilled (the connection died first), it answers `None`.
pub(crate) struct Promise<T>(Option<Arc<Shared<T>>>);

impl<T> Promise<T> {
    pub fn fulfil(mut self, answer: T) {
        if let Some(shared) = self.0.take() {
            shared.put(Some(answer));
        }
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.put(None);
        }
    }
}

/// The deadline came first.
#[derive(Debug)]
pub(crate) struct TimedOut;

/// The waiting caller's side.
pub(crate) struct Awaited<T>(Arc<Shared<T>>);

impl<T> Awaited<T> {
    /// Takes the answer, waiting for it until `until` (`None`: as long as it takes):
    /// `Ok(None)` if the promise was dropped unfilled (or the answer was taken before). At the
    /// deadline the answer stays for a later call or [`Awaited::forward`].
    pub fn wait(&self, until: Option<Instant>) -> Result<Option<T>, TimedOut> {
        let mut state = self.0.state.lock();
        loop {
            match &*state {
                State::Filled(_) => {
                    return match std::mem::replace(&mut *state, State::Taken) {
                        State::Filled(answer) => Ok(answer),
                        // Just matched as filled, under the same lock.
                        _ => Ok(None),
                    };
                }
                // Already taken: nothing more will come.
                State::Taken | State::Forward(_) => return Ok(None),
                State::Empty => {}
            }
            match until {
                Some(d) => {
                    if self.0.ready.wait_until(&mut state, d).timed_out()
                        && matches!(*state, State::Empty)
                    {
                        return Err(TimedOut);
                    }
                }
                None => self.0.ready.wait(&mut state),
            }
        }
    }

    /// Whether the answer is there (or will never come), without waiting.
    pub fn is_ready(&self) -> bool {
        !matches!(*self.0.state.lock(), State::Empty)
    }

    /// Waits until the answer is there, without taking it; false at `until`.
    pub fn ready(&self, until: Instant) -> bool {
        let mut state = self.0.state.lock();
        while matches!(*state, State::Empty) {
            if self.0.ready.wait_until(&mut state, until).timed_out() {
                return !matches!(*state, State::Empty);
            }
        }
        true
    }

    /// Hands the answer to `to` instead of a waiter: now if it is already there, else from
    /// the reader thread when it comes (or with `Err(())` when the connection dies first).
    /// `to` must not block.
    pub fn forward(self, to: impl FnOnce(Option<T>) + Send + 'static) {
        let mut state = self.0.state.lock();
        match std::mem::replace(&mut *state, State::Taken) {
            State::Filled(answer) => {
                drop(state);
                to(answer);
            }
            State::Empty => *state = State::Forward(Box::new(to)),
            State::Forward(_) | State::Taken => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn a_waiter_gets_the_answer_filled_from_another_thread() {
        let (p, a) = slot();
        let t = thread::spawn(move || p.fulfil(7));
        assert_eq!(a.wait(None).unwrap(), Some(7));
        t.join().unwrap();
        // Taken once: a second wait does not hang.
        assert_eq!(a.wait(None).unwrap(), None);
    }

    #[test]
    fn a_dropped_promise_answers_none_and_a_deadline_times_out() {
        let (p, a) = slot::<i32>();
        assert!(a
            .wait(Some(Instant::now() + Duration::from_millis(5)))
            .is_err());
        assert!(!a.ready(Instant::now()));
        drop(p);
        assert!(a.ready(Instant::now()));
        assert_eq!(a.wait(None).unwrap(), None);
    }

    #[test]
    fn forwarding_delivers_now_or_when_filled() {
        let (tx, rx) = mpsc::channel();
        let (p, a) = slot();
        let t = tx.clone();
        a.forward(move |answer| t.send(answer).unwrap());
        assert!(rx.try_recv().is_err());
        p.fulfil(3);
        assert_eq!(rx.recv().unwrap(), Some(3));

        let (p, a) = slot();
        p.fulfil(4);
        a.forward(move |answer| tx.send(answer).unwrap());
        assert_eq!(rx.recv().unwrap(), Some(4));

        let (p, a) = slot::<i32>();
        let (tx, rx) = mpsc::channel();
        a.forward(move |answer| tx.send(answer).unwrap());
        drop(p);
        assert_eq!(rx.recv().unwrap(), None);
    }
}
