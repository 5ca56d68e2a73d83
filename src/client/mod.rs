//! The framework client: a ZooKeeper session you can trust, with bounded calls and retries.
//!
//! [`Client`] sits on the `zookeeper` crate (the transport) and closes its gaps through a
//! loopback session relay; the rest of this page is `recipes/README.md`.
//!
#![doc = include_str!("../../recipes/README.md")]

mod executor;
pub(crate) mod janitor;
mod relay;
mod session;
mod state;
pub(crate) mod token;
pub(crate) mod wire;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::warn;
use zookeeper::{Acl, WatchedEvent, WatchedEventType, ZkResult, ZooKeeper};

pub use self::state::{ConnectionState, SessionId, StateEvent, Subscription};
pub use zookeeper::Stat;

use self::session::{Attempt, Core, Phase};
use crate::connect_string::ConnectString;
use crate::error::{Error, Result};
use crate::paths;
use crate::retry::RetryPolicy;

/// Counts a client keeps, read with [`Client::metrics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientMetrics {
    /// Request attempts by this client's operations, retries included (an attempt that found
    /// no connection within its wait is counted too).
    pub requests: u64,
    /// Watch notifications delivered to this client's watchers.
    pub watch_events: u64,
}

/// Largest node data ZooKeeper accepts with its default `jute.maxbuffer`.
pub const MAX_DATA_LEN: usize = 1024 * 1024;

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted when the session that created it ends.
    Ephemeral,
    /// Persistent, with a 10-digit counter appended by the server.
    PersistentSequential,
    /// Ephemeral, with a 10-digit counter appended by the server.
    EphemeralSequential,
}

impl CreateMode {
    fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential | CreateMode::EphemeralSequential
        )
    }

    fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    fn to_zk(self) -> zookeeper::CreateMode {
        match self {
            CreateMode::Persistent => zookeeper::CreateMode::Persistent,
            CreateMode::Ephemeral => zookeeper::CreateMode::Ephemeral,
            CreateMode::PersistentSequential => zookeeper::CreateMode::PersistentSequential,
            CreateMode::EphemeralSequential => zookeeper::CreateMode::EphemeralSequential,
        }
    }
}

/// What a watch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// The node was created.
    Created,
    /// The node was deleted.
    Deleted,
    /// The node's data changed.
    DataChanged,
    /// A child was added or removed.
    ChildrenChanged,
    /// Anything else the server may send (watch removed).
    Other,
}

/// A fired watch. Watches fire once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchKind,
    /// The watched path, as the caller named it (namespace removed).
    pub path: String,
}

pub(crate) struct Config {
    pub connect: ConnectString,
    /// `addAuth` credentials for every connection.
    pub auth: Vec<(String, Vec<u8>)>,
    /// ACL of the nodes this client creates, unless a recipe gives its own.
    pub acl: Vec<Acl>,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub retry: RetryPolicy,
    /// Chroot and namespace, joined: every path the caller gives is below it. Empty for none.
    pub prefix: String,
}

/// Configures and opens a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    connect_string: String,
    auth: Vec<(String, Vec<u8>)>,
    acl: Vec<Acl>,
    session_timeout: Duration,
    connection_timeout: Duration,
    retry: RetryPolicy,
    namespace: Option<String>,
}

impl ClientBuilder {
    /// Session timeout to ask for (the server may grant another within its
    /// `minSessionTimeout`..`maxSessionTimeout`; [`Client::session_timeout`] tells).
    /// Default 30 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) and every call wait for a connection before failing.
    /// Default 15 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Retry policy for operations that are safe to retry. Default: [`RetryPolicy::default`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Authenticates every connection of every session with `scheme` and `credentials` (for
    /// example `"digest"` and `b"user:password"`), also the sessions built after LOST. A scheme
    /// the server refuses makes `connect` and every call fail at once with `AuthFailed`. (With
    /// `digest` any password authenticates; a wrong one simply matches no ACL, so protected
    /// nodes answer `NoAuth`.)
    pub fn authorization(mut self, scheme: &str, credentials: impl Into<Vec<u8>>) -> Self {
        self.auth.push((scheme.to_owned(), credentials.into()));
        self
    }

