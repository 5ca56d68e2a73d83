//! A value every process reads from memory and sets with a compare-and-set (Curator's
//! `SharedValue`), kept current by a thread of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

use crate::lock::core::LockCore;
use crate::lock::follow::{connection_of, follow, AfterError, Looking, Rules, Worker};
use crate::{paths, Client, CreateMode, Error, LockOptions, Result, Stat, WatchEvent};

/// The longest one look at the value takes (its calls together).
const LOOK_WAIT: Duration = Duration::from_secs(2);

/// A value as read, with what a compare-and-set needs: the node's data version (the write's
/// condition) and the transaction id of its last change (`mzxid`, by which values are
/// ordered: a later change always has a larger one, also across a delete and re-create).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedValue<T> {
    /// The value.
    pub value: T,
    /// The node's data version when it held this value (`-1`: never read).
    pub version: i32,
    /// The transaction that last changed the node (`-1`: never read).
    pub zxid: i64,
}

type Listener = Arc<dyn Fn(&VersionedValue<Vec<u8>>) + Send + Sync>;

/// A value at one node that every process reads from memory and sets with a compare-and-set.
/// Apache Curator's `SharedValue`, on the same node (the value's bytes, as they are), so a
/// Curator process and ours can share it.
///
/// [`start`](Self::start) makes the node with the seed if it is missing (the first seed
/// wins) and reads it; from then on a thread of its own follows it with a watch, reading it
/// again after every change and reconnection. What it shows never goes back: a value is
/// taken only if it changed later than the one shown (by `mzxid`), so a read answered by a
/// server that is behind, a reordered event or a node made again cannot undo what was seen.
/// [`is_current`](Self::is_current) says whether the value shown has been read on the
/// connection that is up now (while it is not, another process may have changed it).
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use zk_recipes::shared::SharedValue;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let mode = SharedValue::new(&client, "/config/mode", b"normal")?;
/// mode.start()?;
/// mode.add_listener(|v| println!("mode is now {:?}", String::from_utf8_lossy(&v.value)));
/// let seen = mode.versioned_value();
/// if !mode.try_set_value(&seen, b"drain")? {
///     // Someone changed it since `seen`: look again and decide again.
/// }
/// mode.close();
/// # Ok(())
/// # }
/// ```
pub struct SharedValue {
    inner: Arc<Inner>,
    worker: Worker,
}

struct Inner {
    core: LockCore,
    seed: Vec<u8>,
    state: Mutex<State>,
    changed: Condvar,
    listeners: Mutex<Vec<Listener>>,
    wake: (Sender<WatchEvent>, Receiver<WatchEvent>),
}

struct State {
    shown: VersionedValue<Vec<u8>>,
    /// The session and connection the value shown was read (and is watched) on; `None` from
    /// the moment a watch fires (or the node is found gone) until the next read.
    read_on: Option<(crate::SessionId, u64)>,
    /// The `mzxid` of the last value the listeners heard (only the value's thread calls
    /// them, in order).
    heard: i64,
    started: bool,
    closed: bool,
}

impl std::fmt::Debug for SharedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("SharedValue")
            .field("path", &self.inner.core.path)
            .field("version", &state.shown.version)
            .field("zxid", &state.shown.zxid)
            .finish()
    }
}

