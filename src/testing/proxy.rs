//! A TCP proxy that breaks connections on demand.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often an idle pump looks at the proxy's mode.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    Blackhole,
    /// Requests pass, replies are held: the server acts, the client never hears.
    HoldReplies,
    /// Replies pass, requests are held: the server talks, never hears back.
    HoldRequests,
    /// Replies pass; requests are not even read, so the client's socket fills and its
    /// writes block (a server that stopped reading).
    StallRequests,
    /// Requests are not read and replies are held.
    Freeze,
    /// Every byte passes, each [`Shared::delay`] after the proxy read it.
    Delay,
    Refuse,
}

/// One proxied connection: the socket accepted from the client and the one dialled to the
/// target, shared by its two pumps and the list [`FaultProxy::cut`] walks (one descriptor each).
struct Conn {
    id: u64,
    flags: Arc<Flags>,
    sockets: [Arc<TcpStream>; 2],
}

/// What a connection's pumps look at to stop.
#[derive(Default)]
struct Flags {
    /// Set by [`FaultProxy::cut`], which also drops what the connection held from the counts.
    cut: AtomicBool,
    /// Set by a pump that stopped on its own: the other one stops too.
    ended: AtomicBool,
}

struct Shared {
    target: Mutex<SocketAddr>,
    mode: Mutex<Mode>,
    mode_changed: Condvar,
    conns: Mutex<Vec<Conn>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopping: AtomicBool,
    /// Bytes held, per direction: requests (`[0]`) and replies (`[1]`).
    held: [AtomicU64; 2],
    accepted: AtomicU64,
    /// Bytes delivered from clients to the server.
    requests_passed: AtomicU64,
    /// Bytes delivered from the server to clients.
    replies_passed: AtomicU64,
    /// With [`Mode::Delay`]: how long each byte waits, in nanoseconds.
    delay: AtomicU64,
}

