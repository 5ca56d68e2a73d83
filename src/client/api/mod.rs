//! The client's handle and its request path: validation, the path prefix, deadlines and
//! retries. The calls live by family: `nodes.rs` (writes, transactions), `reads.rs`,
//! `watches.rs`, and `locks.rs` (the small API the recipes use: protected create,
//! guaranteed delete, session tokens, the watch on held nodes).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::warn;

use super::conn::{Batch, Reply, Ticket};
use super::request::Req;
use super::session::{Core, Phase};
use super::state::Subscription;
use super::types::WatchEvent;
use super::watches::{WatchReg, WatchType};
use crate::error::{ConnectFailure, Error, Result};
use crate::paths;
use crate::session_id::SessionId;

mod ensemble;
mod locks;
mod nodes;
mod reads;
mod watches;

/// Counts a client keeps since it was built, read with [`Client::metrics`]: the numbers to
/// look at when locks stall or leaders flap. Export them as counters (they only grow).
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// let client = zk_recipes::Client::connect("127.0.0.1:2181")?;
/// let m = client.metrics();
/// println!(
///     "zk: {} connections, {} suspensions, {} reconnects, {} sessions lost, {} retries, \
///      {} lease checks failed, {} watch events ({} backlogged)",
///     m.connections, m.suspensions, m.reconnects, m.session_losses, m.retries,
///     m.lease_check_failures, m.watch_events, m.watch_backlogs,
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientMetrics {
    /// Requests this client's operations sent, retries included (pings, the handshake and the
    /// janitor's background clean-up are not counted).
    pub requests: u64,
    /// Watch notifications delivered to this client's watchers.
    pub watch_events: u64,
    /// Connections established (handshakes completed), the first one included.
    pub connections: u64,
    /// Sessions established (CONNECTED or CONNECTED_READ_ONLY with a session id not seen
    /// just before), the first one included. A read-only server's session given up for a
    /// read-write server's counts as a new one, with no loss.
    pub sessions: u64,
    /// Times the same session came back after a suspension (RECONNECTED, or
    /// CONNECTED_READ_ONLY with the session it had).
    pub reconnects: u64,
    /// Times the connection broke or went silent (SUSPENDED).
    pub suspensions: u64,
    /// Sessions lost (LOST): expired by the server or declared gone by the client.
    pub session_losses: u64,
    /// Requests sent again after a connection loss by this client's calls and recipes: each
    /// attempt after the first of a retried read or idempotent write, and each new create of
    /// a lock node after one whose answer was lost (the janitor's clean-up is not counted).
    pub retries: u64,
    /// Watch events that found their watcher's bounded channel full and waited in the
    /// client's backlog (a watcher that does not keep up), the client's own `SessionLost`
    /// endings of watches included (which `watch_events` does not count).
    pub watch_backlogs: u64,
    /// Holds whose lease was found no longer vouched for by a check (`check()`, `run()`,
    /// `has_leadership()` and the recipes' own checks); each hold is counted once, however
    /// often it is checked after.
    pub lease_check_failures: u64,
}

/// A listing the reader thread sent for a lock waiter the moment its watch fired (see
/// [`Client::data_watch_then_list`]).
#[derive(Default)]
pub(crate) struct Prefetch(parking_lot::Mutex<Option<Ticket>>);

