//! The client's calls: validation, the path prefix, deadlines, retries, and the small lock
//! API the recipes use (protected create, guaranteed delete, session tokens, watch removal).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::warn;

use super::config::strip;
use super::conn::{Outgoing, Reply, Ticket};
use super::events::{Chore, Job, Then};
use super::request::{self, Req};
use super::session::{Core, Phase};
use super::state::Subscription;
use super::token;
use super::types::{AddWatchMode, ClientInfo, CreateMode, Op, OpResult, Stat, WatchEvent};
use super::watches::{OnFire, WatchReg, WatchType};
use crate::acl::Acl;
use crate::error::{Error, Result};
use crate::paths;
use crate::retry::RetryPolicy;
use crate::session_id::SessionId;

/// Counts a client keeps, read with [`Client::metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientMetrics {
    /// Requests this client's operations sent, retries included (pings, the handshake and the
    /// janitor's background clean-up are not counted).
    pub requests: u64,
    /// Watch notifications delivered to this client's watchers.
    pub watch_events: u64,
}

/// A listing the reader thread sent for a lock waiter the moment its watch fired (see
/// [`Client::data_watch_then_list`]).
#[derive(Default)]
pub(crate) struct Prefetch(parking_lot::Mutex<Option<Ticket>>);

/// Largest node data ZooKeeper accepts with its default `jute.maxbuffer`.
pub const MAX_DATA_LEN: usize = 1024 * 1024;

/// Closes the session when the last user handle goes.
struct Owner {
    core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}

/// A ZooKeeper client whose session state can be trusted. Cheap to clone; the session closes
/// when the last clone is dropped or [`close`](Self::close) is called.
///
/// Requests from any number of threads share one connection and are pipelined: each is
/// written on its caller's thread, and the client's reader thread hands each answer to its
/// caller. Every call either completes, fails with a typed [`Error`], or (with a deadline set
/// by [`with_deadline`](Self::with_deadline)) returns `Timeout` at the deadline. Reads,
/// deletes and creation of persistent nodes are retried on connection loss under the retry
/// policy, once the client is connected again; sequential and ephemeral creates are never
/// retried blindly.
///
/// Watches report into channels you give (`crossbeam_channel::Sender<WatchEvent>`). An
/// unbounded channel gets each event from the client's reader thread at once. A bounded one
/// never stalls the client: when it is full, its events wait inside the client, in order, and
/// go as soon as it has room (they are never dropped while a receiver lives; a channel whose
/// receivers are all gone gets nothing). Drain bounded channels: what waits for them is kept
/// in memory.
///
/// ```no_run
/// use std::time::Duration;
/// use zk_recipes::{Client, CreateMode};
///
/// # fn main() -> zk_recipes::Result<()> {
/// let client = Client::builder("127.0.0.1:2181")
///     .session_timeout(Duration::from_secs(10))
///     .connect()?;
/// client.ensure_path("/app/config")?;
/// client.create("/app/config/mode", b"fast", CreateMode::Persistent)?;
/// let (data, _stat) = client.data("/app/config/mode")?;
/// assert_eq!(data, b"fast");
/// println!("session {}", client.session_id().expect("connected"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    core: Arc<Core>,
    /// `None` for the client's own background handle, which must never close the session.
    owner: Option<Arc<Owner>>,
    deadline: Option<Instant>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session_id", &self.session_id())
            .field("deadline", &self.deadline)
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    Never,
    OnConnectionLoss,
}

