//! A cache of a node and its subtree, kept current from a persistent recursive watch
//! (Curator's `CuratorCache`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

use crate::lock::core::LockCore;
use crate::lock::follow::{connection_of, follow, AfterError, Looking, Rules, Worker};
use crate::{
    paths, AddWatchMode, Client, Error, LockOptions, Op, OpResult, Result, SessionId, Stat,
    WatchEvent, WatchKind, ZkCode,
};

/// The longest one step takes: a pipeline of reads, or setting the watch (a full read of a
/// large tree takes many steps, each with a deadline of its own).
const STEP_WAIT: Duration = Duration::from_secs(10);
/// Reads sent in one pipeline.
const BATCH: usize = 1_000;

/// What a [`CuratorCache`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CacheOptions {
    /// Only the node itself, not its subtree (Curator's `SINGLE_NODE_CACHE`): a persistent
    /// watch, not a recursive one.
    pub single_node: bool,
    /// Keep the nodes' stats but not their data (Curator's `dataNotCached`).
    pub without_data: bool,
}

impl CacheOptions {
    /// The defaults: the node and its subtree, with their data.
    pub fn new() -> CacheOptions {
        CacheOptions::default()
    }

    /// The node alone (see [`single_node`](Self::single_node)).
    pub fn single_node(mut self) -> CacheOptions {
        self.single_node = true;
        self
    }

    /// Stats without data (see [`without_data`](Self::without_data)).
    pub fn without_data(mut self) -> CacheOptions {
        self.without_data = true;
        self
    }
}

/// A node as the cache holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedNode {
    /// Its path.
    pub path: String,
    /// Its stat when read.
    pub stat: Stat,
    /// Its data when read (`None` with [`CacheOptions::without_data`]).
    pub data: Option<Arc<[u8]>>,
}

/// What a [`CuratorCache`]'s listeners hear, in the order the cache changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheEvent {
    /// A node came into the cache.
    Created(CachedNode),
    /// A node changed (a newer version of its data, or the node made again).
    Changed {
        /// As it was.
        old: CachedNode,
        /// As it is.
        new: CachedNode,
    },
    /// A node left the cache.
    Deleted(CachedNode),
    /// A full read of the tree finished (after the start, and after every reconnection or
    /// new session): the cache matched the server as of that read.
    Initialized,
}

/// The memory the cache's nodes take, as far as the cache can count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheMemory {
    /// Nodes held.
    pub nodes: usize,
    /// Bytes: the map's table (its capacity's slots), every path and every node's data.
    pub bytes: usize,
}

impl CacheMemory {
    /// Bytes per node held (0 for none).
    pub fn per_node(&self) -> usize {
        self.bytes.checked_div(self.nodes).unwrap_or(0)
    }
}

type Listener = Arc<dyn Fn(&CacheEvent) + Send + Sync>;

/// One node, stored.
struct Entry {
    stat: Stat,
    data: Option<Arc<[u8]>>,
}

/// A cache of a node and its subtree that stays current: Apache Curator's `CuratorCache`.
/// [`start`](Self::start) sets a persistent recursive watch on the path (ZooKeeper ≥ 3.6),
/// then reads the whole tree; from then on a thread of its own reads again each node a watch
/// event names, and reads the whole tree again after every reconnection and on every new
/// session (the server replays nothing for a persistent watch). Reads come from memory.
///
/// What it promises (`recipes/cache.md`):
/// - A node never shows an older state than one it showed: a node's data is taken only if
///   it changed no earlier (`mzxid`) than what is shown, and every change is learnt from a
///   read sent after the event that announced it (an event alone never changes the cache:
///   a deletion announced is a read that finds the node gone).
/// - It converges: after the faults stop, a full read brings it to the server's state.
/// - It says when it is stale: [`is_current`](Self::is_current) is false while the
///   connection is down, and from a reconnection or a new session until the next full read
///   is done.
///
/// On ZooKeeper 3.6–3.8, do not set plain watches on the cached path from the same client:
/// the server then turns the recursive watch into a one-shot one (ZOOKEEPER-4466, fixed in
/// 3.9), and the cache stops hearing of changes below it.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::cache::{CacheEvent, CacheOptions, CuratorCache};
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let config = CuratorCache::new(&client, "/config/app", CacheOptions::default())?;
/// config.add_listener(|e| {
///     if let CacheEvent::Changed { new, .. } = e {
///         println!("{} changed", new.path);
///     }
/// });
/// config.start()?;
/// assert!(config.wait_current(Duration::from_secs(10)));
/// if let Some(node) = config.get("/config/app/timeout") {
///     println!("timeout: {:?}", node.data);
/// }
/// config.close();
/// # Ok(())
/// # }
/// ```
pub struct CuratorCache {
    inner: Arc<Inner>,
    worker: Worker,
}

