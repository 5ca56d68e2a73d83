//! Who reads the connection: a caller waiting for its answer, or the I/O thread.
//!
//! A caller reads the socket itself while no one else does, so its answer wakes the one
//! thread that waits for it. Through the I/O thread it would wake two, one after the other
//! (the reader, then the caller): a second wake-up that is the whole uncontended gap between
//! this client and one with no background thread (about 45 µs a round trip on a 2-vCPU VM;
//! see `benches/RESULTS.md`, issue 22).
//!
//! The I/O thread stays the reader of last resort. It no longer sits in `read()`: it waits on
//! an epoll registration of the socket that is armed only while no one reads,
//! with its timers (pings, the lease heartbeat, the silence bound) as the timeout. So it wakes
//! for a notification, a keep-alive's answer or a dead connection, and not for an answer a
//! caller is reading. The rules, all under one short lock ([`Turn`]):
//!
//! - A caller (or a waiter) takes the turn only when it is free, and disarms the registration
//!   as it does. A caller that finds a waiter reading asks it for the turn (again, if another
//!   waiter took it meanwhile) and takes it once given back; one that finds the I/O thread or
//!   another caller reading waits for its answer from them.
//! - Whoever gives the turn back first takes every whole frame already buffered (the poller
//!   cannot see those); a caller then re-arms the registration, so bytes that came meanwhile
//!   wake the I/O thread.
//! - The I/O thread takes the turn when the registration fires while it is free; a firing
//!   while a caller reads is that caller's to read.
//! - Only the I/O thread ends a connection: what ends one in a caller's hands (a broken
//!   stream, an answer that ends the session) is handed to it, and the caller shuts the
//!   socket, whose end fires the registration.
//!
//! A thread that waits for a watch (a lock's waiter) reads too, for the same reason: the
//! notification that ends its wait then wakes it alone, not the I/O thread first (one thread
//! hop less per contended handoff; issue 22). It waits in `poll(2)` on the socket and an
//! event descriptor (made when a thread of the client first waits) instead of in `read()`,
//! because a caller that needs the turn to read its own answer must be able to ask for it:
//! the caller sets the event, the waiter gives the turn back within a frame, and goes on
//! waiting for its wake-up from whoever reads. So a waiter stands between its client's
//! other threads and their answers for a frame at most, and is not woken by their traffic.
//!
//! Frames are taken one at a time by one reader, in the order they came, by the same code
//! whichever thread reads: what an answer proves about the session does not depend on who
//! read it. Over TLS, off Linux, where no epoll instance can be made, and for a client built
//! with `io_thread_reads_all` (one descriptor per client), the I/O thread reads everything, as
//! before (the TLS state buffers plaintext the poller cannot see).
//!
//! Epoll directly (through `rustix`), not a portable poller: an idle wait is then one system
//! call, where `polling` makes five (a timer descriptor, a notifier); the I/O thread of a
//! client contending for a lock waits once per notification.

use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use log::debug;
use parking_lot::{Condvar, Mutex, MutexGuard};

use self::poll::{Poller, Ready, WaiterPoller};

use super::super::conn::{timed_out, FrameReader};
use super::super::link::{LinkReader, Socket};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holder {
    Free,
    Io,
    /// A caller waiting for its answer: it gives the turn back as soon as it has it.
    Caller,
    /// A thread waiting for a watch (a lock's waiter): it gives the turn back when asked.
    Waiter,
}

/// Who reads, and the state of the I/O thread's registration.
struct Turn {
    holder: Holder,
    /// The registered socket (the reading one, shared), while callers may read this
    /// connection.
    registered: Option<Socket>,
    /// The registration will fire when bytes come.
    armed: bool,
    /// What ended the connection in a caller's hands, for the I/O thread.
    failed: Option<String>,
    /// Whole frames may sit in the buffer, read before the poller watched (the handshake
    /// reads its last answer with whatever came behind it): taken before anyone waits.
    unread: bool,
    /// A caller asked the waiter reading to give the turn back (the waiters' poller is poked).
    wanted: bool,
    /// Moves with every install and uninstall: a claim made before one is void after it.
    installed: u64,
    /// Turns taken by callers and waiters (for the tests that count them).
    #[cfg(any(test, feature = "testing"))]
    claims: u64,
}

