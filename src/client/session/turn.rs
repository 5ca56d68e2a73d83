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
//! - A caller takes the turn only when it is free, and disarms the registration as it does.
//! - Whoever gives the turn back first takes every whole frame already buffered (the poller
//!   cannot see those); a caller then re-arms the registration, so bytes that came meanwhile
//!   wake the I/O thread.
//! - The I/O thread takes the turn when the registration fires while it is free; a firing
//!   while a caller reads is that caller's to read.
//! - Only the I/O thread ends a connection: what ends one in a caller's hands (a broken
//!   stream, an answer that ends the session) is handed to it, and the caller shuts the
//!   socket, whose end fires the registration.
//!
//! Frames are taken one at a time by one reader, in the order they came, by the same code
//! whichever thread reads: what an answer proves about the session does not depend on who
//! read it. Over TLS, off Linux, and where no epoll instance can be made, the I/O thread reads
//! everything, as before (the TLS state buffers plaintext the poller cannot see).
//!
//! Epoll directly (through `rustix`), not a portable poller: an idle wait is then one system
//! call, where `polling` makes five (a timer descriptor, a notifier); the I/O thread of a
//! client contending for a lock waits once per notification.

use std::io;
use std::time::{Duration, Instant};

use log::debug;
use parking_lot::{Mutex, MutexGuard};

use self::poll::Poller;

use super::super::conn::{timed_out, FrameReader};
use super::super::link::{LinkReader, Socket};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holder {
    Free,
    Io,
    Caller,
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
    /// The next frame: a whole one already buffered, or read by `until`.
    fn next(&mut self, until: Instant) -> io::Result<Vec<u8>> {
        let wait = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        // The timeout stays unless the deadline is nearer, or more than twice as far (then a
        // read would wake for nothing).
        if wait < self.socket_timeout || wait > self.socket_timeout * 2 {
            self.stream.set_read_timeout(Some(wait))?;
            self.socket_timeout = wait;
        }
        self.frames.read_frame(&mut self.stream, Some(until))
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

/// The turn to read the current connection.
pub(super) struct Reading {
    /// `None` where none could be made (or off Linux): the I/O thread then reads everything.
    poller: Option<Poller>,
    turn: Mutex<Turn>,
    side: Mutex<Option<Side>>,
}

impl Reading {
    pub fn new() -> Reading {
        let poller = Poller::new()
            .map_err(|e| debug!("no poller ({e}): the I/O thread reads every answer"))
            .ok();
        Reading {
            poller,
            turn: Mutex::new(Turn {
                holder: Holder::Free,
                registered: None,
                armed: false,
                failed: None,
                unread: false,
            }),
            side: Mutex::new(None),
        }
    }

    /// Makes `stream` the connection to read. Callers may read it themselves if it is plain
    /// TCP and the poller takes it.
    pub fn install(&self, stream: LinkReader, frames: FrameReader, patience: Duration) {
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
        *self.side.lock() = Some(Side {
            stream,
            frames,
            socket_timeout: Duration::ZERO,
            patience,
        });
        *self.turn.lock() = Turn {
            holder: Holder::Free,
            registered,
            armed: false,
            failed: None,
            unread: true,
        };
    }

    /// Ends reading the connection (its socket is already shut, so a caller reading it stops
    /// at once): waits for the reader of the moment, then forgets the socket.
    pub fn uninstall(&self) {
        let mut side = self.side.lock();
        let mut turn = self.turn.lock();
        if let (Some(poller), Some(sock)) = (&self.poller, turn.registered.take()) {
            poller.delete(&sock);
        }
        turn.holder = Holder::Free;
        turn.armed = false;
        turn.failed = None;
        turn.unread = false;
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
            Some(s) => match s.next(wake.max(Instant::now() + Duration::from_millis(1))) {
                Ok(frame) => take(frame).and_then(|()| s.drain(&mut take)),
                Err(e) if timed_out(&e) => Ok(()),
                Err(e) => Err(e.to_string()),
            },
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
        match s.next(wake) {
            Ok(frame) => take(frame),
            Err(e) if timed_out(&e) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
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
        let Some(mut side) = self.claim() else {
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
                match s.next(bound) {
                    Ok(frame) => {
                        if let Err(why) = take(frame) {
                            failed = Some(why);
                            break;
                        }
                    }
                    Err(e) if timed_out(&e) => {}
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
            if failed.is_none() {
                failed = s.drain(&mut take).err();
            }
        }
        self.give_back(side, failed);
        true
    }

    /// Takes the turn for a caller if it is free: the I/O thread's registration is disarmed.
    fn claim(&self) -> Option<MutexGuard<'_, Option<Side>>> {
        let poller = self.poller.as_ref()?;
        {
            let mut turn = self.turn.lock();
            if turn.holder != Holder::Free || turn.failed.is_some() {
                return None;
            }
            let sock = turn.registered.as_ref()?;
            if turn.armed {
                poller.disarm(sock).ok()?;
                turn.armed = false;
            }
            turn.holder = Holder::Caller;
        }
        // The I/O thread may still be giving its turn back: a moment.
        Some(self.side.lock())
    }

    /// A caller gives the turn back, and the registration is armed again. A failure goes to
    /// the I/O thread: the socket is shut, so the registration fires at once.
    fn give_back(&self, side: MutexGuard<'_, Option<Side>>, failed: Option<String>) {
        let mut turn = self.turn.lock();
        turn.holder = Holder::Free;
        // The caller took every buffered frame before it gave the turn back.
        turn.unread = false;
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
    use rustix::event::Timespec;

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

        /// Waits up to `timeout` (to the millisecond above); whether the registration fired.
        pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
            // Rounded up, so that a wait never ends before its deadline.
            let timeout = Timespec {
                tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            let mut events = Vec::with_capacity(1);
            match epoll::wait(
                &self.0,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                Ok(_) => Ok(!events.is_empty()),
                Err(rustix::io::Errno::INTR) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
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
}