    /// The ACL of every node this client creates (default: open to everyone, as ZooKeeper's
    /// own default). See [`acl::creator_all_others_read`](crate::acl::creator_all_others_read).
    /// Recipes may set their own with `LockOptions::acl`.
    pub fn default_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// Puts every path below `/namespace` (a single node name or a path without the leading
    /// slash, e.g. `"app/locks"`). Created on connect if missing.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    fn config(&self) -> Result<Config> {
        let connect = ConnectString::parse(&self.connect_string)?;
        let sane =
            |d: Duration| d >= Duration::from_millis(100) && d <= Duration::from_secs(86_400);
        if !sane(self.session_timeout) {
            return Err(Error::BadArguments(format!(
                "session timeout {:?} is outside 100 ms ..= 1 day",
                self.session_timeout
            )));
        }
        if !sane(self.connection_timeout) {
            return Err(Error::BadArguments(format!(
                "connection timeout {:?} is outside 100 ms ..= 1 day",
                self.connection_timeout
            )));
        }
        let mut prefix = connect.chroot.clone().unwrap_or_default();
        if let Some(ns) = &self.namespace {
            let ns_path = format!("/{}", ns.trim_start_matches('/'));
            paths::validate(&ns_path, false)
                .map_err(|e| Error::BadArguments(format!("namespace {ns:?}: {e}")))?;
            if ns_path != "/" {
                prefix.push_str(&ns_path);
            }
        }
        if self.acl.is_empty() {
            return Err(Error::BadArguments(
                "an ACL needs at least one entry".into(),
            ));
        }
        for (scheme, _) in &self.auth {
            if scheme.is_empty() || scheme.contains(char::is_whitespace) {
                return Err(Error::BadArguments(format!(
                    "{scheme:?} is not an auth scheme"
                )));
            }
        }
        Ok(Config {
            connect,
            auth: self.auth.clone(),
            acl: self.acl.clone(),
            session_timeout: self.session_timeout,
            connection_timeout: self.connection_timeout,
            retry: self.retry.clone(),
            prefix,
        })
    }

    /// Connects and blocks until the server has granted a session, at most the connection
    /// timeout.
    ///
    /// # Errors
    /// `BadArguments` for a bad connect string, namespace or timeout; `Timeout` when no session
    /// was established in time (nothing listens, or the servers do not answer).
    pub fn connect(self) -> Result<Client> {
        let config = self.config()?;
        let connection_timeout = config.connection_timeout;
        let core = Core::start(config)?;
        let client = Client {
            handle: Arc::new(Handle { core }),
            deadline: None,
        };
        let until = Instant::now() + connection_timeout;
        match client.core().wait_connected(until) {
            Ok(_) => {}
            Err(Error::ConnectionLoss) => {
                return Err(Error::timeout(
                    format!(
                        "a ZooKeeper session from {} (is a server running there?)",
                        self.connect_string
                    ),
                    connection_timeout,
                ))
            }
            Err(e) => return Err(e),
        }
        let prefix = client.core().config.prefix.clone();
        if !prefix.is_empty() {
            let acl = client.core().config.acl.clone();
            client.ensure_full_path(&prefix, &acl)?;
        }
        Ok(client)
    }
}

struct Handle {
    core: Arc<Core>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}

