//! The queue: puts, and the two ways to take an item (at least once, under a lock; exactly
//! once, in one transaction), on Curator's `DistributedQueue` nodes.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use log::{debug, warn};
use parking_lot::Mutex;

use super::envelope;
use super::order::{delay_infix, epoch_ms, priority_infix, Order, ITEM_PREFIX};
use crate::lock::core::LockCore;
use crate::lock::watching::Watching;
use crate::lock::MIN_ATTEMPT;
use crate::{
    paths, Client, CreateMode, Error, LockOptions, Op, OpResult, Result, SessionId, WatchEvent,
    WatchKind, ZkCode,
};

/// A test's hook, run with a path.
#[cfg(feature = "testing")]
type Hook = Arc<dyn Fn(&str) + Send + Sync>;

/// Options of a queue.
#[derive(Clone, Default)]
pub struct QueueOptions {
    lock_path: Option<String>,
    #[cfg(feature = "testing")]
    before_take_write: Option<Hook>,
    #[cfg(feature = "testing")]
    before_lock_watch: Option<Hook>,
}

impl std::fmt::Debug for QueueOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueOptions")
            .field("lock_path", &self.lock_path)
            .finish_non_exhaustive()
    }
}

impl QueueOptions {
    /// The defaults: items locked under the queue's path with `-locks` appended.
    pub fn new() -> QueueOptions {
        QueueOptions::default()
    }

    /// Where consumers lock the items they take (Curator's `lockPath`, its "safe" mode): give
    /// Curator's consumers the same path to share a queue with them.
    pub fn lock_path(mut self, path: &str) -> QueueOptions {
        self.lock_path = Some(path.to_owned());
        self
    }

    /// Test hook: runs just before a take's transaction is sent (an exactly-once take's
    /// removal, an at-least-once take's `done` or `requeue`), with the item's path.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_before_take_write(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.before_take_write = Some(Arc::new(f));
        self
    }

    /// Test hook: runs when a take has found every item held, just before it watches the lock
    /// path, with that path.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_before_lock_watch(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.before_lock_watch = Some(Arc::new(f));
        self
    }
}

/// How a queue of one kind orders its items (sealed: [`Fifo`], [`Priority`], [`Delay`]).
pub trait Kind: sealed::Sealed {}

mod sealed {
    use super::Order;

    pub trait Sealed {
        const ORDER: Order;
    }
    impl Sealed for super::Fifo {
        const ORDER: Order = Order::Fifo;
    }
    impl Sealed for super::Priority {
        const ORDER: Order = Order::Priority;
    }
    impl Sealed for super::Delay {
        const ORDER: Order = Order::Delay;
    }
}

/// First in, first out: [`DistributedQueue`].
#[derive(Debug)]
pub struct Fifo;
/// Lowest priority number first, then first in: [`DistributedPriorityQueue`].
#[derive(Debug)]
pub struct Priority;
/// Each item once due, earliest first: [`DistributedDelayQueue`].
#[derive(Debug)]
pub struct Delay;

impl Kind for Fifo {}
impl Kind for Priority {}
impl Kind for Delay {}

/// A first-in, first-out queue: Apache Curator's `DistributedQueue` (see [`Queue`], which
/// every kind of queue is, for what it promises).
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::queue::DistributedQueue;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let queue = DistributedQueue::new(&client, "/jobs/queue")?;
/// queue.put(b"resize image 42")?;
/// // A worker: each item at least once, removed after its work is done.
/// if let Some(taken) = queue.take(Duration::from_secs(30))? {
///     for item in taken.items() {
///         println!("working on {}", String::from_utf8_lossy(item));
///     }
///     taken.done()?;
/// }
/// # Ok(())
/// # }
/// ```
pub type DistributedQueue = Queue<Fifo>;

