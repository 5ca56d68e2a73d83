//! The wire floor of the batch bench's recipes: the double barrier's and the multi-lock's
//! protocols with nothing spare, on the same hand-encoded frames and blocking sockets as the
//! mutex floor (one thread per session, every answer read by the thread that waits for it).
//!
//! - Double barrier (Curator's node layout, as ours and Curator's): enter = `exists` with a
//!   watch on `ready`, the member's create (ephemeral sequential) and the listing, written
//!   together; through if `ready` was there (or came meanwhile), else the member that makes
//!   the count creates `ready` and the others wait for its watch. Leave: every member but the
//!   lowest watches the lowest and deletes its own node, written together, and is through when
//!   the lowest goes; the lowest watches the highest left until it is alone, then deletes its
//!   node and `ready` (written together), so the path could be used again. The lowest is known
//!   from the enter's listing: it holds every node made before ours.
//! - Multi-lock: the mutex floor's acquire on each of the paths in turn (a later lock may have
//!   to be waited for, so the takes cannot be sent together: two sets sent together could each
//!   be first in one line and wait for each other), then the deletes, last taken first. Beside
//!   it, the least the wire allows for an uncontended set (every create and listing in one
//!   write, every delete in one write): a bound, not a protocol, for the reason just said.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use super::super::figures::{uncontended_figures, Figures};
use super::super::{process_cpu, run_window};
use super::{
    get_i32, get_str, put_i32, put_str, sequence, Wire, CREATE, DELETE, GET_DATA, NOTIFICATION,
    NO_NODE,
};

const EXISTS: i32 = 3;
/// ZooKeeper's `NodeExists`.
const NODE_EXISTS: i32 = -110;
const READY: &str = "ready";

impl Wire {
    /// Reads until an answer comes; returns its error code. The paths of watch notifications
    /// read on the way are added to `seen`.
    fn answer_seeing(&mut self, seen: &mut Vec<String>) -> io::Result<i32> {
        loop {
            self.read_frame()?;
            let xid = get_i32(&self.frame, 0);
            if xid == NOTIFICATION {
                seen.push(self.notified_path());
            } else if xid >= 0 {
                return Ok(get_i32(&self.frame, 12));
            }
        }
    }

    /// The path of the notification in the last frame (after the reply header, its type and
    /// its state).
    fn notified_path(&self) -> String {
        get_str(&self.frame, 24).0
    }

    /// Reads until a notification for `path` comes (others are an earlier round's, and
    /// dropped).
    fn notification_for(&mut self, path: &str) -> io::Result<()> {
        loop {
            self.read_frame()?;
            if get_i32(&self.frame, 0) == NOTIFICATION && self.notified_path() == path {
                return Ok(());
            }
        }
    }

    fn exists_watch_frame(&mut self, path: &str) -> Vec<u8> {
        self.reads += 1;
        self.request(EXISTS, |b| {
            put_str(b, path);
            b.push(1);
        })
    }

    fn get_data_watch_frame(&mut self, path: &str) -> Vec<u8> {
        self.reads += 1;
        self.request(GET_DATA, |b| {
            put_str(b, path);
            b.push(1);
        })
    }

    fn delete_frame(&mut self, path: &str) -> Vec<u8> {
        self.request(DELETE, |b| {
            put_str(b, path);
            put_i32(b, -1);
        })
    }

    fn create_persistent_frame(&mut self, path: &str) -> Vec<u8> {
        self.request(CREATE, |b| {
            put_str(b, path);
            put_i32(b, 0); // no data
            put_i32(b, 1); // one ACL: world:anyone, all
            put_i32(b, 31);
            put_str(b, "world");
            put_str(b, "anyone");
            put_i32(b, 0); // persistent
        })
    }