/// The connection's read side, with the reader of the moment.
pub(super) struct Side {
    stream: LinkReader,
    frames: FrameReader,
    /// The socket's read timeout as last set (each change is a system call).
    socket_timeout: Duration,
    /// A caller with no deadline wakes this often to look at its answer.
    patience: Duration,
}

impl Side {
    /// The next frame: a whole one already buffered, or read by `until` (the deadline is
    /// kept by [`Bounded`], which looks at the clock once per read).
    fn next(&mut self, until: Instant) -> io::Result<Vec<u8>> {
        let mut bounded = Bounded {
            stream: &mut self.stream,
            timeout: &mut self.socket_timeout,
            until,
        };
        self.frames.read_frame(&mut bounded, None)
    }

    /// Reads the next frame by `until` and gives it to `take`; a timeout is no failure.
    fn take_next(
        &mut self,
        until: Instant,
        take: &mut impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        match self.next(until) {
            Ok(frame) => take(frame),
            Err(e) if timed_out(&e) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Takes every whole frame already buffered.
    fn drain(
        &mut self,
        take: &mut impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        while let Some(frame) = self.frames.buffered().map_err(|e| e.to_string())? {
            take(frame)?;
        }
        Ok(())
    }
}

/// The stream, read by `until`: no read begins once it has passed (`TimedOut`), and the
/// socket's read timeout is set before each read to what is left, so a frame whose first
/// bytes came late cannot hold the reader past it for another whole timeout (a reviewer's
/// finding). The timeout is changed (a system call) only when the deadline is nearer by more
/// than a millisecond, or more than twice as far (a read would then wake for nothing).
struct Bounded<'a> {
    stream: &'a mut LinkReader,
    timeout: &'a mut Duration,
    until: Instant,
}

impl io::Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let left = left.max(Duration::from_millis(1));
        if left + Duration::from_millis(1) < *self.timeout || left > *self.timeout * 2 {
            self.stream.set_read_timeout(Some(left))?;
            *self.timeout = left;
        }
        io::Read::read(self.stream, buf)
    }
}

/// The turn to read the current connection.
pub(super) struct Reading {
    /// `None` where none could be made (or off Linux), or with `io_thread_reads_all`: the I/O
    /// thread then reads everything.
    poller: Option<Poller>,
    /// What a waiter reading waits on besides the socket: a caller's request for the turn.
    /// Made when a waiter first reads; `None` where none could be made, and from the start
    /// with `io_thread_reads_all` (waiters then leave the reading to others).
    waiters: OnceLock<Option<WaiterPoller>>,
    turn: Mutex<Turn>,
    /// Signalled whenever a caller or a waiter gives the turn back (and when the connection
    /// is uninstalled), for a caller that asked a waiter for it.
    freed: Condvar,
    side: Mutex<Option<Side>>,
}

impl Reading {
    /// `io_reads_all`: no poller and no waiters' poller (one descriptor, the socket); the I/O
    /// thread reads everything.
    pub fn new(io_reads_all: bool) -> Reading {
        let poller = if io_reads_all {
            None
        } else {
            Poller::new()
                .map_err(|e| debug!("no poller ({e}): the I/O thread reads every answer"))
                .ok()
        };
        let waiters = OnceLock::new();
        if io_reads_all {
            let _ = waiters.set(None);
        }
        Reading {
            poller,
            waiters,
            turn: Mutex::new(Turn {
                holder: Holder::Free,
                registered: None,
                armed: false,
                failed: None,
                unread: false,
                wanted: false,
                installed: 0,
                #[cfg(any(test, feature = "testing"))]
                claims: 0,
            }),
            freed: Condvar::new(),
            side: Mutex::new(None),
        }
    }

    /// Makes `stream` the connection to read. Callers may read it themselves if it is plain
    /// TCP and the poller takes it.
    pub fn install(&self, stream: LinkReader, frames: FrameReader, patience: Duration) {
        let mut side = self.side.lock();
        self.install_locked(&mut side, stream, frames, patience);
    }

