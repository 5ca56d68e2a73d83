//! The session layer: one I/O thread owns the connection's read side, the handshake and its
//! auth and watch replay, pings, and the state machine CONNECTED / SUSPENDED / RECONNECTED /
//! LOST. It uses the connection layer ([`Outbox`], [`FrameReader`]) and nothing above it.
//!
//! A connection is dead when no byte has come for two thirds of the negotiated timeout (pings
//! go out after a third of that without a send); its requests then fail with
//! `ConnectionLoss`, the state is SUSPENDED, and the next host is tried. The session is LOST
//! when the server says it expired, or when no server took it back within a whole session
//! timeout of silence; the client then asks the server to close it (so its ephemeral nodes go
//! now) and builds a new one.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, info, warn};
use parking_lot::{Condvar, Mutex};

use super::config::{strip, Config};
use super::conn::{self, bound, dial, timed_out, Anchors, FrameReader, Outbox, Outgoing};
use super::events::{Job, Then};
use super::proto::{
    self, op, xid, ConnectRequest, ConnectResponse, Dec, Enc, Notification, ReplyHeader,
};
use super::request::{self, Req};
use super::slot::Awaited;
use super::state::{ConnectionState, StateEvent, Subscribers, Subscription};
use super::token::SessionToken;
use super::touches::{Through, Touches};
use super::types::{WatchEvent, WatchKind};
use super::watches::{Registry, WatchType};
use crate::connect_string::HostPort;
use crate::error::{Error, Result};
use crate::session_id::SessionId;

/// Longest wait for the server to confirm a close-session on shutdown.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// The pause after every host was tried once in vain doubles from here...
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// ...up to this.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// The wire code of `NoNode`, for which an `exists` still sets its watch.
const NO_NODE: i32 = -101;
const SESSION_EXPIRED: i32 = -112;
const SESSION_CLOSED_REQUIRE_AUTH: i32 = -124;

/// The connection's keep-alives, and what its answers prove the leader has seen.
struct Beats {
    /// When the unanswered ping went out.
    ping_sent: Option<Instant>,
    /// A lease heartbeat (a check-only transaction) waits for its answer.
    heartbeat_out: bool,
    /// When the last heartbeat was answered: the next goes out a tick later at the earliest,
    /// so that it can vouch for the touch before it (see `touches`).
    heartbeat_answered: Option<Instant>,
    touches: Touches,
    /// A read-only server: it has no leader, so nothing it answers extends the lease.
    read_only: bool,
    /// When the latest answer came: the server answers a session's requests in order, so the
    /// next one waited only from then (or from its send, if later).
    last_answer: Option<Instant>,
    /// An answer said the session is over: the connection ends here.
    ended: Option<Ended>,
}

/// How the server ended the session in an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// `SessionExpired`: LOST now, not when the server closes the connection.
    Expired,
    /// `SessionClosedRequireSaslAuth`: the server enforces authentication this client does not
    /// have; it stops, as for refused credentials.
    AuthRequired,
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

struct Status {
    phase: Phase,
    session: Option<Session>,
    /// The leader has certainly touched `session` at or after this instant (see `touches`):
    /// it cannot expire it before this plus the session timeout.
    leader_saw: Option<Instant>,
    /// Since when no connection has carried a live session (set on SUSPENDED, kept through
    /// LOST, cleared on CONNECTED/RECONNECTED). No call waits past this plus the session
    /// timeout.
    silent_since: Option<Instant>,
    /// The client can never be served (credentials refused, or missing where the server
    /// requires them): every call fails with this at once.
    terminal: Option<Error>,
}

/// What the client counts for [`ClientMetrics`](super::ClientMetrics).
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub watch_events: AtomicU64,
}

/// State shared by every `Client` handle and the client's two threads.
pub(crate) struct Core {
    pub config: Config,
    pub outbox: Outbox,
    watches: Mutex<Registry>,
    status: Mutex<Status>,
    status_changed: Condvar,
    subscribers: Subscribers,
    /// Tokens of things held under a session, marked when that session is lost.
    tokens: Mutex<Vec<Weak<SessionToken>>>,
    /// Credentials added at run time (`Client::add_auth`), replayed after the configured
    /// ones on every new connection.
    added_auth: Mutex<Vec<(String, Vec<u8>)>>,
    /// Callers of `add_auth` waiting for the server's answer on the current connection, in
    /// the order their packets went out.
    auth_waiters: Mutex<std::collections::VecDeque<Sender<i32>>>,
    /// How many of those are alive: while none is, nothing is held and no lease heartbeat goes
    /// out (a client that holds nothing costs the ensemble no writes).
    live_tokens: Arc<AtomicUsize>,
    pub counters: Counters,
    last_zxid: AtomicI64,
    epochs: AtomicU64,
    jobs: Sender<Job>,
    /// Dropped on shutdown, which wakes the I/O thread from a pause between attempts.
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    /// The socket of a handshake in progress, so that shutdown can cut it.
    connecting: Mutex<Option<TcpStream>>,
    /// A session the client declared lost while the server may still keep it: closed on the
    /// next connection, so that its ephemeral nodes go now rather than at its expiry.
    to_close: Mutex<Option<Session>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
    /// The server refused a container create: lock paths are made persistent from then on.
    no_containers: AtomicBool,
    /// Held lock nodes (client paths), each with the token its deletion marks lost.
    holds: Mutex<HashMap<String, Weak<SessionToken>>>,
    /// Where the watches on held nodes report (the event thread listens).
    hold_tx: Sender<WatchEvent>,
}