impl SharedValue {
    /// A value at `path`; `seed` is what [`start`](Self::start) writes if the node is
    /// missing, and what the value reads as until then.
    pub fn new(client: &Client, path: &str, seed: &[u8]) -> Result<SharedValue> {
        if paths::parent(path).is_none() {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "a shared value needs a path of its own, not the root",
            });
        }
        Ok(SharedValue {
            inner: Arc::new(Inner {
                core: LockCore::new(client, path, LockOptions::new())?,
                seed: seed.to_vec(),
                state: Mutex::new(State {
                    shown: VersionedValue {
                        value: seed.to_vec(),
                        version: -1,
                        zxid: -1,
                    },
                    read_on: None,
                    heard: -1,
                    started: false,
                    closed: false,
                }),
                changed: Condvar::new(),
                listeners: Mutex::new(Vec::new()),
                wake: unbounded(),
            }),
            worker: Worker::default(),
        })
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.inner.core.path
    }

    /// Calls `listener`, on the value's own thread, with each newer value the recipe sees, in
    /// order: never an older one, nor the same one twice (also for a value this process
    /// wrote, heard once the thread has looked again). Values written between two reads are
    /// not seen.
    pub fn add_listener(
        &self,
        listener: impl Fn(&VersionedValue<Vec<u8>>) + Send + Sync + 'static,
    ) {
        self.inner.listeners.lock().push(Arc::new(listener));
    }

    /// Makes the node with the seed if it is missing (its parents as containers), reads it,
    /// and starts following it. Returns once the value is read.
    ///
    /// # Errors
    /// `IllegalState` if started before or closed; what the create or the read meet (a
    /// connection problem included: the value is followed all the same, and read once the
    /// connection is back).
    pub fn start(&self) -> Result<()> {
        {
            let mut state = self.inner.state.lock();
            if state.started || state.closed {
                return Err(Error::IllegalState(
                    "the shared value was started already".into(),
                ));
            }
            state.started = true;
        }
        let inner = self.inner.clone();
        let closing = self.inner.clone();
        self.worker.spawn(
            "zk-shared-value",
            || closing.state.lock().closed,
            move |stop| inner.run(stop),
        )?;
        self.inner.make_if_missing()?;
        self.inner.read()?;
        Ok(())
    }

    /// The value as last seen (the seed before the first read).
    pub fn value(&self) -> Vec<u8> {
        self.inner.state.lock().shown.value.clone()
    }

    /// The value as last seen, with its version and `mzxid`: what
    /// [`try_set_value`](Self::try_set_value) takes.
    pub fn versioned_value(&self) -> VersionedValue<Vec<u8>> {
        self.inner.state.lock().shown.clone()
    }

    /// True while the value shown was read, and is watched, on the connection that is up
    /// now; false before the first read, while the connection is down, and after a
    /// reconnection or a new session until the value is read again.
    pub fn is_current(&self) -> bool {
        self.inner.is_current()
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
            // The value becomes current only by a read on the connection that is up (after
            // every reconnection the thread reads), and each read wakes this wait.
            if self.inner.changed.wait_until(&mut state, until).timed_out() {
                return self.inner.is_current_locked(&state);
            }
        }
    }

    /// Sets the value whatever it is (a write without a version). The node must exist. The
    /// client sends it again after a lost answer (a write without a version may be): if
    /// another process wrote between the two, ours lands again over theirs.
    ///
    /// # Errors
    /// `NoNode` if someone deleted it; what the write meets otherwise.
    pub fn set_value(&self, value: &[u8]) -> Result<()> {
        let stat = self.inner.core.client.set_data(self.path(), value, None)?;
        self.inner.show(value.to_vec(), &stat, None);
        Ok(())
    }

    /// Sets the value to `value` only if it has not changed since `previous` was read: true
    /// if it was set; false (and the value read again) if it had changed. Also false at once,
    /// without a call, if the value shown here is already newer than `previous`.
    ///
    /// # Errors
    /// `IllegalState` for a `previous` that was never read (version `-1`, which the server
    /// would take as "any version", as it would a version that wrapped round to `-1`);
    /// `NoNode` if the node is gone; `OutcomeUnknown` when the write's answer was lost: it may
    /// or may not have been applied (it is not sent again, which could apply it twice); any
    /// other error means nothing was written.
    ///
    /// The server checks the data version only: a node deleted and made again since
    /// `previous` was read starts again at version 0, and a set from a `previous` at that
    /// version lands on it (ZooKeeper has no write conditional on `mzxid`; Curator has the
    /// same limit). Do not delete a shared value's node while processes set it.
    pub fn try_set_value(&self, previous: &VersionedValue<Vec<u8>>, value: &[u8]) -> Result<bool> {
        if previous.version == -1 {
            return Err(Error::IllegalState(
                "a compare-and-set needs a value that was read (version -1 would match any)".into(),
            ));
        }
        if self.inner.state.lock().shown.zxid > previous.zxid {
            return Ok(false);
        }
        let path = self.path();
        match self
            .inner
            .core
            .client
            .set_data(path, value, Some(previous.version))
        {
            Ok(stat) => {
                self.inner.show(value.to_vec(), &stat, None);
                Ok(true)
            }
            Err(e) if e.is_code(crate::ZkCode::BadVersion) => {
                // Changed meanwhile: read now, so the caller's next look sees why.
                if let Err(e) = self.inner.read() {
                    debug!("{path}: reading after a failed compare-and-set: {e}");
                }
                Ok(false)
            }
            Err(e) => Err(e.unknown_if_lost(path)),
        }
    }

    /// Stops following the value (the node stays). Idempotent; also done on drop.
    pub fn close(&self) {
        self.inner.state.lock().closed = true;
        self.inner.changed.notify_all();
        self.worker.stop();
    }
}

