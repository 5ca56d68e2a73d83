//! The lock core every lock recipe shares: make a protected node without ever leaving an
//! orphan, decide "may I go, or whom do I watch", and wait without missing a wake-up.
//!
//! A recipe supplies its node name and a [`Rule`]; everything else is here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::Mutex;

use super::lease::Lease;
use super::metrics::Counters;
use super::names::{sort_contenders, Contender, ProtectedId};
use super::LockOptions;
use crate::client::token::SessionToken;
use crate::client::{Names, Parked, Prefetch, WatchKind};
use crate::{paths, Client, ConnectionState, Error, Result, SessionId, Subscription, WatchEvent};

/// The least time a timed acquire gives its create and first look at the line, however near
/// its deadline: a timed acquire returns by `max(deadline, start + MIN_ATTEMPT)`.
pub const MIN_ATTEMPT: Duration = Duration::from_millis(250);

/// What a rule says about our place in line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// We hold it.
    Go,
    /// Watch the contender at `index`. `sole_blocker`: once it is deleted nothing else stands
    /// in our way (sequence numbers only grow, so nobody can queue ahead of us meanwhile), and
    /// its deletion alone grants us the lock.
    Watch { index: usize, sole_blocker: bool },
    /// Wait for the line itself to change (the listing that decided this set a watch on it).
    WaitForChange,
}

/// `rule`'s decision for our node at `ours`, with the guard every fast handoff needs: not on
/// a line whose parent's sequence has overflowed, where a later node may sort ahead of ours
/// (`Contender::nothing_later_sorts_ahead`). Every wait on a line decides through here.
pub(crate) fn decide(rule: &dyn Rule, contenders: &[Contender], ours: usize) -> Decision {
    match rule.decide(contenders, ours) {
        Decision::Watch {
            index,
            sole_blocker,
        } => Decision::Watch {
            index,
            sole_blocker: sole_blocker && contenders[ours].nothing_later_sorts_ahead(),
        },
        decision => decision,
    }
}

/// A recipe's rule for "may I go".
pub(crate) trait Rule {
    /// `contenders` sorted by sequence; ours at `ours`.
    fn decide(&self, contenders: &[Contender], ours: usize) -> Decision;

    /// True if the rule waits on the whole line ([`Decision::WaitForChange`]): the line is
    /// then listed with a watch.
    fn watches_line(&self) -> bool {
        false
    }
}

/// A semaphore's lease count: go while the line is no longer than `n` (Curator's rule; with
/// lease creation serialised by the semaphore's internal mutex, only one waiter watches).
pub(crate) struct CountLeases(pub usize);

impl Rule for CountLeases {
    fn decide(&self, contenders: &[Contender], _ours: usize) -> Decision {
        if contenders.len() <= self.0 {
            Decision::Go
        } else {
            Decision::WaitForChange
        }
    }

    fn watches_line(&self) -> bool {
        true
    }
}

/// Up to `n` holders at once, in order; each waiter watches the node `n` places ahead of it.
/// No fast handoff past a read/write lock's write node (a path shared with one): it may
/// downgrade, and its read node would then stand ahead of us.
pub(crate) struct MaxLeases(pub usize);

impl Rule for MaxLeases {
    fn decide(&self, contenders: &[Contender], ours: usize) -> Decision {
        if ours < self.0 {
            Decision::Go
        } else {
            Decision::Watch {
                index: ours - self.0,
                sole_blocker: ours == self.0
                    && !contenders[..ours].iter().any(Contender::is_writer),
            }
        }
    }
}

/// A read/write lock's writer: goes when first. The fast handoff only past a read node: a
/// write node may downgrade (its read node would then stand between us), and another recipe's
/// node on a shared path is treated as a writer.
pub(crate) struct WriterRule;

impl Rule for WriterRule {
    fn decide(&self, contenders: &[Contender], ours: usize) -> Decision {
        if ours == 0 {
            Decision::Go
        } else {
            Decision::Watch {
                index: ours - 1,
                sole_blocker: ours == 1 && contenders[0].is_reader(),
            }
        }
    }
}

/// A read/write lock's reader: goes when nothing but readers stands ahead; otherwise watches
/// the nearest non-reader ahead (readers in between do not block it). A node of another recipe
/// sharing the path (a plain mutex's, `zk-lock` without `--read`) counts as a writer.
pub(crate) struct ReaderRule;

