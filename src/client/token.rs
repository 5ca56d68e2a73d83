//! Session tokens: how a lock learns that the session under it is gone, without a thread of its
//! own. The session layer marks every token of a session when it publishes that session's loss.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;

use super::state::SessionId;

/// Something held under one session (a lock, a lease, a leadership).
pub(crate) struct SessionToken {
    pub session: SessionId,
    /// Also counts SUSPENDED as lost (the holder cannot know what the server decides meanwhile).
    pub lost_on_suspend: bool,
    lost: AtomicBool,
    /// Dropped when lost: every receiver then sees the channel closed.
    closer: Mutex<Option<Sender<()>>>,
    signal: Receiver<()>,
    /// The client's count of live tokens, which this one is part of until it is lost or
    /// dropped.
    live: Arc<AtomicUsize>,
}

impl SessionToken {
    /// A token counted in `live` until it is lost or dropped.
    pub fn new(session: SessionId, lost_on_suspend: bool, live: Arc<AtomicUsize>) -> SessionToken {
        live.fetch_add(1, Ordering::SeqCst);
        let (closer, signal) = bounded(1);
        SessionToken {
            live,
            session,
            lost_on_suspend,
            lost: AtomicBool::new(false),
            closer: Mutex::new(Some(closer)),
            signal,
        }
    }

    pub fn mark_lost(&self) {
        // A lost hold needs no heartbeat: it leaves the live count now, not when dropped.
        if !self.lost.swap(true, Ordering::SeqCst) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
        self.closer.lock().take();
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// A channel that closes when the token is lost.
    pub fn signal(&self) -> Receiver<()> {
        self.signal.clone()
    }
}

impl Drop for SessionToken {
    fn drop(&mut self) {
        if !self.lost.load(Ordering::SeqCst) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_counts_as_live_until_it_is_lost_or_dropped() {
        let live = Arc::new(AtomicUsize::new(0));
        let held = SessionToken::new(SessionId(1), false, live.clone());
        let lost = SessionToken::new(SessionId(1), true, live.clone());
        assert_eq!(live.load(Ordering::SeqCst), 2);
        lost.mark_lost();
        lost.mark_lost();
        assert_eq!(live.load(Ordering::SeqCst), 1);
        drop(lost);
        assert_eq!(live.load(Ordering::SeqCst), 1);
        drop(held);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}
