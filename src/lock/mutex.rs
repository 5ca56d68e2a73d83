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
use super::revocation::{Revocation, RevocationWatch};
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

/// What a mutex is: a plain one, or one side of a read/write lock. The reader knows the
/// writer's holds (a downgrade builds on one); the writer knows the reader (to refuse an
/// upgrade, and to hand a downgraded guard its read side).
enum Role {
    Plain,
    Reader { writer: Holds },
    Writer { reader: Arc<InterProcessMutex> },
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
    revocation: Mutex<Option<Arc<Revocation>>>,
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
    ) -> Result<(Arc<InterProcessMutex>, InterProcessMutex)> {
        let write_holds = Holds::default();
        let read = Arc::new(InterProcessMutex {
            core: LockCore::new(client, path, options.clone())?,
            lock_name: READ_NAME,
            rule: Box::new(ReaderRule),
            role: Role::Reader {
                writer: write_holds.clone(),
            },
            holds: Holds::default(),
            revocation: Mutex::new(None),
        });
        let write = InterProcessMutex {
            core: LockCore::new(client, path, options)?,
            lock_name: WRITE_NAME,
            rule: Box::new(WriterRule),
            role: Role::Writer {
                reader: read.clone(),
            },
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

    /// Waits until `deadline` at the latest; `Ok(None)` if the lock was not had by then.
    pub fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> Result<Option<InterProcessMutexGuard<'_>>> {
        self.lock(Some(deadline), true)
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
        // Re-entry builds on this thread's hold: only if it is still sound.
        let held = self.holds.lock().get(&me).map(|h| h.lease.clone());
        if let Some(lease) = held {
            let sound = match self.core.still_holds(&lease, deadline) {
                Ok(sound) => sound,
                // Not verified by the deadline: not (re-)acquired.
                Err(Error::Timeout { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            if !sound {
                self.drop_dead_hold(me, &lease, deadline);
                return Err(self.core.hold_gone(&lease));
            }
            if let Some(hold) = self.holds.lock().get_mut(&me) {
                hold.count += 1;
            }
            return Ok(Some(self.guard(lease)));
        }
        let acquired = match &self.role {
            Role::Writer { reader } if reader.holds.lock().contains_key(&me) => {
                return Err(Error::LockUpgrade {
                    path: self.core.path.clone(),
                })
            }
            Role::Reader { writer } => {
                // Downgrade: the thread holding the write lock reads at once. Its read node
                // carries the write node's sequence, so it stands right behind it, ahead of any
                // writer that queued meanwhile (who must then wait for this read too). Only a
                // write hold that is still sound can be built on.
                let write_hold = writer.lock().get(&me).map(|h| h.lease.clone());
                match write_hold {
                    Some(lease) => {
                        let sound = match self.core.still_holds(&lease, deadline) {
                            Ok(sound) => sound,
                            Err(Error::Timeout { .. }) => return Ok(None),
                            Err(e) => return Err(e),
                        };
                        if !sound {
                            return Err(self.core.hold_gone(&lease));
                        }
                        let seq =
                            sequence_of(paths::node_name(lease.node_path())).ok_or_else(|| {
                                Error::IllegalState("a write node without a sequence".into())
                            })?;
                        self.core
                            .grant(&format!("{READ_NAME}{seq:010}-"), &lease, deadline)?
                    }
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
        let revocation = self
            .revocation
            .lock()
            .clone()
            .map(|r| r.watch(lease.node_path()));
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

    /// Forgets this thread's hold on `lease`, which can no longer be trusted, and removes its
    /// node if it is still there. Guards still out on it report the loss when released.
    fn drop_dead_hold(&self, me: ThreadId, lease: &Arc<Lease>, deadline: Option<Instant>) {
        let removed = {
            let mut holds = self.holds.lock();
            match holds.get(&me) {
                Some(h) if Arc::ptr_eq(&h.lease, lease) => holds.remove(&me),
                _ => None,
            }
        };
        if removed.is_some() {
            let _ = self.core.release(lease, deadline);
        }
    }

    /// Releases one guard's share of its hold; the node is deleted when the hold's last guard
    /// goes. A guard whose hold was already dropped as dead releases only its own node, so it
    /// can never take a newer hold's node with it.
    fn release_guard(&self, lease: &Arc<Lease>, deadline: Option<Instant>) -> Result<()> {
        let me = thread::current().id();
        {
            let mut holds = self.holds.lock();
            if let Some(hold) = holds.get_mut(&me).filter(|h| Arc::ptr_eq(&h.lease, lease)) {
                hold.count -= 1;
                if hold.count > 0 {
                    return Ok(());
                }
                holds.remove(&me);
            }
        }
        self.core.release(lease, deadline)
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
    /// of its node calls `listener` (on one thread of this lock's own, with the node path),
    /// which should see to it that the holder releases. The listener may wait for that release.
    /// Applies to holds taken from now on.
    pub fn make_revocable(&self, listener: impl Fn(&str) + Send + Sync + 'static) {
        *self.revocation.lock() = Revocation::start(&self.core.client, Arc::new(listener));
    }
}

impl<'a> InterProcessMutexGuard<'a> {
    /// Releases this guard now and reports how the hold ended: `SessionLost` if the lock was
    /// not certainly held up to now (lost, or its lease check failing); the hold is gone either
    /// way. With other guards of the same thread still out (re-entry), the lock stays held
    /// until the last one goes.
    pub fn release(self) -> Result<()> {
        self.release_by(None)
    }

    /// [`release`](Self::release), waiting at most until `deadline` for the node's deletion
    /// (the janitor finishes what cannot be done by then).
    pub(crate) fn release_by(mut self, deadline: Option<Instant>) -> Result<()> {
        self.released = true;
        self.mutex.release_guard(&self.lease, deadline)
    }

    /// Turns a write guard of an [`InterProcessReadWriteLock`](super::InterProcessReadWriteLock)
    /// into a read guard without letting go in between: the read is taken first (at once, right
    /// behind the write node, so a writer that queued meanwhile keeps waiting), then the write
    /// is released.
    ///
    /// # Errors
    /// `IllegalState` for a guard that is not a write guard; `SessionLost` if the write hold's
    /// session is lost, `NotHeld` if its node was deleted while the session lives (checked
    /// before and again after the read node is made; the write guard is released either way).
    pub fn downgrade(self) -> Result<InterProcessMutexGuard<'a>> {
        let mutex: &'a InterProcessMutex = self.mutex;
        let Role::Writer { reader } = &mutex.role else {
            return Err(Error::IllegalState(format!(
                "only a write guard can be downgraded ({})",
                mutex.core.path
            )));
        };
        // The read keeps the write's fencing token: the read node is newer than any writer
        // queued behind the write, whose token must still be the larger one.
        let token = self.lease.fencing_token();
        let read = reader.lock(None, true);
        drop(self);
        let read = read?.ok_or_else(|| Error::IllegalState("a downgrade gave up".into()))?;
        if let Ok(token) = token {
            read.lease.inherit_token(token);
        }
        Ok(read)
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
            if let Err(e) = self.mutex.release_guard(&self.lease, None) {
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
