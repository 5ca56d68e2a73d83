//! Issue 40, item 1: one lock, N contenders, as the work grows, ours beside Apache Curator 5.4,
//! `zookeeper-client` 0.11 and the wire floor. N sessions spread over several worker processes
//! (at most 256 sessions each): for ours, `zookeeper-client` and the floor, copies of this
//! binary; for Curator, JVMs running `benches/CuratorScaleWorker.java`, the way a Curator user
//! writes it. `zookeeper-client` runs twice: its contenders as tasks on one runtime per process
//! (`zkc`, the way an async user writes it) and each on a thread and runtime of its own
//! (`zkc-threads`, the way our earlier figures drove it). All take one lock of Curator's node
//! layout in turn. Each N runs in blocks (`--blocks`, 3 by default): in each block every client
//! runs once, in an order that rotates from block to block and runs backwards in every other
//! one, each once the last one's nodes are gone, on one server the first configuration warms;
//! a figure is the median of its blocks, with their spread, and a ratio
//! the median of the blocks' ratios. A JVM worker's window starts only once its JIT has been
//! quiet for a second (the JVM's own count of its compile time, at most 120 s).
//!
//! Every contender enters the line at once, which costs the server N listings of up to N names
//! (O(N²) bytes); the figures are of the window that follows a warm-up long enough for that
//! burst to pass (2 s per 256 contenders, at least 2 s), the line's steady state. The window
//! is 10 s, or 3 s per 256 contenders if longer (at 4 096 a window lets the slowest client's
//! line go round about once).
//!
//! Per configuration: acquisitions per second; the handoff latency (from a holder's release to
//! the next holder's acquire, on the machine's one monotonic clock, which Java's `nanoTime`
//! reads too, merged from every process's records, which also prove no two holds overlapped);
//! the server's CPU and the bytes it sent and received per acquisition (summed over its client
//! sockets by `ss`, before and after); the workers' CPU per acquisition.
//!
//! `cargo bench --bench scale [-- --quick] [-- --fsync] [-- --n 8,64] [-- --blocks 3]
//! [-- --only ours,zkc,zkc-threads,curator,floor]`. Needs `ss` (iproute2); skips Curator,
//! saying why, without Java or Curator. A full run (every N, every client, 3 blocks or more,
//! no `--fsync`) draws `benches/scale.png`.

mod common;

use std::io::{BufRead, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::procs::*;
use common::*;
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, InterProcessMutex};

/// Sessions per worker process, at most.
const PER_PROCESS: usize = 256;

