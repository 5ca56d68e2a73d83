//! Coordination for batch clusters (issue 37): our work partitioning, double barrier and
//! multi-lock beside the peers a user would pick instead, and beside the wire floor where one
//! can be written simply.
//!
//! 1. Work partitioning: 64 items, 4 workers, then a 5th joins, then the first one leaves
//!    (graceful close): the time from the join or leave call until the items are settled.
//!    Ours (`partition::Partitioner`) beside kazoo 2.8's `SetPartitioner`
//!    (`benches/kazoo_partitioner.py`, one long-lived Debian `/usr/bin/python3` process).
//!    Settled, for ours: every worker owns (`owned()`) exactly the items the members assign
//!    it and none waits for one (`is_settled()`); for kazoo: every partitioner `acquired`, each
//!    with exactly the set kazoo's partition function gives it. Each worker is its own
//!    session. kazoo waits `time_boundary` seconds of a quiet party before it allocates (30 by
//!    default: a debounce, not protocol); it runs with [`KAZOO_BOUNDARY`] here, so that its
//!    figure is its protocol's. No wire floor: a floor for this would be a partitioner.
//! 2. Double barrier, a round = N members (each its own session and thread) enter, then leave;
//!    from the first member's start to the last member's leave returning, at N = 8 and 32. Ours
//!    (`barriers::DistributedDoubleBarrier`) beside Curator 5.4's (`benches/CuratorBatchBench.java`,
//!    one long-lived JVM) and the wire floor (`common/wire/batch.rs`: the same node layout and
//!    protocol with nothing spare). Every round on a path of its own, made beforehand for all.
//!    Curator 5.4's enter can wait past its timeout (in `internalEnter`, once its watcher has
//!    fired before it counts, it calls `Object.wait()` untimed; seen at N = 32 on 2 cores): a
//!    Curator round not over within twice [`ROUND_LIMIT`] ends its block, is reported, and its
//!    figures are over the rounds done.
//! 3. Multi-lock over 4 mutexes: uncontended acquire and release latency, and 8 contenders
//!    (each its own session) on the same 4 paths. Ours (`lock::InterProcessMultiLock` of
//!    `LockSpec::Mutex`) beside Curator's `InterProcessMultiLock` of 4 `InterProcessMutex`es,
//!    and the wire floor: the mutex floor's acquire on each path in turn (and, for the
//!    uncontended acquire, the wire's one-write bound).
//!
//! Fair means, as in `peers`: the server is warmed until its JIT is quiet; Curator is warmed
//! until its own JIT has been quiet for a second; ours, kazoo and the floor get untimed
//! warm-up turns; then every client runs on the same server in the same run, in alternated
//! turns whose order rotates from block to block. Figures are given as ratios.
//!
//! `cargo bench -p zk-recipes-benches --bench batch [-- --quick]`. Skips Curator or kazoo,
//! saying why, if one is missing.

mod common;

use std::process::Command;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::driver::Driver;
use common::figures::*;
use common::wire::batch as wire;
use common::*;
use zk_recipes::barriers::DistributedDoubleBarrier;
use zk_recipes::lock::{InterProcessMultiLock, LockSpec};
use zk_recipes::partition::{owner_of, Partitioner};
use zk_recipes::{Client, CreateMode, Op};

/// Debian's Python, which has `python3-kazoo` (a `python3` on the PATH may be another one).
const PYTHON: &str = "/usr/bin/python3";
const ITEMS: usize = 64;
const WORKERS: usize = 4;
/// kazoo's `time_boundary` (seconds of a quiet party before it allocates): none, so that
/// kazoo's figure is its protocol's and not its debounce's.
const KAZOO_BOUNDARY: f64 = 0.0;
/// The longest a partitioning may take to settle before the bench calls it broken.
const LIMIT: Duration = Duration::from_secs(60);
/// The longest one barrier enter or leave may take (a round takes tens of milliseconds). Ours
/// past it fails the bench; Curator's past it (or past twice it for the round: its enter can
/// wait without applying its timeout) ends its block, which is counted as failed.
const ROUND_LIMIT: Duration = Duration::from_secs(10);
const ROOT: &str = "/bench/batch";