/// A TCP proxy in front of one server, for fault tests.
///
/// - [`cut`](Self::cut): closes every current connection now. A client sees connection loss;
///   its session survives on the server.
/// - [`blackhole`](Self::blackhole) / [`heal`](Self::heal): keeps sockets open but holds every
///   byte (a half-open connection, or a partition); held bytes are delivered on heal, as TCP
///   would retransmit them. Long enough, and the server expires the session.
/// - [`delay`](Self::delay): every byte passes, late (a slow link).
/// - [`refuse`](Self::refuse): closes current connections and every new one at once.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            mode: Mutex::new(Mode::Pass),
            mode_changed: Condvar::new(),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            held: [AtomicU64::new(0), AtomicU64::new(0)],
            accepted: AtomicU64::new(0),
            requests_passed: AtomicU64::new(0),
            replies_passed: AtomicU64::new(0),
            delay: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || accept_loop(s, listener))?;
        Ok(FaultProxy {
            addr,
            shared,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<proxy port>`, to give a client instead of the server's.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Sends the connections accepted from now on to `target` instead (a server replaced
    /// behind one address: another certificate, another ensemble); current ones stay where
    /// they are until [`cut`](Self::cut). A connection being accepted as this is called may
    /// still go to the old target, and a `cut` at once may miss it: cut when the client is
    /// connected and idle, or wait for the new target's effect.
    pub fn retarget(&self, target: SocketAddr) {
        *self.shared.target.lock() = target;
    }

    /// Closes every current connection now; what they held is dropped
    /// ([`held_bytes`](Self::held_bytes) starts again from zero).
    pub fn cut(&self) {
        // Under the connections' lock, which a pump takes to publish what it holds: no pump
        // of a cut connection publishes after this.
        let mut conns = self.shared.conns.lock();
        for c in conns.drain(..) {
            c.flags.cut.store(true, Ordering::SeqCst);
            for s in &c.sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        for held in &self.shared.held {
            held.store(0, Ordering::SeqCst);
        }
    }

    /// Holds every byte in both directions until [`heal`](Self::heal), keeping sockets open.
    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Lets requests through but holds every reply until [`heal`](Self::heal) or
    /// [`cut`](Self::cut): the server applies a request whose answer the client never gets.
    pub fn hold_replies(&self) {
        self.set_mode(Mode::HoldReplies);
    }

    /// Lets replies through but holds every request until [`heal`](Self::heal) or
    /// [`cut`](Self::cut): one direction of a partition (the server's side never hears the
    /// client again, the client still hears the server).
    pub fn hold_requests(&self) {
        self.set_mode(Mode::HoldRequests);
    }

    /// Replies pass, but the client's bytes are no longer read at all until
    /// [`heal`](Self::heal) (what a read already under way took is held, not delivered):
    /// once the socket buffers between are full, the client's writes block, as against a
    /// server that stopped reading.
    pub fn stall_requests(&self) {
        self.set_mode(Mode::StallRequests);
    }

    /// Requests are not read (as in [`stall_requests`](Self::stall_requests)) and replies are
    /// held, until another mode or [`heal`](Self::heal).
    pub fn freeze(&self) {
        self.set_mode(Mode::Freeze);
    }

    /// Bytes delivered from clients to the server so far, counted as the proxy hands them on
    /// (so before the server can answer them): a test can wait for it to grow to know a
    /// request is on its way to the server, past any later change of mode.
    pub fn requests_passed(&self) -> u64 {
        self.shared.requests_passed.load(Ordering::SeqCst)
    }

    /// Bytes delivered from the server to clients so far, counted as the proxy hands them on:
    /// what the server sent, for a test of a client's cost to it.
    pub fn replies_passed(&self) -> u64 {
        self.shared.replies_passed.load(Ordering::SeqCst)
    }

    /// Delays every byte, both ways, by `by` from when the proxy read it, until another mode or
    /// [`heal`](Self::heal) (which delivers what waits at once): a slow link, in order, with
    /// nothing lost.
    pub fn delay(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.shared.delay.store(nanos, Ordering::SeqCst);
        self.set_mode(Mode::Delay);
    }

    /// Closes current connections and refuses new ones (accepted, then reset) until
    /// [`heal`](Self::heal).
    pub fn refuse(&self) {
        self.set_mode(Mode::Refuse);
        self.cut();
    }

    /// Back to passing traffic; held bytes are delivered.
    pub fn heal(&self) {
        self.set_mode(Mode::Pass);
    }

    /// Bytes held and not delivered yet, both directions, summed over the live connections
    /// (a connection that ends drops what it held): a test can wait for this to know a
    /// request or its answer is in flight.
    pub fn held_bytes(&self) -> u64 {
        self.held_requests() + self.held_replies()
    }

    /// Bytes from clients held and not delivered yet, over the live connections.
    pub fn held_requests(&self) -> u64 {
        self.shared.held[0].load(Ordering::SeqCst)
    }

    /// Bytes from the server held and not delivered yet, over the live connections.
    pub fn held_replies(&self) -> u64 {
        self.shared.held[1].load(Ordering::SeqCst)
    }

    fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock() = mode;
        self.shared.mode_changed.notify_all();
    }

    /// Connections open through the proxy now: a test can tell which of its proxies a client
    /// is attached through.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.lock().take() {
            let _ = h.join();
        }
        self.cut();
        let threads: Vec<_> = std::mem::take(&mut *self.shared.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Drops an accepted connection with a reset, as the client would meet a server that is down
/// or refuses it (a connect refused), not a clean close, which a TLS client takes for a server
/// ending its handshake.
fn reset(conn: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor, and a `linger` of the size given, read by the call
    // only.
    unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(conn);
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        if *shared.mode.lock() == Mode::Refuse {
            reset(client);
            continue;
        }
        let target = *shared.target.lock();
        let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
            reset(client);
            continue;
        };
        let flags = Arc::new(Flags::default());
        let (client, server) = (Arc::new(client), Arc::new(server));
        let id = shared.accepted.load(Ordering::SeqCst);
        shared.conns.lock().push(Conn {
            id,
            flags: flags.clone(),
            sockets: [client.clone(), server.clone()],
        });
        let mut threads = shared.threads.lock();
        threads.retain(|t| !t.is_finished());
        for (from, to, replies) in [
            (client.clone(), server.clone(), false),
            (server, client, true),
        ] {
            let s = shared.clone();
            let flags = flags.clone();
            if let Ok(h) = thread::Builder::new()
                .name("fault-proxy-pump".into())
                .spawn(move || pump(&s, id, &from, &to, &flags, replies))
            {
                threads.push(h);
            }
        }
    }
}

/// Copies `from` to `to` for connection `id`; `replies` tells that this is the server-to-client
/// direction. When either direction ends, the connection is marked ended (so its other pump
/// stops even if it reads nothing), what it held leaves the counts, both sockets are shut and
/// it leaves the proxy's list, so its descriptors close once both pumps are gone.
fn pump(
    shared: &Shared,
    id: u64,
    mut from: &TcpStream,
    mut to: &TcpStream,
    flags: &Flags,
    replies: bool,
) {
    let _ = to.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    // When each part of `pending` was read, and its length: a delayed link sends a part once
    // it is old enough.
    let mut arrivals: VecDeque<(Instant, usize)> = VecDeque::new();
    let mut held = Held {
        shared,
        cut: &flags.cut,
        counter: &shared.held[usize::from(replies)],
        published: 0,
    };
    loop {
        if flags.cut.load(Ordering::SeqCst)
            || flags.ended.load(Ordering::SeqCst)
            || shared.stopping.load(Ordering::SeqCst)
        {
            break;
        }
        if !replies {
            let mut mode = shared.mode.lock();
            if matches!(*mode, Mode::StallRequests | Mode::Freeze) {
                // Reads nothing; looks again when the mode changes (or to notice an end).
                shared.mode_changed.wait_for(&mut mode, POLL);
                continue;
            }
        }
        // A delayed part waiting: read no longer than until it is due.
        let delay = Duration::from_nanos(shared.delay.load(Ordering::SeqCst));
        let wait = match arrivals.front() {
            Some(&(at, _)) if *shared.mode.lock() == Mode::Delay => (at + delay)
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL),
            _ => POLL,
        };
        let _ = from.set_read_timeout(Some(wait));
        // The sender closed its side: what it sent before still goes (below), then the pump
        // ends.
        let mut closed = false;
        match from.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                arrivals.push_back((Instant::now(), n));
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        // A request read while a stall began (the read was under way) is held, not passed:
        // from the stall on, nothing the client sends reaches the server.
        let mode = *shared.mode.lock();
        let hold = match mode {
            Mode::Blackhole | Mode::Freeze => true,
            Mode::HoldReplies => replies,
            Mode::HoldRequests | Mode::StallRequests => !replies,
            Mode::Pass | Mode::Refuse | Mode::Delay => false,
        };
        // How much of `pending` goes now: all of it, or on a delayed link what is due (all of
        // it once the sender closed, each part no earlier than due).
        let mut ready = if hold {
            0
        } else if mode == Mode::Delay {
            let now = Instant::now();
            let mut ready = 0;
            while let Some(&(at, n)) = arrivals.front() {
                if at + delay > now {
                    break;
                }
                ready += n;
                arrivals.pop_front();
            }
            ready
        } else {
            arrivals.clear();
            pending.len()
        };
        if closed && mode == Mode::Delay {
            if let Some(&(last, _)) = arrivals.back() {
                thread::sleep((last + delay).saturating_duration_since(Instant::now()));
            }
            arrivals.clear();
            ready = pending.len();
        }
        if !held.publish((pending.len() - ready) as u64) {
            break;
        }
        if ready > 0 {
            // Counted before the write: the server may answer (and a test read the count)
            // before this thread runs again.
            let passed = if replies {
                &shared.replies_passed
            } else {
                &shared.requests_passed
            };
            passed.fetch_add(ready as u64, Ordering::SeqCst);
            if to.write_all(&pending[..ready]).is_err() {
                break;
            }
            pending.drain(..ready);
        }
        if closed {
            break;
        }
    }
    held.publish(0);
    flags.ended.store(true, Ordering::SeqCst);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    shared.conns.lock().retain(|c| c.id != id);
}

/// One pump's share of its direction's held-byte count.
struct Held<'a> {
    shared: &'a Shared,
    cut: &'a AtomicBool,
    counter: &'a AtomicU64,
    published: u64,
}

impl Held<'_> {
    /// Makes this pump's share `bytes`; false if its connection was cut, whose shares
    /// [`FaultProxy::cut`] already dropped. Under the connections' lock, as the cut.
    fn publish(&mut self, bytes: u64) -> bool {
        let _conns = self.shared.conns.lock();
        if self.cut.load(Ordering::SeqCst) {
            return false;
        }
        if bytes >= self.published {
            self.counter
                .fetch_add(bytes - self.published, Ordering::SeqCst);
        } else {
            self.counter
                .fetch_sub(self.published - bytes, Ordering::SeqCst);
        }
        self.published = bytes;
        true
    }
}