impl Rule for ReaderRule {
    fn decide(&self, contenders: &[Contender], ours: usize) -> Decision {
        let mut writers = contenders[..ours]
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_reader())
            .map(|(i, _)| i);
        let count = writers.clone().count();
        match writers.next_back() {
            None => Decision::Go,
            Some(index) => Decision::Watch {
                index,
                sole_blocker: count == 1,
            },
        }
    }
}

/// Takes a waiter's watchers off the client's registry when its wait ends, however it ends,
/// so that a waiter that gives up leaves nothing to be woken later.
pub(crate) struct WatchGuard<'a> {
    client: &'a Client,
    tx: Sender<WatchEvent>,
    paths: Vec<String>,
}

impl<'a> WatchGuard<'a> {
    pub fn new(client: &'a Client, tx: &Sender<WatchEvent>) -> WatchGuard<'a> {
        WatchGuard {
            client,
            tx: tx.clone(),
            paths: Vec::new(),
        }
    }

    /// `path` is watched through this guard's channel.
    pub fn watching(&mut self, path: &str) {
        if !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.to_owned());
        }
    }
}

impl WatchGuard<'_> {
    /// Takes back every watch set through this guard so far (a look that sets again what it
    /// needs).
    pub fn forget_all(&mut self) {
        for p in self.paths.drain(..) {
            self.client.forget_watch(&p, &self.tx);
        }
    }
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        self.forget_all();
    }
}

/// Our node, once created.
#[derive(Debug, Clone)]
pub(crate) struct OwnNode {
    /// Path (as the client names it).
    pub path: String,
    /// Node name.
    pub name: String,
    pub session: SessionId,
    /// The line as listed right behind our create, in the same round trip (`None` after an
    /// adoption, or if that listing failed).
    pub line: Option<Names>,
    /// That listing left a watch on the line.
    pub line_watched: bool,
}

/// Why a wait ended without an error.
pub(crate) enum Woke {
    /// A watch fired.
    Event(WatchEvent),
    /// The session is back after a break: what happened meanwhile is read again rather than
    /// trusted to events.
    Recheck,
    /// The connection broke; the session may still live. Nothing held can be trusted until
    /// the verdict (`Recheck` or `SessionLost`).
    Suspended,
    /// The deadline passed.
    Deadline,
    /// The caller's cancel channel fired or closed.
    Cancelled,
}

/// What a waiting acquire listens on: the client's state changes, and the channel its watches
/// report into. Kept by the lock between acquisitions (at most [`IDLE_KEPT`]): a channel costs
/// several allocations the first time it is used, about a tenth of a contended acquisition's
/// client instructions (callgrind; issue 22). Idle, the subscription is off the client's list
/// and the channel watches nothing.
struct Listening {
    states: Parked,
    wake: (Sender<WatchEvent>, Receiver<WatchEvent>),
}

/// Idle listening kits a lock keeps: as many threads as acquire it at once, up to this.
const IDLE_KEPT: usize = 4;

/// One lock path and how to contend on it.
pub(crate) struct LockCore {
    pub client: Client,
    pub path: String,
    pub options: LockOptions,
    pub counters: Counters,
    idle: Mutex<Vec<Listening>>,
    /// Set by the first acquire to end: kits are kept from the second on, so that a lock
    /// made for one acquire (a writer per partition making a mutex per use) pays nothing for
    /// a kit no one will take.
    used: AtomicBool,
}