fn main() {
    let args = args();
    let quick = args.quick;
    let server = server(&args);
    let connect = server.connect_string();
    let sizes = [8usize, 32];
    let most = 32;
    let ours = clients(&connect, most);
    ours[0].ensure_path(ROOT).expect("path");
    let mut curator = start_peer(
        "Curator",
        Driver::curator("CuratorBatchBench", &connect, most),
    );
    let mut kazoo = start_peer("kazoo", kazoo_driver(&connect, WORKERS + 1));

    // 1. The server, warmed until its JIT is quiet.
    let warm = warm_server(&server, &ours[..8], quick);
    println!("server warmed: {warm}");
    // 2. Curator, warmed until its own JIT is quiet.
    if let Some(c) = curator.as_mut() {
        c.warm_jit("batch", &format!("{ROOT}/curator-warm"), quick);
    }
    // 3. Ours, the floor and kazoo: the same loops, untimed.
    for i in 0..if quick { 1 } else { 3 } {
        let dir = format!("{ROOT}/warm-{i}");
        for n in sizes {
            let r = if n <= 8 { 10 } else { 3 };
            let _ = barrier_ours(
                &ours[..n],
                &round_paths(&ours[0], &format!("{dir}-o{n}"), r),
                r,
            );
            let _ = wire::double_barrier(
                &connect,
                &round_paths(&ours[0], &format!("{dir}-f{n}"), r),
                n,
                r,
            );
        }
        let paths = lock_paths(&ours[0], &format!("{dir}-m"));
        let _ = multi_ours(&ours[0], &paths, 100);
        let _ = wire::multi_uncontended(&connect, &paths, 100);
        let _ = multi_contend_ours(&ours[..8], &paths, Duration::from_millis(200));
        let _ = wire::multi_contended(&connect, &paths, 8, Duration::from_millis(200));
        let _ = partition_ours(&ours[..=WORKERS], &format!("{dir}-part-ours"));
        if let Some(k) = kazoo.as_mut() {
            let _ = k.numbers(&kazoo_rep(&format!("{dir}-part-kazoo")));
        }
    }

    let mut table: Vec<Row> = Vec::new();
    partitioning(&ours, kazoo.as_mut(), quick, &mut table);
    for n in sizes {
        double_barrier(&connect, &ours[..n], curator.as_mut(), quick, &mut table);
    }
    multi_lock(&connect, &ours, curator.as_mut(), quick, &mut table);

    if let Some(mut c) = curator {
        c.quit();
    }
    if let Some(mut k) = kazoo {
        k.quit();
    }
    report(&table);
}

/// A peer's driver, or `None` with the reason printed.
fn start_peer(name: &str, driver: Result<Driver, String>) -> Option<Driver> {
    match driver {
        Ok(d) => Some(d),
        Err(why) => {
            json("batch", &[(leak(format!("{name}_skipped")), s(&why))]);
            println!("{name} skipped: {why}");
            None
        }
    }
}

/// One line of the summary: what, which peer, ours, the peer's and the floor's (if any).
struct Row {
    name: String,
    peer: &'static str,
    ours: f64,
    theirs: f64,
    floor: Option<f64>,
}

