//! Several locks taken all-or-nothing, in one global order (Curator's
//! `InterProcessMultiLock`).

use std::time::{Duration, Instant};

use log::warn;

use super::MIN_ATTEMPT;
use super::{
    InterProcessMutex, InterProcessMutexGuard, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    Lease, RunError, SemaphoreLease,
};
use crate::{Client, Error, Result};

/// One lock of an [`InterProcessMultiLock`], by kind and path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockSpec {
    /// An [`InterProcessMutex`] at the path.
    Mutex(String),
    /// The read lock of an [`InterProcessReadWriteLock`] at the path.
    Read(String),
    /// The write lock of an [`InterProcessReadWriteLock`] at the path.
    Write(String),
    /// A lease of an [`InterProcessSemaphoreV2`] of `leases` at the path.
    Semaphore {
        /// The semaphore's path.
        path: String,
        /// Its number of leases.
        leases: usize,
    },
}

impl LockSpec {
    /// The lock's path.
    pub fn path(&self) -> &str {
        match self {
            LockSpec::Mutex(p) | LockSpec::Read(p) | LockSpec::Write(p) => p,
            LockSpec::Semaphore { path, .. } => path,
        }
    }
}

enum Member {
    Mutex(InterProcessMutex),
    ReadWrite(InterProcessReadWriteLock, bool),
    Semaphore(InterProcessSemaphoreV2),
}

impl Member {
    fn take(&self, deadline: Instant) -> Result<Option<Held<'_>>> {
        Ok(match self {
            Member::Mutex(m) => m.try_acquire_until(deadline)?.map(Held::Guard),
            Member::ReadWrite(rw, true) => rw
                .write_lock()
                .try_acquire_until(deadline)?
                .map(Held::Guard),
            Member::ReadWrite(rw, false) => {
                rw.read_lock().try_acquire_until(deadline)?.map(Held::Guard)
            }
            Member::Semaphore(s) => s.try_acquire_until(deadline)?.map(Held::Lease),
        })
    }
}

/// One hold of the set.
enum Held<'a> {
    Guard(InterProcessMutexGuard<'a>),
    Lease(SemaphoreLease),
}

impl Held<'_> {
    fn lease(&self) -> &Lease {
        match self {
            Held::Guard(g) => g,
            Held::Lease(l) => l,
        }
    }

    fn release_by(self, deadline: Option<Instant>) -> Result<()> {
        match self {
            Held::Guard(g) => g.release_by(deadline),
            Held::Lease(l) => l.release_by(deadline),
        }
    }
}

/// Several locks, of any of this crate's kinds, taken all-or-nothing: either every one is
/// held, or none is (what was taken is released again when one cannot be had by the deadline,
/// or fails; a set whose early hold was lost while a later one was taken, its session gone,
/// is given back and taken again). They are always taken in one global order, by path, whatever order they were
/// given in, so two multi-locks over the same paths never wait for each other in a cycle (no
/// deadlock). The guard holds the whole set: one check, one bound ([`valid_until`], the
/// earliest of the set's), one `run`, one release. Apache Curator's `InterProcessMultiLock`,
/// which takes the locks in the order given and gives each the whole timeout; here the
/// deadline is one for the set.
///
/// [`valid_until`]: MultiLockGuard::valid_until
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::lock::{InterProcessMultiLock, LockSpec};
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// // A transfer between two accounts, each guarded by its own lock.
/// let both = InterProcessMultiLock::with_locks(
///     &client,
///     vec![LockSpec::Mutex("/accounts/b".into()), LockSpec::Mutex("/accounts/a".into())],
/// )?;
/// if let Some(guard) = both.try_acquire_for(Duration::from_secs(5))? {
///     guard.run(|| { /* move the money */ }).expect("both locks held throughout");
///     guard.release()?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct InterProcessMultiLock {
    members: Vec<(LockSpec, Member)>,
}

