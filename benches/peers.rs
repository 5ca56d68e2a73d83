//! This crate against the two peers a user would pick instead, fairly: Apache Curator 5.4 (Java,
//! `benches/CuratorBench.java`, one long-lived JVM) and `zookeeper-client` 0.11 (async Rust,
//! each contender its own session on a current-thread tokio runtime driven by its own thread;
//! release = the awaited delete of its lock node).
//!
//! Fair means:
//! - the server is warmed first, in rounds, until a round adds little JIT compile time on the
//!   server (`jstat -compiler`);
//! - Curator is warmed until its own JIT has been quiet for a second (at least 2 s);
//! - ours and both peers then run alternately, configuration by configuration, on the same
//!   server in the same run, with the same loop; a contended configuration runs in six 1 s
//!   blocks per client, the three clients taking turns in an order that rotates from block to
//!   block;
//! - client CPU per acquisition is reported for each (Curator: its JVM's; ours and
//!   `zookeeper-client`: this process's, while only that client runs), and the server's CPU
//!   per acquisition while each ran.
//!
//! `cargo bench --bench peers [-- --quick] [-- --ensemble [--on-leader]] [-- --n 8,32]
//! [-- --blocks 6]`: with `--ensemble` on three members that fsync, every client on one follower
//! (on the leader with `--on-leader`). `--n` runs the uncontended figures and the contended
//! mutex (with its herd-lock line) at those N only (no semaphore, read/write lock, many locks,
//! memory or plot), for a closer look at one N, beside as many sessions as a full run
//! connects; `--blocks K` makes every alternated section K blocks of 1 s per client (6 by
//! default), and the untimed warm-ups K/3 s.
//! Skips Curator, saying why, if Java or Curator is missing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::figures::*;
use common::heap::{self, Counting};
use common::shared_floor::SharedFloor;
use common::target::{Ensemble, Target, Zk};
use common::wire;
use common::zkc::ZkcContenders;
use common::*;
use zk_recipes::{Client, CreateMode, InterProcessMutex, Op};

#[global_allocator]
static HEAP: Counting = Counting;

