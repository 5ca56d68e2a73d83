//! Issue 40, item 2: leader election at scale. N `LeaderLatch` participants (1 000 by default,
//! each its own session, over several worker processes), ours beside Apache Curator 5.4's
//! (`benches/CuratorElectionWorker.java`, JVMs warmed until their JIT is quiet). Each round is
//! a fresh latch: a victim process with one participant joins first and leads, the others join
//! behind it; once all N are in line and the entry burst has passed, the victim leaves:
//!
//! - **graceful**: it closes its latch; timed from just before the close (the victim of these
//!   rounds is one process that stays, warm);
//! - **crash**: the bench SIGKILLs it; timed from just before the kill. Its session ends only
//!   when the server expires it: the session timeout after the server last heard from it,
//!   rounded up to the server's next tick (ZooKeeper's `ExpiryQueue`). The bench reads that
//!   last touch from the server's `cons` just before the kill and prints when the expiry was
//!   due (`due ms`) and how long after it the node went (`after due`). The victim's process
//!   starts at a random point of a tick and is killed at a random point of 2 s, so that the
//!   tick's rounding and the last ping's age are a fair draw for each client (without it, the
//!   round's fixed set-up gave each client the same draw every round).
//!
//! until the next leader's first vouched work: for ours, the moment its `Gained` listener finds
//! the latch's lease valid (`Lease::check`); for Curator, its `isLeader` callback finding
//! `hasLeadership()` (Curator has no lease). One clock for every process (CLOCK_MONOTONIC,
//! which Java's `nanoTime` reads). The round trip beside it: an `exists` on the same server just
//! before the trigger (median of 5). Ours and Curator alternate round by round, in an order
//! that rotates.
//!
//! `cargo bench --bench election [-- --quick] [-- --n 1000] [-- --rounds 4] [-- --only ours]`.
//! Skips Curator, saying why, without Java or Curator.

mod common;

use std::io::{BufRead, Write};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use common::procs::*;
use common::*;
use zk_recipes::leader::{LeaderLatch, LeadershipEvent};
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::Client;

/// Participants per worker process, at most.
const PER_PROCESS: usize = 250;
/// The server's tick: ZooKeeper's sample configuration has 2 s; 1 s keeps a crash round short
/// and the bound's tick term visible.
const TICK: Duration = Duration::from_secs(1);
/// Every participant's session timeout (the shortest the server grants is two ticks).
const SESSION: Duration = Duration::from_secs(4);

