//! Issue 40, item 1: one lock, N contenders, as the work grows, ours beside Apache Curator 5.4
//! and `zookeeper-client` 0.11. N sessions spread over several worker processes (at most 256
//! sessions each, one thread per contender): for ours and `zookeeper-client`, copies of this
//! binary; for Curator, JVMs running `benches/CuratorScaleWorker.java`, the way a Curator user
//! writes it. All take one lock of Curator's node layout in turn; they alternate, in an order
//! that rotates, configuration by configuration on one server, which the first configuration
//! warms. A JVM worker's window
//! starts only once its JIT has been quiet for a second (`jstat -compiler`, at most 120 s).
//!
//! Every contender enters the line at once, which costs the server N listings of up to N names
//! (O(N²) bytes); the figures are of the window that follows a warm-up long enough for that
//! burst to pass (2 s per 256 contenders, at least 2 s), the line's steady state.
//!
//! Per configuration: acquisitions per second; the handoff latency (from a holder's release to
//! the next holder's acquire, on the machine's one monotonic clock, which Java's `nanoTime`
//! reads too, merged from every process's records, which also prove no two holds overlapped);
//! the server's CPU and the bytes it sent and received per acquisition (summed over its client
//! sockets by `ss`, before and after); the workers' CPU per acquisition.
//!
//! `cargo bench --bench scale [-- --quick] [-- --fsync] [-- --n 8,64] [-- --only ours,zkc]`. Needs `ss` (iproute2);
//! skips Curator, saying why, without Java or Curator.

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
    let ns: Vec<usize> = match std::env::args().skip_while(|a| a != "--n").nth(1) {
        Some(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        None if args.quick => vec![8, 64],
        None => vec![8, 64, 256, 1024, 4096],
    };
    let run_for = Duration::from_millis(if args.quick { 1000 } else { 10_000 });
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
    let mut peers = vec![Peer::Ours, Peer::Zkc];
    match curator_driver("CuratorScaleWorker") {
        Ok(cp) => peers.push(Peer::Curator(cp)),
        Err(why) => {
            json("scale", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
        }
    }
    // `--only ours,zkc`: these clients alone.
    if let Some(only) = std::env::args().skip_while(|a| a != "--only").nth(1) {
        peers.retain(|p| only.split(',').any(|o| o.eq_ignore_ascii_case(p.name())));
    }
    assert!(
        !peers.is_empty(),
        "--only names none of ours, zkc, Curator (that can run here)"
    );
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
        "{:>6} {:>8} {:>6} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9} {:>11}",
        "N",
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
    for (i, &n) in ns.iter().enumerate() {
        // Alternated: the order rotates from one configuration to the next.
        let mut order: Vec<&Peer> = peers.iter().collect();
        order.rotate_left(i % peers.len());
        for peer in order {
            let m = measure(&server, peer, n, warm_for(n), run_for, &format!("n{n}"));
            println!(
                "{:>6} {:>8} {:>6} {:>9.1} {:>9.0} {:>9.0} {:>11.0} {:>11.0} {:>9.0} {:>11.0}",
                n,
                peer.name(),
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
                    ("client", s(peer.name())),
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
                    ("fsync", s(if args.fsync { "yes" } else { "no" })),
                ],
            );
        }
    }
    admin.close();
}

/// Whose contenders a worker process runs.
enum Peer {
    Ours,
    /// `zookeeper-client` 0.11, each contender its own session on a current-thread runtime of
    /// its own thread, as the peers' bench drives it.
    Zkc,
    /// Curator, with the class path of its compiled worker.
    Curator(String),
}

impl Peer {
    fn name(&self) -> &'static str {
        match self {
            Peer::Ours => "ours",
            Peer::Zkc => "zkc",
            Peer::Curator(_) => "Curator",
        }
    }

    fn command(&self, connect: &str, path: &str, sessions: usize) -> Command {
        match self {
            Peer::Ours | Peer::Zkc => {
                let mut cmd = Command::new(std::env::current_exe().expect("this binary"));
                let spec = format!("{} {connect} {path} {sessions}", self.name());
                cmd.env("ZKR_SCALE_WORKER", spec);
                cmd
            }
            Peer::Curator(cp) => {
                let mut cmd = Command::new("java");
                cmd.args(["-Xmx1g", "-Xss256k", "-cp", cp, "CuratorScaleWorker"])
                    .args([connect, path, &sessions.to_string()]);
                cmd
            }
        }
    }
}

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
        Peer::Ours | Peer::Zkc => true,
        Peer::Curator(_) => jit_quiet(&workers, Duration::from_secs(if quick { 5 } else { 120 })),
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

/// A worker process of this binary: `ours|zkc connect path sessions` in `ZKR_SCALE_WORKER`.
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
    if kind == "zkc" {
        return zkc_worker(&connect, &path, sessions);
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

/// The `zookeeper-client` worker: one thread and current-thread runtime per contender, each
/// with its own session; a hold is its lock (Curator's layout, `LockPrefix::new_curator`) and
/// the awaited delete of its node, as the peers' bench does (the guard would delete in the
/// background). `stop` cancels the waits.
fn zkc_worker(connect: &str, path: &str, sessions: usize) {
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holds: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let threads: Vec<_> = (0..sessions)
        .map(|_| {
            let (connect, path) = (connect.to_owned(), path.to_owned());
            let (mut go, mut stop, ready) = (go_rx.clone(), stop_rx.clone(), ready_tx.clone());
            let holds = holds.clone();
            thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    // The session timeout ours and Curator's workers ask for (its own
                    // default, 6 s, lets an overloaded server's sessions expire at N = 4 096).
                    let c = zookeeper_client::Client::connector()
                        .with_session_timeout(Duration::from_secs(30))
                        .connect(&connect)
                        .await
                        .expect("zookeeper-client connect");
                    let _ = ready.send(());
                    // Dropped, so that a contender that failed to connect ends the wait for
                    // `ready` (its sender dropped with its panic) instead of hanging it.
                    drop(ready);
                    if go.wait_for(|g| *g).await.is_err() {
                        return;
                    }
                    let mut mine = Vec::new();
                    loop {
                        let prefix = zookeeper_client::LockPrefix::new_curator(&path, "lock-")
                            .expect("prefix");
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
                    // Closed before the next configuration runs: a client dropped with its
                    // runtime would leave its session (and waiting node) to expire during
                    // the next one's window. Bounded: a close that does not finish is left.
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
                });
            })
        })
        .collect();
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
