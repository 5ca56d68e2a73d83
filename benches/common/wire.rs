//! The wire floor, the benches' own: what any client can do at best on a given server. Jute
//! frames encoded by hand on blocking sockets, one thread per session, every answer read by
//! the thread that waits for it, nothing checked but error codes. It runs the mutex protocol
//! with nothing spare, as `../shared/floor` does (its figures are checked against that one's
//! when it is built: `cargo bench --bench peers` prints both):
//!
//! - acquire = create (ephemeral sequential) and getChildren written together, both answers
//!   read; first in line holds;
//! - otherwise getData with a watch on the predecessor, and when it is deleted, hold at once if
//!   it was the head when we listed, list again if not (a predecessor that was not the head may
//!   have left without holding, so the nodes ahead of it must be looked at again);
//! - release = delete.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::figures::{uncontended_figures, Figures};

pub mod batch;
pub mod cache;
pub mod counter;
pub mod queue;
use super::{pct, process_cpu, run_window};

const CREATE: i32 = 1;
const DELETE: i32 = 2;
const GET_DATA: i32 = 4;
const GET_CHILDREN: i32 = 8;
const CLOSE: i32 = -11;
const EPHEMERAL_SEQUENTIAL: i32 = 3;
/// The xid of a watch notification.
const NOTIFICATION: i32 = -1;
/// A ping's xid and op code, and how long a wait goes without one (a third of the 30 s
/// session).
const PING_XID: i32 = -2;
const PING: i32 = 11;
const PING_EVERY: Duration = Duration::from_secs(10);
/// ZooKeeper's `NoNode`.
const NO_NODE: i32 = -101;

fn put_i32(b: &mut Vec<u8>, v: i32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    put_i32(b, s.len() as i32);
    b.extend_from_slice(s.as_bytes());
}

fn get_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A string at `at`; returns it and where the next field starts.
fn get_str(b: &[u8], at: usize) -> (String, usize) {
    let n = get_i32(b, at) as usize;
    let s = String::from_utf8_lossy(&b[at + 4..at + 4 + n]).into_owned();
    (s, at + 4 + n)
}

/// One session on one blocking socket.
pub struct Wire {
    sock: TcpStream,
    xid: i32,
    /// The last frame read (without its length prefix).
    frame: Vec<u8>,
    /// Read requests sent (getChildren, getData).
    pub reads: u64,
    /// Lock nodes shaped as ours are (see [`contended_like_ours`]).
    like_ours: bool,
    /// Pings while a read waits (see [`Wire::keep_alive`]).
    keep_alive: bool,
}

impl Wire {
    /// A new session (30 s; a floor session lives for one measurement and needs no ping).
    pub fn connect(addr: &str) -> io::Result<Wire> {
        let sock = TcpStream::connect(addr)?;
        sock.set_nodelay(true)?;
        let mut body = Vec::new();
        put_i32(&mut body, 0); // protocol version
        put_i64(&mut body, 0); // last zxid seen
        put_i32(&mut body, 30_000); // session timeout, ms
        put_i64(&mut body, 0); // session id: a new one
        put_i32(&mut body, 16);
        body.extend_from_slice(&[0; 16]); // password
        body.push(0); // not read-only
        let mut w = Wire {
            sock,
            xid: 0,
            frame: Vec::with_capacity(1 << 16),
            reads: 0,
            like_ours: false,
            keep_alive: false,
        };
        w.send(&framed(&body))?;
        w.read_frame()?;
        Ok(w)
    }

