//! A Jepsen-style harness: separate OS processes contend for every recipe that promises one
//! holder at a time, on a three-member ensemble, while a seeded nemesis pauses processes
//! (holders, the leader, followers), partitions a member from the others while it keeps
//! serving its clients (both ways, or only its link to the leader), cuts and refuses client
//! links, and kills the leader. Each worker records, on `CLOCK_MONOTONIC` (the clock `Instant`
//! reads, shared by every process of the machine), every interval that `Lease::run` vouched
//! for with the hold's fencing token, and every timed acquire with its deadline. The checker
//! then proves, over all records:
//!
//! - no two holds of one lock overlap, each from the moment its acquire returned to the end of
//!   the last piece of work its lease vouched for;
//! - no hold's fencing token is lower than an earlier hold's (a gate admits no stale token);
//! - every timed acquire returned by its deadline plus `EPSILON`, less the time its own
//!   process spent paused by the nemesis;
//! - every lock is held again, soon, after the last fault healed.
//!
//! `cargo test --test jepsen` runs a short seeded set (CI). Longer:
//! `cargo test --release --test jepsen -- --seconds 3600`; replay one with `--seed N`
//! (`ZKR_JEPSEN_SECS` / `ZKR_JEPSEN_SEED` do the same). The seed is printed first.
//! Its own binary without the test harness (`harness = false`): it runs its workers by
//! starting itself again with `ZKR_JEPSEN_WORKER` set.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use zk_recipes::lock::{Lease, RunError, MIN_ATTEMPT};
use zk_recipes::testing::{FaultProxy, ServerOptions, TestingCluster};
use zk_recipes::{
    Client, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, LeaderLatch, LeaderSelector,
};

/// The workers' session timeout: short, so that paused holders lose their sessions often.
const SESSION: Duration = Duration::from_secs(2);
/// The testing ensemble's tick.
const TICK: Duration = Duration::from_millis(100);
/// What a timed acquire may take past its deadline (a scheduling slice on a loaded machine).
const EPSILON: Duration = Duration::from_millis(500);
/// Every recipe that promises exclusivity, each on its own path.
const RECIPES: [&str; 7] = [
    "mutex",
    "semaphore-mutex",
    "semaphore-v2",
    "write-lock",
    "read-write",
    "leader-selector",
    "leader-latch",
];
const WORKERS_PER_RECIPE: usize = 3;
/// Default length of the fault phase (CI).
const CI_SECONDS: u64 = 60;

/// Nanoseconds on `CLOCK_MONOTONIC`, comparable across the machine's processes.
fn mono() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    if std::env::var_os("ZKR_JEPSEN_WORKER").is_some() {
        worker();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("no_two_vouched_holds_overlap: test");
        return;
    }
    // A libtest-style name filter that does not match: nothing to run here.
    let flag_values = ["--seconds", "--seed"];
    let filters: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with('-') && (*i == 0 || !flag_values.contains(&args[i - 1].as_str()))
        })
        .map(|(_, a)| a)
        .collect();
    if !filters.is_empty()
        && !filters
            .iter()
            .any(|f| "jepsen::no_two_vouched_holds_overlap".contains(f.as_str()))
    {
        return;
    }
    let value = |flag: &str, env: &str| -> Option<u64> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
            .or_else(|| std::env::var(env).ok())
            .and_then(|v| v.parse().ok())
    };
    let seconds = value("--seconds", "ZKR_JEPSEN_SECS").unwrap_or(CI_SECONDS);
    let seed = value("--seed", "ZKR_JEPSEN_SEED")
        .unwrap_or_else(|| mono() ^ u64::from(std::process::id()));
    let _ = env_logger::builder().is_test(true).try_init();
    run(seconds, seed);
}

// ---------------------------------------------------------------------------------------------
// The worker: one process, one client, one recipe.

/// Appends one line per record, unbuffered: a process killed or paused loses nothing written.
struct Records(Mutex<File>);

impl Records {
    fn line(&self, line: String) {
        let _ = self.0.lock().write_all(format!("{line}\n").as_bytes());
    }
}

