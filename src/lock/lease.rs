//! What every lock guard knows about the hold under it: its node, its session, whether it is
//! still held, until when it is certainly valid, and its fencing token.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::token::SessionToken;
use crate::{Client, Error, Result, SessionId};

/// A hold on a lock node under one session. Every guard dereferences to its `Lease`.
pub struct Lease {
    pub(crate) client: Client,
    pub(crate) node: String,
    pub(crate) token: Arc<SessionToken>,
    pub(crate) margin: Duration,
    pub(crate) acquired_at: Instant,
    fencing: OnceLock<i64>,
    /// The node watch is set (see `watch_node`).
    watching: AtomicBool,
    /// A check found the hold gone and counted it (once per hold).
    counted_lost: AtomicBool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("node", &self.node)
            .field("session", &self.token.session)
            .field("held", &self.is_held())
            .finish()
    }
}

/// Why [`Lease::run`] did not return the work's result as valid.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError<T> {
    /// The lease was already invalid; the work did not run.
    NotRun(Error),
    /// The work ran, but the lease may have expired before it finished: undo what it did if
    /// that matters. Its output is here.
    Expired {
        /// What the work returned.
        output: T,
        /// Why the lease is no longer certain.
        error: Error,
    },
}

impl<T: fmt::Debug> fmt::Display for RunError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::NotRun(e) => write!(f, "work not run: {e}"),
            RunError::Expired { error, .. } => {
                write!(
                    f,
                    "work ran but the lock may have expired meanwhile: {error}"
                )
            }
        }
    }
}

impl<T: fmt::Debug> std::error::Error for RunError<T> {}

impl Lease {
    pub(crate) fn new(
        client: Client,
        node: String,
        token: Arc<SessionToken>,
        margin: Duration,
    ) -> Lease {
        Lease {
            client,
            node,
            token,
            margin,
            acquired_at: Instant::now(),
            fencing: OnceLock::new(),
            watching: AtomicBool::new(false),
            counted_lost: AtomicBool::new(false),
        }
    }

    /// From the first look at the hold on, a watch on its node turns a deletion by anyone
    /// (an operator, a revocation tool) into the loss of the hold. Set lazily: a hold nobody
    /// looks at costs no request for it, and the watch is set without waiting for its answer.
    fn watch_node(&self) {
        if !self.watching.swap(true, Ordering::Relaxed) {
            self.client.watch_hold(&self.node, &self.token);
        }
    }

    /// [`is_held`](Self::is_held) without setting the node watch (release and re-entry use
    /// it; they read the node themselves or are about to delete it).
    pub(crate) fn held_quietly(&self) -> bool {
        !self.token.is_lost() && self.client.session_id() == Some(self.token.session)
    }

    /// [`check`](Self::check) without setting the node watch.
    pub(crate) fn check_quietly(&self) -> Result<()> {
        let until = if self.held_quietly() {
            self.client
                .session_valid_until()
                .and_then(|v| v.checked_sub(self.margin))
        } else {
            None
        };
        match until {
            Some(until) if Instant::now() < until => Ok(()),
            _ => Err(Error::SessionLost {
                session_id: self.token.session,
            }),
        }
    }

    /// The path of the lock node this hold owns.
    pub fn node_path(&self) -> &str {
        &self.node
    }

    /// The session the hold belongs to.
    pub fn session_id(&self) -> SessionId {
        self.token.session
    }

    /// False once the session is lost (or, with `lost_on_suspend`, suspended), or the node was
    /// deleted by someone else: from then on another process may hold the lock. This follows
    /// delivered events; for a check that does not depend on them see [`check`](Self::check).
    pub fn is_held(&self) -> bool {
        self.watch_node();
        self.held_quietly()
    }

    /// A channel that closes when the hold is lost (a receive then returns at once with an
    /// error), for `select!` next to the work's own channels. It follows delivered events: a
    /// silent connection closes it only when the client declares the session suspended or
    /// lost, which may be after [`valid_until`](Self::valid_until). Work that waits should also
    /// wake at `valid_until` (`crossbeam_channel::at(...)` in the same `select!`) and
    /// [`check`](Self::check) again.
    pub fn lost(&self) -> Receiver<()> {
        self.watch_node();
        self.token.signal()
    }

    /// Until when the hold is certainly valid: the instant before which the server cannot have
    /// expired the session, less a safety margin for clock drift and scheduling. `None` when
    /// the session is gone.
    pub fn valid_until(&self) -> Option<Instant> {
        self.watch_node();
        if !self.held_quietly() {
            return None;
        }
        self.client
            .session_valid_until()
            .and_then(|v| v.checked_sub(self.margin))
    }

    /// Errs once the hold can no longer be trusted: past [`valid_until`](Self::valid_until), or
    /// lost. Needs no event to have been delivered: a silent connection stops
    /// `valid_until` from advancing, so this errs even before the client notices anything.
    pub fn check(&self) -> Result<()> {
        self.watch_node();
        let checked = self.check_quietly();
        if checked.is_err() && !self.counted_lost.swap(true, Ordering::Relaxed) {
            self.client.count_lease_check_failure();
        }
        checked
    }

    /// Runs `work` if the hold is valid, and returns its result only if the hold is still
    /// valid after it. When the check after fails, the result comes back in
    /// [`RunError::Expired`], so the caller can undo what the work did.
    pub fn run<T>(&self, work: impl FnOnce() -> T) -> std::result::Result<T, RunError<T>> {
        run_checked(|| self.check(), work)
    }

    /// A number that grows with every new holder of this lock, across the ensemble: the
    /// creation zxid of the lock node (a downgraded read hold keeps its write hold's, so a
    /// writer queued behind it still shows a larger one). Give it to the resource you protect (see
    /// [`FencingGate`](super::FencingGate)) so that it can refuse a holder that was paused past
    /// its lease. Read from the server on first use, then cached.
    pub fn fencing_token(&self) -> Result<i64> {
        if let Some(t) = self.fencing.get() {
            return Ok(*t);
        }
        match self.client.exists(&self.node)? {
            Some(stat) if stat.ephemeral_owner == self.token.session.0 => {
                Ok(*self.fencing.get_or_init(|| stat.czxid))
            }
            _ => Err(Error::SessionLost {
                session_id: self.token.session,
            }),
        }
    }

    /// Takes `token` as this hold's fencing token (a downgraded hold keeps its write's).
    pub(crate) fn inherit_token(&self, token: i64) {
        let _ = self.fencing.set(token);
    }

    /// Writes to ZooKeeper that the server applies only while this hold's node exists: each
    /// goes out as one transaction with a check of the node, so a hold that is over (session
    /// expired, node deleted) cannot write, whatever this process believes.
    pub fn while_held(&self) -> super::WhileHeld<'_> {
        super::WhileHeld::for_node(&self.client, &self.node)
    }

    /// How long the hold has lasted.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }
}

/// Runs `work` if `check` passes, and returns its result only if `check` still passes after
/// it (the rule of [`Lease::run`], for one hold or a set of them).
pub(crate) fn run_checked<T>(
    check: impl Fn() -> Result<()>,
    work: impl FnOnce() -> T,
) -> std::result::Result<T, RunError<T>> {
    check().map_err(RunError::NotRun)?;
    let output = work();
    match check() {
        Ok(()) => Ok(output),
        Err(error) => Err(RunError::Expired { output, error }),
    }
}