impl Client {
    /// The first handle of a new client: the session closes when it and every clone are gone.
    pub(crate) fn owning(core: Arc<Core>) -> Client {
        Client {
            owner: Some(Arc::new(Owner { core: core.clone() })),
            core,
            deadline: None,
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// The client's own handle for background work: bounded by `deadline`, and dropping it
    /// never closes the session.
    pub(crate) fn background(core: Arc<Core>, deadline: Instant) -> Client {
        Client {
            core,
            owner: None,
            deadline: Some(deadline),
        }
    }

    /// A handle to the same session whose calls all end by `deadline`: a call still waiting
    /// then returns `Error::Timeout`.
    pub fn with_deadline(&self, deadline: Instant) -> Client {
        Client {
            core: self.core.clone(),
            owner: self.owner.clone(),
            deadline: Some(deadline),
        }
    }

    /// [`with_deadline`](Self::with_deadline) `now + timeout`.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        self.with_deadline(Instant::now() + timeout)
    }

    /// The deadline of this handle, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The current session (also while suspended); `None` while a new one is being built or
    /// after close.
    pub fn session_id(&self) -> Option<SessionId> {
        self.core.session_id()
    }

    /// The session timeout the server granted (the requested one before the first session).
    pub fn session_timeout(&self) -> Duration {
        self.core.session_timeout()
    }

    /// The instant before which the leader cannot have expired the current session: the send
    /// time of the latest touch of the session that the leader has certainly applied, plus the
    /// negotiated timeout. A touch counts once a write answered through the leader was sent at
    /// least a tick (see [`ClientBuilder::tick_time`](crate::ClientBuilder::tick_time)) after
    /// the touch was answered; `recipes/README.md` ("Lease bound") derives why. It does not
    /// depend on any event being delivered, stops advancing as soon as the connection goes
    /// silent or the server loses its leader, and never moves on a read-only server. `None`
    /// when there is no session.
    ///
    /// While the client holds something (a lock, a lease, a leadership, or waits for one), a
    /// heartbeat write keeps the bound at least half a session timeout ahead; while it holds
    /// nothing, only its own writes move it (an idle client writes nothing).
    pub fn session_valid_until(&self) -> Option<Instant> {
        self.core.session_valid_until()
    }

    /// True while requests can be made under a live session.
    pub fn is_connected(&self) -> bool {
        self.core.phase() == Phase::Connected
    }

    /// What this client has sent and received so far.
    pub fn metrics(&self) -> ClientMetrics {
        let c = &self.core.counters;
        ClientMetrics {
            requests: c.requests.load(Ordering::Relaxed),
            watch_events: c.watch_events.load(Ordering::Relaxed),
        }
    }

    /// Subscribes to connection state changes, from now on.
    pub fn subscribe(&self) -> Subscription {
        self.core.subscribe()
    }

    /// Blocks until connected (at most `timeout`) and returns the session id.
    pub fn wait_connected(&self, timeout: Duration) -> Result<SessionId> {
        self.core
            .wait_connected(Instant::now() + timeout)
            .map_err(|e| match e {
                Error::ConnectionLoss => Error::timeout("a ZooKeeper session", timeout),
                e => e,
            })
    }

    /// Closes the session (its ephemeral nodes go at once) and stops the client's threads.
    /// Every clone is closed with it.
    pub fn close(&self) {
        self.core.shutdown();
    }

    // ----- the request path -----

    /// `path` with the chroot and namespace in front, as the server names it.
    pub(crate) fn full(&self, path: &str) -> String {
        self.core.config.full(path)
    }

    /// Sends requests back to back, waiting for a connection at most until this handle's
    /// deadline, the connection timeout, or a session timeout after the connection went
    /// silent.
    fn send(&self, frames: Vec<Outgoing>) -> Result<Vec<Ticket>> {
        if self.core.is_closed() {
            return Err(Error::Closed);
        }
        let limit = self.core.config.max_request;
        if let Some(size) = frames
            .iter()
            .map(|f| f.frame.len().saturating_sub(4))
            .find(|&size| size > limit)
        {
            return Err(Error::RequestTooLarge { size, limit });
        }
        let now = Instant::now();
        let mut until = now + self.core.config.connection_timeout;
        if let Some(g) = self.core.give_up_at() {
            until = until.min(g.max(now));
        }
        if let Some(d) = self.deadline {
            until = until.min(d);
        }
        if self.owner.is_some() {
            self.core
                .counters
                .requests
                .fetch_add(frames.len() as u64, Ordering::Relaxed);
        }
        match self.core.outbox.send(frames, until) {
            Err(Error::ConnectionLoss) if self.deadline.is_some_and(|d| Instant::now() >= d) => {
                Err(Error::timeout("a connection to ZooKeeper", Duration::ZERO))
            }
            other => other,
        }
    }

    /// Waits for a ticket's answer until this handle's deadline. A watch the request would
    /// have set is cancelled if the caller stops waiting.
    fn wait(&self, ticket: Ticket, path: &str, watch: Option<&WatchReg>) -> Result<Reply> {
        let Ok(answer) = ticket.answer.wait(self.deadline) else {
            if let Some(w) = watch {
                self.core.cancel_watch(w);
            }
            return Err(Error::timeout(
                format!("ZooKeeper's answer at {path}"),
                self.deadline
                    .map_or(Duration::ZERO, |d| d.saturating_duration_since(ticket.sent)),
            ));
        };
        checked(answer.ok_or(Error::ConnectionLoss)?, path)
    }

    /// One request, one answer, and the session it ran under.
    fn request(&self, path: &str, req: &Req<'_>) -> Result<(Reply, SessionId)> {
        let watch = req.watch_reg();
        let ticket = self
            .send(vec![req.outgoing()])?
            .pop()
            .ok_or(Error::ConnectionLoss)?;
        let session = ticket.session;
        Ok((self.wait(ticket, path, watch.as_ref())?, session))
    }

    /// Runs `f` with the retry rule `retry`: a connection loss is retried (waiting for the
    /// next connection) while the policy allows and the session may still be alive.
    fn retried<T>(&self, path: &str, retry: Retry, f: impl Fn() -> Result<T>) -> Result<T> {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            match f() {
                Err(Error::ConnectionLoss) if retry == Retry::OnConnectionLoss => {
                    let policy = &self.core.config.retry;
                    let backoff = match policy.backoff(retries, started.elapsed()) {
                        Some(b) if !self.core.silent_too_long() => b,
                        _ => return Err(Error::ConnectionLoss),
                    };
                    retries += 1;
                    warn!("connection loss at {path}; retry {retries}");
                    // The backoff, never past the caller's deadline; closing ends it.
                    let mut wait = crate::retry::jitter(backoff);
                    if let Some(d) = self.deadline {
                        wait = wait.min(d.saturating_duration_since(Instant::now()));
                    }
                    if self.core.pause(wait) {
                        return Err(Error::Closed);
                    }
                }
                other => return other,
            }
        }
    }