fn main() {
    if let Ok(spec) = std::env::var("ZKR_ELECTION_WORKER") {
        worker(&spec);
        return;
    }
    // `--replot FILE`: the plot again from a run's printed record (its JSON lines).
    if let Some(file) = std::env::args().skip_while(|a| a != "--replot").nth(1) {
        return replot(&file);
    }
    let args = args();
    let flag = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let n: usize = flag("--n")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if args.quick { 64 } else { 1000 });
    let rounds: usize = flag("--rounds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if args.quick { 1 } else { 4 });
    init_logs();
    let server = TestingServer::with_options(ServerOptions {
        tick_time: TICK,
        force_sync: args.fsync,
        ..ServerOptions::default()
    })
    .expect("start ZooKeeper (apt-get install zookeeper)");
    let connect = server.connect_string();
    let admin = Client::builder(&connect).connect().expect("connect");
    admin.ensure_path("/bench/election").expect("path");
    let mut peers = vec![Peer::Ours];
    match curator_driver("CuratorElectionWorker") {
        Ok(cp) => peers.push(Peer::Curator(cp)),
        Err(why) => {
            json("election", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
        }
    }
    if let Some(only) = flag("--only") {
        peers.retain(|p| only.split(',').any(|o| o.eq_ignore_ascii_case(p.name())));
    }
    assert!(!peers.is_empty(), "--only names none of ours, Curator");
    // Every peer's participants, but the victim's, connected once for the whole run.
    let (tx, rx) = channel::<(usize, String)>();
    let mut next_id = 0;
    let mut fleets: Vec<Fleet> = peers
        .iter()
        .map(|peer| Fleet::start(peer, &connect, n - 1, &tx, &mut next_id))
        .collect();
    drop(tx);
    let mut round = Round {
        server: &server,
        admin: &admin,
        rx: &rx,
        n,
        next_id,
        count: 0,
    };
    // Warm-up: graceful rounds, not recorded, until the server and every JVM are past their
    // JIT (at most 10 rounds each; one in a quick run).
    for (peer, fleet) in peers.iter().zip(fleets.iter_mut()) {
        for _ in 0..if args.quick { 1 } else { 10 } {
            let before = jit_ms(server.pid()) + fleet.jit();
            round.run(peer, fleet, Leave::Graceful);
            if jit_ms(server.pid()) + fleet.jit() - before < 20.0 {
                break;
            }
        }
    }
    println!(
        "{:>6} {:>8} {:>9} {:>12} {:>11} {:>12} {:>8} {:>10} {:>9} {:>8} {:>9}",
        "N",
        "client",
        "leave",
        "handoff ms",
        "server ms",
        "reaction µs",
        "rtt µs",
        "bound ms",
        "touch ms",
        "due ms",
        "after due"
    );
    let mut results: Vec<(&'static str, Leave, Measured)> = Vec::new();
    for r in 0..rounds {
        for leave in [Leave::Graceful, Leave::Crash] {
            let mut order: Vec<usize> = (0..peers.len()).collect();
            order.rotate_left(r % peers.len());
            for i in order {
                let (peer, fleet) = (&peers[i], &mut fleets[i]);
                let jit_quiet = match peer {
                    Peer::Ours => true,
                    Peer::Curator(_) => jit_quiet(
                        &fleet.workers,
                        Duration::from_secs(if args.quick { 5 } else { 60 }),
                    ),
                };
                let m = round.run(peer, fleet, leave);
                let bound = match leave {
                    Leave::Graceful => m.rtt.as_secs_f64() * 1e3,
                    Leave::Crash => (SESSION + TICK).as_secs_f64() * 1e3,
                };
                println!(
                    "{:>6} {:>8} {:>9} {:>12.3} {:>11.3} {:>12.0} {:>8.0} {:>10.1} {:>9} {:>8} {:>9}",
                    n,
                    peer.name(),
                    leave.name(),
                    m.handoff.as_secs_f64() * 1e3,
                    m.server_part.as_secs_f64() * 1e3,
                    m.reaction.as_secs_f64() * 1e6,
                    m.rtt.as_secs_f64() * 1e6,
                    bound,
                    m.victim_touch.map_or("-".into(), |(age, _)| format!("{age:.0}")),
                    m.victim_touch.map_or("-".into(), |(_, due)| format!("{due:.0}")),
                    m.after_due().map_or("-".into(), |d| format!("{d:.1}")),
                );
                json(
                    "election",
                    &[
                        ("participants", f(n as f64)),
                        ("client", s(peer.name())),
                        ("leave", s(leave.name())),
                        ("handoff_ms", f(m.handoff.as_secs_f64() * 1e3)),
                        ("server_part_ms", f(m.server_part.as_secs_f64() * 1e3)),
                        ("reaction_us", f(m.reaction.as_secs_f64() * 1e6)),
                        ("close_ms", f(m.close.as_secs_f64() * 1e3)),
                        ("rtt_us", f(m.rtt.as_secs_f64() * 1e6)),
                        (
                            "victim_last_answered_ms_before_kill",
                            f(m.victim_touch.map_or(-1.0, |(age, _)| age)),
                        ),
                        (
                            "expiry_due_ms_after_kill",
                            f(m.victim_touch.map_or(-1.0, |(_, due)| due)),
                        ),
                        ("deleted_ms_after_due", f(m.after_due().unwrap_or(-1.0))),
                        ("session_ms", f(SESSION.as_secs_f64() * 1e3)),
                        ("tick_ms", f(TICK.as_secs_f64() * 1e3)),
                        ("leaders", f(m.leaders as f64)),
                        ("jit_quiet", s(if jit_quiet { "true" } else { "false" })),
                    ],
                );
                assert_eq!(m.leaders, 1, "{} leaders at once", m.leaders);
                results.push((peer.name(), leave, m));
            }
        }
    }
    // Medians per kind of leave, and ours over Curator's (under 1: ours is ahead).
    for leave in [Leave::Graceful, Leave::Crash] {
        let median = |name: &str, part: fn(&Measured) -> Duration| {
            let mut v: Vec<Duration> = results
                .iter()
                .filter(|(p, l, _)| *p == name && *l == leave)
                .map(|(_, _, m)| part(m))
                .collect();
            (!v.is_empty()).then(|| pct(&mut v, 0.5) / 1e3)
        };
        for (what, part) in [
            (
                "handoff",
                (|m: &Measured| m.handoff) as fn(&Measured) -> Duration,
            ),
            ("reaction", |m: &Measured| m.reaction),
        ] {
            if let (Some(ours), Some(curator)) = (median("ours", part), median("Curator", part)) {
                println!(
                    "{} {what}: median ours {ours:.3} ms, Curator {curator:.3} ms, ours ÷ Curator {:.2}",
                    leave.name(),
                    ours / curator
                );
                json(
                    "election_summary",
                    &[
                        ("participants", f(n as f64)),
                        ("leave", s(leave.name())),
                        ("figure", s(what)),
                        ("ours_ms", f(ours)),
                        ("curator_ms", f(curator)),
                        ("ratio", f(ours / curator)),
                    ],
                );
            }
        }
    }
    // A crash's total, taken apart: the server had the victim's expiry due at its timeout
    // after the last touch, rounded up to a tick; the client controls only how recent that
    // touch was (its pings) and its reaction once the node goes.
    for peer in &peers {
        let crashes: Vec<&Measured> = results
            .iter()
            .filter(|(p, l, _)| *p == peer.name() && *l == Leave::Crash)
            .map(|(_, _, m)| m)
            .collect();
        let mean = |f: &dyn Fn(&Measured) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = crashes.iter().filter_map(|m| f(m)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let session = SESSION.as_secs_f64() * 1e3;
        if let (Some(age), Some(due), Some(after)) = (
            mean(&|m| m.victim_touch.map(|(age, _)| age)),
            mean(&|m| m.victim_touch.map(|(_, due)| due)),
            mean(&|m| m.after_due()),
        ) {
            let rounding = due - (session - age);
            println!(
                "crash, {}: last touch {age:.0} ms before the kill, expiry due {due:.0} ms after it \
                 (tick rounding {rounding:.0} ms), node deleted {after:.1} ms after due (means of {})",
                peer.name(),
                crashes.len()
            );
            json(
                "election_crash_parts",
                &[
                    ("participants", f(n as f64)),
                    ("client", s(peer.name())),
                    ("rounds", f(crashes.len() as f64)),
                    ("last_touch_ms_before_kill", f(age)),
                    ("expiry_due_ms_after_kill", f(due)),
                    ("tick_rounding_ms", f(rounding)),
                    ("deleted_ms_after_due", f(after)),
                ],
            );
        }
    }
    for fleet in fleets {
        fleet.stop();
    }
    admin.close();
    if !args.quick {
        let rows: Vec<Row> = results
            .iter()
            .map(|(p, l, m)| Row {
                client: p,
                crash: *l == Leave::Crash,
                handoff_ms: m.handoff.as_secs_f64() * 1e3,
                due_ms: m.victim_touch.map(|(_, due)| due),
            })
            .collect();
        draw(&rows);
    }
}

/// A round, for the plot.
struct Row {
    client: &'static str,
    crash: bool,
    handoff_ms: f64,
    /// When the server had the crashed victim's expiry due, after the kill.
    due_ms: Option<f64>,
}

/// `benches/election.png`: each round's handoff, graceful and after a crash (with the
/// promised bound, the session timeout and a tick), and a crash's handoff past the victim's
/// expiry due time (what the client adds to what the server decides), ours beside Curator.
fn draw(rows: &[Row]) {
    use plotters::style::{BLACK, BLUE, MAGENTA};
    let series = |client: &str, crash: bool, y: fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.client == client && r.crash == crash)
            .filter_map(y)
            .enumerate()
            .map(|(i, v)| ((i + 1) as f64, v))
            .collect()
    };
    let both = |crash: bool, y: fn(&Row) -> Option<f64>| -> Vec<Line> {
        vec![
            ("zk-recipes".into(), BLUE, series("ours", crash, y)),
            ("Curator".into(), MAGENTA, series("Curator", crash, y)),
        ]
    };
    let mut crash = both(true, |r| Some(r.handoff_ms));
    let rounds = crash.iter().map(|l| l.2.len()).max().unwrap_or(0);
    let bound = (SESSION + TICK).as_secs_f64() * 1e3;
    crash.push((
        "bound: session + tick".into(),
        BLACK,
        (1..=rounds).map(|i| (i as f64, bound)).collect(),
    ));
    let name = format!("{}/election.png", env!("CARGO_MANIFEST_DIR"));
    let drawn = plot_panels(
        &name,
        &[
            (
                "graceful close: handoff",
                "round",
                "ms",
                both(false, |r| Some(r.handoff_ms)),
            ),
            ("crash (SIGKILL): handoff", "round", "ms", crash),
            (
                "crash: handoff past the expiry's due time",
                "round",
                "ms",
                both(true, |r| r.due_ms.map(|due| r.handoff_ms - due)),
            ),
        ],
    );
    match drawn {
        Ok(()) => println!("wrote {name}"),
        Err(e) => println!("no plot: {e}"),
    }
}

/// Draws the plot of a run from its record (the `{"bench":"election",...}` lines it printed).
fn replot(file: &str) {
    let text = std::fs::read_to_string(file).expect("the run's record");
    let rows: Vec<Row> = text
        .lines()
        .filter(|l| l.starts_with(r#"{"bench":"election","#))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let client = match v.get("client")?.as_str()? {
                "ours" => "ours",
                "Curator" => "Curator",
                _ => return None,
            };
            let crash = v.get("leave")?.as_str()? == "crash";
            let handoff_ms = v.get("handoff_ms")?.as_f64()?;
            let due_ms = v
                .get("expiry_due_ms_after_kill")
                .and_then(serde_json::Value::as_f64)
                .filter(|d| *d >= 0.0);
            Some(Row {
                client,
                crash,
                handoff_ms,
                due_ms,
            })
        })
        .collect();
    draw(&rows);
}

