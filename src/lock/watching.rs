//! The wait of a recipe that waits on its caller's thread for a change it watches (a barrier to
//! open, a queue to hold an item): the lock core's one wait, under those recipes' rules.

use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::core::{LockCore, WatchGuard, Woke};
use crate::{Error, Result, Subscription, WatchEvent};

/// What a waiting recipe listens on: the client's state changes (subscribed before any look,
/// so no change slips past) and the channel its watches report into (made before any watch is
/// set, so a watch that fires at once is not missed). Every watch set through it is taken
/// back when it is dropped.
pub(crate) struct Watching<'a> {
    core: &'a LockCore,
    states: Subscription,
    wake_rx: Receiver<WatchEvent>,
    guard: WatchGuard<'a>,
    wake_tx: Sender<WatchEvent>,
}

impl<'a> Watching<'a> {
    pub fn new(core: &'a LockCore) -> Watching<'a> {
        let states = core.client.subscribe();
        let (wake_tx, wake_rx) = unbounded();
        Watching {
            core,
            states,
            wake_rx,
            guard: WatchGuard::new(&core.client, &wake_tx),
            wake_tx,
        }
    }

    /// The channel to set watches with.
    pub fn tx(&self) -> &Sender<WatchEvent> {
        &self.wake_tx
    }

    /// `path` is watched through [`tx`](Self::tx).
    pub fn watching(&mut self, path: &str) {
        self.guard.watching(path);
    }

    /// Waits until a watch fires, the session comes back after a break or is replaced, or
    /// `deadline` passes: true unless the deadline passed. Neither a suspension nor a lost
    /// session ends the wait with an error: the recipe's nodes are read again on whatever
    /// session the client has then (its own nodes are the caller's to make again).
    pub fn wait(&self, deadline: Instant) -> Result<bool> {
        loop {
            let client = &self.core.client;
            let token = client
                .session_id()
                .and_then(|session| client.session_token(session, false));
            let Some(token) = token else {
                // No session yet: wait for one, within the deadline.
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                match client.wait_connected(left) {
                    Ok(_) => return Ok(true),
                    Err(Error::Timeout { .. } | Error::ConnectionLoss { .. }) => return Ok(false),
                    Err(e) => return Err(e),
                }
            };
            match self.core.wait(
                &self.wake_rx,
                &self.states,
                &token,
                Some(deadline),
                None,
                None,
            ) {
                Ok(Woke::Suspended) => continue,
                Ok(Woke::Deadline) => return Ok(false),
                Ok(Woke::Event(_) | Woke::Recheck | Woke::Cancelled) => return Ok(true),
                Err(Error::SessionLost { .. }) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }
}
