//! Connection states as the framework reports them, and subscriptions to them.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::ConnectFailure;

pub use crate::session_id::SessionId;

/// What happened to the connection, as the recipes need to know it.
///
/// The order for one session is always `Connected`, then any number of
/// `Suspended` → `Reconnected` pairs, then possibly `Suspended` → `Lost` (or `Lost` straight
/// from connected when the server reports the session gone). After `Lost` the client builds a
/// new session and reports `Connected` again with the new id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// A new session is established (the first one, or a new one after `Lost`).
    Connected,
    /// The connection broke or went silent. The session may still be alive on the server;
    /// nothing held under it can be trusted until `Reconnected`.
    Suspended,
    /// The same session is back after `Suspended`. The client asked the server to restore the
    /// watches set before (a change made meanwhile fires them at once); a recipe re-checks its
    /// state anyway, since nothing held could be trusted while suspended.
    Reconnected,
    /// The session is gone: the server expired it, or it could not be reached for a full
    /// session timeout. Its ephemeral nodes, and so its locks, are gone.
    Lost,
    /// Connected to a server cut off from its quorum that serves reads only (with
    /// [`ClientBuilder::allow_read_only`](crate::ClientBuilder::allow_read_only)). The session
    /// is that server's own: writes fail `NotReadOnly`, and nothing can be held. When that
    /// connection ends and a read-write server is reached, the client takes a new session
    /// there (`Connected`); it does not yet look for one while the read-only connection lasts.
    ConnectedReadOnly,
}

impl ConnectionState {
    /// True for the states in which requests can be made under a live session.
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected
                | ConnectionState::Reconnected
                | ConnectionState::ConnectedReadOnly
        )
    }
}

/// One state change, with the session it refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateEvent {
    /// The new state.
    pub state: ConnectionState,
    /// The session the state refers to: for `Lost`, the session that was lost; for
    /// `Connected`, the new one.
    pub session_id: SessionId,
    /// When the client decided it.
    pub at: Instant,
    /// For `Lost`: what the client's attempts to connect since the connection ended met that
    /// waiting does not mend (a server certificate that stopped verifying, say), if anything
    /// (see [`Client::connect_failure`](crate::Client::connect_failure)); `None` for the other
    /// states. (`Suspended` comes as the connection ends, before any attempt: its cause, when
    /// there is one, is told by the errors of calls made meanwhile and by `connect_failure`.)
    pub cause: Option<ConnectFailure>,
}

/// Subscribers by id, and whether the client has closed (no subscription goes back on the
/// list then: its channel must see the end).
#[derive(Default)]
struct Listeners {
    subs: Vec<(u64, Sender<StateEvent>)>,
    closed: bool,
}

type SubscriberList = Mutex<Listeners>;

/// A stream of [`StateEvent`]s, in the order they happened. Dropping it unsubscribes.
///
/// Events go out through an unbounded channel the moment the client decides them, so a slow
/// subscriber delays nobody.
pub struct Subscription {
    rx: Receiver<StateEvent>,
    id: u64,
    list: Weak<SubscriberList>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .finish()
    }
}

/// The client's subscribers. A dropped [`Subscription`] takes itself off the list at once
/// (locks subscribe on every acquire, so waiting for the next event to prune would grow the
/// list without bound).
#[derive(Default)]
pub(crate) struct Subscribers {
    list: Arc<SubscriberList>,
    next: AtomicU64,
}

impl Subscribers {
    pub fn subscribe(&self) -> Subscription {
        let (tx, rx) = crossbeam_channel::unbounded();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut list = self.list.lock();
        // After the client closed, a subscription's channel has ended already.
        if !list.closed {
            list.subs.push((id, tx));
        }
        drop(list);
        Subscription {
            rx,
            id,
            list: Arc::downgrade(&self.list),
        }
    }

    /// Sends `event` to every subscriber, in subscription order.
    pub fn publish(&self, event: StateEvent) {
        self.list.lock().subs.retain(|(_, s)| s.send(event).is_ok());
    }

    /// The client closed: every subscription's channel ends, and none goes back on the list.
    pub fn clear(&self) {
        let mut list = self.list.lock();
        list.subs.clear();
        list.closed = true;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.list.lock().subs.len()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(list) = self.list.upgrade() {
            list.lock().subs.retain(|(id, _)| *id != self.id);
        }
    }
}

