//! The connection layer: one connection at a time ([`LinkWriter`]: plain or TLS), its write
//! side shared by every caller (each request is written on the caller's thread under one
//! lock, in xid order), and the queue of requests waiting for their answers, under a lock of
//! its own, which the session's reader of the moment completes in order. The reader never waits for
//! a writer: a write stuck on a full socket holds up neither the answers nor the keep-alives
//! (which the reader only tries to send).
//!
//! This layer knows nothing of sessions beyond the id a connection carries; the session layer
//! opens the gate ([`Outbox::open`]) once a connection is ready for requests, and closes it.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::link::{LinkWriter, Socket, WriteFailure};
use super::proto::{self, ReplyHeader, MAX_FRAME};
use super::slot::{slot, Awaited, Promise};
use super::watches::WatchReg;
use crate::error::{Error, Result};
use crate::session_id::SessionId;

/// An answer to one request: its header and the whole frame (the record starts after the
/// 16-byte header).
#[derive(Debug)]
pub(crate) struct Reply {
    pub header: ReplyHeader,
    pub frame: Vec<u8>,
}

impl Reply {
    /// The record after the reply header.
    pub fn record(&self) -> proto::Dec<'_> {
        proto::Dec::new(self.frame.get(16..).unwrap_or(&[]))
    }
}

/// What a waiting caller receives: the answer, or `None` when the connection died first
/// (the request may or may not have been applied).
pub(crate) type Answer = Option<Reply>;

/// A request to send: its frame (xid still 0), and what its answer means beyond the caller.
pub(crate) struct Outgoing {
    pub frame: Vec<u8>,
    /// The watch to register if the server sets it.
    pub watch: Option<WatchReg>,
    /// Whether, and how, its answer may extend the lease bound (see `touches`).
    pub anchors: Anchors,
    /// The session layer's own lease heartbeat.
    pub heartbeat: bool,
    /// The watch on a held node: a `NoNode` answer means the hold is over.
    pub hold: bool,
}

/// What a request's answer says about the leader's view of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchors {
    /// Nothing: the server we talk to may answer it alone (reads, `sync`, pings, our own).
    No,
    /// A write: the leader checks the session before it takes it into its pipeline; its
    /// header's error code says whether that check passed.
    Write,
    /// A transaction: the leader checks the session per operation, and a failed check shows
    /// in the results only (the header says 0).
    Transaction,
}

/// A request on the wire, waiting for its answer.
pub(crate) struct Pending {
    pub xid: i32,
    /// The operation's code.
    pub op: i32,
    /// When it went out, on the lease clock (`clock`).
    pub sent: Instant,
    /// Dropped unanswered when the connection dies: its caller then gets `None`.
    pub answer: Promise<Reply>,
    pub watch: Option<WatchReg>,
    pub anchors: Anchors,
    pub heartbeat: bool,
    pub hold: bool,
}

/// A sent request: where its answer will arrive, and the connection it went out on.
pub(crate) struct Ticket {
    pub answer: Awaited<Reply>,
    pub session: SessionId,
    pub sent: Instant,
}

/// Requests sent together, and their tickets in the same shape: an array of known length
/// (most calls send one request, a lock's create two), or a `Vec` (a pipeline). An array
/// makes neither vector a request used to cost (two allocations per request, a tenth of a
/// contended acquisition's; issue 22).
pub(crate) trait Batch {
    /// One ticket per request, in the same order.
    type Tickets;

    /// The frames, to be measured before they are taken.
    fn frames(&self) -> impl Iterator<Item = &[u8]>;

    /// Each request to its ticket, in order.
    fn tickets(self, each: impl FnMut(Outgoing) -> Ticket) -> Self::Tickets;
}

impl<const N: usize> Batch for [Outgoing; N] {
    type Tickets = [Ticket; N];

    fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|o| o.frame.as_slice())
    }

    fn tickets(self, each: impl FnMut(Outgoing) -> Ticket) -> [Ticket; N] {
        // `map` calls `each` once per element, first to last.
        self.map(each)
    }
}

impl Batch for Vec<Outgoing> {
    type Tickets = Vec<Ticket>;

    fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|o| o.frame.as_slice())
    }

    fn tickets(self, each: impl FnMut(Outgoing) -> Ticket) -> Vec<Ticket> {
        self.into_iter().map(each).collect()
    }
}

/// The callers' side of the connection: its write half, and the xids in wire order. Held
/// while a request is written, and never by the reader thread, which only ever tries it
/// (see [`Outbox::try_send`]).
struct Wire {
    /// The write side of the connection, while the gate is open.
    stream: Option<LinkWriter>,
    session: SessionId,
    epoch: u64,
    next_xid: i32,
    /// Set once the client is closed or refused: every send fails with it.
    shut: Option<Error>,
}

/// The reader's side: the requests waiting for their answers, in wire order, and what the
/// servers refused. Held only for a moment, by writers (to queue what they are about to
/// write) and by the reader (to complete an answer), so a write stuck on a full socket never
/// holds up the answers coming in.
struct Answers {
    pending: VecDeque<Pending>,
    /// The server of the open connection.
    server: Option<SocketAddr>,
    refused: Refused,
}

/// The operations each server answered `Unimplemented`: an older server that does not know
/// the opcode (it answers, then closes the connection, so one such call used to cost every
/// caller their connection, again on each try), or one without the feature enabled (TTL
/// nodes without `extendedTypesEnabled`, `reconfig` on a standalone server). Later requests
/// for them to that server are answered `Unimplemented` at once, without being sent.
///
/// A server changes what it implements only with a restart, which ends our connection; so
/// the I/O thread forgets a server's refusals when a connection to it ends for any reason but
/// the refusal itself (the close that follows it at once: see `forget_refusals`).
type Refused = std::collections::HashMap<SocketAddr, Vec<i32>>;

/// How long the reader waits for the writers' lock before it leaves a keep-alive for later:
/// long enough to get its turn among busy writers (the lock is eventually fair), short
/// enough that a stuck write does not hold up the answers.
const TRY_FOR: Duration = Duration::from_millis(2);

/// The wire code of `Unimplemented`.
const UNIMPLEMENTED: i32 = -6;

