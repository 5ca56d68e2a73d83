//! `InterProcessMutex`: a reentrant mutex across processes.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use log::warn;
use parking_lot::Mutex;

use super::core::{LockCore, MaxLeases, ReaderRule, Rule, WriterRule};
use super::lease::Lease;
use super::metrics::LockMetrics;
use super::names::{sequence_of, READ_NAME, WRITE_NAME};
use super::revocation::{Listener, RevocationWatch};
use super::LockOptions;
use crate::{paths, Client, Error, Result};

const LOCK_NAME: &str = "lock-";

struct Hold {
    count: usize,
    lease: Arc<Lease>,
    _revocation: Option<RevocationWatch>,
}

/// This process's holds of one lock, by thread.
type Holds = Arc<Mutex<HashMap<ThreadId, Hold>>>;

/// What a mutex is: a plain one, or one side of a read/write lock (which knows the other
/// side's holds, for downgrade and for refusing an upgrade).
enum Role {
    Plain,
    Reader { writer: Holds },
    Writer { reader: Holds },
}

/// A mutex shared by every process that uses the same ZooKeeper path: one holder at a time, in
/// the order they asked. Reentrant: the thread that holds it may acquire it again, and the lock
/// is released when every guard of that thread is gone.
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::{lock::InterProcessMutex, Client};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let mutex = InterProcessMutex::new(&client, "/locks/nightly-report")?;
/// if let Some(guard) = mutex.try_acquire_for(Duration::from_secs(5))? {
///     let token = guard.fencing_token()?; // hand this to what you write to
///     guard.run(|| println!("only one process runs this, token {token}"))
///         .expect("the lock stayed valid throughout");
/// } // released here
/// # Ok(()) }
/// ```
///
#[doc = include_str!("../../recipes/mutex.md")]
pub struct InterProcessMutex {
    core: LockCore,
    lock_name: &'static str,
    rule: Box<dyn Rule + Send + Sync>,
    role: Role,
    holds: Holds,
    revocation: Mutex<Option<Listener>>,
}

impl std::fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutex")
            .field("path", &self.core.path)
            .finish()
    }
}