    fn install_locked(
        &self,
        side: &mut Option<Side>,
        stream: LinkReader,
        frames: FrameReader,
        patience: Duration,
    ) {
        let registered = match (&self.poller, stream.plain_socket()) {
            (Some(poller), Some(sock)) => match poller.add(sock) {
                Ok(()) => Some(sock.clone()),
                Err(e) => {
                    debug!("epoll refused the socket ({e}): the I/O thread reads");
                    None
                }
            },
            _ => None,
        };
        *side = Some(Side {
            stream,
            frames,
            socket_timeout: Duration::ZERO,
            patience,
        });
        let mut turn = self.turn.lock();
        *turn = Turn {
            holder: Holder::Free,
            registered,
            armed: false,
            failed: None,
            unread: true,
            wanted: false,
            installed: turn.installed.wrapping_add(1),
            #[cfg(any(test, feature = "testing"))]
            claims: turn.claims,
        };
    }

    /// Ends reading the connection (its socket is already shut, so a caller reading it stops
    /// at once): waits for the reader of the moment, then forgets the socket.
    pub fn uninstall(&self) {
        let mut side = self.side.lock();
        self.uninstall_locked(&mut side);
        drop(side);
        self.freed.notify_all();
    }

    fn uninstall_locked(&self, side: &mut Option<Side>) {
        let mut turn = self.turn.lock();
        if let (Some(poller), Some(sock)) = (&self.poller, turn.registered.take()) {
            poller.delete(&sock);
        }
        turn.holder = Holder::Free;
        turn.armed = false;
        turn.failed = None;
        turn.unread = false;
        turn.installed = turn.installed.wrapping_add(1);
        if std::mem::take(&mut turn.wanted) {
            if let Some(Some(waiters)) = self.waiters.get() {
                waiters.unpoke();
            }
        }
        drop(turn);
        side.take();
    }

    /// The I/O thread's turn: reads what comes before `wake` (while no caller reads), each
    /// whole frame to `take`. `Err` if the connection ended, here or in a caller's hands.
    pub fn io_turn(
        &self,
        wake: Instant,
        mut take: impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        let poller = match &self.poller {
            Some(p) if self.turn.lock().registered.is_some() => p,
            // Nobody else reads: a blocking read until `wake`.
            _ => return self.read_alone(wake, &mut take),
        };
        {
            let mut turn = self.turn.lock();
            if let Some(why) = turn.failed.take() {
                return Err(why);
            }
            if turn.holder == Holder::Free && turn.unread {
                // Frames the poller cannot see: taken now, then the wait.
                turn.unread = false;
                turn.holder = Holder::Io;
                drop(turn);
                let mut side = self.side.lock();
                let result = side.as_mut().map_or(Ok(()), |s| s.drain(&mut take));
                self.turn.lock().holder = Holder::Free;
                drop(side);
                result?;
                turn = self.turn.lock();
            }
            if turn.holder == Holder::Free && !turn.armed {
                arm(poller, &mut turn).map_err(|e| format!("poller: {e}"))?;
            }
        }
        let fired = poller
            .wait(wake.saturating_duration_since(Instant::now()))
            .map_err(|e| format!("poller: {e}"))?;
        {
            let mut turn = self.turn.lock();
            if fired {
                // One-shot: it fires once per arming.
                turn.armed = false;
            }
            if let Some(why) = turn.failed.take() {
                return Err(why);
            }
            if !fired || turn.holder != Holder::Free {
                return Ok(());
            }
            turn.holder = Holder::Io;
        }
        let mut side = self.side.lock();
        let result = match side.as_mut() {
            // Bytes are there: read at least once, even if `wake` has passed meanwhile.
            Some(s) => s
                .take_next(
                    wake.max(Instant::now() + Duration::from_millis(1)),
                    &mut take,
                )
                .and_then(|()| s.drain(&mut take)),
            None => Ok(()),
        };
        self.turn.lock().holder = Holder::Free;
        drop(side);
        result
    }

    /// Reading with no poller: the I/O thread holds the read side alone.
    fn read_alone(
        &self,
        wake: Instant,
        take: &mut impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut side = self.side.lock();
        let Some(s) = side.as_mut() else {
            return Ok(());
        };
        s.take_next(wake, take)
    }

