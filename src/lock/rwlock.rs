//! `InterProcessReadWriteLock`: shared readers, exclusive writers, on the lock core.

use std::sync::Arc;

use super::mutex::InterProcessMutex;
use super::LockOptions;
use crate::{Client, Result};

/// A read/write lock across processes: any number of readers at once, or one writer.
///
/// Both sides are [`InterProcessMutex`]es on the same path (same API: `acquire`,
/// `try_acquire_for`, guards, reentrancy per thread, participant nodes, lost signal, lease
/// check, fencing token), with Curator's node names, so a Java Curator lock on the same path
/// takes part in the same line.
///
/// - A writer goes when it is first.
/// - A reader goes when no writer stands ahead of it, and otherwise watches the nearest writer
///   ahead. Readers share; a reader that comes after a waiting writer waits, so writers do not
///   starve.
/// - Downgrade: `write_guard.downgrade()` turns the write hold into a read hold without letting
///   go in between; a writer that queued meanwhile waits for that read too. (Curator's way works
///   as well: the thread that holds the write lock takes the read lock at once, then releases
///   the write lock.) Another thread gets no such bypass, and a write hold that is no longer
///   sound (its session lost, its node gone) gives no read at all.
/// - Upgrade (hold the read lock, ask for the write lock) would wait for itself for ever, so it
///   is refused at once with [`Error::LockUpgrade`](crate::Error::LockUpgrade).
///
/// ```no_run
/// use zk_recipes::{lock::InterProcessReadWriteLock, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let config = InterProcessReadWriteLock::new(&client, "/locks/config")?;
/// {
///     let _read = config.read_lock().acquire()?; // shared with other readers
/// }
/// let write = config.write_lock().acquire()?; // alone
/// let read = write.downgrade()?; // still reading; writers wait for this read
/// read.release()?;
/// # Ok(()) }
/// ```
///
#[doc = include_str!("../../recipes/rwlock.md")]
pub struct InterProcessReadWriteLock {
    read: Arc<InterProcessMutex>,
    write: InterProcessMutex,
}

impl std::fmt::Debug for InterProcessReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessReadWriteLock")
            .field("path", &self.read.path())
            .finish()
    }
}

impl InterProcessReadWriteLock {
    /// A read/write lock on `path` with default [`LockOptions`].
    pub fn new(client: &Client, path: &str) -> Result<InterProcessReadWriteLock> {
        InterProcessReadWriteLock::with_options(client, path, LockOptions::default())
    }

    /// A read/write lock on `path` with `options` (for both sides).
    pub fn with_options(
        client: &Client,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessReadWriteLock> {
        let (read, write) = InterProcessMutex::read_write(client, path, options)?;
        Ok(InterProcessReadWriteLock { read, write })
    }

    /// The shared side.
    pub fn read_lock(&self) -> &InterProcessMutex {
        &self.read
    }

    /// The exclusive side.
    pub fn write_lock(&self) -> &InterProcessMutex {
        &self.write
    }
}