fn main() {
    if let Ok(spec) = std::env::var("ZKR_SCALE_WORKER") {
        worker(&spec);
        return;
    }
    let args = args();
    // `--replot FILE`: the plot again from a run's printed record (its JSON lines).
    if let Some(file) = std::env::args().skip_while(|a| a != "--replot").nth(1) {
        return replot(&file);
    }
    let ns: Vec<usize> = match std::env::args().skip_while(|a| a != "--n").nth(1) {
        Some(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        None if args.quick => vec![8, 64],
        None => vec![8, 64, 256, 1024, 4096],
    };
    let blocks: usize = std::env::args()
        .skip_while(|a| a != "--blocks")
        .nth(1)
        .and_then(|b| b.parse().ok())
        .unwrap_or(if args.quick { 1 } else { 3 })
        .max(1);
    let run_for = |n: usize| match args.quick {
        true => Duration::from_millis(1000),
        false => Duration::from_secs((3 * n.div_ceil(256) as u64).max(10)),
    };
    let warm_for = |n: usize| match args.quick {
        true => Duration::from_millis(300),
        false => Duration::from_secs(2 * n.div_ceil(256).max(1) as u64),
    };
    init_logs();
    let server = TestingServer::with_options(ServerOptions {
        force_sync: args.fsync,
        // Every session comes from 127.0.0.1: no per-address limit.
        config: vec![("maxClientCnxns".into(), "0".into())],
        ..ServerOptions::default()
    })
    .expect("start ZooKeeper (apt-get install zookeeper)");
    let admin = Client::builder(&server.connect_string())
        .connect()
        .expect("connect");
    admin.ensure_path("/bench/scale").expect("path");
    let mut peers = vec![Peer::Ours, Peer::Zkc, Peer::ZkcThreads];
    match curator_driver("CuratorScaleWorker") {
        Ok(cp) => peers.push(Peer::Curator(cp)),
        Err(why) => {
            json("scale", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
        }
    }
    peers.push(Peer::Floor);
    let every_client = peers.len() == 5;
    // `--only ours,zkc`: these clients alone.
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    if let Some(only) = &only {
        peers.retain(|p| only.split(',').any(|o| o.eq_ignore_ascii_case(p.name())));
    }
    assert!(
        !peers.is_empty(),
        "--only names none of ours, zkc, zkc-threads, Curator, floor (that can run here)"
    );
    let whole_run = every_client
        && only.is_none()
        && !args.quick
        && !args.fsync
        && ns == [8, 64, 256, 1024, 4096]
        && blocks >= 3;
    // The server warmed by the smallest configuration, ours, until a window adds little of
    // the server's JIT (as the peers' bench does), at most 10 windows.
    let warm = ns.first().copied().unwrap_or(8);
    let short = Duration::from_millis(300);
    for round in 0..10 {
        let before = jit_ms(server.pid());
        measure(
            &server,
            &Peer::Ours,
            warm,
            short,
            short,
            &format!("warm{round}"),
        );
        if jit_ms(server.pid()) - before < 20.0 || (args.quick && round >= 1) {
            break;
        }
    }
    println!(
        "{:>6} {:>5} {:>11} {:>6} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9} {:>11}",
        "N",
        "block",
        "client",
        "procs",
        "acq/s",
        "p50 µs",
        "p99 µs",
        "srv µs/acq",
        "srv B out",
        "srv B in",
        "cli µs/acq"
    );
    let mut curve: Curve = Vec::new();
    for &n in &ns {
        let mut cells: Cells = peers.iter().map(|p| (p.name(), Vec::new())).collect();
        for block in 0..blocks {
            // Alternated: the order rotates from one block to the next, and runs backwards in
            // every other block, so that no client always follows the same one.
            let mut order: Vec<(usize, &Peer)> = peers.iter().enumerate().collect();
            order.rotate_left(block % peers.len());
            if block % 2 == 1 {
                order.reverse();
            }
            for (which, peer) in order {
                // What the last client left (a session still closing, its node) is gone
                // before the next one starts.
                settled(&server);
                let m = measure(
                    &server,
                    peer,
                    n,
                    warm_for(n),
                    run_for(n),
                    &format!("n{n}-b{block}"),
                );
                row(n, block, peer.name(), &m, args.fsync);
                cells[which].1.push(m);
            }
        }
        summary(n, &cells);
        curve.push((n, cells));
    }
    if whole_run {
        let file = format!("{}/scale.png", env!("CARGO_MANIFEST_DIR"));
        match plot(&curve, &file) {
            Ok(()) => println!("\nwrote benches/scale.png"),
            Err(e) => println!("\nno plot: {e}"),
        }
    }
    admin.close();
}

/// Whose contenders a worker process runs.
enum Peer {
    Ours,
    /// `zookeeper-client` 0.11, each contender its own session, all of a process's as tasks on
    /// one multi-threaded runtime (a worker thread a core).
    Zkc,
    /// `zookeeper-client` 0.11, each contender its own session on a current-thread runtime of
    /// its own thread, as the peers' bench drives it.
    ZkcThreads,
    /// Curator, with the class path of its compiled worker.
    Curator(String),
    /// The wire floor (`common::wire`), a blocking socket and a thread per session, its lock
    /// nodes shaped as ours and Curator's are.
    Floor,
}

impl Peer {
    fn name(&self) -> &'static str {
        match self {
            Peer::Ours => "ours",
            Peer::Zkc => "zkc",
            Peer::ZkcThreads => "zkc-threads",
            Peer::Curator(_) => "Curator",
            Peer::Floor => "floor",
        }
    }

    fn command(&self, connect: &str, path: &str, sessions: usize) -> Command {
        match self {
            Peer::Curator(cp) => {
                let mut cmd = Command::new("java");
                // The JVM's own warnings go to stderr: stdout is the worker's protocol.
                cmd.args(["-Xmx1g", "-Xss256k", "-Xlog:all=warning:stderr", "-cp", cp])
                    .arg("CuratorScaleWorker")
                    .args([connect, path, &sessions.to_string()]);
                cmd
            }
            _ => {
                let mut cmd = Command::new(std::env::current_exe().expect("this binary"));
                let spec = format!("{} {connect} {path} {sessions}", self.name());
                cmd.env("ZKR_SCALE_WORKER", spec);
                cmd
            }
        }
    }
}

/// One measurement's row, printed and as JSON.
fn row(n: usize, block: usize, client: &str, m: &Measured, fsync: bool) {
    println!(
        "{:>6} {:>5} {:>11} {:>6} {:>9.1} {:>9.0} {:>9.0} {:>11.0} {:>11.0} {:>9.0} {:>11.0}",
        n,
        block,
        client,
        m.procs,
        m.per_second,
        m.p50_us,
        m.p99_us,
        m.server_us_per_acq,
        m.server_bytes_out_per_acq,
        m.server_bytes_in_per_acq,
        m.client_us_per_acq
    );
    json(
        "scale",
        &[
            ("config", s(&format!("mutex N={n}"))),
            ("block", f(block as f64)),
            ("client", s(client)),
            ("processes", f(m.procs as f64)),
            ("acquisitions", f(m.acquisitions as f64)),
            ("per_second", f(m.per_second)),
            ("handoff_p50_us", f(m.p50_us)),
            ("handoff_p99_us", f(m.p99_us)),
            ("server_us_per_acq", f(m.server_us_per_acq)),
            ("server_bytes_out_per_acq", f(m.server_bytes_out_per_acq)),
            ("server_bytes_in_per_acq", f(m.server_bytes_in_per_acq)),
            ("client_us_per_acq", f(m.client_us_per_acq)),
            ("jit_quiet", s(if m.jit_quiet { "true" } else { "false" })),
            ("fsync", s(if fsync { "yes" } else { "no" })),
        ],
    );
}

/// The median of `v`'s finite values and their range, `(median, min, max)`; NaNs if none.
fn spread(v: Vec<f64>) -> (f64, f64, f64) {
    // A figure that could not be had (a ratio to a block with no handoff) is left out.
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[0], v[v.len() - 1])
}