    /// A caller's turn: if no one reads, reads frames (each to `take`) until `done`, or
    /// `until`, and gives the turn back. False if someone else reads (or no one may): the
    /// caller then waits for its answer from them.
    pub fn caller_turn(
        &self,
        done: impl Fn() -> bool,
        until: Option<Instant>,
        mut take: impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> bool {
        let Some(mut side) = self
            .claim(Holder::Caller)
            .or_else(|| self.ask_the_waiter(&done, until))
        else {
            return false;
        };
        let mut failed = None;
        if let Some(s) = side.as_mut() {
            while !done() {
                let now = Instant::now();
                if until.is_some_and(|u| now >= u) {
                    break;
                }
                let bound = until.map_or(now + s.patience, |u| u.min(now + s.patience));
                if let Err(why) = s.take_next(bound, &mut take) {
                    failed = Some(why);
                    break;
                }
            }
            if failed.is_none() {
                failed = s.drain(&mut take).err();
            }
        }
        self.give_back(side, failed);
        true
    }

    /// A waiter's turn: if no one reads (and the connection is plain TCP), reads frames (each
    /// to `take`) until `done`, `until`, or a caller asks for the turn, and gives it back.
    /// False if it read nothing (`done` already, or someone else reads): the waiter then
    /// waits for its wake-up from whoever reads.
    ///
    /// Between frames it waits on the waiters' poller (the socket, and a caller's request),
    /// one system call more per frame than a caller's blocking read: a waiter reads rarely
    /// (its notification, or what came with it), and a caller that needs the turn to read its
    /// own answer gets it within a frame instead of waking the waiter for every answer.
    ///
    /// Once `due` (what ends the wait is an answer already on its way: the listing sent as
    /// its watch fired), it reads as a caller does, blocking, without the poll, and keeps the
    /// turn until `done`: the answer is read in the same turn as the notification, where
    /// giving the turn back and taking it again as a caller cost the I/O thread's registration
    /// an arming and a disarming (two system calls per contended acquisition). A caller that
    /// asks for the turn meanwhile has it after the frame being read, which is due.
    pub fn waiter_turn(
        &self,
        done: impl Fn() -> bool,
        due: impl Fn() -> bool,
        until: Option<Instant>,
        mut take: impl FnMut(Vec<u8>) -> Result<(), String>,
    ) -> bool {
        let waiters = self.waiters.get_or_init(|| {
            WaiterPoller::new()
                .map_err(|e| debug!("no waiters' poller ({e}): waiters do not read"))
                .ok()
        });
        let Some(waiters) = waiters else {
            return false;
        };
        if done() {
            return false;
        }
        let Some(mut side) = self.claim(Holder::Waiter) else {
            return false;
        };
        // Only a plain connection is registered, and only then can the turn be claimed: the
        // socket is there unless the connection ended meanwhile.
        let Some(sock) = side.as_ref().and_then(|s| s.stream.plain_socket().cloned()) else {
            self.give_back(side, None);
            return false;
        };
        let mut failed = None;
        if let Some(s) = side.as_mut() {
            loop {
                // Frames already buffered first: the poller cannot see them.
                if let Err(why) = s.drain(&mut take) {
                    failed = Some(why);
                    break;
                }
                let now = Instant::now();
                if done() || until.is_some_and(|u| now >= u) {
                    break;
                }
                let bound = until.map_or(now + s.patience, |u| u.min(now + s.patience));
                if due() {
                    if self.turn.lock().wanted {
                        break;
                    }
                    if let Err(why) = s.take_next(bound, &mut take) {
                        failed = Some(why);
                        break;
                    }
                    continue;
                }
                match waiters.wait(&sock, bound.saturating_duration_since(now)) {
                    Ok(Ready::Asked) => break,
                    Ok(Ready::Nothing) => {}
                    Ok(Ready::Bytes) => {
                        let until = bound.max(now + Duration::from_millis(1));
                        if let Err(why) = s.take_next(until, &mut take) {
                            failed = Some(why);
                            break;
                        }
                    }
                    // The waiter's own poll failing is no fault of the connection: the
                    // turn goes back, and the waiter waits for others to read.
                    Err(e) => {
                        debug!("waiters' poll: {e}");
                        break;
                    }
                }
            }
        }
        self.give_back(side, failed);
        true
    }

    /// The turn from a waiter that reads: asked for, and taken once it is given back (within
    /// a frame), unless `until` comes first, someone else takes it meanwhile, or the caller is
    /// `done` (the waiter read its answer: a waiter reading on for an answer of its own takes
    /// the next frame before it looks whether it is asked, and that frame may be far off).
    fn ask_the_waiter(
        &self,
        done: &impl Fn() -> bool,
        until: Option<Instant>,
    ) -> Option<MutexGuard<'_, Option<Side>>> {
        let waiters = self.waiters.get()?.as_ref()?;
        if until.is_some_and(|u| Instant::now() >= u) {
            // Too late to read for ourselves: asking would only send the waiter away.
            return None;
        }
        {
            let mut turn = self.turn.lock();
            if turn.holder != Holder::Waiter {
                return None;
            }
            while turn.holder == Holder::Waiter {
                if done() {
                    return None;
                }
                // Asked again whenever the waiter reading is not asked yet: another waiter may
                // have taken the turn between the one asked giving it back and this caller
                // looking (a reviewer's finding: the caller then waited for it unasked, for
                // as long as that waiter's wait).
                if !turn.wanted {
                    if let Err(e) = waiters.poke() {
                        debug!("could not ask the waiter for the turn: {e}");
                        return None;
                    }
                    turn.wanted = true;
                }
                match until {
                    Some(u) => {
                        if self.freed.wait_until(&mut turn, u).timed_out() {
                            return None;
                        }
                    }
                    None => self.freed.wait(&mut turn),
                }
            }
        }
        // The frame the waiter finished before it gave the turn back may have been our
        // answer: then there is nothing to read (a claim would disarm and arm the I/O
        // thread's registration for nothing).
        if done() {
            return None;
        }
        self.claim(Holder::Caller)
    }

