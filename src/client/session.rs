//! The session core: one supervisor thread that turns what the transport and the relay report
//! into CONNECTED / SUSPENDED / RECONNECTED / LOST, a heartbeat that notices a silent
//! connection, and the gate every request passes through.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use log::{debug, info, warn};
use parking_lot::{Condvar, Mutex, RwLock};
use zookeeper::{ZkResult, ZkState, ZooKeeper};

use super::executor::{Executor, RunError};
use super::janitor::{self, Chore, Chores};
use super::relay::{Relay, RelayEvent};
use super::state::{ConnectionState, SessionId, StateEvent, Subscribers, Subscription};
use super::token::SessionToken;
use super::Config;
use crate::error::{Error, Result};

/// A crate instance that reported no connection for this long, although the crate retries a
/// connection at least every 2 s, has lost its io thread (it panics on some inputs).
const DEAD_INSTANCE: Duration = Duration::from_secs(5);

fn auth_failed() -> Error {
    Error::ZooKeeper {
        code: zookeeper::ZkError::AuthFailed,
        path: String::new(),
    }
}

/// Longest wait for the server to confirm a close-session on shutdown.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Messages to the supervisor.
pub(crate) enum Msg {
    /// A state change reported by crate instance `generation`.
    Crate {
        generation: u64,
        state: ZkState,
    },
    Relay(RelayEvent),
    BeatStarted {
        seq: u64,
        at: Instant,
    },
    BeatDone {
        seq: u64,
    },
    Stop,
}

/// The live (or suspended) session.
#[derive(Clone)]
pub(crate) struct Session {
    pub id: SessionId,
    pub timeout: Duration,
    pub passwd: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No session yet, or a new one is being built after LOST.
    Connecting,
    Connected,
    Suspended,
    Closed,
}

pub(crate) struct Status {
    pub phase: Phase,
    pub session: Option<Session>,
    /// Relay connection on which the session was last confirmed. A request is known to have
    /// run under `session` only if no other connection was opened between its send and its
    /// answer.
    pub epoch: u64,
    /// The latest send time of a request the server answered under `session`.
    pub last_ok_sent: Option<Instant>,
    /// Since when no connection has carried a live session (set on SUSPENDED, kept through
    /// LOST, cleared on CONNECTED/RECONNECTED). No call waits past this plus the session timeout.
    pub silent_since: Option<Instant>,
    /// The server refused our credentials: every call fails at once instead of waiting for a
    /// connection that will never be allowed.
    pub auth_failed: bool,
}

impl Status {
    /// When waiting for a connection stops making sense: a session timeout after silence began.
    fn give_up_at(&self, config_timeout: Duration) -> Option<Instant> {
        let timeout = self.session.as_ref().map_or(config_timeout, |s| s.timeout);
        self.silent_since.map(|since| since + timeout)
    }
}

/// What a call passed through the gate learned about where it ran.
pub(crate) struct Attempt {
    /// The answer came back on the connection the call was sent on, so it ran under
    /// `session`.
    pub same_connection: bool,
    pub session: SessionId,
}

/// What the client counts for [`ClientMetrics`](super::ClientMetrics).
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: std::sync::atomic::AtomicU64,
    pub watch_events: Arc<std::sync::atomic::AtomicU64>,
}