struct Inner {
    core: LockCore,
    options: CacheOptions,
    state: Mutex<State>,
    changed: Condvar,
    listeners: Mutex<Vec<Listener>>,
    wake: (Sender<WatchEvent>, Receiver<WatchEvent>),
}

#[derive(Default)]
struct State {
    nodes: HashMap<Box<str>, Entry>,
    /// Paths an event named that are still to be read.
    dirty: BTreeSet<String>,
    /// The session and connection of the last full read (and its watch); `None` until one.
    built_on: Option<(SessionId, u64)>,
    started: bool,
    closed: bool,
}

impl std::fmt::Debug for CuratorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuratorCache")
            .field("path", &self.inner.core.path)
            .field("nodes", &self.inner.state.lock().nodes.len())
            .finish()
    }
}

impl CuratorCache {
    /// A cache of `path` (and its subtree, unless [`CacheOptions::single_node`]; not the
    /// root, `/`). Nothing happens before [`start`](Self::start).
    pub fn new(client: &Client, path: &str, options: CacheOptions) -> Result<CuratorCache> {
        paths::validate(path, false)?;
        Ok(CuratorCache {
            inner: Arc::new(Inner {
                core: LockCore::new(client, path, LockOptions::new())?,
                options,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                listeners: Mutex::new(Vec::new()),
                wake: unbounded(),
            }),
            worker: Worker::default(),
        })
    }

    /// Calls `listener`, on the cache's thread, with each change of the cache, in order.
    pub fn add_listener(&self, listener: impl Fn(&CacheEvent) + Send + Sync + 'static) {
        self.inner.listeners.lock().push(Arc::new(listener));
    }

    /// Starts the cache's thread, which sets the watch and reads the tree. Returns at once;
    /// [`wait_current`](Self::wait_current) waits for the first full read.
    ///
    /// # Errors
    /// `IllegalState` if started before, or closed.
    pub fn start(&self) -> Result<()> {
        {
            let mut state = self.inner.state.lock();
            if state.started || state.closed {
                return Err(Error::IllegalState("the cache was started already".into()));
            }
            state.started = true;
        }
        let inner = self.inner.clone();
        let closing = self.inner.clone();
        self.worker.spawn(
            "zk-cache",
            || closing.state.lock().closed,
            move |stop| inner.run(stop),
        )?;
        Ok(())
    }

    /// The node at `path`, as cached.
    pub fn get(&self, path: &str) -> Option<CachedNode> {
        let state = self.inner.state.lock();
        state.nodes.get(path).map(|e| e.node(path))
    }

    /// The cached children of `path` (their names, sorted).
    pub fn children(&self, path: &str) -> Vec<String> {
        let state = self.inner.state.lock();
        let mut names: Vec<String> = state
            .nodes
            .keys()
            .filter(|p| paths::parent(p) == Some(path))
            .map(|p| paths::node_name(p).to_owned())
            .collect();
        names.sort();
        names
    }

