//! `InterProcessSemaphoreV2` (N leases) and `InterProcessSemaphoreMutex` (one lease, not
//! reentrant), built the way Curator builds them.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::warn;

use super::core::{CountLeases, LockCore};
use super::lease::Lease;
use super::metrics::LockMetrics;
use super::mutex::InterProcessMutex;
use super::LockOptions;
use crate::{paths, Client, Error, Result};

const LEASE_NAME: &str = "lease-";

struct Inner {
    /// Lease nodes live here.
    leases: LockCore,
    /// Serialises lease creation, so only one waiter at a time watches the lease count.
    lock: InterProcessMutex,
    max_leases: usize,
}

/// A counting semaphore across processes: at most `max_leases` holders at once.
///
/// Layout (as Curator's): an internal [`InterProcessMutex`] at `<path>/locks` and lease nodes
/// `<path>/leases/_c_<id>-lease-<seq>`. A contender takes the internal mutex, creates its lease
/// node, and holds the lease once the number of lease nodes is within the maximum; then it lets
/// the internal mutex go. While it waits it is the only waiter watching the leases (the others
/// wait for the internal mutex, each on its predecessor), so no release wakes a herd.
///
/// ```no_run
/// use zk_recipes::{lock::InterProcessSemaphoreV2, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let uploads = InterProcessSemaphoreV2::new(&client, "/limits/uploads", 4)?;
/// let lease = uploads.acquire()?; // one of at most 4, across all processes
/// std::thread::spawn(move || {
///     // leases may be released from any thread
///     lease.release().ok();
/// });
/// # Ok(()) }
/// ```
///
#[doc = include_str!("../../recipes/semaphore.md")]
#[derive(Clone)]
pub struct InterProcessSemaphoreV2 {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for InterProcessSemaphoreV2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphoreV2")
            .field("leases", &self.inner.leases.path)
            .field("max_leases", &self.inner.max_leases)
            .finish()
    }
}

/// One lease of a semaphore; released on drop. `Send`: it may be released from any thread.
/// Dereferences to the [`Lease`].
#[must_use = "the lease is released as soon as it is dropped"]
pub struct SemaphoreLease {
    inner: Arc<Inner>,
    lease: Lease,
    released: bool,
}

impl InterProcessSemaphoreV2 {
    /// A semaphore on `path` with `max_leases` leases.
    pub fn new(client: &Client, path: &str, max_leases: usize) -> Result<InterProcessSemaphoreV2> {
        InterProcessSemaphoreV2::with_options(client, path, max_leases, LockOptions::default())
    }

    /// A semaphore on `path` with `max_leases` leases and `options`.
    pub fn with_options(
        client: &Client,
        path: &str,
        max_leases: usize,
        options: LockOptions,
    ) -> Result<InterProcessSemaphoreV2> {
        if max_leases == 0 {
            return Err(Error::BadArguments(
                "a semaphore needs at least one lease".into(),
            ));
        }
        paths::validate(path, false)?;
        let leases = LockCore::new(client, &paths::join(path, "leases"), options.clone())?;
        let lock = InterProcessMutex::with_options(client, &paths::join(path, "locks"), options)?;
        Ok(InterProcessSemaphoreV2 {
            inner: Arc::new(Inner {
                leases,
                lock,
                max_leases,
            }),
        })
    }

    /// Waits as long as it takes for a lease.
    pub fn acquire(&self) -> Result<SemaphoreLease> {
        self.take(None, true)?
            .ok_or_else(|| Error::IllegalState("an unbounded acquire gave up".into()))
    }

    /// Waits at most `timeout` for a lease.
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<SemaphoreLease>> {
        self.take(Some(Instant::now() + timeout), true)
    }

    /// Waits until `deadline` at the latest for a lease.
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<SemaphoreLease>> {
        self.take(Some(deadline), true)
    }

    /// Takes a lease only if one is free now.
    pub fn try_acquire(&self) -> Result<Option<SemaphoreLease>> {
        self.take(None, false)
    }

