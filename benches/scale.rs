//! Issue 40, item 1 (first part): one lock, N contenders, as the work grows. N sessions spread
//! over several processes of this bench (each a copy of this binary, at most 256 sessions
//! each, one thread per contender), all taking one `InterProcessMutex` in turn for a window.
//!
//! Every contender enters the line at once, which costs the server N listings of up to N names
//! (O(N²) bytes); the figures are of the window that follows a warm-up long enough for that
//! burst to pass (2 s per 256 contenders, at least 2 s), the line's steady state.
//!
//! Per configuration: acquisitions per second; the handoff latency (from a holder's release to
//! the next holder's acquire, on the machine's one monotonic clock, merged from every process's
//! records, which also prove no two holds overlapped); the server's CPU and the bytes it sent
//! and received per acquisition (summed over its client sockets by `ss`, before and after);
//! our clients' CPU per acquisition.
//!
//! `cargo bench --bench scale [-- --quick] [-- --fsync] [-- --n 8,64]`. Needs `ss` (iproute2).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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
    // The server warmed by the smallest configuration, run until a window adds little of the
    // server's JIT (as the peers' bench does), at most 10 windows.
    let warm = ns.first().copied().unwrap_or(8);
    let mut last = f64::MAX;
    for round in 0..10 {
        let before = jit_ms(&server);
        let short = Duration::from_millis(300);
        measure(&server, warm, short, short, &format!("warm{round}"));
        let added = jit_ms(&server) - before;
        if added < 20.0 || (args.quick && round >= 1) || added >= last && round >= 3 {
            break;
        }
        last = added;
    }
    println!(
        "{:>6} {:>6} {:>9} {:>10} {:>10} {:>12} {:>12} {:>12} {:>11}",
        "N",
        "procs",
        "acq/s",
        "p50 µs",
        "p99 µs",
        "srv µs/acq",
        "srv B out",
        "srv B in",
        "cli µs/acq"
    );
    for &n in &ns {
        let m = measure(&server, n, warm_for(n), run_for, &format!("n{n}"));
        println!(
            "{:>6} {:>6} {:>9.1} {:>10.0} {:>10.0} {:>12.0} {:>12.0} {:>12.0} {:>11.0}",
            n,
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
                ("client", s("ours")),
                ("processes", f(m.procs as f64)),
                ("acquisitions", f(m.acquisitions as f64)),
                ("per_second", f(m.per_second)),
                ("handoff_p50_us", f(m.p50_us)),
                ("handoff_p99_us", f(m.p99_us)),
                ("server_us_per_acq", f(m.server_us_per_acq)),
                ("server_bytes_out_per_acq", f(m.server_bytes_out_per_acq)),
                ("server_bytes_in_per_acq", f(m.server_bytes_in_per_acq)),
                ("client_us_per_acq", f(m.client_us_per_acq)),
                ("fsync", s(if args.fsync { "yes" } else { "no" })),
            ],
        );
    }
    admin.close();
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
}

/// A worker process, its sessions connected and waiting for the word.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Worker {
    fn start(connect: &str, path: &str, sessions: usize) -> Worker {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env("ZKR_SCALE_WORKER", format!("{connect} {path} {sessions}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a worker process");
        let stdin = child.stdin.take().expect("its stdin");
        let lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        Worker {
            child,
            stdin,
            lines,
        }
    }

    fn next_line(&mut self) -> String {
        match self.lines.next() {
            Some(Ok(line)) => line,
            other => panic!("a worker ended early: {other:?}"),
        }
    }
}

/// Runs `n` contenders over as many processes as `PER_PROCESS` asks, for `warm` and then the
/// measured window `run_for`.
fn measure(
    server: &TestingServer,
    n: usize,
    warm: Duration,
    run_for: Duration,
    tag: &str,
) -> Measured {
    let procs = n.div_ceil(PER_PROCESS).max(1);
    let path = format!("/bench/scale/{tag}");
    let connect = server.connect_string();
    let mut workers: Vec<Worker> = (0..procs)
        .map(|i| {
            let sessions = n / procs + usize::from(i < n % procs);
            Worker::start(&connect, &path, sessions)
        })
        .collect();
    for w in &mut workers {
        assert_eq!(w.next_line(), "ready");
    }
    let pid = server.pid().map(|p| p.to_string()).unwrap_or_default();
    let port = server.addr().port();
    let began = now_ns();
    let window = (
        began + warm.as_nanos() as u64,
        began + (warm + run_for).as_nanos() as u64,
    );
    for w in &mut workers {
        writeln!(w.stdin, "go {} {}", window.0, window.1).expect("tell a worker");
    }
    // The window is the measurement: sleeps to its start and its end.
    thread::sleep(Duration::from_nanos(window.0.saturating_sub(now_ns())));
    let (cpu_before, bytes_before) = (cpu_of(&pid), server_bytes(port));
    thread::sleep(Duration::from_nanos(window.1.saturating_sub(now_ns())));
    let (cpu_after, bytes_after) = (cpu_of(&pid), server_bytes(port));
    let mut holds: Vec<(u64, u64)> = Vec::new();
    let mut client_ns = 0u64;
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
                Some("cpu") => {
                    client_ns += parts
                        .next()
                        .and_then(|v| v.parse::<u64>().ok())
                        .expect("cpu")
                }
                Some("done") => break,
                _ => panic!("a worker said {line:?}"),
            }
        }
    }
    for w in &mut workers {
        let _ = writeln!(w.stdin, "close");
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
    let counted = holds
        .iter()
        .filter(|(a, _)| (window.0..window.1).contains(a))
        .count();
    let in_window = |&(a, _): &(u64, u64)| (window.0..window.1).contains(&a);
    let mut handoffs: Vec<Duration> = holds
        .windows(2)
        .filter(|pair| in_window(&pair[1]))
        .map(|pair| Duration::from_nanos(pair[1].0 - pair[0].1))
        .collect();
    let count = counted.max(1) as f64;
    let (out, inn) = (
        bytes_after.0.saturating_sub(bytes_before.0),
        bytes_after.1.saturating_sub(bytes_before.1),
    );
    Measured {
        procs,
        acquisitions: counted,
        per_second: counted as f64 / run_for.as_secs_f64(),
        p50_us: pct(&mut handoffs, 0.5),
        p99_us: pct(&mut handoffs, 0.99),
        server_us_per_acq: cpu_after.saturating_sub(cpu_before).as_secs_f64() * 1e6 / count,
        server_bytes_out_per_acq: out as f64 / count,
        server_bytes_in_per_acq: inn as f64 / count,
        client_us_per_acq: client_ns as f64 / 1e3 / count,
    }
}

