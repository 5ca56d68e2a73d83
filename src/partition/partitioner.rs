//! A worker's share of a set of items, kept as workers join and leave.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use log::debug;
use parking_lot::{Condvar, Mutex};

use super::assign::owner_of;
use crate::lock::core::{LockCore, MaxLeases, WatchGuard};
use crate::lock::follow::{follow, AfterError, Rules};
use crate::lock::{Lease, LockOptions};
use crate::nodes::GroupMember;
use crate::{paths, Client, Error, Result, WatchEvent};

/// The longest [`Partitioner::close`] takes, whatever the server does: the pass under way
/// (`PASS_WAIT`), the items' release (a second) and leaving the group
/// ([`nodes::CLOSE_WAIT`](crate::nodes::CLOSE_WAIT)); what the server has not answered by
/// then the client finishes in the background, or the session's end does.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// How long the items' release on close waits for the server.
const RELEASE_WAIT: Duration = Duration::from_secs(1);
/// How soon an item whose take failed (other than by being busy) is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The lock name of an item's lock node.
const ITEM_LOCK: &str = "item";
/// The longest one pass of the worker's thread takes (its calls together).
const PASS_WAIT: Duration = Duration::from_secs(1);

/// An item this worker owns: its name, and the [`Lease`] it is owned under (`check`, `run`,
/// `valid_until`, `lost`, `fencing_token`). The lease says until when the ownership is
/// certain; once it fails, another worker may own the item.
#[derive(Clone)]
pub struct OwnedItem {
    item: String,
    lease: Arc<Lease>,
}

impl OwnedItem {
    /// The item's name.
    pub fn item(&self) -> &str {
        &self.item
    }
}

impl Deref for OwnedItem {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl std::fmt::Debug for OwnedItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedItem")
            .field("item", &self.item)
            .field("lease", &*self.lease)
            .finish()
    }
}

