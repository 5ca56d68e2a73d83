//! The tree cache (issue 38): ours (`cache::CuratorCache`) beside Curator 5.4's `CuratorCache`
//! (`benches/CuratorCacheBench.java`, one long-lived JVM) and the wire floor, on trees of
//! 50 051 and 100 101 nodes (a root, 50 or 100 directories of 1 000 nodes of 32 bytes each).
//! Curator 5.4 cannot build the larger (CURATOR-690: its `initialized` comes with 65 535 reads
//! in flight at most, the rest never read); the run says so and compares on the smaller.
//!
//! - **Build**: from the cache's creation to its first full read (ours: `wait_current`;
//!   Curator: its `initialized` listener; the floor: the watch set and every node's data and
//!   children read, nothing kept).
//! - **Memory per node**: the heap the built cache holds, divided by its nodes. Ours: the
//!   bytes the process has allocated and not freed (a counting global allocator), before the
//!   cache and once built; beside it what the cache itself reports (`memory()`). Curator: the
//!   JVM's heap in use after a full collection, before and once built.
//! - **Event latency**: a node's data set by another session of the same side, and the time
//!   from the call to the cache's listener hearing the new value (one write at a time, random
//!   nodes). The floor: a raw `setData`, the recursive watch's notification and the `getData`
//!   it calls for.
//!
//! Fair means, as in `peers`: the server is warmed until its JIT is quiet; Curator is warmed
//! until its own JIT has been quiet for a second (builds and changes of a small tree); ours gets
//! untimed warm-up turns; then every side runs on the same server and the same tree in the same
//! run, in alternated turns whose order rotates from block to block, one cache open at a time.
//! Figures are the medians of the turns, and their ratios.
//!
//! `cargo bench -p zk-recipes-benches --bench cache [-- --quick]` (quick: 10 directories of
//! 100). Skips Curator, saying why, if it is missing.

mod common;

use std::time::{Duration, Instant};

use common::driver::Driver;
use common::figures::warm_server;
use common::heap::{self, Counting};
use common::wire::Wire;
use common::*;
use zk_recipes::cache::{CacheEvent, CacheOptions, CuratorCache};
use zk_recipes::{Client, CreateMode, Op};

#[global_allocator]
static HEAP: Counting = Counting;

const ROOT: &str = "/bench/cache";
/// A node's data: a value of 32 bytes, as a configuration entry's.
const DATA: &[u8] = b"a configuration value, 32 bytes!";

/// One side's figures in one turn.
#[derive(Clone, Copy, Default)]
struct Turn {
    build_secs: f64,
    /// Heap bytes per cached node (NaN: not measured).
    bytes_per_node: f64,
    /// What our cache says of itself, per node.
    reported_per_node: f64,
    cpu_us_per_node: f64,
    p50_us: f64,
    p99_us: f64,
}