    /// One member's round of a double barrier of `n` at `dir` (which must exist): enter, then
    /// leave.
    pub fn double_barrier_round(&mut self, dir: &str, n: usize) -> io::Result<()> {
        let ready = format!("{dir}/{READY}");
        // Enter.
        let mut frames = self.exists_watch_frame(&ready);
        frames.extend(self.create_frame(&format!("{dir}/m-")));
        frames.extend(self.children_frame(dir));
        self.send(&frames)?;
        let mut seen = Vec::new();
        let ready_there = match self.answer_seeing(&mut seen)? {
            0 => true,
            NO_NODE => false,
            e => return Err(io::Error::other(format!("exists: error {e}"))),
        };
        match self.answer_seeing(&mut seen)? {
            0 => {}
            e => return Err(io::Error::other(format!("create: error {e}"))),
        }
        let me = get_str(&self.frame, 16)
            .0
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        match self.answer_seeing(&mut seen)? {
            0 => {}
            e => return Err(io::Error::other(format!("getChildren: error {e}"))),
        }
        let listed = self.children();
        let mut members: Vec<String> = listed.iter().filter(|c| *c != READY).cloned().collect();
        let through = ready_there || listed.iter().any(|c| c == READY) || seen.contains(&ready);
        if !through {
            if members.len() >= n {
                let f = self.create_persistent_frame(&ready);
                self.send(&f)?;
                match self.answer_seeing(&mut seen)? {
                    0 | NODE_EXISTS => {}
                    e => return Err(io::Error::other(format!("create ready: error {e}"))),
                }
            } else {
                self.notification_for(&ready)?;
            }
        }
        // Leave.
        members.sort_by_key(|m| sequence(m));
        let lowest = members.first().cloned().unwrap_or_else(|| me.clone());
        if lowest != me {
            let watched = format!("{dir}/{lowest}");
            let mut frames = self.get_data_watch_frame(&watched);
            frames.extend(self.delete_frame(&format!("{dir}/{me}")));
            self.send(&frames)?;
            let mut seen = Vec::new();
            let there = match self.answer_seeing(&mut seen)? {
                0 => true,
                NO_NODE => false,
                e => return Err(io::Error::other(format!("getData: error {e}"))),
            };
            match self.answer_seeing(&mut seen)? {
                0 => {}
                e => return Err(io::Error::other(format!("delete: error {e}"))),
            }
            if there && !seen.contains(&watched) {
                self.notification_for(&watched)?;
            }
            return Ok(());
        }
        loop {
            let mut others: Vec<String> = self
                .list(dir)?
                .into_iter()
                .filter(|c| c != READY && *c != me)
                .collect();
            others.sort_by_key(|m| sequence(m));
            let Some(highest) = others.last() else {
                let mut frames = self.delete_frame(&format!("{dir}/{me}"));
                frames.extend(self.delete_frame(&ready));
                self.send(&frames)?;
                let mut seen = Vec::new();
                for what in ["our node", "ready"] {
                    match self.answer_seeing(&mut seen)? {
                        0 | NO_NODE => {}
                        e => return Err(io::Error::other(format!("delete {what}: error {e}"))),
                    }
                }
                return Ok(());
            };
            let watched = format!("{dir}/{highest}");
            if self.watch(&watched)? {
                self.notification_for(&watched)?;
            }
        }
    }

    /// Takes the mutex at each of `paths` in turn (waiting in line where it must); the lock
    /// nodes, in the order taken.
    fn take_all(&mut self, paths: &[String]) -> io::Result<Vec<String>> {
        let mut taken = Vec::with_capacity(paths.len());
        for p in paths {
            let (me, line) = self.create_and_list(p)?;
            self.wait_turn(p, &me, line)?;
            taken.push(format!("{p}/{me}"));
        }
        Ok(taken)
    }

    /// Deletes `taken`, last first, each answered before the next goes.
    fn release_all(&mut self, taken: &[String]) -> io::Result<()> {
        taken.iter().rev().try_for_each(|node| self.delete(node))
    }
}