/// One N's figures over its blocks: each client's medians with their range, and ours over each
/// other client, block by block (a block's clients ran back to back), as a median and range.
fn summary(n: usize, cells: &Cells) {
    let show = |(m, lo, hi): (f64, f64, f64)| format!("{m:.0} ({lo:.0}–{hi:.0})");
    let show2 = |(m, lo, hi): (f64, f64, f64)| format!("{m:.2} ({lo:.2}–{hi:.2})");
    println!("\nN = {n}, median of {} blocks (range):", cells[0].1.len());
    println!(
        "{:>11} {:>22} {:>22} {:>22} {:>22} {:>22}",
        "client", "acq/s", "handoff p50 µs", "server µs/acq", "server B out/acq", "client µs/acq"
    );
    let of = |ms: &[Measured], pick: fn(&Measured) -> f64| spread(ms.iter().map(pick).collect());
    for (name, ms) in cells {
        let quiet = ms.iter().filter(|m| m.jit_quiet).count();
        println!(
            "{:>11} {:>22} {:>22} {:>22} {:>22} {:>22}{}",
            name,
            show(of(ms, |m| m.per_second)),
            show(of(ms, |m| m.p50_us)),
            show(of(ms, |m| m.server_us_per_acq)),
            show(of(ms, |m| m.server_bytes_out_per_acq)),
            show(of(ms, |m| m.client_us_per_acq)),
            if quiet < ms.len() {
                format!(
                    "  (JIT not quiet in {} of {} blocks)",
                    ms.len() - quiet,
                    ms.len()
                )
            } else {
                String::new()
            }
        );
        let mut fields = vec![
            ("config", s(&format!("mutex N={n}"))),
            ("client", s(name)),
            ("blocks", f(ms.len() as f64)),
            ("jit_quiet_blocks", f(quiet as f64)),
        ];
        for (key, pick) in FIGURES {
            let (m, lo, hi) = of(ms, pick);
            fields.extend([
                (leak(format!("{key}_median")), f(m)),
                (leak(format!("{key}_min")), f(lo)),
                (leak(format!("{key}_max")), f(hi)),
            ]);
        }
        json("scale_summary", &fields);
    }
    let Some((_, ours)) = cells.iter().find(|(name, _)| *name == "ours") else {
        return;
    };
    for (name, theirs) in cells.iter().filter(|(name, _)| *name != "ours") {
        let ratios = |pick: fn(&Measured) -> f64| {
            spread(
                ours.iter()
                    .zip(theirs)
                    .map(|(o, t)| pick(o) / pick(t))
                    .collect(),
            )
        };
        let (rate, p50, server, client) = (
            ratios(|m| m.per_second),
            ratios(|m| m.p50_us),
            ratios(|m| m.server_us_per_acq),
            ratios(|m| m.client_us_per_acq),
        );
        println!(
            "ours ÷ {name}: acq/s {}, handoff p50 {}, server µs/acq {}, client µs/acq {}",
            show2(rate),
            show2(p50),
            show2(server),
            show2(client)
        );
        json(
            "scale_ratio",
            &[
                ("config", s(&format!("mutex N={n}"))),
                ("over", s(name)),
                ("per_second_median", f(rate.0)),
                ("per_second_min", f(rate.1)),
                ("per_second_max", f(rate.2)),
                ("handoff_p50_median", f(p50.0)),
                ("server_us_per_acq_median", f(server.0)),
                ("client_us_per_acq_median", f(client.0)),
            ],
        );
    }
}