impl Counters {
    pub fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by every `Client` handle and the client's own threads.
pub(crate) struct Core {
    pub config: Config,
    pub relay: Relay,
    executor: Executor,
    zk: RwLock<Option<Arc<ZooKeeper>>>,
    pub status: Mutex<Status>,
    status_changed: Condvar,
    subscribers: Subscribers,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stop_heartbeat: Mutex<Option<Sender<()>>>,
    closed: AtomicBool,
    /// Transport instances built so far (tests read it to see that one was replaced).
    pub instances: std::sync::atomic::AtomicU64,
    /// Tokens of things held under a session, marked when that session is lost.
    tokens: Mutex<Vec<Weak<SessionToken>>>,
    pub counters: Counters,
    chores: Chores,
    stop_janitor: Mutex<Option<Sender<()>>>,
}

impl Core {
    /// Starts the relay, the first crate instance, the supervisor and the heartbeat.
    pub fn start(config: Config) -> Result<Arc<Core>> {
        let (tx, rx) = unbounded();
        let (chores, chores_rx) = unbounded();
        let relay_tx = tx.clone();
        let relay = Relay::start(
            config.connect.hosts.clone(),
            config.auth.clone(),
            config.connection_timeout,
            config.session_timeout,
            Arc::new(move |e| {
                let _ = relay_tx.send(Msg::Relay(e));
            }),
        )
        .map_err(|e| Error::BadArguments(format!("cannot open a loopback relay port: {e}")))?;
        let core = Arc::new(Core {
            config,
            relay,
            executor: Executor::new(),
            zk: RwLock::new(None),
            status: Mutex::new(Status {
                phase: Phase::Connecting,
                session: None,
                epoch: 0,
                last_ok_sent: None,
                silent_since: None,
                auth_failed: false,
            }),
            status_changed: Condvar::new(),
            subscribers: Subscribers::default(),
            tx,
            rx,
            threads: Mutex::new(Vec::new()),
            stop_heartbeat: Mutex::new(None),
            closed: AtomicBool::new(false),
            instances: std::sync::atomic::AtomicU64::new(0),
            tokens: Mutex::new(Vec::new()),
            counters: Counters::default(),
            chores,
            stop_janitor: Mutex::new(None),
        });
        let mut supervisor = Supervisor {
            core: core.clone(),
            generation: 0,
            handshake: None,
            suspended_since: None,
            connection_down_since: None,
            beat: None,
            replace_at: None,
        };
        supervisor.replace_instance();
        let (stop_tx, stop_rx) = unbounded();
        *core.stop_heartbeat.lock() = Some(stop_tx);
        let (stop_janitor, janitor_stop_rx) = unbounded();
        *core.stop_janitor.lock() = Some(stop_janitor);
        let spawned = [
            thread::Builder::new()
                .name("zk-supervisor".into())
                .spawn(move || supervisor.run()),
            {
                let c = core.clone();
                thread::Builder::new()
                    .name("zk-heartbeat".into())
                    .spawn(move || heartbeat(c, stop_rx))
            },
            {
                let c = core.clone();
                thread::Builder::new()
                    .name("zk-janitor".into())
                    .spawn(move || janitor::run(c, chores_rx, janitor_stop_rx))
            },
        ];
        for handle in spawned {
            match handle {
                Ok(h) => core.threads.lock().push(h),
                Err(e) => {
                    core.shutdown();
                    return Err(Error::BadArguments(format!("cannot start a thread: {e}")));
                }
            }
        }
        Ok(core)
    }

    pub fn subscribe(&self) -> Subscription {
        self.subscribers.subscribe()
    }

    fn publish(&self, state: ConnectionState, session_id: SessionId) {
        match state {
            ConnectionState::Lost => warn!("session {session_id} lost"),
            ConnectionState::Suspended => warn!("session {session_id} suspended"),
            _ => info!("session {session_id}: {state:?}"),
        }
        let event = StateEvent {
            state,
            session_id,
            at: Instant::now(),
        };
        self.tokens.lock().retain(|t| match t.upgrade() {
            Some(token) => {
                let lost = match state {
                    ConnectionState::Lost => token.session == session_id,
                    ConnectionState::Suspended => {
                        token.lost_on_suspend && token.session == session_id
                    }
                    // A new session: whatever was held under another one is gone.
                    ConnectionState::Connected => token.session != session_id,
                    ConnectionState::Reconnected => false,
                };
                if lost {
                    token.mark_lost();
                }
                !lost
            }
            None => false,
        });
        self.subscribers.publish(event);
    }

    /// Waits until a request can be sent under a live session, at most until `until`.
    /// Returns the transport, the session and the relay connection the request will use.
    fn gate(&self, until: Instant) -> Result<(Arc<ZooKeeper>, SessionId, u64)> {
        let mut status = self.status.lock();
        let until = status
            .give_up_at(self.config.session_timeout)
            .map_or(until, |g| g.min(until));
        loop {
            if status.auth_failed {
                return Err(auth_failed());
            }
            match status.phase {
                Phase::Closed => return Err(Error::Closed),
                Phase::Connected => {
                    let epoch = self.relay.epoch();
                    if let (Some(s), true) = (&status.session, epoch == status.epoch) {
                        if let Some(zk) = self.zk.read().clone() {
                            return Ok((zk, s.id, epoch));
                        }
                    }
                    // A new connection is being opened; the supervisor will say which
                    // session it carries in a moment.
                    let slice = (Instant::now() + Duration::from_millis(5)).min(until);
                    if self
                        .status_changed
                        .wait_until(&mut status, slice)
                        .timed_out()
                        && Instant::now() >= until
                    {
                        return Err(Error::ConnectionLoss);
                    }
                }
                Phase::Connecting | Phase::Suspended => {
                    if self
                        .status_changed
                        .wait_until(&mut status, until)
                        .timed_out()
                    {
                        return Err(Error::ConnectionLoss);
                    }
                }
            }
        }
    }