fn main() {
    let args = args();
    assert!(
        args.ensemble || !args.on_leader,
        "--on-leader goes with --ensemble"
    );
    // `--n LIST`: only the contended mutex, at those N. Read before any server starts.
    let only: Option<Vec<usize>> = std::env::args()
        .skip_while(|a| a != "--n")
        .nth(1)
        .map(|list| {
            list.split(',')
                .map(|n| match n.parse() {
                    Ok(n) if n > 0 => n,
                    _ => panic!("--n takes contender counts like 8,32, not {list:?}"),
                })
                .collect()
        });
    let blocks: u32 = match std::env::args().skip_while(|a| a != "--blocks").nth(1) {
        Some(k) => match k.parse() {
            Ok(k) if k > 0 => k,
            _ => panic!("--blocks takes a count of blocks, at least 1, not {k:?}"),
        },
        None if args.quick => 1,
        None => 6,
    };
    let server = if args.ensemble {
        Target::Three(Ensemble::start(args.on_leader))
    } else {
        Target::One(server(&args))
    };
    // What every line below was measured against.
    let target = match (args.ensemble, args.on_leader) {
        (true, true) => "ensemble, clients on the leader",
        (true, false) => "ensemble, clients on a follower",
        _ => "one server",
    };
    println!("target: {target}");
    json("peers", &[("target", s(target))]);
    let connect = server.connect_string();
    let ns: Vec<usize> = match &only {
        Some(list) => list.clone(),
        None if args.quick => vec![2, 8],
        None => vec![2, 8, 32, 64],
    };
    let big = if args.quick || only.is_some() {
        None
    } else {
        Some(256)
    };
    // Every client connects as many sessions as the whole run's largest N (256; with `--n`
    // too, so that a closer look runs beside as many idle sessions, threads and JVM clients
    // as the full run does), or the quick run's.
    let widest = ns.iter().copied().max().unwrap_or(8);
    let most = if args.quick { widest } else { widest.max(256) };
    // A contended block is 1 s per client (0.5 s with `--quick`).
    let run_for = Duration::from_millis(if args.quick { 500 } else { 1000 }) * blocks;
    let ours = clients(&connect, most);
    ours[0].ensure_path("/bench/peers").expect("path");
    let zkc = ZkcContenders::connect(&connect, most, None, ours[0].clone());
    let mut curator = match Curator::start(&connect, most) {
        Ok(c) => Some(c),
        Err(why) => {
            json("peers", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
            None
        }
    };

    // 1. The server, warmed until its JIT is quiet.
    let warm = warm_server(&server, &ours[..8.min(most)], args.quick);
    println!("server warmed: {warm}");
    // 2. Curator, warmed until its own JIT is quiet.
    if let Some(c) = curator.as_mut() {
        let most_secs = if args.quick { 3 } else { 120 };
        let warm = c.ask(&format!("warm /bench/peers/curator-warm {most_secs}"));
        println!("Curator warmed: {warm}");
        if !warm.ends_with("quiet") {
            // A peer measured with its JIT still compiling makes every ratio worthless.
            println!("Curator's JIT was not quiet yet: this run's ratios are a smoke test only");
            json("peers", &[("curator_jit_quiet", "false".into())]);
        }
    }
    // Our side, zookeeper-client and the wire floor get the same untimed warm-up loops.
    let floor = Floor::new(&connect, &ours[0]);
    for i in 0..3 {
        let _ = uncontended_ours(&ours[0], &format!("/bench/peers/ours-warm-{i}"), 300);
        let _ = floor.uncontended(&format!("/bench/peers/floor-warm-{i}"), 300);
        let _ = floor.contend(
            8.min(most),
            &format!("/bench/peers/floor-warm-c{i}"),
            run_for / 3,
        );
        let _ = zkc.uncontended(&format!("/bench/peers/zkc-warm-{i}"), 300);
        let _ = zkc.contend(
            8.min(most),
            &format!("/bench/peers/zkc-warm-c{i}"),
            run_for / 3,
        );
    }

    floor_agrees(&floor, &connect, args.quick);

    let mut rows = Vec::new();
    // 3. Uncontended acquire and release, blocks alternated.
    let rounds = if args.quick { 300 } else { 2000 };
    let (mut o, mut z, mut c, mut fl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for block in 0..3 {
        fl.push(on_server(&server, || {
            floor.uncontended(&format!("/bench/peers/u-floor-{block}"), rounds)
        }));
        o.push(on_server(&server, || {
            uncontended_ours(&ours[0], &format!("/bench/peers/u-ours-{block}"), rounds)
        }));
        if let Some(cur) = curator.as_mut() {
            c.push(on_server(&server, || {
                cur.result(&format!("uncontended /bench/peers/u-cur-{block} {rounds}"))
            }));
        }
        z.push(on_server(&server, || {
            zkc.uncontended(&format!("/bench/peers/u-zkc-{block}"), rounds)
        }));
    }
    let row = [median(&o), median(&z), median(&c), median(&fl)];
    rows.push(("uncontended acquire".to_string(), row));
    rows.push(("uncontended release".to_string(), row.map(release)));

    // 4. Contended mutex, hold 0, at every N (and once at 256), in alternated blocks whose
    // order rotates, so that no client always runs right after another one's load.
    let block_for = run_for / blocks;
    let blocks = blocks as usize;
    let mut curve = Vec::new();
    for &n in ns.iter().chain(big.iter()) {
        let path = format!("/bench/peers/m{n}");
        let (mut o, mut z, mut c, mut f) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for block in 0..blocks {
            for turn in 0..4 {
                let dir = format!("{path}-{block}");
                match (block + turn) % 4 {
                    0 => o.push(on_server(&server, || {
                        contend_ours(Kind::Mutex, &ours[..n], &format!("{dir}-ours"), block_for)
                    })),
                    1 => c.extend(curator.as_mut().map(|cur| {
                        // Made first, as every client's path is (see `contend_ours`).
                        ours[0].ensure_path(&format!("{dir}-cur")).expect("path");
                        on_server(&server, || {
                            cur.run("mutex", &format!("{dir}-cur"), n, block_for)
                        })
                    })),
                    2 => z.push(on_server(&server, || {
                        zkc.contend(n, &format!("{dir}-zkc"), block_for)
                    })),
                    _ => f.push(on_server(&server, || {
                        floor.contend(n, &format!("{dir}-floor"), block_for)
                    })),
                }
            }
        }
        let (ours_fig, zkc_fig, cur_fig) = (combine(&o), combine(&z), combine(&c));
        // The naive herd lock, for the plot: what predecessor-only watches save.
        let herd = if n <= 64 {
            contend_ours(Kind::Herd, &ours[..n], &format!("{path}-herd"), block_for)
        } else {
            Figures::default()
        };
        curve.push((n, ours_fig, zkc_fig, cur_fig, herd));
        rows.push((
            format!("mutex N={n}"),
            [ours_fig, zkc_fig, cur_fig, combine(&f)],
        ));
    }
    if only.is_some() {
        // A closer look at the contended mutex: nothing else, and no plot.
        if let Some(mut c) = curator {
            c.quit();
        }
        return report(&rows);
    }
    // 5. The semaphore mutex and the read/write lock (10 % writes), N = 8, against Curator.
    for (kind, name) in [(Kind::Semaphore, "semaphore"), (Kind::RwLock, "rwlock")] {
        let n = 8.min(most);
        let path = format!("/bench/peers/{name}");
        let (mut o, mut c) = (Vec::new(), Vec::new());
        for block in 0..blocks {
            for turn in 0..2 {
                let dir = format!("{path}-{block}");
                if (block + turn) % 2 == 0 {
                    o.push(on_server(&server, || {
                        contend_ours(kind, &ours[..n], &format!("{dir}-ours"), block_for)
                    }));
                } else {
                    c.extend(curator.as_mut().map(|cur| {
                        ours[0].ensure_path(&format!("{dir}-cur")).expect("path");
                        on_server(&server, || {
                            cur.run(name, &format!("{dir}-cur"), n, block_for)
                        })
                    }));
                }
            }
        }
        rows.push((
            format!("{name} N={n}"),
            [
                combine(&o),
                Figures::default(),
                combine(&c),
                Figures::default(),
            ],
        ));
    }
    // 6. Many locks, one client (a writer per partition): threads sharing one client take
    // random locks among many paths (made beforehand, so that no one pays for first use).
    // Beside it: the lock protocol's floor, as many cycles in flight from one session as
    // there are threads, and what the server commits of the two writes a cycle needs when no
    // read breaks the pipeline (create+delete pairs).
    let (threads, paths) = if args.quick { (8, 100) } else { (64, 10_000) };
    let rate = |per_second: f64| Figures {
        per_second,
        acquisitions: per_second * block_for.as_secs_f64(),
        ..Default::default()
    };
    let (mut o, mut c, mut lf, mut ceiling) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for block in 0..blocks {
        let dir = format!("/bench/peers/many-{block}");
        for d in [&dir, &format!("{dir}-cur"), &format!("{dir}-floor")] {
            lock_paths(&ours[0], d, paths);
        }
        // The four take turns in an order that rotates from block to block.
        for turn in 0..4 {
            match (block + turn) % 4 {
                0 => o.push(on_server(&server, || {
                    many_ours(&ours[0], &dir, threads, paths, block_for)
                })),
                1 => c.extend(curator.as_mut().map(|cur| {
                    on_server(&server, || {
                        cur.many(&format!("{dir}-cur"), threads, paths, block_for)
                    })
                })),
                2 => lf.push(on_server(&server, || {
                    rate(floor.locks(&format!("{dir}-floor"), paths, threads, block_for))
                })),
                _ => ceiling.push(on_server(&server, || {
                    rate(floor.pairs(&format!("{dir}-ceiling"), threads, block_for))
                })),
            }
        }
    }
    let (many, many_cur) = (combine(&o), combine(&c));
    // The lock floor as ours, over all blocks (they are equally long); the ceiling is the
    // best the server did.
    let lock_floor = combine(&lf);
    let best_pairs = ceiling
        .iter()
        .copied()
        .max_by(|a, b| a.per_second.total_cmp(&b.per_second))
        .unwrap_or_default();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!(
        "\nmany locks, one client ({threads} threads, {paths} paths), acq/s (client CPU, server \
         CPU, requests, each): ours {:.0} ({:.0} µs, {:.0} µs, {:.2}); Curator with one \
         CuratorFramework {:.0} ({:.0} µs, {:.0} µs); ours ÷ Curator {:.2}. The lock protocol's \
         floor from one session {:.0} cycles/s ({:.0} µs server CPU each), ours ÷ that {:.2}; \
         the server's create+delete pipelined from one session {:.0} pairs/s ({:.0} µs server \
         CPU each), ours ÷ that {:.2}",
        many.per_second,
        many.cpu_us_per_acq,
        many.server_us_per_acq,
        many.requests_per_acq,
        many_cur.per_second,
        many_cur.cpu_us_per_acq,
        many_cur.server_us_per_acq,
        ratio(many.per_second, many_cur.per_second),
        lock_floor.per_second,
        lock_floor.server_us_per_acq,
        ratio(many.per_second, lock_floor.per_second),
        best_pairs.per_second,
        best_pairs.server_us_per_acq,
        ratio(many.per_second, best_pairs.per_second)
    );
    json(
        "peers",
        &[
            (
                "config",
                s(&format!("many locks {threads} threads {paths} paths")),
            ),
            ("ours_per_second", f(many.per_second)),
            ("ours_cpu_us_per_acq", f(many.cpu_us_per_acq)),
            ("ours_requests_per_acq", f(many.requests_per_acq)),
            ("curator_per_second", f(many_cur.per_second)),
            ("curator_cpu_us_per_acq", f(many_cur.cpu_us_per_acq)),
            ("ours_server_us_per_acq", f(many.server_us_per_acq)),
            ("curator_server_us_per_acq", f(many_cur.server_us_per_acq)),
            ("lock_floor_per_second", f(lock_floor.per_second)),
            (
                "lock_floor_server_us_per_acq",
                f(lock_floor.server_us_per_acq),
            ),
            ("ceiling_pairs_per_second", f(best_pairs.per_second)),
            (
                "ceiling_server_us_per_pair",
                f(best_pairs.server_us_per_acq),
            ),
        ],
    );
    // 7. Memory: what a held lock and a waiting thread cost this process.
    let (held, waiting) = if args.quick { (100, 16) } else { (1000, 64) };
    let memory = footprint(&server, &ours[0], &ours[1], held, waiting);
    println!(
        "\nmemory: per held lock {:.0} B heap ({:.0} B resident), {held} held by one client; per \
         waiting thread {:.0} B heap ({:.0} B resident, its stack's touched pages included), \
         {waiting} threads waiting",
        memory.held_heap, memory.held_resident, memory.waiting_heap, memory.waiting_resident
    );
    json(
        "peers",
        &[
            ("config", s("memory")),
            ("held_locks", f(held as f64)),
            ("heap_bytes_per_held_lock", f(memory.held_heap)),
            ("resident_bytes_per_held_lock", f(memory.held_resident)),
            ("waiting_threads", f(waiting as f64)),
            ("heap_bytes_per_waiting_thread", f(memory.waiting_heap)),
            (
                "resident_bytes_per_waiting_thread",
                f(memory.waiting_resident),
            ),
        ],
    );
    if let Some(mut c) = curator {
        c.quit();
    }
    report(&rows);
    if !args.quick {
        // The ensemble's figures get a plot of their own.
        let name = match (args.ensemble, args.on_leader) {
            (true, true) => "peers-ensemble-leader.png",
            (true, false) => "peers-ensemble.png",
            _ => "peers.png",
        };
        if let Err(e) = plot(&curve, &format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))) {
            println!("no plot: {e}");
        }
    }
}

