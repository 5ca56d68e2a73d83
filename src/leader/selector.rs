//! `LeaderSelector`: takes the lock, runs the leader's work, lets go when the work returns.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::Mutex;

use super::Participant;
use crate::lock::core::{pause, LockCore, MaxLeases};
use crate::lock::{Lease, LockOptions};
use crate::{Client, Error, Result};

/// The same node name as `InterProcessMutex`, so the selector is that lock.
const LOCK_NAME: &str = "lock-";

type Work = Arc<dyn Fn(&LeadershipContext) + Send + Sync>;

/// How one term of leadership ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermOutcome {
    /// The work returned while leadership was certain throughout.
    Completed,
    /// The work was told to stop (session suspended or lost, lease check failed, or
    /// `interrupt_leadership`) and returned.
    Cancelled,
    /// The work panicked; leadership was released all the same.
    Failed(String),
}

/// What the leader's work gets: its lease on the lock, and the cancellation it must poll.
pub struct LeadershipContext {
    lease: Lease,
    interrupted: Arc<Interruption>,
}

/// How a term is told to stop: a flag to poll, and a channel that closes, to wait on.
struct Interruption {
    flag: AtomicBool,
    closer: Mutex<Option<Sender<()>>>,
    signal: Receiver<()>,
}

impl Interruption {
    fn new() -> Interruption {
        let (closer, signal) = crossbeam_channel::bounded(0);
        Interruption {
            flag: AtomicBool::new(false),
            closer: Mutex::new(Some(closer)),
            signal,
        }
    }

    fn interrupt(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.closer.lock().take();
    }
}

impl LeadershipContext {
    /// True once the work must stop: the session was suspended or lost, the lease may have
    /// expired, or leadership was interrupted. Poll it between steps of the work.
    pub fn is_cancelled(&self) -> bool {
        self.interrupted.flag.load(Ordering::SeqCst)
            || !self.lease.is_held()
            || self.lease.check().is_err()
    }

    /// A channel that closes when the session is suspended or lost (to `select!` on while the
    /// work waits for something else). Interruption is [`interrupted`](Self::interrupted); the
    /// lease check is seen by [`is_cancelled`](Self::is_cancelled).
    pub fn lost(&self) -> Receiver<()> {
        self.lease.lost()
    }

    /// A channel that closes when leadership is interrupted
    /// ([`LeaderSelector::interrupt_leadership`], [`LeaderSelector::close`]), to `select!` on
    /// beside [`lost`](Self::lost) while the work waits.
    pub fn interrupted(&self) -> Receiver<()> {
        self.interrupted.signal.clone()
    }

    /// The lock hold: `check()`, `run()`, `fencing_token()`, ...
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

struct Inner {
    core: LockCore,
    id: String,
    work: Work,
    requeue: bool,
    current: Mutex<Option<Arc<Interruption>>>,
    outcomes: Sender<TermOutcome>,
}

/// Leader election that runs your work: each participant waits for the lock (an
/// [`InterProcessMutex`](crate::InterProcessMutex) on `path`); the one that gets it runs the
/// work, and leadership lasts until the work returns. With
/// [`auto_requeue`](Self::auto_requeue) the participant then joins the line again, so the
/// leaders take turns in the order they asked.
///
/// On SUSPENDED or LOST the running work is told to stop through
/// [`LeadershipContext::is_cancelled`]; its term is then reported as
/// [`TermOutcome::Cancelled`].
///
/// ```no_run
/// use zk_recipes::{leader::LeaderSelector, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let selector = LeaderSelector::new(&client, "/jobs/nightly/selector", "host-a", |ctx| {
///     let token = ctx.lease().fencing_token().unwrap_or_default();
///     for _step in 0..10 {
///         if ctx.is_cancelled() {
///             return; // leadership is in doubt: stop at once
///         }
///         // ... one step of the job, written with `token` ...
///     }
/// })?;
/// selector.start()?;
/// let outcome = selector.outcomes().recv().expect("a term ends");
/// println!("{outcome:?}");
/// selector.close();
/// # Ok(()) }
/// ```
pub struct LeaderSelector {
    inner: Arc<Inner>,
    outcomes: Receiver<TermOutcome>,
    worker: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", &self.inner.core.path)
            .field("id", &self.inner.id)
            .finish()
    }
}