/// A ZooKeeper client whose session state can be trusted. Cheap to clone; the session closes
/// when the last clone is dropped or [`close`](Self::close) is called.
///
/// Every call either completes, fails with a typed [`Error`], or (with a deadline set by
/// [`with_deadline`](Self::with_deadline)) returns `Timeout` at the deadline. Reads, deletes and
/// creation of persistent nodes are retried on connection loss under the retry policy, once the
/// client is connected again; sequential and ephemeral creates are never retried blindly.
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
    handle: Arc<Handle>,
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
    /// Starts configuring a client for `connect_string` (`host:port[,host:port...][/chroot]`).
    pub fn builder(connect_string: &str) -> ClientBuilder {
        ClientBuilder {
            connect_string: connect_string.to_owned(),
            auth: Vec::new(),
            acl: Acl::open_unsafe().clone(),
            session_timeout: Duration::from_secs(30),
            connection_timeout: Duration::from_secs(15),
            retry: RetryPolicy::default(),
            namespace: None,
        }
    }

    /// Connects with the default settings. See [`ClientBuilder::connect`].
    pub fn connect(connect_string: &str) -> Result<Client> {
        Client::builder(connect_string).connect()
    }

    pub(crate) fn core(&self) -> &Core {
        &self.handle.core
    }

    /// A handle to the same session whose calls all end by `deadline`: a call still waiting
    /// then returns `Error::Timeout`.
    pub fn with_deadline(&self, deadline: Instant) -> Client {
        Client {
            handle: self.handle.clone(),
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
        self.core().status.lock().session.as_ref().map(|s| s.id)
    }

    /// The session timeout the server granted (the requested one before the first session).
    pub fn session_timeout(&self) -> Duration {
        self.core()
            .status
            .lock()
            .session
            .as_ref()
            .map_or(self.core().config.session_timeout, |s| s.timeout)
    }

    /// The instant before which the server cannot have expired the current session: the send
    /// time of the latest request it answered under this session, plus the negotiated timeout.
    /// It does not depend on any event being delivered, and stops advancing as soon as the
    /// connection goes silent. `None` when there is no session.
    pub fn session_valid_until(&self) -> Option<Instant> {
        let status = self.core().status.lock();
        let session = status.session.as_ref()?;
        status.last_ok_sent.map(|sent| sent + session.timeout)
    }

    /// True while requests can be made under a live session.
    pub fn is_connected(&self) -> bool {
        self.core().status.lock().phase == Phase::Connected
    }

    /// What this client has sent and received so far (requests of its operations, watch
    /// notifications delivered); heartbeats and background clean-up are not counted.
    pub fn metrics(&self) -> ClientMetrics {
        let c = &self.core().counters;
        ClientMetrics {
            requests: c.requests.load(std::sync::atomic::Ordering::Relaxed),
            watch_events: c.watch_events.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Subscribes to connection state changes, from now on.
    pub fn subscribe(&self) -> Subscription {
        self.core().subscribe()
    }

    /// Blocks until connected (at most `timeout`) and returns the session id.
    pub fn wait_connected(&self, timeout: Duration) -> Result<SessionId> {
        self.core()
            .wait_connected(Instant::now() + timeout)
            .map_err(|e| match e {
                Error::ConnectionLoss => Error::timeout("a ZooKeeper session", timeout),
                e => e,
            })
    }

    /// Closes the session (its ephemeral nodes go at once) and stops the client's threads.
    /// Every clone is closed with it.
    pub fn close(&self) {
        self.core().shutdown();
    }

    /// `path` with the chroot and namespace in front, as the server names it.
    pub(crate) fn full(&self, path: &str) -> String {
        let prefix = &self.core().config.prefix;
        match (prefix.is_empty(), path) {
            (true, _) => path.to_owned(),
            (false, "/") => prefix.clone(),
            (false, p) => format!("{prefix}{p}"),
        }
    }

    fn strip(prefix: &str, full: &str) -> String {
        match full.strip_prefix(prefix) {
            Some("") => "/".to_owned(),
            Some(rest) if !prefix.is_empty() => rest.to_owned(),
            _ => full.to_owned(),
        }
    }

    /// Runs `f` through the gate with the retry rule `retry`.
    fn run<T, F>(&self, path: &str, retry: Retry, f: F) -> Result<(T, Attempt)>
    where
        T: Send + 'static,
        F: Fn(&ZooKeeper) -> ZkResult<T> + Send + Sync + 'static,
    {
        let core = self.core();
        if core.is_closed() {
            return Err(Error::Closed);
        }
        let f = Arc::new(f);
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let g = f.clone();
            core.counters.count_request();
            let outcome = match core.call(self.deadline, move |zk| g(zk)) {
                Ok((Ok(v), attempt)) => return Ok((v, attempt)),
                Ok((Err(e), _)) => Error::from_zk(e, path),
                Err(e) => e,
            };
            let expired = self.deadline.is_some_and(|d| Instant::now() >= d);
            if outcome != Error::ConnectionLoss {
                return Err(outcome);
            }
            if expired {
                return Err(Error::timeout(
                    format!("ZooKeeper at {path}"),
                    started.elapsed(),
                ));
            }
            let backoff = match retry {
                Retry::Never => None,
                Retry::OnConnectionLoss => core.config.retry.backoff(retries, started.elapsed()),
            };
            // A call without a deadline still ends once the connection has been silent for a
            // whole session timeout: by then the session is lost anyway.
            let Some(mut backoff) = backoff.filter(|_| !core.silent_too_long()) else {
                return Err(Error::ConnectionLoss);
            };
            retries += 1;
            warn!("connection loss at {path}; retry {retries} after {backoff:?}");
            if let Some(d) = self.deadline {
                backoff = backoff.min(d.saturating_duration_since(Instant::now()));
            }
            thread::sleep(backoff);
        }
    }

    /// Creates a node and returns its path (with the counter, for sequential modes).
    ///
    /// Persistent creates are retried on connection loss (a retry that finds the node reports
    /// `NodeExists`, since it cannot tell whose it is). Sequential and ephemeral creates are
    /// never retried; an ephemeral create whose answer came back over a newer connection than
    /// it was sent on reports `ConnectionLoss` even though it succeeded, because it may have
    /// run under another session: find such a node by a name of your own (as the locks do).
    pub fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String> {
        let acl = self.core().config.acl.clone();
        self.create_in_session(path, data, mode, &acl)
            .map(|(p, _)| p)
    }

    /// [`create`](Self::create), also returning the session the node was created under.
    pub(crate) fn create_in_session(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        acl: &[Acl],
    ) -> Result<(String, SessionId)> {
        let acl = acl.to_vec();
        paths::validate(path, mode.is_sequential())?;
        check_data(data)?;
        let full = self.full(path);
        let data = data.to_vec();
        let retry = if mode.is_sequential() || mode.is_ephemeral() {
            Retry::Never
        } else {
            Retry::OnConnectionLoss
        };
        let (created, attempt) = self.run(path, retry, move |zk| {
            zk.create(&full, data.clone(), acl.clone(), mode.to_zk())
        })?;
        if mode.is_ephemeral() && !attempt.same_connection {
            return Err(Error::ConnectionLoss);
        }
        Ok((
            Client::strip(&self.core().config.prefix, &created),
            attempt.session,
        ))
    }

    /// Creates an ephemeral sequential node whose name carries `marker`, for the locks. Without
    /// a deadline the request runs on the caller's thread. With one, a create still running at
    /// the deadline is handed to the janitor, which removes whatever it makes, and the caller
    /// gets `Timeout`. Never retried; `ConnectionLoss` when the answer is lost or may have come
    /// from another session.
    pub(crate) fn create_protected(
        &self,
        path: &str,
        data: &[u8],
        deadline: Option<Instant>,
        marker: &str,
        acl: &[Acl],
    ) -> Result<(String, SessionId)> {
        let Some(deadline) = deadline else {
            return self.create_in_session(path, data, CreateMode::EphemeralSequential, acl);
        };
        let acl = acl.to_vec();
        paths::validate(path, true)?;
        check_data(data)?;
        let core = self.core();
        let full = self.full(path);
        let data = data.to_vec();
        let target = full.clone();
        core.counters.count_request();
        let gate = core.call_detached(deadline, move |zk| {
            zk.create(
                &target,
                data,
                acl,
                zookeeper::CreateMode::EphemeralSequential,
            )
        });
        let (result, session, epoch) = match gate {
            Ok(v) => v,
            Err(Error::ConnectionLoss) if Instant::now() >= deadline => {
                return Err(Error::timeout(
                    format!("a session to create {path}"),
                    Duration::ZERO,
                ))
            }
            Err(e) => return Err(e),
        };
        match result.recv_deadline(deadline) {
            Ok(Ok(created)) if core.epoch() == epoch => {
                Ok((Client::strip(&core.config.prefix, &created), session))
            }
            // May have run under another session: the caller finds it by its marker and
            // adopts or removes it.
            Ok(Ok(_)) => Err(Error::ConnectionLoss),
            Ok(Err(e)) => Err(Error::from_zk(e, path)),
            Err(_) => {
                let parent = paths::parent(&full).unwrap_or("/").to_owned();
                core.chore(janitor::Chore::Abandoned {
                    result,
                    parent,
                    marker: marker.to_owned(),
                    session,
                });
                Err(Error::timeout(
                    format!("the create of {path}"),
                    Duration::ZERO,
                ))
            }
        }
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
        let acl = self.core().config.acl.clone();
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
    fn ensure_full_path(&self, full: &str, acl: &[Acl]) -> Result<()> {
        let mut at = 0;
        while let Some(i) = full[at + 1..]
            .find('/')
            .map(|i| i + at + 1)
            .or_else(|| (at < full.len()).then_some(full.len()))
        {
            let prefix = full[..i].to_owned();
            let shown = prefix.clone();
            let acl = acl.to_vec();
            match self.run(&shown, Retry::OnConnectionLoss, move |zk| {
                zk.create(
                    &prefix,
                    Vec::new(),
                    acl.clone(),
                    zookeeper::CreateMode::Persistent,
                )
            }) {
                Ok(_) => {}
                Err(e) if e.is_node_exists() => {}
                Err(e) => return Err(e),
            }
            at = i;
            if i == full.len() {
                break;
            }
        }
        Ok(())
    }

    /// A read: validated, prefixed, retried on connection loss.
    fn read<T, F>(&self, path: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&ZooKeeper, &str) -> ZkResult<T> + Send + Sync + 'static,
    {
        paths::validate(path, false)?;
        let full = self.full(path);
        self.run(path, Retry::OnConnectionLoss, move |zk| f(zk, &full))
            .map(|(v, _)| v)
    }

    /// A read that leaves a watch reporting into `tx`.
    fn read_watched<T, F>(&self, path: &str, tx: &Sender<WatchEvent>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&ZooKeeper, &str, ChannelWatcher) -> ZkResult<T> + Send + Sync + 'static,
    {
        let watcher = ChannelWatcher {
            prefix: self.core().config.prefix.clone(),
            tx: tx.clone(),
            delivered: self.core().counters.watch_events.clone(),
        };
        self.read(path, move |zk, full| f(zk, full, watcher.clone()))
    }

    /// The node's stat, or `None` if there is no node.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.read(path, |zk, p| zk.exists(p, false))
    }

    /// Like [`exists`](Self::exists), and leaves a watch that reports into `tx` when the node is
    /// created, changed or deleted.
    pub fn exists_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Option<Stat>> {
        self.read_watched(path, tx, |zk, p, w| zk.exists_w(p, w))
    }

    /// The node's data and stat.
    pub fn data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.read(path, |zk, p| zk.get_data(p, false))
    }

    /// Like [`data`](Self::data), and leaves a watch that reports into `tx` when the node's data
    /// changes or the node is deleted. The channel exists before the watch is set, so an event
    /// that fires at once is never missed.
    pub fn data_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<(Vec<u8>, Stat)> {
        self.read_watched(path, tx, |zk, p, w| zk.get_data_w(p, w))
    }

    /// The names of the node's children, unsorted.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        self.read(path, |zk, p| zk.get_children(p, false))
    }

    /// Like [`children`](Self::children), and leaves a watch that reports into `tx` when a child
    /// is added or removed or the node is deleted.
    pub fn children_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Result<Vec<String>> {
        self.read_watched(path, tx, |zk, p, w| zk.get_children_w(p, w))
    }

    /// Sets the node's data; with `version`, only if the node is still at that version.
    /// Retried on connection loss only without a version (a retry with one could fail on the
    /// first attempt's own change).
    pub fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        paths::validate(path, false)?;
        check_data(data)?;
        let full = self.full(path);
        let data = data.to_vec();
        let retry = if version.is_none() {
            Retry::OnConnectionLoss
        } else {
            Retry::Never
        };
        self.run(path, retry, move |zk| {
            zk.set_data(&full, data.clone(), version)
        })
        .map(|(s, _)| s)
    }

    /// Deletes the node; a node that is already gone counts as deleted. Retried on connection
    /// loss.
    pub fn delete(&self, path: &str) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        match self.run(path, Retry::OnConnectionLoss, move |zk| {
            zk.delete(&full, None)
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.is_no_node() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the node only if it is at `version`. `NoNode` and `BadVersion` are reported.
    /// Not retried.
    pub fn delete_version(&self, path: &str, version: i32) -> Result<()> {
        paths::validate(path, false)?;
        let full = self.full(path);
        self.run(path, Retry::Never, move |zk| {
            zk.delete(&full, Some(version))
        })
        .map(|_| ())
    }

    /// Test hook: the current session's id and password, as a second client would need them to
    /// take the session over (which is how tests make the server expire it).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_session_credentials(&self) -> Option<(SessionId, Vec<u8>)> {
        let status = self.core().status.lock();
        status.session.as_ref().map(|s| (s.id, s.passwd.clone()))
    }

    /// Test hook: how many transport instances this client has built (more than one means
    /// the transport gave up or died and was replaced).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_transport_instances(&self) -> u64 {
        self.core()
            .instances
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Test hook: makes the transport's io thread die the way its own bugs kill it.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_break_transport(&self) {
        self.core().break_transport();
    }
}

