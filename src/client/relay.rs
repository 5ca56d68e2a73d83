//! The session relay: a loopback TCP relay between the `zookeeper` crate and the servers.
//!
//! The crate cannot be told which session to resume, cannot report the session it got, and
//! cannot be made to drop a silent connection. The relay owns the sockets instead:
//!
//! - It reads the connect handshake in both directions, so the framework knows the session id,
//!   the negotiated timeout and the password, and sees a server-reported expiry as it happens.
//! - It decides which session every handshake asks for: the live one (so a fresh crate instance,
//!   built after the old one gave up, resumes the same session), or none after the session was
//!   lost (so a new one starts). A session declared lost is never resumed again: if the server
//!   revives it anyway, the relay closes it on the spot.
//! - It can cut every relayed connection, which makes the crate fail its in-flight requests with
//!   connection loss and reconnect: that is how a silent (half-open) connection is bounded.
//!
//! After the handshake the relay copies bytes unchanged in both directions.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{debug, warn};
use parking_lot::Mutex;

use super::wire::{self, ConnectRequest, ConnectResponse};
use crate::connect_string::HostPort;

/// The crate gives a connection attempt 2 s before it starts another; holding a connection
/// while no server answers longer than that only delays its next attempt.
const HOLD_UNREACHABLE: Duration = Duration::from_secs(2);
/// Longest wait for the server's answer to a handshake. A server that is still starting can
/// take the connection and never answer, and the crate sets no timer on a new instance's first
/// connection: without this bound both would wait for ever.
const HANDSHAKE_ANSWER: Duration = Duration::from_secs(2);
/// Pause between rounds over all hosts while none answers.
const UNREACHABLE_PAUSE: Duration = Duration::from_millis(100);

/// What the relay tells the framework.
#[derive(Debug, Clone)]
pub(crate) enum RelayEvent {
    /// The crate opened connection `epoch` to the relay.
    Accepted { epoch: u64 },
    /// The server granted session `id` on connection `epoch` (new or resumed).
    Session {
        epoch: u64,
        id: i64,
        timeout: Duration,
        passwd: Vec<u8>,
        /// When the handshake was sent: the server cannot expire the session before this
        /// instant plus `timeout`.
        sent_at: Instant,
    },
    /// The server said that session `id`, which connection `epoch` asked to resume, expired.
    Expired { epoch: u64, id: i64 },
    /// No server answered for connection `epoch`.
    Unreachable { epoch: u64, error: String },
    /// Connection `epoch` ended.
    Closed { epoch: u64 },
    /// The server refused our credentials (`code` is its error code) on connection `epoch`.
    AuthFailed { epoch: u64, code: i32 },
}

type Notify = Arc<dyn Fn(RelayEvent) + Send + Sync>;

#[derive(Default)]
struct Policy {
    resume: Option<(i64, Vec<u8>)>,
    banned: Vec<i64>,
}

struct Shared {
    hosts: Vec<HostPort>,
    /// `addAuth` credentials sent on every connection, right behind the handshake: the server
    /// ties authentication to the connection, and the crate never sends it again after a
    /// reconnect.
    auth: Vec<(String, Vec<u8>)>,
    next_host: AtomicUsize,
    connect_timeout: Duration,
    requested_timeout_ms: i32,
    policy: Mutex<Policy>,
    epoch: AtomicU64,
    live: Mutex<HashMap<u64, Vec<TcpStream>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    notify: Notify,
    /// Held while a new crate instance is being wired up, so that it cannot see its first
    /// handshake complete before its state listener is attached.
    handshake_gate: Mutex<()>,
    stopping: AtomicBool,
    poisoned: AtomicBool,
}

