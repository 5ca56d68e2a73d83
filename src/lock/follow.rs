//! The loop of a recipe that keeps something current on a thread of its own (a kept node, a
//! worker's share, a shared value): look, wait for what could change the answer, look again,
//! until stopped. The recipe supplies the look; the waiting is the lock core's one wait.

use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;

use super::core::{pause, LockCore, WatchGuard, Woke};
use crate::{Error, Result, WatchEvent};

/// What the loop does with a look's error (other than `Closed`, which ends it).
pub(crate) enum AfterError {
    /// Look again after the next state change or a backoff that grows with each failure.
    Backoff,
    /// Look again after the next state change, or after the longest backoff: an error that
    /// a retry soon would only meet again (`NoAuth`, an invalid ACL).
    Later,
}

/// The rules a follower's loop runs by.
pub(crate) struct Rules<'a> {
    /// A suspension wakes a look (as a loss and a reconnection do), rather than waiting for
    /// the verdict.
    pub look_when_suspended: bool,
    /// What to do after a look failed with this error.
    pub after_error: &'a dyn Fn(&Error) -> AfterError,
}

/// What a look gets: the channel its watches report into, the watches to take back when the
/// loop ends, and what is queued on the channel.
pub(crate) struct Looking<'a, 'b> {
    /// Set watches with this channel.
    pub tx: &'b Sender<WatchEvent>,
    /// Watches set with [`tx`](Self::tx), taken back when the loop ends.
    pub watches: &'b mut WatchGuard<'a>,
    rx: &'b Receiver<WatchEvent>,
    /// The event that ended the wait before this look (taken off the channel by the wait).
    woke: Option<WatchEvent>,
}

impl Looking<'_, '_> {
    /// Drops what the watches reported so far: a read sent after this answers it (a watch's
    /// event reaches its channel before the reply to any later request), so the wait after
    /// this look sleeps only until something newer.
    pub fn answered(&mut self) {
        self.woke = None;
        while self.rx.try_recv().is_ok() {}
    }

    /// Takes what the watches reported so far (to be answered by reads sent after this).
    pub fn take(&mut self) -> Vec<WatchEvent> {
        self.woke
            .take()
            .into_iter()
            .chain(self.rx.try_iter())
            .collect()
    }
}

/// Runs `look` and waits, until `stop` fires or is dropped, or the client closes. `look`
/// returns when to look again without an event (`None`: only on one).
pub(crate) fn follow(
    core: &LockCore,
    stop: &Receiver<()>,
    wake: (&Sender<WatchEvent>, &Receiver<WatchEvent>),
    rules: &Rules<'_>,
    mut look: impl FnMut(&mut Looking<'_, '_>) -> Result<Option<Instant>>,
) {
    let client = &core.client;
    // Subscribed, and the channel made, before the first look: nothing slips past.
    let states = client.subscribe();
    let (tx, rx) = wake;
    let mut watches = WatchGuard::new(client, tx);
    let mut failures = 0;
    let mut woke = None;
    'looks: loop {
        let mut looking = Looking {
            tx,
            watches: &mut watches,
            rx,
            woke: woke.take(),
        };
        let next = match look(&mut looking) {
            Ok(next) => {
                failures = 0;
                next
            }
            Err(Error::Closed) => break,
            Err(e) => {
                let mut longest = 8;
                let failures = match (rules.after_error)(&e) {
                    AfterError::Backoff => &mut failures,
                    AfterError::Later => &mut longest,
                };
                if pause(stop, &states, failures, None) {
                    break;
                }
                continue;
            }
        };
        loop {
            let Some(token) = client
                .session_id()
                .and_then(|s| client.session_token(s, false))
            else {
                if pause(stop, &states, &mut failures, None) {
                    break 'looks;
                }
                continue 'looks;
            };
            match core.wait(rx, &states, &token, next, Some(stop), None) {
                Ok(Woke::Cancelled) | Err(Error::Closed) => break 'looks,
                Ok(Woke::Event(e)) => {
                    woke = Some(e);
                    continue 'looks;
                }
                Ok(Woke::Suspended) if !rules.look_when_suspended => continue,
                _ => continue 'looks,
            }
        }
    }
}

/// The session and the connection a call made now goes out on (a reconnection, to the same
/// server or another, makes a new one): what a recipe that reads on a thread of its own
/// compares to know whether its last read is of the connection that is up.
pub(crate) fn connection_of(client: &crate::Client) -> Option<(crate::SessionId, u64)> {
    let connections = client.metrics().connections;
    client.session_id().map(|s| (s, connections))
}

/// A recipe's own thread, and the channel that stops it.
#[derive(Default)]
pub(crate) struct Worker(Mutex<Option<(Sender<()>, JoinHandle<()>)>>);

impl Worker {
    /// Starts `run` on a thread named `name`, with the channel that stops it; unless
    /// `closed()` (asked under the same lock as [`stop`](Self::stop) takes, so that a close
    /// that comes while this starts either stops the thread or keeps it from starting).
    pub fn spawn(
        &self,
        name: &str,
        closed: impl FnOnce() -> bool,
        run: impl FnOnce(&Receiver<()>) + Send + 'static,
    ) -> crate::Result<()> {
        let mut slot = self.0.lock();
        if closed() {
            return Err(Error::Closed);
        }
        let (stop_tx, stop_rx) = bounded(0);
        let handle = thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&stop_rx))
            .map_err(|e| Error::IllegalState(format!("cannot start {name}: {e}")))?;
        *slot = Some((stop_tx, handle));
        Ok(())
    }

    /// Stops the thread and waits for it to end (unless called on it). The thread is taken,
    /// and the lock let go, before the join: the thread (a listener on it) may stop it too.
    pub fn stop(&self) {
        let taken = self.0.lock().take();
        if let Some((stop, handle)) = taken {
            drop(stop);
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}