    /// Sends one request through the gate. With a `deadline` the request runs on a worker and
    /// the caller stops waiting at the deadline; without one it runs on the caller's thread.
    pub fn call<T, F>(&self, deadline: Option<Instant>, f: F) -> Result<(ZkResult<T>, Attempt)>
    where
        T: Send + 'static,
        F: FnOnce(&ZooKeeper) -> ZkResult<T> + Send + 'static,
    {
        let gate_until = Instant::now() + self.config.connection_timeout;
        let gate_until = deadline.map_or(gate_until, |d| d.min(gate_until));
        let (zk, session, epoch) = self.gate(gate_until)?;
        let sent = Instant::now();
        let result = match deadline {
            None => f(&zk),
            Some(d) => match self.executor.run(d, move || f(&zk)) {
                Ok(r) => r,
                Err(RunError::Deadline) => {
                    return Err(Error::timeout(
                        "a ZooKeeper reply",
                        d.saturating_duration_since(sent),
                    ))
                }
                Err(RunError::Stopped) => return Err(Error::Closed),
            },
        };
        let same_connection = self.relay.epoch() == epoch;
        if result.is_ok() && same_connection {
            let mut status = self.status.lock();
            if status.session.as_ref().is_some_and(|s| s.id == session) {
                status.last_ok_sent = Some(status.last_ok_sent.map_or(sent, |t| t.max(sent)));
            }
        }
        Ok((
            result,
            Attempt {
                same_connection,
                session,
            },
        ))
    }

    /// Blocks until connected or `until`; returns the session.
    pub fn wait_connected(&self, until: Instant) -> Result<SessionId> {
        let mut status = self.status.lock();
        loop {
            if status.auth_failed {
                return Err(auth_failed());
            }
            match (&status.phase, &status.session) {
                (Phase::Closed, _) => return Err(Error::Closed),
                (Phase::Connected, Some(s)) => return Ok(s.id),
                _ => {
                    if self
                        .status_changed
                        .wait_until(&mut status, until)
                        .timed_out()
                    {
                        return Err(Error::ConnectionLoss);
                    }
                }
            }
        }
    }