/// What the client's second thread listens to.
pub(crate) struct Inbox {
    pub jobs: Receiver<Job>,
    /// Events of the watches on held nodes.
    pub holds: Receiver<WatchEvent>,
}

/// Why a connection attempt gave no usable connection.
enum Dial {
    /// The server said the session expired (LOST is published): build a new one at once.
    Expired,
    AuthFailed,
    Failed(String),
}

impl From<std::io::Error> for Dial {
    fn from(e: std::io::Error) -> Dial {
        Dial::Failed(e.to_string())
    }
}

/// A connection ready for requests, as the I/O thread keeps it.
struct Conn {
    stream: TcpStream,
    reader: FrameReader,
    epoch: u64,
    timeout: Duration,
    read_only: bool,
}

impl Core {
    /// Starts the I/O thread, which connects. Returns the receiving end of the work for the
    /// client's second thread, which the caller starts and hands back with
    /// [`adopt_thread`](Self::adopt_thread).
    pub fn start(config: Config) -> Result<(Arc<Core>, Inbox)> {
        // A session handed over: the first connection re-attaches to it.
        let resume = config.resume.as_ref().map(|(id, passwd)| Session {
            id: *id,
            timeout: config.session_timeout,
            passwd: passwd.clone(),
        });
        let (jobs, jobs_rx) = unbounded();
        let (hold_tx, hold_rx) = unbounded();
        let (stop, stopped) = unbounded();
        let core = Arc::new(Core {
            config,
            outbox: Outbox::new(),
            watches: Mutex::new(Registry::default()),
            status: Mutex::new(Status {
                phase: Phase::Connecting,
                session: resume,
                leader_saw: None,
                silent_since: None,
                terminal: None,
            }),
            status_changed: Condvar::new(),
            subscribers: Subscribers::default(),
            tokens: Mutex::new(Vec::new()),
            added_auth: Mutex::new(Vec::new()),
            auth_waiters: Mutex::new(std::collections::VecDeque::new()),
            live_tokens: Arc::new(AtomicUsize::new(0)),
            counters: Counters::default(),
            last_zxid: AtomicI64::new(0),
            epochs: AtomicU64::new(0),
            jobs,
            stop: Mutex::new(Some(stop)),
            stopped,
            connecting: Mutex::new(None),
            to_close: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            no_containers: AtomicBool::new(false),
            holds: Mutex::new(HashMap::new()),
            hold_tx,
        });
        let c = core.clone();
        match thread::Builder::new()
            .name("zk-io".into())
            .spawn(move || c.io_main())
        {
            Ok(h) => core.adopt_thread(h),
            Err(e) => {
                core.shutdown();
                return Err(Error::BadArguments(format!("cannot start a thread: {e}")));
            }
        }
        Ok((
            core,
            Inbox {
                jobs: jobs_rx,
                holds: hold_rx,
            },
        ))
    }

    /// Where watches on held nodes report.
    pub fn hold_watch_tx(&self) -> &Sender<WatchEvent> {
        &self.hold_tx
    }

    /// Remembers a held node: its deletion marks `token` lost.
    pub fn track_hold(&self, path: &str, token: &Arc<SessionToken>) {
        let mut holds = self.holds.lock();
        holds.retain(|_, t| t.strong_count() > 0);
        holds.insert(path.to_owned(), Arc::downgrade(token));
    }

    /// Forgets a held node (released): its deletion is ours.
    pub fn untrack_hold(&self, path: &str) {
        self.holds.lock().remove(path);
    }

    /// True while `path` is a held node.
    pub fn is_tracked_hold(&self, path: &str) -> bool {
        self.holds.lock().contains_key(path)
    }

    /// A held node is gone (someone deleted it): the hold is over.
    pub fn hold_gone(&self, path: &str) {
        if let Some(token) = self.holds.lock().remove(path).and_then(|t| t.upgrade()) {
            warn!("{path} was deleted while held: the hold is lost");
            token.mark_lost();
        }
    }

    /// A thread of this client, joined on shutdown.
    pub fn adopt_thread(&self, handle: JoinHandle<()>) {
        self.threads.lock().push(handle);
    }

    pub fn subscribe(&self) -> Subscription {
        self.subscribers.subscribe()
    }

    /// Sends work to the event thread.
    pub fn job(&self, job: Job) {
        let _ = self.jobs.send(job);
    }