impl std::fmt::Debug for InterProcessMultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMultiLock")
            .field(
                "locks",
                &self.members.iter().map(|(s, _)| s).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl InterProcessMultiLock {
    /// An [`InterProcessMutex`] on each of `paths` (Curator's constructor).
    pub fn new(client: &Client, paths: &[&str]) -> Result<InterProcessMultiLock> {
        let specs = paths
            .iter()
            .map(|p| LockSpec::Mutex((*p).to_owned()))
            .collect();
        InterProcessMultiLock::with_locks(client, specs)
    }

    /// The locks of `specs`, taken in order of their paths.
    ///
    /// # Errors
    /// `BadArguments` for an empty set, or two locks at one path (a set that would wait for
    /// itself); an invalid path as its lock's constructor reports it.
    pub fn with_locks(client: &Client, mut specs: Vec<LockSpec>) -> Result<InterProcessMultiLock> {
        if specs.is_empty() {
            return Err(Error::BadArguments(
                "a multi-lock needs at least one lock".into(),
            ));
        }
        specs.sort_by(|a, b| a.path().cmp(b.path()));
        if let Some(pair) = specs.windows(2).find(|w| w[0].path() == w[1].path()) {
            return Err(Error::BadArguments(format!(
                "two locks of a multi-lock at {}",
                pair[0].path()
            )));
        }
        let members = specs
            .into_iter()
            .map(|spec| {
                let member = match &spec {
                    LockSpec::Mutex(p) => Member::Mutex(InterProcessMutex::new(client, p)?),
                    LockSpec::Read(p) => {
                        Member::ReadWrite(InterProcessReadWriteLock::new(client, p)?, false)
                    }
                    LockSpec::Write(p) => {
                        Member::ReadWrite(InterProcessReadWriteLock::new(client, p)?, true)
                    }
                    LockSpec::Semaphore { path, leases } => {
                        Member::Semaphore(InterProcessSemaphoreV2::new(client, path, *leases)?)
                    }
                };
                Ok((spec, member))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(InterProcessMultiLock { members })
    }

    /// The locks, in the order they are taken.
    pub fn locks(&self) -> impl Iterator<Item = &LockSpec> {
        self.members.iter().map(|(s, _)| s)
    }

    /// Takes every lock, waiting as long as it takes.
    pub fn acquire(&self) -> Result<MultiLockGuard<'_>> {
        loop {
            // A deadline far enough away to be none (Instant has no "never").
            let far = Instant::now() + Duration::from_secs(60 * 60 * 24 * 365);
            if let Some(guard) = self.try_acquire_until(far)? {
                return Ok(guard);
            }
        }
    }

    /// Takes every lock within `timeout` (one deadline for the set), or none.
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<MultiLockGuard<'_>>> {
        self.try_acquire_until(Instant::now() + timeout)
    }

    /// Takes every lock by `deadline`, or none: `Ok(None)` (and whatever was taken released
    /// again) when one could not be had by then.
    ///
    /// # Errors
    /// The first error of a lock's acquire; what was taken is released again first.
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<MultiLockGuard<'_>>> {
        loop {
            let mut held = Vec::with_capacity(self.members.len());
            for (_, member) in &self.members {
                match member.take(deadline) {
                    Ok(Some(h)) => held.push(h),
                    outcome => {
                        // Logged there; what the caller hears is why the set was not taken.
                        // Given back within the caller's deadline (the janitor finishes).
                        let by = deadline.max(Instant::now() + MIN_ATTEMPT);
                        let _ = release_all(held, Some(by));
                        return outcome.map(|_| None);
                    }
                }
            }
            let guard = MultiLockGuard { held };
            // A hold taken early may have been lost while a later one was taken (its session
            // expired, and the later one granted on the next): such a set was never held as a
            // whole. Given back, and taken again while the deadline allows.
            if guard.whole() {
                return Ok(Some(guard));
            }
            let _ = guard.release_by(Some(deadline.max(Instant::now() + MIN_ATTEMPT)));
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }
}

/// Releases `held` last-taken first, each waiting at most until `deadline` for the server;
/// the first error, after trying them all.
fn release_all(mut held: Vec<Held<'_>>, deadline: Option<Instant>) -> Result<()> {
    let mut first = Ok(());
    while let Some(h) = held.pop() {
        let path = h.lease().node_path().to_owned();
        if let Err(e) = h.release_by(deadline) {
            warn!("releasing {path}: {e}");
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Proof of holding every lock of an [`InterProcessMultiLock`]; releases them all on drop
/// (the last taken first). Not `Send`, as the mutexes' guards are not.
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiLockGuard<'a> {
    held: Vec<Held<'a>>,
}

impl std::fmt::Debug for MultiLockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.leases()).finish()
    }
}

impl MultiLockGuard<'_> {
    /// The hold of each lock, in the order they were taken.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.held.iter().map(Held::lease)
    }

    /// Every hold valid now, all under one session.
    fn whole(&self) -> bool {
        let mut sessions = self.leases().map(Lease::session_id);
        let first = sessions.next();
        sessions.all(|s| Some(s) == first) && self.leases().all(|l| l.check_quietly().is_ok())
    }

    /// False once any hold of the set is lost.
    pub fn is_held(&self) -> bool {
        self.leases().all(Lease::is_held)
    }

    /// Until when every hold of the set is certainly valid: the earliest of their bounds.
    /// `None` once any is gone.
    pub fn valid_until(&self) -> Option<Instant> {
        self.leases()
            .map(Lease::valid_until)
            .try_fold(None::<Instant>, |min, v| {
                v.map(|v| Some(min.map_or(v, |m| m.min(v))))
            })
            .flatten()
    }

    /// Errs once any hold of the set can no longer be trusted (see [`Lease::check`]).
    pub fn check(&self) -> Result<()> {
        self.leases().try_for_each(Lease::check)
    }

    /// Runs `work` if every hold is valid, and returns its result only if every hold is still
    /// valid after it (see [`Lease::run`]).
    pub fn run<T>(&self, work: impl FnOnce() -> T) -> std::result::Result<T, RunError<T>> {
        super::lease::run_checked(|| self.check(), work)
    }

    /// Each hold's fencing token with its lock node, in the order taken: give each to the
    /// resource its lock protects.
    pub fn fencing_tokens(&self) -> Result<Vec<(String, i64)>> {
        self.leases()
            .map(|l| Ok((l.node_path().to_owned(), l.fencing_token()?)))
            .collect()
    }

    /// Releases every lock now (the last taken first) and reports how the holds ended: the
    /// first error (`SessionLost` for a hold not certainly valid up to now); every lock is
    /// released either way.
    pub fn release(self) -> Result<()> {
        self.release_by(None)
    }

    fn release_by(mut self, deadline: Option<Instant>) -> Result<()> {
        release_all(std::mem::take(&mut self.held), deadline)
    }
}

impl Drop for MultiLockGuard<'_> {
    fn drop(&mut self) {
        let _ = release_all(std::mem::take(&mut self.held), None);
    }
}