/// See the module documentation.
pub(crate) struct Relay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl Relay {
    /// Starts the relay on a free loopback port.
    pub fn start(
        hosts: Vec<HostPort>,
        auth: Vec<(String, Vec<u8>)>,
        connect_timeout: Duration,
        session_timeout: Duration,
        notify: Notify,
    ) -> io::Result<Relay> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            hosts,
            auth,
            next_host: AtomicUsize::new(0),
            connect_timeout,
            requested_timeout_ms: session_timeout.as_millis().min(i32::MAX as u128) as i32,
            policy: Mutex::new(Policy::default()),
            epoch: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            notify,
            handshake_gate: Mutex::new(()),
            stopping: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("zk-relay-accept".into())
            .spawn(move || accept_loop(s, listener))?;
        Ok(Relay {
            addr,
            shared,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    /// The address the crate connects to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counts connections the crate has opened; a request whose connection epoch changed
    /// between send and answer may have run on another connection, hence another session.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::SeqCst)
    }

    /// Holds back the first handshake answer of any connection until the guard drops.
    pub fn gate_handshakes(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.shared.handshake_gate.lock()
    }

    /// Cuts every relayed connection now.
    pub fn cut_all(&self) {
        let live = self.shared.live.lock();
        for socks in live.values() {
            for s in socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Forgets session `id`: later handshakes ask for a new session, and if the server revives
    /// `id` anyway it is closed at once.
    pub fn ban(&self, id: i64) {
        let mut p = self.shared.policy.lock();
        if p.resume.as_ref().is_some_and(|(r, _)| *r == id) {
            p.resume = None;
        }
        if !p.banned.contains(&id) {
            p.banned.push(id);
        }
    }

    /// Opens a side connection and closes session `id` on the server, so its ephemeral nodes go
    /// now. Best effort: gives up after the connect timeout per host.
    pub fn close_session_on_server(&self, id: i64, passwd: Vec<u8>) {
        let shared = self.shared.clone();
        spawn_tracked(&self.shared, "zk-relay-close", move || {
            for host in &shared.hosts {
                let Ok(mut sock) = host.connect(shared.connect_timeout) else {
                    continue;
                };
                match wire::close_session(&mut sock, id, &passwd, shared.connect_timeout) {
                    Ok(true) => debug!("closed lost session {id:#x} on {host}"),
                    Ok(false) => debug!("lost session {id:#x} had already expired"),
                    Err(e) => {
                        debug!("could not close lost session {id:#x} via {host}: {e}");
                        continue;
                    }
                }
                return;
            }
        });
    }

    /// From now on, answer every handshake with a session of 1 ms and hold the connection:
    /// the crate then closes itself on its next reconnect. Used while shutting down a crate
    /// instance that has no live session to close properly.
    pub fn poison(&self) {
        self.shared.poisoned.store(true, Ordering::SeqCst);
    }

    /// Stops accepting, cuts everything and joins every relay thread.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.lock().take() {
            let _ = h.join();
        }
        self.cut_all();
        let threads: Vec<_> = std::mem::take(&mut *self.shared.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }

    /// Test hook: sends the crate an answer to a request it never made. The crate's io thread
    /// panics on it ("no inflight request"), which is how its own bugs look from outside.
    #[cfg(feature = "testing")]
    pub fn inject_stray_reply(&self) {
        let live = self.shared.live.lock();
        for socks in live.values() {
            if let Some(down) = socks.first() {
                let mut body = Vec::new();
                body.extend_from_slice(&0x7fff_fff0i32.to_be_bytes());
                body.extend_from_slice(&0i64.to_be_bytes());
                body.extend_from_slice(&0i32.to_be_bytes());
                let mut d = down;
                let _ = wire::write_frame(&mut d, &body);
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_tracked(shared: &Arc<Shared>, name: &str, f: impl FnOnce() + Send + 'static) {
    let mut threads = shared.threads.lock();
    // Reap the finished ones so the list stays as long as the live connections.
    let (done, running): (Vec<_>, Vec<_>) = threads.drain(..).partition(|t| t.is_finished());
    *threads = running;
    for t in done {
        let _ = t.join();
    }
    match thread::Builder::new().name(name.into()).spawn(f) {
        Ok(h) => threads.push(h),
        Err(e) => warn!("relay could not start a thread: {e}"),
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let down = match conn {
            Ok(s) => s,
            Err(e) => {
                warn!("relay accept failed: {e}");
                continue;
            }
        };
        let epoch = shared.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        (shared.notify)(RelayEvent::Accepted { epoch });
        let s = shared.clone();
        spawn_tracked(&shared, "zk-relay-conn", move || serve(s, down, epoch));
    }
}

fn serve(shared: Arc<Shared>, mut down: TcpStream, epoch: u64) {
    let _ = down.set_nodelay(true);
    let _ = down.set_read_timeout(Some(HOLD_UNREACHABLE));
    let request = match wire::read_frame(&mut down) {
        Ok(body) => ConnectRequest::decode(&body),
        Err(_) => None,
    };
    let Some(mut request) = request else {
        debug!("relay connection {epoch}: no handshake from the client");
        (shared.notify)(RelayEvent::Closed { epoch });
        return;
    };
    if shared.poisoned.load(Ordering::SeqCst) {
        poison_connection(down);
        (shared.notify)(RelayEvent::Closed { epoch });
        return;
    }
    let Some(mut up) = connect_upstream(&shared, epoch) else {
        let _ = down.shutdown(Shutdown::Both);
        (shared.notify)(RelayEvent::Closed { epoch });
        return;
    };
    {
        let policy = shared.policy.lock();
        match &policy.resume {
            Some((id, passwd)) => {
                request.session_id = *id;
                request.passwd = passwd.clone();
            }
            None => {
                request.session_id = 0;
                request.passwd = vec![0; 16];
            }
        }
    }
    request.timeout_ms = shared.requested_timeout_ms;
    let asked = request.session_id;
    let (Ok(down2), Ok(up2)) = (down.try_clone(), up.try_clone()) else {
        (shared.notify)(RelayEvent::Closed { epoch });
        return;
    };
    let registered = [down.try_clone(), up.try_clone()];
    shared.live.lock().insert(
        epoch,
        registered.into_iter().filter_map(|s| s.ok()).collect(),
    );
    let sent_at = Instant::now();
    let _ = down.set_read_timeout(None);
    // The handshake and the credentials go out in one write, ahead of anything the crate sends,
    // so the server has authenticated the connection before it sees a request.
    let mut opening = Vec::new();
    let _ = wire::write_frame(&mut opening, &request.encode());
    for (scheme, credentials) in &shared.auth {
        let _ = wire::write_frame(&mut opening, &wire::auth_request(scheme, credentials));
    }
    if up.write_all(&opening).is_ok() {
        debug!("relay connection {epoch}: handshake asks for session {asked:#x}");
        thread::scope(|scope| {
            scope.spawn(|| from_server(&shared, up2, down2, epoch, asked, sent_at));
            copy(&mut down, &mut up);
        });
    }
    let _ = down.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
    shared.live.lock().remove(&epoch);
    (shared.notify)(RelayEvent::Closed { epoch });
}

/// Server-to-client half: reads the handshake answer, acts on it, then copies.
fn from_server(
    shared: &Shared,
    mut up: TcpStream,
    mut down: TcpStream,
    epoch: u64,
    asked: i64,
    sent_at: Instant,
) {
    let _ = up.set_read_timeout(Some(HANDSHAKE_ANSWER.min(shared.connect_timeout)));
    // The timeout stays for the auth answers read below, and is lifted once they are in.
    let answer = wire::read_frame(&mut up);
    let frame = match answer {
        Ok(f) => f,
        Err(e) => {
            // The server dropped or ignored the handshake (not serving yet, or a member without
            // quorum). The crate would reconnect at once and spin; make it wait a little.
            debug!("relay connection {epoch}: no handshake answer from the server ({e})");
            thread::sleep(UNREACHABLE_PAUSE);
            let _ = down.shutdown(Shutdown::Both);
            return;
        }
    };
    let Some(resp) = ConnectResponse::decode(&frame) else {
        warn!("relay connection {epoch}: unreadable handshake answer");
        let _ = down.shutdown(Shutdown::Both);
        let _ = up.shutdown(Shutdown::Both);
        return;
    };
    // The answers to our auth packets come next (the crate never asked, so they stop here),
    // and they are read before anyone hears of the session: a refused credential never looks
    // like a connection.
    if resp.timeout_ms > 0 {
        for _ in &shared.auth {
            let reply = wire::read_frame(&mut up);
            let refused = match reply.as_deref().ok().and_then(wire::reply_header) {
                Some((wire::AUTH_XID, 0)) => None,
                Some((wire::AUTH_XID, code)) => Some(code),
                _ => Some(0),
            };
            if let Some(code) = refused {
                warn!("relay connection {epoch}: the server refused our credentials ({code})");
                if code != 0 {
                    (shared.notify)(RelayEvent::AuthFailed { epoch, code });
                }
                let _ = down.shutdown(Shutdown::Both);
                let _ = up.shutdown(Shutdown::Both);
                return;
            }
        }
    }
    let _ = up.set_read_timeout(None);
    if resp.timeout_ms <= 0 {
        {
            let mut p = shared.policy.lock();
            if p.resume.as_ref().is_some_and(|(id, _)| *id == asked) {
                p.resume = None;
            }
        }
        debug!("relay connection {epoch}: server says session {asked:#x} expired");
        (shared.notify)(RelayEvent::Expired { epoch, id: asked });
    } else {
        let revived_banned = {
            let mut p = shared.policy.lock();
            if p.banned.contains(&resp.session_id) {
                true
            } else {
                p.resume = Some((resp.session_id, resp.passwd.clone()));
                false
            }
        };
        if revived_banned {
            warn!(
                "relay connection {epoch}: server resumed session {:#x}, which was declared \
                 lost; closing it",
                resp.session_id
            );
            let mut close = Vec::with_capacity(8);
            close.extend_from_slice(&1i32.to_be_bytes());
            close.extend_from_slice(&(-11i32).to_be_bytes());
            let _ = wire::write_frame(&mut up, &close);
            let _ = up.set_read_timeout(Some(shared.connect_timeout));
            let _ = wire::read_frame(&mut up);
            let _ = down.shutdown(Shutdown::Both);
            let _ = up.shutdown(Shutdown::Both);
            return;
        }
        (shared.notify)(RelayEvent::Session {
            epoch,
            id: resp.session_id,
            timeout: Duration::from_millis(resp.timeout_ms as u64),
            passwd: resp.passwd.clone(),
            sent_at,
        });
    }
    let forwarded = {
        let _gate = shared.handshake_gate.lock();
        wire::write_frame(&mut down, &frame)
    };
    if forwarded.is_ok() {
        copy(&mut up, &mut down);
    }
    let _ = down.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
}

fn copy(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Tries every host in turn until one accepts, for as long as the crate would wait anyway.
fn connect_upstream(shared: &Shared, epoch: u64) -> Option<TcpStream> {
    let give_up = Instant::now() + HOLD_UNREACHABLE;
    let mut last_error = String::from("no host");
    loop {
        for _ in 0..shared.hosts.len() {
            let i = shared.next_host.fetch_add(1, Ordering::Relaxed) % shared.hosts.len();
            let host = &shared.hosts[i];
            let budget = give_up
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(50), shared.connect_timeout);
            match host.connect(budget) {
                Ok(sock) => {
                    let _ = sock.set_nodelay(true);
                    debug!("relay connection {epoch}: connected to {host}");
                    return Some(sock);
                }
                Err(e) => last_error = format!("{host}: {e}"),
            }
        }
        if shared.stopping.load(Ordering::SeqCst) || Instant::now() >= give_up {
            debug!("relay connection {epoch}: no server reachable ({last_error})");
            (shared.notify)(RelayEvent::Unreachable {
                epoch,
                error: last_error,
            });
            return None;
        }
        thread::sleep(UNREACHABLE_PAUSE);
    }
}

/// Answers a handshake with a 1 ms session and holds the connection just over a second. The
/// crate measures its session in whole seconds since its last ping, so on the reconnect that
/// follows it finds the session over and closes itself for good.
fn poison_connection(mut down: TcpStream) {
    let fake = ConnectResponse {
        protocol_version: 0,
        timeout_ms: 1,
        session_id: 0,
        passwd: vec![0; 16],
        read_only: false,
    };
    if wire::write_frame(&mut down, &fake.encode()).is_ok() {
        let until = Instant::now() + Duration::from_millis(1100);
        let mut sink = [0u8; 4096];
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if left.is_zero() || down.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match down.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(_) => break,
            }
        }
    }
    let _ = down.shutdown(Shutdown::Both);
}