impl LockCore {
    pub fn new(client: &Client, path: &str, options: LockOptions) -> Result<LockCore> {
        paths::validate(path, false)?;
        if path == "/" {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "a lock needs a path of its own, not the root",
            });
        }
        Ok(LockCore {
            client: client.clone(),
            path: path.to_owned(),
            options,
            counters: Counters::default(),
            idle: Mutex::new(Vec::new()),
            used: AtomicBool::new(false),
        })
    }

    /// A subscription and a wake channel for an acquire: kept ones if the lock has some and
    /// the acquire does not watch the whole line (true in the third place if kept), else new.
    fn listening(
        &self,
        line_watched: bool,
    ) -> (
        Subscription,
        (Sender<WatchEvent>, Receiver<WatchEvent>),
        bool,
    ) {
        if !line_watched {
            while let Some(Listening { states, wake }) = self.idle.lock().pop() {
                if let Some(states) = states.resume() {
                    return (states, wake, true);
                }
            }
        }
        (self.client.subscribe(), unbounded(), false)
    }

    /// Keeps an acquire's subscription and wake channel for the next one, once its wait is
    /// over and its watches taken back (whatever events may still come into the channel, the
    /// next acquire drains: see `acquire_until_cancelled`). Not those of an acquire that
    /// watched the whole line: such acquires make their own, so kits they kept would serve
    /// only the lock's acquires that do not wait (a reviewer's finding). Nor those of a lock's
    /// first acquire (see `used`): the many-locks bench makes a mutex per acquisition, and
    /// parking a kit there only took the client's subscriber lock once more.
    fn keep_listening(
        &self,
        states: Subscription,
        wake: (Sender<WatchEvent>, Receiver<WatchEvent>),
        line_watched: bool,
    ) {
        if line_watched || !self.used.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_KEPT {
            if let Some(states) = states.park() {
                idle.push(Listening { states, wake });
            }
        }
    }

    /// The client, bounded by `deadline` if there is one.
    fn client_until(&self, deadline: Option<Instant>) -> Client {
        match deadline {
            Some(d) => self.client.with_deadline(d),
            None => self.client.clone(),
        }
    }

    /// Contends for the lock with a node named `lock_name` under `rule`. `Ok(None)` when the
    /// deadline passed, or at once when `wait` is false and the lock is busy. Whatever happens,
    /// no node of ours is left behind unless we return it in the lease.
    pub fn acquire(
        &self,
        lock_name: &str,
        rule: &dyn Rule,
        deadline: Option<Instant>,
        wait: bool,
    ) -> Result<Option<Lease>> {
        self.acquire_until_cancelled(Instant::now(), lock_name, rule, deadline, wait, None)
    }

    /// [`acquire`](Self::acquire) that also gives up (with `Ok(None)`) as soon as `cancel`
    /// (if any) fires or closes; the wait time counted runs from `since` (a recipe that began the
    /// caller's acquire earlier passes when). The wait loop behind every acquire.
    pub fn acquire_until_cancelled(
        &self,
        since: Instant,
        lock_name: &str,
        rule: &dyn Rule,
        deadline: Option<Instant>,
        wait: bool,
        cancel: Option<&Receiver<()>>,
    ) -> Result<Option<Lease>> {
        let _span = crate::trace::acquire(&self.path, self.client.session_id());
        let started = Instant::now();
        // A timed acquire always makes its attempt: the create and the look at the line that
        // comes with it get at least MIN_ATTEMPT, however near the deadline (so a zero timeout
        // takes a free lock, as Curator's does). Waiting in line ends at the deadline itself.
        let attempt_until = deadline.map(|d| d.max(started + MIN_ATTEMPT));
        let line_watched = wait && rule.watches_line();
        // Subscribed before anything is created, so no state change can slip past the wait.
        // The wake channel exists before any watch is set: a watch that fires at once finds
        // it, so the wake-up cannot be missed (the seed article's race). A rule that waits on
        // the whole line gets its watch with the listing that goes out with our create, on a
        // new channel (see the drain below).
        let (states, wake, kept) = self.listening(line_watched);
        let line_watch = line_watched.then_some(&wake.0);
        // The token of the wait: a break in the connection while we wait is no loss (we
        // re-check after it); only the hold's own token, made at grant time, may count one.
        let entered = self.enter_watching(lock_name, attempt_until, line_watch, false);
        if kept {
            // A kept channel may hold, or still be sent, wake-ups of the acquire that used it
            // last, for watches it had set and took back: one fired just before it was taken
            // back is sent by whoever read its notification, before that reader takes the next
            // frame. Our create's answer is a later frame, so by now every such event is in
            // the channel, and none of ours can be (no watch of ours is set yet: a kept
            // channel is never a line watch's).
            while wake.1.try_recv().is_ok() {}
        }
        let (mut node, token) = match entered {
            Ok(v) => v,
            Err(e) => {
                if line_watch.is_some() {
                    self.client.forget_watch(&self.path, &wake.0);
                }
                self.keep_listening(states, wake, line_watched);
                if matches!(e, Error::Timeout { .. }) {
                    self.counters.timed_out();
                    return Ok(None);
                }
                return Err(e);
            }
        };
        let turn = self.wait_for_turn(
            &mut node, rule, deadline, wait, &states, &token, cancel, &wake,
        );
        self.keep_listening(states, wake, line_watched);
        // Leaving the line is bounded by the caller's deadline; a cancellable acquire that has
        // none (a selector being closed) waits at most MIN_ATTEMPT for its node's removal:
        // whoever cancels is owed a prompt return, and the client's janitor finishes it.
        let leave_by = deadline.or_else(|| cancel.map(|_| Instant::now() + MIN_ATTEMPT));
        match turn {
            Ok(true) => {
                let Some(token) = self.hold_token(&node, token) else {
                    self.leave(&node, deadline);
                    self.counters.lost();
                    return Err(Error::SessionLost {
                        session_id: node.session,
                    });
                };
                self.counters.acquired(since.elapsed());
                debug!("{} acquired by {}", self.path, node.name);
                Ok(Some(self.lease(node, token)))
            }
            Ok(false) => {
                self.leave(&node, leave_by);
                self.counters.timed_out();
                Ok(None)
            }
            Err(e) => {
                self.leave(&node, leave_by);
                if matches!(e, Error::SessionLost { .. }) {
                    self.counters.lost();
                }
                Err(e)
            }
        }
    }

    /// Takes the lock without waiting for a turn, on the hold `on` (a downgrade: the write
    /// lock's holder takes the read lock beside its write). Sound only if `on` still holds
    /// once our node exists: the node must be made on `on`'s session (if that session was
    /// lost and the client is on a new one when the create goes, the write node is gone and a
    /// writer behind it may hold), and `on`'s node must still be there after the create (an
    /// operator may have deleted it, with the same effect). The check comes after the create
    /// on the same session, so the server has applied our create before it answers: if the
    /// write node is there then, every writer behind it will find our node in line once it
    /// goes. Otherwise our node is removed again and the hold's end reported (see
    /// `recipes/rwlock.md`).
    pub fn grant(
        &self,
        lock_name: &str,
        on: &Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let started = Instant::now();
        let (node, token) = match self.enter(lock_name, deadline) {
            Ok(entered) => entered,
            Err(Error::Timeout { .. }) => {
                self.counters.timed_out();
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if node.session != on.session_id() {
            self.leave(&node, deadline);
            return Err(Error::SessionLost {
                session_id: on.session_id(),
            });
        }
        let looked = self.still_holds(on, deadline);
        #[cfg(feature = "testing")]
        self.options.hooks.after_look(&node.path);
        match looked {
            // A suspension meanwhile may have cost the write hold (`lost_on_suspend`), and the
            // read's own token with it: no read is built on a hold already lost.
            Ok(true) if token.is_lost() || on.check_quietly().is_err() => {
                self.leave(&node, deadline);
                Err(self.hold_gone(on))
            }
            Ok(true) => {
                self.counters.acquired(started.elapsed());
                Ok(Some(self.lease(node, token)))
            }
            Ok(false) => {
                self.leave(&node, deadline);
                Err(self.hold_gone(on))
            }
            Err(e) => {
                self.leave(&node, deadline);
                match e {
                    Error::Timeout { .. } => {
                        self.counters.timed_out();
                        Ok(None)
                    }
                    e => Err(e),
                }
            }
        }
    }

    /// How a hold found unsound is reported: `SessionLost` if its session is, `NotHeld` if
    /// only its node is gone (deleted by someone else while the session lives).
    pub fn hold_gone(&self, lease: &Lease) -> Error {
        if lease.check_quietly().is_err() {
            Error::SessionLost {
                session_id: lease.session_id(),
            }
        } else {
            Error::NotHeld {
                node: lease.node_path().to_owned(),
            }
        }
    }

    /// Creates our node and a token for its session, to hold it at once (the token counts a
    /// suspension as a loss if the options say so).
    pub fn enter(
        &self,
        lock_name: &str,
        deadline: Option<Instant>,
    ) -> Result<(OwnNode, Arc<SessionToken>)> {
        self.enter_watching(lock_name, deadline, None, self.options.lost_on_suspend)
    }

    /// The token a hold is born with, made when the lock is granted: the wait's own token
    /// if it is the same kind, else a fresh one, which is lost at once if the connection is
    /// down now (and `lost_on_suspend` asks for that). `None` if the session is gone.
    fn hold_token(&self, node: &OwnNode, waited: Arc<SessionToken>) -> Option<Arc<SessionToken>> {
        if waited.is_lost() {
            return None;
        }
        if !self.options.lost_on_suspend {
            return Some(waited);
        }
        self.client.session_token(node.session, true)
    }

    /// [`enter`](Self::enter), the listing that comes with the create watched into
    /// `line_watch`; the token counts a suspension as a loss if `lost_on_suspend`.
    fn enter_watching(
        &self,
        lock_name: &str,
        deadline: Option<Instant>,
        line_watch: Option<&Sender<WatchEvent>>,
        lost_on_suspend: bool,
    ) -> Result<(OwnNode, Arc<SessionToken>)> {
        loop {
            let node = self.create_node(lock_name, deadline, line_watch)?;
            match self.client.session_token(node.session, lost_on_suspend) {
                Some(token) => return Ok((node, token)),
                // The session went between the create and now, and the node with it.
                None => self.leave(&node, deadline),
            }
        }
    }

    /// The lease for an acquired node.
    pub fn lease(&self, node: OwnNode, token: Arc<SessionToken>) -> Lease {
        let margin = self
            .options
            .lease_margin
            .unwrap_or_else(|| (self.client.session_timeout() / 10).max(Duration::from_millis(50)));
        Lease::new(self.client.clone(), node.path, token, margin)
    }

    /// Waits for a session and returns it, mapping a missed deadline to `Timeout`.
    fn wait_session(&self, deadline: Option<Instant>) -> Result<SessionId> {
        self.client
            .wait_session(deadline, format_args!("lock {}", self.path))
    }

    /// Creates our protected node. A create whose answer is lost is never repeated blindly:
    /// once connected again we look for the node by its id and adopt it, and only if it is not
    /// there create again. If the session changed meanwhile, whatever the create made belongs
    /// to no live holder of ours: it is deleted and we start over under the new session.
    pub fn create_node(
        &self,
        lock_name: &str,
        deadline: Option<Instant>,
        line_watch: Option<&Sender<WatchEvent>>,
    ) -> Result<OwnNode> {
        let policy = self.client.retry_policy();
        let started = Instant::now();
        let mut retries = 0u32;
        let mut made_parents = false;
        let mut session = self.wait_session(deadline)?;
        let mut marker = ProtectedId::next(session);
        loop {
            let node_prefix = marker.node_prefix(lock_name);
            #[cfg(feature = "testing")]
            self.options
                .hooks
                .before_create(|| paths::join(&self.path, &node_prefix));
            let created = self.client_until(deadline).create_protected(
                &self.path,
                &node_prefix,
                self.options.holder_id_text().as_bytes(),
                marker.as_str(),
                self.options.acl_for(&self.client),
                line_watch,
            );
            match created {
                Ok((path, s, line)) if s == session => {
                    let name = paths::node_name(&path).to_owned();
                    return Ok(OwnNode {
                        path,
                        name,
                        session,
                        line,
                        line_watched: line_watch.is_some(),
                    });
                }
                Ok((path, other, _)) => {
                    // Made under a session we did not start under: not ours to keep.
                    self.forget(&path, other, deadline);
                    session = self.wait_session(deadline)?;
                    marker = ProtectedId::next(session);
                }
                Err(Error::ConnectionLoss { .. }) => {
                    warn!(
                        "create of a node under {} lost its answer; looking for it",
                        self.path
                    );
                    let found = self
                        .wait_session(deadline)
                        .and_then(|now| Ok((now, self.adopt(&marker, session, now, deadline)?)));
                    let now = match found {
                        Ok((_, Some(node))) => return Ok(node),
                        Ok((now, None)) => {
                            if now == session {
                                // Not there by a synced look, yet it can still land later (a
                                // follower's held link to the leader delivers it: the
                                // janitor's notes). The janitor looks for it while the session
                                // lives; the next create takes a name of its own, so that the
                                // two never meet and each name goes out once.
                                self.client.remove_marked_later(
                                    &self.path,
                                    marker.as_str(),
                                    session,
                                    1,
                                );
                            }
                            now
                        }
                        Err(e) => {
                            // We give up without knowing whether the create landed: whatever it
                            // made is the janitor's to remove, under whichever session owns it.
                            self.client.remove_marked_later(
                                &self.path,
                                marker.as_str(),
                                self.client.session_id().unwrap_or(session),
                                1,
                            );
                            return Err(e);
                        }
                    };
                    session = now;
                    marker = ProtectedId::next(session);
                }
                Err(e) if e.is_no_node() => {
                    // First use of this path: make it (and its parents), then try again. That
                    // is not a retry; a path that keeps vanishing under us is, and is bounded.
                    if made_parents {
                        if policy.backoff(retries, started.elapsed()).is_none() {
                            return Err(e);
                        }
                        retries += 1;
                    }
                    self.client_until(deadline)
                        .ensure_lock_path(&self.path, self.options.acl_for(&self.client))?;
                    made_parents = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
            // The create goes again: a retry, bounded by the policy.
            match policy.backoff(retries, started.elapsed()) {
                Some(_) => {
                    retries += 1;
                    self.client.count_retry();
                }
                None => return Err(self.client.connection_loss()),
            }
        }
    }

    /// After a lost create answer: finds the node made with `marker`. If the session is still
    /// `session`, the first such node is ours; any other is removed. If the session changed,
    /// every such node is removed.
    fn adopt(
        &self,
        marker: &ProtectedId,
        session: SessionId,
        now: SessionId,
        deadline: Option<Instant>,
    ) -> Result<Option<OwnNode>> {
        // Read from the leader's view: a follower that lags behind the one that took our
        // create could otherwise hide our node, and we would queue behind ourselves.
        match self.client_until(deadline).sync(&self.path) {
            Ok(()) => {}
            Err(e) if e.is_no_node() => return Ok(None),
            Err(e) => return Err(e),
        }
        let children = match self.client_until(deadline).child_names(&self.path, None) {
            Ok(c) => c,
            Err(e) if e.is_no_node() => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut mine: Vec<Contender> = sort_contenders(children.iter())
            .into_iter()
            .filter(|c| c.name.contains(marker.as_str()))
            .collect();
        let adopted = if now == session && !mine.is_empty() {
            let first = mine.remove(0);
            debug!("adopted {} after a lost create answer", first.name);
            Some(OwnNode {
                path: paths::join(&self.path, first.name),
                name: first.name.to_owned(),
                session,
                line: None,
                line_watched: false,
            })
        } else {
            None
        };
        for extra in mine {
            self.forget(&paths::join(&self.path, extra.name), now, deadline);
        }
        Ok(adopted)
    }

    /// Deletes a node of ours, waiting at most until `deadline`; what cannot finish by then
    /// the janitor finishes while the session lives.
    fn forget(&self, path: &str, session: SessionId, deadline: Option<Instant>) {
        self.client_until(deadline).remove_own(path, session);
    }

    /// Removes our node (waiting or holding), now or through the janitor, never blocking past
    /// `deadline`.
    pub fn leave(&self, node: &OwnNode, deadline: Option<Instant>) {
        self.client.unwatch_hold(&node.path);
        self.forget(&node.path, node.session, deadline);
    }

    /// An error met while waiting, told truthfully: connection loss after the connection has
    /// been silent for a whole session timeout (or once the session is known gone) means the
    /// server has expired the session, and our node with it.
    pub fn while_waiting(&self, e: Error, token: &SessionToken) -> Error {
        let gone = token.is_lost()
            || self.client.session_id() != Some(token.session)
            || self.client.silent_too_long();
        match e {
            Error::ConnectionLoss { .. } if gone => Error::SessionLost {
                session_id: token.session,
            },
            e => e,
        }
    }

    /// Lists the line (unsorted: [`sort_contenders`] orders it), leaving a watch on it that
    /// reports into `tx` if given. A missing path is an empty line.
    pub fn line(
        &self,
        deadline: Option<Instant>,
        tx: Option<&Sender<WatchEvent>>,
    ) -> Result<Names> {
        match self.client_until(deadline).child_names(&self.path, tx) {
            Err(e) if e.is_no_node() => Ok(Names::default()),
            listed => listed,
        }
    }

    /// Lists the line, taking the listing the reader thread sent when our watch fired if
    /// there is one (it went out after the event, like a listing made now).
    fn line_after(
        &self,
        prefetch: Option<Arc<Prefetch>>,
        deadline: Option<Instant>,
    ) -> Result<Names> {
        let sent = prefetch.and_then(|p| {
            self.client_until(deadline)
                .prefetched_children(&p, &self.path)
        });
        match sent {
            Some(Err(e)) if e.is_no_node() => Ok(Names::default()),
            Some(listed) => listed,
            None => self.line(deadline, None),
        }
    }

    /// Waits until `rule` lets us go. `Ok(false)` on deadline, or at once if `wait` is false
    /// and we may not go.
    #[allow(clippy::too_many_arguments)]
    fn wait_for_turn(
        &self,
        node: &mut OwnNode,
        rule: &dyn Rule,
        deadline: Option<Instant>,
        wait: bool,
        states: &Subscription,
        token: &SessionToken,
        cancel: Option<&Receiver<()>>,
        (wake_tx, wake_rx): &(Sender<WatchEvent>, Receiver<WatchEvent>),
    ) -> Result<bool> {
        let mut watches = WatchGuard::new(&self.client, wake_tx);
        let watch_line = wait && rule.watches_line();
        if node.line_watched {
            watches.watching(&self.path);
        }
        // The listing that came with our create saves the first round trip (if the rule needs
        // the line watched, that listing must have set the watch). Used once: taken.
        let mut first = node.line.take().filter(|line| {
            (!watch_line || node.line_watched) && line.iter().any(|name| name == node.name)
        });
        // The listing the reader thread sends when the watch we wait on fires.
        let mut prefetch: Option<Arc<Prefetch>> = None;
        loop {
            let listed = if let Some(line) = first.take() {
                Ok(line)
            } else if watch_line {
                self.line(deadline, Some(wake_tx))
            } else {
                self.line_after(prefetch.take(), deadline)
            };
            let line = match listed {
                Ok(line) => line,
                Err(Error::Timeout { .. }) => return Ok(false),
                Err(e) => return Err(self.while_waiting(e, token)),
            };
            let contenders = sort_contenders(line.iter());
            if watch_line {
                watches.watching(&self.path);
            }
            let Some(ours) = contenders.iter().position(|c| c.name == node.name) else {
                warn!("{} is gone while waiting for {}", node.name, self.path);
                return Err(Error::SessionLost {
                    session_id: node.session,
                });
            };
            let (watched, sole_blocker) = match decide(rule, &contenders, ours) {
                Decision::Go => return Ok(true),
                _ if !wait => return Ok(false),
                Decision::WaitForChange => (None, false),
                Decision::Watch {
                    index,
                    sole_blocker,
                } => {
                    let watched = paths::join(&self.path, contenders[index].name);
                    let client = self.client_until(deadline);
                    let set = if sole_blocker && self.options.fast_handoff {
                        // Its deletion hands us the lock without another listing.
                        client.data_watch(&watched, wake_tx).map(|_| None)
                    } else {
                        client
                            .data_watch_then_list(&watched, wake_tx, &self.path)
                            .map(Some)
                    };
                    match set {
                        Ok(sent_on_fire) => {
                            prefetch = sent_on_fire;
                            watches.watching(&watched);
                        }
                        // Gone before the watch (which the server then did not set): look
                        // again.
                        Err(e) if e.is_no_node() => continue,
                        Err(Error::Timeout { .. }) => return Ok(false),
                        Err(e) => return Err(self.while_waiting(e, token)),
                    }
                    #[cfg(feature = "testing")]
                    self.options.hooks.after_watch_set(&watched);
                    (Some(watched), sole_blocker)
                }
            };
            let woke = loop {
                match self.wait(
                    wake_rx,
                    states,
                    token,
                    deadline,
                    cancel,
                    prefetch.as_deref(),
                )? {
                    // Wait for the verdict.
                    Woke::Suspended => continue,
                    woke => break woke,
                }
            };
            match woke {
                Woke::Event(e)
                    if e.kind == WatchKind::Deleted
                        && Some(&e.path) == watched.as_ref()
                        && sole_blocker
                        && self.options.fast_handoff
                        && !token.is_lost()
                        && self.client.session_id() == Some(token.session) =>
                {
                    // The only node ahead of us that mattered is gone: ours now, without
                    // another round trip.
                    return Ok(true);
                }
                Woke::Event(_) | Woke::Recheck | Woke::Suspended => {}
                Woke::Deadline | Woke::Cancelled => return Ok(false),
            }
        }
    }

    /// The one wait every recipe uses: until a watch fires into `wake`, the session changes,
    /// the deadline passes or `cancel` (if any) fires (or closes). The rules for a lost
    /// session live here: only the end of the session `token` belongs to counts (the
    /// subscription may still hold the end of an older one).
    ///
    /// A wait nobody can cancel reads the connection itself while no one else does (and
    /// until another thread of the client asks for the turn): the notification that ends it
    /// then wakes this thread only, not the I/O thread first (one thread hop less per
    /// handoff). Nothing it waits for can come while it reads without ending the read: a
    /// watch fires from a frame it reads; a state change comes with the connection's end (the
    /// socket is shut before the change is published) or before a new connection can be read
    /// (published during the handshake, before the connection is installed); the deadline
    /// bounds the read. A cancel channel could fire unseen, so a cancellable wait leaves the
    /// reading to others.
    ///
    /// `prefetch`: the listing the reader sends when the watched node goes. Once the wake-up
    /// is in, the read goes on until that listing's answer is in too (it is on its way), so
    /// the next look at the line finds it read and takes no turn of its own.
    pub fn wait(
        &self,
        wake: &Receiver<WatchEvent>,
        states: &Subscription,
        token: &SessionToken,
        deadline: Option<Instant>,
        cancel: Option<&Receiver<()>>,
        prefetch: Option<&Prefetch>,
    ) -> Result<Woke> {
        let timer = match deadline {
            Some(d) => after(d.saturating_duration_since(Instant::now())),
            None => never(),
        };
        let uncancellable = never();
        let cancel_rx = cancel.unwrap_or(&uncancellable);
        loop {
            if cancel.is_none() {
                let states = states.receiver();
                let listing_due = || prefetch.is_some_and(Prefetch::pending);
                self.client.read_until(
                    || !states.is_empty() || (!wake.is_empty() && !listing_due()),
                    || !wake.is_empty(),
                    deadline,
                );
            }
            select! {
                recv(wake) -> e => return Ok(e.map_or(Woke::Recheck, Woke::Event)),
                recv(states.receiver()) -> e => {
                    let Ok(e) = e else { return Err(Error::Closed) };
                    match e.state {
                        ConnectionState::Reconnected if e.session_id == token.session => {
                            return Ok(Woke::Recheck)
                        }
                        ConnectionState::Suspended if e.session_id == token.session => {
                            return Ok(Woke::Suspended)
                        }
                        ConnectionState::Lost if e.session_id == token.session => {
                            return Err(Error::SessionLost { session_id: token.session })
                        }
                        ConnectionState::Connected | ConnectionState::ConnectedReadOnly
                            if e.session_id != token.session =>
                        {
                            return Err(Error::SessionLost { session_id: token.session })
                        }
                        _ => {}
                    }
                },
                recv(timer) -> _ => return Ok(Woke::Deadline),
                recv(cancel_rx) -> _ => return Ok(Woke::Cancelled),
            }
        }
    }

    /// Ends a hold: deletes the node, waiting at most until `deadline` (what cannot finish by
    /// then the janitor finishes). Errs with `SessionLost` if the hold was not certainly valid
    /// up to now: lost, or past its lease (the loss may simply not have been heard of yet).
    pub fn release(&self, lease: &Lease, deadline: Option<Instant>) -> Result<()> {
        self.counters.released(lease.held_for());
        let held = lease.check_quietly().is_ok();
        self.client.unwatch_hold(&lease.node);
        self.forget(&lease.node, lease.session_id(), deadline);
        if held {
            Ok(())
        } else {
            self.counters.lost();
            Err(Error::SessionLost {
                session_id: lease.session_id(),
            })
        }
    }

    /// True if `lease` is still a hold something can build on: its session live, its lease
    /// valid, and its node still there and ours on the server (someone may have deleted it).
    pub fn still_holds(&self, lease: &Lease, deadline: Option<Instant>) -> Result<bool> {
        if lease.check_quietly().is_err() {
            return Ok(false);
        }
        Ok(self
            .client_until(deadline)
            .exists(lease.node_path())?
            .is_some_and(|stat| stat.ephemeral_owner == lease.session_id().0))
    }

    /// The data (holder id) of the first contender.
    pub fn current_holder(&self) -> Result<Option<String>> {
        let line = self.line(None, None)?;
        for c in sort_contenders(line.iter()) {
            match self.client.data(&paths::join(&self.path, c.name)) {
                Ok((data, _)) => return Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                Err(e) if e.is_no_node() => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Contender paths, in order; only those whose name contains `kind`, if given.
    pub fn participant_nodes(&self, kind: Option<&str>) -> Result<Vec<String>> {
        let line = self.line(None, None)?;
        Ok(sort_contenders(line.iter())
            .into_iter()
            .filter(|c| kind.is_none_or(|k| c.name.contains(k)))
            .map(|c| paths::join(&self.path, c.name))
            .collect())
    }
}

/// After a failed step of the line (listing, joining, taking the lock): waits for the next
/// state change, which is what most failures (connection loss) wait for, or for a backoff that
/// doubles with each failure in a row (20 ms up to 5 s) for those no event announces, ending
/// by `until` if given (a lease's bound). True when `stop` fired or closed.
pub(crate) fn pause(
    stop: &crossbeam_channel::Receiver<()>,
    states: &crate::Subscription,
    failures: &mut u32,
    until: Option<std::time::Instant>,
) -> bool {
    let mut backoff = std::time::Duration::from_millis(20)
        .saturating_mul(1 << (*failures).min(8))
        .min(std::time::Duration::from_secs(5));
    if let Some(until) = until {
        backoff = backoff.min(until.saturating_duration_since(std::time::Instant::now()));
    }
    *failures += 1;
    crossbeam_channel::select! {
        recv(stop) -> _ => true,
        recv(states.receiver()) -> _ => false,
        recv(crossbeam_channel::after(backoff)) -> _ => false,
    }
}
