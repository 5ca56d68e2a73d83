//! Issue 40, item 4: sessions and memory. N sessions in one process (N = 1, 100, 1 000 and
//! 10 000; a worker process of this bench per N, so that its memory and threads are its
//! own): the memory (resident) and threads each session costs, how long connecting them all
//! takes and when the server counts them all (`mntr`'s `zk_num_alive_connections`); then the
//! server is killed and started again on the same port with the same data: how long until
//! every session is back (its `Reconnected`, on the same session), whether any was lost, and
//! how the reconnects spread (their p50 and p99 after the server answered again, and the most
//! in any 100 ms: the peak connection rate the clients' jitter gives the server).
//!
//! `cargo bench --bench sessions [-- --quick] [-- --n 1,100] [-- --backlog 1024]`. Ours beside
//! `zookeeper-client` 0.11 (its sessions on one two-worker runtime, as an async client runs)
//! and Apache Curator 5.4 (`benches/CuratorSessionsWorker.java`: a `CuratorFramework` per
//! session in one JVM, its memory the whole JVM's growth, heap included, as a user's process
//! would see it); Curator is skipped, saying why, without Java or Curator.

mod common;

use std::io::{BufRead, Write};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::procs::*;
use common::*;
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, ConnectionState};

/// Every session's timeout: long enough to ride out the restart.
const SESSION: Duration = Duration::from_secs(30);
/// Threads connecting sessions at once in a worker.
const CONNECTORS: usize = 64;