/// Proof of holding an [`InterProcessMutex`]; releases on drop. Dereferences to the [`Lease`]
/// (`is_held`, `check`, `run`, `fencing_token`, ...). Not `Send`: the thread that acquired is
/// the one that holds.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct InterProcessMutexGuard<'a> {
    mutex: &'a InterProcessMutex,
    lease: Arc<Lease>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl InterProcessMutex {
    /// A mutex on `path` (created on first use) with default [`LockOptions`].
    pub fn new(client: &Client, path: &str) -> Result<InterProcessMutex> {
        InterProcessMutex::with_options(client, path, LockOptions::default())
    }

    /// A mutex on `path` with `options`.
    pub fn with_options(
        client: &Client,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessMutex> {
        Ok(InterProcessMutex {
            core: LockCore::new(client, path, options)?,
            lock_name: LOCK_NAME,
            rule: Box::new(MaxLeases(1)),
            role: Role::Plain,
            holds: Holds::default(),
            revocation: Mutex::new(None),
        })
    }

    /// The read and the write side of a read/write lock on `path`.
    pub(crate) fn read_write(
        client: &Client,
        path: &str,
        options: LockOptions,
    ) -> Result<(InterProcessMutex, InterProcessMutex)> {
        let (read_holds, write_holds) = (Holds::default(), Holds::default());
        let read = InterProcessMutex {
            core: LockCore::new(client, path, options.clone())?,
            lock_name: READ_NAME,
            rule: Box::new(ReaderRule),
            role: Role::Reader {
                writer: write_holds.clone(),
            },
            holds: read_holds.clone(),
            revocation: Mutex::new(None),
        };
        let write = InterProcessMutex {
            core: LockCore::new(client, path, options)?,
            lock_name: WRITE_NAME,
            rule: Box::new(WriterRule),
            role: Role::Writer { reader: read_holds },
            holds: write_holds,
            revocation: Mutex::new(None),
        };
        Ok((read, write))
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.core.path
    }

    /// Waits as long as it takes for the lock.
    ///
    /// # Errors
    /// `SessionLost` if the session is lost while waiting; `ConnectionLoss` if no connection
    /// comes back within the connection timeout; `Closed`. No node of ours is left behind.
    pub fn acquire(&self) -> Result<InterProcessMutexGuard<'_>> {
        self.lock(None, true)?
            .ok_or_else(|| Error::IllegalState("an unbounded acquire gave up".into()))
    }

    /// Waits at most `timeout`; `Ok(None)` if the lock was not had by then (our node is gone
    /// again, and our place in line with it).
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<InterProcessMutexGuard<'_>>> {
        self.lock(Some(Instant::now() + timeout), true)
    }

    /// Takes the lock only if nobody holds or waits for it (no waiting).
    pub fn try_acquire(&self) -> Result<Option<InterProcessMutexGuard<'_>>> {
        self.lock(None, false)
    }

    fn lock(
        &self,
        deadline: Option<Instant>,
        wait: bool,
    ) -> Result<Option<InterProcessMutexGuard<'_>>> {
        let me = thread::current().id();
        if let Some(hold) = self.holds.lock().get_mut(&me) {
            hold.count += 1;
            return Ok(Some(self.guard(hold.lease.clone())));
        }
        let acquired = match &self.role {
            Role::Writer { reader } if reader.lock().contains_key(&me) => {
                return Err(Error::LockUpgrade {
                    path: self.core.path.clone(),
                })
            }
            Role::Reader { writer } => {
                // Downgrade: the thread holding the write lock reads at once. Its read node
                // carries the write node's sequence, so it stands right behind it, ahead of any
                // writer that queued meanwhile (who must then wait for this read too).
                let write_seq = writer
                    .lock()
                    .get(&me)
                    .and_then(|h| sequence_of(paths::node_name(h.lease.node_path())));
                match write_seq {
                    Some(seq) => self
                        .core
                        .grant(&format!("{READ_NAME}{seq:010}-"), deadline)?,
                    None => self
                        .core
                        .acquire(self.lock_name, &*self.rule, deadline, wait)?,
                }
            }
            _ => self
                .core
                .acquire(self.lock_name, &*self.rule, deadline, wait)?,
        };
        let Some(lease) = acquired else {
            return Ok(None);
        };
        let lease = Arc::new(lease);
        let revocation = self.revocation.lock().clone().and_then(|listener| {
            RevocationWatch::start(&self.core.client, lease.node_path(), listener)
        });
        self.holds.lock().insert(
            me,
            Hold {
                count: 1,
                lease: lease.clone(),
                _revocation: revocation,
            },
        );
        Ok(Some(self.guard(lease)))
    }

    fn guard(&self, lease: Arc<Lease>) -> InterProcessMutexGuard<'_> {
        InterProcessMutexGuard {
            mutex: self,
            lease,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// Releases one hold of the calling thread (the way Curator's `release()` does); the node is
    /// deleted when the thread's last hold goes.
    ///
    /// # Errors
    /// `IllegalState` if this thread does not hold the lock; `SessionLost` if the lock had
    /// been lost (the hold is gone all the same).
    pub fn release(&self) -> Result<()> {
        let me = thread::current().id();
        let hold = {
            let mut holds = self.holds.lock();
            let Some(hold) = holds.get_mut(&me) else {
                return Err(Error::IllegalState(format!(
                    "this thread does not hold the lock {}",
                    self.core.path
                )));
            };
            hold.count -= 1;
            if hold.count > 0 {
                return Ok(());
            }
            holds.remove(&me)
        };
        match hold {
            Some(hold) => self.core.release(&hold.lease),
            None => Ok(()),
        }
    }

    /// True if some thread of this process holds the lock through this value.
    pub fn is_acquired_in_this_process(&self) -> bool {
        !self.holds.lock().is_empty()
    }

    /// True if the calling thread holds the lock through this value.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.holds.lock().contains_key(&thread::current().id())
    }

    /// Every contender's node (holder first, then waiters in order). For one side of a
    /// read/write lock, only that side's nodes.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        match self.role {
            Role::Plain => self.core.participant_nodes(None),
            _ => self.core.participant_nodes(Some(self.lock_name)),
        }
    }

    /// The holder id stored by whoever holds the lock now, if anyone does.
    pub fn current_holder(&self) -> Result<Option<String>> {
        self.core.current_holder()
    }

    /// This lock's figures since it was created.
    pub fn metrics(&self) -> LockMetrics {
        self.core.counters.snapshot()
    }

    /// Makes holds revocable: while this process holds the lock, a [`revoke`](super::revoke)
    /// of its node calls `listener` (on a thread of the lock's own, with the node path), which
    /// should see to it that the holder releases. Applies to holds taken from now on.
    pub fn make_revocable(&self, listener: impl Fn(&str) + Send + Sync + 'static) {
        *self.revocation.lock() = Some(Arc::new(listener));
    }
}

impl InterProcessMutexGuard<'_> {
    /// Releases this hold now and reports how it ended: `SessionLost` if the lock was not
    /// certainly held up to now (lost, or its lease check failing); the hold is gone either way.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.mutex.release()
    }
}

impl Deref for InterProcessMutexGuard<'_> {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for InterProcessMutexGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.mutex.release() {
                warn!("releasing {}: {e}", self.mutex.core.path);
            }
        }
    }
}

impl std::fmt::Debug for InterProcessMutexGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutexGuard")
            .field("lease", &*self.lease)
            .finish()
    }
}