/// `benches/peers.png` (`peers-ensemble.png` with `--ensemble`, `peers-ensemble-leader.png`
/// with `--on-leader` too): throughput and handoff latency
/// against contenders, for ours, both peers and the herd lock.
fn plot(
    curve: &[(usize, Figures, Figures, Figures, Figures)],
    file: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::{BLUE, GREEN, MAGENTA, RED};
    let pick = |f: fn(&(usize, Figures, Figures, Figures, Figures)) -> Figures,
                y: fn(&Figures) -> f64| {
        curve
            .iter()
            .filter(|c| c.0 <= 64)
            .map(|c| (c.0 as f64, y(&f(c))))
            .filter(|p| p.1 > 0.0)
            .collect::<Vec<_>>()
    };
    let lines = |y: fn(&Figures) -> f64| -> Vec<Line> {
        vec![
            ("zk-recipes".into(), BLUE, pick(|c| c.1, y)),
            ("zookeeper-client".into(), GREEN, pick(|c| c.2, y)),
            ("Curator".into(), MAGENTA, pick(|c| c.3, y)),
            ("herd lock".into(), RED, pick(|c| c.4, y)),
        ]
    };
    plot_panels(
        file,
        &[
            (
                "acquisitions per second (hold 0)",
                "contenders (N)",
                "acq/s",
                lines(|f| f.per_second),
            ),
            (
                "handoff latency p50 (hold 0)",
                "contenders (N)",
                "µs",
                lines(|f| f.p50_us),
            ),
        ],
    )
}