fn worker() -> ! {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let _ = env_logger::try_init();
    // The coordinator ends us by closing our stdin (also when it dies).
    thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let records = Arc::new(Records(Mutex::new(
        OpenOptions::new()
            .append(true)
            .create(true)
            .open(var("ZKR_JEPSEN_OUT"))
            .expect("records file"),
    )));
    let seed: u64 = var("ZKR_JEPSEN_SEED").parse().unwrap_or(1);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (recipe, path, id) = (
        var("ZKR_JEPSEN_RECIPE"),
        var("ZKR_JEPSEN_PATH"),
        var("ZKR_JEPSEN_WORKER"),
    );
    let client = loop {
        match Client::builder(&var("ZKR_JEPSEN_CONNECT"))
            .session_timeout(SESSION)
            .tick_time(TICK)
            .connection_timeout(Duration::from_secs(30))
            .connect()
        {
            Ok(c) => break c,
            Err(e) => log::warn!("worker {id}: connect: {e}"),
        }
    };
    match recipe.as_str() {
        "mutex" => {
            let m = InterProcessMutex::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| m.try_acquire_for(d));
        }
        "semaphore-mutex" => {
            let s = InterProcessSemaphoreMutex::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| s.try_acquire_for(d));
        }
        "semaphore-v2" => {
            let s = InterProcessSemaphoreV2::new(&client, &path, 1).expect("recipe");
            contend(&records, &mut rng, |d| s.try_acquire_for(d));
        }
        "write-lock" => {
            let rw = InterProcessReadWriteLock::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| rw.write_lock().try_acquire_for(d));
        }
        "read-write" => {
            // Two writers that downgrade half their holds, and a reader: readers may share,
            // nothing may overlap a write hold.
            let rw = InterProcessReadWriteLock::new(&client, &path).expect("recipe");
            let reader = id.parse::<usize>().unwrap_or(0) % WORKERS_PER_RECIPE == 0;
            loop {
                let patience = Duration::from_millis(rng.u64(100..3000));
                let asked = mono();
                let side = if reader {
                    rw.read_lock()
                } else {
                    rw.write_lock()
                };
                let got = side.try_acquire_for(patience);
                records.line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
                let Ok(Some(guard)) = got else { continue };
                let kind = if reader { 'R' } else { 'W' };
                records.line(format!("A {} {kind}", mono()));
                for _ in 0..rng.u32(1..=20) {
                    if !vouch(&records, &guard, &mut rng, kind) {
                        break;
                    }
                }
                if !reader && rng.bool() {
                    if let Ok(read) = guard.downgrade() {
                        records.line(format!("A {} R", mono()));
                        for _ in 0..rng.u32(1..=20) {
                            if !vouch(&records, &read, &mut rng, 'R') {
                                break;
                            }
                        }
                    }
                }
            }
        }
        "leader-selector" => {
            let r = records.clone();
            let rng = Mutex::new(rng);
            let selector = LeaderSelector::new(&client, &path, &id, move |ctx| {
                r.line(format!("A {}", mono()));
                while !ctx.is_cancelled() && vouch(&r, ctx.lease(), &mut rng.lock(), 'W') {}
            })
            .expect("recipe")
            .auto_requeue();
            selector.start().expect("start");
            // Leads whenever it can until the coordinator ends the process.
            let (_keep, never) = crossbeam_channel::bounded::<()>(0);
            let _ = never.recv();
        }
        "leader-latch" => {
            // A latch has no fencing token of its own (0 for all): what it vouches for is
            // `has_leadership()` before and after each piece of work, each its own hold (a
            // latch may lead again on a new session between two pieces).
            let latch = LeaderLatch::new(&client, &path, &id).expect("recipe");
            latch.start().expect("start");
            loop {
                if !latch
                    .await_leadership(Duration::from_secs(3))
                    .unwrap_or(false)
                {
                    continue;
                }
                records.line(format!("A {}", mono()));
                let start = mono();
                thread::sleep(Duration::from_millis(rng.u64(1..50)));
                let end = mono();
                if latch.has_leadership() {
                    records.line(format!("H {start} {end} 0"));
                }
            }
        }
        other => panic!("unknown recipe {other}"),
    }
    std::process::exit(0)
}

/// Timed acquires forever; each hold vouches for 1 to 40 pieces of work (up to about two
/// seconds of holding, so that faults land inside holds), then releases.
fn contend<G: Deref<Target = Lease>>(
    records: &Records,
    rng: &mut fastrand::Rng,
    acquire: impl Fn(Duration) -> zk_recipes::Result<Option<G>>,
) {
    loop {
        let patience = Duration::from_millis(rng.u64(100..3000));
        let asked = mono();
        let got = acquire(patience);
        records.line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
        let Ok(Some(guard)) = got else { continue };
        records.line(format!("A {}", mono()));
        for _ in 0..rng.u32(1..=40) {
            if !vouch(records, &guard, rng, 'W') {
                break;
            }
        }
    }
}