fn main() {
    if let Ok(spec) = std::env::var("ZKR_SESSIONS_WORKER") {
        worker(&spec);
        return;
    }
    let args = args();
    let ns: Vec<usize> = match std::env::args().skip_while(|a| a != "--n").nth(1) {
        Some(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        None if args.quick => vec![1, 100],
        None => vec![1, 100, 1000, 10_000],
    };
    init_logs();
    // `--backlog N`: the server's listen queue (`clientPortListenBacklog`; ZooKeeper's default
    // is the JVM's, 50).
    let backlog = std::env::args().skip_while(|a| a != "--backlog").nth(1);
    let server = TestingServer::with_options(ServerOptions {
        max_session_timeout: Duration::from_secs(60),
        config: backlog
            .iter()
            .map(|b| ("clientPortListenBacklog".to_owned(), b.clone()))
            .collect(),
        ..ServerOptions::default()
    })
    .expect("start ZooKeeper (apt-get install zookeeper)");
    println!(
        "{:>6} {:>7} {:>10} {:>9} {:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>6} {:>6} {:>11}",
        "N",
        "client",
        "rss KB/s",
        "threads/s",
        "maps/s",
        "connect ms",
        "server ms",
        "back ms",
        "p50 ms",
        "p99 ms",
        "back",
        "lost",
        "peak /100ms"
    );
    let mut peers = vec!["ours", "zkc"];
    let curator = match curator_driver("CuratorSessionsWorker") {
        Ok(cp) => {
            peers.push("curator");
            Some(cp)
        }
        Err(why) => {
            json("sessions", &[("curator_skipped", s(&why))]);
            println!("Curator skipped: {why}");
            None
        }
    };
    for (i, &n) in ns.iter().enumerate() {
        // Alternated: the order rotates from one N to the next.
        peers.rotate_left(usize::from(i > 0));
        for &peer in &peers {
            let m = measure(&server, n, peer, curator.as_deref());
            println!(
            "{:>6} {:>7} {:>10.1} {:>9.2} {:>7.2} {:>11.0} {:>11.0} {:>9.0} {:>9.0} {:>9.0} {:>6} {:>6} {:>11}",
            n,
            peer,
            m.rss_kb_per_session,
            m.threads_per_session,
            m.maps_per_session,
            m.connect.as_secs_f64() * 1e3,
            m.server_sees.as_secs_f64() * 1e3,
            m.all_back.as_secs_f64() * 1e3,
            m.back_p50.as_secs_f64() * 1e3,
            m.back_p99.as_secs_f64() * 1e3,
            m.back,
            m.lost,
            m.peak_per_100ms
        );
            json(
                "sessions",
                &[
                    ("sessions", f(n as f64)),
                    ("client", s(peer)),
                    ("rss_kb_per_session", f(m.rss_kb_per_session)),
                    ("threads_per_session", f(m.threads_per_session)),
                    ("maps_per_session", f(m.maps_per_session)),
                    ("connect_ms", f(m.connect.as_secs_f64() * 1e3)),
                    ("server_sees_all_ms", f(m.server_sees.as_secs_f64() * 1e3)),
                    ("restart_ms", f(m.restart.as_secs_f64() * 1e3)),
                    ("all_back_ms", f(m.all_back.as_secs_f64() * 1e3)),
                    ("back_p50_ms", f(m.back_p50.as_secs_f64() * 1e3)),
                    ("back_p99_ms", f(m.back_p99.as_secs_f64() * 1e3)),
                    ("back", f(m.back as f64)),
                    ("lost", f(m.lost as f64)),
                    ("peak_reconnects_per_100ms", f(m.peak_per_100ms as f64)),
                ],
            );
            assert_eq!(m.lost, 0, "sessions lost across a short restart");
            assert_eq!(m.back, n, "not every session came back");
        }
    }
}

struct Measured {
    rss_kb_per_session: f64,
    threads_per_session: f64,
    maps_per_session: f64,
    connect: Duration,
    /// From the worker's start of connecting until the server counted every session.
    server_sees: Duration,
    /// The server's downtime: killed, started, answering.
    restart: Duration,
    /// From the server answering again until the last session was back.
    all_back: Duration,
    back_p50: Duration,
    back_p99: Duration,
    back: usize,
    lost: usize,
    peak_per_100ms: usize,
}

/// The server's count of client connections (`mntr`), the bench's own not among them.
fn alive(server: &TestingServer) -> usize {
    server
        .four_letter("mntr")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("zk_num_alive_connections")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

fn measure(server: &TestingServer, n: usize, peer: &str, curator: Option<&str>) -> Measured {
    let cmd = match (peer, curator) {
        ("curator", Some(classpath)) => {
            let mut cmd = Command::new("java");
            cmd.args(["-cp", classpath, "CuratorSessionsWorker"])
                .arg(server.connect_string())
                .arg(n.to_string())
                .arg(SESSION.as_millis().to_string());
            cmd
        }
        _ => {
            let mut cmd = Command::new(std::env::current_exe().expect("this binary"));
            cmd.env(
                "ZKR_SESSIONS_WORKER",
                format!("{} {n} {peer}", server.connect_string()),
            );
            cmd
        }
    };
    let mut w = Worker::start(cmd);
    let base = w.next_line();
    let started = now_ns();
    w.say("connect");
    // The server's count, polled while the worker connects (a bench's design, not a wait for
    // an answer: `mntr` is the server's own view).
    let until = Instant::now() + Duration::from_secs(300);
    while alive(server) < n {
        assert!(
            Instant::now() < until,
            "the server never counted {n} sessions"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let server_sees = Duration::from_nanos(now_ns() - started);
    let connected = w.next_line();
    let field = |line: &str, i: usize| -> f64 {
        line.split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a worker said {line:?}"))
    };
    let rss_kb_per_session = (field(&connected, 2) - field(&base, 1)) / n as f64;
    let threads_per_session = (field(&connected, 3) - field(&base, 2)) / n as f64;
    let maps_per_session = (field(&connected, 4) - field(&base, 3)) / n as f64;
    let connect = Duration::from_secs_f64(field(&connected, 1) / 1e3);
    // The restart: killed and started again, timed until it answers.
    let down = Instant::now();
    server.restart().expect("restart the server");
    let restart = down.elapsed();
    w.say(&format!("answering {}", now_ns()));
    let back = w.next_line();
    w.close_stdin();
    let _ = w.child.wait();
    // `back <count> <lost> <ms after answering, each> ...`
    let mut parts = back.split_whitespace().skip(1);
    let count: usize = parts.next().and_then(|v| v.parse().ok()).expect("count");
    let lost: usize = parts.next().and_then(|v| v.parse().ok()).expect("lost");
    let mut times: Vec<f64> = parts.filter_map(|v| v.parse().ok()).collect();
    times.sort_by(f64::total_cmp);
    let at = |p: f64| -> Duration {
        let i = ((times.len() as f64 * p).ceil() as usize).clamp(1, times.len().max(1)) - 1;
        Duration::from_secs_f64(times.get(i).copied().unwrap_or(0.0).max(0.0) / 1e3)
    };
    let mut peak = 0;
    for (i, &t) in times.iter().enumerate() {
        let within = times[i..].iter().take_while(|&&u| u < t + 100.0).count();
        peak = peak.max(within);
    }
    Measured {
        rss_kb_per_session,
        threads_per_session,
        maps_per_session,
        connect,
        server_sees,
        restart,
        all_back: at(1.0),
        back_p50: at(0.5),
        back_p99: at(0.99),
        back: count,
        lost,
        peak_per_100ms: peak,
    }
}

/// This process's resident memory (KB), threads and memory mappings, from /proc (the kernel
/// allows a process `vm.max_map_count` mappings, 65 530 by default).
fn rss_and_threads() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count() as u64);
    (field("VmRSS:"), field("Threads:"), maps)
}

/// A worker: `connect n` in `ZKR_SESSIONS_WORKER`. Says `base <rss KB> <threads> <maps>`; on
/// `connect`, connects its sessions and says `connected <ms> <rss KB> <threads> <maps>`; on
/// `answering <ns>` (the server is back, at that CLOCK_MONOTONIC instant), waits until every
/// session is back or lost (at most a session timeout) and says
/// `back <count> <lost> <ms after answering, per session back>...`.
fn worker(spec: &str) {
    init_logs();
    // A socket per session: the soft limit on open files up to the hard one.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to read into and then pass back.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    let mut parts = spec.split(' ');
    let (connect, n, peer) = match (parts.next(), parts.next(), parts.next()) {
        (Some(c), Some(n), Some(p)) => (c.to_owned(), n.parse::<usize>().expect("n"), p),
        _ => panic!("ZKR_SESSIONS_WORKER: {spec:?}"),
    };
    let stdout = std::io::stdout();
    let say = |line: String| {
        let mut out = stdout.lock();
        writeln!(out, "{line}").expect("stdout");
        out.flush().expect("stdout");
    };
    let (rss, threads, maps) = rss_and_threads();
    say(format!("base {rss} {threads} {maps}"));
    let mut stdin = std::io::stdin().lock().lines();
    if !matches!(stdin.next(), Some(Ok(l)) if l == "connect") {
        return;
    }
    if peer == "zkc" {
        return zkc_worker(&connect, n, &say, &mut stdin);
    }
    let began = Instant::now();
    let per = n.div_ceil(CONNECTORS).max(1);
    let clients: Vec<Client> = thread::scope(|scope| {
        let handles: Vec<_> = (0..n.div_ceil(per))
            .map(|i| {
                let connect = &connect;
                let count = per.min(n - i * per);
                scope.spawn(move || {
                    (0..count)
                        .map(|_| {
                            Client::builder(connect)
                                .session_timeout(SESSION)
                                .connection_timeout(Duration::from_secs(120))
                                .connect()
                                .expect("connect")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a connector"))
            .collect()
    });
    let took = began.elapsed();
    let subs: Vec<_> = clients.iter().map(Client::subscribe).collect();
    let (rss, threads, maps) = rss_and_threads();
    say(format!(
        "connected {:.1} {rss} {threads} {maps}",
        took.as_secs_f64() * 1e3
    ));
    let Some(answering) = answering(&mut stdin) else {
        return;
    };
    let mut back: Vec<Option<Instant>> = vec![None; n];
    let mut lost = 0;
    let mut settled = 0;
    let until = Instant::now() + SESSION;
    // One thread reads every subscription in turn (a thread per session would cost what is
    // being measured).
    while settled < n && Instant::now() < until {
        let mut any = false;
        for (i, sub) in subs.iter().enumerate() {
            while let Some(e) = sub.try_recv() {
                any = true;
                match e.state {
                    ConnectionState::Reconnected if back[i].is_none() => {
                        back[i] = Some(e.at);
                        settled += 1;
                    }
                    ConnectionState::Lost | ConnectionState::Connected => {
                        lost += 1;
                        settled += 1;
                    }
                    _ => {}
                }
            }
        }
        if !any {
            thread::sleep(Duration::from_millis(2));
        }
    }
    say(report_back(&back, lost, answering));
    for c in &clients {
        c.close();
    }
}

/// Reads `answering <ns>` (the server answers again since that CLOCK_MONOTONIC instant) and
/// returns that instant on this process's clock.
fn answering(stdin: &mut impl Iterator<Item = std::io::Result<String>>) -> Option<Instant> {
    let line = stdin.next()?.ok()?;
    let ns: u64 = line.strip_prefix("answering ")?.parse().ok()?;
    Instant::now().checked_sub(Duration::from_nanos(now_ns().saturating_sub(ns)))
}

/// `back <count> <lost> <ms after answering, per session back>...`
fn report_back(back: &[Option<Instant>], lost: usize, answering: Instant) -> String {
    let times: Vec<String> = back
        .iter()
        .flatten()
        .map(|at| {
            let ms = if *at >= answering {
                at.duration_since(answering).as_secs_f64() * 1e3
            } else {
                -(answering.duration_since(*at).as_secs_f64() * 1e3)
            };
            format!("{ms:.1}")
        })
        .collect();
    format!("back {} {lost} {}", times.len(), times.join(" "))
}

/// The `zookeeper-client` worker: its `n` sessions on one multi-thread runtime of two
/// workers (an async client's way: no thread per session), connected 64 at a time; each
/// session's state watched by a task of its own, which notes when it is `SyncConnected`
/// again after having left it (and `Expired` as lost).
fn zkc_worker(
    connect: &str,
    n: usize,
    say: &impl Fn(String),
    stdin: &mut impl Iterator<Item = std::io::Result<String>>,
) {
    use zookeeper_client::SessionState;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let began = Instant::now();
    let clients: Vec<zookeeper_client::Client> = rt.block_on(async {
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(CONNECTORS));
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (gate, connect) = (gate.clone(), connect.to_owned());
                tokio::spawn(async move {
                    let _turn = gate.acquire_owned().await.expect("gate");
                    zookeeper_client::Client::connector()
                        .with_session_timeout(SESSION)
                        .with_connection_timeout(Duration::from_secs(120))
                        .connect(&connect)
                        .await
                        .expect("zookeeper-client connect")
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.expect("a connect"));
        }
        out
    });
    let took = began.elapsed();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Option<Instant>)>();
    for (i, c) in clients.iter().enumerate() {
        let mut state = c.state_watcher();
        let tx = tx.clone();
        rt.spawn(async move {
            let mut left = false;
            loop {
                match state.changed().await {
                    SessionState::SyncConnected if left => {
                        let _ = tx.send((i, Some(Instant::now())));
                        return;
                    }
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                        let _ = tx.send((i, None));
                        return;
                    }
                    SessionState::SyncConnected => {}
                    _ => left = true,
                }
            }
        });
    }
    drop(tx);
    let (rss, threads, maps) = rss_and_threads();
    say(format!(
        "connected {:.1} {rss} {threads} {maps}",
        took.as_secs_f64() * 1e3
    ));
    let Some(answering) = answering(stdin) else {
        return;
    };
    let mut back: Vec<Option<Instant>> = vec![None; n];
    let mut lost = 0;
    let until = Instant::now() + SESSION;
    for _ in 0..n {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(left) {
            Ok((i, Some(at))) => back[i] = Some(at),
            Ok((_, None)) => lost += 1,
            Err(_) => break,
        }
    }
    say(report_back(&back, lost, answering));
    // Closed and waited for (bounded): a session left to expire would do so during the next
    // configuration's measurement.
    let mut watchers: Vec<_> = clients.iter().map(|c| c.state_watcher()).collect();
    drop(clients);
    rt.block_on(async {
        let closed = async {
            for w in &mut watchers {
                while !matches!(
                    w.peek_state(),
                    SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
                ) {
                    w.changed().await;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(20), closed).await;
    });
    rt.shutdown_timeout(Duration::from_secs(5));
}