/// A queue of work items that every process of a cluster can put into and take from,
/// Apache Curator's `DistributedQueue` on the same nodes, so that Curator producers and
/// consumers can share it: each put is a persistent sequential child `queue-<seq>` of the
/// queue's path holding Curator's item envelope (one item, or several put together with
/// [`put_multi`](Self::put_multi)); a consumer that takes an item under a lock makes an
/// ephemeral node of the item's name under the lock path (Curator's `lockPath`).
///
/// Two ways to take, both losing nothing a put reported made:
///
/// - [`take`](Self::take): **at least once**. The item is locked for this consumer and stays
///   in the queue until [`Taken::done`] removes it (with its lock, in one transaction) after the
///   work. A consumer that dies or loses its session before that loses its lock with it, and the
///   item goes to the next consumer: an item can be worked on twice, never lost.
/// - [`take_once`](Self::take_once): **exactly once**. The item is removed from the queue in
///   one transaction with the creation of its lock (which proves the item was not locked by an
///   at-least-once consumer at that instant), and handed over only once that commits: no two
///   takes get one item. If the transaction's answer is lost, the lock, made in it, tells
///   whether it committed; if that cannot be told (the session ended too), the take returns
///   [`Error::OutcomeUnknown`]: the item may be gone unworked, never worked twice.
///
/// A put whose answer is lost returns [`Error::OutcomeUnknown`] (it is not sent again, so an
/// item is never put twice). [`put_all`](Self::put_all) puts several items, each a node of its
/// own, in one transaction: all or none.
///
/// Children of the queue whose names do not start with `queue-` are not items and are left
/// alone. A node whose data is not Curator's envelope is skipped and left in the queue (Curator
/// deletes it, losing it), with a warning.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::queue::DistributedQueue;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let queue = DistributedQueue::new(&client, "/jobs/queue")?;
/// queue.put_all(&[b"a".as_slice(), b"b", b"c"])?;
/// // Exactly once: removed from the queue as it is handed over.
/// while let Some(item) = queue.take_once(Duration::ZERO)? {
///     println!("{:?}", item.items());
/// }
/// # Ok(())
/// # }
/// ```
pub struct Queue<K: Kind> {
    core: Arc<QueueCore>,
    kind: PhantomData<K>,
}

/// A queue whose items come out lowest priority number first (Curator's
/// `DistributedPriorityQueue`, same names: `queue-<P><seq>`, `P` the priority's sign and 32 bits
/// in hexadecimal); equal priorities first in, first out.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::queue::DistributedPriorityQueue;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let queue = DistributedPriorityQueue::new(&client, "/jobs/by-priority")?;
/// queue.put(b"nightly report", 10)?;
/// queue.put(b"page the on-call", -5)?;
/// let first = queue.take_once(Duration::from_secs(5))?.expect("an item");
/// assert_eq!(first.items()[0], b"page the on-call");
/// # Ok(())
/// # }
/// ```
pub type DistributedPriorityQueue = Queue<Priority>;

/// A queue whose items come out once due, earliest first (Curator's `DistributedDelayQueue`,
/// same names: `queue-|<ms>|<seq>`, the due time in milliseconds since the Unix epoch in
/// hexadecimal). Due times are wall-clock times of the producer's clock, read against the
/// consumer's: skew between them moves delivery by as much.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::{Duration, SystemTime};
/// use zk_recipes::queue::DistributedDelayQueue;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let queue = DistributedDelayQueue::new(&client, "/jobs/retries")?;
/// queue.put(b"retry upload 7", SystemTime::now() + Duration::from_secs(60))?;
/// // Nothing is due for a minute.
/// assert!(queue.take(Duration::from_secs(1))?.is_none());
/// # Ok(())
/// # }
/// ```
pub type DistributedDelayQueue = Queue<Delay>;

impl<K: Kind> std::fmt::Debug for Queue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("path", &self.core.lock.path)
            .field("lock_path", &self.core.lock_path)
            .field("order", &K::ORDER)
            .finish()
    }
}

/// What every queue kind shares.
struct QueueCore {
    /// The queue's path and client, and the one wait.
    lock: LockCore,
    lock_path: String,
    order: Order,
    /// Item nodes this queue's takes hold now, or are taking, and its takes waiting.
    held: Arc<Held>,
    /// Item nodes whose data is not Curator's envelope: skipped from then on.
    corrupt: Mutex<HashSet<String>>,
    /// What the last listing held behind the item taken from it (first-in, first-out only).
    rest: Mutex<std::collections::VecDeque<String>>,
    #[cfg(feature = "testing")]
    before_take_write: Option<Hook>,
    #[cfg(feature = "testing")]
    before_lock_watch: Option<Hook>,
}

impl<K: Kind> Queue<K> {
    /// A queue of this kind at `path`, its items locked under `<path>-locks`.
    pub fn new(client: &Client, path: &str) -> Result<Queue<K>> {
        Self::with_options(client, path, QueueOptions::new())
    }

    /// [`new`](Self::new) with options.
    pub fn with_options(client: &Client, path: &str, options: QueueOptions) -> Result<Queue<K>> {
        let lock = LockCore::new(client, path, LockOptions::default())?;
        let lock_path = options.lock_path.unwrap_or_else(|| format!("{path}-locks"));
        paths::validate(&lock_path, false)?;
        if lock_path == path || lock_path.starts_with(&format!("{path}/")) {
            return Err(Error::InvalidPath {
                path: lock_path,
                reason: "a queue's lock path must be outside the queue",
            });
        }
        Ok(Queue {
            core: Arc::new(QueueCore {
                lock,
                lock_path,
                order: K::ORDER,
                held: Arc::default(),
                corrupt: Mutex::default(),
                rest: Mutex::default(),
                #[cfg(feature = "testing")]
                before_take_write: options.before_take_write,
                #[cfg(feature = "testing")]
                before_lock_watch: options.before_lock_watch,
            }),
            kind: PhantomData,
        })
    }