/// Whose participants a worker process runs.
enum Peer {
    Ours,
    /// Curator, with the class path of its compiled worker.
    Curator(String),
}

impl Peer {
    fn name(&self) -> &'static str {
        match self {
            Peer::Ours => "ours",
            Peer::Curator(_) => "Curator",
        }
    }

    fn command(&self, connect: &str, sessions: usize, name: &str) -> std::process::Command {
        let session_ms = SESSION.as_millis().to_string();
        match self {
            Peer::Ours => {
                let mut cmd =
                    std::process::Command::new(std::env::current_exe().expect("this binary"));
                let spec = format!("{connect} {sessions} {session_ms} {name}");
                cmd.env("ZKR_ELECTION_WORKER", spec);
                cmd
            }
            Peer::Curator(cp) => {
                let mut cmd = std::process::Command::new("java");
                cmd.args(["-Xmx1g", "-Xss256k", "-cp", cp, "CuratorElectionWorker"])
                    .args([connect, &sessions.to_string(), &session_ms, name]);
                cmd
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Leave {
    Graceful,
    Crash,
}

impl Leave {
    fn name(self) -> &'static str {
        match self {
            Leave::Graceful => "graceful",
            Leave::Crash => "crash",
        }
    }
}

/// A peer's long-lived worker processes, their lines forwarded to the bench's one channel
/// (tagged with the worker's index).
struct Fleet {
    workers: Vec<Worker>,
    first: usize,
    /// The victim of graceful rounds: one participant in a process of its own that stays, so
    /// that its close runs warm, as a leader's that has run for a while does (a crash's victim
    /// is a new process each round).
    victim: Worker,
}

impl Fleet {
    fn start(
        peer: &Peer,
        connect: &str,
        n: usize,
        tx: &Sender<(usize, String)>,
        next_id: &mut usize,
    ) -> Fleet {
        let procs = n.div_ceil(PER_PROCESS).max(1);
        let first = *next_id;
        let mut workers: Vec<Worker> = (0..procs)
            .map(|i| {
                let sessions = n / procs + usize::from(i < n % procs);
                let name = format!("{}{}", peer.name(), first + i);
                Worker::start(peer.command(connect, sessions, &name))
            })
            .collect();
        for (i, w) in workers.iter_mut().enumerate() {
            assert_eq!(w.next_line(), "ready");
            w.forward_lines(first + i, tx.clone());
        }
        *next_id += procs;
        let mut victim = Worker::start(peer.command(connect, 1, &format!("victim{}", *next_id)));
        *next_id += 1;
        assert_eq!(victim.next_line(), "ready");
        Fleet {
            workers,
            first,
            victim,
        }
    }

    /// The JIT time of the fleet's JVMs so far (0 for ours).
    fn jit(&self) -> f64 {
        self.workers
            .iter()
            .chain([&self.victim])
            .map(|w| jit_ms(Some(w.child.id())))
            .sum()
    }

    fn stop(self) {
        for mut w in self.workers.into_iter().chain([self.victim]) {
            w.close_stdin();
            let _ = w.child.wait();
        }
    }
}

/// One round's figures.
struct Measured {
    /// From the close (or the kill) to the next leader's first vouched work.
    handoff: Duration,
    /// A crash's victim: how long before the kill the server had last answered its session,
    /// and when, from the kill, the server had its expiry due (ms each).
    victim_touch: Option<(f64, f64)>,
    /// From the close (or the kill) to the bench's own session hearing the victim's node
    /// deleted: the server's part (for a crash, the wait for the session's expiry).
    server_part: Duration,
    /// From that deletion event to the next leader's first vouched work (may be negative by
    /// the events' delivery order: clamped at 0): the successor's part.
    reaction: Duration,
    /// How long the victim's close took (0 for a crash).
    close: Duration,
    rtt: Duration,
    /// Participants that said they lead once the victim left, before anyone else left (its
    /// successor alone: 1).
    leaders: usize,
}

impl Measured {
    /// A crash's: from the server's due expiry of the victim's session to the bench hearing
    /// its node deleted (the expiry thread's wake-up, the session's close through the
    /// pipeline, the notification), in ms.
    fn after_due(&self) -> Option<f64> {
        self.victim_touch
            .map(|(_, due)| self.server_part.as_secs_f64() * 1e3 - due)
    }
}

/// What every round shares.
struct Round<'a> {
    server: &'a TestingServer,
    admin: &'a Client,
    rx: &'a Receiver<(usize, String)>,
    n: usize,
    /// The next worker index (victims take a new one each round).
    next_id: usize,
    count: usize,
}

impl Round<'_> {
    fn run(&mut self, peer: &Peer, fleet: &mut Fleet, leave: Leave) -> Measured {
        self.count += 1;
        let path = format!(
            "/bench/election/{}-{}-{}",
            peer.name(),
            leave.name(),
            self.count
        );
        let connect = self.server.connect_string();
        let mut fresh = (leave == Leave::Crash).then(|| {
            // The victim's session starts at a random point of the server's tick: its pings
            // (and so its last one before the kill) would otherwise keep the phase this round's
            // set-up gives them, which the previous crash round's expiry (on a tick) fixes, and
            // a crash's total would carry that phase's rounding for one client and not the
            // other. Not a wait for anything.
            thread::sleep(Duration::from_millis(fastrand::u64(
                0..TICK.as_millis().try_into().unwrap_or(1000),
            )));
            let victim_id = self.next_id;
            self.next_id += 1;
            let mut w = Worker::start(peer.command(&connect, 1, &format!("victim{victim_id}")));
            assert_eq!(w.next_line(), "ready");
            w
        });
        let victim = fresh.as_mut().unwrap_or(&mut fleet.victim);
        victim.say(&format!("join {path}"));
        assert_eq!(victim.next_line(), "joined");
        let led = victim.next_line();
        assert!(led.starts_with("leader "), "the victim said {led:?}");
        let victim_pid = victim.child.id();
        victim.say("sid");
        let victim_sid = victim
            .next_line()
            .strip_prefix("sid ")
            .map(|ids| ids.trim().to_owned());
        let mut victim_touch = None;
        for w in &mut fleet.workers {
            w.say(&format!("join {path}"));
        }
        assert_eq!(
            self.expect_each(fleet, "joined"),
            0,
            "a participant behind the victim said it leads"
        );
        // Every participant in line, then the entry burst (N listings of up to N names) left to
        // pass: a part of the measurement's design.
        let all_in = Instant::now() + Duration::from_secs(60);
        while self.admin.children(&path).map_or(0, |c| c.len()) < self.n {
            assert!(Instant::now() < all_in, "not every participant joined");
            thread::sleep(Duration::from_millis(50));
        }
        thread::sleep(Duration::from_millis(500 + self.n as u64));
        let mut rtts: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                self.admin.exists(&path).expect("exists");
                t.elapsed()
            })
            .collect();
        let rtt = Duration::from_secs_f64(pct(&mut rtts, 0.5) / 1e6);
        // The victim's node (the lowest sequence), watched by the bench's own session: when the
        // server's deletion of it reached a client, which splits the handoff into the server's
        // part (a close's delete, or the session's expiry) and the successor's.
        let mut line = self.admin.children(&path).expect("children");
        line.sort_by_key(|name| name.rsplit('-').next().map(str::to_owned));
        let victim_node = format!("{path}/{}", line[0]);
        let (watch_tx, watch_rx) = zk_recipes::crossbeam_channel::unbounded();
        assert!(self
            .admin
            .exists_watch(&victim_node, &watch_tx)
            .expect("watch the victim")
            .is_some());
        let deleted = thread::spawn(move || {
            let event = watch_rx
                .recv_timeout(SESSION * 4 + Duration::from_secs(30))
                .expect("the victim's node never went");
            (now_ns(), event)
        });
        let (from, close) = match leave {
            Leave::Graceful => {
                let victim = &mut fleet.victim;
                victim.say("close");
                let line = victim.next_line();
                let mut parts = line.split_whitespace().skip(1);
                let mut next = || -> u64 {
                    parts
                        .next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("the victim said {line:?}"))
                };
                let (before, after) = (next(), next());
                (before, Duration::from_nanos(after.saturating_sub(before)))
            }
            Leave::Crash => {
                // The kill at a random point of the victim's pings (both clients ping at least
                // every 1.33 s of a 4 s session): otherwise the round's fixed set-up kills
                // each client at the same point of its ping cycle every round, and the last
                // touch's age, which the expiry counts from, is that point, not a fair draw.
                thread::sleep(Duration::from_millis(fastrand::u64(0..2000)));
                // When the server last answered the victim's session (its `cons` line's
                // `lresp`): the session expires a timeout after the server last heard from
                // it, rounded up to a tick. Read again just after the kill, for an answer
                // that went out between the two.
                let before = last_touch(self.server, victim_sid.as_deref());
                let t = now_ns();
                // SAFETY: a signal to a child process this bench started and has not reaped.
                let killed = unsafe { libc::kill(victim_pid as libc::pid_t, libc::SIGKILL) };
                assert_eq!(killed, 0, "SIGKILL the victim");
                let touch = before.max(last_touch(self.server, victim_sid.as_deref()));
                victim_touch = touch.map(|lresp| {
                    let kill_ms = t as f64 / 1e6;
                    // When the server had the session's expiry due: its timeout after the
                    // last touch, rounded up to the next whole tick (`ExpiryQueue::update`'s
                    // `roundToNextInterval`, on the same clock).
                    let (session, tick) = (SESSION.as_millis() as u64, TICK.as_millis() as u64);
                    let due = ((lresp + session) / tick + 1) * tick;
                    (kill_ms - lresp as f64, due as f64 - kill_ms)
                });
                (t, Duration::ZERO)
            }
        };
        let (_, line) = self
            .rx
            .recv_timeout(SESSION * 4 + Duration::from_secs(30))
            .expect("no next leader");
        let at: u64 = line
            .strip_prefix("leader ")
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("a worker said {line:?}"));
        let handoff = Duration::from_nanos(at.saturating_sub(from));
        let (deleted_at, event) = deleted.join().expect("the watch's thread");
        assert_eq!(event.kind, zk_recipes::WatchKind::Deleted, "{event:?}");
        let server_part = Duration::from_nanos(deleted_at.saturating_sub(from));
        let reaction = Duration::from_nanos(at.saturating_sub(deleted_at));
        // Any other participant that said it leads by now, before anyone leaves, is a second
        // leader (the leave below hands leadership down the line, and those may).
        let leaders = 1 + self
            .rx
            .try_iter()
            .filter(|(_, l)| l.starts_with("leader "))
            .count();
        for w in &mut fleet.workers {
            w.say("leave");
        }
        self.expect_each(fleet, "left");
        if let Some(mut victim) = fresh {
            let _ = victim.child.wait();
        }
        Measured {
            handoff,
            victim_touch,
            server_part,
            reaction,
            close,
            rtt,
            leaders,
        }
    }

    /// Waits for `word` from each of the fleet's workers; returns how many `leader` lines came
    /// meanwhile.
    fn expect_each(&self, fleet: &Fleet, word: &str) -> usize {
        let mut waiting: Vec<usize> = (fleet.first..fleet.first + fleet.workers.len()).collect();
        let mut leaders = 0;
        while !waiting.is_empty() {
            let (from, line) = self
                .rx
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no {word:?} from workers {waiting:?}"));
            if line == word {
                waiting.retain(|w| *w != from);
            } else if line.starts_with("leader ") {
                leaders += 1;
            } else {
                panic!("worker {from} said {line:?}");
            }
        }
        leaders
    }
}