fn row(
    name: impl Into<String>,
    peer: &'static str,
    ours: f64,
    theirs: f64,
    floor: Option<f64>,
) -> Row {
    Row {
        name: name.into(),
        peer,
        ours,
        theirs,
        floor,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// The p50 and the largest of `v`, in milliseconds (0 for none).
fn p50_max_ms(v: &mut [Duration]) -> (f64, f64) {
    (pct(v, 0.5) / 1000.0, pct(v, 1.0) / 1000.0)
}

// ---------------------------------------------------------------------------------------
// 1. Work partitioning.

fn kazoo_rep(path: &str) -> String {
    format!("rep {path} {ITEMS} {WORKERS} {KAZOO_BOUNDARY}")
}

fn partitioning(
    ours: &[Client],
    mut kazoo: Option<&mut Driver>,
    quick: bool,
    table: &mut Vec<Row>,
) {
    let reps = if quick { 3 } else { 10 };
    let (mut oj, mut ol, mut kj, mut kl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        // Ours first in even repetitions, kazoo first in odd ones.
        for turn in 0..2 {
            if (rep + turn) % 2 == 0 {
                let (j, l) = partition_ours(&ours[..=WORKERS], &format!("{ROOT}/part-ours-{rep}"));
                oj.push(j);
                ol.push(l);
            } else if let Some(k) = kazoo.as_deref_mut() {
                let v = k.numbers(&kazoo_rep(&format!("{ROOT}/part-kazoo-{rep}")));
                kj.push(Duration::from_secs_f64(v[0] / 1000.0));
                kl.push(Duration::from_secs_f64(v[1] / 1000.0));
            }
        }
    }
    for (what, o, k) in [("join", &mut oj, &mut kj), ("leave", &mut ol, &mut kl)] {
        let ((o50, omax), (k50, kmax)) = (p50_max_ms(o), p50_max_ms(k));
        json(
            "batch",
            &[
                (
                    "config",
                    s(&format!(
                        "partition {what} {ITEMS} items {WORKERS}+1 workers"
                    )),
                ),
                ("repetitions", f(reps as f64)),
                ("ours_p50_ms", f(o50)),
                ("ours_max_ms", f(omax)),
                ("kazoo_p50_ms", f(k50)),
                ("kazoo_max_ms", f(kmax)),
                ("kazoo_time_boundary_s", f(KAZOO_BOUNDARY)),
                ("ours_over_kazoo_p50", f(ratio(o50, k50))),
            ],
        );
        table.push(row(
            format!("partition {what} p50 ms"),
            "kazoo",
            o50,
            k50,
            None,
        ));
        table.push(row(
            format!("partition {what} max ms"),
            "kazoo",
            omax,
            kmax,
            None,
        ));
    }
}

/// One repetition with our partitioner at `path`: `WORKERS` workers (clients 0..), settled
/// (not timed); the next client's worker joins (timed until settled); the first leaves with
/// `close()` (timed until settled). Then every worker closes.
fn partition_ours(clients: &[Client], path: &str) -> (Duration, Duration) {
    let items: Vec<String> = (0..ITEMS).map(|i| format!("item-{i:02}")).collect();
    let join = |i: usize| {
        let id = format!("w{i}");
        let p =
            Partitioner::new(&clients[i], path, &id, items.iter().cloned()).expect("a partitioner");
        p.start().expect("start a partitioner");
        (id, p)
    };
    let mut live: Vec<(String, Partitioner)> = (0..WORKERS).map(join).collect();
    settle(&live, &items);
    let started = Instant::now();
    live.push(join(WORKERS));
    let joined = settle(&live, &items) - started;
    let started = Instant::now();
    let (_, leaver) = live.remove(0);
    leaver.close();
    let left = settle(&live, &items) - started;
    for (_, p) in &live {
        p.close();
    }
    (joined, left)
}

/// The instant `live` was seen settled: every worker owns exactly the items the current
/// members assign it (so every item is owned by exactly one), and none waits for one.
///
/// A poll, every millisecond: this is how the bench sees "settled" across several workers at
/// once (no recipe waits on it); it adds at most a millisecond to our figures. (kazoo's side
/// wakes on its partitioners' state changes, with a 5 ms poll behind.)
fn settle(live: &[(String, Partitioner)], items: &[String]) -> Instant {
    let ids: Vec<String> = live.iter().map(|(id, _)| id.clone()).collect();
    let expected: Vec<Vec<&str>> = ids
        .iter()
        .map(|id| {
            items
                .iter()
                .filter(|i| owner_of(i, &ids) == Some(id.as_str()))
                .map(String::as_str)
                .collect()
        })
        .collect();
    let give_up = Instant::now() + LIMIT;
    loop {
        let settled = live.iter().zip(&expected).all(|((_, p), want)| {
            if !p.is_settled() {
                return false;
            }
            let mut owned: Vec<String> = p.owned().iter().map(|o| o.item().to_owned()).collect();
            owned.sort();
            owned == *want
        });
        if settled {
            return Instant::now();
        }
        assert!(
            Instant::now() < give_up,
            "our partitioners did not settle in {LIMIT:?}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------------------------------
// 2. Double barrier.

/// `dir` and `dir/r0`.. for `rounds` rounds, made beforehand (persistent: none is used
/// twice); returns `dir`.
fn round_paths(client: &Client, dir: &str, rounds: usize) -> String {
    client.ensure_path(dir).expect("path");
    let ops: Vec<Op> = (0..rounds)
        .map(|r| Op::Create {
            path: format!("{dir}/r{r}"),
            data: Vec::new(),
            mode: CreateMode::Persistent,
        })
        .collect();
    for batch in ops.chunks(500) {
        client.multi(batch).expect("round paths");
    }
    dir.to_owned()
}

/// Round durations and the client CPU per round.
#[derive(Default)]
struct Rounds {
    took: Vec<Duration>,
    cpu_us: f64,
}

impl Rounds {
    fn add(&mut self, took: Vec<Duration>, cpu_us_per_round: f64) {
        let (had, more) = (self.took.len() as f64, took.len() as f64);
        self.cpu_us = (self.cpu_us * had + cpu_us_per_round * more) / (had + more).max(1.0);
        self.took.extend(took);
    }

    fn p50_p99(&mut self) -> (f64, f64) {
        (pct(&mut self.took, 0.5), pct(&mut self.took, 0.99))
    }
}

fn double_barrier(
    connect: &str,
    clients: &[Client],
    mut curator: Option<&mut Driver>,
    quick: bool,
    table: &mut Vec<Row>,
) {
    let n = clients.len();
    let rounds = if quick {
        10
    } else if n <= 8 {
        100
    } else {
        40
    };
    let blocks = if quick { 2 } else { 6 };
    let (mut o, mut c, mut fl) = (Rounds::default(), Rounds::default(), Rounds::default());
    let mut curator_failed = 0;
    for block in 0..blocks {
        let dir = format!("{ROOT}/double-{n}-{block}");
        for turn in 0..3 {
            match (block + turn) % 3 {
                0 => {
                    let at = round_paths(&clients[0], &format!("{dir}-ours"), rounds);
                    let cpu = process_cpu();
                    let took = barrier_ours(clients, &at, rounds);
                    o.add(took, per(process_cpu() - cpu, rounds));
                }
                1 => {
                    if let Some(cur) = curator.as_deref_mut() {
                        let at = round_paths(&clients[0], &format!("{dir}-cur"), rounds);
                        let v = cur.numbers(&format!(
                            "barrier {at} {n} {rounds} {}",
                            ROUND_LIMIT.as_millis()
                        ));
                        let took = v[5..].iter().map(|us| Duration::from_secs_f64(us / 1e6));
                        c.add(took.collect(), v[3] / 1000.0);
                        if v[4] > 0.0 {
                            curator_failed += 1;
                        }
                    }
                }
                _ => {
                    let at = round_paths(&clients[0], &format!("{dir}-floor"), rounds);
                    let cpu = process_cpu();
                    let took = wire::double_barrier(connect, &at, n, rounds);
                    fl.add(took, per(process_cpu() - cpu, rounds));
                }
            }
        }
    }
    let ((o50, o99), (c50, c99), (f50, f99)) = (o.p50_p99(), c.p50_p99(), fl.p50_p99());
    json(
        "batch",
        &[
            ("config", s(&format!("double barrier N={n}"))),
            ("rounds", f(o.took.len() as f64)),
            ("ours_p50_us", f(o50)),
            ("ours_p99_us", f(o99)),
            ("ours_cpu_us_per_round", f(o.cpu_us)),
            ("curator_p50_us", f(c50)),
            ("curator_p99_us", f(c99)),
            ("curator_cpu_us_per_round", f(c.cpu_us)),
            ("curator_rounds", f(c.took.len() as f64)),
            ("curator_failed_blocks", f(curator_failed as f64)),
            ("floor_p50_us", f(f50)),
            ("floor_p99_us", f(f99)),
            ("floor_cpu_us_per_round", f(fl.cpu_us)),
            ("ours_over_curator_p50", f(ratio(o50, c50))),
            ("ours_over_floor_p50", f(ratio(o50, f50))),
        ],
    );
    table.push(row(
        format!("double barrier N={n} p50 µs"),
        "Curator",
        o50,
        c50,
        Some(f50),
    ));
    table.push(row(
        format!("double barrier N={n} p99 µs"),
        "Curator",
        o99,
        c99,
        Some(f99),
    ));
    if curator_failed > 0 {
        println!(
            "double barrier N={n}: Curator's round hung or failed in {curator_failed} of {blocks} \
             blocks (each such block ended there; its figures are over the {} rounds done)",
            c.took.len()
        );
    }
}

fn per(cpu: Duration, rounds: usize) -> f64 {
    cpu.as_secs_f64() * 1e6 / rounds.max(1) as f64
}

/// `rounds` rounds of our double barrier, one member per client (a thread each); round `r` at
/// `dir/r<r>`. Each member's barrier is made before the round starts.
fn barrier_ours(clients: &[Client], dir: &str, rounds: usize) -> Vec<Duration> {
    let n = clients.len();
    let go = Arc::new(Barrier::new(n + 1));
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Instant)>();
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let (c, go, tx, dir) = (c.clone(), go.clone(), tx.clone(), dir.to_owned());
            thread::spawn(move || {
                for r in 0..rounds {
                    let b = DistributedDoubleBarrier::new(&c, &format!("{dir}/r{r}"), n)
                        .expect("a barrier");
                    go.wait();
                    let start = Instant::now();
                    assert!(b.enter(ROUND_LIMIT).expect("enter"), "enter timed out");
                    assert!(b.leave(ROUND_LIMIT).expect("leave"), "leave timed out");
                    if tx.send((start, Instant::now())).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let took = common::rounds(&go, &rx, n, rounds);
    for t in threads {
        t.join().expect("a barrier member");
    }
    took
}

// ---------------------------------------------------------------------------------------
// 3. Multi-lock.

/// `dir/l0`..`dir/l3`, made beforehand (persistent, so the floor finds them).
fn lock_paths(client: &Client, dir: &str) -> Vec<String> {
    (0..4)
        .map(|i| {
            let p = format!("{dir}/l{i}");
            client.ensure_path(&p).expect("path");
            p
        })
        .collect()
}

fn multi_lock(
    connect: &str,
    ours: &[Client],
    mut curator: Option<&mut Driver>,
    quick: bool,
    table: &mut Vec<Row>,
) {
    // Uncontended: four takes in alternated blocks.
    let rounds = if quick { 100 } else { 1000 };
    let blocks = if quick { 2 } else { 3 };
    let (mut o, mut c, mut fl, mut one) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let at = |who: &str| lock_paths(&ours[0], &format!("{ROOT}/multi-{who}"));
    let (ours_paths, floor_paths) = (at("ours"), at("floor"));
    // Curator's, at the same depth (it takes `l0`..`l3` under the path it is given).
    at("cur");
    for block in 0..blocks {
        for turn in 0..4 {
            match (block + turn) % 4 {
                0 => o.push(multi_ours(&ours[0], &ours_paths, rounds)),
                1 => c.extend(curator.as_deref_mut().map(|cur| {
                    let v = cur.numbers(&format!("multi {ROOT}/multi-cur {rounds}"));
                    Figures {
                        acquisitions: v[0],
                        p50_us: v[1],
                        p99_us: v[2],
                        release_p50_us: v[3],
                        release_p99_us: v[4],
                        cpu_us_per_acq: v[5] / 1000.0,
                        ..Default::default()
                    }
                })),
                2 => fl.push(wire::multi_uncontended(connect, &floor_paths, rounds)),
                _ => one.push(wire::multi_one_write(connect, &floor_paths, rounds)),
            }
        }
    }
    let (o, c, fl, one) = (median(&o), median(&c), median(&fl), median(&one));
    json(
        "batch",
        &[
            ("config", s("multi-lock 4 mutexes uncontended")),
            ("rounds", f((rounds * blocks) as f64)),
            ("ours_acquire_p50_us", f(o.p50_us)),
            ("ours_acquire_p99_us", f(o.p99_us)),
            ("ours_release_p50_us", f(o.release_p50_us)),
            ("ours_cpu_us_per_round", f(o.cpu_us_per_acq)),
            ("curator_acquire_p50_us", f(c.p50_us)),
            ("curator_acquire_p99_us", f(c.p99_us)),
            ("curator_release_p50_us", f(c.release_p50_us)),
            ("curator_cpu_us_per_round", f(c.cpu_us_per_acq)),
            ("floor_acquire_p50_us", f(fl.p50_us)),
            ("floor_acquire_p99_us", f(fl.p99_us)),
            ("floor_release_p50_us", f(fl.release_p50_us)),
            ("one_write_acquire_p50_us", f(one.p50_us)),
            ("one_write_release_p50_us", f(one.release_p50_us)),
            (
                "ours_over_curator_acquire_p50",
                f(ratio(o.p50_us, c.p50_us)),
            ),
            ("ours_over_floor_acquire_p50", f(ratio(o.p50_us, fl.p50_us))),
        ],
    );
    table.push(row(
        "multi-lock acquire p50 µs",
        "Curator",
        o.p50_us,
        c.p50_us,
        Some(fl.p50_us),
    ));
    table.push(row(
        "multi-lock acquire p99 µs",
        "Curator",
        o.p99_us,
        c.p99_us,
        Some(fl.p99_us),
    ));
    table.push(row(
        "multi-lock release p50 µs",
        "Curator",
        o.release_p50_us,
        c.release_p50_us,
        Some(fl.release_p50_us),
    ));
    let bound = (one.p50_us, one.release_p50_us);

    // Contended: 8 contenders on the same four paths.
    let n = 8;
    let blocks = if quick { 1 } else { 3 };
    let block_for = Duration::from_millis(if quick { 300 } else { 2000 });
    let (mut o, mut c, mut fl) = (Vec::new(), Vec::new(), Vec::new());
    for block in 0..blocks {
        let dir = format!("{ROOT}/multi8-{block}");
        for turn in 0..3 {
            match (block + turn) % 3 {
                0 => {
                    let paths = lock_paths(&ours[0], &format!("{dir}-ours"));
                    o.push(multi_contend_ours(&ours[..n], &paths, block_for));
                }
                1 => c.extend(curator.as_deref_mut().map(|cur| {
                    let _ = lock_paths(&ours[0], &format!("{dir}-cur"));
                    let v =
                        cur.numbers(&format!("multirun {dir}-cur {n} {}", block_for.as_millis()));
                    Figures {
                        acquisitions: v[0],
                        per_second: v[1],
                        cpu_us_per_acq: v[2] / 1000.0,
                        ..Default::default()
                    }
                })),
                _ => {
                    let paths = lock_paths(&ours[0], &format!("{dir}-floor"));
                    fl.push(wire::multi_contended(connect, &paths, n, block_for));
                }
            }
        }
    }
    let (o, c, fl) = (combine(&o), combine(&c), combine(&fl));
    json(
        "batch",
        &[
            ("config", s(&format!("multi-lock 4 mutexes N={n}"))),
            ("ours_per_second", f(o.per_second)),
            ("ours_cpu_us_per_acq", f(o.cpu_us_per_acq)),
            ("curator_per_second", f(c.per_second)),
            ("curator_cpu_us_per_acq", f(c.cpu_us_per_acq)),
            ("floor_per_second", f(fl.per_second)),
            ("floor_cpu_us_per_acq", f(fl.cpu_us_per_acq)),
            ("ours_over_curator", f(ratio(o.per_second, c.per_second))),
            ("ours_over_floor", f(ratio(o.per_second, fl.per_second))),
        ],
    );
    table.push(row(
        format!("multi-lock N={n} sets/s"),
        "Curator",
        o.per_second,
        c.per_second,
        Some(fl.per_second),
    ));
    println!(
        "(multi-lock floor: the mutex floor's acquire on each path in turn; the wire's bound for \
         an uncontended set, every create and listing in one write: acquire p50 {:.0} µs, \
         release p50 {:.0} µs)",
        bound.0, bound.1
    );
}

fn multi_of(client: &Client, paths: &[String]) -> InterProcessMultiLock {
    let specs = paths.iter().cloned().map(LockSpec::Mutex).collect();
    InterProcessMultiLock::with_locks(client, specs).expect("a multi-lock")
}

/// `rounds` uncontended acquires and releases of our multi-lock over `paths` on `client`.
fn multi_ours(client: &Client, paths: &[String], rounds: usize) -> Figures {
    let lock = multi_of(client, paths);
    let mut taken = Vec::with_capacity(rounds);
    let cpu = process_cpu();
    for _ in 0..rounds {
        let s = Instant::now();
        let guard = lock.acquire().expect("acquire");
        let held = Instant::now();
        guard.release().expect("release");
        taken.push((held - s, held.elapsed()));
    }
    uncontended_figures(&taken, process_cpu() - cpu)
}

/// One contender per client, each its own multi-lock over `paths`, for `run_for`.
fn multi_contend_ours(clients: &[Client], paths: &[String], run_for: Duration) -> Figures {
    let locks: Vec<InterProcessMultiLock> = clients.iter().map(|c| multi_of(c, paths)).collect();
    let cpu = process_cpu();
    let per_second = timed(locks, run_for, |lock| {
        lock.acquire().expect("acquire").release().expect("release");
    });
    let acquisitions = per_second * run_for.as_secs_f64();
    Figures {
        per_second,
        cpu_us_per_acq: (process_cpu() - cpu).as_secs_f64() * 1e6 / acquisitions.max(1.0),
        acquisitions,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// The summary, and the peers' drivers.

fn report(table: &[Row]) {
    println!(
        "\n{:<30}{:>8}{:>12}{:>12}{:>12}{:>10}{:>10}",
        "batch (one server, alternated)", "peer", "ours", "peer's", "floor", "÷peer", "÷floor"
    );
    for r in table {
        let floor = r.floor.map_or("-".to_string(), |v| format!("{v:.1}"));
        let over_floor = r
            .floor
            .map_or("-".to_string(), |v| format!("{:.2}", ratio(r.ours, v)));
        println!(
            "{:<30}{:>8}{:>12.1}{:>12.1}{:>12}{:>10.2}{:>10}",
            r.name,
            r.peer,
            r.ours,
            r.theirs,
            floor,
            ratio(r.ours, r.theirs),
            over_floor
        );
    }
    println!(
        "(times: less is better, so a ratio under 1 is ours ahead; sets/s: more is better. \
         Partition: kazoo time_boundary {KAZOO_BOUNDARY} s, no wire floor. Barrier: a round \
         from the first member's start to the last member's leave.)"
    );
}

/// kazoo's partitioner driver (`benches/kazoo_partitioner.py`) with `clients` clients.
fn kazoo_driver(connect: &str, clients: usize) -> Result<Driver, String> {
    let has_kazoo = Command::new(PYTHON)
        .args(["-c", "import kazoo.recipe.partitioner"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_kazoo {
        return Err(format!(
            "{PYTHON} cannot import kazoo (apt-get install python3-kazoo)"
        ));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/kazoo_partitioner.py");
    let mut d = Driver::spawn("kazoo", Command::new(PYTHON).args([script, connect]))?;
    d.expect_ok(&format!("clients {clients}"))?;
    Ok(d)
}