/// One worker's share of a set of items that workers split among themselves. Each worker
/// joins a group (`<path>/members/<id>`); each item is a lock of its own
/// (`<path>/items/<item>`, an [`InterProcessMutex`](crate::InterProcessMutex)'s nodes), so
/// at any instant an item has at most one owner whose lease vouches for it, with a fencing
/// token that grows with every new owner. Who should own an item is decided by rendezvous
/// hashing over the members ([`owner_of`](super::owner_of)): every worker computes the same
/// assignment, and a worker that joins or leaves moves only about one item in N.
///
/// A thread of its own follows the group: it releases the items no longer assigned here,
/// and takes those assigned here as soon as their previous owner lets go (the lock waits for
/// it: a membership change releases before anyone acquires). A worker whose connection is
/// suspended keeps its items only as long as each lease's bound allows ([`Lease::check`]);
/// after a lost session it rejoins and takes its share again.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::partition::Partitioner;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let items: Vec<String> = (0..64).map(|p| format!("partition-{p}")).collect();
/// let share = Partitioner::new(&client, "/jobs/ingest", "host-a", items)?;
/// share.start()?;
/// loop {
///     for owned in share.owned() {
///         let token = owned.fencing_token()?;
///         let _ = owned.run(|| println!("{} under token {token}", owned.item()));
///     }
///     share.wait_for_change(Duration::from_secs(1));
/// #   break;
/// }
/// # Ok(())
/// # }
/// ```
pub struct Partitioner {
    inner: Arc<Inner>,
    worker: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

struct Inner {
    id: String,
    member: GroupMember,
    /// The group's path, watched for joins and leaves.
    members_path: String,
    /// The core the thread's one wait runs on (at the partitioner's path).
    waits: LockCore,
    items: BTreeMap<String, LockCore>,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    members: Vec<String>,
    /// The last listing of the group had this worker's own node in it.
    listed: bool,
    assigned: BTreeSet<String>,
    owned: BTreeMap<String, Arc<Lease>>,
    generation: u64,
    started: bool,
    closed: bool,
}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("Partitioner")
            .field("id", &self.inner.id)
            .field("members", &state.members)
            .field("owned", &state.owned.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Partitioner {
    /// Worker `id`'s share of `items` at `path` (every worker of one set gives the same
    /// items). Nothing happens before [`start`](Self::start).
    ///
    /// # Errors
    /// `BadArguments` for an id or an item that is not one node name.
    pub fn new(
        client: &Client,
        path: &str,
        id: &str,
        items: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Partitioner> {
        let members = paths::join(path, "members");
        let mut locks = BTreeMap::new();
        for item in items {
            let item: String = item.into();
            if item.is_empty() || item.contains('/') || item == "." || item == ".." {
                return Err(Error::BadArguments(format!(
                    "an item is one node name, not {item:?}"
                )));
            }
            let at = paths::join(&paths::join(path, "items"), &item);
            let core = LockCore::new(client, &at, LockOptions::new().holder_id(id))?;
            locks.insert(item, core);
        }
        Ok(Partitioner {
            inner: Arc::new(Inner {
                id: id.to_owned(),
                member: GroupMember::new(client, &members, id, &[])?,
                waits: LockCore::new(client, path, LockOptions::new())?,
                members_path: members,
                items: locks,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
            worker: Mutex::new(None),
        })
    }

    /// Joins the group and starts following it. Returns at once.
    ///
    /// # Errors
    /// `IllegalState` if started before, or closed.
    pub fn start(&self) -> Result<()> {
        let mut worker = self.worker.lock();
        {
            let mut state = self.inner.state.lock();
            if state.started || state.closed {
                return Err(Error::IllegalState(
                    "the partitioner was started already".into(),
                ));
            }
            state.started = true;
        }
        self.inner.member.start()?;
        let (stop_tx, stop_rx) = bounded(0);
        let inner = self.inner.clone();
        let handle = thread::Builder::new()
            .name("zk-partitioner".into())
            .spawn(move || inner.run(&stop_rx))
            .map_err(|e| Error::IllegalState(format!("cannot start the partitioner: {e}")))?;
        *worker = Some((stop_tx, handle));
        Ok(())
    }

    /// The items this worker owns now, each with the lease it is owned under: only those
    /// whose lease is certainly valid at this moment.
    pub fn owned(&self) -> Vec<OwnedItem> {
        self.inner
            .state
            .lock()
            .owned
            .iter()
            .filter(|(_, lease)| lease.check_quietly().is_ok())
            .map(|(item, lease)| OwnedItem {
                item: item.clone(),
                lease: lease.clone(),
            })
            .collect()
    }

    /// The items the current membership assigns to this worker (owned or still to be taken).
    pub fn assigned(&self) -> Vec<String> {
        self.inner.state.lock().assigned.iter().cloned().collect()
    }

    /// The group's members as last read.
    pub fn members(&self) -> Vec<String> {
        self.inner.state.lock().members.clone()
    }

    /// True when this worker owns exactly what is assigned to it, every lease valid, and the
    /// group as last listed by the server had this worker in it (so the worker's own join is
    /// behind it, not still to come as a change).
    pub fn is_settled(&self) -> bool {
        let state = self.inner.state.lock();
        state.started
            && state.listed
            && state.owned.len() == state.assigned.len()
            && state
                .owned
                .iter()
                .all(|(item, lease)| state.assigned.contains(item) && lease.check_quietly().is_ok())
    }

    /// Waits at most `timeout` for a change of what is owned or assigned here (or of the
    /// members); true if one came.
    pub fn wait_for_change(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut state = self.inner.state.lock();
        let seen = state.generation;
        while state.generation == seen && !state.closed {
            if self.inner.changed.wait_until(&mut state, until).timed_out() {
                break;
            }
        }
        state.generation != seen
    }

    /// Waits at most `timeout` until this worker owns exactly its share; true then.
    pub fn wait_settled(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.is_settled() {
                return true;
            }
            if self.inner.state.lock().closed {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.wait_for_change(left);
        }
    }

    /// Releases every item, leaves the group and stops the thread, within [`CLOSE_WAIT`].
    /// Idempotent; also done on drop.
    pub fn close(&self) {
        // Held throughout: a second close returns once the first has released and left.
        let mut worker = self.worker.lock();
        self.inner.state.lock().closed = true;
        self.inner.changed.notify_all();
        if let Some((stop, handle)) = worker.take() {
            drop(stop);
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
        self.inner.member.close();
    }
}

impl Drop for Partitioner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    /// The partitioner's thread: read the members, let go of what is not ours, take what is,
    /// wait for a change; until stopped. Then every item is released.
    fn run(&self, stop: &Receiver<()>) {
        let (wake_tx, wake_rx) = unbounded();
        let after_error = |e: &Error| {
            debug!("{}: {e}", self.id);
            AfterError::Backoff
        };
        let rules = Rules {
            // A suspension may end a lease's bound: the pass lets go of what it no longer
            // certainly holds.
            look_when_suspended: true,
            after_error: &after_error,
        };
        follow(&self.waits, stop, (&wake_tx, &wake_rx), &rules, |looking| {
            // Each pass sets again the watches it needs.
            looking.watches.forget_all();
            self.pass(stop, looking.tx, looking.watches)
        });
        self.release_all(Instant::now() + RELEASE_WAIT);
    }

    /// One pass, its calls bounded by `PASS_WAIT`. Returns when to look again without an
    /// event: soon after an item whose take failed, else never (the thread sleeps until a
    /// watch or a state change: a lease whose bound ran out on a silent connection is hidden
    /// by `owned()` at once, and let go on the suspension or loss that follows; one whose
    /// bound comes back with the heartbeats is kept).
    fn pass(
        &self,
        stop: &Receiver<()>,
        wake_tx: &Sender<WatchEvent>,
        watches: &mut WatchGuard<'_>,
    ) -> Result<Option<Instant>> {
        let until = Instant::now() + PASS_WAIT;
        let (members, listed) = self.member.watch_members_by(until, wake_tx)?;
        let members: Vec<String> = members.into_keys().collect();
        watches.watching(&self.members_path);
        let assigned: BTreeSet<String> = self
            .items
            .keys()
            .filter(|item| owner_of(item, &members) == Some(self.id.as_str()))
            .cloned()
            .collect();
        // Let go first of what is no longer ours, or no longer certainly held.
        let letting_go: Vec<(String, Arc<Lease>)> = {
            let mut state = self.state.lock();
            let gone: Vec<String> = state
                .owned
                .iter()
                .filter(|(item, lease)| !assigned.contains(*item) || lease.check_quietly().is_err())
                .map(|(item, _)| item.clone())
                .collect();
            gone.into_iter()
                .filter_map(|item| state.owned.remove(&item).map(|l| (item, l)))
                .collect()
        };
        for (item, lease) in &letting_go {
            self.let_go(item, lease, until);
        }
        // Then take what is ours and not held: without waiting in line (the thread must go
        // on following the group); a busy item's line is watched, and its change wakes us.
        // Each item taken is ours at once (a failure after it does not leak it); an item whose
        // take fails is tried again soon, and the others go on.
        let mut retry = None;
        let mut changed = !letting_go.is_empty();
        for item in &assigned {
            if stop.try_recv() != Err(crossbeam_channel::TryRecvError::Empty) {
                break;
            }
            if self.state.lock().owned.contains_key(item) {
                continue;
            }
            let Some(core) = self.items.get(item) else {
                continue;
            };
            match self.take(core, until, wake_tx, watches) {
                Ok(Some(lease)) => {
                    self.state
                        .lock()
                        .owned
                        .insert(item.clone(), Arc::new(lease));
                    changed = true;
                }
                Ok(None) => {}
                Err(Error::Closed) => return Err(Error::Closed),
                Err(e) => {
                    debug!("{}: taking {item}: {e}", self.id);
                    retry = Some(Instant::now() + RETRY_AFTER);
                }
            }
        }
        let mut state = self.state.lock();
        changed |= state.members != members || state.listed != listed || state.assigned != assigned;
        state.members = members;
        state.listed = listed;
        state.assigned = assigned;
        if changed {
            state.generation += 1;
            self.changed.notify_all();
        }
        Ok(retry)
    }

    /// Takes an item's lock without waiting in line; if it is busy, watches its line for the
    /// owner's release. A line found empty once the watch is set (the owner let go between our
    /// look and the watch) is tried again at once: no event would come for it.
    fn take(
        &self,
        core: &LockCore,
        until: Instant,
        wake_tx: &Sender<WatchEvent>,
        watches: &mut WatchGuard<'_>,
    ) -> Result<Option<Lease>> {
        let client = core.client.with_deadline(until);
        for _ in 0..3 {
            if let Some(lease) = core.acquire(ITEM_LOCK, &MaxLeases(1), Some(until), false)? {
                return Ok(Some(lease));
            }
            let line = match client.children_watch(&core.path, wake_tx) {
                Ok(line) => line,
                Err(e) if e.is_no_node() => Vec::new(),
                Err(e) => return Err(e),
            };
            watches.watching(&core.path);
            if !line.is_empty() {
                return Ok(None);
            }
        }
        // Still coming and going: the watch set last reports the next change.
        Ok(None)
    }

    /// Lets go of an item: its lease stops vouching at once (in every copy a caller kept),
    /// then its node is deleted, waiting at most until `until`.
    fn let_go(&self, item: &str, lease: &Lease, until: Instant) {
        lease.token.mark_lost();
        if let Some(core) = self.items.get(item) {
            if let Err(e) = core.release(lease, Some(until)) {
                debug!("{}: {item} let go: {e}", self.id);
            }
        }
    }

    /// Releases every owned item, waiting at most until `deadline`.
    fn release_all(&self, deadline: Instant) {
        let owned = std::mem::take(&mut self.state.lock().owned);
        for (item, lease) in owned {
            self.let_go(&item, &lease, deadline);
        }
        self.state.lock().generation += 1;
        self.changed.notify_all();
    }
}