/// The write side and the answer queue of the current connection. Lock order: `wire`, then
/// `answers`, then `openings`; `kill` alone.
pub(crate) struct Outbox {
    wire: Mutex<Wire>,
    answers: Mutex<Answers>,
    /// The open connection's socket, to end it without waiting for a writer stuck on it.
    kill: Mutex<Option<Socket>>,
    /// Counts the openings and the shut, so a sender waits for the next one without holding
    /// `wire`: waking, it must not queue for the lock behind a writer stuck on the new socket.
    openings: Mutex<u64>,
    opened: Condvar,
    /// When the last request or ping went out, as nanoseconds since `born`: read by the
    /// reader thread without any lock.
    last_send: AtomicU64,
    born: Instant,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox {
            wire: Mutex::new(Wire {
                stream: None,
                session: SessionId(0),
                epoch: 0,
                next_xid: 1,
                shut: None,
            }),
            answers: Mutex::new(Answers {
                pending: VecDeque::new(),
                server: None,
                refused: Refused::default(),
            }),
            kill: Mutex::new(None),
            openings: Mutex::new(0),
            opened: Condvar::new(),
            last_send: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    fn sent_now(&self) {
        self.sent_at(Instant::now());
    }

    fn sent_at(&self, at: Instant) {
        let nanos =
            u64::try_from(at.saturating_duration_since(self.born).as_nanos()).unwrap_or(u64::MAX);
        self.last_send.store(nanos, Ordering::Relaxed);
    }

    /// Opens the gate on a ready connection (handshake, auth and watch restore already
    /// written). Returns false if the outbox was shut meanwhile.
    pub fn open(&self, stream: LinkWriter, session: SessionId, epoch: u64) -> bool {
        let mut w = self.wire.lock();
        if w.shut.is_some() {
            stream.shutdown();
            return false;
        }
        self.answers.lock().server = stream.peer_addr();
        *self.kill.lock() = Some(stream.socket().clone());
        w.stream = Some(stream);
        w.session = session;
        w.epoch = epoch;
        self.sent_now();
        self.wake_senders();
        true
    }

    /// Tells the senders waiting for a connection that one opened, or that the outbox shut.
    fn wake_senders(&self) {
        *self.openings.lock() += 1;
        self.opened.notify_all();
    }

    /// Closes connection `epoch` (if it is still the current one) and fails every request
    /// still waiting on it.
    pub fn close(&self, epoch: u64) {
        // A writer stuck on the socket holds `wire`: the socket is ended first, which frees it.
        if let Some(s) = self.kill.lock().take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let failed: Vec<Pending> = {
            let mut w = self.wire.lock();
            if w.epoch != epoch {
                return;
            }
            if let Some(s) = w.stream.take() {
                s.shutdown();
            }
            self.answers.lock().pending.drain(..).collect()
        };
        // Dropped outside the locks: each unanswered caller wakes with `None`.
        drop(failed);
    }

    /// Ends the open connection now (the reader sees it end and reconnects), whatever a
    /// writer is doing on it.
    pub fn drop_connection(&self) {
        if let Some(s) = self.kill.lock().as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Shuts the outbox for good: the connection is cut and every send fails with `why`.
    pub fn shut(&self, why: Error) {
        if let Some(s) = self.kill.lock().as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let epoch = {
            let mut w = self.wire.lock();
            w.shut.get_or_insert(why);
            self.wake_senders();
            w.epoch
        };
        self.close(epoch);
    }

    /// Sends finished request frames back to back under one hold of the lock (they reach the
    /// server in this order, and it answers them in this order), waiting for an open
    /// connection until `open_by`. `ConnectionLoss` if none opened in time, the write failed,
    /// or another writer held the lock past `deadline`. Without a deadline the lock is waited
    /// for as long as its writer holds it: a write ends within the connection's write timeout.
    /// With `only_on`, only on a connection of that session: `SessionLost`, nothing sent, on
    /// one of another.
    pub fn send<B: Batch>(
        &self,
        frames: B,
        open_by: Instant,
        deadline: Option<Instant>,
        only_on: Option<SessionId>,
    ) -> Result<B::Tickets> {
        let mut w = loop {
            // Read before the look at the connection: an opening after it changes the count,
            // so the wait below cannot miss it.
            let seen = *self.openings.lock();
            let w = match deadline {
                Some(d) => self
                    .wire
                    .try_lock_until(d)
                    .ok_or(Error::connection_loss())?,
                None => self.wire.lock(),
            };
            if let Some(e) = &w.shut {
                return Err(e.clone());
            }
            if w.stream.is_some() {
                match only_on {
                    Some(session) if w.session != session => {
                        return Err(Error::SessionLost {
                            session_id: session,
                        })
                    }
                    _ => break w,
                }
            }
            drop(w);
            let mut openings = self.openings.lock();
            while *openings == seen {
                if self.opened.wait_until(&mut openings, open_by).timed_out() {
                    break;
                }
            }
            if *openings == seen {
                return Err(Error::connection_loss());
            }
        };
        self.write(&mut w, frames, deadline)
    }

    /// What a reader sends (the lease heartbeat; a waiter's listing as its watch fires):
    /// `Ok(None)` at once if a writer holds the connection, so the reader never waits behind a
    /// write (which may itself wait for the reader to drain the server's answers). `deadline`
    /// bounds the wait for socket space as in [`send`](Self::send): with `Instant::now()` a
    /// write that cannot begin at once is taken back (`ConnectionLoss`); one that began is
    /// finished within the connection's own write timeout (a small frame that fits only in
    /// part, which a socket's last free bytes allow, rarely).
    pub fn try_send<B: Batch>(
        &self,
        frames: B,
        deadline: Option<Instant>,
    ) -> Result<Option<B::Tickets>> {
        let Some(mut w) = self.wire.try_lock_for(TRY_FOR) else {
            return Ok(None);
        };
        if let Some(e) = &w.shut {
            return Err(e.clone());
        }
        if w.stream.is_none() {
            return Err(Error::connection_loss());
        }
        self.write(&mut w, frames, deadline).map(Some)
    }

    /// Writes `frames` under the writers' lock, by `deadline` if there is one. A write that
    /// cannot finish by then, of which nothing went, is taken back (`ConnectionLoss`, the
    /// connection untouched); one left half-written ends the connection (nothing may follow a
    /// torn frame), and its tickets are answered `None` as for any connection that dies.
    fn write<B: Batch>(
        &self,
        w: &mut Wire,
        frames: B,
        deadline: Option<Instant>,
    ) -> Result<B::Tickets> {
        // One reading of the clock for the batch, taken before any of it goes: an earlier
        // `sent` only makes what an answer proves about the session (the lease anchored at
        // it) end sooner.
        let sent = Instant::now();
        // The same reading on the lease clock, for what the answers prove (see `clock`).
        let lease_sent = super::clock::lease_time(sent);
        let session = w.session;
        let ticket = |answer| Ticket {
            answer,
            session,
            sent,
        };
        // One frame (most calls) goes out as it is; several are copied into one write.
        let (count, size) = frames
            .frames()
            .fold((0, 0), |(n, size), f| (n + 1, size + f.len()));
        let single = count == 1;
        let mut out = if single {
            Vec::new()
        } else {
            Vec::with_capacity(size)
        };
        let mut ours = 0;
        let tickets = {
            // Queued before they are written (an answer can come before the write returns),
            // under the same lock as the look at what the server refused.
            let mut answers = self.answers.lock();
            let refused: Vec<i32> = answers
                .server
                .and_then(|s| answers.refused.get(&s))
                .map(|r| r.to_vec())
                .unwrap_or_default();
            frames.tickets(
                |Outgoing {
                     mut frame,
                     watch,
                     anchors,
                     heartbeat,
                     hold,
                 }| {
                    let op = proto::opcode(&frame);
                    if refused.contains(&op) {
                        // Answered here as the server did before; the others in the batch go
                        // out.
                        log::debug!("not sent: the server answered operation {op} Unimplemented");
                        let (tx, rx) = slot();
                        let header = ReplyHeader {
                            xid: 0,
                            zxid: 0,
                            err: UNIMPLEMENTED,
                        };
                        tx.fulfil(Reply {
                            header,
                            frame: header.encode(),
                        });
                        return ticket(rx);
                    }
                    let xid = w.next_xid;
                    // Positive xids only; the negative ones are reserved.
                    w.next_xid = if xid == i32::MAX { 1 } else { xid + 1 };
                    proto::set_xid(&mut frame, xid);
                    if single {
                        out = frame;
                    } else {
                        out.extend_from_slice(&frame);
                    }
                    let (tx, rx) = slot();
                    answers.pending.push_back(Pending {
                        xid,
                        op,
                        sent: lease_sent,
                        answer: tx,
                        watch,
                        anchors,
                        heartbeat,
                        hold,
                    });
                    ours += 1;
                    ticket(rx)
                },
            )
        };
        if !out.is_empty() {
            let written = match w.stream.as_mut() {
                Some(s) => s.write_until(&out, deadline),
                None => Err(WriteFailure {
                    error: io::ErrorKind::NotConnected.into(),
                    torn: false,
                }),
            };
            if let Err(failure) = written {
                if failure.taken_back() {
                    // The caller's deadline came first and nothing went: ours are the last
                    // queued (we hold the writers' lock), unanswered, and taken back.
                    let mut answers = self.answers.lock();
                    let keep = answers.pending.len().saturating_sub(ours);
                    answers.pending.truncate(keep);
                    return Err(Error::connection_loss());
                }
                log::debug!("write failed: {}; the connection is dropped", failure.error);
                if let Some(s) = w.stream.as_ref() {
                    // The reader sees the shutdown, runs the reconnect and fails what waits.
                    s.shutdown();
                }
                if failure.torn {
                    // Some of it went: its answers may come, or the connection's end.
                    return Ok(tickets);
                }
                return Err(Error::connection_loss());
            }
            self.sent_at(sent);
        }
        Ok(tickets)
    }

    /// Writes a frame that expects no queued answer (a ping) on connection `epoch`, unless a
    /// writer holds the connection (`Ok(false)`): the reader thread never waits behind one.
    pub fn try_send_reserved(&self, epoch: u64, frame: &[u8]) -> io::Result<bool> {
        let Some(mut w) = self.wire.try_lock_for(TRY_FOR) else {
            return Ok(false);
        };
        if w.epoch != epoch {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let s = w
            .stream
            .as_mut()
            .ok_or(io::Error::from(io::ErrorKind::NotConnected))?;
        if let Err(e) = s.write_all(frame) {
            s.shutdown();
            return Err(e);
        }
        self.sent_now();
        Ok(true)
    }

    /// Writes a frame with a reserved xid on whatever connection is open now; `before` runs
    /// under the writers' lock just before the write (so what it registers is in wire order),
    /// and `undo` if the write is given up before any of it went. A write that fails once
    /// some of it went ends the connection: a torn frame must not be followed by others.
    /// `TimedOut` if another writer held the lock past `deadline`, or the socket took none of
    /// the frame by then (without a deadline, the lock is waited for as long as its writer
    /// holds it).
    pub fn send_reserved_now(
        &self,
        frame: &[u8],
        deadline: Option<Instant>,
        before: impl FnOnce(),
        undo: impl FnOnce(),
    ) -> io::Result<()> {
        let mut w = match deadline {
            Some(d) => self
                .wire
                .try_lock_until(d)
                .ok_or(io::Error::from(io::ErrorKind::TimedOut))?,
            None => self.wire.lock(),
        };
        let s = w
            .stream
            .as_mut()
            .ok_or(io::Error::from(io::ErrorKind::NotConnected))?;
        before();
        match s.write_until(frame, deadline) {
            Ok(()) => {}
            Err(failure) if failure.taken_back() => {
                undo();
                return Err(failure.error);
            }
            Err(WriteFailure { error, .. }) => {
                s.shutdown();
                return Err(error);
            }
        }
        self.sent_now();
        Ok(())
    }

    /// The oldest request waiting for an answer, which must be `xid`: the server answers a
    /// connection's requests in order, so anything else is a broken stream. Except one: a
    /// server answers an opcode it does not know (`err` `Unimplemented`) straight from its
    /// request throttler, ahead of the requests still in its pipeline; that refusal is
    /// remembered for the server (see `Refused`).
    pub fn complete(&self, xid: i32, err: i32) -> std::result::Result<Pending, proto::Malformed> {
        let mut a = self.answers.lock();
        let at = match a.pending.front() {
            Some(p) if p.xid == xid => 0,
            Some(_) if err == UNIMPLEMENTED => a
                .pending
                .iter()
                .position(|p| p.xid == xid)
                .ok_or(proto::Malformed("a refusal with an unknown xid"))?,
            Some(_) => return Err(proto::Malformed("answer out of order")),
            None => return Err(proto::Malformed("answer with an unknown xid")),
        };
        let pending = a
            .pending
            .remove(at)
            .ok_or(proto::Malformed("no request waits"))?;
        if err == UNIMPLEMENTED {
            if let Some(server) = a.server {
                let ops = a.refused.entry(server).or_default();
                if !ops.contains(&pending.op) {
                    ops.push(pending.op);
                }
            }
        }
        Ok(pending)
    }

    /// Forgets what `server` refused: a connection to it ended otherwise than right after a
    /// refusal, and a restart may have changed what it implements.
    pub fn forget_refusals(&self, server: SocketAddr) {
        self.answers.lock().refused.remove(&server);
    }

    /// When the last request or ping went out.
    pub fn last_send(&self) -> Instant {
        self.born + Duration::from_nanos(self.last_send.load(Ordering::Relaxed))
    }
}

/// Reads length-prefixed frames from a socket whose read timeout may fire between two reads:
/// a partly read frame is kept for the next call.
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// `buf[start..end]` holds bytes read and not yet returned.
    start: usize,
    end: usize,
}

impl FrameReader {
    pub fn new() -> FrameReader {
        FrameReader {
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// The next frame body if the buffer holds one whole; `InvalidData` for a length out of
    /// range. Makes room for the rest of a frame that does not fit.
    fn parse(&mut self) -> io::Result<Option<Vec<u8>>> {
        let avail = &self.buf[self.start..self.end];
        let Some(len) = avail.get(..4) else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        if len < 0 || len as usize > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame length {len} out of range"),
            ));
        }
        let need = 4 + len as usize;
        if let Some(body) = avail.get(4..need) {
            let body = body.to_vec();
            self.start += need;
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
            return Ok(Some(body));
        }
        if self.buf.len() - self.start < need {
            // Move what we have to the front, and grow if the frame is larger than the buffer.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                self.buf.resize(need, 0);
            }
        }
        Ok(None)
    }