/// One figure of a measurement.
type Figure = fn(&Measured) -> f64;

/// The figures a summary gives, by their JSON names.
const FIGURES: [(&str, Figure); 6] = [
    ("per_second", |m| m.per_second),
    ("handoff_p50_us", |m| m.p50_us),
    ("handoff_p99_us", |m| m.p99_us),
    ("server_us_per_acq", |m| m.server_us_per_acq),
    ("server_bytes_out_per_acq", |m| m.server_bytes_out_per_acq),
    ("client_us_per_acq", |m| m.client_us_per_acq),
];

/// Draws `benches/scale.png` again from a run's record: its `scale` rows, one a client, block
/// and N.
fn replot(file: &str) {
    let text = std::fs::read_to_string(file).expect("the run's record");
    let mut curve: Curve = Vec::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(r#"{"bench":"scale","#))
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let num = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(f64::NAN)
        };
        let n = v
            .get("config")
            .and_then(serde_json::Value::as_str)
            .and_then(|c| c.strip_prefix("mutex N="))
            .and_then(|n| n.parse::<usize>().ok());
        let client = v.get("client").and_then(serde_json::Value::as_str);
        let (Some(n), Some(client)) = (n, client) else {
            continue;
        };
        let m = Measured {
            procs: num("processes") as usize,
            acquisitions: num("acquisitions") as usize,
            per_second: num("per_second"),
            p50_us: num("handoff_p50_us"),
            p99_us: num("handoff_p99_us"),
            server_us_per_acq: num("server_us_per_acq"),
            server_bytes_out_per_acq: num("server_bytes_out_per_acq"),
            server_bytes_in_per_acq: num("server_bytes_in_per_acq"),
            client_us_per_acq: num("client_us_per_acq"),
            jit_quiet: v.get("jit_quiet").and_then(serde_json::Value::as_str) == Some("true"),
        };
        if curve.last().is_none_or(|(last, _)| *last != n) {
            curve.push((n, Vec::new()));
        }
        let Some((_, cells)) = curve.last_mut() else {
            continue;
        };
        match cells.iter_mut().find(|(c, _)| *c == client) {
            Some((_, ms)) => ms.push(m),
            None => cells.push((leak(client.to_owned()), vec![m])),
        }
    }
    let name = format!("{}/scale.png", env!("CARGO_MANIFEST_DIR"));
    match plot(&curve, &name) {
        Ok(()) => println!("wrote {name}"),
        Err(e) => println!("no plot: {e}"),
    }
}

