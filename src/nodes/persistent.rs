//! A node the recipe keeps present across connection and session loss (Curator's
//! `PersistentNode` and `PersistentTtlNode`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

use crate::lock::core::LockCore;
use crate::lock::follow::{follow, AfterError, Looking, Rules, Worker};
use crate::lock::names::{ProtectedId, PROTECTED_PREFIX};
use crate::{paths, Client, CreateMode, Error, LockOptions, Result, SessionId, WatchEvent};

/// The child a [`NodeMode::PersistentWithTtl`] node is kept alive by (Curator's name): the
/// server removes a TTL node only once it has no children and has not changed for its TTL.
pub const TTL_TOUCH_NODE: &str = "touch";

/// The longest one look at the node takes (its calls together).
const LOOK_WAIT: Duration = Duration::from_secs(1);

/// What kind of node a [`PersistentNode`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeMode {
    /// An ephemeral node at the path: it goes with the session, and the recipe makes it
    /// again on the next one.
    Ephemeral,
    /// An ephemeral node named `_c_<id>-<name>` in the path's parent, where `<id>` carries the
    /// session (Curator's protected names): a new name on each session.
    ProtectedEphemeral,
    /// A persistent node at the path, made again if someone deletes it; deleted by
    /// [`close`](PersistentNode::close).
    Persistent,
    /// A persistent node with a TTL (servers started with
    /// `zookeeper.extendedTypesEnabled=true`), kept alive while the recipe runs by touching
    /// its [`TTL_TOUCH_NODE`] child every half TTL; left to expire by
    /// [`close`](PersistentNode::close), as Curator's `PersistentTtlNode` does.
    PersistentWithTtl(Duration),
}

impl NodeMode {
    fn is_ephemeral(self) -> bool {
        matches!(self, NodeMode::Ephemeral | NodeMode::ProtectedEphemeral)
    }

    fn create_mode(self) -> CreateMode {
        match self {
            NodeMode::Ephemeral | NodeMode::ProtectedEphemeral => CreateMode::Ephemeral,
            NodeMode::Persistent => CreateMode::Persistent,
            NodeMode::PersistentWithTtl(ttl) => CreateMode::PersistentWithTtl(ttl),
        }
    }
}

/// What a [`PersistentNode`]'s listeners hear.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// The node was created at this path (the first time, and each time it was made again).
    Created(String),
    /// The node could not be made: a permanent error (`NoAuth`, an invalid ACL, ...). The
    /// recipe tries again on the next connection or session.
    Failed(Error),
}

type Listener = Arc<dyn Fn(&NodeEvent) + Send + Sync>;

/// A node that the recipe keeps present: made when [`start`](Self::start)ed, made again
/// (with the data it was last given) whenever it is deleted or goes with a lost session, and
/// removed by [`close`](Self::close). A change of the data by someone else is left alone, as
/// Curator leaves it; [`set_data`](Self::set_data) writes ours. Apache
/// Curator's `PersistentNode` (and `PersistentTtlNode` with
/// [`NodeMode::PersistentWithTtl`]); a thread of its own follows the node.
///
/// Unlike Curator's, an ephemeral node at the path that another session owns is not taken
/// over: it is waited out (it goes with its session), and ours is made then.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::nodes::{NodeMode, PersistentNode};
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let node = PersistentNode::new(&client, "/services/reports/host-a", NodeMode::Ephemeral, b"10.0.0.7:8080")?;
/// node.start()?;
/// assert!(node.wait_for_initial_create(Duration::from_secs(10))?);
/// // ... the node stays while this process runs, across reconnects and new sessions ...
/// node.close();
/// # Ok(())
/// # }
/// ```
pub struct PersistentNode {
    inner: Arc<Inner>,
    worker: Worker,
}

struct Inner {
    /// The client and the path (for a protected node, the path whose name is protected).
    core: LockCore,
    mode: NodeMode,
    state: Mutex<State>,
    changed: Condvar,
    listeners: Mutex<Vec<Listener>>,
    /// Wakes the node's thread when the data changes.
    nudge: Sender<WatchEvent>,
    nudged: Mutex<Option<Receiver<WatchEvent>>>,
}

