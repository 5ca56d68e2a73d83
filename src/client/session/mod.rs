//! The session layer: one I/O thread owns the connection (it dials it, ends it, and is its
//! reader of last resort), the handshake and its auth and watch replay, pings, and the state
//! machine CONNECTED / SUSPENDED / RECONNECTED / LOST. It uses the connection layer
//! ([`Outbox`], [`FrameReader`]) and nothing above it.
//!
//! This file holds the session's state and what the client asks of it; `io.rs` is the I/O
//! thread itself, `turn.rs` who reads the connection (a caller waiting for its answer reads it
//! itself while no one else does), `frames.rs` what each frame means, whoever read it.
//!
//! A connection is dead when no whole answer has come for two thirds of the negotiated timeout
//! (pings go out after a third of that without a send); its requests then fail with
//! `ConnectionLoss`, the state is SUSPENDED, and the next host is tried. The session is LOST
//! when the server says it expired, or when no server took it back within a whole session
//! timeout of silence; the client then asks the server to close it (so its ephemeral nodes go
//! now) and builds a new one.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use log::{debug, info, warn};
use parking_lot::{Condvar, Mutex};

use super::clock;
use super::config::{strip, strip_owned, Config};
use super::conn::{self, Anchors, FrameReader, Outbox, Outgoing};
use super::dial::{bound, resolve};
use super::events::{Job, Then};
use super::link::{self, LinkReader, LinkWriter, OpenError, Security, Socket, Target};
use super::proto::{
    self, op, xid, ConnectRequest, ConnectResponse, Dec, Enc, Notification, ReplyHeader,
};
use super::request::{self, Req};
use super::slot::{Awaited, TimedOut};
use super::state::{ConnectionState, StateEvent, Subscribers, Subscription};
use super::token::SessionToken;
use super::touches::{Through, Touches};
use super::types::{WatchEvent, WatchKind};
use super::watches::{Registry, WatchType};
use super::Secret;
use crate::connect_string::HostPort;
use crate::error::{ConnectFailure, Error, Result};
use crate::session_id::SessionId;

mod frames;
mod io;
mod turn;

#[cfg(feature = "testing")]
pub(crate) use io::close_session;

/// The server list as `update_hosts` leaves it for the I/O thread.
struct Hosts {
    /// The list in force.
    list: Vec<HostPort>,
    /// The server of the latest connection.
    current: Option<HostPort>,
    /// A new order for the I/O thread to take up before its next connection.
    update: Option<Vec<HostPort>>,
    /// The update says this client moves: a connection made meanwhile (a handshake that was
    /// under way) ends at once.
    must_move: bool,
}

/// Longest wait for the server to confirm a close-session on shutdown.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// The live (or suspended) session.
#[derive(Clone)]
pub(crate) struct Session {
    pub id: SessionId,
    pub timeout: Duration,
    pub passwd: Secret,
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
    /// it cannot expire it before this plus the session timeout. On the lease clock
    /// (`clock`): a suspend of the machine since brings the bound closer.
    leader_saw: Option<Instant>,
    /// Since when no connection has carried a live session (set on SUSPENDED, kept through
    /// LOST, cleared on CONNECTED/RECONNECTED). No call waits past this plus the session
    /// timeout.
    silent_since: Option<Instant>,
    /// The client can never be served (credentials refused, or missing where the server
    /// requires them): every call fails with this at once.
    terminal: Option<Error>,
    /// The current connection is to a read-only server.
    read_only: bool,
    /// The session was made or confirmed by a read-write server: only such a session is
    /// resumed (a read-only server's session is its own, unknown to the ensemble).
    session_is_global: bool,
}

/// An `add_auth` waiting for the server's answer.
struct AuthWaiter {
    scheme: String,
    credentials: Secret,
    answer: Sender<i32>,
}

/// What the client counts for [`ClientMetrics`](super::ClientMetrics).
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub watch_events: AtomicU64,
    pub connections: AtomicU64,
    pub sessions: AtomicU64,
    pub reconnects: AtomicU64,
    pub suspensions: AtomicU64,
    pub session_losses: AtomicU64,
    pub retries: AtomicU64,
    pub watch_backlogs: AtomicU64,
    pub lease_check_failures: AtomicU64,
    /// The session the last CONNECTED, CONNECTED_READ_ONLY or RECONNECTED was for: a read-only
    /// server hands the same session back as CONNECTED_READ_ONLY, which is a reconnect.
    pub last_session: AtomicI64,
}

