//! `LeaderLatch`: the first contender in line leads until it leaves or loses its session.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

use super::{LeadershipEvent, LeadershipPolicy, Participant, CLOSE_WAIT};
use crate::client::token::SessionToken;
use crate::lock::core::{decide, pause, Decision, LockCore, MaxLeases, OwnNode, WatchGuard, Woke};
use crate::lock::names::{sort_contenders, Contender};
use crate::lock::{Lease, LockOptions};
use crate::{paths, Client, Error, Result};

const LATCH_NAME: &str = "latch-";

type Listener = Arc<dyn Fn(LeadershipEvent) + Send + Sync>;

#[derive(Default)]
struct State {
    /// The hold under which we lead, while we do.
    lease: Option<Arc<Lease>>,
    /// A claim that found us first in line on our live session but its bound run out: kept
    /// (its token live) so that the client's heartbeat goes on and the bound can come back.
    /// Without it, once the token of our place in line is lost to a suspension, nothing live
    /// is left, no heartbeat goes out, and we stay first without ever leading again.
    waiting: Option<Lease>,
    node: Option<String>,
    closed: bool,
    /// Set by `close()`: when the latch thread must be done (its calls and the node's
    /// deletion give up by then).
    close_by: Option<Instant>,
}

struct Inner {
    core: LockCore,
    id: String,
    policy: LeadershipPolicy,
    state: Mutex<State>,
    changed: Condvar,
    listeners: Mutex<Vec<Listener>>,
}

/// Leader election by latch: every participant keeps a node in line under `path`; the first
/// one leads, the others each watch only the node before theirs.
///
/// Leadership is dropped on LOST, and on SUSPENDED unless the policy is
/// [`LeadershipPolicy::Session`]. It is claimed only after checking that the first node belongs
/// to our *live* session (Curator added that check after a double leader, CURATOR-696), and
/// [`has_leadership`](Self::has_leadership) also requires the session's lease to be certainly
/// valid, so two latches never both say they lead. After a reconnect the latch checks again;
/// after a new session it enters the line again.
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::{leader::LeaderLatch, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let latch = LeaderLatch::new(&client, "/jobs/nightly/leader", "host-a")?;
/// latch.add_listener(|e| eprintln!("leadership: {e:?}"));
/// latch.start()?;
/// if latch.await_leadership(Duration::from_secs(30))? {
///     // ... do the leader's work while latch.has_leadership() ...
/// }
/// latch.close();
/// # Ok(()) }
/// ```
///
#[doc = include_str!("../../recipes/leader.md")]
pub struct LeaderLatch {
    inner: Arc<Inner>,
    worker: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("path", &self.inner.core.path)
            .field("id", &self.inner.id)
            .field("leader", &self.has_leadership())
            .finish()
    }
}

impl LeaderLatch {
    /// A latch on `path` for participant `id` (stored in its node), with the standard policy.
    pub fn new(client: &Client, path: &str, id: &str) -> Result<LeaderLatch> {
        LeaderLatch::with_policy(client, path, id, LeadershipPolicy::Standard)
    }