    /// Every cached node, sorted by path.
    pub fn nodes(&self) -> Vec<CachedNode> {
        let state = self.inner.state.lock();
        let mut all: Vec<CachedNode> = state.nodes.iter().map(|(p, e)| e.node(p)).collect();
        all.sort_by(|a, b| a.path.cmp(&b.path));
        all
    }

    /// How many nodes are cached.
    pub fn size(&self) -> usize {
        self.inner.state.lock().nodes.len()
    }

    /// The memory the cached nodes take.
    pub fn memory(&self) -> CacheMemory {
        let state = self.inner.state.lock();
        let slot = std::mem::size_of::<(Box<str>, Entry)>() + 1;
        let bytes = state.nodes.capacity() * slot
            + state
                .nodes
                .iter()
                .map(|(p, e)| p.len() + e.data.as_ref().map_or(0, |d| d.len() + 16))
                .sum::<usize>();
        CacheMemory {
            nodes: state.nodes.len(),
            bytes,
        }
    }

    /// True while the cache matches a full read made, with its watch, on the connection that
    /// is up now (changes since are being read): false before the first, while the
    /// connection is down, and after a reconnection or a new session until the next is done.
    pub fn is_current(&self) -> bool {
        let state = self.inner.state.lock();
        self.inner.is_current_locked(&state)
    }

    /// Waits at most `timeout` until [`is_current`](Self::is_current); true then.
    pub fn wait_current(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut state = self.inner.state.lock();
        loop {
            if state.closed {
                return false;
            }
            if self.inner.is_current_locked(&state) {
                return true;
            }
            // Current only by a full read on the connection that is up, which wakes this.
            if self.inner.changed.wait_until(&mut state, until).timed_out() {
                return self.inner.is_current_locked(&state);
            }
        }
    }

    /// Stops the cache (its watch taken back; what it holds stays readable). Idempotent; also
    /// done on drop.
    pub fn close(&self) {
        self.inner.state.lock().closed = true;
        self.inner.changed.notify_all();
        self.worker.stop();
        let client = self
            .inner
            .core
            .client
            .with_deadline(Instant::now() + Duration::from_secs(1));
        if let Err(e) = client.remove_watch(&self.inner.core.path, &self.inner.wake.0) {
            debug!("{}: removing the cache's watch: {e}", self.inner.core.path);
        }
    }
}

impl Drop for CuratorCache {
    fn drop(&mut self) {
        self.close();
    }
}

/// A read's error that means the node is not there for this client: gone, or not its to
/// read (the server leaves such a node's events out as well).
fn unseen(e: &Error) -> bool {
    e.is_no_node() || e.is_code(ZkCode::NoAuth)
}

impl Entry {
    fn node(&self, path: &str) -> CachedNode {
        CachedNode {
            path: path.to_owned(),
            stat: self.stat,
            data: self.data.clone(),
        }
    }
}

impl Inner {
    fn run(&self, stop: &Receiver<()>) {
        let after_error = |e: &Error| {
            debug!("{}: {e}", self.core.path);
            if e.is_code(ZkCode::NoAuth) || e.is_code(ZkCode::InvalidAcl) {
                warn!("the cache of {}: {e}", self.core.path);
                return AfterError::Later;
            }
            AfterError::Backoff
        };
        let rules = Rules {
            // Stale at once (`is_current` sees the connection); read again when it is back.
            look_when_suspended: false,
            after_error: &after_error,
        };
        follow(
            &self.core,
            stop,
            (&self.wake.0, &self.wake.1),
            &rules,
            |looking| self.look(looking),
        );
    }