    fn read_frame(&mut self) -> io::Result<()> {
        if !self.keep_alive {
            return read_frame(&mut self.sock, &mut self.frame);
        }
        // The socket's reads time out every `PING_EVERY`: nothing read of a frame yet, a ping
        // goes out; a timeout inside a frame only reads on (no byte is lost).
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.sock.read(&mut len[got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if waited_out(&e) => {
                    if got == 0 {
                        let ping = framed(&[PING_XID.to_be_bytes(), PING.to_be_bytes()].concat());
                        self.send(&ping)?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let n = i32::from_be_bytes(len).max(0) as usize;
        self.frame.resize(n, 0);
        let mut got = 0;
        while got < n {
            match self.sock.read(&mut self.frame[got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => got += k,
                Err(e) if waited_out(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// From now on a wait of [`PING_EVERY`] with nothing to read sends a ping (its answer is
    /// passed over, as every answer with a negative xid is): a session waiting longer than its
    /// timeout in a long line is kept, as every client's is. Off by default (the other benches'
    /// floor reads frames with no timeout and no extra work).
    pub fn keep_alive(&mut self) -> io::Result<()> {
        self.sock.set_read_timeout(Some(PING_EVERY))?;
        self.keep_alive = true;
        Ok(())
    }

    /// Reads until an answer (not a notification) comes; returns its error code.
    fn answer(&mut self) -> io::Result<i32> {
        loop {
            self.read_frame()?;
            if get_i32(&self.frame, 0) >= 0 {
                return Ok(get_i32(&self.frame, 12));
            }
        }
    }

    /// Reads until a watch notification comes.
    fn notification(&mut self) -> io::Result<()> {
        loop {
            self.read_frame()?;
            if get_i32(&self.frame, 0) == NOTIFICATION {
                return Ok(());
            }
        }
    }

    fn request(&mut self, op: i32, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        self.xid += 1;
        let mut b = Vec::with_capacity(96);
        put_i32(&mut b, self.xid);
        put_i32(&mut b, op);
        body(&mut b);
        framed(&b)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.sock.write_all(frame)
    }

    /// A create with our lock nodes' shape: a holder id as `data`, the whole protected name.
    fn create_frame_data(&mut self, prefix: &str, data: &[u8]) -> Vec<u8> {
        self.request(CREATE, |b| {
            put_str(b, prefix);
            put_i32(b, data.len() as i32);
            b.extend_from_slice(data);
            put_i32(b, 1); // one ACL: world:anyone, all
            put_i32(b, 31);
            put_str(b, "world");
            put_str(b, "anyone");
            put_i32(b, EPHEMERAL_SEQUENTIAL);
        })
    }

    fn create_frame(&mut self, prefix: &str) -> Vec<u8> {
        self.request(CREATE, |b| {
            put_str(b, prefix);
            put_i32(b, 0); // no data
            put_i32(b, 1); // one ACL: world:anyone, all
            put_i32(b, 31);
            put_str(b, "world");
            put_str(b, "anyone");
            put_i32(b, EPHEMERAL_SEQUENTIAL);
        })
    }

    fn children_frame(&mut self, dir: &str) -> Vec<u8> {
        self.reads += 1;
        self.request(GET_CHILDREN, |b| {
            put_str(b, dir);
            b.push(0);
        })
    }

    /// Creates a lock node under `dir` and lists `dir`, in one write: our node's name and the
    /// children.
    pub fn create_and_list(&mut self, dir: &str) -> io::Result<(String, Vec<String>)> {
        let mut both = if self.like_ours {
            // A protected name of the same length as ours (one id for all: the sort by
            // sequence does not care) and a holder id of a typical length.
            self.create_frame_data(
                &format!("{dir}/_c_0000abcd-1234-5678-0000-000000000001-lock-"),
                b"benchhost:12345:ThreadId(17)",
            )
        } else {
            self.create_frame(&format!("{dir}/lock-"))
        };
        both.extend(self.children_frame(dir));
        self.send(&both)?;
        self.expect_ok()?;
        let (path, _) = get_str(&self.frame, 16);
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        self.expect_ok()?;
        Ok((name, self.children()))
    }

    /// Lists `dir`.
    pub fn list(&mut self, dir: &str) -> io::Result<Vec<String>> {
        let f = self.children_frame(dir);
        self.send(&f)?;
        self.expect_ok()?;
        Ok(self.children())
    }

    /// getData with a watch on `path`: false if it is gone already.
    pub fn watch(&mut self, path: &str) -> io::Result<bool> {
        self.reads += 1;
        let f = self.request(GET_DATA, |b| {
            put_str(b, path);
            b.push(1);
        });
        self.send(&f)?;
        match self.answer()? {
            0 => Ok(true),
            NO_NODE => Ok(false),
            e => Err(io::Error::other(format!("getData: error {e}"))),
        }
    }

    /// Deletes `path`.
    pub fn delete(&mut self, path: &str) -> io::Result<()> {
        let f = self.request(DELETE, |b| {
            put_str(b, path);
            put_i32(b, -1);
        });
        self.send(&f)?;
        self.expect_ok().map(|_| ())
    }

    /// Lock nodes shaped as ours (and Curator's) are, from now on: the protected name and a
    /// holder id as data (see [`contended_like_ours`]).
    pub fn shape_like_ours(&mut self) {
        self.like_ours = true;
    }

    /// Takes the lock under `dir` (which must exist): creates this session's node, waits for
    /// its turn; the node's name.
    pub fn acquire(&mut self, dir: &str) -> io::Result<String> {
        let (me, line) = self.create_and_list(dir)?;
        self.wait_turn(dir, &me, line)?;
        Ok(me)
    }

    /// Ends the session (its nodes go with it).
    pub fn close(mut self) {
        let f = self.request(CLOSE, |_| {});
        if self.send(&f).is_ok() {
            let _ = self.answer();
        }
    }

    fn expect_ok(&mut self) -> io::Result<()> {
        match self.answer()? {
            0 => Ok(()),
            e => Err(io::Error::other(format!("error {e}"))),
        }
    }

    /// The children in the last getChildren answer (after its 16-byte reply header).
    fn children(&self) -> Vec<String> {
        let n = get_i32(&self.frame, 16).max(0) as usize;
        let mut at = 20;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let (s, next) = get_str(&self.frame, at);
            v.push(s);
            at = next;
        }
        v
    }

    /// Waits until this session holds the lock whose node is `me` (its listing `line`).
    fn wait_turn(&mut self, dir: &str, me: &str, mut line: Vec<String>) -> io::Result<()> {
        let mine = sequence(me);
        loop {
            if !line.iter().any(|n| n == me) {
                return Err(io::Error::other("our lock node is gone"));
            }
            // One pass, each name's sequence read once (a sort would read them N log N
            // times): how many are ahead, and the one just ahead.
            let mut ahead = 0usize;
            let mut predecessor: Option<(u64, &str)> = None;
            for n in &line {
                let seq = sequence(n);
                if seq < mine {
                    ahead += 1;
                    if predecessor.is_none_or(|(p, _)| seq > p) {
                        predecessor = Some((seq, n));
                    }
                }
            }
            let Some((_, predecessor)) = predecessor else {
                return Ok(());
            };
            let was_head = ahead == 1;
            let predecessor = format!("{dir}/{predecessor}");
            if self.watch(&predecessor)? {
                self.notification()?;
                if was_head {
                    return Ok(());
                }
            }
            line = self.list(dir)?;
        }
    }
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(body.len() + 4);
    put_i32(&mut f, body.len() as i32);
    f.extend_from_slice(body);
    f
}

/// The sequence number at the end of a sequential node's name.
fn sequence(name: &str) -> u64 {
    name.get(name.len().saturating_sub(10)..)
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

/// `rounds` uncontended acquisitions and releases on one new session, under `dir` (which must
/// exist): acquire (create + list) and release (delete) latencies, CPU per round.
pub fn uncontended(addr: &str, dir: &str, rounds: usize) -> Figures {
    let mut w = Wire::connect(addr).expect("the wire floor's session");
    let mut taken = Vec::with_capacity(rounds);
    let cpu = process_cpu();
    for _ in 0..rounds {
        let s = Instant::now();
        let (me, line) = w.create_and_list(dir).expect("create and list");
        w.wait_turn(dir, &me, line).expect("uncontended turn");
        let held = Instant::now();
        w.delete(&format!("{dir}/{me}")).expect("delete");
        taken.push((held - s, held.elapsed()));
    }
    let figures = uncontended_figures(&taken, process_cpu() - cpu);
    w.close();
    figures
}

/// `n` sessions, a thread each, take the lock under `dir` (which must exist) in turn for
/// `run_for`: throughput, handoff latency (a release's start to the next holder's acquire),
/// client CPU and requests per acquisition (the reads, and the create and the delete).
pub fn contended(addr: &str, dir: &str, n: usize, run_for: Duration) -> Figures {
    contended_shaped(addr, dir, n, run_for, false)
}

/// [`contended`] with lock nodes of our shape: the protected name (`_c_<36-character id>-`)
/// and a holder id as data. What the server's extra work for our safety edges costs, apart
/// from the client's.
pub fn contended_like_ours(addr: &str, dir: &str, n: usize, run_for: Duration) -> Figures {
    contended_shaped(addr, dir, n, run_for, true)
}

fn contended_shaped(
    addr: &str,
    dir: &str,
    n: usize,
    run_for: Duration,
    like_ours: bool,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let mut w = Wire::connect(addr).expect("the wire floor's session");
            w.like_ours = like_ours;
            let (dir, stop, count, reads, released_at, handoffs, start) = (
                dir.to_owned(),
                stop.clone(),
                count.clone(),
                reads.clone(),
                released_at.clone(),
                handoffs.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let before = w.reads;
                    let (me, line) = w.create_and_list(&dir).expect("create and list");
                    w.wait_turn(&dir, &me, line).expect("a turn");
                    let now = Instant::now();
                    if let Some(r) = released_at.lock().unwrap().take() {
                        handoffs.lock().unwrap().push(now - r);
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    reads.fetch_add(w.reads - before, Ordering::Relaxed);
                    *released_at.lock().unwrap() = Some(Instant::now());
                    w.delete(&format!("{dir}/{me}")).expect("delete");
                }
                w.close();
            })
        })
        .collect();
    let cpu = process_cpu();
    let (counted, secs) = run_window(&start, &stop, &count, run_for, threads);
    let cpu = process_cpu() - cpu;
    let total = count.load(Ordering::Relaxed).max(1);
    let mut h = handoffs.lock().unwrap().clone();
    Figures {
        per_second: counted as f64 / secs,
        p50_us: pct(&mut h, 0.5),
        p99_us: pct(&mut h, 0.99),
        cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / total as f64,
        acquisitions: total as f64,
        requests_per_acq: 2.0 + reads.load(Ordering::Relaxed) as f64 / total as f64,
        ..Default::default()
    }
}

/// A read that ended on the socket's read timeout (or a signal), with nothing wrong.
fn waited_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Reads one length-prefixed frame from `from` into `frame`.
fn read_frame(mut from: impl Read, frame: &mut Vec<u8>) -> io::Result<()> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len)?;
    frame.resize(i32::from_be_bytes(len).max(0) as usize, 0);
    from.read_exact(frame)
}

/// A pool of `window` in-flight slots: take one to send, give it back once answered.
fn slots(
    window: usize,
) -> (
    std::sync::mpsc::Sender<usize>,
    std::sync::mpsc::Receiver<usize>,
) {
    let (free_tx, free_rx) = std::sync::mpsc::channel::<usize>();
    for slot in 0..window {
        let _ = free_tx.send(slot);
    }
    (free_tx, free_rx)
}

/// The server's ceiling for the many-locks figure: one session writes create and delete pairs
/// (two writes, as one lock cycle needs) pipelined, `window` pairs in flight, for `run_for`;
/// pairs completed per second. A pair works on a node of its own slot, so every create and
/// delete succeeds.
pub fn pipelined_pairs(addr: &str, dir: &str, window: usize, run_for: Duration) -> f64 {
    let mut w = Wire::connect(addr).expect("the wire floor's session");
    let mut reader = w.sock.try_clone().expect("a reading handle");
    let (free_tx, free_rx) = slots(window);
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<usize>();
    let done = Arc::new(AtomicU64::new(0));
    let reading = {
        let done = done.clone();
        thread::spawn(move || {
            let mut frame = Vec::new();
            let mut read = |frame: &mut Vec<u8>| read_frame(&mut reader, frame);
            // Each pair's two answers, in order; its slot is free again after the second.
            while let Ok(slot) = sent_rx.recv() {
                for _ in 0..2 {
                    if read(&mut frame).is_err() {
                        return;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                if free_tx.send(slot).is_err() {
                    return;
                }
            }
        })
    };
    let began = Instant::now();
    let mut counted_at_end = None;
    while let Ok(slot) = free_rx.recv() {
        if began.elapsed() >= run_for {
            counted_at_end = Some((done.load(Ordering::Relaxed), began.elapsed()));
            break;
        }
        let path = format!("{dir}/c{slot}");
        let mut pair = w.request(CREATE, |b| {
            put_str(b, &path);
            put_i32(b, 0);
            put_i32(b, 1);
            put_i32(b, 31);
            put_str(b, "world");
            put_str(b, "anyone");
            put_i32(b, 1); // ephemeral
        });
        pair.extend(w.request(DELETE, |b| {
            put_str(b, &path);
            put_i32(b, -1);
        }));
        if sent_tx.send(slot).is_err() || w.send(&pair).is_err() {
            break;
        }
    }
    drop(sent_tx);
    let _ = reading.join();
    w.close();
    let (pairs, secs) = counted_at_end.unwrap_or((done.load(Ordering::Relaxed), began.elapsed()));
    pairs as f64 / secs.as_secs_f64()
}

/// What one lock cycle's next answers are, in the order its requests went out.
enum Awaiting {
    /// A create and a listing (two answers), for this slot and path.
    CreateAndList(usize),
    /// The release's delete (one answer).
    Delete(usize),
}

/// The floor of the many-locks figure: the lock protocol with nothing spare, `window` cycles
/// in flight from one session, each on a random one of `paths` lock paths under `dir` (which
/// must exist, as must `dir/p0`..): create (ephemeral sequential) and list written together,
/// then, once both are answered, the delete. Never contended enough to wait (a random path
/// among many), so no watch. Cycles completed per second.
///
/// Unlike [`pipelined_pairs`], a cycle's listing and its delete wait for its create: the
/// server answers a session's read only after that session's writes before it are committed,
/// so the reads a lock needs break the write pipeline into rounds.
pub fn pipelined_locks(
    addr: &str,
    dir: &str,
    paths: usize,
    window: usize,
    run_for: Duration,
) -> f64 {
    let w = Wire::connect(addr).expect("the wire floor's session");
    let mut reader = w.sock.try_clone().expect("a reading handle");
    // The writing side and what its answers will be, in wire order: both under one lock, so
    // the queue is in the order the requests went out.
    let writer = Arc::new(Mutex::new((
        w,
        std::collections::VecDeque::<Awaiting>::new(),
    )));
    let (free_tx, free_rx) = slots(window);
    let done = Arc::new(AtomicU64::new(0));
    let reading = {
        let (done, writer) = (done.clone(), writer.clone());
        thread::spawn(move || {
            let mut frame = Vec::new();
            let mut read = |frame: &mut Vec<u8>| read_frame(&mut reader, frame);
            // An answer comes only after its request went out, and a request is queued under
            // the lock it is written under: read first, then look at what it answers.
            while read(&mut frame).is_ok() {
                let next = writer.lock().expect("writer").1.pop_front();
                match next {
                    // The close's answer: nothing else is in flight.
                    None => return,
                    Some(Awaiting::CreateAndList(slot)) => {
                        let (name, _) = get_str(&frame, 16);
                        if read(&mut frame).is_err() {
                            return;
                        }
                        let mut guard = writer.lock().expect("writer");
                        let (w, queue) = &mut *guard;
                        let delete = w.request(DELETE, |b| {
                            put_str(b, &name);
                            put_i32(b, -1);
                        });
                        if w.send(&delete).is_err() {
                            return;
                        }
                        queue.push_back(Awaiting::Delete(slot));
                    }
                    Some(Awaiting::Delete(slot)) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        if free_tx.send(slot).is_err() {
                            return;
                        }
                    }
                }
            }
        })
    };
    let began = Instant::now();
    let mut counted_at_end = None;
    let mut in_flight = window;
    while let Ok(slot) = free_rx.recv() {
        in_flight -= 1;
        if began.elapsed() >= run_for {
            counted_at_end.get_or_insert((done.load(Ordering::Relaxed), began.elapsed()));
            // Let the cycles in flight finish, so the session closes with nothing pending.
            if in_flight == 0 {
                break;
            }
            continue;
        }
        let lock = format!("{dir}/p{}", fastrand::usize(..paths));
        let mut guard = writer.lock().expect("writer");
        let (w, queue) = &mut *guard;
        let mut both = w.create_frame(&format!("{lock}/lock-"));
        both.extend(w.children_frame(&lock));
        if w.send(&both).is_err() {
            break;
        }
        queue.push_back(Awaiting::CreateAndList(slot));
        in_flight += 1;
    }
    {
        let mut guard = writer.lock().expect("writer");
        let close = guard.0.request(CLOSE, |_| {});
        let _ = guard.0.send(&close);
    }
    let _ = reading.join();
    let (cycles, secs) = counted_at_end.unwrap_or((done.load(Ordering::Relaxed), began.elapsed()));
    cycles as f64 / secs.as_secs_f64()
}

/// `n` sessions, a thread each, run `op` again and again for `run_for`, counting the calls that
/// return true: those per second, and the client's CPU per one.
fn sessions_for(
    addr: &str,
    n: usize,
    run_for: Duration,
    op: impl Fn(&mut Wire) -> io::Result<bool> + Clone + Send + 'static,
) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let mut w = Wire::connect(addr).expect("the wire floor's session");
            let (op, stop, count, start) = (op.clone(), stop.clone(), count.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    if op(&mut w).expect("a wire floor call") {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
                w.close();
            })
        })
        .collect();
    let cpu = process_cpu();
    let (counted, secs) = run_window(&start, &stop, &count, run_for, threads);
    let cpu = process_cpu() - cpu;
    let total = count.load(Ordering::Relaxed).max(1);
    Figures {
        per_second: counted as f64 / secs,
        cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / total as f64,
        acquisitions: total as f64,
        ..Default::default()
    }
}