    /// A latch with the given policy.
    pub fn with_policy(
        client: &Client,
        path: &str,
        id: &str,
        policy: LeadershipPolicy,
    ) -> Result<LeaderLatch> {
        let options = LockOptions::new()
            .holder_id(id)
            .lost_on_suspend(policy == LeadershipPolicy::Standard);
        Ok(LeaderLatch {
            inner: Arc::new(Inner {
                core: LockCore::new(client, path, options)?,
                id: id.to_owned(),
                policy,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                listeners: Mutex::new(Vec::new()),
            }),
            worker: Mutex::new(None),
        })
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Calls `listener` (on the latch's own thread) whenever leadership is gained or lost.
    /// `Lost` comes when the lease's bound runs out even if nothing else happens (a silent or
    /// slow connection); a listener that takes long delays the next event. After a suspend of
    /// the machine the latch thread's timer (on `Instant`, which does not count the suspend)
    /// fires late by the suspend's length, so `Lost` may come late or, if heartbeats win the
    /// bound back first, not at all; [`has_leadership`](Self::has_leadership) needs no event:
    /// it checks the bound itself, and is right at once.
    pub fn add_listener(&self, listener: impl Fn(LeadershipEvent) + Send + Sync + 'static) {
        self.inner.listeners.lock().push(Arc::new(listener));
    }

    /// Joins the line. Returns at once; leadership comes when it comes.
    ///
    /// # Errors
    /// `IllegalState` if already started or closed.
    pub fn start(&self) -> Result<()> {
        let mut worker = self.worker.lock();
        if worker.is_some() || self.inner.state.lock().closed {
            return Err(Error::IllegalState("the latch was started already".into()));
        }
        let (stop_tx, stop_rx) = bounded(0);
        let inner = self.inner.clone();
        let handle = thread::Builder::new()
            .name("zk-leader-latch".into())
            .spawn(move || inner.run(&stop_rx))
            .map_err(|e| Error::IllegalState(format!("cannot start the latch thread: {e}")))?;
        *worker = Some((stop_tx, handle));
        Ok(())
    }

    /// True while this participant leads: first in line, under a live session whose lease is
    /// certainly valid (and, with the standard policy, connected).
    pub fn has_leadership(&self) -> bool {
        self.inner.leads()
    }

    /// The hold under which this participant leads, while it does: its
    /// [`fencing_token`](Lease::fencing_token) (the creation zxid of the latch node, larger for
    /// every new term across the ensemble), [`run`](Lease::run), [`valid_until`](Lease::valid_until)
    /// and [`while_held`](Lease::while_held) writes. `None` when not leading. A term that ends
    /// leaves the returned lease checking false; a new term (a new session, say) is a new lease.
    pub fn lease(&self) -> Option<Arc<Lease>> {
        let state = self.inner.state.lock();
        if self.inner.leads_with(&state) {
            state.lease.clone()
        } else {
            None
        }
    }

    /// Waits at most `timeout` for leadership; `Ok(false)` if it did not come (or the latch
    /// closed).
    pub fn await_leadership(&self, timeout: Duration) -> Result<bool> {
        let until = Instant::now() + timeout;
        let mut state = self.inner.state.lock();
        loop {
            if state.closed {
                return Ok(false);
            }
            if self.inner.leads_with(&state) {
                return Ok(true);
            }
            // Gaining leadership is announced on `changed`. Only a lease that lapsed while we
            // are first comes back unannounced, when answers flow again: then look again at
            // the next heartbeat's answer.
            let wake = match state.lease.as_ref() {
                Some(_) => {
                    (Instant::now() + self.inner.core.client.session_timeout() * 2 / 9).min(until)
                }
                None => until,
            };
            if self.inner.changed.wait_until(&mut state, wake).timed_out()
                && Instant::now() >= until
            {
                return Ok(self.inner.leads_with(&state));
            }
        }
    }

    /// The current leader, as the nodes say.
    pub fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants()?.into_iter().next())
    }

    /// Everyone in line, leader first.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        super::participants(&self.inner.core)
    }

    /// Leaves the line: stops the latch thread, deletes our node (waiting at most
    /// [`CLOSE_WAIT`](super::CLOSE_WAIT) for the server), and tells the listeners if leadership
    /// ends. Idempotent.
    pub fn close(&self) {
        self.inner
            .state
            .lock()
            .close_by
            .get_or_insert_with(|| Instant::now() + CLOSE_WAIT);
        if let Some((stop, handle)) = self.worker.lock().take() {
            drop(stop);
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
        let mut state = self.inner.state.lock();
        state.closed = true;
        self.inner.changed.notify_all();
    }
}

impl Drop for LeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