    /// One look: a full read if the last was on another connection (or none was), else a read
    /// of each node the events named.
    fn look(&self, looking: &mut Looking<'_, '_>) -> Result<Option<Instant>> {
        let client = self.client();
        let path = &self.core.path;
        for e in looking.take() {
            if matches!(
                e.kind,
                WatchKind::Created | WatchKind::DataChanged | WatchKind::Deleted
            ) && self.covers(&e.path)
            {
                self.state.lock().dirty.insert(e.path);
            }
        }
        let on = connection_of(&client);
        if on.is_none() {
            return Err(Error::ConnectionLoss);
        }
        if self.state.lock().built_on != on {
            let mode = if self.options.single_node {
                AddWatchMode::Persistent
            } else {
                AddWatchMode::PersistentRecursive
            };
            // The watch first: what changes from here on is announced, and the reads below
            // (sent after it on this connection) see at least what it was set on.
            client.add_watch(path, mode, looking.tx)?;
            let dirty_before = std::mem::take(&mut self.state.lock().dirty);
            if let Err(e) = self.rebuild() {
                self.state.lock().dirty.extend(dirty_before);
                return Err(e);
            }
            if connection_of(&client) != on {
                // The connection changed under the read: read again on the new one.
                return Err(Error::ConnectionLoss);
            }
            self.state.lock().built_on = on;
            self.changed.notify_all();
            self.tell(&[CacheEvent::Initialized]);
            return Ok(None);
        }
        let dirty: Vec<String> = std::mem::take(&mut self.state.lock().dirty)
            .into_iter()
            .collect();
        self.reread(&dirty)?;
        Ok(None)
    }

    /// True if `path` is the cache's node or (in a tree cache) below it.
    fn covers(&self, path: &str) -> bool {
        let root = self.core.path.as_str();
        path == root
            || (!self.options.single_node
                && path.starts_with(root)
                && path.as_bytes().get(root.len()) == Some(&b'/'))
    }

    /// Reads the whole tree, level by level (each level's reads in pipelines), and makes the
    /// cache match it: nodes not found are gone.
    fn rebuild(&self) -> Result<()> {
        let mut found: HashSet<String> = HashSet::new();
        let mut level = vec![self.core.path.clone()];
        while !level.is_empty() {
            let mut next = Vec::new();
            for chunk in level.chunks(BATCH / 2) {
                let mut ops = Vec::with_capacity(chunk.len() * 2);
                for p in chunk {
                    ops.push(Op::GetData { path: p.clone() });
                    if !self.options.single_node {
                        ops.push(Op::GetChildren { path: p.clone() });
                    }
                }
                let results = self.client().pipeline(&ops)?;
                let per = if self.options.single_node { 1 } else { 2 };
                let mut events = Vec::new();
                for (i, p) in chunk.iter().enumerate() {
                    let data = results.get(i * per);
                    match data {
                        Some(Ok(OpResult::Data(bytes, stat))) => {
                            found.insert(p.clone());
                            self.apply(p, Some((bytes.clone(), *stat)), &mut events);
                        }
                        // Gone, or not ours to read (the server leaves its events out too).
                        Some(Err(e)) if unseen(e) => continue,
                        Some(Err(e)) => return Err(e.clone()),
                        _ => return Err(Error::Protocol(format!("no data in the answer for {p}"))),
                    }
                    if self.options.single_node {
                        continue;
                    }
                    match results.get(i * per + 1) {
                        Some(Ok(OpResult::Children(names))) => {
                            next.extend(names.iter().map(|n| paths::join(p, n)));
                        }
                        Some(Err(e)) if unseen(e) => {}
                        // A listing that failed leaves the read unfinished: its subtree would
                        // be taken for gone.
                        Some(Err(e)) => return Err(e.clone()),
                        _ => {
                            return Err(Error::Protocol(format!(
                                "no children in the answer for {p}"
                            )))
                        }
                    }
                }
                self.tell(&events);
            }
            level = next;
        }
        // What the read did not find is gone.
        let gone: Vec<String> = {
            let state = self.state.lock();
            state
                .nodes
                .keys()
                .filter(|p| !found.contains(&***p))
                .map(|p| p.to_string())
                .collect()
        };
        let mut events = Vec::new();
        for p in gone {
            self.apply(&p, None, &mut events);
        }
        self.tell(&events);
        Ok(())
    }