    fn take(&self, deadline: Option<Instant>, wait: bool) -> Result<Option<SemaphoreLease>> {
        let inner = &self.inner;
        let started = Instant::now();
        // One acquire for the caller, on the semaphore's path: the internal mutex's and the
        // lease's open none of their own inside it.
        let _span = crate::trace::acquire(
            paths::parent(&inner.leases.path).unwrap_or(&inner.leases.path),
            inner.leases.client.session_id(),
        );
        let internal = match (deadline, wait) {
            (_, false) => inner.lock.try_acquire()?,
            (Some(d), true) => inner.lock.try_acquire_until(d)?,
            (None, true) => Some(inner.lock.acquire()?),
        };
        let Some(internal) = internal else {
            inner.leases.counters.timed_out();
            return Ok(None);
        };
        // Holding the internal mutex, we are the only one waiting on the lease count.
        // Its wait counted from the call: the time in line for the internal mutex included.
        let acquired = inner.leases.acquire_until_cancelled(
            started,
            LEASE_NAME,
            &CountLeases(inner.max_leases),
            deadline,
            wait,
            None,
        );
        // Let go of the internal mutex within the caller's deadline.
        if let Err(e) = internal.release_by(deadline) {
            warn!("releasing the internal mutex of {}: {e}", inner.leases.path);
        }
        Ok(acquired?.map(|lease| SemaphoreLease {
            inner: self.inner.clone(),
            lease,
            released: false,
        }))
    }

    /// The lease nodes, in order.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.leases.participant_nodes(None)
    }

    /// The largest number of leases held at once.
    pub fn max_leases(&self) -> usize {
        self.inner.max_leases
    }

    /// This semaphore's figures since it was created.
    pub fn metrics(&self) -> LockMetrics {
        self.inner.leases.counters.snapshot()
    }
}

impl SemaphoreLease {
    /// Releases the lease now and reports how it ended.
    pub fn release(self) -> Result<()> {
        self.release_by(None)
    }

    /// [`release`](Self::release), waiting at most until `deadline` for the node's deletion
    /// (the janitor finishes what cannot be done by then).
    pub(crate) fn release_by(mut self, deadline: Option<Instant>) -> Result<()> {
        self.released = true;
        self.inner.leases.release(&self.lease, deadline)
    }
}

impl Deref for SemaphoreLease {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for SemaphoreLease {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.inner.leases.release(&self.lease, None) {
                warn!("releasing {}: {e}", self.lease.node_path());
            }
        }
    }
}

impl std::fmt::Debug for SemaphoreLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreLease")
            .field("lease", &self.lease)
            .finish()
    }
}

/// A mutex that is not reentrant: a semaphore with one lease. The same thread acquiring twice
/// waits for itself (and times out); the lease may be released from any thread.
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::{lock::InterProcessSemaphoreMutex, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let writer = InterProcessSemaphoreMutex::new(&client, "/partitions/7/writer")?;
/// let lease = writer.acquire()?;
/// assert!(writer.try_acquire_for(Duration::from_millis(100))?.is_none()); // not reentrant
/// drop(lease);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InterProcessSemaphoreMutex {
    semaphore: InterProcessSemaphoreV2,
}

impl InterProcessSemaphoreMutex {
    /// A non-reentrant mutex on `path`.
    pub fn new(client: &Client, path: &str) -> Result<InterProcessSemaphoreMutex> {
        InterProcessSemaphoreMutex::with_options(client, path, LockOptions::default())
    }

    /// A non-reentrant mutex on `path` with `options`.
    pub fn with_options(
        client: &Client,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessSemaphoreMutex> {
        Ok(InterProcessSemaphoreMutex {
            semaphore: InterProcessSemaphoreV2::with_options(client, path, 1, options)?,
        })
    }

    /// Waits as long as it takes.
    pub fn acquire(&self) -> Result<SemaphoreLease> {
        self.semaphore.acquire()
    }

    /// Waits at most `timeout`.
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<SemaphoreLease>> {
        self.semaphore.try_acquire_for(timeout)
    }

    /// Waits until `deadline` at the latest.
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<SemaphoreLease>> {
        self.semaphore.try_acquire_until(deadline)
    }

    /// Takes it only if free now.
    pub fn try_acquire(&self) -> Result<Option<SemaphoreLease>> {
        self.semaphore.try_acquire()
    }

    /// The lease node of the holder, if any.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.semaphore.participant_nodes()
    }

    /// This lock's figures since it was created.
    pub fn metrics(&self) -> LockMetrics {
        self.semaphore.metrics()
    }
}