/// Each configuration's figures: ours, `zookeeper-client`'s, Curator's and the wire floor's.
type Row = (String, [Figures; 4]);

fn report(rows: &[Row]) {
    const WHO: [&str; 4] = ["ours", "zkc", "curator", "floor"];
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!(
        "\n{:<22}{:>9}{:>9}{:>9}{:>9}{:>7}{:>7}{:>7}{:>8}{:>8}{:>8}{:>8}{:>7}{:>7}{:>7}{:>6}{:>6}{:>6}{:>6}",
        "",
        "ours/s",
        "zkc/s",
        "cur/s",
        "floor/s",
        "÷zkc",
        "÷cur",
        "÷flr",
        "ours",
        "zkc",
        "cur",
        "floor",
        "÷zkc",
        "÷cur",
        "÷flr",
        "cpu",
        "zkc",
        "cur",
        "flr",
    );
    for (name, figures) in rows {
        let [o, z, c, fl] = figures;
        let mut fields = vec![("config", s(name))];
        for (who, x) in WHO.iter().zip(figures) {
            fields.extend([
                (leak(format!("{who}_per_second")), f(x.per_second)),
                (leak(format!("{who}_p50_us")), f(x.p50_us)),
                (leak(format!("{who}_p99_us")), f(x.p99_us)),
                (leak(format!("{who}_cpu_us_per_acq")), f(x.cpu_us_per_acq)),
                (
                    leak(format!("{who}_server_us_per_acq")),
                    f(x.server_us_per_acq),
                ),
                (
                    leak(format!("{who}_requests_per_acq")),
                    f(x.requests_per_acq),
                ),
            ]);
        }
        fields.push(("ours_notifications_per_release", f(o.notifications)));
        json("peers", &fields);
        println!(
            "{name:<22}{:>9.0}{:>9.0}{:>9.0}{:>9.0}{:>7.2}{:>7.2}{:>7.2}{:>8.0}{:>8.0}{:>8.0}{:>8.0}{:>7.2}{:>7.2}{:>7.2}{:>6.0}{:>6.0}{:>6.0}{:>6.0}",
            o.per_second,
            z.per_second,
            c.per_second,
            fl.per_second,
            ratio(o.per_second, z.per_second),
            ratio(o.per_second, c.per_second),
            ratio(o.per_second, fl.per_second),
            o.p50_us,
            z.p50_us,
            c.p50_us,
            fl.p50_us,
            ratio(o.p50_us, z.p50_us),
            ratio(o.p50_us, c.p50_us),
            ratio(o.p50_us, fl.p50_us),
            o.cpu_us_per_acq,
            z.cpu_us_per_acq,
            c.cpu_us_per_acq,
            fl.cpu_us_per_acq,
        );
    }
    println!(
        "(p50 in µs: acquire or release latency when uncontended, handoff latency when \
         contended; cpu: the client's µs per acquisition)"
    );
    println!(
        "\n{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}{:>16}",
        "", "p99 ours", "floor", "÷floor", "srv µs", "floor", "req ours/floor"
    );
    for (name, [o, _, _, fl]) in rows {
        if fl.acquisitions <= 0.0 {
            continue;
        }
        println!(
            "{name:<22}{:>10.0}{:>10.0}{:>10.2}{:>10.0}{:>10.0}{:>16}",
            o.p99_us,
            fl.p99_us,
            ratio(o.p99_us, fl.p99_us),
            o.server_us_per_acq,
            fl.server_us_per_acq,
            if o.requests_per_acq > 0.0 {
                format!("{:.2}/{:.2}", o.requests_per_acq, fl.requests_per_acq)
            } else {
                "-".into()
            },
        );
    }
    for (name, [o, ..]) in rows {
        if o.notifications > 0.0 {
            println!(
                "{name}: {:.2} watch notifications per release (ours)",
                o.notifications
            );
        }
    }
}