#[derive(Default)]
struct State {
    data: Vec<u8>,
    /// The data may differ from the server's: write it at the next look.
    dirty: bool,
    /// The node as made: its path and the session it was made under.
    made: Option<(String, SessionId)>,
    /// A protected node's name for the current session (kept until made, so that a create
    /// whose answer was lost goes again under the same name).
    protected: Option<(String, SessionId)>,
    created_once: bool,
    /// A create has gone out (its answer may have been lost): close looks for the node.
    tried: bool,
    /// Creates under the protected name whose answers were lost: each may still land, even
    /// after close deleted the node (see the client's janitor), so close has the janitor look
    /// for that many landings while the session lives.
    lost: u32,
    started: bool,
    closed: bool,
    /// When `close()` must have returned by.
    close_by: Option<Instant>,
}

impl std::fmt::Debug for PersistentNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentNode")
            .field("path", &self.inner.core.path)
            .field("mode", &self.inner.mode)
            .field("actual", &self.actual_path())
            .finish()
    }
}

impl PersistentNode {
    /// A node at `path` (for [`NodeMode::ProtectedEphemeral`], `path`'s parent holds it, under
    /// a protected form of its name) with `data`. Nothing happens before
    /// [`start`](Self::start).
    pub fn new(client: &Client, path: &str, mode: NodeMode, data: &[u8]) -> Result<PersistentNode> {
        Self::with_options(client, path, mode, data, LockOptions::new())
    }