    /// The next whole frame if one is already buffered, without reading.
    pub fn buffered(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.parse()
    }

    /// Reads until one whole frame is there. A read timeout comes back as `WouldBlock` or
    /// `TimedOut`, with what was read so far kept; a closed stream as `UnexpectedEof`. So does
    /// passing `until` without a whole frame (`TimedOut`): a peer that trickles a byte at a
    /// time resets the socket's timeout with each, but not this one.
    pub fn read_frame(&mut self, r: &mut impl Read, until: Option<Instant>) -> io::Result<Vec<u8>> {
        loop {
            if let Some(frame) = self.parse()? {
                return Ok(frame);
            }
            if self.end == self.buf.len() {
                // Only a partial length prefix at the very end: move it to the front.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            match r.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// True for the errors a socket read timeout gives.
pub(crate) fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reader that hands out its bytes in the given chunk sizes, then reports a timeout.
    struct Chunks(Vec<u8>, Vec<usize>);

    impl Read for Chunks {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self
                .1
                .pop()
                .unwrap_or(1)
                .clamp(1, out.len())
                .min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    #[test]
    fn frames_split_across_reads_and_timeouts_come_out_whole() {
        let big = vec![9u8; 100_000];
        let mut bytes = Vec::new();
        for body in [&b"abc"[..], b"", &big, b"defgh"] {
            bytes.extend_from_slice(&(body.len() as i32).to_be_bytes());
            bytes.extend_from_slice(body);
        }
        let mut src = Chunks(bytes, vec![1, 2, 3, 1, 5, 2, 70_000, 65_530]);
        let mut r = FrameReader::new();
        let mut got = Vec::new();
        while got.len() < 4 {
            match r.read_frame(&mut src, None) {
                Ok(f) => got.push(f),
                Err(e) if timed_out(&e) => panic!("ran dry: {got:?}"),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, vec![b"abc".to_vec(), vec![], big, b"defgh".to_vec()]);
    }

    #[test]
    fn a_frame_over_the_limit_or_negative_is_refused() {
        for len in [-1i32, MAX_FRAME as i32 + 1] {
            let mut src = Chunks(len.to_be_bytes().to_vec(), vec![]);
            let e = FrameReader::new().read_frame(&mut src, None).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
    }

    /// What a reader sends with a passed deadline (a waiter's listing as its watch fires)
    /// never waits for socket space: on a full socket it is taken back at once and the
    /// connection stays (reviewer's finding: with no deadline, the waiter that read its own
    /// notification blocked in this write for the connection's write timeout, holding every
    /// answer up and missing its own deadline).
    #[test]
    fn a_readers_send_with_a_passed_deadline_does_not_wait_for_socket_space() {
        let (near, _far_end) = crate::testing::unread_pair().unwrap();
        crate::testing::fill(&near).unwrap();
        let (_, mut stream) = crate::client::link::plain(std::sync::Arc::new(near));
        // The connection's own timeout: what a send with no deadline would wait.
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let outbox = Outbox::new();
        assert!(outbox.open(stream, SessionId(1), 1));
        let listing = crate::client::request::Req::GetChildren {
            path: "/line".into(),
            watch: None,
            stat: false,
        };
        let started = Instant::now();
        let sent = outbox.try_send([listing.outgoing()], Some(started));
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "waited {took:?}");
        assert!(
            matches!(sent, Err(Error::ConnectionLoss { .. })),
            "{:?}",
            sent.as_ref().map(|t| t.as_ref().map(|t| t.len()))
        );
        // Taken back: nothing waits for an answer, and the connection is still open.
        assert!(outbox.answers.lock().pending.is_empty());
        assert!(outbox.wire.lock().stream.is_some());
    }

    proptest! {
        #[test]
        fn the_frame_reader_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256), sizes in proptest::collection::vec(1usize..64, 0..16)) {
            let mut src = Chunks(bytes, sizes);
            let mut r = FrameReader::new();
            for _ in 0..64 {
                if r.read_frame(&mut src, None).is_err() {
                    break;
                }
            }
        }
    }
}