    /// Hands the event thread a request nobody waits for any more: when it is answered (or
    /// its connection dies), the janitor does `then` with the answer.
    pub fn finish_later(&self, answer: Awaited<conn::Reply>, then: Then, session: SessionId) {
        let jobs = self.jobs.clone();
        // Runs on the reader thread: an unbounded send, which never blocks.
        answer.forward(move |answer| {
            let _ = jobs.send(Job::Answered {
                answer,
                then,
                session,
            });
        });
    }

    /// Publishes a state change; called under the status lock, so whoever saw the new state
    /// in the status and subscribed after that does not receive its event as news.
    fn publish(&self, state: ConnectionState, session_id: SessionId) {
        match state {
            ConnectionState::Lost => warn!("session {session_id} lost"),
            ConnectionState::Suspended => warn!("session {session_id} suspended"),
            _ => info!("session {session_id}: {state:?}"),
        }
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
        self.subscribers.publish(StateEvent {
            state,
            session_id,
            at: Instant::now(),
        });
    }

    // ----- what the client reads of the session -----

    pub fn phase(&self) -> Phase {
        self.status.lock().phase
    }

    pub fn session_id(&self) -> Option<SessionId> {
        self.status.lock().session.as_ref().map(|s| s.id)
    }

    /// The granted timeout of the current session, else the requested one.
    pub fn session_timeout(&self) -> Duration {
        self.status
            .lock()
            .session
            .as_ref()
            .map_or(self.config.session_timeout, |s| s.timeout)
    }

    pub fn session_valid_until(&self) -> Option<Instant> {
        let status = self.status.lock();
        let session = status.session.as_ref()?;
        status.leader_saw.map(|sent| sent + session.timeout)
    }

    #[cfg(feature = "testing")]
    pub fn session_credentials(&self) -> Option<(SessionId, Vec<u8>)> {
        let status = self.status.lock();
        status.session.as_ref().map(|s| (s.id, s.passwd.clone()))
    }

    /// When waiting for a connection stops making sense: a session timeout after silence
    /// began.
    pub fn give_up_at(&self) -> Option<Instant> {
        let status = self.status.lock();
        let timeout = status
            .session
            .as_ref()
            .map_or(self.config.session_timeout, |s| s.timeout);
        status.silent_since.map(|since| since + timeout)
    }