    /// Test hook: a node whose creates run `options`' `testing_before_create` hook (with the
    /// node's path) before they go out.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_with_options(
        client: &Client,
        path: &str,
        mode: NodeMode,
        data: &[u8],
        options: LockOptions,
    ) -> Result<PersistentNode> {
        Self::with_options(client, path, mode, data, options)
    }

    fn with_options(
        client: &Client,
        path: &str,
        mode: NodeMode,
        data: &[u8],
        options: LockOptions,
    ) -> Result<PersistentNode> {
        if paths::parent(path).is_none() {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "a persistent node needs a path of its own, not the root",
            });
        }
        let (nudge, nudged) = unbounded();
        Ok(PersistentNode {
            inner: Arc::new(Inner {
                core: LockCore::new(client, path, options)?,
                mode,
                state: Mutex::new(State {
                    data: data.to_vec(),
                    ..State::default()
                }),
                changed: Condvar::new(),
                listeners: Mutex::new(Vec::new()),
                nudge,
                nudged: Mutex::new(Some(nudged)),
            }),
            worker: Worker::default(),
        })
    }

    /// Calls `listener` (on the node's own thread) when the node is made, and when it cannot
    /// be.
    pub fn add_listener(&self, listener: impl Fn(&NodeEvent) + Send + Sync + 'static) {
        self.inner.listeners.lock().push(Arc::new(listener));
    }

    /// Starts keeping the node. Returns at once.
    ///
    /// # Errors
    /// `IllegalState` if started before, or closed.
    pub fn start(&self) -> Result<()> {
        {
            let mut state = self.inner.state.lock();
            if state.started || state.closed {
                return Err(Error::IllegalState(
                    "the persistent node was started already".into(),
                ));
            }
            state.started = true;
        }
        let Some(nudged) = self.inner.nudged.lock().take() else {
            return Err(Error::IllegalState(
                "the persistent node was started already".into(),
            ));
        };
        let inner = self.inner.clone();
        let closing = self.inner.clone();
        self.worker.spawn(
            "zk-persistent-node",
            || closing.state.lock().closed,
            move |stop| inner.run(stop, &nudged),
        )?;
        Ok(())
    }

    /// Waits at most `timeout` for the node's first creation (or for a node found at the path
    /// to be taken as ours): true once it is. Returns at once if that happened already.
    ///
    /// # Errors
    /// `IllegalState` if not started.
    pub fn wait_for_initial_create(&self, timeout: Duration) -> Result<bool> {
        let until = Instant::now() + timeout;
        let mut state = self.inner.state.lock();
        if !state.started {
            return Err(Error::IllegalState(
                "the persistent node is not started".into(),
            ));
        }
        while !state.created_once && !state.closed {
            if self.inner.changed.wait_until(&mut state, until).timed_out() {
                break;
            }
        }
        Ok(state.created_once)
    }

    /// The node's path as made (a protected node's full name), while it is there as far as
    /// the recipe knows; `None` before it is first made, after a lost session until it is
    /// made again, and once closed.
    pub fn actual_path(&self) -> Option<String> {
        let state = self.inner.state.lock();
        let session = self.inner.core.client.session_id();
        state
            .made
            .as_ref()
            .filter(|(_, s)| !self.inner.mode.is_ephemeral() || Some(*s) == session)
            .map(|(p, _)| p.clone())
    }

    /// The data the node is kept with.
    pub fn data(&self) -> Vec<u8> {
        self.inner.state.lock().data.clone()
    }

    /// Keeps the node with `data` from now on: written at once if the node is there and the
    /// client connected (waiting at most a session timeout), otherwise by the node's thread
    /// as soon as the client is back (each time the node is made again, it is made with this
    /// data).
    ///
    /// # Errors
    /// A write the server refused for good (`NoAuth`, data too large, ...).
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        let target = {
            let mut state = self.inner.state.lock();
            state.data = data.to_vec();
            state.dirty = true;
            state.made.as_ref().map(|(p, _)| p.clone())
        };
        let client = &self.inner.core.client;
        let (Some(target), true) = (target, client.is_connected()) else {
            self.inner.nudge();
            return Ok(());
        };
        match client
            .with_timeout(client.session_timeout())
            .set_data(&target, data, None)
        {
            Ok(_) => {
                let mut state = self.inner.state.lock();
                if state.data == data {
                    state.dirty = false;
                }
                Ok(())
            }
            Err(e) if e.is_no_node() || retried_later(&e) => {
                self.inner.nudge();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Stops keeping the node and removes it (a TTL node is left to expire), returning within
    /// [`CLOSE_WAIT`](super::CLOSE_WAIT) whatever the server does: what it has not answered by
    /// then the client's janitor finishes, or the session's end. Idempotent; also done on
    /// drop.
    pub fn close(&self) {
        {
            let mut state = self.inner.state.lock();
            state.closed = true;
            state
                .close_by
                .get_or_insert_with(|| Instant::now() + super::CLOSE_WAIT);
        }
        self.inner.changed.notify_all();
        self.worker.stop();
    }
}

impl Drop for PersistentNode {
    fn drop(&mut self) {
        self.close();
    }
}

/// Errors the node's thread rides out: it looks again after the next state change or a
/// backoff.
fn retried_later(e: &Error) -> bool {
    matches!(
        e,
        Error::ConnectionLoss { .. } | Error::SessionLost { .. } | Error::Timeout { .. }
    )
}

impl Inner {
    /// The node's thread: look, make or mend, wait; until stopped. Then the node goes.
    fn run(&self, stop: &Receiver<()>, nudged: &Receiver<WatchEvent>) {
        let after_error = |e: &Error| {
            if retried_later(e) {
                debug!("{}: {e}", self.core.path);
                return AfterError::Backoff;
            }
            warn!("{} cannot be made: {e}", self.core.path);
            self.tell(&NodeEvent::Failed(e.clone()));
            // Permanent for this connection: looked at again on the next state change.
            AfterError::Later
        };
        let rules = Rules {
            // Nothing to do until the verdict.
            look_when_suspended: false,
            after_error: &after_error,
        };
        follow(&self.core, stop, (&self.nudge, nudged), &rules, |looking| {
            self.look(looking)
        });
        self.remove();
    }

    /// One look at the node: made if missing, its data put back if it changed; for a TTL
    /// node, its touch child touched. Returns when the next touch is due.
    fn look(&self, looking: &mut Looking<'_, '_>) -> Result<Option<Instant>> {
        // A look is short, so that a close is never held up by one for long: what it cannot
        // do by then it does at the next (after a state change or a backoff).
        let mut until = Instant::now() + LOOK_WAIT;
        if let Some(by) = self.state.lock().close_by {
            until = until.min(by);
        }
        let client = self.core.client.with_deadline(until);
        let mut made_now = false;
        let (stat, session, target) = loop {
            // What woke us so far is answered by the read below. Our own create fires the
            // watch set before it; its event is dropped here, and the node is looked at
            // again, so that it is watched once made.
            looking.answered();
            let Some(session) = client.session_id() else {
                return Err(client.connection_loss());
            };
            let target = self.target(session);
            let looked = client.exists_watch(&target, looking.tx)?;
            looking.watches.watching(&target);
            // The session changed while the call waited for a connection (the notice of it
            // may be among what was dropped above): looked at again on the new one.
            if client.session_id() != Some(session) {
                continue;
            }
            if let Some(stat) = looked {
                break (stat, session, target);
            }
            // Missing: made, then looked at again (a node deleted again at once is made
            // again; every call is bounded by the look's deadline).
            made_now |= self.create(&client, &target, session)?;
        };
        if self.mode.is_ephemeral() && stat.ephemeral_owner != session.0 {
            // Another session's node at our path: it goes with that session (its deletion
            // wakes us), and ours is made then.
            debug!("{target} is held by session {:#x}", stat.ephemeral_owner);
            self.state.lock().made = None;
            return Ok(None);
        }
        let (dirty, data) = {
            let mut state = self.state.lock();
            state.made = Some((target.clone(), session));
            // A node found at the first look may hold older data: ours is put.
            let first = !state.created_once && !made_now;
            (state.dirty || first, state.data.clone())
        };
        if dirty {
            client.set_data(&target, &data, None)?;
            let mut state = self.state.lock();
            if state.data == data {
                state.dirty = false;
            }
        }
        self.mark_created();
        self.touch(&client, &target)
    }

    /// The node's path for `session`.
    fn target(&self, session: SessionId) -> String {
        if self.mode != NodeMode::ProtectedEphemeral {
            return self.core.path.clone();
        }
        let mut state = self.state.lock();
        if let Some((name, s)) = &state.protected {
            if *s == session {
                return name.clone();
            }
        }
        let parent = paths::parent(&self.core.path).unwrap_or("/");
        let name = ProtectedId::next(session).node_prefix(paths::node_name(&self.core.path));
        debug_assert!(name.starts_with(PROTECTED_PREFIX));
        let path = paths::join(parent, &name);
        state.protected = Some((path.clone(), session));
        state.lost = 0;
        path
    }

    /// Makes the node at `target` with the current data (missing parents as containers):
    /// true if this call made it, false if it was there already. A protected name carries
    /// the session it was chosen for (`session`), and its create goes out only on that
    /// session: sent on a newer one, a node whose answer was lost would carry the wrong
    /// session, and the next look, under the new session's name, would leave it behind.
    fn create(&self, client: &Client, target: &str, session: SessionId) -> Result<bool> {
        let data = {
            let mut state = self.state.lock();
            state.tried = true;
            state.data.clone()
        };
        let protected = self.mode == NodeMode::ProtectedEphemeral;
        let client = if protected {
            client.only_on(session)
        } else {
            client.clone()
        };
        #[cfg(feature = "testing")]
        self.core.options.hook_before_create(|| target.to_owned());
        match client.create_under_containers(target, &data, self.mode.create_mode()) {
            Ok((path, _, session)) => {
                {
                    let mut state = self.state.lock();
                    state.made = Some((path.clone(), session));
                    if state.data == data {
                        state.dirty = false;
                    }
                }
                // Listeners hear of it before a waiter for the first creation wakes (once
                // the look has set its watch on it).
                self.tell(&NodeEvent::Created(path));
                Ok(true)
            }
            // Made by someone else meanwhile (or by our own create whose answer was lost):
            // the look that follows decides.
            Err(e) if e.is_node_exists() => Ok(false),
            Err(e) => {
                if protected && e.answer_lost() {
                    let mut state = self.state.lock();
                    if state.protected.as_ref().is_some_and(|(p, _)| p == target) {
                        state.lost = state.lost.saturating_add(1);
                    }
                }
                Err(e)
            }
        }
    }

    /// A TTL node's touch: its child's data set (the child made if missing). Returns when
    /// the next is due.
    fn touch(&self, client: &Client, target: &str) -> Result<Option<Instant>> {
        let NodeMode::PersistentWithTtl(ttl) = self.mode else {
            return Ok(None);
        };
        let child = paths::join(target, TTL_TOUCH_NODE);
        match client.set_data(&child, &[], None) {
            Err(e) if e.is_no_node() => {
                match client.create(&child, &[], CreateMode::PersistentWithTtl(ttl)) {
                    Err(e) if !e.is_node_exists() => return Err(e),
                    _ => {}
                }
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        Ok(Some(Instant::now() + ttl / 2))
    }

    /// Wakes the node's thread for a look (its data changed).
    fn nudge(&self) {
        let _ = self.nudge.send(WatchEvent {
            kind: crate::WatchKind::Other,
            path: self.core.path.clone(),
        });
    }

    fn mark_created(&self) {
        let mut state = self.state.lock();
        if !state.created_once {
            state.created_once = true;
            self.changed.notify_all();
        }
    }

    fn tell(&self, event: &NodeEvent) {
        let listeners = self.listeners.lock().clone();
        for l in listeners {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(event))).is_err() {
                warn!("a listener of {} panicked", self.core.path);
            }
        }
    }

    /// Removes the node on close, by the close's deadline: an ephemeral one only if its
    /// session is ours; a TTL node is left to expire. A node whose create went out but whose
    /// answer was not seen is looked for at its path (a persistent one is deleted, as Curator
    /// deletes what lands after a close).
    fn remove(&self) {
        let (made, tried, protected, lost, by) = {
            let mut state = self.state.lock();
            (
                state.made.take(),
                state.tried,
                state.protected.clone(),
                state.lost,
                state.close_by,
            )
        };
        let client = self
            .core
            .client
            .with_deadline(by.unwrap_or_else(|| Instant::now() + super::CLOSE_WAIT));
        // A protected name is never used again: a create under it whose answer was lost, and
        // which lands after the delete below, is the janitor's to remove while its session
        // lives. A node at a plain path cannot be searched for so: a later node there may be
        // anyone's (recipes/nodes.md, "Limits").
        let search = protected.clone().filter(|_| lost > 0);
        let mut gone = true;
        let path = made
            .as_ref()
            .map(|(p, _)| p.clone())
            .or_else(|| protected.map(|(p, _)| p))
            .unwrap_or_else(|| self.core.path.clone());
        match self.mode {
            NodeMode::PersistentWithTtl(_) => {}
            NodeMode::Persistent if made.is_some() || tried => {
                if let Err(e) = client.delete(&path) {
                    debug!("{path}: {e}");
                }
            }
            NodeMode::Persistent => {}
            NodeMode::Ephemeral | NodeMode::ProtectedEphemeral => {
                let owner = match made {
                    Some((_, session)) => Some(session),
                    None if tried => match client.exists(&path) {
                        Ok(stat) => stat
                            .map(|stat| SessionId(stat.ephemeral_owner))
                            .filter(|owner| client.session_id() == Some(*owner)),
                        // Not known: a node of ours may stand there still.
                        Err(e) => {
                            debug!("{path}: {e}");
                            gone = false;
                            None
                        }
                    },
                    None => None,
                };
                if let Some(session) = owner {
                    gone = client.remove_own(&path, session);
                }
            }
        }
        // After the delete: a node it left to the janitor may be found by the search too, so
        // the search counts it among what it removes.
        if let Some((path, session)) = search {
            let parent = paths::parent(&path).unwrap_or("/");
            let landings = lost.saturating_add(u32::from(!gone));
            client.remove_marked_later(parent, paths::node_name(&path), session, landings);
        }
    }
}