    /// Takes the turn for a caller or a waiter if it is free: the I/O thread's registration
    /// is disarmed.
    fn claim(&self, holder: Holder) -> Option<MutexGuard<'_, Option<Side>>> {
        let poller = self.poller.as_ref()?;
        let claimed = {
            let mut turn = self.turn.lock();
            if turn.holder != Holder::Free || turn.failed.is_some() {
                return None;
            }
            let sock = turn.registered.as_ref()?;
            if turn.armed {
                poller.disarm(sock).ok()?;
                turn.armed = false;
            }
            turn.holder = holder;
            #[cfg(any(test, feature = "testing"))]
            {
                turn.claims += 1;
            }
            turn.installed
        };
        // The I/O thread may still be giving its turn back: a moment.
        let side = self.side.lock();
        // The connection may have been replaced meanwhile (a reviewer's finding): its end set
        // the turn free, so this claim's holder is no longer recorded, and reading the new
        // connection under it would let others read beside or behind us unknowingly.
        if self.turn.lock().installed != claimed {
            return None;
        }
        Some(side)
    }

    /// How many turns callers and waiters have taken.
    #[cfg(feature = "testing")]
    pub fn claims(&self) -> u64 {
        self.turn.lock().claims
    }

    /// A caller gives the turn back, and the registration is armed again. A failure goes to
    /// the I/O thread: the socket is shut, so the registration fires at once.
    fn give_back(&self, side: MutexGuard<'_, Option<Side>>, failed: Option<String>) {
        let mut turn = self.turn.lock();
        turn.holder = Holder::Free;
        // The caller took every buffered frame before it gave the turn back.
        turn.unread = false;
        if std::mem::take(&mut turn.wanted) {
            if let Some(Some(waiters)) = self.waiters.get() {
                waiters.unpoke();
            }
        }
        let mut failed = failed;
        if let Some(poller) = &self.poller {
            if !turn.armed && turn.registered.is_some() {
                if let Err(e) = arm(poller, &mut turn) {
                    failed.get_or_insert(format!("poller: {e}"));
                }
            }
        }
        if let Some(why) = failed {
            turn.failed.get_or_insert(why);
            if let Some(sock) = &turn.registered {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        }
        drop(turn);
        drop(side);
        self.freed.notify_all();
    }
}

/// Arms the registration: the next bytes (or the connection's end) fire it once.
fn arm(poller: &Poller, turn: &mut Turn) -> io::Result<()> {
    if let Some(sock) = &turn.registered {
        poller.arm(sock)?;
        turn.armed = true;
    }
    Ok(())
}