/// `rounds` rounds of a double barrier of `n` members, each member its own new session and
/// thread; round `r` at `dir/r<r>` (made beforehand). A round lasts from the first member's
/// start to the last member's leave; the rounds' durations.
pub fn double_barrier(addr: &str, dir: &str, n: usize, rounds: usize) -> Vec<Duration> {
    let go = Arc::new(Barrier::new(n + 1));
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Instant)>();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let mut w = Wire::connect(addr).expect("the wire floor's session");
            let (go, tx, dir) = (go.clone(), tx.clone(), dir.to_owned());
            thread::spawn(move || {
                for r in 0..rounds {
                    go.wait();
                    let start = Instant::now();
                    w.double_barrier_round(&format!("{dir}/r{r}"), n)
                        .expect("a wire barrier round");
                    if tx.send((start, Instant::now())).is_err() {
                        return;
                    }
                }
                w.close();
            })
        })
        .collect();
    drop(tx);
    let took = super::super::rounds(&go, &rx, n, rounds);
    for t in threads {
        t.join().expect("a wire barrier member");
    }
    took
}

/// `rounds` uncontended takes of the mutexes at `paths` (which must exist), in turn, on one
/// new session: acquire and release latencies, CPU per round.
pub fn multi_uncontended(addr: &str, paths: &[String], rounds: usize) -> Figures {
    let mut w = Wire::connect(addr).expect("the wire floor's session");
    let mut taken = Vec::with_capacity(rounds);
    let cpu = process_cpu();
    for _ in 0..rounds {
        let s = Instant::now();
        let nodes = w.take_all(paths).expect("take the set");
        let held = Instant::now();
        w.release_all(&nodes).expect("release the set");
        taken.push((held - s, held.elapsed()));
    }
    let figures = uncontended_figures(&taken, process_cpu() - cpu);
    w.close();
    figures
}

/// The wire's least for an uncontended set: every create and listing written at once, every
/// delete written at once. Refuses (panics) if a lock was not free.
pub fn multi_one_write(addr: &str, paths: &[String], rounds: usize) -> Figures {
    let mut w = Wire::connect(addr).expect("the wire floor's session");
    let mut taken = Vec::with_capacity(rounds);
    let cpu = process_cpu();
    let mut no_seen = Vec::new();
    for _ in 0..rounds {
        let s = Instant::now();
        let mut frames = Vec::new();
        for p in paths {
            frames.extend(w.create_frame(&format!("{p}/lock-")));
            frames.extend(w.children_frame(p));
        }
        w.send(&frames).expect("send the set");
        let mut nodes = Vec::with_capacity(paths.len());
        for p in paths {
            assert_eq!(w.answer_seeing(&mut no_seen).expect("create"), 0, "create");
            let me = get_str(&w.frame, 16).0;
            assert_eq!(w.answer_seeing(&mut no_seen).expect("list"), 0, "list");
            assert_eq!(w.children().len(), 1, "{p} was not free");
            nodes.push(me);
        }
        let held = Instant::now();
        let mut frames = Vec::new();
        for node in nodes.iter().rev() {
            frames.extend(w.delete_frame(node));
        }
        w.send(&frames).expect("send the deletes");
        for _ in &nodes {
            assert_eq!(w.answer_seeing(&mut no_seen).expect("delete"), 0, "delete");
        }
        taken.push((held - s, held.elapsed()));
    }
    let figures = uncontended_figures(&taken, process_cpu() - cpu);
    w.close();
    figures
}

/// `n` sessions, a thread each, take the set at `paths` (which must exist) in turn for
/// `run_for`: sets taken per second, client CPU per set.
pub fn multi_contended(addr: &str, paths: &[String], n: usize, run_for: Duration) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let mut w = Wire::connect(addr).expect("the wire floor's session");
            let (paths, stop, count, start) =
                (paths.to_vec(), stop.clone(), count.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let nodes = w.take_all(&paths).expect("take the set");
                    count.fetch_add(1, Ordering::Relaxed);
                    w.release_all(&nodes).expect("release the set");
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