/// True if, our node at `ours` in `contenders`, the deletion of the node ahead makes us first
/// without a listing: the lock core's fast handoff for one leader (`MaxLeases(1)`), with its
/// exceptions (a write node ahead, which may downgrade; a parent's overflowed sequence).
fn after_the_head(contenders: &[Contender<'_>], ours: usize) -> bool {
    matches!(
        decide(&MaxLeases(1), contenders, ours),
        Decision::Watch {
            sole_blocker: true,
            ..
        }
    )
}

impl Inner {
    fn leads_with(&self, state: &State) -> bool {
        state
            .lease
            .as_ref()
            .is_some_and(|l| l.is_held() && l.check().is_ok())
            && (self.policy == LeadershipPolicy::Session || self.core.client.is_connected())
    }

    fn leads(&self) -> bool {
        self.leads_with(&self.state.lock())
    }

    fn notify(&self, event: LeadershipEvent) {
        debug!("{} at {}: {event:?}", self.id, self.core.path);
        let listeners: Vec<Listener> = self.listeners.lock().clone();
        for l in listeners {
            // A listener that panics must not take the latch thread (and leadership
            // tracking) down with it.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(event))).is_err() {
                warn!("a leadership listener of {} panicked", self.id);
            }
        }
    }

    fn set_leading(&self, lease: Option<Arc<Lease>>) {
        let (was, now) = {
            let mut state = self.state.lock();
            let was = state.lease.is_some();
            state.waiting = None;
            // A latch being closed takes up nothing (`close()` may have begun during the
            // claim's look at the node).
            let lease = lease.filter(|_| state.close_by.is_none());
            // The term that ends (or gives way to another) ends for every copy of its lease a
            // caller kept (`LeaderLatch::lease`): it never vouches again.
            if let Some(old) = state.lease.take() {
                if !lease.as_ref().is_some_and(|new| Arc::ptr_eq(new, &old)) {
                    old.token.mark_lost();
                }
            }
            state.lease = lease;
            self.changed.notify_all();
            (was, state.lease.is_some())
        };
        match (was, now) {
            (false, true) => self.notify(LeadershipEvent::Gained),
            (true, false) => self.notify(LeadershipEvent::Lost),
            _ => {}
        }
    }

    /// The latch thread: enter the line, then follow it until stopped.
    fn run(&self, stop: &Receiver<()>) {
        let states = self.core.client.subscribe();
        let mut failures = 0;
        loop {
            let entered = self
                .core
                .enter(LATCH_NAME, Some(Instant::now() + CLOSE_WAIT));
            let (node, token) = match entered {
                Ok(v) => v,
                Err(Error::Closed) => break,
                Err(e) => {
                    debug!(
                        "{} could not join the line at {}: {e}",
                        self.id, self.core.path
                    );
                    if pause(stop, &states, &mut failures, None) {
                        break;
                    }
                    continue;
                }
            };
            self.state.lock().node = Some(node.path.clone());
            let stopped = self.follow(&node, &token, stop, &states);
            self.set_leading(None);
            self.state.lock().node = None;
            self.core.leave(&node, Some(self.call_bound()));
            if stopped {
                break;
            }
        }
        self.set_leading(None);
    }

    /// Follows the line with our node in it. Returns true when stopped, false when the node
    /// is gone with its session (enter again).
    fn follow(
        &self,
        node: &OwnNode,
        token: &Arc<SessionToken>,
        stop: &Receiver<()>,
        states: &crate::Subscription,
    ) -> bool {
        let client = &self.core.client;
        let (wake_tx, wake_rx) = unbounded();
        let mut watches = WatchGuard::new(client, &wake_tx);
        let mut failures = 0;
        // The listing that came with our create saves the first round trip.
        let mut first = node.line.clone();
        loop {
            // While we lead, nothing here may block past the lease's bound: the listeners hear
            // `Lost` when it runs out, whatever call or backoff is under way.
            self.lapse();
            let bound = self.call_bound();
            let listed = match first.take() {
                Some(line) => Ok(line),
                None => self.core.line(Some(bound), None),
            };
            let line = match listed {
                Ok(line) => {
                    failures = 0;
                    line
                }
                Err(_) => {
                    if pause(stop, states, &mut failures, self.lease_bound()) {
                        return true;
                    }
                    if client.session_id() != Some(node.session) {
                        return false;
                    }
                    continue;
                }
            };
            let contenders = sort_contenders(line.iter());
            let Some(ours) = contenders.iter().position(|c| c.name == node.name) else {
                return false;
            };
            // Watch our own node while we lead (someone may delete it), the node before ours
            // while we wait.
            let mut lapsed = false;
            // A latch being closed claims nothing (its listeners would hear `Gained` after
            // `close()` began).
            if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                return true;
            }
            let watched = if ours == 0 {
                lapsed = !self.claim(node, bound) && client.session_id() == Some(node.session);
                node.path.clone()
            } else {
                self.set_leading(None);
                paths::join(&self.core.path, contenders[ours - 1].name)
            };
            // Right behind the first in this listing: once the node we watch is deleted, we are
            // first, and need not list the line again to know it. No node can join ahead of
            // ours later: the server gives a new node a sequence above every node's before it
            // (the parent's child version, which only grows while our node keeps the parent).
            // The claim still checks that our node is there and our live session's.
            let after_head =
                after_the_head(&contenders, ours).then(|| line.without(contenders[0].name));
            let bound = self.call_bound();
            let watching = client.with_deadline(bound).data_watch(&watched, &wake_tx);
            match watching {
                Ok(_) => watches.watching(&watched),
                Err(e) if e.is_no_node() => continue,
                Err(_) => {
                    if pause(stop, states, &mut failures, self.lease_bound()) {
                        return true;
                    }
                    continue;
                }
            }
            loop {
                // Leadership lasts while the lease is certainly valid: the listeners hear
                // `Lost` when its bound runs out, also when no event says anything (a silent
                // connection is declared lost only later, and another may lead by then).
                // First but not leading on our live session (its bound ran out while the
                // connection lives on): look again a little later, as no event will come.
                let deadline = match self.lease_bound() {
                    Some(d) => Some(d),
                    None if lapsed => Some(Instant::now() + client.session_timeout() / 20),
                    None => None,
                };
                match self
                    .core
                    .wait(&wake_rx, states, token, deadline, Some(stop), None)
                {
                    Ok(Woke::Cancelled) => return true,
                    // A suspension read late (after we claimed again on the next connection)
                    // ends nothing: only a lease that no longer leads is dropped.
                    Ok(Woke::Suspended) => {
                        if self.policy == LeadershipPolicy::Standard && !self.leads() {
                            self.set_leading(None);
                        }
                    }
                    Ok(Woke::Deadline) => {
                        if self.lapse() {
                            break;
                        }
                        if lapsed {
                            break;
                        }
                    }
                    // A change in line, or back after a break: check again (and lead again if
                    // still first).
                    Ok(Woke::Event(e))
                        if e.kind == crate::WatchKind::Deleted && e.path == watched =>
                    {
                        first = after_head;
                        break;
                    }
                    Ok(Woke::Event(_) | Woke::Recheck) => break,
                    // Our node went with our session: enter the line again.
                    Err(_) => return false,
                }
            }
            if token.is_lost() && self.policy == LeadershipPolicy::Session {
                return false;
            }
        }
    }

    /// While leading: the instant the lease's bound runs out (now, if it has).
    fn lease_bound(&self) -> Option<Instant> {
        let state = self.state.lock();
        let lease = state.lease.as_ref()?;
        Some(lease.valid_until().unwrap_or_else(Instant::now))
    }

    /// How long a call of the latch thread may wait: never past the lease's bound while we
    /// lead, and never longer than `CLOSE_WAIT`, so that `close()` keeps its bound.
    fn call_bound(&self) -> Instant {
        let mut bound = Instant::now() + CLOSE_WAIT;
        if let Some(by) = self.state.lock().close_by {
            bound = bound.min(by);
        }
        self.lease_bound().map_or(bound, |l| l.min(bound))
    }

    /// Ends leadership (the listeners hear `Lost`) if the lease's bound has run out. True if
    /// it did.
    fn lapse(&self) -> bool {
        let lapsed = self
            .state
            .lock()
            .lease
            .as_ref()
            .is_some_and(|l| l.check().is_err());
        if lapsed {
            self.set_leading(None);
        }
        lapsed
    }

    /// We are first: lead, but only if the node is owned by our live session. The look at the
    /// node gives up at `bound`.
    fn claim(&self, node: &OwnNode, bound: Instant) -> bool {
        let client = self.core.client.with_deadline(bound);
        let owned = matches!(
            client.exists(&node.path),
            Ok(Some(stat)) if stat.ephemeral_owner == node.session.0
        ) && client.session_id() == Some(node.session);
        if !owned {
            warn!(
                "{} is first at {} but its node is not owned by the live session; not leading",
                self.id, self.core.path
            );
            self.set_leading(None);
            return false;
        }
        if self.state.lock().lease.is_some() {
            return true;
        }
        let lost_on_suspend = self.policy == LeadershipPolicy::Standard;
        match client.session_token(node.session, lost_on_suspend) {
            Some(token) if !token.is_lost() => {
                let lease = self.core.lease(node.clone(), token);
                // Not on a lease whose bound has run out: the leader may be expiring the
                // session (the caller looks again later). Its token stays live meanwhile, so
                // that heartbeats go out and the bound can come back.
                if lease.check().is_err() {
                    self.state.lock().waiting = Some(lease);
                    return false;
                }
                self.set_leading(Some(Arc::new(lease)));
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decides(line: &[&str], ours: &str) -> bool {
        let contenders = sort_contenders(line.iter());
        let at = contenders.iter().position(|c| c.name == ours).unwrap();
        after_the_head(&contenders, at)
    }

    #[test]
    fn only_the_second_behind_a_plain_head_on_a_sound_sequence_skips_the_listing() {
        let (a, b, c) = (
            "_c_a-latch-0000000005",
            "_c_b-latch-0000000007",
            "_c_c-latch-0000000009",
        );
        assert!(decides(&[a, b, c], b));
        assert!(!decides(&[a, b, c], c), "third in line");
        assert!(!decides(&[a, b], a), "first in line");
        // Behind a write node, which may downgrade.
        assert!(!decides(&["_c_w-__WRIT__0000000005", b], b));
        // Past the parent's sequence overflow, a later node may sort ahead.
        assert!(!decides(
            &[a, "_c_b-latch-2147483647"],
            "_c_b-latch-2147483647"
        ));
    }
}
