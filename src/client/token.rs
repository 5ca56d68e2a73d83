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
    /// The channel [`signal`](Self::signal) hands out, made when first asked for (most holds
    /// never are: a channel costs more to make than the rest of a token).
    signal: Mutex<Signal>,
    /// The client's count of live tokens, which this one is part of until it is lost or
    /// dropped.
    live: Arc<AtomicUsize>,
}

impl SessionToken {
    /// A token counted in `live` until it is lost or dropped.
    pub fn new(session: SessionId, lost_on_suspend: bool, live: Arc<AtomicUsize>) -> SessionToken {
        live.fetch_add(1, Ordering::SeqCst);
        SessionToken {
            live,
            session,
            lost_on_suspend,
            lost: AtomicBool::new(false),
            signal: Mutex::new(Signal::default()),
        }
    }

    pub fn mark_lost(&self) {
        // A lost hold needs no heartbeat: it leaves the live count now, not when dropped.
        if !self.lost.swap(true, Ordering::SeqCst) {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
        self.signal.lock().closer.take();
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// A channel that closes when the token is lost (closed already if it is).
    pub fn signal(&self) -> Receiver<()> {
        let mut signal = self.signal.lock();
        if let Some(rx) = &signal.rx {
            return rx.clone();
        }
        let (closer, rx) = bounded(1);
        // Looked at under the lock `mark_lost` takes after setting `lost`: either it sees
        // this closer and drops it, or the closer is dropped here.
        if !self.is_lost() {
            signal.closer = Some(closer);
        }
        signal.rx = Some(rx.clone());
        rx
    }
}

/// A token's loss channel: the receiving end handed out, and the sending end, dropped when
/// the token is lost.
#[derive(Default)]
struct Signal {
    rx: Option<Receiver<()>>,
    closer: Option<Sender<()>>,
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

    #[test]
    fn the_loss_signal_closes_whether_asked_for_before_or_after_the_loss() {
        let live = Arc::new(AtomicUsize::new(0));
        let early = SessionToken::new(SessionId(1), false, live.clone());
        let before = early.signal();
        assert!(before.try_recv().is_err_and(|e| e.is_empty()));
        early.mark_lost();
        assert!(before.try_recv().is_err_and(|e| e.is_disconnected()));
        assert!(early
            .signal()
            .try_recv()
            .is_err_and(|e| e.is_disconnected()));
        let late = SessionToken::new(SessionId(1), false, live);
        late.mark_lost();
        assert!(late.signal().try_recv().is_err_and(|e| e.is_disconnected()));
    }
}
