//! A cache of a node and its subtree, kept current from a persistent recursive watch
//! (Curator's `CuratorCache`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, info, warn};
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
    /// Watch with the one-shot watches every read leaves (a data and a child watch per
    /// node, as Curator's older `TreeCache`), not with one persistent watch. The cache falls
    /// back to these by itself on a server that has no persistent watches (ZooKeeper before
    /// 3.6 answers `addWatch` with `Unimplemented`; one whose watch manager lacks them, with
    /// `MarshallingError`); this asks for them from the start.
    pub one_shot_watches: bool,
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

    /// One-shot watches from the start (see [`one_shot_watches`](Self::one_shot_watches)).
    pub fn one_shot_watches(mut self) -> CacheOptions {
        self.one_shot_watches = true;
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
    /// By path: a node's subtree is a range (what leaves with a node, a node's children).
    nodes: BTreeMap<Box<str>, Entry>,
    /// Paths an event named that are still to be read.
    dirty: BTreeSet<String>,
    /// With one-shot watches: paths whose children changed, still to be listed.
    dirty_children: BTreeSet<String>,
    /// Watching with one-shot watches (asked for, or the server has no persistent ones).
    one_shot: bool,
    /// The session and connection of the last full read (and its watch); `None` until one.
    built_on: Option<(SessionId, u64)>,
    started: bool,
    closed: bool,
}