/// A subscription taken off the list, to be put back later with nothing of the meantime in
/// it: a lock keeps one between acquisitions instead of making a channel for each (a
/// channel costs several allocations, a tenth of a contended acquisition's; issue 22), and
/// hears nothing while it is idle.
pub(crate) struct Parked {
    sub: Subscription,
    tx: Sender<StateEvent>,
}

impl Subscription {
    /// Off the list until [`Parked::resume`]; `None` if it is no longer on it (the client
    /// closed, or is gone).
    pub(crate) fn park(self) -> Option<Parked> {
        let list = self.list.upgrade()?;
        let mut list = list.lock();
        let at = list.subs.iter().position(|(id, _)| *id == self.id)?;
        let (_, tx) = list.subs.remove(at);
        drop(list);
        Some(Parked { sub: self, tx })
    }
}

impl Parked {
    /// Back on the list, as if subscribed now: whatever it holds from before is dropped, under
    /// the lock events are published under. `None` once the client has closed.
    pub(crate) fn resume(self) -> Option<Subscription> {
        let list = self.sub.list.upgrade()?;
        let mut list = list.lock();
        if list.closed {
            return None;
        }
        while self.sub.rx.try_recv().is_ok() {}
        list.subs.push((self.sub.id, self.tx));
        drop(list);
        Some(self.sub)
    }
}

impl Subscription {
    /// The next event, waiting at most `timeout`; `None` on timeout or once the client closed.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<StateEvent> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Option<StateEvent> {
        self.rx.try_recv().ok()
    }

    /// The channel itself, to `select!` on together with other channels.
    pub fn receiver(&self) -> &Receiver<StateEvent> {
        &self.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_subscription_leaves_the_list_at_once() {
        let subs = Subscribers::default();
        let a = subs.subscribe();
        let b = subs.subscribe();
        assert_eq!(subs.len(), 2);
        drop(a);
        assert_eq!(subs.len(), 1);
        let event = StateEvent {
            state: ConnectionState::Lost,
            session_id: SessionId(1),
            at: Instant::now(),
            cause: None,
        };
        subs.publish(event);
        assert_eq!(b.try_recv(), Some(event));
    }

    #[test]
    fn a_parked_subscription_hears_nothing_until_it_resumes_and_then_only_news() {
        let subs = Subscribers::default();
        let event = |state| StateEvent {
            state,
            session_id: SessionId(1),
            at: Instant::now(),
            cause: None,
        };
        let other = subs.subscribe();
        let sub = subs.subscribe();
        subs.publish(event(ConnectionState::Suspended));
        let parked = sub.park().expect("on the list");
        assert_eq!(subs.len(), 1);
        subs.publish(event(ConnectionState::Reconnected));
        let sub = parked.resume().expect("not closed");
        assert_eq!(subs.len(), 2);
        // Neither what came before it parked nor what came while it was parked.
        assert_eq!(sub.try_recv(), None);
        subs.publish(event(ConnectionState::Lost));
        assert_eq!(sub.try_recv().map(|e| e.state), Some(ConnectionState::Lost));
        assert_eq!(sub.try_recv(), None);
        assert_eq!(
            other.try_recv().map(|e| e.state),
            Some(ConnectionState::Suspended)
        );
        drop(sub);
        assert_eq!(subs.len(), 1);
    }

    #[test]
    fn a_parked_subscription_does_not_come_back_to_a_closed_client() {
        let subs = Subscribers::default();
        let parked = subs.subscribe().park().expect("on the list");
        subs.clear();
        assert!(parked.resume().is_none());
        assert_eq!(subs.len(), 0);
        // Nor can one be parked once the client closed: its channel has ended.
        let closed = subs.subscribe();
        subs.clear();
        assert!(closed.park().is_none());
        // A subscription made after the client closed has ended too (a reviewer's finding:
        // it waited for ever).
        let late = subs.subscribe();
        assert_eq!(
            late.rx.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        );
        assert_eq!(subs.len(), 0);
    }

    #[test]
    fn session_ids_print_like_the_server_prints_them() {
        assert_eq!(
            SessionId(0x1000_0a2b_0000_0001).to_string(),
            "0x10000a2b00000001"
        );
        assert!(ConnectionState::Reconnected.is_connected());
        assert!(!ConnectionState::Suspended.is_connected());
    }
}