impl Drop for SharedValue {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    /// The value's thread: read with a watch, wait for a change or a reconnection; until
    /// stopped.
    fn run(&self, stop: &Receiver<()>) {
        let after_error = |e: &Error| {
            debug!("{}: {e}", self.core.path);
            AfterError::Backoff
        };
        let rules = Rules {
            // A suspension is shown by `is_current` at once; the value is read again when
            // the connection comes back.
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

    /// One look: the value read with a watch (or, if the node is missing, its creation
    /// watched); then the listeners hear what is newer than what they heard.
    fn look(&self, looking: &mut Looking<'_, '_>) -> Result<Option<Instant>> {
        // Woken: what is shown may be stale until read again.
        self.state.lock().read_on = None;
        let client = self.core.client.with_deadline(Instant::now() + LOOK_WAIT);
        let path = &self.core.path;
        let read = loop {
            looking.answered();
            // A read is current on the connection it went out and came back on: one that
            // spanned a reconnection (or a new session) is made again.
            let on = connection_of(&client);
            let read = match client.data_watch(path, looking.tx) {
                Ok((data, stat)) => Some((data, stat)),
                Err(e) if e.is_no_node() => None,
                Err(e) => return Err(e),
            };
            looking.watches.watching(path);
            // Gone: its creation is watched (the value shown stays the last one seen, and is
            // not current); made again meanwhile, it is read again.
            let settled = read.is_some() || client.exists_watch(path, looking.tx)?.is_none();
            if settled && on.is_some() && connection_of(&client) == on {
                break read.map(|(data, stat)| (data, stat, on));
            }
        };
        match read {
            Some((data, stat, on)) => self.show(data, &stat, on),
            None => {
                self.changed.notify_all();
            }
        }
        self.tell();
        Ok(None)
    }

    /// Makes the node with the seed if it is missing.
    fn make_if_missing(&self) -> Result<()> {
        let seed = self.seed.clone();
        match self.core.client.create_under_containers(
            &self.core.path,
            &seed,
            CreateMode::Persistent,
        ) {
            Ok((_, stat, _)) => {
                self.show(seed, &stat, None);
                Ok(())
            }
            Err(e) if e.is_node_exists() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads the value (without a watch: the thread keeps one).
    fn read(&self) -> Result<()> {
        let (data, stat) = self.core.client.data(&self.core.path)?;
        self.show(data, &stat, None);
        Ok(())
    }

    /// Shows `value` if it changed later than the value shown; `on`: the value's thread read
    /// it, with its watch, on that connection. A value shown by a caller's thread wakes the
    /// value's thread, which tells the listeners (only it does: in order).
    fn show(&self, value: Vec<u8>, stat: &Stat, on: Option<(crate::SessionId, u64)>) {
        let newer = {
            let mut state = self.state.lock();
            if on.is_some() {
                state.read_on = on;
            }
            let newer = stat.mzxid > state.shown.zxid;
            if newer {
                state.shown = VersionedValue {
                    value,
                    version: stat.version,
                    zxid: stat.mzxid,
                };
            }
            newer
        };
        self.changed.notify_all();
        if newer && on.is_none() && !self.listeners.lock().is_empty() {
            let _ = self.wake.0.send(WatchEvent {
                kind: crate::WatchKind::Other,
                path: self.core.path.clone(),
            });
        }
    }

    /// The listeners hear the value shown, if it is newer than what they heard.
    fn tell(&self) {
        let shown = {
            let mut state = self.state.lock();
            if state.shown.zxid <= state.heard {
                return;
            }
            state.heard = state.shown.zxid;
            state.shown.clone()
        };
        let listeners = self.listeners.lock().clone();
        for l in listeners {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(&shown))).is_err() {
                warn!("a listener of {} panicked", self.core.path);
            }
        }
    }

    fn is_current(&self) -> bool {
        let state = self.state.lock();
        self.is_current_locked(&state)
    }

    fn is_current_locked(&self, state: &State) -> bool {
        let read_on = state.read_on;
        let client = &self.core.client;
        client.is_connected() && read_on.is_some() && read_on == connection_of(client)
    }
}