fn main() {
    let args = args();
    let quick = args.quick;
    let per_dir = if quick { 100 } else { 1000 };
    // Curator 5.4 (Debian's) cannot build a cache with more than 65 535 reads in flight (its
    // `Phaser`, CURATOR-690, fixed in 5.6): its `initialized` comes early, with the rest never
    // read. The ratios are taken on a tree it can hold, and ours is measured on both.
    let sizes: &[usize] = if quick { &[5, 10] } else { &[50, 100] };
    let changes = if quick { 50 } else { 500 };
    let server = server(&args);
    let connect = server.connect_string();
    let ours = clients(&connect, 2);
    let small = format!("{ROOT}/warm");
    fill(&ours[0], &small, 10, 100);
    let trees: Vec<(String, usize)> = sizes
        .iter()
        .map(|&dirs| {
            let tree = format!("{ROOT}/tree-{dirs}");
            let made = Instant::now();
            fill(&ours[0], &tree, dirs, per_dir);
            let nodes = 1 + dirs * (1 + per_dir);
            println!(
                "tree of {nodes} nodes made in {:.1} s",
                made.elapsed().as_secs_f64()
            );
            (tree, nodes)
        })
        .collect();
    let mut curator = Driver::curator_or_skip("cache", "CuratorCacheBench", &connect, 2);

    let warm = warm_server(&server, &ours, quick);
    println!("server warmed: {warm}");
    if let Some(c) = curator.as_mut() {
        c.warm_jit("cache", &small, quick);
    }
    for _ in 0..if quick { 1 } else { 3 } {
        let _ = turn_ours(&ours, &small, 100, 50);
        let _ = turn_floor(&connect, &small, 100, 50);
    }

    let blocks = if quick { 1 } else { 3 };
    for (tree, nodes) in &trees {
        let (tree, nodes) = (tree.as_str(), *nodes);
        let (mut mine, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
        let mut curator_held = None;
        for b in 0..blocks {
            for turn in 0..3 {
                match (turn + b) % 3 {
                    0 => mine.push(turn_ours(&ours, tree, per_dir, changes)),
                    1 => {
                        if let Some(c) = curator.as_mut() {
                            match turn_curator(c, tree, per_dir, changes, nodes) {
                                Ok(t) => theirs.push(t),
                                Err(held) => curator_held = Some(held),
                            }
                        }
                    }
                    _ => floor.push(turn_floor(&connect, tree, per_dir, changes)),
                }
            }
        }
        if let Some(held) = curator_held {
            println!(
                "\nCurator's cache of {nodes} nodes said it was initialized holding {held} \
                 (CURATOR-690): not compared"
            );
            json(
                "cache",
                &[
                    ("figure", s("curator_incomplete")),
                    ("nodes", nodes.to_string()),
                    ("curator_held", held.to_string()),
                ],
            );
        }
        table(nodes, &median(&mine), &median(&theirs), &median(&floor));
    }
    if let Some(mut c) = curator {
        c.quit();
    }
}

/// Prints and records the figures of one tree.
fn table(nodes: usize, o: &Turn, t: &Turn, fl: &Turn) {
    println!(
        "\ncache of {nodes} nodes{:>14}{:>14}{:>10}{:>12}{:>10}",
        "ours", "Curator", "ours÷", "floor", "÷floor"
    );
    let line = |what: &str, ours: f64, curator: f64, floor: f64| {
        // Lower is better for every figure: a ratio over 1 is ours ahead.
        let ahead = |a: f64, b: f64| b / a;
        println!(
            "{what:<26}{ours:>14.1}{curator:>14.1}{:>10.2}{floor:>12.1}{:>10.2}",
            ahead(ours, curator),
            ahead(ours, floor),
        );
        json(
            "cache",
            &[
                ("figure", s(what)),
                ("nodes", nodes.to_string()),
                ("ours", f(ours)),
                ("curator", f(curator)),
                ("ours_ahead_of_curator", f(ahead(ours, curator))),
                ("floor", f(floor)),
                ("ours_ahead_of_floor", f(ahead(ours, floor))),
            ],
        );
    };
    line(
        "build (ms)",
        o.build_secs * 1e3,
        t.build_secs * 1e3,
        fl.build_secs * 1e3,
    );
    line(
        "heap per node (bytes)",
        o.bytes_per_node,
        t.bytes_per_node,
        f64::NAN,
    );
    line(
        "build CPU per node (µs)",
        o.cpu_us_per_node,
        t.cpu_us_per_node,
        fl.cpu_us_per_node,
    );
    line("event p50 (µs)", o.p50_us, t.p50_us, fl.p50_us);
    line("event p99 (µs)", o.p99_us, t.p99_us, fl.p99_us);
    println!(
        "(ratios over 1: ours ahead; our cache reports {:.0} bytes per node of its own)",
        o.reported_per_node
    );
}

/// The tree at `root`: `dirs` directories of `per_dir` nodes of [`DATA`] (made once, in
/// transactions of 1 000 creates; untimed).
fn fill(client: &Client, root: &str, dirs: usize, per_dir: usize) {
    client.ensure_path(root).expect("the tree's root");
    let mut ops = Vec::new();
    let flush = |ops: &mut Vec<Op>| {
        if !ops.is_empty() {
            client.multi(ops).expect("the tree");
            ops.clear();
        }
    };
    for d in 0..dirs {
        let dir = format!("{root}/d{d}");
        ops.push(create(&dir, b""));
        for n in 0..per_dir {
            ops.push(create(&format!("{dir}/n{n}"), DATA));
            if ops.len() >= 1000 {
                flush(&mut ops);
            }
        }
    }
    flush(&mut ops);
}

fn create(path: &str, data: &[u8]) -> Op {
    Op::Create {
        path: path.to_owned(),
        data: data.to_vec(),
        mode: CreateMode::Persistent,
    }
}

/// A random node of the tree and a value carrying the write's number.
fn change(
    rng: &mut fastrand::Rng,
    root: &str,
    dirs: usize,
    per_dir: usize,
    i: usize,
) -> (String, Vec<u8>) {
    let node = format!(
        "{root}/d{}/n{}",
        rng.usize(0..dirs.max(1)),
        rng.usize(0..per_dir)
    );
    (node, format!("t{i}-{}", rng.u64(..)).into_bytes())
}

/// Our cache of `root`: built (timed), measured, changed `changes` times, closed.
fn turn_ours(ours: &[Client], root: &str, per_dir: usize, changes: usize) -> Turn {
    let dirs = ours[1].children(root).map_or(1, |c| c.len());
    let heap0 = heap::live();
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let cache = CuratorCache::new(&ours[0], root, CacheOptions::new()).expect("cache");
    let (tx, heard) = std::sync::mpsc::channel::<Vec<u8>>();
    let tx = std::sync::Mutex::new(tx);
    cache.add_listener(move |e| {
        if let CacheEvent::Changed { new, .. } = e {
            if let Some(d) = new.data.as_deref().filter(|d| d.first() == Some(&b't')) {
                let _ = tx.lock().map(|tx| tx.send(d.to_vec()));
            }
        }
    });
    cache.start().expect("start");
    assert!(
        cache.wait_current(Duration::from_secs(600)),
        "our cache was not built in 600 s"
    );
    let build_secs = t0.elapsed().as_secs_f64();
    let cpu = process_cpu().saturating_sub(cpu0);
    let size = cache.size().max(1);
    let bytes = (heap::live() - heap0).max(0) as f64;
    let reported = cache.memory().per_node() as f64;
    let mut rng = fastrand::Rng::with_seed(changes as u64);
    let mut took = Vec::with_capacity(changes);
    for i in 0..changes {
        let (node, value) = change(&mut rng, root, dirs, per_dir, i);
        let t = Instant::now();
        ours[1].set_data(&node, &value, None).expect("a change");
        loop {
            let got = heard
                .recv_timeout(Duration::from_secs(30))
                .expect("our cache heard the change within 30 s");
            if got == value {
                break;
            }
        }
        took.push(t.elapsed());
    }
    cache.close();
    Turn {
        build_secs,
        bytes_per_node: bytes / size as f64,
        reported_per_node: reported,
        cpu_us_per_node: cpu.as_secs_f64() * 1e6 / size as f64,
        p50_us: pct(&mut took, 0.5),
        p99_us: pct(&mut took, 0.99),
    }
}

/// Curator's cache of `root`, the same turn in its JVM; `Err(nodes held)` if it said it was
/// initialized holding less than the tree.
fn turn_curator(
    c: &mut Driver,
    root: &str,
    per_dir: usize,
    changes: usize,
    nodes: usize,
) -> Result<Turn, usize> {
    let built = c.numbers(&format!("build {root}"));
    let held = built.first().copied().unwrap_or(0.0) as usize;
    if held != nodes {
        c.expect_ok("close").expect("Curator closes its cache");
        return Err(held);
    }
    let lat = c.numbers(&format!("latency {root} {per_dir} {changes}"));
    c.expect_ok("close").expect("Curator closes its cache");
    Ok(Turn {
        build_secs: built.get(1).copied().unwrap_or(f64::NAN),
        bytes_per_node: built.get(2).copied().unwrap_or(f64::NAN),
        reported_per_node: f64::NAN,
        cpu_us_per_node: built.get(3).copied().unwrap_or(f64::NAN) / 1e3,
        p50_us: lat.get(1).copied().unwrap_or(f64::NAN),
        p99_us: lat.get(2).copied().unwrap_or(f64::NAN),
    })
}

/// The floor's turn: the tree read with the watch set, then changes heard.
fn turn_floor(connect: &str, root: &str, per_dir: usize, changes: usize) -> Turn {
    let mut reader = Wire::connect(connect).expect("the floor's session");
    let mut writer = Wire::connect(connect).expect("the floor's writer");
    let dirs = writer.list(root).map_or(1, |c| c.len());
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let read = reader.read_tree(root).expect("the floor reads the tree");
    let build_secs = t0.elapsed().as_secs_f64();
    let cpu = process_cpu().saturating_sub(cpu0);
    let mut rng = fastrand::Rng::with_seed(changes as u64);
    let mut took = Vec::with_capacity(changes);
    for i in 0..changes {
        let (node, value) = change(&mut rng, root, dirs, per_dir, i);
        let t = Instant::now();
        writer.set_data(&node, &value).expect("the floor's change");
        loop {
            let (got, _) = reader.next_change().expect("the floor hears the change");
            if got == value {
                break;
            }
        }
        took.push(t.elapsed());
    }
    reader.close();
    writer.close();
    Turn {
        build_secs,
        bytes_per_node: f64::NAN,
        reported_per_node: f64::NAN,
        cpu_us_per_node: cpu.as_secs_f64() * 1e6 / read.max(1) as f64,
        p50_us: pct(&mut took, 0.5),
        p99_us: pct(&mut took, 0.99),
    }
}

/// The median of each figure over the turns (NaN for none).
fn median(turns: &[Turn]) -> Turn {
    let m = |v: Vec<f64>| {
        let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    Turn {
        build_secs: m(turns.iter().map(|t| t.build_secs).collect()),
        bytes_per_node: m(turns.iter().map(|t| t.bytes_per_node).collect()),
        reported_per_node: m(turns.iter().map(|t| t.reported_per_node).collect()),
        cpu_us_per_node: m(turns.iter().map(|t| t.cpu_us_per_node).collect()),
        p50_us: m(turns.iter().map(|t| t.p50_us).collect()),
        p99_us: m(turns.iter().map(|t| t.p99_us).collect()),
    }
}