/// The release's figures of an uncontended row, as a row of their own.
fn release(x: Figures) -> Figures {
    Figures {
        p50_us: x.release_p50_us,
        p99_us: x.release_p99_us,
        ..x
    }
}

/// Our wire floor against `../shared/floor` on this server, alternated (if that one is built):
/// the two should agree, or our floor columns mean nothing.
fn floor_agrees(floor: &Floor, connect: &str, quick: bool) {
    let Some(shared) = SharedFloor::find(connect) else {
        println!("../shared/floor is not built: our floor is not checked against it this run");
        return;
    };
    let rounds = if quick { 300 } else { 2000 };
    let (mut ours_u, mut theirs_u, mut ours_c, mut theirs_c) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for block in 0..3 {
        ours_u.push(floor.uncontended(&format!("/bench/peers/agree-u-{block}"), rounds));
        theirs_u.push(shared.uncontended(rounds));
        ours_c.push(floor.contend(
            8,
            &format!("/bench/peers/agree-c-{block}"),
            Duration::from_secs(1),
        ));
        theirs_c.push(shared.contend(8, Duration::from_secs(1)));
    }
    let (ou, tu, oc, tc) = (
        median(&ours_u),
        median(&theirs_u),
        combine(&ours_c),
        combine(&theirs_c),
    );
    println!(
        "wire floor vs ../shared/floor, alternated: uncontended acquire p50 {:.0} / {:.0} µs, \
         release p50 {:.0} / {:.0} µs; N = 8: {:.0} / {:.0} acq/s, handoff p50 {:.0} / {:.0} µs",
        ou.p50_us,
        tu.p50_us,
        ou.release_p50_us,
        tu.release_p50_us,
        oc.per_second,
        tc.per_second,
        oc.p50_us,
        tc.p50_us
    );
    json(
        "peers",
        &[
            ("config", s("floor agreement")),
            ("wire_acquire_p50_us", f(ou.p50_us)),
            ("shared_acquire_p50_us", f(tu.p50_us)),
            ("wire_release_p50_us", f(ou.release_p50_us)),
            ("shared_release_p50_us", f(tu.release_p50_us)),
            ("wire_n8_per_second", f(oc.per_second)),
            ("shared_n8_per_second", f(tc.per_second)),
            ("wire_n8_handoff_p50_us", f(oc.p50_us)),
            ("shared_n8_handoff_p50_us", f(tc.p50_us)),
        ],
    );
}