    /// Closes the session (when it is live), stops every thread of this client and waits for
    /// them. Idempotent.
    pub fn shutdown(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(stop) = self.stop_heartbeat.lock().take() {
            let _ = stop.send(());
        }
        if let Some(stop) = self.stop_janitor.lock().take() {
            let _ = stop.send(());
        }
        let _ = self.tx.send(Msg::Stop);
        // [supervisor, heartbeat, janitor]; the heartbeat and the janitor may sit in a call on
        // a silent connection until the relay stops below, so they are joined last.
        let mut threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        let late: Vec<_> = if threads.len() > 1 {
            threads.split_off(1)
        } else {
            Vec::new()
        };
        for t in threads {
            let _ = t.join();
        }
        let live = self.status.lock().phase == Phase::Connected;
        let zk = self.zk.write().take();
        if let Some(zk) = zk {
            let closer = zk.clone();
            // Closing the session makes its ephemeral nodes go now, not at expiry. A server
            // that does not answer within a few seconds gets no longer: the session then ends
            // by expiring.
            let deadline = Instant::now() + self.config.connection_timeout.min(CLOSE_WAIT);
            let closed_cleanly = live
                && matches!(
                    self.executor.run(deadline, move || closer.close()),
                    Ok(Ok(()))
                );
            if !closed_cleanly {
                // The crate instance still runs its reconnect loop; make it end itself.
                self.relay.poison();
                self.relay.cut_all();
                let until = Instant::now() + Duration::from_secs(4);
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    match self.rx.recv_timeout(left) {
                        Ok(Msg::Crate {
                            state: ZkState::Closed,
                            ..
                        })
                        | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            }
            drop(zk);
        }
        {
            let mut status = self.status.lock();
            status.phase = Phase::Closed;
            self.status_changed.notify_all();
        }
        self.relay.stop();
        for h in late {
            let _ = h.join();
        }
        self.executor.stop();
        self.subscribers.clear();
        debug!("client closed");
    }

    /// A token for something held under `session`; `None` if that is no longer the client's
    /// session. Registered under the status lock, so a loss published after this cannot be
    /// missed.
    pub fn session_token(
        &self,
        session: SessionId,
        lost_on_suspend: bool,
    ) -> Option<Arc<SessionToken>> {
        let status = self.status.lock();
        if status.session.as_ref().map(|s| s.id) != Some(session) {
            return None;
        }
        let token = Arc::new(SessionToken::new(session, lost_on_suspend));
        if lost_on_suspend && status.phase == Phase::Suspended {
            token.mark_lost();
        }
        let mut tokens = self.tokens.lock();
        // Holds end all the time; forget them here, not only when a state is published.
        tokens.retain(|t| t.strong_count() > 0);
        tokens.push(Arc::downgrade(&token));
        Some(token)
    }

    pub fn is_connected(&self) -> bool {
        self.status.lock().phase == Phase::Connected
    }

    pub fn session_id(&self) -> Option<SessionId> {
        self.status.lock().session.as_ref().map(|s| s.id)
    }

    /// Hands work to the janitor.
    pub fn chore(&self, chore: Chore) {
        let _ = self.chores.send(chore);
    }

    /// Like [`call`](Self::call) with a deadline for the gate only: the request is started on a
    /// worker and its result arrives on the returned channel, which a caller that stops waiting
    /// can hand to the janitor.
    pub fn call_detached<T, F>(
        &self,
        gate_until: Instant,
        f: F,
    ) -> Result<(Receiver<ZkResult<T>>, SessionId, u64)>
    where
        T: Send + 'static,
        F: FnOnce(&ZooKeeper) -> ZkResult<T> + Send + 'static,
    {
        let (zk, session, epoch) = self.gate(gate_until)?;
        let rx = self
            .executor
            .submit(move || f(&zk))
            .map_err(|_| Error::Closed)?;
        Ok((rx, session, epoch))
    }

    /// The relay's connection count, to compare with the epoch a detached call started on.
    pub fn epoch(&self) -> u64 {
        self.relay.epoch()
    }

    /// True once the connection has been silent for a whole session timeout.
    pub fn silent_too_long(&self) -> bool {
        self.status
            .lock()
            .give_up_at(self.config.session_timeout)
            .is_some_and(|g| Instant::now() >= g)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Test hook: see [`Relay::inject_stray_reply`].
    #[cfg(feature = "testing")]
    pub fn break_transport(&self) {
        self.relay.inject_stray_reply();
    }
}

struct Handshake {
    epoch: u64,
    session: Session,
    sent_at: Instant,
}

struct Supervisor {
    core: Arc<Core>,
    generation: u64,
    /// The latest session the relay saw granted, not yet confirmed by the crate.
    handshake: Option<Handshake>,
    suspended_since: Option<Instant>,
    connection_down_since: Option<Instant>,
    beat: Option<(u64, Instant)>,
    /// When a crate instance could not be built, when to try again.
    replace_at: Option<Instant>,
}

impl Supervisor {
    fn run(mut self) {
        loop {
            let wake = self.next_deadline();
            let msg = select! {
                recv(self.core.rx) -> m => m.ok(),
                default(wake.saturating_duration_since(Instant::now())) => None,
            };
            match msg {
                Some(Msg::Stop) => return,
                Some(m) => self.handle(m),
                None => {}
            }
            self.check_timers();
        }
    }

    fn session_timeout(&self) -> Duration {
        let status = self.core.status.lock();
        status
            .session
            .as_ref()
            .map_or(self.core.config.session_timeout, |s| s.timeout)
    }

    fn beat_timeout(&self) -> Duration {
        (self.session_timeout() / 3).max(Duration::from_millis(100))
    }

    fn next_deadline(&self) -> Instant {
        let mut next = Instant::now() + Duration::from_millis(250);
        if let Some((_, at)) = self.beat {
            next = next.min(at + self.beat_timeout());
        }
        if let Some(since) = self.suspended_since {
            next = next.min(since + self.session_timeout());
        }
        if let Some(at) = self.replace_at {
            next = next.min(at);
        }
        next
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Relay(e) => self.on_relay(e),
            Msg::Crate { generation, state } if generation == self.generation => {
                self.on_crate(state)
            }
            Msg::Crate { generation, state } => {
                debug!("ignoring {state:?} from retired crate instance {generation}")
            }
            Msg::BeatStarted { seq, at } => self.beat = Some((seq, at)),
            Msg::BeatDone { seq } => {
                if self.beat.is_some_and(|(s, _)| s == seq) {
                    self.beat = None;
                }
            }
            Msg::Stop => {}
        }
    }

    fn on_relay(&mut self, event: RelayEvent) {
        match event {
            RelayEvent::Accepted { epoch } => {
                self.connection_down_since = None;
                let current = self.core.status.lock().epoch;
                if epoch > current {
                    self.suspend("the transport opened a new connection");
                }
            }
            RelayEvent::Session {
                epoch,
                id,
                timeout,
                passwd,
                sent_at,
            } => {
                let id = SessionId(id);
                let known = self.core.status.lock().session.as_ref().map(|s| s.id);
                if let Some(old) = known.filter(|old| *old != id) {
                    self.lose(
                        old,
                        "the server gave the connection a different session",
                        false,
                    );
                }
                self.handshake = Some(Handshake {
                    epoch,
                    session: Session {
                        id,
                        timeout,
                        passwd,
                    },
                    sent_at,
                });
            }
            RelayEvent::Expired { epoch, id } => {
                debug!("connection {epoch}: the server says session {id:#x} expired");
                let known = self.core.status.lock().session.as_ref().map(|s| s.id);
                if known == Some(SessionId(id)) {
                    self.lose(SessionId(id), "the server reported it expired", false);
                }
            }
            RelayEvent::AuthFailed { epoch, code } => {
                warn!("connection {epoch}: the server refused the credentials (error {code})");
                let mut status = self.core.status.lock();
                status.auth_failed = true;
                self.core.status_changed.notify_all();
            }
            RelayEvent::Unreachable { epoch, error } => {
                debug!("connection {epoch}: no ZooKeeper server reachable: {error}")
            }
            RelayEvent::Closed { epoch } => {
                let current = self.core.status.lock().epoch;
                if epoch >= current {
                    self.connection_down_since.get_or_insert_with(Instant::now);
                    self.suspend("the connection closed");
                }
            }
        }
    }

    fn on_crate(&mut self, state: ZkState) {
        debug!("crate instance {} reports {state:?}", self.generation);
        match state {
            ZkState::Connected | ZkState::ConnectedReadOnly => self.on_connected(),
            // `NotConnected` is deprecated in the crate but still what it reports on a hang-up.
            #[allow(deprecated)]
            ZkState::Connecting | ZkState::NotConnected => {
                self.suspend("the transport disconnected")
            }
            ZkState::AuthFailed => {
                warn!("the server refused authentication");
                self.suspend("authentication failed");
            }
            ZkState::Closed => {
                self.suspend("the transport gave up");
                self.replace_instance();
            }
            _ => {}
        }
    }

    fn on_connected(&mut self) {
        let Some(h) = self.handshake.take() else {
            debug!("transport connected without a handshake seen; waiting for the next");
            return;
        };
        self.suspended_since = None;
        self.connection_down_since = None;
        {
            // Published under the status lock, so that whoever saw this state in the status
            // and subscribed after that does not receive its event as news.
            let mut status = self.core.status.lock();
            let event = match (&status.session, status.phase) {
                (Some(s), Phase::Suspended) if s.id == h.session.id => {
                    Some(ConnectionState::Reconnected)
                }
                (Some(s), _) if s.id == h.session.id => None,
                _ => Some(ConnectionState::Connected),
            };
            if event == Some(ConnectionState::Connected) {
                status.last_ok_sent = Some(h.sent_at);
            } else {
                status.last_ok_sent =
                    Some(status.last_ok_sent.map_or(h.sent_at, |t| t.max(h.sent_at)));
            }
            status.session = Some(h.session.clone());
            status.phase = Phase::Connected;
            status.epoch = h.epoch;
            status.silent_since = None;
            self.core.status_changed.notify_all();
            if let Some(event) = event {
                self.core.publish(event, h.session.id);
            }
        }
    }

    fn suspend(&mut self, why: &str) {
        let mut status = self.core.status.lock();
        if status.phase != Phase::Connected {
            return;
        }
        debug!("suspending: {why}");
        status.phase = Phase::Suspended;
        status.silent_since.get_or_insert_with(Instant::now);
        self.suspended_since = Some(Instant::now());
        self.core.status_changed.notify_all();
        if let Some(id) = status.session.as_ref().map(|s| s.id) {
            self.core.publish(ConnectionState::Suspended, id);
        }
    }

    /// Publishes LOST for `id`. `declared` is true when the client decided it (the server said
    /// nothing): the transport may then still be attached to the old session and is cut.
    fn lose(&mut self, id: SessionId, why: &str, declared: bool) {
        let session = {
            let mut status = self.core.status.lock();
            if status.session.as_ref().map(|s| s.id) != Some(id) {
                return;
            }
            warn!("session {id} is lost: {why}");
            // Banned before anyone hears of the loss: from here on no handshake resumes it.
            self.core.relay.ban(id.0);
            status.phase = Phase::Connecting;
            status.last_ok_sent = None;
            self.core.status_changed.notify_all();
            self.core.publish(ConnectionState::Lost, id);
            status.session.take()
        };
        self.suspended_since = None;
        if let Some(s) = session {
            // Whatever the server still keeps of it goes now rather than at its expiry.
            self.core.relay.close_session_on_server(id.0, s.passwd);
        }
        if declared {
            // The transport may still be attached to the old session; make it start anew.
            self.core.relay.cut_all();
        }
    }

    fn check_timers(&mut self) {
        let now = Instant::now();
        if let Some((_, at)) = self.beat {
            if now >= at + self.beat_timeout() {
                warn!(
                    "no reply to a heartbeat within {:?}: the connection is silent; cutting it",
                    self.beat_timeout()
                );
                self.beat = None;
                self.suspend("heartbeat unanswered");
                self.core.relay.cut_all();
            }
        }
        if let Some(since) = self.suspended_since {
            if now >= since + self.session_timeout() {
                let id = self.core.status.lock().session.as_ref().map(|s| s.id);
                if let Some(id) = id {
                    self.lose(id, "suspended for a whole session timeout", true);
                }
                self.suspended_since = None;
            }
        }
        if let Some(since) = self.connection_down_since {
            if now >= since + DEAD_INSTANCE {
                warn!("the transport stopped reconnecting (its io thread died); replacing it");
                self.connection_down_since = None;
                self.replace_instance();
            }
        }
        if self.replace_at.is_some_and(|at| now >= at) {
            self.replace_instance();
        }
    }

    /// Builds a new crate instance connected through the relay. The relay makes it resume the
    /// live session, if there is one.
    fn replace_instance(&mut self) {
        self.replace_at = None;
        let old = self.core.zk.write().take();
        self.generation += 1;
        let generation = self.generation;
        let tx = self.core.tx.clone();
        let addr = self.core.relay.addr().to_string();
        let timeout = self.core.config.session_timeout;
        let built = {
            let _gate = self.core.relay.gate_handshakes();
            // The crate unwraps socket and poll set-up in its constructor; a panic there must
            // not take the supervisor down.
            let built = catch_unwind(AssertUnwindSafe(|| {
                ZooKeeper::connect(&addr, timeout, |_: zookeeper::WatchedEvent| {})
            }));
            match built {
                Ok(Ok(zk)) => {
                    zk.add_listener(move |state| {
                        let _ = tx.send(Msg::Crate { generation, state });
                    });
                    *self.core.zk.write() = Some(Arc::new(zk));
                    self.core.instances.fetch_add(1, Ordering::SeqCst);
                    true
                }
                Ok(Err(e)) => {
                    warn!("could not build a transport instance: {e:?}");
                    false
                }
                Err(_) => {
                    warn!("the transport panicked while starting");
                    false
                }
            }
        };
        if !built {
            self.replace_at = Some(Instant::now() + Duration::from_secs(1));
        }
        debug!("crate instance {generation} started");
        if let Some(old) = old {
            // A retired instance is dead (closed or its io thread gone), so dropping it returns
            // at once; do it off this thread anyway, since its `Drop` sends a request.
            let _ = thread::Builder::new()
                .name("zk-retire".into())
                .spawn(move || drop(old));
        }
    }
}

fn heartbeat(core: Arc<Core>, stop: Receiver<()>) {
    let mut seq = 0u64;
    loop {
        let interval = {
            let status = core.status.lock();
            status
                .session
                .as_ref()
                .map_or(core.config.session_timeout, |s| s.timeout)
                / 3
        };
        select! {
            recv(stop) -> _ => return,
            default(interval.max(Duration::from_millis(50))) => {}
        }
        if core.status.lock().phase != Phase::Connected {
            continue;
        }
        seq += 1;
        let _ = core.tx.send(Msg::BeatStarted {
            seq,
            at: Instant::now(),
        });
        let _ = core.call(None, |zk| zk.exists("/", false));
        let _ = core.tx.send(Msg::BeatDone { seq });
    }
}