impl Prefetch {
    /// True while the listing went out and its answer has not come: a waiter whose watch
    /// fired then reads on until it comes (see `Client::read_until`).
    pub fn pending(&self) -> bool {
        self.0.lock().as_ref().is_some_and(|t| !t.answer.is_ready())
    }
}

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
    /// Requests go out only on a connection of this session (otherwise `SessionLost`): for
    /// writes that must not land under a newer session than the one they are about.
    only_on: Option<SessionId>,
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
            only_on: None,
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// Counts a request about to be sent again after a connection loss (not for the
    /// client's own background handles, like `requests`).
    pub(crate) fn count_retry(&self) {
        if self.owner.is_some() {
            crate::client::session::Counters::count(&self.core.counters.retries);
        }
    }

    /// Counts a lease check that found its hold no longer vouched for.
    pub(crate) fn count_lease_check_failure(&self) {
        crate::client::session::Counters::count(&self.core.counters.lease_check_failures);
    }

    /// The client's own handle for background work: bounded by `deadline`, and dropping it
    /// never closes the session.
    pub(crate) fn background(core: Arc<Core>, deadline: Instant) -> Client {
        Client {
            core,
            owner: None,
            deadline: Some(deadline),
            only_on: None,
        }
    }

    /// A handle to the same session whose calls all end by `deadline`: a call still waiting
    /// then returns `Error::Timeout`.
    pub fn with_deadline(&self, deadline: Instant) -> Client {
        Client {
            core: self.core.clone(),
            owner: self.owner.clone(),
            deadline: Some(deadline),
            only_on: self.only_on,
        }
    }

    /// A handle whose requests go out only on a connection of `session`: once the client is on
    /// another session (or waits for a connection and gets one of a new session), they fail
    /// with `SessionLost` unsent. For a write about a node of `session` whose name another
    /// session could take (a queue's item lock), which must never land under the newer one.
    pub(crate) fn only_on(&self, session: SessionId) -> Client {
        Client {
            core: self.core.clone(),
            owner: self.owner.clone(),
            deadline: self.deadline,
            only_on: Some(session),
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

    /// True while the connection is to a read-only server (see
    /// [`ConnectionState::ConnectedReadOnly`](crate::ConnectionState::ConnectedReadOnly)).
    pub fn is_read_only(&self) -> bool {
        self.core.is_read_only()
    }

    /// True while requests can be made under a live session.
    pub fn is_connected(&self) -> bool {
        self.core.phase() == Phase::Connected
    }

    /// What this client has sent and received so far.
    pub fn metrics(&self) -> ClientMetrics {
        let c = &self.core.counters;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        ClientMetrics {
            requests: l(&c.requests),
            watch_events: l(&c.watch_events),
            connections: l(&c.connections),
            sessions: l(&c.sessions),
            reconnects: l(&c.reconnects),
            suspensions: l(&c.suspensions),
            session_losses: l(&c.session_losses),
            retries: l(&c.retries),
            watch_backlogs: l(&c.watch_backlogs),
            lease_check_failures: l(&c.lease_check_failures),
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
                Error::ConnectionLoss { cause } => {
                    Error::timeout("a ZooKeeper session", timeout).caused_by(cause)
                }
                e => e,
            })
    }

    /// What the client's attempts to connect have met since its last connection ended that
    /// waiting alone does not mend (a server certificate that stopped verifying, Kerberos
    /// failing with a server), if anything; `None` while connected. The errors of calls that
    /// find no connection carry the same, as does the `Lost` state event.
    pub fn connect_failure(&self) -> Option<ConnectFailure> {
        self.core.connect_failure()
    }

    /// Closes the session (its ephemeral nodes go at once) and stops the client's threads.
    /// Every clone is closed with it.
    pub fn close(&self) {
        self.core.shutdown();
    }

    // ----- the request path -----

    /// `path` with the chroot and namespace in front, as the server names it.
    pub(crate) fn full<'a>(&'a self, path: &'a str) -> std::borrow::Cow<'a, str> {
        self.core.config.full(path)
    }

    /// Sends requests back to back, waiting for a connection at most until this handle's
    /// deadline, the connection timeout, or a session timeout after the connection went
    /// silent.
    fn send<B: Batch>(&self, frames: B) -> Result<B::Tickets> {
        if self.core.is_closed() {
            return Err(Error::Closed);
        }
        let limit = self.core.config.max_request;
        let mut count = 0;
        for f in frames.frames() {
            count += 1;
            let size = f.len().saturating_sub(4);
            if size > limit {
                return Err(Error::RequestTooLarge { size, limit });
            }
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
                .fetch_add(count, Ordering::Relaxed);
        }
        match self
            .core
            .outbox
            .send(frames, until, self.deadline, self.only_on)
        {
            Err(Error::ConnectionLoss { .. }) => Err(self
                .past_deadline(now, "a connection to ZooKeeper")
                .caused_by(self.core.connect_failure())),
            other => other,
        }
    }

    /// A connection loss with what the client's attempts to connect met (for recipes that
    /// find no session to work under).
    pub(crate) fn connection_loss(&self) -> Error {
        Error::connection_loss().caused_by(self.core.connect_failure())
    }

    /// The error of a wait that began at `since` and failed: `Timeout` if this handle's
    /// deadline has passed (the wait was cut short by it), `ConnectionLoss` otherwise.
    fn past_deadline(&self, since: Instant, what: &str) -> Error {
        match self.deadline {
            Some(d) if Instant::now() >= d => {
                Error::timeout(what, d.saturating_duration_since(since))
            }
            _ => Error::connection_loss(),
        }
    }

    /// Waits for a ticket's answer until this handle's deadline. A watch the request would
    /// have set is cancelled if the caller stops waiting.
    fn wait(&self, ticket: Ticket, path: &str, watch: Option<&WatchReg>) -> Result<Reply> {
        let Ok(answer) = self.core.await_answer(&ticket.answer, self.deadline) else {
            if let Some(w) = watch {
                self.core.cancel_watch(w);
            }
            return Err(Error::timeout(
                format!("ZooKeeper's answer at {path}"),
                self.deadline
                    .map_or(Duration::ZERO, |d| d.saturating_duration_since(ticket.sent)),
            ));
        };
        checked(answer.ok_or_else(|| self.connection_loss())?, path)
    }

    /// One request, one answer, and the session it ran under.
    fn request(&self, path: &str, req: &Req<'_>) -> Result<(Reply, SessionId)> {
        let watch = req.watch_reg();
        let [ticket] = self.send([req.outgoing()])?;
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
                Err(e @ Error::ConnectionLoss { .. }) if retry == Retry::OnConnectionLoss => {
                    let policy = &self.core.config.retry;
                    let backoff = match policy.backoff(retries, started.elapsed()) {
                        Some(b) if !self.core.silent_too_long() => b,
                        _ => return Err(e),
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
                    self.count_retry();
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
        make: impl for<'p> Fn(&'p str, Option<WatchReg>) -> Req<'p>,
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
        make: impl for<'p> Fn(&'p str, Option<WatchReg>) -> Req<'p>,
        decode: impl Fn(&Reply) -> Result<T>,
    ) -> Result<T> {
        paths::validate(path, false)?;
        let full = self.full(path);
        self.retried(path, Retry::OnConnectionLoss, || {
            let (reply, _) = self.request(path, &make(&full, reg.clone()))?;
            decode(&reply)
        })
    }

    /// Adds credentials to the live client (as Java's `addAuthInfo`): sent on the current
    /// connection at once, and replayed on every new one. Waits for the server's answer, at
    /// most the connection timeout once they are sent (or until this handle's deadline).
    ///
    /// # Errors
    /// `AuthFailed` when the server refuses them (it then drops the connection; the client
    /// comes back without them); `Timeout` when this handle's deadline passed first;
    /// otherwise `ConnectionLoss` when no connection is open, it broke before the answer, or
    /// no answer came within the connection timeout. After `Timeout` or `ConnectionLoss` the
    /// credentials may or may not be in force, like any request whose answer was lost: call
    /// again once connected (the client keeps each credential once, however often it is
    /// added).
    pub fn add_auth(&self, scheme: &str, credentials: &[u8]) -> Result<()> {
        let now = Instant::now();
        match self.core.add_auth(
            scheme,
            credentials,
            self.core.config.connection_timeout,
            self.deadline,
        ) {
            Err(Error::ConnectionLoss { .. }) => Err(self
                .past_deadline(now, &format!("the server's answer to {scheme} credentials"))
                .caused_by(self.core.connect_failure())),
            other => other,
        }
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