/// The bytes the server has sent and received on its client port's connections, summed
/// (`ss`'s `bytes_sent` and `bytes_received` of each socket whose local port is `port`).
fn server_bytes(port: u16) -> (u64, u64) {
    let out = Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( sport = :{port} )"))
        .output()
        .expect("ss (apt-get install iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix(name)?.parse::<u64>().ok())
            .sum()
    };
    (field("bytes_sent:"), field("bytes_received:"))
}

/// The server JVM's JIT compile time so far, in milliseconds (`jstat -compiler`), or 0.
fn jit_ms(server: &TestingServer) -> f64 {
    let Some(pid) = server.pid() else { return 0.0 };
    let out = Command::new("jstat")
        .args(["-compiler", &pid.to_string()])
        .output();
    let Ok(out) = out else { return 0.0 };
    let text = String::from_utf8_lossy(&out.stdout);
    // Columns: Compiled Failed Invalid Time FailedType FailedMethod; Time in seconds.
    text.lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
        .map_or(0.0, |secs| secs * 1000.0)
}

/// The machine's monotonic clock, in nanoseconds: one clock for every process.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A worker process: `connect path sessions` in `ZKR_SCALE_WORKER`. Connects its sessions,
/// says `ready`, runs on `go <start> <end>` until `end` (ns of the monotonic clock), reports
/// each hold (`hold <acquired> <released>`), its CPU
/// (`cpu <ns>`, from `start` on) and `done`, and closes its sessions on `close` (or its stdin's end).
fn worker(spec: &str) {
    init_logs();
    let mut parts = spec.split(' ');
    let (connect, path, sessions) = match (parts.next(), parts.next(), parts.next()) {
        (Some(c), Some(p), Some(n)) => (c.to_owned(), p.to_owned(), n.parse().expect("sessions")),
        _ => panic!("ZKR_SCALE_WORKER: {spec:?}"),
    };
    let clients: Vec<Client> = thread::scope(|scope| {
        let handles: Vec<_> = (0..sessions)
            .map(|_| {
                let connect = &connect;
                scope.spawn(move || {
                    Client::builder(connect)
                        .session_timeout(Duration::from_secs(30))
                        .connection_timeout(Duration::from_secs(60))
                        .connect()
                        .expect("connect")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a connect"))
            .collect()
    });
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "ready").expect("stdout");
    let mut stdin = std::io::stdin().lock().lines();
    let (start_ns, end_ns): (u64, u64) = match stdin.next() {
        Some(Ok(line)) => line
            .strip_prefix("go ")
            .and_then(|w| {
                let (a, b) = w.split_once(' ')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .expect("go <start> <end>"),
        _ => return,
    };
    let holds: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let start = Arc::new(Barrier::new(sessions + 1));
    let until = Arc::new(Mutex::new(None::<Instant>));
    let threads: Vec<_> = clients
        .iter()
        .map(|c| {
            let lock = InterProcessMutex::new(c, &path).expect("lock");
            let (holds, start, until) = (holds.clone(), start.clone(), until.clone());
            thread::spawn(move || {
                start.wait();
                let end = until.lock().unwrap().expect("the window's end");
                let mut mine = Vec::new();
                while Instant::now() < end {
                    let Ok(Some(guard)) = lock.try_acquire_until(end) else {
                        break;
                    };
                    let acquired = now_ns();
                    let released = now_ns();
                    drop(guard);
                    mine.push((acquired, released));
                }
                holds.lock().unwrap().extend(mine);
            })
        })
        .collect();
    *until.lock().unwrap() =
        Some(Instant::now() + Duration::from_nanos(end_ns.saturating_sub(now_ns())));
    start.wait();
    // The window is the measurement: the CPU used from its start.
    thread::sleep(Duration::from_nanos(start_ns.saturating_sub(now_ns())));
    let cpu_before = process_cpu();
    for t in threads {
        t.join().expect("a contender");
    }
    let cpu = process_cpu().saturating_sub(cpu_before);
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (a, r) in holds.lock().unwrap().iter() {
        writeln!(out, "hold {a} {r}").expect("stdout");
    }
    writeln!(out, "cpu {}", cpu.as_nanos()).expect("stdout");
    writeln!(out, "done").expect("stdout");
    drop(out);
    // Waits for `close` (the parent has read the server's counters) before closing.
    let _ = stdin.next();
    for c in clients {
        c.close();
    }
}