/// `benches/scale.png`: each client's median throughput, server bytes out per acquisition and
/// contender, and client CPU per acquisition, against log2 N.
fn plot(curve: &[(usize, Cells)], file: &str) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::{BLACK, BLUE, CYAN, GREEN, MAGENTA};
    let colour = |name: &str| match name {
        "ours" => BLUE,
        "zkc" => GREEN,
        "zkc-threads" => CYAN,
        "Curator" => MAGENTA,
        _ => BLACK,
    };
    let lines = |pick: &dyn Fn(usize, &Measured) -> f64| -> Vec<Line> {
        let Some((_, first)) = curve.first() else {
            return Vec::new();
        };
        first
            .iter()
            .map(|(name, _)| {
                let points = curve
                    .iter()
                    .filter_map(|(n, cells)| {
                        let (_, ms) = cells.iter().find(|(c, _)| c == name)?;
                        let (median, _, _) = spread(ms.iter().map(|m| pick(*n, m)).collect());
                        median.is_finite().then(|| ((*n as f64).log2(), median))
                    })
                    .collect();
                (name.to_string(), colour(name), points)
            })
            .collect()
    };
    plot_panels(
        file,
        &[
            (
                "acquisitions per second (median of blocks)",
                "contenders, log2 N",
                "acq/s",
                lines(&|_, m| m.per_second),
            ),
            (
                "server bytes sent per acquisition, per contender",
                "contenders, log2 N",
                "bytes",
                lines(&|n, m| m.server_bytes_out_per_acq / n as f64),
            ),
            (
                "client CPU per acquisition",
                "contenders, log2 N",
                "µs",
                lines(&|_, m| m.client_us_per_acq),
            ),
        ],
    )
}