/// `threads` threads share `client` and, for `run_for`, each takes and releases a lock chosen
/// at random among `paths` under `dir`.
fn many_ours(
    client: &Client,
    dir: &str,
    threads: usize,
    paths: usize,
    run_for: Duration,
) -> Figures {
    let cpu = process_cpu();
    let requests = client.metrics().requests;
    let workers: Vec<(Client, String)> = (0..threads)
        .map(|_| (client.clone(), dir.to_owned()))
        .collect();
    let per_second = timed(workers, run_for, move |(client, dir)| {
        let path = format!("{dir}/p{}", fastrand::usize(..paths));
        let mutex = InterProcessMutex::new(client, &path).expect("lock");
        drop(mutex.acquire().expect("acquire"));
    });
    let acquisitions = per_second * run_for.as_secs_f64();
    Figures {
        per_second,
        cpu_us_per_acq: (process_cpu() - cpu).as_secs_f64() * 1e6 / acquisitions.max(1.0),
        acquisitions,
        requests_per_acq: (client.metrics().requests - requests) as f64 / acquisitions.max(1.0),
        ..Default::default()
    }
}

/// Bytes per held lock and per waiting thread.
struct Footprint {
    held_heap: f64,
    held_resident: f64,
    waiting_heap: f64,
    waiting_resident: f64,
}