/// One socket's readiness, one-shot: armed, it fires once when bytes (or the end) come.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod poll {
    use std::io;
    use std::net::TcpStream;
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
    use rustix::event::{poll, PollFd, PollFlags, Timespec};

    pub(super) struct Poller(OwnedFd);

    /// Any value: only one socket is registered.
    const DATA: u64 = 1;

    impl Poller {
        pub fn new() -> io::Result<Poller> {
            Ok(Poller(epoll::create(CreateFlags::CLOEXEC)?))
        }

        /// Registers `sock`, disarmed. (The kernel still reports its end once: a disarmed
        /// registration is one-shot too.)
        pub fn add(&self, sock: &TcpStream) -> io::Result<()> {
            Ok(epoll::add(
                &self.0,
                sock,
                EventData::new_u64(DATA),
                EventFlags::ONESHOT,
            )?)
        }

        pub fn arm(&self, sock: &TcpStream) -> io::Result<()> {
            Ok(epoll::modify(
                &self.0,
                sock,
                EventData::new_u64(DATA),
                EventFlags::IN | EventFlags::RDHUP | EventFlags::ONESHOT,
            )?)
        }

        pub fn disarm(&self, sock: &TcpStream) -> io::Result<()> {
            Ok(epoll::modify(
                &self.0,
                sock,
                EventData::new_u64(DATA),
                EventFlags::ONESHOT,
            )?)
        }

        pub fn delete(&self, sock: &TcpStream) {
            let _ = epoll::delete(&self.0, sock);
        }

        /// Waits up to `timeout` (never less); whether the registration fired.
        pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
            let mut events = Vec::with_capacity(1);
            match epoll::wait(
                &self.0,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timespec(timeout)),
            ) {
                Ok(_) => Ok(!events.is_empty()),
                Err(rustix::io::Errno::INTR) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
    }

    fn timespec(d: Duration) -> Timespec {
        Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        }
    }

    /// What ended a waiter's wait.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Ready {
        /// A caller asked for the turn.
        Asked,
        /// Bytes came (or the connection's end).
        Bytes,
        /// The timeout.
        Nothing,
    }

    /// A waiter's wait: `poll(2)` on the socket and an event descriptor a caller sets to ask
    /// for the turn. One descriptor, made when a thread of the client first waits for a
    /// watch (a client that never does keeps its two).
    pub(super) struct WaiterPoller {
        asked: OwnedFd,
    }

    impl WaiterPoller {
        pub fn new() -> io::Result<WaiterPoller> {
            let asked = rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )?;
            Ok(WaiterPoller { asked })
        }

        /// Asks the waiter for the turn.
        pub fn poke(&self) -> io::Result<()> {
            rustix::io::write(&self.asked, &1u64.to_ne_bytes())?;
            Ok(())
        }

        /// Takes the request back (the turn was given).
        pub fn unpoke(&self) {
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&self.asked, &mut count);
        }

        /// Whether the waiter is asked for the turn now.
        #[cfg(test)]
        pub fn is_asked(&self) -> bool {
            let mut fds = [PollFd::new(&self.asked, PollFlags::IN)];
            poll(&mut fds, Some(&timespec(Duration::ZERO))).is_ok_and(|n| n > 0)
        }

        /// Waits up to `timeout` for bytes on `sock` or a request for the turn (which wins).
        pub fn wait(&self, sock: &TcpStream, timeout: Duration) -> io::Result<Ready> {
            let mut fds = [
                PollFd::new(&self.asked, PollFlags::IN),
                PollFd::new(sock, PollFlags::IN | PollFlags::RDHUP),
            ];
            match poll(&mut fds, Some(&timespec(timeout))) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(Ready::Nothing),
                Err(e) => return Err(e.into()),
            }
            Ok(if !fds[0].revents().is_empty() {
                Ready::Asked
            } else if !fds[1].revents().is_empty() {
                Ready::Bytes
            } else {
                Ready::Nothing
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use super::*;

    /// Polls `f` until it holds, for up to ten seconds.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while !f() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// A connection whose far end never writes, its turn held by a waiter (the waiters'
    /// poller made), and the far end, to be kept open.
    fn read_by_a_waiter() -> (Reading, std::net::TcpStream) {
        let (near, far_end) = crate::testing::unread_pair().unwrap();
        let reading = Reading::new(false);
        reading.install(
            crate::client::link::plain(Arc::new(near)).0,
            FrameReader::new(),
            Duration::from_secs(60),
        );
        reading.waiters.get_or_init(|| WaiterPoller::new().ok());
        reading.turn.lock().holder = Holder::Waiter;
        (reading, far_end)
    }

    fn waiters_of(reading: &Reading) -> &WaiterPoller {
        reading.waiters.get().unwrap().as_ref().unwrap()
    }

    /// A caller of `reading` whose answer is in once `answered`, spawned in `s`; returned
    /// once it has asked the waiter holding the turn for it.
    fn asking_caller<'s>(
        s: &'s std::thread::Scope<'s, '_>,
        reading: &'s Reading,
        answered: &'s std::sync::atomic::AtomicBool,
        waiters: &WaiterPoller,
    ) -> std::thread::ScopedJoinHandle<'s, bool> {
        let caller = s.spawn(move || {
            reading.caller_turn(
                || answered.load(std::sync::atomic::Ordering::SeqCst),
                None,
                |_| Ok(()),
            )
        });
        assert!(eventually(|| waiters.is_asked()), "never asked");
        caller
    }

    /// A caller whose answer the waiter reading has already read does not ask that waiter for
    /// the turn, nor wait for it (a reviewer's finding: a waiter reading on for the listing its
    /// watch sent looks whether it is asked only after its next frame, which may be far off).
    #[test]
    fn a_caller_whose_answer_is_in_does_not_wait_for_the_waiter() {
        let (reading, _far_end) = read_by_a_waiter();
        let waiters = waiters_of(&reading);
        // Read between the caller's look at its answer and its asking: done at once.
        let read = reading.caller_turn(
            || true,
            Some(Instant::now() + Duration::from_secs(2)),
            |_| Ok(()),
        );
        assert!(!read, "the caller read though a waiter held the turn");
        assert!(
            !waiters.is_asked(),
            "the caller asked for a turn it no longer needed"
        );
    }

    /// A caller that asked a waiter for the turn, and whose answer that waiter read before it
    /// gave the turn back, does not take the turn: there is nothing left to read (a claim
    /// would disarm and arm the I/O thread's registration for nothing; a reviewer's finding).
    #[test]
    fn a_caller_answered_while_it_asked_takes_no_turn() {
        let (reading, _far_end) = read_by_a_waiter();
        let waiters = waiters_of(&reading);
        let claims = reading.turn.lock().claims;
        let answered = std::sync::atomic::AtomicBool::new(false);
        let answered = &answered;
        std::thread::scope(|s| {
            let reading = &reading;
            let caller = asking_caller(s, reading, answered, waiters);
            {
                // The waiter reads the caller's answer, then gives the turn back as asked.
                let mut turn = reading.turn.lock();
                answered.store(true, std::sync::atomic::Ordering::SeqCst);
                turn.holder = Holder::Free;
                turn.wanted = false;
                waiters.unpoke();
            }
            reading.freed.notify_all();
            assert!(
                !caller.join().unwrap(),
                "the caller took a turn with its answer in"
            );
        });
        assert_eq!(reading.turn.lock().claims, claims);
    }

    /// A caller that asked a waiter for the turn asks again when, as the first waiter gave it
    /// back, a second waiter took it before the caller looked (a reviewer's finding: the
    /// caller waited unasked for as long as the second waiter's wait, which can be for ever).
    #[test]
    fn a_caller_asks_the_next_waiter_too() {
        let (reading, _far_end) = read_by_a_waiter();
        let waiters = waiters_of(&reading);
        let answered = std::sync::atomic::AtomicBool::new(false);
        let answered = &answered;
        std::thread::scope(|s| {
            let reading = &reading;
            let caller = asking_caller(s, reading, answered, waiters);
            {
                // The first waiter gives the turn back, and a second takes it, before the
                // caller looks.
                let mut turn = reading.turn.lock();
                turn.holder = Holder::Free;
                turn.wanted = false;
                waiters.unpoke();
                turn.holder = Holder::Waiter;
            }
            reading.freed.notify_all();
            let asked_again = eventually(|| waiters.is_asked());
            // The second waiter gives the turn back, having read the caller's answer: the
            // caller returns, with nothing left to read.
            {
                let mut turn = reading.turn.lock();
                turn.holder = Holder::Free;
                turn.wanted = false;
                waiters.unpoke();
            }
            answered.store(true, std::sync::atomic::Ordering::SeqCst);
            reading.freed.notify_all();
            assert!(
                !caller.join().unwrap(),
                "the caller read with its answer in"
            );
            assert!(asked_again, "the second waiter was never asked");
        });
    }

    /// A claim made just before the connection was replaced is void: the claimant does not
    /// read the new connection under a holder the replacement reset (a reviewer's finding:
    /// others then took the turn beside it, or queued behind it unasked).
    #[test]
    fn a_claim_across_a_reconnect_is_void() {
        let (a, _a_far) = crate::testing::unread_pair().unwrap();
        let (b, b_far) = crate::testing::unread_pair().unwrap();
        let reading = Reading::new(false);
        let patience = Duration::from_secs(60);
        reading.install(
            crate::client::link::plain(Arc::new(a)).0,
            FrameReader::new(),
            patience,
        );
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let mut side = reading.side.lock();
            let (reading, stop) = (&reading, &stop);
            let waiter = s.spawn(move || {
                reading.waiter_turn(
                    || stop.load(std::sync::atomic::Ordering::SeqCst),
                    || false,
                    None,
                    |_| Ok(()),
                )
            });
            // The waiter has claimed the turn and waits for the read side.
            assert!(eventually(|| reading.turn.lock().holder == Holder::Waiter));
            // The connection ends and the next is installed before it gets there.
            reading.uninstall_locked(&mut side);
            reading.install_locked(
                &mut side,
                crate::client::link::plain(Arc::new(b)).0,
                FrameReader::new(),
                patience,
            );
            drop(side);
            let void = eventually(|| waiter.is_finished());
            // Ends a waiter that reads the new connection all the same: a frame, then done.
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            (&b_far).write_all(&0i32.to_be_bytes()).unwrap();
            let read = waiter.join().unwrap();
            assert!(void && !read, "the stale claim read the new connection");
        });
    }

    /// A frame whose first bytes come just before the reader's deadline does not hold the
    /// reader past it (a reviewer's finding: the socket's timeout, set when the read began,
    /// let the read of the rest block for that long again).
    #[test]
    fn a_frame_begun_late_does_not_hold_the_reader_past_its_deadline() {
        let (near, far) = crate::testing::unread_pair().unwrap();
        // Kept open past the read: its end would stop the read sooner.
        let mut far = &far;
        let mut side = Side {
            stream: crate::client::link::plain(Arc::new(near)).0,
            frames: FrameReader::new(),
            socket_timeout: Duration::ZERO,
            patience: Duration::from_secs(60),
        };
        const WAIT: Duration = Duration::from_millis(600);
        const LATE: Duration = Duration::from_millis(450);
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(move || {
                // The adversary's timing: the frame's first bytes come late, the rest never.
                std::thread::sleep(LATE);
                let mut partial = 100i32.to_be_bytes().to_vec();
                partial.extend_from_slice(b"only ten b");
                far.write_all(&partial).unwrap();
            });
            let read = side.next(started + WAIT);
            let took = started.elapsed();
            assert!(matches!(&read, Err(e) if timed_out(e)), "{read:?}");
            // The deadline, and the scheduling of a loaded 2-core machine.
            assert!(took < WAIT + Duration::from_millis(150), "took {took:?}");
        });
    }
}

/// Elsewhere the I/O thread reads everything: no poller.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod poll {
    use std::io;
    use std::net::TcpStream;
    use std::time::Duration;

    pub(super) struct Poller;

    impl Poller {
        pub fn new() -> io::Result<Poller> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn add(&self, _: &TcpStream) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn arm(&self, _: &TcpStream) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn disarm(&self, _: &TcpStream) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn delete(&self, _: &TcpStream) {}

        pub fn wait(&self, _: Duration) -> io::Result<bool> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Ready {
        Asked,
        Bytes,
        Nothing,
    }

    pub(super) struct WaiterPoller;

    impl WaiterPoller {
        pub fn new() -> io::Result<WaiterPoller> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn poke(&self) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }

        pub fn unpoke(&self) {}

        pub fn wait(&self, _: &TcpStream, _: Duration) -> io::Result<Ready> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }
}