    /// The queue's path.
    pub fn path(&self) -> &str {
        &self.core.lock.path
    }

    /// Where its consumers lock the items they take.
    pub fn lock_path(&self) -> &str {
        &self.core.lock_path
    }

    /// Takes the first item due, at least once: locked for this consumer until
    /// [`Taken::done`], waiting at most `timeout` for one (`None` if none came). The look at
    /// the queue gets at least [`MIN_ATTEMPT`](crate::lock::MIN_ATTEMPT), so a zero timeout
    /// still takes an item that is there. A take whose lock create's answer was lost goes on,
    /// up to one session timeout more, to tell whether the lock was made (as
    /// [`take_once`](Self::take_once) does).
    ///
    /// # Errors
    /// What a look meets that is not a connection problem the client rides out (`NoAuth`,
    /// `Closed`, ...). A broken connection or a lost session does not end the wait.
    pub fn take(&self, timeout: Duration) -> Result<Option<Taken>> {
        self.take_until(Instant::now() + timeout)
    }

    /// [`take`](Self::take) until `deadline`.
    pub fn take_until(&self, deadline: Instant) -> Result<Option<Taken>> {
        let core = &self.core;
        core.first(deadline, |client, name| core.lock_item(client, name))
    }

    /// Takes the first item due, exactly once: removed from the queue as it is handed over,
    /// waiting at most `timeout` for one (`None` if none came). One exception to the bound: a
    /// take whose write's answer was lost goes on, up to one session timeout more, to tell
    /// from its lock whether the write committed (an unknown outcome costs an item).
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] if the removal's answer was lost and whether it committed
    /// cannot be told: the item may be gone without having been handed to anyone (never to
    /// two). Otherwise as [`take`](Self::take).
    pub fn take_once(&self, timeout: Duration) -> Result<Option<Item>> {
        self.take_once_until(Instant::now() + timeout)
    }

    /// [`take_once`](Self::take_once) until `deadline`.
    pub fn take_once_until(&self, deadline: Instant) -> Result<Option<Item>> {
        let core = &self.core;
        core.first(deadline, |client, name| core.claim_item(client, name))
    }

    /// The item nodes in the queue now, due or not, in the order they come out (a listing, no
    /// watch).
    pub fn items(&self) -> Result<Vec<String>> {
        let core = &self.core;
        match core.lock.client.children(&core.lock.path) {
            Ok(children) => Ok(core.order.line(children, u64::MAX).0),
            Err(e) if e.is_no_node() => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn put_node<I: AsRef<[u8]>>(&self, infix: &str, items: &[I]) -> Result<String> {
        let core = &self.core;
        let data = envelope::encode(items)?;
        let prefix = paths::join(&core.lock.path, &format!("{ITEM_PREFIX}{infix}"));
        core.made_again(&core.lock.path, || {
            core.lock
                .client
                .create(&prefix, &data, CreateMode::PersistentSequential)
        })
        .map_err(|e| e.unknown_if_lost(&prefix))
    }

    fn put_nodes<I: AsRef<[u8]>>(&self, infix: &str, items: &[I]) -> Result<Vec<String>> {
        let core = &self.core;
        let prefix = paths::join(&core.lock.path, &format!("{ITEM_PREFIX}{infix}"));
        let ops = items
            .iter()
            .map(|item| {
                Ok(Op::Create {
                    path: prefix.clone(),
                    data: envelope::encode(std::slice::from_ref(item))?,
                    mode: CreateMode::PersistentSequential,
                })
            })
            .collect::<Result<Vec<Op>>>()?;
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let done = core
            .made_again(&core.lock.path, || core.lock.client.multi(&ops))
            .map_err(|e| e.unknown_if_lost(&prefix))?;
        Ok(done
            .into_iter()
            .filter_map(|r| match r {
                OpResult::Created { path, .. } => Some(path),
                _ => None,
            })
            .collect())
    }
}

impl Queue<Fifo> {
    /// Puts one item at the back; returns its node's path.
    ///
    /// # Errors
    /// [`Error::OutcomeUnknown`] if the create's answer was lost: the item may or may not be
    /// in the queue, once.
    pub fn put(&self, item: &[u8]) -> Result<String> {
        self.put_node("", &[item])
    }

    /// Puts `items` in one node: taken together, in order (Curator's `putMulti`).
    pub fn put_multi<I: AsRef<[u8]>>(&self, items: &[I]) -> Result<String> {
        self.put_node("", items)
    }

    /// Puts each of `items` in a node of its own, in order, in one transaction: all or none.
    /// Returns their nodes' paths.
    pub fn put_all<I: AsRef<[u8]>>(&self, items: &[I]) -> Result<Vec<String>> {
        self.put_nodes("", items)
    }
}

impl Queue<Priority> {
    /// Puts one item with `priority` (lower comes out first); returns its node's path.
    pub fn put(&self, item: &[u8], priority: i32) -> Result<String> {
        self.put_node(&priority_infix(priority), &[item])
    }

    /// Puts `items` in one node with `priority`: taken together, in order.
    pub fn put_multi<I: AsRef<[u8]>>(&self, items: &[I], priority: i32) -> Result<String> {
        self.put_node(&priority_infix(priority), items)
    }

    /// Puts each of `items` in a node of its own with `priority`, in one transaction.
    pub fn put_all<I: AsRef<[u8]>>(&self, items: &[I], priority: i32) -> Result<Vec<String>> {
        self.put_nodes(&priority_infix(priority), items)
    }
}

impl Queue<Delay> {
    /// Puts one item, handed out no earlier than `due`; returns its node's path.
    pub fn put(&self, item: &[u8], due: SystemTime) -> Result<String> {
        self.put_node(&delay_infix(epoch_ms(due)), &[item])
    }

    /// Puts `items` in one node, due at `due`: taken together, in order.
    pub fn put_multi<I: AsRef<[u8]>>(&self, items: &[I], due: SystemTime) -> Result<String> {
        self.put_node(&delay_infix(epoch_ms(due)), items)
    }

    /// Puts each of `items` in a node of its own, due at `due`, in one transaction.
    pub fn put_all<I: AsRef<[u8]>>(&self, items: &[I], due: SystemTime) -> Result<Vec<String>> {
        self.put_nodes(&delay_infix(epoch_ms(due)), items)
    }
}

impl QueueCore {
    /// Runs `op`; if it meets a missing `path` (the queue's, or its lock path), makes that
    /// (persistent, its missing parents as containers, as Curator's `start` does) and runs it
    /// once more.
    fn made_again<T>(&self, path: &str, op: impl Fn() -> Result<T>) -> Result<T> {
        match op() {
            Err(e) if e.is_no_node() => {
                let client = &self.lock.client;
                if let Some(parent) = paths::parent(path).filter(|p| *p != "/") {
                    client.ensure_lock_path(parent, self.lock.options.acl_for(client))?;
                }
                match client.create(path, b"", CreateMode::Persistent) {
                    Err(e) if !e.is_node_exists() => return Err(e),
                    _ => {}
                }
                op()
            }
            other => other,
        }
    }

    /// The first item `take` makes its own, in the line's order, waiting for the line to
    /// change (or the next item to come due) until `deadline`.
    fn first<T>(
        &self,
        deadline: Instant,
        take: impl Fn(&Client, &str) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        // Each look gets at least MIN_ATTEMPT, as a timed acquire does.
        let looks = deadline.max(Instant::now() + MIN_ATTEMPT);
        // First what is left of the last listing (a first-in, first-out queue's: its order
        // cannot change but by puts at the back): a take then lists the queue once per many
        // items, not once per item. Each try checks the item at the server as it takes it.
        if self.order == Order::Fifo {
            let client = self.lock.client.with_deadline(looks);
            loop {
                // The guard goes at the end of this statement: never held across a call.
                let next = self.rest.lock().pop_front();
                let Some(name) = next else { break };
                match self.try_one(&client, &name, &take) {
                    Ok(Some(t)) => return Ok(Some(t)),
                    Ok(None) => {}
                    Err(Error::Timeout { .. }) => return Ok(None),
                    Err(Error::ConnectionLoss { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        let mut watching = Watching::new(&self.lock);
        // Told of every item this object lets go from now on, before the first look.
        let _waiting = self.held.wait_here(watching.tx());
        loop {
            let client = self.lock.client.with_deadline(looks);
            let mut wake = deadline;
            match client.children_watch(&self.lock.path, watching.tx()) {
                Ok(children) => {
                    watching.watching(&self.lock.path);
                    let now = SystemTime::now();
                    let (line, next) = self.order.line(children, epoch_ms(now));
                    let waiting_on_locks = !line.is_empty();
                    let mut line = std::collections::VecDeque::from(line);
                    // The items passed over: held by someone, or not to be had now.
                    let mut passed = Vec::new();
                    while let Some(name) = line.pop_front() {
                        match self.try_one(&client, &name, &take) {
                            Ok(Some(t)) => {
                                if self.order == Order::Fifo {
                                    *self.rest.lock() = line;
                                }
                                return Ok(Some(t));
                            }
                            Ok(None) => passed.push(name),
                            Err(Error::ConnectionLoss { .. }) => break,
                            Err(Error::Timeout { .. }) => return Ok(None),
                            Err(e) => return Err(e),
                        }
                    }
                    // Items there, none to be had: each is held by someone (or its lock is).
                    // A lock's going (a release, its holder's session ending) changes nothing
                    // in the queue itself: the lock path is watched too.
                    if waiting_on_locks {
                        #[cfg(feature = "testing")]
                        if let Some(hook) = &self.before_lock_watch {
                            hook(&self.lock_path);
                        }
                        let locks = match client.children_watch(&self.lock_path, watching.tx()) {
                            Ok(locks) => {
                                watching.watching(&self.lock_path);
                                Some(locks)
                            }
                            // No lock path: no lock stands (nothing to watch there).
                            Err(e) if e.is_no_node() => Some(Vec::new()),
                            Err(Error::Timeout { .. }) => return Ok(None),
                            // A broken connection: a look follows the reconnection.
                            Err(_) => None,
                        };
                        // A lock gone between our try and this watch (a release, its holder's
                        // session ending) fires nothing: look again now, not at the deadline.
                        if locks.is_some_and(|locks| self.freed(&passed, &locks)) {
                            wake = Instant::now();
                        }
                    }
                    // The next item's due time, on this machine's clock.
                    if let Some(next) = next {
                        let left = next.saturating_sub(epoch_ms(now));
                        wake = wake.min(Instant::now() + Duration::from_millis(left));
                    }
                }
                // No queue yet: its creation is watched for.
                Err(e) if e.is_no_node() => {
                    match client.exists_watch(&self.lock.path, watching.tx()) {
                        Ok(found) => {
                            watching.watching(&self.lock.path);
                            if found.is_some() {
                                continue;
                            }
                        }
                        Err(Error::ConnectionLoss { .. }) => {}
                        Err(Error::Timeout { .. }) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::Timeout { .. }) => return Ok(None),
                Err(Error::ConnectionLoss { .. }) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            // Woken by a watch, the session's return, the next due time, or the deadline.
            watching.wait(wake)?;
        }
    }

    /// True if an item of `passed` has no lock in `locks` (the lock path's children) and
    /// none of this queue's takes holds or is taking it: it may be had now. A malformed item
    /// is never had.
    fn freed(&self, passed: &[String], locks: &[String]) -> bool {
        let locks: HashSet<&str> = locks.iter().map(String::as_str).collect();
        let held = self.held.nodes.lock();
        let corrupt = self.corrupt.lock();
        passed.iter().any(|name| {
            !locks.contains(name.as_str())
                && !corrupt.contains(name)
                && !held.contains(&paths::join(&self.lock.path, name))
        })
    }

    /// `take` of the item `name`, unless it is one known malformed.
    fn try_one<T>(
        &self,
        client: &Client,
        name: &str,
        take: &impl Fn(&Client, &str) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        if self.corrupt.lock().contains(name) {
            return Ok(None);
        }
        take(client, name)
    }

    /// At least once: locks the item `name` for us and reads it. `None` if someone else holds
    /// it, it is gone, or it is not an item we can read.
    fn lock_item(&self, client: &Client, name: &str) -> Result<Option<Taken>> {
        let Some(session) = client.session_id() else {
            return Err(client.connection_loss());
        };
        let node = paths::join(&self.lock.path, name);
        let lock = paths::join(&self.lock_path, name);
        let Some(mut claim) = Claim::new(&self.held, &node, &lock, session) else {
            // A take of this queue holds it, or is taking it.
            return Ok(None);
        };
        // Without the look's deadline, as for a removal (`claim_item`): a lock create given up
        // at it would land unseen, holding the item from others until a take removes it.
        let on = self.lock.client.only_on(session);
        let made = self.made_again(&self.lock_path, || {
            on.create(&lock, &claim.data(), CreateMode::Ephemeral)
        });
        match made {
            Ok(_) => {}
            Err(e) if e.is_node_exists() => {
                self.drop_if_stale(&on, &lock, session);
                return Ok(None);
            }
            // The session went before the create was sent.
            Err(Error::SessionLost { .. }) => return Ok(None),
            // The create's answer was lost: on this session, after a sync, the lock says
            // whether it was made. (If it lands later still, it carries a token no take of
            // this process holds, and the next take that meets it removes it.)
            Err(Error::ConnectionLoss { .. }) => {
                if !self.is_ours(client, &claim)? {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
        let (data, _) = match on.data(&node) {
            Ok(found) => found,
            // Done by another consumer between our listing and our lock.
            Err(e) if e.is_no_node() => {
                claim.unlock(&self.lock.client);
                return Ok(None);
            }
            Err(e) => {
                claim.unlock(&self.lock.client);
                return Err(e);
            }
        };
        // Handed to the caller from here (a malformed item, let go at once, wakes the
        // waiting takes once; it is skipped from then on).
        claim.handed = true;
        let Some(items) = self.decode(&node, name, &data) else {
            claim.unlock(&self.lock.client);
            return Ok(None);
        };
        Ok(Some(Taken {
            client: self.lock.client.clone(),
            claim: Some(claim),
            items,
            data,
            #[cfg(feature = "testing")]
            before_write: self.before_take_write.clone(),
        }))
    }

    /// Exactly once: reads the item `name`, then in one transaction makes its lock (which no
    /// one else may hold at that instant) and deletes it at the version read. `None` if someone
    /// else holds or took it first.
    fn claim_item(&self, client: &Client, name: &str) -> Result<Option<Item>> {
        let Some(session) = client.session_id() else {
            return Err(client.connection_loss());
        };
        let node = paths::join(&self.lock.path, name);
        let lock = paths::join(&self.lock_path, name);
        let Some(claim) = Claim::new(&self.held, &node, &lock, session) else {
            return Ok(None);
        };
        let (data, stat) = match client.data(&node) {
            Ok(found) => found,
            Err(e) if e.is_no_node() => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(items) = self.decode(&node, name, &data) else {
            return Ok(None);
        };
        let ops = [
            Op::Create {
                path: lock.clone(),
                data: claim.data(),
                mode: CreateMode::Ephemeral,
            },
            Op::Delete {
                path: node.clone(),
                version: Some(stat.version),
            },
        ];
        #[cfg(feature = "testing")]
        if let Some(hook) = &self.before_take_write {
            hook(&node);
        }
        // Without the look's deadline: that bounds looking for an item, not the answer to a
        // removal already sent (given up at the deadline, it was reported as an outcome
        // unknown, the item maybe gone unworked, with nothing lost on the wire).
        let on = self.lock.client.only_on(session);
        match self.made_again(&self.lock_path, || on.multi(&ops)) {
            Ok(_) => {}
            // Locked by an at-least-once consumer, taken by another, or changed: not ours.
            Err(Error::ZooKeeper {
                code: ZkCode::NodeExists,
                ..
            }) => {
                self.drop_if_stale(&on, &lock, session);
                return Ok(None);
            }
            Err(Error::ZooKeeper {
                code: ZkCode::NoNode | ZkCode::BadVersion,
                ..
            }) => return Ok(None),
            // The answer was lost (or the session went, before or after the send): the lock,
            // made in the same transaction on this session, says whether it committed, if the
            // session is still ours.
            Err(
                Error::ConnectionLoss { .. } | Error::Timeout { .. } | Error::SessionLost { .. },
            ) => {
                if !matches!(self.is_ours(&self.lock.client, &claim), Ok(true)) {
                    // Not there (yet): the transaction may still land late (see
                    // `recipes/queue.md`), so the take cannot say the item is still queued.
                    return Err(Error::OutcomeUnknown { path: node });
                }
            }
            Err(e) => return Err(e),
        }
        // The lock has done its work: it proved no one held the item as it went.
        claim.unlock(&self.lock.client);
        Ok(Some(Item { node, items }))
    }

    /// True if `claim`'s lock stands, made on its session with its token, after a sync (on the
    /// session, once the client is back on it, within a session timeout); false if it does not,
    /// or the session is gone.
    fn is_ours(&self, client: &Client, claim: &Claim) -> Result<bool> {
        let patient = client.with_timeout(self.lock.client.session_timeout());
        let back = patient.wait_connected(self.lock.client.session_timeout());
        if back.is_err() || patient.session_id() != Some(claim.session) {
            return Ok(false);
        }
        let on = patient.only_on(claim.session);
        on.sync(&claim.lock)?;
        match on.data(&claim.lock) {
            Ok((data, stat)) => Ok(stat.ephemeral_owner == claim.session.0 && data == claim.data()),
            Err(e) if e.is_no_node() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A lock at `lock` made on our own session by a take of this process that no longer
    /// holds it (its token is not live) was made by a create whose answer was lost and that
    /// landed late: it is removed, so that the item is not held for the rest of the session.
    /// A lock of a live take (of any queue object of this process) is never touched.
    fn drop_if_stale(&self, client: &Client, lock: &str, session: SessionId) {
        let Ok((data, stat)) = client.data(lock) else {
            return;
        };
        let stale = stat.ephemeral_owner == session.0
            && token_of(&data).is_some_and(|token| !live().lock().contains(&token));
        if stale {
            warn!("{lock}: a lock of ours no take holds (made by a create whose answer was lost); removing it");
            let _ = client.delete_version(lock, stat.version);
        }
    }

    /// The items in `data`; `None` (with a warning, once) if it is not Curator's envelope.
    fn decode(&self, node: &str, name: &str, data: &[u8]) -> Option<Vec<Vec<u8>>> {
        match envelope::decode(node, data) {
            Ok(items) => Some(items),
            Err(e) => {
                if self.corrupt.lock().insert(name.to_owned()) {
                    warn!("{e}: skipped, and left in the queue");
                } else {
                    debug!("{node} skipped again");
                }
                None
            }
        }
    }
}

/// What a take's lock holds: a token of its own, so that the take (and no other, of this
/// process or any) can tell its lock from another's.
const TOKEN_PREFIX: &str = "zk-recipes take ";

/// The tokens of this process's takes under way or holding their items: a lock of our session
/// whose token is not here is stale (see `drop_if_stale`).
fn live() -> &'static Mutex<HashSet<u64>> {
    static LIVE: std::sync::OnceLock<Mutex<HashSet<u64>>> = std::sync::OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// The token a lock's data carries, if it is one of ours.
fn token_of(data: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(data).ok()?.strip_prefix(TOKEN_PREFIX)?;
    u64::from_str_radix(text, 16).ok()
}

/// The items a queue object's takes hold or are taking, and the channels of its takes waiting
/// for one. An item handed out and let go wakes them: its lock's delete tells them through
/// their watch, but
/// not when the lock was gone already (its session ended, or it was deleted behind our back),
/// nor a take that looked between the delete and the letting go.
#[derive(Default)]
struct Held {
    nodes: Mutex<HashSet<String>>,
    waiting: Mutex<Vec<Sender<WatchEvent>>>,
}

impl Held {
    /// `node` no longer held here: every waiting take looks again.
    fn let_go(&self, node: &str) {
        self.nodes.lock().remove(node);
        for tx in self.waiting.lock().iter() {
            let _ = tx.send(WatchEvent {
                kind: WatchKind::Deleted,
                path: node.to_owned(),
            });
        }
    }

    /// Tells `tx` of every item let go until the returned guard is dropped.
    fn wait_here(&self, tx: &Sender<WatchEvent>) -> Waiting<'_> {
        self.waiting.lock().push(tx.clone());
        Waiting {
            held: self,
            tx: tx.clone(),
        }
    }
}

/// A take waiting on its queue object's items ([`Held::wait_here`]).
struct Waiting<'a> {
    held: &'a Held,
    tx: Sender<WatchEvent>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.held
            .waiting
            .lock()
            .retain(|t| !t.same_channel(&self.tx));
    }
}

/// One take of one item: the item reserved in its queue object's `held` (no other take of
/// that object tries it meanwhile) and a token live in this process (its lock is never taken
/// for stale). Dropped, it lets both go; [`unlock`](Self::unlock) deletes its lock first.
struct Claim {
    node: String,
    lock: String,
    session: SessionId,
    token: u64,
    held: Arc<Held>,
    /// Kept for good: its lock's delete could not be confirmed (the client's janitor finishes
    /// it), so the item is not tried again by this queue object and the token stays live (the
    /// delete is by path: a lock made again at that path would go with it).
    kept: bool,
    /// Handed to the caller (a [`Taken`]): letting go wakes this object's waiting takes. A
    /// try that failed held the item for no one, and waking on it would wake the take that
    /// tried, which would try again at once.
    handed: bool,
}

impl Claim {
    /// `None` if a take of this queue object holds or is taking `node`.
    fn new(held: &Arc<Held>, node: &str, lock: &str, session: SessionId) -> Option<Claim> {
        if !held.nodes.lock().insert(node.to_owned()) {
            return None;
        }
        let token = loop {
            let t = fastrand::u64(..);
            if live().lock().insert(t) {
                break t;
            }
        };
        Some(Claim {
            node: node.to_owned(),
            lock: lock.to_owned(),
            session,
            token,
            held: held.clone(),
            kept: false,
            handed: false,
        })
    }

    /// What the lock holds.
    fn data(&self) -> Vec<u8> {
        format!("{TOKEN_PREFIX}{:016x}", self.token).into_bytes()
    }

    /// Deletes the lock (on its session, within a session timeout) and lets go; if whether it
    /// went cannot be told, the client's janitor deletes it while the session lives, and the
    /// claim is kept.
    fn unlock(mut self, client: &Client) {
        let on = client
            .only_on(self.session)
            .with_timeout(client.session_timeout());
        match on.delete(&self.lock) {
            Ok(()) | Err(Error::SessionLost { .. }) => {}
            Err(e) if e.is_no_node() => {}
            Err(_) => {
                client.remove_own(&self.lock, self.session);
                self.kept = true;
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.kept {
            if self.handed {
                self.held.let_go(&self.node);
            } else {
                self.held.nodes.lock().remove(&self.node);
            }
            live().lock().remove(&self.token);
        }
    }
}

/// An item taken at least once ([`Queue::take`]): locked for this consumer, still in the
/// queue. [`done`](Self::done) removes it after the work; [`requeue`](Self::requeue) puts it
/// back; dropping it unlocks it for the next consumer. If this client's session ends first,
/// its lock goes with it and another consumer may take the item too.
#[must_use = "an item taken is unlocked, not removed, when dropped: call done() after the work"]
pub struct Taken {
    client: Client,
    /// `None` once `done` or `requeue` removed the item and its lock.
    claim: Option<Claim>,
    items: Vec<Vec<u8>>,
    data: Vec<u8>,
    #[cfg(feature = "testing")]
    before_write: Option<Hook>,
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("node", &self.node())
            .field("session", &self.claim.as_ref().map(|c| c.session))
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl Taken {
    /// The node's items, in the order they were put (one, unless put together).
    pub fn items(&self) -> &[Vec<u8>] {
        &self.items
    }

    /// The item's node.
    pub fn node(&self) -> &str {
        self.claim.as_ref().map_or("", |c| c.node.as_str())
    }

    /// True while the session the item was taken on is the client's (its lock, and so the
    /// item, is this consumer's). Not a lease: the session may already be gone at the server.
    pub fn is_valid(&self) -> bool {
        self.claim
            .as_ref()
            .is_some_and(|c| self.client.session_id() == Some(c.session))
    }

    /// Removes the item from the queue, with its lock, in one transaction, on the session it
    /// was taken on.
    ///
    /// # Errors
    /// `SessionLost` if that session is gone (its lock went with it: the item is, or will be,
    /// handed to another consumer; nothing is removed). [`Error::OutcomeUnknown`] if the
    /// removal went out, its answer was lost, and whether it committed could not be told (a
    /// lost answer is resolved by looking at the lock on the same session, and the removal sent
    /// again if it did not commit; the session going meanwhile leaves it unknown): the item is
    /// removed, or will be handed to another consumer. Any other error: nothing was removed.
    pub fn done(mut self) -> Result<()> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        let ops = vec![
            Op::Delete {
                path: claim.node.clone(),
                version: None,
            },
            Op::Delete {
                path: claim.lock.clone(),
                version: None,
            },
        ];
        self.finish(&ops)
    }

    /// Puts the item back (a new node, same data: Curator's requeue, which drops a priority or
    /// due time, so that in those queues it comes out next, and in a first-in, first-out queue
    /// last) and removes this one with its lock, in one transaction.
    pub fn requeue(mut self) -> Result<()> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        let parent = paths::parent(&claim.node).unwrap_or("/");
        let ops = vec![
            Op::Delete {
                path: claim.node.clone(),
                version: None,
            },
            Op::Create {
                path: paths::join(parent, ITEM_PREFIX),
                data: self.data.clone(),
                mode: CreateMode::PersistentSequential,
            },
            Op::Delete {
                path: claim.lock.clone(),
                version: None,
            },
        ];
        self.finish(&ops)
    }

    /// Unlocks the item for the next consumer (as dropping it does).
    pub fn release(self) {}

    /// Runs the transaction that ends the take, only on the session it was taken on. Sending
    /// it again after a lost answer is safe: it deletes the item, so a copy that lands after
    /// another commits fails whole.
    fn finish(&mut self, ops: &[Op]) -> Result<()> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        let on = self.client.only_on(claim.session);
        loop {
            #[cfg(feature = "testing")]
            if let Some(hook) = &self.before_write {
                hook(&claim.node);
            }
            match on.multi(ops) {
                Ok(_) => break,
                Err(Error::ZooKeeper {
                    code: ZkCode::NoNode,
                    path,
                }) if path == claim.node => {
                    // Removed by someone else (a consumer that takes no locks): nothing to
                    // remove but our lock, as dropping does.
                    return Ok(());
                }
                Err(Error::ConnectionLoss { .. } | Error::Timeout { .. }) => {
                    // The transaction deletes our lock, which nothing else does while the
                    // session lives (no take of this process makes it again meanwhile: the
                    // claim holds the item): its absence says it committed. If that cannot be
                    // told (the session went, or no answer again), it may have.
                    let unknown = || Error::OutcomeUnknown {
                        path: claim.node.clone(),
                    };
                    let back = on.wait_connected(self.client.session_timeout());
                    if back.is_err() || self.client.session_id() != Some(claim.session) {
                        return Err(unknown());
                    }
                    match on.sync(&claim.lock).and_then(|()| on.exists(&claim.lock)) {
                        Ok(None) => break,
                        // Not committed: sent again.
                        Ok(Some(_)) => {}
                        Err(_) => return Err(unknown()),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // Committed: the lock went in the transaction.
        self.claim = None;
        Ok(())
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            claim.unlock(&self.client);
        }
    }
}

/// An item taken exactly once ([`Queue::take_once`]): already removed from the
/// queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    node: String,
    items: Vec<Vec<u8>>,
}

impl Item {
    /// The node's items, in the order they were put (one, unless put together).
    pub fn items(&self) -> &[Vec<u8>] {
        &self.items
    }

    /// The node the item was in.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The items, taken out.
    pub fn into_items(self) -> Vec<Vec<u8>> {
        self.items
    }
}