impl LeaderSelector {
    /// A selector on `path` for participant `id` running `work` while leading. Not requeued:
    /// one term, then it stays out (see [`auto_requeue`](Self::auto_requeue)).
    pub fn new(
        client: &Client,
        path: &str,
        id: &str,
        work: impl Fn(&LeadershipContext) + Send + Sync + 'static,
    ) -> Result<LeaderSelector> {
        let (outcomes_tx, outcomes) = unbounded();
        let options = LockOptions::new().holder_id(id).lost_on_suspend(true);
        Ok(LeaderSelector {
            inner: Arc::new(Inner {
                core: LockCore::new(client, path, options)?,
                id: id.to_owned(),
                work: Arc::new(work),
                requeue: false,
                current: Mutex::new(None),
                outcomes: outcomes_tx,
            }),
            outcomes,
            worker: Mutex::new(None),
        })
    }

    /// Join the line again after every term (before [`start`](Self::start)).
    pub fn auto_requeue(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.requeue = true;
        }
        self
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Joins the line. Returns at once.
    pub fn start(&self) -> Result<()> {
        let mut worker = self.worker.lock();
        if worker.is_some() {
            return Err(Error::IllegalState(
                "the selector was started already".into(),
            ));
        }
        let (stop_tx, stop_rx) = bounded(0);
        let inner = self.inner.clone();
        let handle = thread::Builder::new()
            .name("zk-leader-selector".into())
            .spawn(move || inner.run(&stop_rx))
            .map_err(|e| Error::IllegalState(format!("cannot start the selector thread: {e}")))?;
        *worker = Some((stop_tx, handle));
        Ok(())
    }

    /// How each term ended, in order.
    pub fn outcomes(&self) -> &Receiver<TermOutcome> {
        &self.outcomes
    }

    /// True while this participant's work runs as leader.
    pub fn has_leadership(&self) -> bool {
        self.inner.current.lock().is_some()
    }

    /// Tells the running work (if this participant leads) to stop.
    pub fn interrupt_leadership(&self) {
        if let Some(term) = self.inner.current.lock().as_ref() {
            term.interrupt();
        }
    }

    /// Everyone in line, leader first.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        super::participants(&self.inner.core)
    }

    /// Leaves the line: interrupts the running work, waits for it to return, releases the lock
    /// (waiting at most [`CLOSE_WAIT`](super::CLOSE_WAIT) for the server). Idempotent.
    pub fn close(&self) {
        self.interrupt_leadership();
        if let Some((stop, handle)) = self.worker.lock().take() {
            drop(stop);
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    fn run(&self, stop: &Receiver<()>) {
        let states = self.core.client.subscribe();
        let mut failures = 0;
        loop {
            let acquired = self.core.acquire_until_cancelled(
                Instant::now(),
                LOCK_NAME,
                &MaxLeases(1),
                None,
                true,
                Some(stop),
            );
            let lease = match acquired {
                Ok(Some(lease)) => lease,
                Ok(None) => return, // stopped while waiting
                Err(Error::Closed) => return,
                Err(e) => {
                    debug!("{} could not take {}: {e}", self.id, self.core.path);
                    if pause(stop, &states, &mut failures, None) {
                        return;
                    }
                    continue;
                }
            };
            failures = 0;
            let interrupted = Arc::new(Interruption::new());
            *self.current.lock() = Some(interrupted.clone());
            let ctx = LeadershipContext { lease, interrupted };
            debug!("{} leads at {}", self.id, self.core.path);
            let result = catch_unwind(AssertUnwindSafe(|| (self.work)(&ctx)));
            let outcome = match result {
                Err(panic) => TermOutcome::Failed(panic_text(&*panic)),
                Ok(()) if ctx.is_cancelled() => TermOutcome::Cancelled,
                Ok(()) => TermOutcome::Completed,
            };
            *self.current.lock() = None;
            if let Err(e) = self
                .core
                .release(&ctx.lease, Some(Instant::now() + super::CLOSE_WAIT))
            {
                debug!(
                    "{} released {} after losing it: {e}",
                    self.id, self.core.path
                );
            }
            if let TermOutcome::Failed(why) = &outcome {
                warn!("leader work of {} panicked: {why}", self.id);
            }
            let _ = self.outcomes.send(outcome);
            if !self.requeue || stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                return;
            }
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