    /// Reads each of `dirty` again (in pipelines, each with a deadline of its own) and
    /// applies what it finds; on an error, what is not read yet stays to be read.
    fn reread(&self, dirty: &[String]) -> Result<()> {
        for (k, chunk) in dirty.chunks(BATCH).enumerate() {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|p| Op::GetData { path: p.clone() })
                .collect();
            let results = match self.client().pipeline(&ops) {
                Ok(results) => results,
                Err(e) => {
                    let left = dirty.iter().skip(k * BATCH).cloned();
                    self.state.lock().dirty.extend(left);
                    return Err(e);
                }
            };
            let mut events = Vec::new();
            for (p, r) in chunk.iter().zip(results) {
                match r {
                    Ok(OpResult::Data(bytes, stat)) => {
                        self.apply(p, Some((bytes, stat)), &mut events)
                    }
                    Err(e) if unseen(&e) => self.apply(p, None, &mut events),
                    Err(e) => {
                        self.tell(&events);
                        let left = dirty.iter().skip(k * BATCH).cloned();
                        self.state.lock().dirty.extend(left);
                        return Err(e);
                    }
                    Ok(_) => {}
                }
            }
            self.tell(&events);
        }
        Ok(())
    }

    /// The client, its calls bounded by one step's deadline.
    fn client(&self) -> Client {
        self.core.client.with_deadline(Instant::now() + STEP_WAIT)
    }

    /// Applies a read of `path` (`None`: not there): a node's data is taken only if it changed
    /// no earlier than what is shown (and a node made again, by its `czxid`, is newer).
    fn apply(&self, path: &str, read: Option<(Vec<u8>, Stat)>, events: &mut Vec<CacheEvent>) {
        let mut state = self.state.lock();
        match read {
            Some((bytes, stat)) => {
                let data = (!self.options.without_data).then(|| Arc::<[u8]>::from(bytes));
                let new = Entry { stat, data };
                match state.nodes.get_mut(path) {
                    Some(old) if (stat.czxid, stat.mzxid) <= (old.stat.czxid, old.stat.mzxid) => {
                        // The same or older: kept (a newer stat of the same data, its
                        // children's count say, is taken quietly).
                        if stat.czxid == old.stat.czxid
                            && stat.mzxid == old.stat.mzxid
                            && stat.pzxid >= old.stat.pzxid
                        {
                            old.stat = stat;
                        }
                    }
                    Some(old) => {
                        let before = old.node(path);
                        *old = new;
                        events.push(CacheEvent::Changed {
                            old: before,
                            new: old.node(path),
                        });
                    }
                    None => {
                        events.push(CacheEvent::Created(new.node(path)));
                        state.nodes.insert(path.into(), new);
                    }
                }
            }
            None => {
                // Gone, and with it anything cached below it.
                let prefix = format!("{}/", path.trim_end_matches('/'));
                let below: Vec<Box<str>> = state
                    .nodes
                    .keys()
                    .filter(|p| p.starts_with(&prefix))
                    .cloned()
                    .collect();
                for p in below.iter().map(|p| &**p).chain([path]) {
                    if let Some(old) = state.nodes.remove(p) {
                        events.push(CacheEvent::Deleted(old.node(p)));
                    }
                }
            }
        }
    }

    fn tell(&self, events: &[CacheEvent]) {
        if events.is_empty() {
            return;
        }
        self.changed.notify_all();
        let listeners = self.listeners.lock().clone();
        for e in events {
            for l in &listeners {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(e))).is_err() {
                    warn!("a listener of the cache of {} panicked", self.core.path);
                }
            }
        }
    }

    fn is_current_locked(&self, state: &State) -> bool {
        let client = &self.core.client;
        !state.closed
            && client.is_connected()
            && state.built_on.is_some()
            && state.built_on == connection_of(client)
    }
}