/// The transport-side watcher: reports into `tx`, with `prefix` removed from the path. Runs on
/// the transport's event thread, so it only does a non-blocking send; it holds no client handle,
/// so the client's last handle is never dropped on a transport thread.
#[derive(Clone)]
struct ChannelWatcher {
    prefix: String,
    tx: Sender<WatchEvent>,
    delivered: Arc<std::sync::atomic::AtomicU64>,
}

impl zookeeper::Watcher for ChannelWatcher {
    fn handle(&self, e: WatchedEvent) {
        let kind = match e.event_type {
            WatchedEventType::NodeCreated => WatchKind::Created,
            WatchedEventType::NodeDeleted => WatchKind::Deleted,
            WatchedEventType::NodeDataChanged => WatchKind::DataChanged,
            WatchedEventType::NodeChildrenChanged => WatchKind::ChildrenChanged,
            _ => WatchKind::Other,
        };
        let path = e
            .path
            .map(|p| Client::strip(&self.prefix, &p))
            .unwrap_or_default();
        self.delivered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.tx.send(WatchEvent { kind, path });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_refuses_bad_settings_before_connecting() {
        let bad = |b: ClientBuilder| matches!(b.connect(), Err(Error::BadArguments(_)));
        assert!(bad(Client::builder("nohostport")));
        assert!(bad(Client::builder("h:1").session_timeout(Duration::ZERO)));
        assert!(bad(
            Client::builder("h:1").connection_timeout(Duration::from_secs(10_000_000))
        ));
        assert!(bad(Client::builder("h:1").namespace("a//b")));
    }

    #[test]
    fn prefix_is_stripped_from_returned_paths() {
        assert_eq!(Client::strip("/ns", "/ns/a"), "/a");
        assert_eq!(Client::strip("/ns", "/ns"), "/");
        assert_eq!(Client::strip("", "/a"), "/a");
    }
}