    /// True once the connection has been silent for a whole session timeout.
    pub fn silent_too_long(&self) -> bool {
        self.give_up_at().is_some_and(|g| Instant::now() >= g)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Blocks until connected or `until`; returns the session. `ConnectionLoss` at `until`.
    pub fn wait_connected(&self, until: Instant) -> Result<SessionId> {
        let mut status = self.status.lock();
        loop {
            if let Some(e) = &status.terminal {
                return Err(e.clone());
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
        let token = Arc::new(SessionToken::new(
            session,
            lost_on_suspend,
            self.live_tokens.clone(),
        ));
        if lost_on_suspend && status.phase == Phase::Suspended {
            token.mark_lost();
        }
        let mut tokens = self.tokens.lock();
        // Looked at under the tokens' lock: `shutdown` marks `closed` before it takes that
        // lock to end every token, so a token is either ended there or never handed out.
        if self.is_closed() {
            return None;
        }
        // Holds end all the time; forget them here, not only when a state is published.
        tokens.retain(|t| t.strong_count() > 0);
        tokens.push(Arc::downgrade(&token));
        Some(token)
    }

    /// Takes `tx` off every watch at `path` (a server path); returns the kinds now without a
    /// watcher.
    pub fn forget_watch(&self, path: &str, tx: &Sender<WatchEvent>) -> Vec<WatchType> {
        self.watches.lock().remove(path, tx)
    }

    /// True once the server refused a container create.
    pub fn no_containers(&self) -> bool {
        self.no_containers.load(Ordering::Relaxed)
    }

    /// Notes that the server has no containers; warns the first time.
    pub fn containers_unsupported(&self) {
        if !self.no_containers.swap(true, Ordering::Relaxed) {
            warn!(
                "the server does not support container nodes (ZooKeeper < 3.5.3): lock paths \
                 are made persistent and stay after use"
            );
        }
    }

    /// The kinds of watch some channel still waits on at `path` (a server path).
    pub fn watch_kinds(&self, path: &str) -> Vec<WatchType> {
        self.watches.lock().kinds_at(path)
    }

    /// Cancels a watch whose caller stopped waiting for the answer.
    pub fn cancel_watch(&self, reg: &super::watches::WatchReg) {
        self.watches.lock().cancel(reg);
    }

    /// Watchers registered, all kinds.
    #[cfg(feature = "testing")]
    pub fn watch_count(&self) -> usize {
        self.watches.lock().len()
    }

    // ----- the I/O thread -----

    /// The client can never be served (refused or missing credentials): every call fails with
    /// `error` from now on, and the I/O thread waits for the client to close.
    fn stop_for(&self, error: Error) {
        {
            let mut status = self.status.lock();
            status.terminal = Some(error.clone());
            self.status_changed.notify_all();
        }
        self.outbox.shut(error);
        let _ = self.stopped.recv();
    }

    fn io_main(self: Arc<Core>) {
        let mut hosts = self.config.connect.hosts.clone();
        // Spreads clients over the ensemble.
        fastrand::shuffle(&mut hosts);
        let mut failures = 0u32;
        let mut next = 0usize;
        while !self.is_closed() {
            self.check_silence();
            let Some(host) = hosts.get(next % hosts.len().max(1)).cloned() else {
                return;
            };
            next += 1;
            match self.handshake(&host, hosts.len()) {
                Ok(conn) => {
                    failures = 0;
                    match self.serve(conn) {
                        Some(Ended::Expired) => {
                            if let Some(id) = self.session_id() {
                                self.lose(id, "the server answered that it expired", false);
                            }
                        }
                        Some(Ended::AuthRequired) => {
                            warn!(
                                "the server requires authentication this client does not have; \
                                 the client stops connecting"
                            );
                            return self.stop_for(Error::ZooKeeper {
                                code: crate::ZkCode::SessionClosedRequireSaslAuth,
                                path: String::new(),
                            });
                        }
                        None => {}
                    }
                }
                Err(Dial::Expired) => {}
                Err(Dial::AuthFailed) => {
                    warn!("the server refused the credentials; the client stops connecting");
                    return self.stop_for(Error::auth_failed());
                }
                Err(Dial::Failed(why)) => {
                    debug!("no connection to {}:{}: {why}", host.host, host.port);
                    failures += 1;
                    if failures as usize % hosts.len().max(1) == 0 {
                        let round = failures / hosts.len().max(1) as u32;
                        let pause = FIRST_PAUSE
                            .saturating_mul(1 << round.min(10))
                            .min(MAX_PAUSE);
                        let pause = match self.lost_at() {
                            Some(at) => pause.min(at.saturating_duration_since(Instant::now())),
                            None => pause,
                        };
                        // Waits for the next attempt's time (with jitter, so that clients
                        // cut off together do not all come back at once), or for shutdown.
                        let _ = self.stopped.recv_timeout(crate::retry::jitter(pause));
                    }
                }
            }
        }
    }

    /// Sends `scheme` credentials on the current connection and waits for the server's
    /// answer until `until`; on success they are replayed on every later connection.
    pub fn add_auth(&self, scheme: &str, credentials: &[u8], until: Instant) -> Result<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        {
            // Registered before the packet goes, under the lock the reader takes for the
            // answer, so the answer cannot come first.
            let mut waiters = self.auth_waiters.lock();
            self.outbox
                .send_reserved_now(&proto::auth_request(scheme, credentials))
                .map_err(|_| Error::ConnectionLoss)?;
            waiters.push_back(tx);
        }
        match rx.recv_deadline(until) {
            Ok(0) => {
                self.added_auth
                    .lock()
                    .push((scheme.to_owned(), credentials.to_vec()));
                Ok(())
            }
            Ok(_) => Err(Error::auth_failed()),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(Error::timeout(
                format!("the server's answer to {scheme} credentials"),
                until.saturating_duration_since(Instant::now()),
            )),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::ConnectionLoss),
        }
    }

    /// Waits `d`, or less if the client closes meanwhile: then true.
    pub fn pause(&self, d: Duration) -> bool {
        let _ = self.stopped.recv_timeout(d);
        self.is_closed()
    }

    /// When the suspended session is to be declared lost.
    fn lost_at(&self) -> Option<Instant> {
        let status = self.status.lock();
        match (&status.phase, &status.session, status.silent_since) {
            (Phase::Suspended, Some(s), Some(since)) => Some(since + s.timeout),
            _ => None,
        }
    }

    fn check_silence(&self) {
        if self.lost_at().is_some_and(|at| Instant::now() >= at) {
            if let Some(id) = self.session_id() {
                self.lose(
                    id,
                    "no server took it back within the session timeout",
                    true,
                );
            }
        }
    }

    /// Registers the handshake socket for shutdown; false if the client is closing.
    fn track_connecting(&self, s: &TcpStream) -> bool {
        *self.connecting.lock() = s.try_clone().ok();
        !self.is_closed()
    }

    /// Opens a connection to `host`, attaches a session (the live one if there is one) and
    /// makes it ready for requests: credentials, then the watches to restore.
    fn handshake(&self, host: &HostPort, hosts: usize) -> std::result::Result<Conn, Dial> {
        let resume = self.status.lock().session.clone();
        let timeout = resume
            .as_ref()
            .map_or(self.config.session_timeout, |s| s.timeout);
        // Each host gets a third of its share of the session timeout, so that every host is
        // tried at least three times before the session is gone. A silent host then cannot
        // keep us from the others, and a restarting server, whose listen backlog takes our
        // connection long before the server reads it, gets a fresh connection soon after it
        // serves (a connection that sat in the backlog was seen unanswered for 10 s).
        let per_attempt = self
            .config
            .connection_timeout
            .min((timeout / (3 * hosts.max(1) as u32)).max(Duration::from_millis(100)));
        let mut until = Instant::now() + per_attempt;
        if let Some(at) = self.lost_at() {
            until = until.min(at);
        }
        if let Some(old) = self.to_close.lock().take() {
            match dial(&host.host, host.port, until)
                .and_then(|s| self.track_connecting(&s).then_some(s).ok_or(Closing.into()))
                .and_then(|mut s| close_session(&mut s, old.id, &old.passwd, until))
            {
                Ok(closed) => debug!("closed lost session {} on the server: {closed}", old.id),
                Err(e) => debug!("could not close lost session {}: {e}", old.id),
            }
        }
        let mut stream = dial(&host.host, host.port, until)?;
        if !self.track_connecting(&stream) {
            return Err(Dial::Failed("closing".into()));
        }
        bound(&stream, until)?;
        let sent_at = Instant::now();
        let request = ConnectRequest {
            last_zxid_seen: self.last_zxid.load(Ordering::SeqCst),
            timeout_ms: i32::try_from(self.config.session_timeout.as_millis()).unwrap_or(i32::MAX),
            session_id: resume.as_ref().map_or(0, |s| s.id.0),
            passwd: resume
                .as_ref()
                .map_or_else(|| vec![0; 16], |s| s.passwd.clone()),
            read_only: self.config.allow_read_only,
        };
        std::io::Write::write_all(&mut stream, &request.encode())?;
        let mut reader = FrameReader::new();
        let answer = ConnectResponse::decode(&reader.read_frame(&mut stream, Some(until))?)
            .map_err(|e| Dial::Failed(format!("bad connect answer: {}", e.0)))?;
        if answer.timeout_ms <= 0 {
            return match resume {
                Some(old) => {
                    self.lose(old.id, "the server says it expired", false);
                    Err(Dial::Expired)
                }
                None => Err(Dial::Failed("the server granted no session".into())),
            };
        }
        if answer.read_only && !self.config.allow_read_only {
            return Err(Dial::Failed(
                "a read-only server (allow_read_only is off)".into(),
            ));
        }
        if let Some(old) = resume.as_ref().filter(|s| s.id.0 != answer.session_id) {
            self.lose(
                old.id,
                "the server gave the connection another session",
                false,
            );
        }
        let auth: Vec<(String, Vec<u8>)> = self
            .config
            .auth
            .iter()
            .cloned()
            .chain(self.added_auth.lock().iter().cloned())
            .collect();
        for (scheme, credentials) in &auth {
            std::io::Write::write_all(&mut stream, &proto::auth_request(scheme, credentials))?;
        }
        for _ in &auth {
            let frame = reader.read_frame(&mut stream, Some(until))?;
            let header =
                ReplyHeader::decode(&mut Dec::new(&frame)).map_err(|e| Dial::Failed(e.0.into()))?;
            match (header.xid, header.err) {
                (xid::AUTH, 0) => {}
                (xid::AUTH, _) => return Err(Dial::AuthFailed),
                (other, _) => return Err(Dial::Failed(format!("xid {other} before auth"))),
            }
        }
        let id = SessionId(answer.session_id);
        let resumed = resume.as_ref().is_some_and(|s| s.id == id);
        if resumed {
            let restore = self
                .watches
                .lock()
                .to_restore(self.last_zxid.load(Ordering::SeqCst));
            for set in restore {
                std::io::Write::write_all(&mut stream, &set.encode())?;
            }
        } else {
            self.end_watches(WatchKind::SessionLost);
        }
        let timeout = Duration::from_millis(answer.timeout_ms as u64);
        let read_timeout = timeout * 2 / 3;
        stream.set_write_timeout(Some(read_timeout))?;
        let writer = stream.try_clone()?;
        let epoch = self.epochs.fetch_add(1, Ordering::SeqCst) + 1;
        let session = Session {
            id,
            timeout,
            passwd: answer.passwd,
        };
        // A read-only server has no leader: attaching there proves nothing about the session.
        let anchor = (!answer.read_only).then_some(sent_at);
        if !self.connected(writer, session, epoch, anchor) {
            return Err(Dial::Failed("closing".into()));
        }
        self.connecting.lock().take();
        Ok(Conn {
            stream,
            reader,
            epoch,
            timeout,
            read_only: answer.read_only,
        })
    }

    /// The connection is ready: opens the gate and publishes CONNECTED or RECONNECTED.
    /// `anchor`: the handshake's send time, if the leader created or revalidated the session
    /// after it (not on a read-only server).
    fn connected(
        &self,
        writer: TcpStream,
        session: Session,
        epoch: u64,
        anchor: Option<Instant>,
    ) -> bool {
        let mut status = self.status.lock();
        if status.phase == Phase::Closed || !self.outbox.open(writer, session.id, epoch) {
            return false;
        }
        let event = match (&status.session, status.phase) {
            (Some(s), _) if s.id == session.id => ConnectionState::Reconnected,
            _ => ConnectionState::Connected,
        };
        status.leader_saw = match (event, status.leader_saw) {
            (ConnectionState::Reconnected, Some(t)) => Some(anchor.map_or(t, |a| t.max(a))),
            _ => anchor,
        };
        let id = session.id;
        status.session = Some(session);
        status.phase = Phase::Connected;
        status.silent_since = None;
        self.status_changed.notify_all();
        self.publish(event, id);
        self.job(Job::Connected(id));
        true
    }

    /// Reads answers until the connection dies, pinging it while idle. Returns how the server
    /// ended the session, if an answer said so.
    fn serve(&self, mut conn: Conn) -> Option<Ended> {
        let read_timeout = conn.timeout * 2 / 3;
        let ping_every = read_timeout / 3;
        // The lease heartbeat: a write the leader checks the session for, whenever the lease
        // bound is half a session timeout old; a tick after the last one was answered at the
        // earliest, so that each vouches for a touch before it. Only while something is held
        // (a live token): a client that holds nothing costs the ensemble no writes. On a
        // read-only server nothing can move the bound: no heartbeat.
        let anchor_every = conn.timeout / 2;
        let tick = self.config.tick_time;
        let mut last_recv = Instant::now();
        let mut beats = Beats {
            ping_sent: None,
            heartbeat_out: conn.read_only,
            heartbeat_answered: None,
            touches: Touches::new(tick),
            read_only: conn.read_only,
            last_answer: None,
            ended: None,
        };
        let mut socket_timeout = Duration::ZERO;
        let why = loop {
            // What is due goes out first, on every turn: also while answers keep coming (a
            // busy reader must not starve the heartbeat, nor the ping).
            let now = Instant::now();
            if now >= last_recv + read_timeout {
                break format!("nothing heard for {read_timeout:?}");
            }
            let anchor_at = self
                .anchored_at()
                .map(|t| t + anchor_every)
                .max(beats.heartbeat_answered.map(|t| t + tick));
            let mut beat = !beats.heartbeat_out && self.live_tokens.load(Ordering::SeqCst) > 0;
            if beat && anchor_at.is_none_or(|t| now >= t) {
                // The cheapest request the leader checks the session for: a transaction that
                // only checks that the root exists.
                let root = self.config.full("/");
                let check = Req::Multi(vec![Req::Check {
                    path: &root,
                    version: -1,
                }])
                .outgoing();
                let heartbeat = Outgoing {
                    heartbeat: true,
                    ..check
                };
                if let Err(e) = self.outbox.send(vec![heartbeat], now + read_timeout) {
                    break format!("heartbeat: {e}");
                }
                beats.heartbeat_out = true;
                beat = false;
            } else if beats.ping_sent.is_none() && now >= self.outbox.last_send() + ping_every {
                let ping = Enc::request(xid::PING, op::PING).finish();
                if let Err(e) = self.outbox.send_reserved(conn.epoch, &ping) {
                    break format!("ping: {e}");
                }
                beats.ping_sent = Some(now);
            }
            let mut wake = last_recv + read_timeout;
            if beats.ping_sent.is_none() {
                wake = wake.min(self.outbox.last_send() + ping_every);
            }
            if beat {
                wake = wake.min(anchor_at.unwrap_or(now));
            }
            let wait = wake
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            // One system call less per answer: the socket keeps its timeout unless the next
            // deadline is nearer, or more than twice as far (then it would wake for nothing).
            if wait < socket_timeout || wait > socket_timeout * 2 {
                if let Err(e) = conn.stream.set_read_timeout(Some(wait)) {
                    break format!("socket: {e}");
                }
                socket_timeout = wait;
            }
            match conn.reader.read_frame(&mut conn.stream, Some(wake)) {
                Ok(frame) => {
                    last_recv = Instant::now();
                    if let Err(e) = self.on_frame(frame, &mut beats) {
                        break format!("the server sent what the protocol does not allow: {}", e.0);
                    }
                    if let Some(ended) = beats.ended {
                        break format!("the server ended the session ({ended:?})");
                    }
                }
                // Whatever fell due is sent at the top of the loop.
                Err(e) if timed_out(&e) => {}
                Err(e) => break format!("{e}"),
            }
        };
        self.disconnected(conn.epoch, &why);
        beats.ended
    }

    /// The send time of the latest answer that extended the lease bound.
    fn anchored_at(&self) -> Option<Instant> {
        self.status.lock().leader_saw
    }

    /// One frame from the server.
    fn on_frame(
        &self,
        frame: Vec<u8>,
        beats: &mut Beats,
    ) -> std::result::Result<(), proto::Malformed> {
        let mut d = Dec::new(&frame);
        let header = ReplyHeader::decode(&mut d)?;
        if header.zxid > 0 {
            self.last_zxid.fetch_max(header.zxid, Ordering::SeqCst);
        }
        match header.xid {
            xid::NOTIFICATION => {
                let n = Notification::decode(&mut d)?;
                let to = self.watches.lock().fire(&n);
                if !to.is_empty() {
                    self.counters
                        .watch_events
                        .fetch_add(to.len() as u64, Ordering::Relaxed);
                    let event = WatchEvent {
                        kind: n.kind,
                        path: strip(&self.config.prefix, &n.path),
                    };
                    // An unbounded channel never blocks: it gets the event from here, one
                    // thread hop sooner (a lock's waiter wakes at once). A bounded one may be
                    // full, so the event thread does the (possibly blocking) send; each channel
                    // always goes one way, so its events stay in order.
                    // Work to do before waking anyone (a waiter's next read) goes out first.
                    for w in &to {
                        if let Some(first) = &w.on_fire {
                            first();
                        }
                    }
                    let (direct, queued): (Vec<_>, Vec<_>) = to
                        .into_iter()
                        .map(|w| w.tx)
                        .partition(|tx| tx.capacity().is_none());
                    for tx in direct {
                        let _ = tx.send(event.clone());
                    }
                    if !queued.is_empty() {
                        self.job(Job::Deliver(queued, event));
                    }
                }
            }
            // A ping keeps the connection alive. It does not extend the lease bound: a
            // follower answers it alone, also while cut off from the leader, which may be
            // expiring the session meanwhile.
            xid::PING => {
                let sent = beats
                    .ping_sent
                    .take()
                    .ok_or(proto::Malformed("unasked ping answer"))?;
                // The server touched the session for it, which the leader learns later.
                // Not counted as the answer before the next one (`last_answer`): that one's
                // wait is measured from its own send or an earlier answer, the safe side.
                beats.touches.touched(sent, Instant::now());
            }
            xid::SET_WATCHES => {
                if header.err != 0 {
                    warn!(
                        "the server did not restore the watches (error {})",
                        header.err
                    );
                }
            }
            xid::AUTH => {
                let waiter = self
                    .auth_waiters
                    .lock()
                    .pop_front()
                    .ok_or(proto::Malformed("an auth answer nobody asked for"))?;
                let _ = waiter.send(header.err);
            }
            x => {
                let pending = self.outbox.complete(x)?;
                if let Some(w) = pending.watch.as_ref() {
                    if header.err == 0 || (header.err == NO_NODE && w.kind == WatchType::Exist) {
                        self.watches.lock().add(w.as_set(header.err == 0));
                    } else if header.err == NO_NODE && pending.hold {
                        // A held node that was gone before its watch was set.
                        self.hold_gone(&strip(&self.config.prefix, &w.path));
                    }
                }
                let now = Instant::now();
                if pending.heartbeat {
                    beats.heartbeat_out = false;
                    beats.heartbeat_answered = Some(now);
                    if header.err != 0 {
                        // NoAuth: our identity cannot read the root we check; the bound then
                        // moves only with our own writes, and holds lapse.
                        warn!(
                            "the lease heartbeat failed (error {}): held locks lapse unless \
                             this client's writes go through; it needs READ on {}",
                            header.err,
                            self.config.full("/")
                        );
                    }
                }
                // A write's answer from the leader's pipeline vouches for the touches the
                // follower passed on before it forwarded the write (see `touches`). Only
                // answers given after the leader checked the session count: not one from the
                // server we talk to alone (a read-only one, a throttled or refused request).
                let err = header.err;
                let reply = conn::Reply { header, frame };
                // Its own wait: from its send, or from the answer before it if that came later
                // (it queued behind ours).
                let waited_from = beats
                    .last_answer
                    .replace(now)
                    .map_or(pending.sent, |a| a.max(pending.sent));
                if pending.anchors != Anchors::No && !beats.read_only {
                    let checked = request::leader_vouched(pending.anchors, &reply);
                    let through = Through {
                        sent: pending.sent,
                        waited_from,
                        answered: now,
                        checked,
                    };
                    if let Some(touch) = beats.touches.leader_answered(through) {
                        self.answered(touch);
                    }
                }
                if err == 0 || err == NO_NODE {
                    beats.touches.touched(pending.sent, now);
                }
                pending.answer.fulfil(reply);
                beats.ended = match err {
                    SESSION_EXPIRED => Some(Ended::Expired),
                    SESSION_CLOSED_REQUIRE_AUTH => Some(Ended::AuthRequired),
                    _ => beats.ended,
                };
            }
        }
        Ok(())
    }

    /// The leader has certainly touched the current session at or after `touch`.
    fn answered(&self, touch: Instant) {
        let mut status = self.status.lock();
        if status.session.is_some() {
            status.leader_saw = Some(status.leader_saw.map_or(touch, |t| t.max(touch)));
        }
    }

    fn disconnected(&self, epoch: u64, why: &str) {
        self.outbox.close(epoch);
        // Auth packets of this connection go unanswered: their callers hear ConnectionLoss.
        self.auth_waiters.lock().clear();
        if self.is_closed() {
            return;
        }
        debug!("connection {epoch} ended: {why}");
        let mut status = self.status.lock();
        if status.phase != Phase::Connected {
            return;
        }
        status.phase = Phase::Suspended;
        status.silent_since.get_or_insert_with(Instant::now);
        self.status_changed.notify_all();
        if let Some(id) = status.session.as_ref().map(|s| s.id) {
            self.publish(ConnectionState::Suspended, id);
        }
    }

    /// Tells every watcher that its watch will never fire (`kind`: the session is lost, or
    /// the client closed), and forgets them all. Unbounded channels hear at once; bounded ones
    /// through the event thread, which never blocks on them (when closing, only if they have
    /// room now). The client's own watch on held nodes is left out: the holds' tokens carry
    /// the loss.
    fn end_watches(&self, kind: WatchKind) {
        let ended = self.watches.lock().drain();
        for (path, tx) in ended {
            if tx.same_channel(self.hold_watch_tx()) {
                continue;
            }
            let event = WatchEvent {
                kind,
                path: strip(&self.config.prefix, &path),
            };
            if tx.capacity().is_none() {
                let _ = tx.send(event);
            } else if kind == WatchKind::Closed {
                let _ = tx.try_send(event);
            } else {
                self.job(Job::Deliver(vec![tx], event));
            }
        }
    }

    /// Publishes LOST for `id`. `declared`: the client decided it (the server said nothing),
    /// so the server may still keep the session; it is closed on the next connection.
    fn lose(&self, id: SessionId, why: &str, declared: bool) {
        let mut status = self.status.lock();
        if status.session.as_ref().map(|s| s.id) != Some(id) {
            return;
        }
        warn!("session {id} is lost: {why}");
        let session = status.session.take();
        status.phase = Phase::Connecting;
        status.leader_saw = None;
        self.end_watches(WatchKind::SessionLost);
        self.status_changed.notify_all();
        self.publish(ConnectionState::Lost, id);
        if declared {
            *self.to_close.lock() = session;
        }
    }

    /// Closes the session (when it is live), stops both threads and waits for them.
    /// Idempotent.
    pub fn shutdown(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Closing ends every hold, whether or not the server hears of it now: the session is
        // being closed, or left to expire. Marked first, so no hold outlives the call.
        for token in std::mem::take(&mut *self.tokens.lock()) {
            if let Some(token) = token.upgrade() {
                token.mark_lost();
            }
        }
        if self.phase() == Phase::Connected {
            // Closing the session makes its ephemeral nodes go now, not at expiry. A server
            // that does not answer soon gets no longer: the session then ends by expiring.
            let until = Instant::now() + self.config.connection_timeout.min(CLOSE_WAIT);
            let close = Outgoing {
                frame: Enc::request(0, op::CLOSE_SESSION).finish(),
                watch: None,
                anchors: Anchors::No,
                heartbeat: false,
                hold: false,
            };
            if let Ok(mut t) = self.outbox.send(vec![close], until) {
                if let Some(t) = t.pop() {
                    let _ = t.answer.wait(Some(until));
                }
            }
        }
        self.outbox.shut(Error::Closed);
        if let Some(s) = self.connecting.lock().take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.stop.lock().take();
        self.job(Job::Stop);
        let me = thread::current().id();
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        {
            let mut status = self.status.lock();
            status.phase = Phase::Closed;
            status.session = None;
            self.status_changed.notify_all();
        }
        self.subscribers.clear();
        self.end_watches(WatchKind::Closed);
        debug!("client closed");
    }
}

/// What `track_connecting` refusing means.
struct Closing;

impl From<Closing> for std::io::Error {
    fn from(_: Closing) -> std::io::Error {
        std::io::Error::other("the client is closing")
    }
}

/// Attaches to session `id` over `sock` and closes it, so that its ephemeral nodes go now
/// rather than when the server would expire it. `Ok(false)` if it had already expired.
pub(crate) fn close_session(
    sock: &mut TcpStream,
    id: SessionId,
    passwd: &[u8],
    until: Instant,
) -> std::io::Result<bool> {
    use std::io::Write;
    bound(sock, until)?;
    let timeout = until.saturating_duration_since(Instant::now());
    let req = ConnectRequest {
        last_zxid_seen: 0,
        timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
        session_id: id.0,
        passwd: passwd.to_vec(),
        read_only: false,
    };
    sock.write_all(&req.encode())?;
    let mut reader = FrameReader::new();
    let answer = ConnectResponse::decode(&reader.read_frame(sock, Some(until))?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.0))?;
    if answer.timeout_ms <= 0 {
        return Ok(false);
    }
    sock.write_all(&Enc::request(1, op::CLOSE_SESSION).finish())?;
    reader.read_frame(sock, Some(until))?;
    Ok(true)
}