/// A worker process of this binary: `connect sessions session_ms name` in
/// `ZKR_ELECTION_WORKER`; Curator's worker's protocol (`benches/CuratorElectionWorker.java`).
fn worker(spec: &str) {
    init_logs();
    let mut parts = spec.split(' ');
    let (connect, sessions, session_ms, name) =
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(c), Some(n), Some(ms), Some(name)) => (
                c.to_owned(),
                n.parse::<usize>().expect("sessions"),
                ms.parse::<u64>().expect("session ms"),
                name.to_owned(),
            ),
            _ => panic!("ZKR_ELECTION_WORKER: {spec:?}"),
        };
    let clients = connect_sessions(&connect, sessions, |connect| {
        Client::builder(connect)
            .session_timeout(Duration::from_millis(session_ms))
            .tick_time(TICK)
            .connection_timeout(Duration::from_secs(60))
    });
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = |line: &str| {
        let out = out.lock().unwrap();
        let mut out = out.lock();
        writeln!(out, "{line}").expect("stdout");
        out.flush().expect("stdout");
    };
    say("ready");
    let mut latches: Vec<Arc<LeaderLatch>> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Some(path) = line.strip_prefix("join ") {
            for (i, c) in clients.iter().enumerate() {
                let id = format!("{name}-{i}");
                let latch = Arc::new(LeaderLatch::new(c, path, &id).expect("latch"));
                // The listener runs on the latch's thread: it reaches the latch through a weak
                // reference (a strong one would keep the latch alive through its own listener).
                let me: Arc<OnceLock<Weak<LeaderLatch>>> = Arc::default();
                let (me2, out) = (me.clone(), out.clone());
                latch.add_listener(move |event| {
                    if event != LeadershipEvent::Gained {
                        return;
                    }
                    let Some(latch) = me2.get().and_then(Weak::upgrade) else {
                        return;
                    };
                    if latch.lease().is_some_and(|lease| lease.check().is_ok()) {
                        let t = now_ns();
                        let out = out.lock().unwrap();
                        let mut out = out.lock();
                        writeln!(out, "leader {t} {id}").expect("stdout");
                        out.flush().expect("stdout");
                    }
                });
                let _ = me.set(Arc::downgrade(&latch));
                latch.start().expect("start");
                latches.push(latch);
            }
            say("joined");
        } else if line == "sid" {
            let ids: Vec<String> = clients
                .iter()
                .map(|c| format!("{:#x}", c.session_id().map_or(0, |s| s.0)))
                .collect();
            say(&format!("sid {}", ids.join(" ")));
        } else if line == "close" || line == "leave" {
            let before = now_ns();
            for latch in latches.drain(..) {
                latch.close();
            }
            let after = now_ns();
            if line == "close" {
                say(&format!("closed {before} {after}"));
            } else {
                say("left");
            }
        }
    }
    for c in &clients {
        c.close();
    }
}

/// When the server last answered session `sid` (hex, `0x…`), from its `cons` line's
/// `lresp`: ZooKeeper's elapsed-time clock in milliseconds, `System.nanoTime`, which on Linux
/// is the CLOCK_MONOTONIC every process here reads (`now_ns`). The server touched the session
/// when that request arrived, within the same millisecond or so.
fn last_touch(server: &TestingServer, sid: Option<&str>) -> Option<u64> {
    let sid = sid?;
    let cons = server.four_letter("cons").ok()?;
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid},")))?;
    let lresp: u64 = line
        .split([',', ')'])
        .find_map(|f| f.strip_prefix("lresp="))?
        .parse()
        .ok()?;
    Some(lresp)
}