/// Each N's blocks, client by client: N, and each client's figures, one a block.
type Curve = Vec<(usize, Cells)>;
/// One N's blocks, client by client.
type Cells = Vec<(&'static str, Vec<Measured>)>;

/// One configuration's figures.
struct Measured {
    procs: usize,
    acquisitions: usize,
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
    server_us_per_acq: f64,
    server_bytes_out_per_acq: f64,
    server_bytes_in_per_acq: f64,
    client_us_per_acq: f64,
    /// Whether every JVM worker's JIT was quiet when the window began.
    jit_quiet: bool,
}

/// Runs `n` of `peer`'s contenders over as many processes as `PER_PROCESS` asks: `warm` (and
/// for JVMs until their JIT is quiet), then the measured window `run_for`.
fn measure(
    server: &TestingServer,
    peer: &Peer,
    n: usize,
    warm: Duration,
    run_for: Duration,
    tag: &str,
) -> Measured {
    let quick = args().quick;
    let procs = n.div_ceil(PER_PROCESS).max(1);
    let path = format!("/bench/scale/{tag}-{}", peer.name());
    let connect = server.connect_string();
    // `zookeeper-client`'s lock needs its parent made (ours and Curator's make it).
    let helper = Client::builder(&connect).connect().expect("connect");
    helper.ensure_path(&path).expect("path");
    helper.close();
    let mut workers: Vec<Worker> = (0..procs)
        .map(|i| {
            let sessions = n / procs + usize::from(i < n % procs);
            Worker::start(peer.command(&connect, &path, sessions))
        })
        .collect();
    for w in &mut workers {
        assert_eq!(w.next_line(), "ready");
    }
    for w in &mut workers {
        w.say("go");
    }
    let pids: Vec<String> = workers.iter().map(|w| w.child.id().to_string()).collect();
    // The warm-up is part of the measurement's design: sleeps through it.
    thread::sleep(warm);
    let jit_quiet = match peer {
        Peer::Curator(_) => jvm_jit_quiet(
            &mut workers,
            Duration::from_secs(if quick { 5 } else { 120 }),
        ),
        _ => true,
    };
    let pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let port = server.addr().port();
    let workers_cpu = || pids.iter().map(|p| cpu_of(p)).sum::<Duration>();
    let window_start = now_ns();
    let before = (cpu_of(&pid), server_bytes(port), workers_cpu());
    thread::sleep(run_for);
    let window_end = now_ns();
    let after = (cpu_of(&pid), server_bytes(port), workers_cpu());
    for w in &mut workers {
        w.say("stop");
    }
    let mut holds: Vec<(u64, u64)> = Vec::new();
    for w in &mut workers {
        loop {
            let line = w.next_line();
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("hold") => {
                    let a: u64 = parts.next().and_then(|v| v.parse().ok()).expect("acq");
                    let r: u64 = parts.next().and_then(|v| v.parse().ok()).expect("rel");
                    holds.push((a, r));
                }
                Some("done") => break,
                _ => panic!("a worker said {line:?}"),
            }
        }
    }
    for mut w in workers {
        let status = w.child.wait().expect("a worker's end");
        assert!(status.success(), "a worker failed: {status}");
    }
    holds.sort_unstable();
    for pair in holds.windows(2) {
        let ((_, released), (acquired, _)) = (pair[0], pair[1]);
        assert!(
            acquired >= released,
            "two holders at once: one released at {released} ns, the next acquired at {acquired}"
        );
    }
    // Only the holds the window saw count (all are checked for overlaps above).
    let window = window_start..window_end;
    let counted = holds.iter().filter(|(a, _)| window.contains(a)).count();
    let mut handoffs: Vec<Duration> = holds
        .windows(2)
        .filter(|pair| window.contains(&pair[1].0))
        .map(|pair| Duration::from_nanos(pair[1].0 - pair[0].1))
        .collect();
    let count = counted.max(1) as f64;
    let per_acq = |d: Duration| d.as_secs_f64() * 1e6 / count;
    Measured {
        procs,
        acquisitions: counted,
        per_second: counted as f64 / Duration::from_nanos(window_end - window_start).as_secs_f64(),
        p50_us: pct(&mut handoffs, 0.5),
        p99_us: pct(&mut handoffs, 0.99),
        server_us_per_acq: per_acq(after.0.saturating_sub(before.0)),
        server_bytes_out_per_acq: after.1 .0.saturating_sub(before.1 .0) as f64 / count,
        server_bytes_in_per_acq: after.1 .1.saturating_sub(before.1 .1) as f64 / count,
        client_us_per_acq: per_acq(after.2.saturating_sub(before.2)),
        jit_quiet,
    }
}