/// What `held` locks held by `client` (each its own path and `InterProcessMutex`) cost, and
/// what `waiting` threads of `client` waiting for one lock `other` holds cost (each its own
/// `InterProcessMutex`), in heap (counted by the bench's allocator) and resident memory,
/// divided by their number.
fn footprint(
    server: &impl Zk,
    client: &Client,
    other: &Client,
    held: usize,
    waiting: usize,
) -> Footprint {
    let dir = "/bench/peers/memory";
    lock_paths(client, dir, held + 1);
    let per = |before: isize, after: isize, n: usize| (after - before) as f64 / n as f64;
    // Held: each lock's object, its guard, and what the client keeps for the hold.
    let (heap, resident) = (heap::live(), heap::resident());
    let mutexes: Vec<InterProcessMutex> = (0..held)
        .map(|i| InterProcessMutex::new(client, &format!("{dir}/p{i}")).expect("lock"))
        .collect();
    let guards: Vec<_> = mutexes
        .iter()
        .map(|m| m.acquire().expect("acquire"))
        .collect();
    let held_heap = per(heap, heap::live(), held);
    let held_resident = per(resident, heap::resident(), held);
    drop(guards);
    drop(mutexes);
    // Waiting: each thread, its lock object, its node's name and its watch; the server's
    // count of watches says when every waiter waits.
    let line = format!("{dir}/p{held}");
    let blocker = InterProcessMutex::new(other, &line).expect("lock");
    let guard = blocker.acquire().expect("acquire");
    let total_watches = || {
        server
            .four_letter("wchs")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Total watches:"))
                    .and_then(|n| n.trim().parse::<usize>().ok())
            })
            .unwrap_or(0)
    };
    let watches_before = total_watches();
    let (heap, resident) = (heap::live(), heap::resident());
    let threads: Vec<_> = (0..waiting)
        .map(|_| {
            let (client, line) = (client.clone(), line.clone());
            std::thread::spawn(move || {
                let mutex = InterProcessMutex::new(&client, &line).expect("lock");
                drop(mutex.acquire().expect("acquire"));
            })
        })
        .collect();
    let started = std::time::Instant::now();
    while total_watches() < watches_before + waiting {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the waiters never all waited"
        );
        std::thread::yield_now();
    }
    let waiting_heap = per(heap, heap::live(), waiting);
    let waiting_resident = per(resident, heap::resident(), waiting);
    drop(guard);
    for t in threads {
        t.join().expect("waiter");
    }
    Footprint {
        held_heap,
        held_resident,
        waiting_heap,
        waiting_resident,
    }
}