/// One piece of work through `run`: recorded only if the hold was valid before and after it.
/// `kind`: `W` for a hold that excludes every other, `R` for a read hold.
fn vouch(records: &Records, lease: &Lease, rng: &mut fastrand::Rng, kind: char) -> bool {
    let Ok(token) = lease.fencing_token() else {
        return false;
    };
    let work = Duration::from_millis(rng.u64(1..50));
    match lease.run(|| {
        let start = mono();
        // The work itself (a stand-in for a real job's), not a synchronisation.
        thread::sleep(work);
        (start, mono())
    }) {
        Ok((start, end)) => {
            records.line(format!("H {start} {end} {token} {kind}"));
            true
        }
        // The checker's adversary: a holder that trusts its guard blindly.
        Err(RunError::Expired {
            output: (start, end),
            ..
        }) if std::env::var_os("ZKR_JEPSEN_LIAR").is_some() => {
            records.line(format!("H {start} {end} {token} {kind}"));
            false
        }
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------------------------
// The coordinator: the ensemble, the workers, the nemesis, the checker.

struct Worker {
    recipe: &'static str,
    child: Child,
    proxies: Vec<FaultProxy>,
    records: PathBuf,
}

/// Every worker process; dropping this resumes and kills them all, also on panic.
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            if matches!(w.child.try_wait(), Ok(Some(_))) {
                continue;
            }
            signal(w.child.id(), "-CONT");
            drop(w.child.stdin.take());
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

#[derive(Default, Debug)]
struct Faults {
    holder_pauses: u32,
    long_holder_pauses: u32,
    leader_pauses: u32,
    follower_pauses: u32,
    isolations: u32,
    one_way_cuts: u32,
    client_cuts: u32,
    refusals: u32,
    leader_kills: u32,
}

fn run(seconds: u64, seed: u64) {
    println!("jepsen: seed {seed}, {seconds} s of faults (replay with --seed {seed})");
    let dir = tempfile::Builder::new()
        .prefix("zkr-jepsen-")
        .tempdir()
        .expect("temp dir");
    // syncLimit 40 ticks (4 s): a follower keeps serving its clients through a leader's pause
    // of up to 4 s, longer than the sessions (2 s), so a paused leader resumes with sessions
    // to expire and requests waiting in its sockets.
    let options = ServerOptions {
        sync_limit: 40,
        ..ServerOptions::default()
    };
    let cluster = TestingCluster::partitionable(3, options).expect("ensemble");
    cluster
        .wait_for_leader(Duration::from_secs(30))
        .expect("a leader");

    // First the checker's own adversary: workers that record their work even when `run`
    // says the hold expired meanwhile (what a holder that trusts its guard blindly does),
    // with their holders paused past the session. The checker must see them overlap.
    {
        let mut liars = spawn(&cluster, dir.path(), &["mutex"], "liar", seed, true);
        let mut rng = fastrand::Rng::with_seed(seed);
        let started = mono();
        wait_until(Duration::from_secs(60), || held_since(&liars, started))
            .expect("the liars hold before the faults");
        let mut faults = Faults::default();
        let mut pauses = Vec::new();
        for _ in 0..4 {
            nemesis(&cluster, &liars, &mut rng, 1, &mut faults, &mut pauses);
        }
        workers_end(&mut liars);
        let report = check(&liars.0, &pauses);
        println!(
            "jepsen self-check: {} overlaps among {} holds recorded by holders that ignore \
             their lease, over {} pauses past the session",
            report.overlaps.len(),
            report.holds,
            faults.long_holder_pauses
        );
        assert!(
            !report.overlaps.is_empty(),
            "the checker saw no overlap among holders that ignore their lease; seed {seed}"
        );
    }

    let mut workers = spawn(&cluster, dir.path(), &RECIPES, "jepsen", seed, false);
    let started = mono();
    wait_until(Duration::from_secs(60), || held_since(&workers, started))
        .expect("every recipe held once before the faults");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut faults = Faults::default();
    let mut pauses: Vec<(usize, u64, u64)> = Vec::new();
    let chaos_for = Duration::from_secs(seconds);
    let chaos_started = Instant::now();
    let mut step = 0u32;
    while chaos_started.elapsed() < chaos_for {
        // Quiet between faults: the adversary's rhythm, not a synchronisation.
        thread::sleep(Duration::from_millis(rng.u64(200..800)));
        // The first nine faults are one of each kind, then at random.
        let kind = if step < 9 { step } else { rng.u32(0..9) };
        step += 1;
        nemesis(&cluster, &workers, &mut rng, kind, &mut faults, &mut pauses);
    }
    let healed = mono();
    // Progress: after the last fault, every lock is held again.
    let settle = Duration::from_secs(30);
    let progressed = wait_until(settle, || held_since(&workers, healed)).is_some();
    let ended = mono();
    workers_end(&mut workers);
    let report = check(&workers.0, &pauses);
    drop(workers);
    println!(
        "jepsen (seed {seed}): {} holds ({} of them read holds; {} vouched pieces of work) \
         checked over {:.0} s, {} timed acquires, faults {faults:?}, overlaps {}, stale tokens {}, deadlines missed {} \
         (worst overrun {:?}), held again after the last fault: {progressed}",
        report.holds,
        report.read_holds,
        report.pieces,
        (ended - started) as f64 / 1e9,
        report.timed,
        report.overlaps.len(),
        report.stale.len(),
        report.late.len(),
        report.worst_overrun,
    );
    for line in report
        .overlaps
        .iter()
        .chain(&report.stale)
        .chain(&report.late)
        .take(20)
    {
        println!("  {line}");
    }
    let replay = format!("replay with --seed {seed}");
    assert!(
        report.overlaps.is_empty(),
        "two vouched holds overlapped; {replay}"
    );
    assert!(
        report.stale.is_empty(),
        "a fencing token went back; {replay}"
    );
    assert!(
        report.late.is_empty(),
        "a timed acquire missed its deadline; {replay}"
    );
    assert!(
        progressed,
        "a lock was not held again within {settle:?} of the last fault; {replay}"
    );
    assert!(report.holds > 0 && report.timed > 0);
}

/// Starts `WORKERS_PER_RECIPE` worker processes per recipe, each behind its own fault proxy
/// to every member, on paths under `/<tag>`.
fn spawn(
    cluster: &TestingCluster,
    dir: &Path,
    recipes: &[&'static str],
    tag: &str,
    seed: u64,
    liar: bool,
) -> Workers {
    let exe = std::env::current_exe().expect("own path");
    let mut workers = Workers(Vec::new());
    for (r, recipe) in recipes.iter().enumerate() {
        for k in 0..WORKERS_PER_RECIPE {
            let index = r * WORKERS_PER_RECIPE + k;
            let proxies: Vec<FaultProxy> = (0..3)
                .map(|m| FaultProxy::start(cluster.addr(m)).expect("proxy"))
                .collect();
            let connect = proxies
                .iter()
                .map(FaultProxy::connect_string)
                .collect::<Vec<_>>()
                .join(",");
            let records = dir.join(format!("{tag}-{index}.records"));
            let log = File::create(dir.join(format!("{tag}-{index}.log"))).expect("log");
            let mut command = Command::new(&exe);
            command
                .env("ZKR_JEPSEN_WORKER", index.to_string())
                .env("ZKR_JEPSEN_RECIPE", recipe)
                .env("ZKR_JEPSEN_PATH", format!("/{tag}/{recipe}"))
                .env("ZKR_JEPSEN_CONNECT", connect)
                .env("ZKR_JEPSEN_OUT", &records)
                .env(
                    "ZKR_JEPSEN_SEED",
                    (seed ^ ((index as u64 + 1) << 40)).to_string(),
                )
                .env("RUST_LOG", "zk_recipes=info")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(log);
            if liar {
                command.env("ZKR_JEPSEN_LIAR", "1");
            }
            workers.0.push(Worker {
                recipe,
                child: command.spawn().expect("worker"),
                proxies,
                records,
            });
        }
    }
    workers
}

/// True once every recipe of `workers` has a vouched interval that began after `since`.
fn held_since(workers: &Workers, since: u64) -> bool {
    let mut recipes: Vec<&str> = workers.0.iter().map(|w| w.recipe).collect();
    recipes.dedup();
    recipes.iter().all(|recipe| {
        workers
            .0
            .iter()
            .filter(|w| w.recipe == *recipe)
            .any(|w| read(&w.records).holds.iter().any(|h| h.start > since))
    })
}

/// One fault of `kind`, applied and healed.
fn nemesis(
    cluster: &TestingCluster,
    workers: &Workers,
    rng: &mut fastrand::Rng,
    kind: u32,
    faults: &mut Faults,
    pauses: &mut Vec<(usize, u64, u64)>,
) {
    let ms = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_millis(rng.u64(lo..hi));
    let workers = &workers.0;
    match kind {
        // A holder's process pauses (a GC pause), shorter or longer than its session.
        0 | 1 => {
            let long = kind == 1;
            let w = if long || rng.bool() {
                likely_holder(workers)
            } else {
                rng.usize(0..workers.len())
            };
            let d = if long {
                SESSION + ms(rng, 200, 1500)
            } else {
                ms(rng, 100, 800)
            };
            let pid = workers[w].child.id();
            let from = mono();
            signal(pid, "-STOP");
            thread::sleep(d);
            signal(pid, "-CONT");
            pauses.push((w, from, mono()));
            if long {
                faults.long_holder_pauses += 1;
            } else {
                faults.holder_pauses += 1;
            }
        }
        // The leader, or a follower, pauses: shorter or longer than a session, up to about
        // syncLimit (past it, the others elect another).
        2 | 3 => {
            let leader = cluster.leader();
            let member = match (kind, leader) {
                (2, Some(l)) => l,
                (_, l) => (0..3)
                    .filter(|&i| Some(i) != l)
                    .nth(rng.usize(0..2))
                    .unwrap_or(0),
            };
            cluster.pause(member);
            thread::sleep(ms(rng, 200, 4500));
            cluster.resume(member);
            if kind == 2 {
                faults.leader_pauses += 1;
            } else {
                faults.follower_pauses += 1;
            }
        }
        // A member cut off from the others while it keeps serving its clients.
        4 => {
            let member = rng.usize(0..3);
            cluster.isolate(member);
            thread::sleep(ms(rng, 500, 4000));
            cluster.rejoin(member);
            faults.isolations += 1;
        }
        // A follower's link to its leader held one way: the leader still reaches it.
        5 => {
            if let Some(l) = cluster.leader() {
                let f = (0..3).filter(|&i| i != l).nth(rng.usize(0..2)).unwrap_or(0);
                cluster.hold_sends(f, l);
                thread::sleep(ms(rng, 500, 3000));
                cluster.rejoin(f);
                faults.one_way_cuts += 1;
            }
        }
        // A worker's connections cut, or refused for a while.
        6 => {
            let w = rng.usize(0..workers.len());
            workers[w].proxies.iter().for_each(FaultProxy::cut);
            faults.client_cuts += 1;
        }
        7 => {
            let w = rng.usize(0..workers.len());
            workers[w].proxies.iter().for_each(FaultProxy::refuse);
            thread::sleep(ms(rng, 300, 3000));
            workers[w].proxies.iter().for_each(FaultProxy::heal);
            faults.refusals += 1;
        }
        // The leader dies and comes back.
        _ => {
            if let Some(l) = cluster.leader() {
                cluster.kill(l);
                thread::sleep(ms(rng, 300, 2000));
                cluster.restart(l).expect("restart");
                faults.leader_kills += 1;
            }
        }
    }
}

/// Stops every worker (their records are complete: each line was written at once).
fn workers_end(workers: &mut Workers) {
    for w in &mut workers.0 {
        signal(w.child.id(), "-CONT");
        drop(w.child.stdin.take());
        let _ = w.child.wait();
    }
}

/// The worker whose latest vouched interval is the latest: probably the holder of its lock.
fn likely_holder(workers: &[Worker]) -> usize {
    (0..workers.len())
        .max_by_key(|&i| read(&workers[i].records).holds.last().map_or(0, |h| h.end))
        .unwrap_or(0)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<()> {
    let until = Instant::now() + timeout;
    while !f() {
        if Instant::now() >= until {
            return None;
        }
        // Polling the records files, which carry no event to wait on.
        thread::sleep(Duration::from_millis(50));
    }
    Some(())
}

/// One hold: from the moment its acquire returned (`A`) to the end of the last piece of work
/// its lease vouched for (`H`). A lease check that passes at `t` vouches for the whole hold up
/// to `t`: the leader cannot have expired the session before, so the node stood all along.
#[derive(Clone, Copy)]
struct Hold {
    start: u64,
    end: u64,
    token: i64,
    /// Excludes every other hold (all but read holds).
    exclusive: bool,
}

#[derive(Default)]
struct Recorded {
    /// Holds with at least one vouched piece of work.
    holds: Vec<Hold>,
    /// Vouched pieces of work.
    pieces: usize,
    /// `(asked, returned, patience)` of each timed acquire.
    timed: Vec<(u64, u64, u64)>,
}

fn read(path: &Path) -> Recorded {
    let mut out = Recorded::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The current hold: when its acquire returned, and whether a piece of it is recorded.
    let mut acquired: Option<u64> = None;
    let mut open = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["A", a, ..] => {
                acquired = a.parse().ok();
                open = false;
            }
            ["H", s, e, t, rest @ ..] => {
                let exclusive = rest.first() != Some(&"R");
                if let (Ok(start), Ok(end), Ok(token)) = (s.parse::<u64>(), e.parse(), t.parse()) {
                    out.pieces += 1;
                    match out.holds.last_mut() {
                        Some(h) if open => h.end = end,
                        _ => {
                            out.holds.push(Hold {
                                start: acquired.unwrap_or(start).min(start),
                                end,
                                token,
                                exclusive,
                            });
                            open = true;
                        }
                    }
                }
            }
            ["T", a, r, p] => {
                if let (Ok(a), Ok(r), Ok(p)) = (a.parse(), r.parse(), p.parse()) {
                    out.timed.push((a, r, p));
                }
            }
            // A line cut short by the end of the process.
            _ => {}
        }
    }
    out
}

#[derive(Default)]
struct Report {
    holds: usize,
    /// Of which read holds (a read/write lock's readers and downgrades).
    read_holds: usize,
    pieces: usize,
    timed: usize,
    overlaps: Vec<String>,
    stale: Vec<String>,
    late: Vec<String>,
    worst_overrun: Duration,
}

fn check(workers: &[Worker], pauses: &[(usize, u64, u64)]) -> Report {
    let mut report = Report::default();
    let mut by_recipe: HashMap<&str, Vec<(usize, Hold)>> = HashMap::new();
    for (i, w) in workers.iter().enumerate() {
        let rec = read(&w.records);
        report.holds += rec.holds.len();
        report.read_holds += rec.holds.iter().filter(|h| !h.exclusive).count();
        report.pieces += rec.pieces;
        report.timed += rec.timed.len();
        by_recipe
            .entry(w.recipe)
            .or_default()
            .extend(rec.holds.into_iter().map(|h| (i, h)));
        let mut own_pauses: Vec<(u64, u64)> = pauses
            .iter()
            .filter(|p| p.0 == i)
            .map(|&(_, from, to)| (from, to))
            .collect();
        own_pauses.sort_unstable();
        for (asked, returned, patience) in rec.timed {
            // A timed acquire returns by max(deadline, start + MIN_ATTEMPT); a process stopped
            // then (or within EPSILON after, before it wrote down the time) returns once it
            // runs again. Pauses that ended before do not move an absolute deadline.
            let min_attempt = MIN_ATTEMPT.as_nanos() as u64;
            let epsilon = EPSILON.as_nanos() as u64;
            let mut due = asked + patience.max(min_attempt);
            for &(from, to) in &own_pauses {
                if from <= due + epsilon && to > due {
                    due = to;
                }
            }
            let over = Duration::from_nanos(returned.saturating_sub(due));
            report.worst_overrun = report.worst_overrun.max(over);
            if over > EPSILON {
                report.late.push(format!(
                    "{}: worker {i} asked for {:?}, returned after {:?}, {over:?} past its due",
                    w.recipe,
                    Duration::from_nanos(patience),
                    Duration::from_nanos(returned - asked),
                ));
            }
        }
    }
    for (recipe, mut holds) in by_recipe {
        holds.sort_by_key(|(_, h)| h.start);
        // Holds still open at the current one's start; read holds may share, nothing else.
        let mut active: Vec<(usize, Hold)> = Vec::new();
        let mut top_token = i64::MIN;
        for &(i, h) in &holds {
            active.retain(|(_, a)| a.end > h.start);
            for &(j, a) in &active {
                if a.exclusive || h.exclusive {
                    report.overlaps.push(format!(
                        "{recipe}: worker {j} vouched [{}, {}] (token {}{}), worker {i} held \
                         from {} (token {}{}): {:?} together",
                        a.start,
                        a.end,
                        a.token,
                        if a.exclusive { "" } else { ", read" },
                        h.start,
                        h.token,
                        if h.exclusive { "" } else { ", read" },
                        Duration::from_nanos(a.end.min(h.end) - h.start)
                    ));
                }
            }
            active.push((i, h));
            // Fencing tokens order the exclusive holds (a gate is for writers).
            if h.exclusive {
                if h.token < top_token {
                    report.stale.push(format!(
                        "{recipe}: worker {i} held with token {} after token {top_token}",
                        h.token
                    ));
                }
                top_token = top_token.max(h.token);
            }
        }
    }
    report
}