/// Waits until the server holds no ephemeral node (every contender of the last configuration
/// gone, its session closed or expired), at most 60 s; says so if it did not get there.
fn settled(server: &TestingServer) {
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ephemerals = server.four_letter("mntr").ok().and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("zk_ephemerals_count"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        match ephemerals {
            Some(0) => return,
            _ if std::time::Instant::now() >= until => {
                println!("(the last configuration's nodes still there after 60 s: {ephemerals:?})");
                return;
            }
            // Polling the server's count is the wait's design.
            _ => thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A worker process of this binary: `ours|zkc|zkc-threads|floor connect path sessions` in
/// `ZKR_SCALE_WORKER`.
/// Connects its sessions, says `ready`; on `go` its contenders take the lock in turn; on
/// `stop` they end, and it reports each hold (`hold <acquired> <released>`) and `done`.
fn worker(spec: &str) {
    init_logs();
    let mut parts = spec.split(' ');
    let (kind, connect, path, sessions) =
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(k), Some(c), Some(p), Some(n)) => {
                (k, c.to_owned(), p.to_owned(), n.parse().expect("sessions"))
            }
            _ => panic!("ZKR_SCALE_WORKER: {spec:?}"),
        };
    match kind {
        "zkc" => return zkc_worker(&connect, &path, sessions, true),
        "zkc-threads" => return zkc_worker(&connect, &path, sessions, false),
        "floor" => return floor_worker(&connect, &path, sessions),
        _ => {}
    }
    let clients = connect_sessions(&connect, sessions, |connect| {
        Client::builder(connect)
            .session_timeout(Duration::from_secs(30))
            .connection_timeout(Duration::from_secs(60))
    });
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "ready").expect("stdout");
    let mut stdin = std::io::stdin().lock().lines();
    if !matches!(stdin.next(), Some(Ok(line)) if line == "go") {
        return;
    }
    let holds: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let lock = InterProcessMutex::new(c, &path).expect("lock");
            let holds = holds.clone();
            thread::spawn(move || {
                let mut mine = Vec::new();
                // Ends when the client is closed under it (`stop`).
                while let Ok(guard) = lock.acquire() {
                    let acquired = now_ns();
                    let released = now_ns();
                    drop(guard);
                    mine.push((acquired, released));
                }
                holds.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let _ = stdin.next(); // stop
    for c in &clients {
        c.close();
    }
    report(threads, &holds);
}

/// The `zookeeper-client` worker: each contender its own session; a hold is its lock
/// (Curator's layout, `LockPrefix::new_curator`) and the awaited delete of its node, as the
/// peers' bench does (the guard would delete in the background). With `shared`, the
/// contenders are tasks on one multi-threaded runtime (a worker thread a core); without, each
/// has a thread and current-thread runtime of its own. `stop` cancels the waits.
fn zkc_worker(connect: &str, path: &str, sessions: usize, shared: bool) {
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holds: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let contender = || {
        zkc_contender(
            connect.to_owned(),
            path.to_owned(),
            (go_rx.clone(), stop_rx.clone()),
            ready_tx.clone(),
            holds.clone(),
        )
    };
    let shared_rt = shared.then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime")
    });
    let (tasks, threads): (Vec<_>, Vec<_>) = match &shared_rt {
        Some(rt) => (
            (0..sessions).map(|_| rt.spawn(contender())).collect(),
            vec![],
        ),
        None => (
            vec![],
            (0..sessions)
                .map(|_| {
                    let one = contender();
                    thread::spawn(move || {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("runtime")
                            .block_on(one)
                    })
                })
                .collect(),
        ),
    };
    drop(ready_tx);
    for _ in 0..sessions {
        ready_rx.recv().expect("a zookeeper-client contender died");
    }
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "ready").expect("stdout");
    let mut stdin = std::io::stdin().lock().lines();
    if matches!(stdin.next(), Some(Ok(line)) if line == "go") {
        let _ = go_tx.send(true);
        let _ = stdin.next(); // stop
    }
    let _ = stop_tx.send(true);
    drop(go_tx);
    if let Some(rt) = shared_rt {
        rt.block_on(async {
            for t in tasks {
                t.await.expect("a contender");
            }
        });
    }
    report(threads, &holds);
}