    /// A validated, prefixed read, retried on connection loss; `decode` reads the answer.
    fn read<T>(
        &self,
        path: &str,
        watch: Option<(WatchType, &Sender<WatchEvent>)>,
        make: impl Fn(&str, Option<WatchReg>) -> Req<'static>,
        decode: impl Fn(&Reply) -> Result<T>,
    ) -> Result<T> {
        let reg = watch.map(|(kind, tx)| WatchReg::new(&self.full(path), kind, tx));
        self.read_with(path, reg, make, decode)
    }

    /// [`read`](Self::read) with a watch registration of the caller's making.
    fn read_with<T>(
        &self,
        path: &str,
        reg: Option<WatchReg>,
        make: impl Fn(&str, Option<WatchReg>) -> Req<'static>,
        decode: impl Fn(&Reply) -> Result<T>,
    ) -> Result<T> {
        paths::validate(path, false)?;
        let full = self.full(path);
        self.retried(path, Retry::OnConnectionLoss, || {
            let (reply, _) = self.request(path, &make(&full, reg.clone()))?;
            decode(&reply)
        })
    }

    // ----- node operations -----

    /// Creates a node and returns its path (with the counter, for sequential modes).
    ///
    /// Persistent creates are retried on connection loss (a retry that finds the node reports
    /// `NodeExists`, since it cannot tell whose it is). Sequential and ephemeral creates are
    /// never retried: find such a node by a name of your own (as the locks do).
    pub fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        let acl = self.core.config.acl.clone();
        self.create_with_acl(path, data, mode, &acl).map(|(p, _)| p)
    }

    /// [`create`](Self::create) with an ACL of its own; also returns the new node's stat.
    pub fn create_with_acl(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, Stat)> {
        self.create_in_session(path, data, mode, acl)
            .map(|(p, s, _)| (p, s))
    }

    /// [`create`](Self::create), also returning the stat and the session it ran under.
    pub(crate) fn create_in_session(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, Stat, SessionId)> {
        paths::validate(path, mode.is_sequential())?;
        check_data(data)?;
        if acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        let full = self.full(path);
        let retry = if mode.is_sequential() || mode.is_ephemeral() {
            Retry::Never
        } else {
            Retry::OnConnectionLoss
        };
        let req = Req::Create {
            path: &full,
            data,
            acl,
            mode,
        };
        self.retried(path, retry, || {
            let (reply, session) = self.request(path, &req)?;
            let (created, stat) = request::created(&reply)?;
            Ok((strip(&self.core.config.prefix, &created), stat, session))
        })
    }

    /// Creates the node, creating missing persistent parents first.
    pub fn create_with_parents(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        match self.create(path, data, mode) {
            Err(e) if e.is_no_node() => {
                if let Some(parent) = paths::parent(path) {
                    self.ensure_path(parent)?;
                }
                self.create(path, data, mode)
            }
            other => other,
        }
    }

    /// Creates `path` and its missing ancestors as empty persistent nodes, like `mkdir -p`.
    pub fn ensure_path(&self, path: &str) -> Result<()> {
        let acl = self.core.config.acl.clone();
        self.ensure_path_with_acl(path, &acl)
    }

    /// [`ensure_path`](Self::ensure_path) creating missing nodes with `acl`.
    pub(crate) fn ensure_path_with_acl(&self, path: &str, acl: &[Acl]) -> Result<()> {
        paths::validate(path, false)?;
        if self.exists(path)?.is_some() {
            return Ok(());
        }
        self.ensure_full_path(&self.full(path), acl)
    }

    /// `ensure_path` on a path already including the prefix.
    pub(crate) fn ensure_full_path(&self, full: &str, acl: &[Acl]) -> Result<()> {
        self.make_path(full, acl, usize::MAX)
    }

    /// Makes a lock's path and its missing ancestors below the client's prefix as container
    /// nodes (ZooKeeper ≥ 3.5.3), so the server reaps them once the last contender is gone
    /// and a per-job lock path does not stay for ever. A server without containers gets
    /// persistent nodes instead, with a warning the first time.
    pub(crate) fn ensure_lock_path(&self, path: &str, acl: &[Acl]) -> Result<()> {
        paths::validate(path, false)?;
        let prefix_len = self.core.config.prefix.len();
        self.make_path(&self.full(path), acl, prefix_len)
    }

    /// Creates every missing node of `full` (a server path): persistent up to byte
    /// `containers_from`, containers below it. Only below the deepest node that exists: the
    /// server checks CREATE on the parent before it says a node exists, so writing what
    /// exists under a parent we may only read fails `NoAuth`.
    fn make_path(&self, full: &str, acl: &[Acl], containers_from: usize) -> Result<()> {
        let ends: Vec<usize> = full
            .match_indices('/')
            .skip(1)
            .map(|(i, _)| i)
            .chain([full.len()])
            .collect();
        let mut first_missing = ends.len();
        for (k, &end) in ends.iter().enumerate().rev() {
            let prefix = &full[..end];
            let found = self.retried(prefix, Retry::OnConnectionLoss, || {
                let req = Req::Exists {
                    path: prefix.into(),
                    watch: None,
                };
                match self.request(prefix, &req) {
                    Ok(_) => Ok(true),
                    Err(e) if e.is_no_node() => Ok(false),
                    Err(e) => Err(e),
                }
            })?;
            if found {
                break;
            }
            first_missing = k;
        }
        for &i in &ends[first_missing..] {
            let prefix = &full[..i];
            let container = i > containers_from && !self.core.no_containers();
            let mode = if container {
                CreateMode::Container
            } else {
                CreateMode::Persistent
            };
            let made = self.retried(prefix, Retry::OnConnectionLoss, || {
                let req = Req::Create {
                    path: prefix,
                    data: &[],
                    acl,
                    mode,
                };
                self.request(prefix, &req).map(|_| ())
            });
            match made {
                Ok(()) => {}
                Err(e) if e.is_node_exists() => {}
                Err(e) if container && e.is_code(crate::ZkCode::Unimplemented) => {
                    self.core.containers_unsupported();
                    return self.make_path(full, acl, containers_from);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The node's stat, or `None` if there is no node.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.exists_inner(path, None)
    }

    /// Like [`exists`](Self::exists), and leaves a watch that reports into `tx` when the node is
    /// created, changed or deleted.
    pub fn exists_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Option<Stat>> {
        self.exists_inner(path, Some((WatchType::Exist, tx)))
    }

    fn exists_inner(
        &self,
        path: &str,
        watch: Option<(WatchType, &Sender<WatchEvent>)>,
    ) -> Result<Option<Stat>> {
        let found = self.read(
            path,
            watch,
            |p, w| Req::Exists {
                path: p.to_owned().into(),
                watch: w,
            },
            |r| Ok(r.record().stat()?),
        );
        match found {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.is_no_node() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The node's data and stat.
    pub fn data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.data_inner(path, None)
    }

    /// Like [`data`](Self::data), and leaves a watch that reports into `tx` when the node's data
    /// changes or the node is deleted. The channel exists before the watch is set, so an event
    /// that fires at once is never missed.
    pub fn data_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<(Vec<u8>, Stat)> {
        let reg = WatchReg::new(&self.full(path), WatchType::Data, tx);
        self.data_inner(path, Some(reg))
    }

    /// Like [`data_watch`](Self::data_watch), for a lock waiter that lists `then_list` again
    /// as soon as the watch fires: the client's reader thread sends that listing the moment
    /// the event arrives, before it wakes the waiter, which takes it with
    /// [`prefetched_children`](Self::prefetched_children). The listing goes out a thread
    /// wake-up sooner, which is one hop less on a lock handoff's critical path.
    pub(crate) fn data_watch_then_list(
        &self,
        path: &str,
        tx: &Sender<WatchEvent>,
        then_list: &str,
    ) -> Result<Arc<Prefetch>> {
        paths::validate(then_list, false)?;
        let prefetch = Arc::new(Prefetch::default());
        let (core, list, into) = (
            Arc::downgrade(&self.core),
            self.full(then_list),
            prefetch.clone(),
        );
        let counted = self.owner.is_some();
        let on_fire: OnFire = Arc::new(move || {
            let Some(core) = core.upgrade() else { return };
            let req = Req::GetChildren {
                path: list.as_str().into(),
                watch: None,
            };
            // Never waits for a connection: without one the waiter lists for itself.
            if let Ok(mut sent) = core.outbox.send(vec![req.outgoing()], Instant::now()) {
                if counted {
                    core.counters.requests.fetch_add(1, Ordering::Relaxed);
                }
                *into.0.lock() = sent.pop();
            }
        });
        let mut reg = WatchReg::new(&self.full(path), WatchType::Data, tx);
        reg.on_fire = Some(on_fire);
        self.data_inner(path, Some(reg))?;
        Ok(prefetch)
    }

    /// The listing the reader thread sent when the watch of
    /// [`data_watch_then_list`](Self::data_watch_then_list) fired, waited for until this
    /// handle's deadline; `None` if none went out (the watch has not fired, or there was no
    /// connection then), or if its connection died before the answer: list afresh then.
    pub(crate) fn prefetched_children(
        &self,
        prefetch: &Prefetch,
        path: &str,
    ) -> Option<Result<Vec<String>>> {
        let ticket = prefetch.0.lock().take()?;
        match self.wait(ticket, path, None) {
            Err(Error::ConnectionLoss) => None,
            answer => Some(answer.and_then(|r| Ok(r.record().strs()?))),
        }
    }

    fn data_inner(&self, path: &str, reg: Option<WatchReg>) -> Result<(Vec<u8>, Stat)> {
        self.read_with(
            path,
            reg,
            |p, w| Req::GetData {
                path: p.to_owned().into(),
                watch: w,
            },
            |r| {
                let mut d = r.record();
                Ok((d.buffer()?, d.stat()?))
            },
        )
    }

    /// The names of the node's children, unsorted.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        self.children_inner(path, None)
    }

    /// Like [`children`](Self::children), and leaves a watch that reports into `tx` when a child
    /// is added or removed or the node is deleted.
    pub fn children_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Vec<String>> {
        self.children_inner(path, Some((WatchType::Child, tx)))
    }

    fn children_inner(
        &self,
        path: &str,
        watch: Option<(WatchType, &Sender<WatchEvent>)>,
    ) -> Result<Vec<String>> {
        self.read(
            path,
            watch,
            |p, w| Req::GetChildren {
                path: p.to_owned().into(),
                watch: w,
            },
            |r| Ok(r.record().strs()?),
        )
    }

    /// The node's children (names, in no particular order) and the node's own stat, from one
    /// read.
    pub fn children_stat(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        self.read(
            path,
            None,
            |p, w| Req::GetChildren {
                path: p.to_owned().into(),
                watch: w,
            },
            |r| {
                let mut d = r.record();
                Ok((d.strs()?, d.stat()?))
            },
        )
    }

    /// How many nodes there are below `path`, at every depth (ZooKeeper ≥ 3.6).
    pub fn all_children_number(&self, path: &str) -> Result<u32> {
        self.read(
            path,
            None,
            |p, _| Req::GetAllChildrenNumber {
                path: p.to_owned().into(),
            },
            |r| Ok(u32::try_from(r.record().i32()?).unwrap_or(0)),
        )
    }

    /// Sets the node's data; with `version`, only if the node is still at that version.
    /// Retried on connection loss only without a version (a retry with one could fail on the
    /// first attempt's own change).
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        paths::validate(path, false)?;
        check_data(data)?;
        let full = self.full(path);
        let retry = if version.is_none() {
            Retry::OnConnectionLoss
        } else {
            Retry::Never
        };
        let req = Req::SetData {
            path: &full,
            data,
            version: version.unwrap_or(-1),
        };
        self.retried(path, retry, || {
            let (reply, _) = self.request(path, &req)?;
            Ok(reply.record().stat()?)
        })
    }

    /// Deletes the node; a node that is already gone counts as deleted. Retried on connection
    /// loss.
    pub fn delete(&self, path: &str) -> Result<()> {
        match self.delete_inner(path, -1, Retry::OnConnectionLoss) {
            Err(e) if e.is_no_node() => Ok(()),
            other => other,
        }
    }

    /// Deletes the node only if it is at `version`. `NoNode` and `BadVersion` are reported.
    /// Not retried.
    pub fn delete_version(&self, path: &str, version: i32) -> Result<()> {
        self.delete_inner(path, version, Retry::Never)
    }

    fn delete_inner(&self, path: &str, version: i32, retry: Retry) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        let req = Req::Delete {
            path: &full,
            version,
        };
        self.retried(path, retry, || self.request(path, &req).map(|_| ()))
    }

    /// The node's ACL and stat.
    pub fn acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        self.read(
            path,
            None,
            |p, _| Req::GetAcl {
                path: p.to_owned().into(),
            },
            |r| {
                let mut d = r.record();
                Ok((d.acl()?, d.stat()?))
            },
        )
    }

    /// Replaces the node's ACL; with `version`, only if the ACL is still at that version
    /// (`Stat::aversion`). Not retried.
    pub fn set_acl(&self, path: &str, acl: &[Acl], version: Option<i32>) -> Result<Stat> {
        paths::validate(path, false)?;
        if acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        let full = self.full(path);
        let req = Req::SetAcl {
            path: &full,
            acl,
            version: version.unwrap_or(-1),
        };
        let (reply, _) = self.request(path, &req)?;
        Ok(reply.record().stat()?)
    }

    /// Waits until the server this client is connected to has caught up with the leader for
    /// `path`: reads after it see every write committed before it.
    pub fn sync(&self, path: &str) -> Result<()> {
        self.read(
            path,
            None,
            |p, _| Req::Sync {
                path: p.to_owned().into(),
            },
            |_| Ok(()),
        )
    }

    /// Runs `ops` as one transaction: all of them or none. On failure, the error names the
    /// first operation that failed (its code and path); nothing was applied. Not retried.
    /// Reads are refused with `BadArguments`.
    pub fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        if let Some(op) = ops.iter().find(|o| !o.is_write()) {
            return Err(Error::BadArguments(format!(
                "a transaction holds writes and checks only, not {op:?}"
            )));
        }
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let subs: Vec<Req<'_>> = ops
            .iter()
            .zip(&full)
            .map(|(op, p)| Req::from_op(op, p, acl))
            .collect();
        let req = Req::Multi(subs);
        let (reply, _) = self.request(ops.first().map_or("/", Op::path), &req)?;
        let prefix = &self.core.config.prefix;
        let mut out = Vec::with_capacity(ops.len());
        // The answer carries each operation's result, also when the transaction failed: the
        // failed one has its code, the others 0 (before it) or -2 (after it).
        for (i, r) in request::multi_results(&reply, ops.len())?
            .into_iter()
            .enumerate()
        {
            match r {
                Ok(r) => out.push(r.stripped(prefix)),
                Err(0) | Err(-2) => {}
                Err(code) => return Err(Error::from_wire(code, ops[i].path())),
            }
        }
        if out.len() != ops.len() {
            return Err(Error::Protocol(
                "a transaction failed without naming the operation".into(),
            ));
        }
        Ok(out)
    }

    /// Reads several nodes at one point in time (ZooKeeper ≥ 3.6): [`Op::GetData`] and
    /// [`Op::GetChildren`] only (others are refused with `BadArguments`). Each result stands
    /// on its own: a missing node fails its read alone. Retried on connection loss.
    pub fn multi_read(&self, ops: &[Op]) -> Result<Vec<Result<OpResult>>> {
        if let Some(op) = ops
            .iter()
            .find(|o| !matches!(o, Op::GetData { .. } | Op::GetChildren { .. }))
        {
            return Err(Error::BadArguments(format!(
                "a multi_read holds data reads and listings only, not {op:?}"
            )));
        }
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let req = Req::MultiRead(
            ops.iter()
                .zip(&full)
                .map(|(op, p)| Req::from_op(op, p, acl))
                .collect(),
        );
        let path = ops.first().map_or("/", Op::path);
        let reply = self.retried(path, Retry::OnConnectionLoss, || {
            self.request(path, &req).map(|(reply, _)| reply)
        })?;
        Ok(request::multi_read_results(&reply, ops.len())?
            .into_iter()
            .zip(ops)
            .map(|(r, op)| r.map_err(|code| Error::from_wire(code, op.path())))
            .collect())
    }

    /// Sends every operation before waiting for any answer (the server answers them in
    /// order), then returns each one's result: one round trip for all of them. Unlike
    /// [`multi`](Self::multi) they are independent: each may succeed or fail on its own. Not
    /// retried.
    pub fn pipeline(&self, ops: &[Op]) -> Result<Vec<Result<OpResult>>> {
        let full = self.validate_ops(ops)?;
        let acl = &self.core.config.acl;
        let frames = ops
            .iter()
            .zip(&full)
            .map(|(op, p)| Req::from_op(op, p, acl).outgoing())
            .collect();
        let tickets = self.send(frames)?;
        let prefix = &self.core.config.prefix;
        Ok(tickets
            .into_iter()
            .zip(ops)
            .map(|(t, op)| {
                let reply = match self.wait(t, op.path(), None) {
                    Err(e) if e.is_no_node() && matches!(op, Op::Exists { .. }) => {
                        return Ok(OpResult::Exists(None))
                    }
                    other => other?,
                };
                Ok(request::op_result(op, &reply)?.stripped(prefix))
            })
            .collect())
    }

    /// Validates every operation's path and data; returns the full paths.
    fn validate_ops(&self, ops: &[Op]) -> Result<Vec<String>> {
        ops.iter()
            .map(|op| {
                let sequential = matches!(op, Op::Create { mode, .. } if mode.is_sequential());
                paths::validate(op.path(), sequential)?;
                if let Op::Create { data, .. } | Op::SetData { data, .. } = op {
                    check_data(data)?;
                }
                Ok(self.full(op.path()))
            })
            .collect()
    }

    /// Sets a persistent watch (ZooKeeper ≥ 3.6) that reports into `tx` until removed with
    /// [`remove_watch`](Self::remove_watch); it survives reconnects, and ends with the session.
    pub fn add_watch(&self, path: &str, mode: AddWatchMode, tx: &Sender<WatchEvent>) -> Result<()> {
        let kind = match mode {
            AddWatchMode::Persistent => WatchType::Persistent,
            AddWatchMode::PersistentRecursive => WatchType::PersistentRecursive,
        };
        self.read(
            path,
            Some((kind, tx)),
            |p, w| Req::AddWatch {
                path: p.to_owned().into(),
                watch: w,
            },
            |_| Ok(()),
        )
    }

    /// Removes every watch at `path` that reports into `tx`. The server is told to drop a
    /// watch only where no other channel still needs what it does there; otherwise the
    /// server's watch stays, and what it reports goes to nobody here.
    pub fn remove_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        for kind in self.core.forget_watch(&full, tx) {
            use WatchType::*;
            let left = self.core.watch_kinds(&full);
            let needed = |kinds: &[WatchType]| kinds.iter().any(|k| left.contains(k));
            let kind = match kind {
                // Servers before 3.9 remove a persistent watch only as "any watch at the path".
                Persistent | PersistentRecursive if !left.is_empty() => continue,
                Persistent | PersistentRecursive => None,
                // One server watch serves data reads and `exists` alike; and servers 3.6–3.8
                // strip a persistent watch at the path along with a data or child watch.
                Data | Exist if needed(&[Data, Exist, Persistent, PersistentRecursive]) => continue,
                Child if needed(&[Child, Persistent, PersistentRecursive]) => continue,
                other => Some(other),
            };
            let req = Req::RemoveWatches { path: &full, kind };
            match self.request(path, &req) {
                Ok(_) => {}
                Err(e) if e.is_code(crate::ZkCode::NoWatcher) || e.is_no_node() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Adds credentials to the live client (as Java's `addAuthInfo`): sent on the current
    /// connection at once, and replayed on every new one. Waits for the server's answer, at
    /// most the connection timeout (or this handle's deadline).
    ///
    /// # Errors
    /// `AuthFailed` when the server refuses them (it then drops the connection; the client
    /// comes back without them); `ConnectionLoss` when no connection is open or it broke
    /// before the answer (nothing is kept: call again once connected).
    pub fn add_auth(&self, scheme: &str, credentials: &[u8]) -> Result<()> {
        let mut until = Instant::now() + self.core.config.connection_timeout;
        if let Some(d) = self.deadline {
            until = until.min(d);
        }
        self.core.add_auth(scheme, credentials, until)
    }

    /// The identities the server has authenticated this connection as (ZooKeeper ≥ 3.7;
    /// `Unimplemented` before).
    pub fn who_am_i(&self) -> Result<Vec<ClientInfo>> {
        let (reply, _) = self.request("/", &Req::WhoAmI)?;
        Ok(request::client_infos(&reply)?)
    }

    /// The ephemeral nodes of this session whose paths start with `prefix` ("/" for all),
    /// ZooKeeper ≥ 3.6.
    pub fn ephemerals(&self, prefix: &str) -> Result<Vec<String>> {
        let full = self.full(prefix);
        let (reply, _) = self.request(prefix, &Req::GetEphemerals { prefix: &full })?;
        let paths = reply.record().strs()?;
        Ok(paths
            .iter()
            .map(|p| strip(&self.core.config.prefix, p))
            .collect())
    }

    // ----- what the locks use -----

    /// The client's retry policy.
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.core.config.retry
    }

    /// The ACL nodes get unless a recipe gives its own.
    pub(crate) fn default_acl(&self) -> &[Acl] {
        &self.core.config.acl
    }

    /// Waits for a live session until `deadline` (or the connection timeout) and returns it;
    /// `Timeout` when a deadline was given and passed.
    pub(crate) fn wait_session(&self, deadline: Option<Instant>, what: &str) -> Result<SessionId> {
        let fallback = Instant::now() + self.core.config.connection_timeout;
        match self.core.wait_connected(deadline.unwrap_or(fallback)) {
            Ok(id) => Ok(id),
            Err(Error::ConnectionLoss) if deadline.is_some() => Err(Error::timeout(
                format!("a session to {what}"),
                Duration::ZERO,
            )),
            Err(e) => Err(e),
        }
    }

    /// True once the connection has been silent for a whole session timeout.
    pub(crate) fn silent_too_long(&self) -> bool {
        self.core.silent_too_long()
    }

    /// A token that is marked when `session` is lost (or suspended, with `lost_on_suspend`);
    /// `None` if `session` is no longer the client's.
    pub(crate) fn session_token(
        &self,
        session: SessionId,
        lost_on_suspend: bool,
    ) -> Option<Arc<token::SessionToken>> {
        self.core.session_token(session, lost_on_suspend)
    }

    /// Creates an ephemeral sequential node whose name carries `marker` under `parent`, for
    /// the locks, and lists `parent` right behind it without waiting in between: the server
    /// answers a session's requests in order, so the listing includes the new node, and an
    /// uncontended lock is had in one round trip. Returns the node's path, the session it was
    /// made under, and the listing if it came (`None` if only the listing failed). With
    /// `line_watch`, the listing also leaves a children watch reporting there.
    ///
    /// Never retried: `ConnectionLoss` when the create's answer is lost. At this handle's
    /// deadline a create still on the wire is handed to the janitor, which removes whatever it
    /// makes, and the caller gets `Timeout`.
    pub(crate) fn create_protected(
        &self,
        parent: &str,
        prefix: &str,
        data: &[u8],
        marker: &str,
        acl: &[Acl],
        line_watch: Option<&Sender<WatchEvent>>,
    ) -> Result<(String, SessionId, Option<Vec<String>>)> {
        let path = paths::join(parent, prefix);
        paths::validate(&path, true)?;
        check_data(data)?;
        let (full, full_parent) = (self.full(&path), self.full(parent));
        let create = Req::Create {
            path: &full,
            data,
            acl,
            mode: CreateMode::EphemeralSequential,
        };
        let list = Req::GetChildren {
            path: full_parent.as_str().into(),
            watch: line_watch.map(|tx| WatchReg::new(&full_parent, WatchType::Child, tx)),
        };
        let mut tickets = self.send(vec![create.outgoing(), list.outgoing()])?;
        let (Some(listed), Some(ticket)) = (tickets.pop(), tickets.pop()) else {
            return Err(Error::ConnectionLoss);
        };
        let session = ticket.session;
        // The server answers in order, so the listing's answer comes right after the create's:
        // waiting for the listing first wakes this thread once for both.
        let listing = listed.answer.wait(self.deadline);
        if let Some(d) = self.deadline {
            if !ticket.answer.ready(d) {
                self.core.finish_later(
                    ticket.answer,
                    Then::Created {
                        parent: parent.to_owned(),
                        marker: marker.to_owned(),
                    },
                    session,
                );
                return Err(Error::timeout(
                    format!("the create of {path}"),
                    Duration::ZERO,
                ));
            }
        }
        let reply = self.wait(ticket, &path, None)?;
        let (created, _) = request::created(&reply)?;
        // A listing that failed (or did not come by the deadline) is simply not used.
        let line = match listing {
            Ok(Some(reply)) => checked(reply, parent)
                .ok()
                .and_then(|r| r.record().strs().ok()),
            _ => None,
        };
        Ok((strip(&self.core.config.prefix, &created), session, line))
    }

    /// Deletes a node of `session`'s, waiting at most until this handle's deadline; what
    /// cannot finish by then is finished by the janitor while the session lives.
    pub(crate) fn remove_own(&self, path: &str, session: SessionId) {
        let chore = Chore::Delete {
            path: path.to_owned(),
            session,
        };
        if paths::validate(path, false).is_err() || self.session_id() != Some(session) {
            return;
        }
        let full = self.full(path);
        let req = Req::Delete {
            path: &full,
            version: -1,
        };
        let ticket = match self.send(vec![req.outgoing()]) {
            Ok(mut t) => match t.pop() {
                Some(t) => t,
                None => return self.core.job(Job::Chore(chore)),
            },
            Err(_) => return self.core.job(Job::Chore(chore)),
        };
        let answered = match self.deadline {
            Some(d) => ticket.answer.ready(d),
            None => true,
        };
        if !answered {
            return self.core.finish_later(
                ticket.answer,
                Then::Deleted {
                    path: path.to_owned(),
                },
                session,
            );
        }
        match self.wait(ticket, path, None) {
            Ok(_) => {}
            Err(e) if e.is_no_node() => {}
            Err(_) => self.core.job(Job::Chore(chore)),
        }
    }

    /// Watches a held node: if anyone deletes it (an operator, a revocation tool), `token` is
    /// marked lost, so the hold's `is_held()` turns false, `check()` fails and `lost()` fires.
    /// The watch goes out without waiting for its answer: it costs no round trip.
    pub(crate) fn watch_hold(&self, path: &str, token: &Arc<token::SessionToken>) {
        self.core.track_hold(path, token);
        // Never waits for a connection: without one, the event thread sets it on reconnect.
        let now = self.with_deadline(Instant::now());
        if !now.watch_hold_again(path) {
            self.core.job(Job::Chore(Chore::WatchHold {
                path: path.to_owned(),
                session: token.session,
            }));
        }
    }

    /// (Re)sets the watch on a held node without waiting for the answer (the reader thread
    /// marks the hold lost if the node is already gone). False if it could not be sent.
    pub(crate) fn watch_hold_again(&self, path: &str) -> bool {
        let full = self.full(path);
        let req = Req::GetData {
            path: full.as_str().into(),
            watch: Some(WatchReg::new(
                &full,
                WatchType::Data,
                self.core.hold_watch_tx(),
            )),
        };
        let out = Outgoing {
            hold: true,
            ..req.outgoing()
        };
        self.send(vec![out]).is_ok()
    }

    /// Stops watching a held node (it is being released).
    pub(crate) fn unwatch_hold(&self, path: &str) {
        self.core.untrack_hold(path);
        self.core
            .forget_watch(&self.full(path), self.core.hold_watch_tx());
    }

    /// Hands the janitor the removal of every child of `parent` carrying `marker`.
    pub(crate) fn remove_marked_later(&self, parent: &str, marker: &str, session: SessionId) {
        self.core.job(Job::Chore(Chore::DeleteMarked {
            parent: parent.to_owned(),
            marker: marker.to_owned(),
            session,
        }));
    }

    /// Takes `tx` off the watches at `path` (a waiter that gives up).
    pub(crate) fn forget_watch(&self, path: &str, tx: &Sender<WatchEvent>) {
        self.core.forget_watch(&self.full(path), tx);
    }

    /// Test hook: the current session's id and password, as a second client would need them to
    /// take the session over (which is how tests make the server expire it).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_session_credentials(&self) -> Option<(SessionId, Vec<u8>)> {
        self.core.session_credentials()
    }

    /// Test hook: how many watchers the client's registry holds.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_watch_count(&self) -> usize {
        self.core.watch_count()
    }
}

/// The reply, or the error its header reports.
fn checked(reply: Reply, path: &str) -> Result<Reply> {
    match reply.header.err {
        0 => Ok(reply),
        code => Err(Error::from_wire(code, path)),
    }
}

fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > MAX_DATA_LEN {
        return Err(Error::BadArguments(format!(
            "node data of {} bytes is over ZooKeeper's {} byte limit",
            data.len(),
            MAX_DATA_LEN
        )));
    }
    Ok(())
}