impl Counters {
    /// One more of `which`.
    pub fn count(which: &AtomicU64) {
        which.fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by every `Client` handle and the client's two threads.
pub(crate) struct Core {
    pub config: Config,
    pub outbox: Outbox,
    /// Who reads the connection: the I/O thread, or a caller waiting for its answer.
    reading: turn::Reading,
    /// The connection's keep-alives and what its answers proved, under the lock every
    /// reader takes frames under.
    beats: Mutex<frames::Beats>,
    watches: Mutex<Registry>,
    status: Mutex<Status>,
    status_changed: Condvar,
    subscribers: Subscribers,
    /// Tokens of things held under a session, marked when that session is lost.
    tokens: Mutex<Vec<Weak<SessionToken>>>,
    /// Credentials added at run time (`Client::add_auth`), replayed after the configured
    /// ones on every new connection.
    added_auth: Mutex<Vec<(String, Secret)>>,
    /// Callers of `add_auth` waiting for the server's answer on the current connection, in
    /// the order their packets went out, with what they sent.
    auth_waiters: Mutex<std::collections::VecDeque<AuthWaiter>>,
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
    connecting: Mutex<Option<Socket>>,
    /// Resumed sessions' connect requests in a row that went unanswered within their short
    /// bound (the next one is given twice as long: see `io::CONNECT_ANSWER_FIRST`).
    unanswered: AtomicU32,
    /// How long the last answered connect request took, in µs (a slow server's next connect
    /// request is given longer).
    answer_took: AtomicU64,
    /// What attempts to connect met that waiting does not mend (TLS, Kerberos with a
    /// server), per server: what `connect()` reports instead of a bare timeout, and the cause
    /// calls' errors and `Lost` events carry. Lock order: `status`, then this; never the
    /// reverse.
    pub unmended: Mutex<Unmended>,
    /// The latest failed attempt to connect since the last connection, `server: what it met`
    /// (a refusal, a timeout, no descriptor left in this process, ...): what `connect()`'s
    /// timeout names.
    pub last_failure: Mutex<Option<String>>,
    /// The version of the latest ensemble configuration the janitor judged (followed or
    /// not), 0 before any: how a test knows the decision is made.
    pub config_judged: std::sync::atomic::AtomicU64,
    /// The servers to connect to, and the one connected to (see `update_hosts`).
    hosts: Mutex<Hosts>,
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
    /// Where the watch on the ensemble's configuration reports, when the client follows it
    /// (the event thread listens).
    pub config_tx: Sender<WatchEvent>,
    /// Where the janitor's watches on the parents of creates whose answers were lost report
    /// (the event thread listens): a create can land after a look found nothing.
    pub marks_tx: Sender<WatchEvent>,
}

/// What the client's second thread listens to.
pub(crate) struct Inbox {
    pub jobs: Receiver<Job>,
    /// Events of the watches on held nodes.
    pub holds: Receiver<WatchEvent>,
    /// Events of the watch on the ensemble's configuration.
    pub config: Receiver<WatchEvent>,
    /// Events of the watches on the parents of lost creates.
    pub marks: Receiver<WatchEvent>,
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
        let config_hosts = config.connect.hosts.clone();
        let tick = config.tick_time;
        let (jobs, jobs_rx) = unbounded();
        let (hold_tx, hold_rx) = unbounded();
        let (config_tx, config_rx) = unbounded();
        let (marks_tx, marks_rx) = unbounded();
        let (stop, stopped) = unbounded();
        let io_reads_all = config.io_thread_reads_all;
        let core = Arc::new(Core {
            config,
            outbox: Outbox::new(),
            reading: turn::Reading::new(io_reads_all),
            beats: Mutex::new(frames::Beats::new(false, tick)),
            watches: Mutex::new(Registry::default()),
            status: Mutex::new(Status {
                phase: Phase::Connecting,
                session: resume,
                leader_saw: None,
                silent_since: None,
                terminal: None,
                read_only: false,
                session_is_global: true,
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
            unanswered: AtomicU32::new(0),
            answer_took: AtomicU64::new(0),
            unmended: Mutex::new(Unmended::default()),
            last_failure: Mutex::new(None),
            config_judged: std::sync::atomic::AtomicU64::new(0),
            hosts: Mutex::new(Hosts {
                list: config_hosts.clone(),
                current: None,
                update: None,
                must_move: false,
            }),
            to_close: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            no_containers: AtomicBool::new(false),
            holds: Mutex::new(HashMap::new()),
            hold_tx,
            config_tx,
            marks_tx,
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
                config: config_rx,
                marks: marks_rx,
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

    /// Waits for a request's answer until `until` (`None`: as long as it takes), reading the
    /// connection itself while no one else does (see `turn`). As [`Awaited::wait`]: `Ok(None)`
    /// if the connection died first, `Err` at the deadline with the answer left for later.
    pub fn await_answer(
        &self,
        answer: &Awaited<conn::Reply>,
        until: Option<Instant>,
    ) -> std::result::Result<conn::Answer, TimedOut> {
        if !answer.is_ready() {
            self.reading
                .caller_turn(|| answer.is_ready(), until, |frame| self.take_frame(frame));
        }
        answer.wait(until)
    }

    /// Reads the connection while no one else does, until `done` or `until`, or until a
    /// caller needs the turn: a thread that waits for a watch reads its own notification, so
    /// that no second thread wakes to hand it over (see `turn`). Returns at once if someone
    /// else reads; `done` must turn true on whatever else should end the caller's wait and
    /// is not a frame or the connection's end. Once `due`, what is still awaited is an answer
    /// on its way, read as a caller reads (see `turn::Reading::waiter_turn`).
    pub fn read_until(
        &self,
        done: impl Fn() -> bool,
        due: impl Fn() -> bool,
        until: Option<Instant>,
    ) {
        self.reading
            .waiter_turn(done, due, until, |frame| self.take_frame(frame));
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
        let c = &self.counters;
        Counters::count(match state {
            ConnectionState::Connected | ConnectionState::ConnectedReadOnly
                if c.last_session.swap(session_id.0, Ordering::Relaxed) != session_id.0 =>
            {
                &c.sessions
            }
            ConnectionState::Connected
            | ConnectionState::ConnectedReadOnly
            | ConnectionState::Reconnected => {
                c.last_session.store(session_id.0, Ordering::Relaxed);
                &c.reconnects
            }
            ConnectionState::Suspended => &c.suspensions,
            ConnectionState::Lost => &c.session_losses,
        });
        self.tokens.lock().retain(|t| match t.upgrade() {
            Some(token) => {
                let lost = match state {
                    ConnectionState::Lost => token.session == session_id,
                    ConnectionState::Suspended => {
                        token.lost_on_suspend && token.session == session_id
                    }
                    // A new session: whatever was held under another one is gone.
                    ConnectionState::Connected | ConnectionState::ConnectedReadOnly => {
                        token.session != session_id
                    }
                    ConnectionState::Reconnected => false,
                };
                if lost {
                    token.mark_lost();
                }
                !lost
            }
            None => false,
        });
        let cause = match state {
            ConnectionState::Lost => self.connect_failure(),
            _ => None,
        };
        self.subscribers.publish(StateEvent {
            state,
            session_id,
            at: Instant::now(),
            cause,
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
        status
            .leader_saw
            .and_then(|sent| clock::to_instant(sent + session.timeout))
    }

    #[cfg(feature = "testing")]
    pub fn session_credentials(&self) -> Option<(SessionId, Vec<u8>)> {
        let status = self.status.lock();
        status.session.as_ref().map(|s| (s.id, s.passwd.to_vec()))
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

    /// True while the connection is to a read-only server.
    pub fn is_read_only(&self) -> bool {
        let status = self.status.lock();
        status.phase == Phase::Connected && status.read_only
    }

    /// See `unmended`.
    pub fn connect_failure(&self) -> Option<ConnectFailure> {
        self.unmended.lock().latest().map(|(cause, _)| cause)
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
                        return Err(Error::ConnectionLoss {
                            cause: self.connect_failure(),
                        });
                    }
                }
            }
        }
    }

    /// An update that moves this client waits for the I/O thread.
    fn move_pending(&self) -> bool {
        let hosts = self.hosts.lock();
        hosts.update.is_some() && hosts.must_move
    }

    /// The server list in force.
    pub fn host_list(&self) -> Vec<HostPort> {
        self.hosts.lock().list.clone()
    }

    /// Replaces the server list (ZooKeeper's `updateServerList`): the I/O thread takes the new
    /// list before its next connection; if the move rule says this client is to move
    /// (`ensemble::plan_move`), the current connection ends now and the session is resumed on
    /// a server of the new list. True if it moves.
    pub fn update_hosts(&self, new: Vec<HostPort>) -> bool {
        use super::ensemble::{plan_move, Move};
        let moving = {
            let mut hosts = self.hosts.lock();
            let plan = plan_move(&hosts.list, &new, hosts.current.as_ref(), fastrand::f32());
            let mut rest = new.clone();
            fastrand::shuffle(&mut rest);
            let (order, moving) = match plan {
                Move::Stay => (rest, false),
                Move::To(mut pool) => {
                    fastrand::shuffle(&mut pool);
                    rest.retain(|h| !pool.contains(h));
                    pool.extend(rest);
                    (pool, true)
                }
            };
            hosts.list = new;
            hosts.update = Some(order);
            hosts.must_move = moving;
            moving
        };
        if moving {
            info!("the server list changed: moving to a server of the new list");
            self.outbox.drop_connection();
            if let Some(s) = self.connecting.lock().as_ref() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        moving
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

    /// Turns to read the connection taken by callers and waiters.
    #[cfg(feature = "testing")]
    pub fn reader_turns(&self) -> u64 {
        self.reading.claims()
    }

    /// Sends `scheme` credentials on the current connection and waits for the server's
    /// answer for `patience` after the packet went out (a wait for the writers' lock does not
    /// eat into it), but never past `deadline`; on success they are replayed on every later
    /// connection. `ConnectionLoss` when no connection is open, the writers' lock stays held
    /// past `deadline`, or no answer comes in time (the server may still take them, and the
    /// client then keeps them: asking again is harmless, each credential is kept once).
    pub fn add_auth(
        &self,
        scheme: &str,
        credentials: &[u8],
        patience: Duration,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let waiter = AuthWaiter {
            scheme: scheme.to_owned(),
            credentials: Secret::new(credentials.to_vec()),
            answer: tx,
        };
        // Registered under the writers' lock just before the packet goes: in wire order, and
        // before its answer can come; the reader never waits behind the write.
        self.outbox
            .send_reserved_now(
                &proto::auth_request(scheme, credentials),
                deadline,
                || self.auth_waiters.lock().push_back(waiter),
                // Ours is the last: waiters are queued only under the writers' lock.
                || drop(self.auth_waiters.lock().pop_back()),
            )
            .map_err(|_| Error::connection_loss())?;
        let mut until = Instant::now() + patience;
        if let Some(d) = deadline {
            until = until.min(d);
        }
        match rx.recv_deadline(until) {
            // Kept for later connections by the reader, before it answered.
            Ok(0) => Ok(()),
            Ok(_) => Err(Error::auth_failed()),
            Err(_) => Err(Error::connection_loss()),
        }
    }

    /// Waits `d`, or less if the client closes meanwhile: then true.
    pub fn pause(&self, d: Duration) -> bool {
        let _ = self.stopped.recv_timeout(d);
        self.is_closed()
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
            if let Ok([t]) = self.outbox.send([close], until, Some(until), None) {
                let _ = t.answer.wait(Some(until));
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

/// The failures waiting does not mend that attempts to connect met, one per server (the
/// latest), most recent last: a server then found down (refused, reset, unreachable; a
/// timeout says nothing) or that leaves the server list no longer counts, and a connection
/// empties it.
#[derive(Debug, Default)]
pub(crate) struct Unmended(Vec<(HostPort, ConnectFailure, String)>);

impl Unmended {
    /// `host` failed so.
    pub fn met(&mut self, host: &HostPort, cause: ConnectFailure, why: String) {
        self.0.retain(|(h, ..)| h != host);
        self.0.push((host.clone(), cause, why));
    }

    /// `host` failed otherwise: what it met before is no longer what stops the client there.
    pub fn passed(&mut self, host: &HostPort) {
        self.0.retain(|(h, ..)| h != host);
    }

    /// Only the servers of this list count.
    pub fn keep_only(&mut self, hosts: &[HostPort]) {
        self.0.retain(|(h, ..)| hosts.contains(h));
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The latest failure, with its message.
    pub fn latest(&self) -> Option<(ConnectFailure, &str)> {
        self.0.last().map(|(_, cause, why)| (*cause, why.as_str()))
    }
}