/// One `zookeeper-client` contender (see [`zkc_worker`]): connects, says so on `ready`, waits
/// for `go`, takes the lock in turn until `stop`, and adds its holds to `holds`.
async fn zkc_contender(
    connect: String,
    path: String,
    (mut go, mut stop): (
        tokio::sync::watch::Receiver<bool>,
        tokio::sync::watch::Receiver<bool>,
    ),
    ready: std::sync::mpsc::Sender<()>,
    holds: Arc<Mutex<Vec<(u64, u64)>>>,
) {
    // The session timeout ours and Curator's workers ask for (its own default, 6 s, lets an
    // overloaded server's sessions expire at N = 4 096).
    let c = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&connect)
        .await
        .expect("zookeeper-client connect");
    let _ = ready.send(());
    // Dropped, so that a contender that failed to connect ends the wait for `ready` (its
    // sender dropped with its panic) instead of hanging it.
    drop(ready);
    if go.wait_for(|g| *g).await.is_err() {
        return;
    }
    let mut mine = Vec::new();
    loop {
        let prefix = zookeeper_client::LockPrefix::new_curator(&path, "lock-").expect("prefix");
        let lock = tokio::select! {
            lock = c.lock(prefix, b"", zookeeper_client::Acls::anyone_all()) => lock,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(lock) = lock else { break };
        let acquired = now_ns();
        let released = now_ns();
        let node = lock.lock_path().to_owned();
        std::mem::forget(lock);
        if c.delete(&node, None).await.is_err() {
            break;
        }
        mine.push((acquired, released));
    }
    holds.lock().unwrap().extend(mine);
    // Closed before the next configuration runs: a client dropped with its runtime would
    // leave its session (and waiting node) to expire during the next one's window. Bounded: a
    // close that does not finish is left.
    let mut state = c.state_watcher();
    drop(c);
    let closed = async {
        while !matches!(
            state.peek_state(),
            zookeeper_client::SessionState::Closed
                | zookeeper_client::SessionState::Expired
                | zookeeper_client::SessionState::AuthFailed
        ) {
            state.changed().await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), closed).await;
}

/// The wire floor's worker: a blocking session and a thread per contender, each taking the
/// lock in turn with nothing spare (`common::wire`), nodes shaped as ours and Curator's. On
/// `stop` each contender ends after its next hold, so the line drains in order (a waiter's
/// blocking read has no other way out) and every session is closed, its node gone.
fn floor_worker(connect: &str, path: &str, sessions: usize) {
    use common::wire::Wire;
    use std::sync::atomic::{AtomicBool, Ordering};
    let wires: Vec<Wire> = (0..sessions)
        .map(|_| {
            let mut w = Wire::connect(connect).expect("the wire floor's session");
            w.shape_like_ours();
            // A waiter in a line of 4 096 may wait longer than its session's 30 s.
            w.keep_alive().expect("a read timeout");
            w
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(std::sync::Barrier::new(sessions + 1));
    let holds: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let threads: Vec<_> = wires
        .into_iter()
        .map(|mut w| {
            let (path, stop, go, holds) =
                (path.to_owned(), stop.clone(), go.clone(), holds.clone());
            thread::spawn(move || {
                go.wait();
                let mut mine = Vec::new();
                loop {
                    let me = w.acquire(&path).expect("a floor contender's turn");
                    let acquired = now_ns();
                    let released = now_ns();
                    let ending = stop.load(Ordering::SeqCst);
                    w.delete(&format!("{path}/{me}")).expect("a floor release");
                    mine.push((acquired, released));
                    if ending {
                        break;
                    }
                }
                w.close();
                holds.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "ready").expect("stdout");
    let mut stdin = std::io::stdin().lock().lines();
    if !matches!(stdin.next(), Some(Ok(line)) if line == "go") {
        // Told nothing more (the bench ended early): the contenders were never let go; their
        // sessions are left to expire.
        std::process::exit(0);
    }
    go.wait();
    let _ = stdin.next(); // stop
    stop.store(true, Ordering::SeqCst);
    report(threads, &holds);
}

/// Waits for a worker's contenders to end, then reports their holds and `done`.
fn report(threads: Vec<thread::JoinHandle<()>>, holds: &Mutex<Vec<(u64, u64)>>) {
    for t in threads {
        t.join().expect("a contender");
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (a, r) in holds.lock().unwrap().iter() {
        writeln!(out, "hold {a} {r}").expect("stdout");
    }
    writeln!(out, "done").expect("stdout");
}