impl State {
    /// The cached nodes below `path`, at every depth, in path order.
    fn below<'s>(&'s self, path: &str) -> impl Iterator<Item = &'s str> + 's {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.nodes
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .map(|(p, _)| &**p)
            .take_while(move |p| p.starts_with(&prefix))
    }

    /// The cached children of `path` (their paths), in path order.
    fn children_of<'s>(&'s self, path: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.below(path)
            .filter(move |p| paths::parent(p) == Some(path))
    }
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
                state: Mutex::new(State {
                    one_shot: options.one_shot_watches,
                    ..State::default()
                }),
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
        state
            .children_of(path)
            .map(|p| paths::node_name(p).to_owned())
            .collect()
    }

    /// Every cached node, sorted by path.
    pub fn nodes(&self) -> Vec<CachedNode> {
        let state = self.inner.state.lock();
        state.nodes.iter().map(|(p, e)| e.node(p)).collect()
    }

    /// How many nodes are cached.
    pub fn size(&self) -> usize {
        self.inner.state.lock().nodes.len()
    }

    /// The memory the cached nodes take: each node's entry in the map (its path's handle and
    /// its stat, with a half again for the B-tree's spare room and links: an estimate, as the
    /// standard map does not say), its path and its data.
    pub fn memory(&self) -> CacheMemory {
        let state = self.inner.state.lock();
        let slot = std::mem::size_of::<(Box<str>, Entry)>() * 3 / 2;
        let bytes = state.nodes.len() * slot
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
        let one_shot: Option<Vec<Box<str>>> = {
            let state = self.inner.state.lock();
            state
                .one_shot
                .then(|| state.nodes.keys().cloned().collect())
        };
        match one_shot {
            // What the server still holds fires once, into a channel nobody reads.
            Some(paths) => {
                let root = self.inner.core.path.as_str();
                for p in paths.iter().map(|p| &**p).chain([root]) {
                    client.forget_watch(p, &self.inner.wake.0);
                }
            }
            None => {
                if let Err(e) = client.remove_watch(&self.inner.core.path, &self.inner.wake.0) {
                    debug!("{}: removing the cache's watch: {e}", self.inner.core.path);
                }
            }
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

/// An `addWatch` error that says the server has no persistent watches: `Unimplemented`
/// (before 3.6, which also drops the connection), or `MarshallingError` (3.6+ with a watch
/// manager that lacks them, such as `WatchManagerOptimized`).
fn without_persistent_watches(e: &Error) -> bool {
    e.is_code(ZkCode::Unimplemented) || e.is_code(ZkCode::MarshallingError)
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
    /// of each node the events named (and, with one-shot watches, a listing of each node whose
    /// children changed).
    fn look(&self, looking: &mut Looking<'_, '_>) -> Result<Option<Instant>> {
        let client = self.client();
        let path = &self.core.path;
        for e in looking.take() {
            if !self.covers(&e.path) {
                continue;
            }
            let mut state = self.state.lock();
            match e.kind {
                // With one-shot watches, only the root's exist watch says so: read it all.
                WatchKind::Created if state.one_shot => state.built_on = None,
                // Read, and listed: a node made again has children of its own to watch.
                WatchKind::Deleted if state.one_shot => {
                    state.dirty.insert(e.path.clone());
                    state.dirty_children.insert(e.path);
                }
                WatchKind::Created | WatchKind::DataChanged | WatchKind::Deleted => {
                    state.dirty.insert(e.path);
                }
                WatchKind::ChildrenChanged if state.one_shot => {
                    state.dirty_children.insert(e.path);
                }
                _ => {}
            }
        }
        let on = connection_of(&client);
        if on.is_none() {
            return Err(client.connection_loss());
        }
        if self.state.lock().built_on != on {
            if !self.state.lock().one_shot {
                let mode = if self.options.single_node {
                    AddWatchMode::Persistent
                } else {
                    AddWatchMode::PersistentRecursive
                };
                // The watch first: what changes from here on is announced, and the reads
                // below (sent after it on this connection) see at least what it was set on.
                match client.add_watch(path, mode, looking.tx) {
                    Ok(()) => {}
                    Err(e) if without_persistent_watches(&e) => {
                        info!(
                            "the cache of {path}: the server has no persistent watches ({e}); \
                             each read leaves one-shot watches instead"
                        );
                        self.state.lock().one_shot = true;
                        // Not restored on a reconnection (a server before 3.6 would close it).
                        client.forget_watch(path, looking.tx);
                    }
                    Err(e) => return Err(e),
                }
            }
            let watch = self.one_shot_tx(looking.tx);
            let before = {
                let mut state = self.state.lock();
                (
                    std::mem::take(&mut state.dirty),
                    std::mem::take(&mut state.dirty_children),
                )
            };
            if let Err(e) = self.rebuild(watch) {
                let mut state = self.state.lock();
                state.dirty.extend(before.0);
                state.dirty_children.extend(before.1);
                return Err(e);
            }
            if connection_of(&client) != on {
                // The connection changed under the read: read again on the new one.
                return Err(client.connection_loss());
            }
            self.state.lock().built_on = on;
            self.changed.notify_all();
            self.tell(&[CacheEvent::Initialized]);
            return Ok(None);
        }
        let watch = self.one_shot_tx(looking.tx);
        let (dirty, listings): (Vec<String>, Vec<String>) = {
            let mut state = self.state.lock();
            (
                std::mem::take(&mut state.dirty).into_iter().collect(),
                std::mem::take(&mut state.dirty_children)
                    .into_iter()
                    .collect(),
            )
        };
        let again = match self.reread(&dirty, watch) {
            Ok(again) => again,
            Err(e) => {
                // Not listed yet: kept to be listed (the parents' child watches fired).
                self.state.lock().dirty_children.extend(listings);
                return Err(e);
            }
        };
        self.relist(&listings, watch)?;
        Ok(again.then(Instant::now))
    }

    /// The channel the reads' one-shot watches report into, if the cache watches so.
    fn one_shot_tx<'t>(&self, tx: &'t Sender<WatchEvent>) -> Option<&'t Sender<WatchEvent>> {
        self.state.lock().one_shot.then_some(tx)
    }

    /// Sends `ops` in one pipeline: with `watch`, each read leaves its one-shot watch.
    fn send(
        &self,
        ops: &[Op],
        watch: Option<&Sender<WatchEvent>>,
    ) -> Result<Vec<Result<OpResult>>> {
        match watch {
            Some(tx) => self.client().pipeline_watched(ops, tx),
            None => self.client().pipeline(ops),
        }
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
    /// cache match it: nodes not found are gone. With one-shot watches, a root found missing
    /// is watched for its creation.
    fn rebuild(&self, watch: Option<&Sender<WatchEvent>>) -> Result<()> {
        let root = self.core.path.clone();
        let found = loop {
            let mut found = HashSet::new();
            self.read_subtrees(vec![root.clone()], watch, &mut found)?;
            let Some(tx) = watch.filter(|_| !found.contains(&root)) else {
                break found;
            };
            match self
                .client()
                .pipeline_watched(&[Op::Exists { path: root.clone() }], tx)?
                .pop()
            {
                // Made since the read: read again (its exist watch is a data watch now).
                Some(Ok(OpResult::Exists(Some(_)))) => continue,
                Some(Err(e)) if !unseen(&e) => return Err(e),
                _ => break found,
            }
        };
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

    /// Reads the nodes `level` and everything below them, level by level (each level's reads
    /// in pipelines), adding the paths found to `found`. Listeners hear what was applied, also
    /// when a step fails.
    fn read_subtrees(
        &self,
        mut level: Vec<String>,
        watch: Option<&Sender<WatchEvent>>,
        found: &mut HashSet<String>,
    ) -> Result<()> {
        while !level.is_empty() {
            let mut next = Vec::new();
            for chunk in level.chunks(BATCH / 2) {
                let mut events = Vec::new();
                let read = self.read_chunk(chunk, watch, found, &mut next, &mut events);
                self.tell(&events);
                read?;
            }
            level = next;
        }
        Ok(())
    }

    /// One pipeline of [`read_subtrees`](Self::read_subtrees): the nodes of `chunk` read and
    /// applied (into `events`), their children added to `next`.
    fn read_chunk(
        &self,
        chunk: &[String],
        watch: Option<&Sender<WatchEvent>>,
        found: &mut HashSet<String>,
        next: &mut Vec<String>,
        events: &mut Vec<CacheEvent>,
    ) -> Result<()> {
        let mut ops = Vec::with_capacity(chunk.len() * 2);
        for p in chunk {
            ops.push(Op::GetData { path: p.clone() });
            if !self.options.single_node {
                ops.push(Op::GetChildren { path: p.clone() });
            }
        }
        let results = self.send(&ops, watch)?;
        let per = if self.options.single_node { 1 } else { 2 };
        for (i, p) in chunk.iter().enumerate() {
            match results.get(i * per) {
                Some(Ok(OpResult::Data(bytes, stat))) => {
                    found.insert(p.clone());
                    self.apply(p, Some((bytes.clone(), *stat)), events);
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
                // A listing that failed leaves the read unfinished: its subtree would be taken
                // for gone.
                Some(Err(e)) => return Err(e.clone()),
                _ => {
                    return Err(Error::Protocol(format!(
                        "no children in the answer for {p}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// Reads each of `dirty` again (in pipelines, each with a deadline of its own) and
    /// applies what it finds; on an error, what is not read yet stays to be read. With
    /// one-shot watches, each read leaves its watch, and a root found gone is watched for its
    /// creation: true if it came back meanwhile (the whole tree is then to be read).
    fn reread(&self, dirty: &[String], watch: Option<&Sender<WatchEvent>>) -> Result<bool> {
        let root = self.core.path.as_str();
        let mut root_gone = false;
        for (k, chunk) in dirty.chunks(BATCH).enumerate() {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|p| Op::GetData { path: p.clone() })
                .collect();
            let left = || dirty.iter().skip(k * BATCH).cloned();
            let results = match self.send(&ops, watch) {
                Ok(results) => results,
                Err(e) => {
                    self.state.lock().dirty.extend(left());
                    return Err(e);
                }
            };
            let mut events = Vec::new();
            for (p, r) in chunk.iter().zip(results) {
                match r {
                    Ok(OpResult::Data(bytes, stat)) => {
                        self.apply(p, Some((bytes, stat)), &mut events)
                    }
                    Err(e) if unseen(&e) => {
                        root_gone |= p == root;
                        self.apply(p, None, &mut events)
                    }
                    Err(e) => {
                        self.tell(&events);
                        self.state.lock().dirty.extend(left());
                        return Err(e);
                    }
                    Ok(_) => {}
                }
            }
            self.tell(&events);
        }
        let Some(tx) = watch.filter(|_| root_gone) else {
            return Ok(false);
        };
        let op = [Op::Exists {
            path: root.to_owned(),
        }];
        match self.client().pipeline_watched(&op, tx)?.pop() {
            Some(Ok(OpResult::Exists(Some(_)))) => {
                self.state.lock().built_on = None;
                Ok(true)
            }
            Some(Err(e)) if !unseen(&e) => {
                self.state.lock().dirty.insert(root.to_owned());
                Err(e)
            }
            _ => Ok(false),
        }
    }

    /// With one-shot watches: lists each of `parents` again (leaving its child watch), reads
    /// every child not cached with everything below it, and drops the cached children the
    /// listing left out (gone: the listing is newer than anything cached). On an error, what
    /// is not listed yet stays to be listed.
    fn relist(&self, parents: &[String], watch: Option<&Sender<WatchEvent>>) -> Result<()> {
        let Some(tx) = watch.filter(|_| !self.options.single_node) else {
            return Ok(());
        };
        for (k, chunk) in parents.chunks(BATCH).enumerate() {
            let left = || parents.iter().skip(k * BATCH).cloned();
            let ops: Vec<Op> = chunk
                .iter()
                .map(|p| Op::GetChildren { path: p.clone() })
                .collect();
            let results = match self.client().pipeline_watched(&ops, tx) {
                Ok(results) => results,
                Err(e) => {
                    self.state.lock().dirty_children.extend(left());
                    return Err(e);
                }
            };
            let mut new = Vec::new();
            let mut events = Vec::new();
            for (p, r) in chunk.iter().zip(results) {
                let listed: HashSet<String> = match r {
                    Ok(OpResult::Children(names)) => {
                        names.iter().map(|n| paths::join(p, n)).collect()
                    }
                    // Gone: its own data watch says so, and its read drops it.
                    Err(e) if unseen(&e) => continue,
                    Err(e) => {
                        self.tell(&events);
                        self.state.lock().dirty_children.extend(left());
                        return Err(e);
                    }
                    Ok(_) => continue,
                };
                let cached: HashSet<String> = self.children(p).into_iter().collect();
                for c in &cached {
                    if !listed.contains(c) {
                        self.apply(c, None, &mut events);
                    }
                }
                new.extend(listed.into_iter().filter(|c| !cached.contains(c)));
            }
            self.tell(&events);
            let mut read = HashSet::new();
            if let Err(e) = self.read_subtrees(new, watch, &mut read) {
                // Listed again: the parents, and every node read so far (its children may be
                // read only in part; a listing reads what is missing below it).
                let mut state = self.state.lock();
                state.dirty_children.extend(left());
                state.dirty_children.extend(read);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The cached children of `path` (their paths).
    fn children(&self, path: &str) -> Vec<String> {
        let state = self.state.lock();
        state.children_of(path).map(str::to_owned).collect()
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
                // Deepest first, as the server deletes (children before their parent).
                let below: Vec<String> = state.below(path).map(str::to_owned).collect();
                for p in below.iter().rev().map(String::as_str).chain([path]) {
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