/// Makes `paths` lock paths `dir/p0`.. as the recipes make them (containers), in
/// transactions of a few hundred.
fn lock_paths(client: &Client, dir: &str, paths: usize) {
    client.ensure_path(dir).expect("path");
    let ops: Vec<Op> = (0..paths)
        .map(|i| Op::Create {
            path: format!("{dir}/p{i}"),
            data: Vec::new(),
            mode: CreateMode::Container,
        })
        .collect();
    for batch in ops.chunks(500) {
        client.multi(batch).expect("lock paths");
    }
}

/// The benches' own wire floor (`common::wire`) on this server; each measurement on sessions
/// of its own, made before it and closed after.
struct Floor<'a> {
    addr: String,
    helper: &'a Client,
}

impl<'a> Floor<'a> {
    fn new(addr: &str, helper: &'a Client) -> Floor<'a> {
        Floor {
            addr: addr.to_owned(),
            helper,
        }
    }

    fn uncontended(&self, dir: &str, rounds: usize) -> Figures {
        self.helper.ensure_path(dir).expect("path");
        wire::uncontended(&self.addr, dir, rounds)
    }

    fn contend(&self, n: usize, dir: &str, run_for: Duration) -> Figures {
        self.helper.ensure_path(dir).expect("path");
        wire::contended(&self.addr, dir, n, run_for)
    }

    /// Lock cycles per second on random ones of `paths` lock paths (made beforehand), `window`
    /// in flight, from one session.
    fn locks(&self, dir: &str, paths: usize, window: usize, run_for: Duration) -> f64 {
        wire::pipelined_locks(&self.addr, dir, paths, window, run_for)
    }

    /// Create+delete pairs per second, `window` in flight, from one session.
    fn pairs(&self, dir: &str, window: usize, run_for: Duration) -> f64 {
        self.helper.ensure_path(dir).expect("path");
        wire::pipelined_pairs(&self.addr, dir, window, run_for)
    }
}

/// The Curator driver: one JVM for the whole run, commands on its standard input.
struct Curator {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Curator {
    fn start(connect: &str, clients: usize) -> Result<Curator, String> {
        let cp = curator_driver("CuratorBench")?;
        let mut child = Command::new("java")
            .args(["-Xmx1g", "-cp", &cp, "CuratorBench", connect])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut c = Curator {
            child,
            stdin,
            stdout,
        };
        c.ask(&format!("clients {clients}"));
        Ok(c)
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("to the Curator driver");
        self.stdin.flush().expect("to the Curator driver");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("from the Curator driver");
        line.trim().to_owned()
    }

    fn numbers(&mut self, command: &str) -> Vec<f64> {
        let answer = self.ask(command);
        let Some(rest) = answer.strip_prefix("RESULT ") else {
            panic!("the Curator driver answered {answer:?} to {command:?}");
        };
        rest.split(' ').filter_map(|x| x.parse().ok()).collect()
    }

    /// `uncontended PATH ROUNDS`.
    fn result(&mut self, command: &str) -> Figures {
        let v = self.numbers(command);
        Figures {
            per_second: 0.0,
            p50_us: v[1],
            p99_us: v[2],
            cpu_us_per_acq: v[3] / 1000.0,
            acquisitions: v[0],
            ..Default::default()
        }
    }

    fn run(&mut self, kind: &str, path: &str, n: usize, run_for: Duration) -> Figures {
        let v = self.numbers(&format!("run {kind} {path} {n} {}", run_for.as_millis()));
        Figures {
            per_second: v[1],
            p50_us: v[2],
            p99_us: v[3],
            cpu_us_per_acq: v[4] / 1000.0,
            acquisitions: v[0],
            ..Default::default()
        }
    }

    /// `many PATH THREADS PATHS MILLIS`: threads sharing one `CuratorFramework`.
    fn many(&mut self, path: &str, threads: usize, paths: usize, run_for: Duration) -> Figures {
        let v = self.numbers(&format!(
            "many {path} {threads} {paths} {}",
            run_for.as_millis()
        ));
        Figures {
            per_second: v[1],
            cpu_us_per_acq: v[2] / 1000.0,
            acquisitions: v[0],
            ..Default::default()
        }
    }

    fn quit(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
