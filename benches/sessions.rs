//! Issue 40, item 4: sessions and memory. N sessions in one process (N = 1, 100, 1 000 and
//! 10 000; a worker process of this bench per N, so that its memory and threads are its
//! own): the memory (resident) and threads each session costs, how long connecting them all
//! takes and when the server counts them all (`mntr`'s `zk_num_alive_connections`); then the
//! server is killed and started again on the same port with the same data: how long until
//! every session is back (its `Reconnected`, on the same session), whether any was lost, and
//! how the reconnects spread (their p50 and p99 after the server answered again, and the most
//! in any 100 ms: the peak connection rate the clients' jitter gives the server).
//!
//! With `--ensemble`, the same on three members (the sessions spread over them by each client's
//! own choice of host): the leader is killed, and the sessions' return is timed from the
//! moment a new leader serves (the election's time reported beside it); the old leader is then
//! started again and joins as a follower.
//!
//! 10 000 sessions of ours or Curator's need more memory mappings than Linux's default
//! `vm.max_map_count` (65 530) allows one process (a thread takes four: stack, guard, signal
//! stack, guard), and more open files than many machines' limit (ours two per session: the
//! socket and its epoll descriptor; Curator's three): an N that does not fit is skipped,
//! saying so, unless `--raise-limits` (as root) raises both for the run (the mappings' limit
//! put back after), as an operator running that many sessions in one process must.
//!
//! With `--split-cores`, the server's members run on one half of the machine's CPUs and the
//! clients' workers on the other, as clients on machines of their own would: on a shared
//! machine a client that wakes thousands of threads at once takes CPU from the members (the
//! scheduler shares time per thread), and slows the very election it waits for.
//!
//! `--clients ours-io` (named only, never by default): ours with
//! `ClientBuilder::io_thread_reads_all`, one descriptor per session instead of two.
//!
//! Under Curator's sessions the server is killed only once the JVM's JIT has been quiet for a
//! second (at most 120 s, 10 s with `--quick`; a JIT still busy is reported beside the row).
//! `--plant-loss` (standalone) restarts the server without its disk, and writes to it until
//! its last transaction id is past the one it had (else it would refuse the clients that saw
//! more): every session is really gone, and the run fails unless ours reports each one lost,
//! none back, the last before a session timeout less 2 s from the kill (the server's word, not
//! our own timer), and unless ours ran at all: the count's power, shown. Each peer's count and
//! its last loss are printed.
//!
//! `cargo bench --bench sessions [-- --quick] [-- --n 1,100] [-- --backlog 1024] [-- --ensemble]
//! [-- --raise-limits] [-- --clients ours,zkc] [-- --split-cores] [-- --plant-loss]`. Ours beside
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
use zk_recipes::testing::{ServerOptions, TestingCluster, TestingServer};
use zk_recipes::{Client, ConnectionState};

/// Every session's timeout: long enough to ride out the restart.
const SESSION: Duration = Duration::from_secs(30);
/// Threads connecting sessions at once in a worker.
const CONNECTORS: usize = 64;
/// Memory mappings a session may take (ours 8.0, Curator's 8.0–9.4 measured), and a process's
/// own beside them: what `vm.max_map_count` must allow for N sessions in one process.
const MAPS_PER_SESSION: usize = 10;
const MAPS_OF_A_PROCESS: usize = 2_000;
/// Where Linux keeps its limit on a process's memory mappings.
const MAX_MAP_COUNT: &str = "/proc/sys/vm/max_map_count";
/// Open files a client's session takes (measured: the bench's `files/s` column): ours 2 (the
/// socket and its epoll descriptor), `zookeeper-client` 1, Curator 3 (the socket, its
/// selector's epoll and wake-up descriptors); and a process's own beside them.
fn files_per_session(client: &str) -> u64 {
    match client {
        "ours" => 2,
        "zkc" | "ours-io" => 1,
        _ => 3,
    }
}
const FILES_OF_A_PROCESS: u64 = 200;

/// What the sessions connect to: one server, or three members, every one of them in the
/// sessions' connect string (unlike the other benches' `common::target`, whose clients all
/// talk to one follower).
enum Servers {
    One(TestingServer),
    Three(TestingCluster),
}

/// A restart's times.
struct Restart {
    /// From the kill until the killed server (or member) serves again (with `--plant-loss`,
    /// its writes past the old zxid included).
    down: Duration,
    /// From the kill until the ensemble had a leader again (an ensemble only).
    election: Option<Duration>,
    /// The instant (`CLOCK_MONOTONIC`, ns) the sessions' return is timed from: the server
    /// answering again, or a new leader serving.
    answering: u64,
    /// The kill's instant (`CLOCK_MONOTONIC`, ns): a worker counts only what its sessions say
    /// after it.
    killed: u64,
}

impl Servers {
    fn connect_string(&self) -> String {
        match self {
            Servers::One(s) => s.connect_string(),
            Servers::Three(c) => c.connect_string(),
        }
    }

    /// The servers' count of client connections (`mntr`), summed over the members.
    fn alive(&self) -> usize {
        // `mntr` counts its own connection among them: one less per member that answered.
        let count = |t: std::io::Result<String>| -> usize {
            t.ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        l.strip_prefix("zk_num_alive_connections")
                            .and_then(|v| v.trim().parse::<usize>().ok())
                    })
                })
                .map_or(0, |n| n.saturating_sub(1))
        };
        match self {
            Servers::One(s) => count(s.four_letter("mntr")),
            Servers::Three(c) => (0..c.len()).map(|i| count(c.four_letter(i, "mntr"))).sum(),
        }
    }

    /// Each server process and the CPU it has spent so far (ms).
    fn cpu(&self) -> Vec<(u32, f64)> {
        let pids: Vec<u32> = match self {
            Servers::One(s) => s.pid().into_iter().collect(),
            Servers::Three(c) => (0..c.len()).filter_map(|i| c.pid(i)).collect(),
        };
        pids.into_iter().map(|p| (p, cpu_ms(p))).collect()
    }

    /// The CPU the servers spent since `was` (`cpu()`): the processes that lived through it;
    /// a server process new since then (a restarted standalone server) counts from its start.
    /// An ensemble's restarted member is left out (it starts after the new leader serves).
    fn cpu_since(&self, was: &[(u32, f64)]) -> f64 {
        let now = self.cpu();
        let lived: Vec<f64> = now
            .iter()
            .filter_map(|(p, c)| was.iter().find(|(q, _)| q == p).map(|(_, w)| c - w))
            .collect();
        match self {
            Servers::Three(_) => lived.iter().sum(),
            Servers::One(_) if lived.is_empty() => now.iter().map(|(_, c)| c).sum(),
            Servers::One(_) => lived.iter().sum(),
        }
    }

    /// The server killed and started again; or the ensemble's leader killed, a new leader
    /// awaited, and the old one started again. `lose_disk` (`--plant-loss`, standalone): the
    /// server starts again without its snapshots and transaction log, every session gone.
    fn restart(&self, lose_disk: bool) -> Restart {
        // A server that lost its disk refuses, unanswered, a client that has seen a later
        // transaction than its own last ("client must try another server"); it answers
        // "expired" once it has moved past what the clients saw: the zxid it had.
        let seen = lose_disk.then(|| zxid(self).expect("the server's Zxid (srvr) before the kill"));
        let killed = Instant::now();
        let killed_ns = now_ns();
        match self {
            Servers::One(s) => {
                if lose_disk {
                    s.stop();
                    let data = s.dir().join("data").join("version-2");
                    std::fs::remove_dir_all(&data).expect("the server's data removed");
                }
                s.restart().expect("restart the server");
                if let Some(seen) = seen {
                    advance_past(self, seen);
                }
                Restart {
                    down: killed.elapsed(),
                    election: None,
                    answering: now_ns(),
                    killed: killed_ns,
                }
            }
            Servers::Three(c) => {
                let leader = c.leader().expect("a leader before the kill");
                // Where the sessions sit (the count each member's `srvr` gives, the bench's
                // own probe included): the leader's fall on the followers at the kill.
                let held: Vec<String> = (0..c.len())
                    .map(|i| {
                        let n = c
                            .four_letter(i, "srvr")
                            .ok()
                            .and_then(|a| {
                                a.lines().find_map(|l| {
                                    l.strip_prefix("Connections: ").map(str::to_owned)
                                })
                            })
                            .unwrap_or_else(|| "?".into());
                        let who = if i == leader { " (leader)" } else { "" };
                        format!("member {} (port {}){who}: {n}", i + 1, c.addr(i).port())
                    })
                    .collect();
                println!("connections before the kill: {}", held.join(", "));
                // The time of day, to line up with the members' logs (`ZOOKEEPER_LOG_LEVEL`).
                let day = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis()
                    % 86_400_000;
                println!(
                    "leader (member {}) killed at {:02}:{:02}:{:02}.{:03} UTC",
                    leader + 1,
                    day / 3_600_000,
                    day / 60_000 % 60,
                    day / 1000 % 60,
                    day % 1000
                );
                // Timed from the kill itself, not from the lookup of who led before it.
                let killed = Instant::now();
                let killed_ns = now_ns();
                c.kill(leader);
                // Polled (`srvr` every 50 ms): the server's own word on who leads.
                c.wait_for_leader(Duration::from_secs(60))
                    .expect("a new leader");
                let answering = now_ns();
                let election = killed.elapsed();
                c.restart(leader).expect("the old leader back");
                Restart {
                    down: killed.elapsed(),
                    election: Some(election),
                    answering,
                    killed: killed_ns,
                }
            }
        }
    }
}

/// The standalone server's last transaction id (`srvr`'s `Zxid:`), if it says.
fn zxid(servers: &Servers) -> Option<u64> {
    let Servers::One(s) = servers else {
        return None;
    };
    let answer = s.four_letter("srvr").ok()?;
    let hex = answer.lines().find_map(|l| l.strip_prefix("Zxid: 0x"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Writes to the (restarted, empty) standalone server until its last transaction id is past
/// `seen`, from 8 threads sharing one session, checking every 200 writes each (a failed
/// `srvr` is asked again; at most a minute, then the bench stops).
fn advance_past(servers: &Servers, seen: u64) {
    let until = Instant::now() + Duration::from_secs(60);
    let client = Client::builder(&servers.connect_string())
        .session_timeout(SESSION)
        .connect()
        .expect("a session on the restarted server");
    client
        .ensure_path("/bench/sessions/plant")
        .expect("a node to write");
    thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                while zxid(servers).is_none_or(|z| z <= seen) {
                    assert!(
                        Instant::now() < until,
                        "the restarted server's Zxid never passed {seen:#x}"
                    );
                    for _ in 0..200 {
                        client
                            .set_data("/bench/sessions/plant", b"x", None)
                            .expect("a write");
                    }
                }
            });
        }
    });
    client.close();
}

/// `--split-cores`: the CPUs this process may use, halved: the members' half and the clients'.
struct Cores {
    members: Vec<usize>,
    clients: Vec<usize>,
}

impl Cores {
    fn split() -> Result<Cores, String> {
        // SAFETY: a zeroed cpu_set_t is an empty set; the kernel fills it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the set's own size and a valid pointer to it.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            != 0
        {
            return Err(format!(
                "this process's CPUs unreadable: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: CPU_ISSET reads a bit of a valid set.
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect();
        if cpus.len() < 2 {
            return Err(format!(
                "needs two CPUs at least, this process has {}",
                cpus.len()
            ));
        }
        let (members, clients) = cpus.split_at(cpus.len() / 2);
        Ok(Cores {
            members: members.to_vec(),
            clients: clients.to_vec(),
        })
    }
}

/// Pins the calling thread (and every thread and process it starts from now on) to `cpus`.
fn pin_here(cpus: &[usize]) {
    let set = cpu_set(cpus);
    // SAFETY: a valid set of its own size; 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// The set of `cpus`.
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes a bit of a valid set (c < CPU_SETSIZE: read from one).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// The limits N sessions in one process meet: `vm.max_map_count` and the open-file limit.
/// Raised for the run with `--raise-limits`; the mappings' old limit put back when dropped.
struct Limits {
    maps_was: Option<usize>,
}

impl Limits {
    fn maps() -> usize {
        std::fs::read_to_string(MAX_MAP_COUNT)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(65_530)
    }

    /// This process's open-file limit (soft, hard); children inherit it.
    fn files() -> (u64, u64) {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid rlimit to read into.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        (limit.rlim_cur, limit.rlim_max)
    }

    /// Whether `n` sessions of `client` fit in one process, raising the limits if allowed
    /// to (the async client's threads are not per session: its mappings always fit).
    fn fit(&mut self, n: usize, client: &str, raise: bool) -> Result<(), String> {
        let maps = if client == "zkc" {
            MAPS_OF_A_PROCESS
        } else {
            n * MAPS_PER_SESSION + MAPS_OF_A_PROCESS
        };
        let files = n as u64 * files_per_session(client) + FILES_OF_A_PROCESS;
        let (have_maps, (_, have_files)) = (Self::maps(), Self::files());
        if maps <= have_maps && files <= have_files {
            return Ok(());
        }
        if !raise {
            return Err(format!(
                "{n} sessions of {client} need about {maps} memory mappings and {files} open \
                 files; the limits are {have_maps} (vm.max_map_count) and {have_files} \
                 (--raise-limits raises them for the run, as root)"
            ));
        }
        if maps > have_maps {
            std::fs::write(MAX_MAP_COUNT, maps.to_string())
                .map_err(|e| format!("raising vm.max_map_count to {maps}: {e}"))?;
            self.maps_was.get_or_insert(have_maps);
            println!("vm.max_map_count raised from {have_maps} to {maps} for this run");
        }
        if files > have_files {
            let limit = libc::rlimit {
                rlim_cur: files,
                rlim_max: files,
            };
            // SAFETY: a valid rlimit.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
                return Err(format!(
                    "{n} sessions of {client} need about {files} open files; the hard limit \
                     is {have_files}, and raising it failed: {}",
                    std::io::Error::last_os_error()
                ));
            }
            println!(
                "open-file limit raised from {have_files} to {files} (this process and its \
                 children)"
            );
        }
        Ok(())
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        if let Some(was) = self.maps_was {
            let _ = std::fs::write(MAX_MAP_COUNT, was.to_string());
            println!("vm.max_map_count put back to {was}");
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var("ZKR_SESSIONS_WORKER") {
        worker(&spec);
        return;
    }
    // `--replot FILE`: the plot again from a run's printed record (its JSON lines).
    if let Some(file) = std::env::args().skip_while(|a| a != "--replot").nth(1) {
        return replot(&file);
    }
    let args = args();
    let ns: Vec<usize> = match std::env::args().skip_while(|a| a != "--n").nth(1) {
        Some(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        None if args.quick => vec![1, 100],
        None => vec![1, 100, 1000, 5000, 10_000],
    };
    init_logs();
    // `--backlog N`: the server's listen queue (`clientPortListenBacklog`; ZooKeeper's default
    // is the JVM's, 50).
    let backlog = std::env::args().skip_while(|a| a != "--backlog").nth(1);
    let options = ServerOptions {
        max_session_timeout: Duration::from_secs(60),
        config: backlog
            .iter()
            .map(|b| ("clientPortListenBacklog".to_owned(), b.clone()))
            .collect(),
        ..ServerOptions::default()
    };
    let raise = std::env::args().any(|a| a == "--raise-limits");
    // `--split-cores`: this process (and so every member it starts, which inherits it) on the
    // first half of the CPUs; each worker is moved to the second half as it starts (`measure`,
    // between fork and exec). The bench's own polling stays on the members' half: a few
    // system calls every 50 ms.
    let split = if std::env::args().any(|a| a == "--split-cores") {
        match Cores::split() {
            Ok(cores) => {
                pin_here(&cores.members);
                println!(
                    "members on CPUs {:?}, clients on CPUs {:?}",
                    cores.members, cores.clients
                );
                Some(cores)
            }
            Err(why) => {
                println!("--split-cores: {why}");
                return;
            }
        }
    } else {
        None
    };
    // The open-file limit raised before the servers start, for the largest N (the servers
    // inherit it: raised later, a member could not take every session); each client's fit is
    // still checked, and reported, as it runs.
    if raise {
        let most = ns.iter().copied().max().unwrap_or(0) as u64;
        let need = most * (files_per_session("curator") + 1) + FILES_OF_A_PROCESS;
        let (_, hard) = Limits::files();
        if need > hard {
            let limit = libc::rlimit {
                rlim_cur: need,
                rlim_max: need,
            };
            // SAFETY: a valid rlimit.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
                println!("open-file limit raised from {hard} to {need} before the servers start");
            }
        }
    }
    // An ensemble's members fsync every write, as users run them (item 3's ensemble too).
    let servers = if args.ensemble {
        let options = ServerOptions {
            force_sync: true,
            ..options
        };
        let cluster = TestingCluster::with_options(3, options)
            .expect("start ZooKeeper (apt-get install zookeeper)");
        cluster
            .wait_for_leader(Duration::from_secs(60))
            .expect("a leader");
        Servers::Three(cluster)
    } else {
        Servers::One(
            TestingServer::with_options(options)
                .expect("start ZooKeeper (apt-get install zookeeper)"),
        )
    };
    // `--plant-loss`: the restart loses the server's disk, to show the count of lost sessions
    // sees a real loss (standalone: an ensemble's other members keep the sessions).
    let plant = std::env::args().any(|a| a == "--plant-loss");
    assert!(
        !(plant && args.ensemble),
        "--plant-loss is for the standalone server"
    );
    // How many of ours the plant checked: a plant run that checked none proved nothing.
    let mut planted_checks = 0;
    // How long a Curator JVM's JIT may take to quiet down before the kill (a smoke run's
    // figures are not compared).
    let jit_most = Duration::from_secs(if args.quick { 10 } else { 120 });
    let what = match (args.ensemble, split.is_some()) {
        (true, false) => "ensemble",
        (true, true) => "ensemble, split cores",
        (false, false) => "standalone",
        (false, true) => "standalone, split cores",
    };
    let mut limits = Limits { maps_was: None };
    // (N, client, every session back ms, resident KB per session), for the plot.
    let mut curve: Vec<(usize, &str, f64, f64)> = Vec::new();
    println!(
        "{:>6} {:>7} {:>10} {:>9} {:>7} {:>7} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>11} {:>10} {:>10}",
        "N",
        "client",
        "rss KB/s",
        "threads/s",
        "maps/s",
        "files/s",
        "connect ms",
        "server ms",
        "elect ms",
        "back ms",
        "p50 ms",
        "p99 ms",
        "back",
        "lost",
        "peak /100ms",
        "client cpu",
        "server cpu"
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
    // `--clients ours,zkc`: only these (a look at one client's behaviour, not a comparison:
    // no plot).
    let only = std::env::args().skip_while(|a| a != "--clients").nth(1);
    if let Some(only) = &only {
        // `ours-io`: ours with `io_thread_reads_all` (one descriptor per session), only when
        // named.
        if only.split(',').any(|o| o == "ours-io") {
            peers.insert(1, "ours-io");
        }
        peers.retain(|p| only.split(',').any(|o| o == *p));
    }
    if peers.is_empty() {
        println!("no client to run (--clients names ours, zkc or curator; Curator needs Java)");
        return;
    }
    for (i, &n) in ns.iter().enumerate() {
        // Alternated: the order rotates from one N to the next.
        peers.rotate_left(usize::from(i > 0));
        for &peer in &peers {
            if let Err(why) = limits.fit(n, peer, raise) {
                println!("{n:>6} {peer:>7} skipped: {why}");
                json(
                    "sessions",
                    &[
                        ("sessions", f(n as f64)),
                        ("target", s(what)),
                        ("client", s(peer)),
                        ("skipped", s(&why)),
                    ],
                );
                continue;
            }
            let m = measure(
                &servers,
                n,
                peer,
                curator.as_deref(),
                split.as_ref().map(|c| &c.clients[..]),
                plant,
                jit_most,
            );
            println!(
            "{:>6} {:>7} {:>10.1} {:>9.2} {:>7.2} {:>7.2} {:>11.0} {:>11.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>6} {:>6} {:>11} {:>10.0} {:>10.0}",
            n,
            peer,
            m.rss_kb_per_session,
            m.threads_per_session,
            m.maps_per_session,
            m.files_per_session,
            m.connect.as_secs_f64() * 1e3,
            m.server_sees.as_secs_f64() * 1e3,
            m.restart.election.map_or(f64::NAN, |e| e.as_secs_f64() * 1e3),
            m.all_back.as_secs_f64() * 1e3,
            m.back_p50.as_secs_f64() * 1e3,
            m.back_p99.as_secs_f64() * 1e3,
            m.back,
            m.lost,
            m.peak_per_100ms,
            m.client_cpu,
            m.server_cpu
        );
            json(
                "sessions",
                &[
                    ("sessions", f(n as f64)),
                    ("target", s(what)),
                    ("client", s(peer)),
                    ("rss_kb_per_session", f(m.rss_kb_per_session)),
                    ("threads_per_session", f(m.threads_per_session)),
                    ("maps_per_session", f(m.maps_per_session)),
                    ("files_per_session", f(m.files_per_session)),
                    ("connect_ms", f(m.connect.as_secs_f64() * 1e3)),
                    ("server_sees_all_ms", f(m.server_sees.as_secs_f64() * 1e3)),
                    ("restart_ms", f(m.restart.down.as_secs_f64() * 1e3)),
                    (
                        "election_ms",
                        f(m.restart
                            .election
                            .map_or(f64::NAN, |e| e.as_secs_f64() * 1e3)),
                    ),
                    ("all_back_ms", f(m.all_back.as_secs_f64() * 1e3)),
                    ("back_p50_ms", f(m.back_p50.as_secs_f64() * 1e3)),
                    ("back_p99_ms", f(m.back_p99.as_secs_f64() * 1e3)),
                    ("back", f(m.back as f64)),
                    ("lost", f(m.lost as f64)),
                    ("peak_reconnects_per_100ms", f(m.peak_per_100ms as f64)),
                    ("client_cpu_ms", f(m.client_cpu)),
                    ("server_cpu_ms", f(m.server_cpu)),
                    ("jit_quiet", s(if m.jit_quiet { "true" } else { "false" })),
                    ("planted_loss", s(if plant { "true" } else { "false" })),
                ],
            );
            if !m.jit_quiet {
                println!("{n:>6} {peer:>7}: its JIT was not quiet before the kill (indicative)");
            }
            // Ours must keep every session across a short restart; a peer that loses one is
            // a finding to report (Curator lost one of 5 000 on two cores, its slowest outlasting
            // their timeout), not a failed bench.
            if plant {
                // The server forgot every session with its disk: the count must see each of
                // ours lost, and none back, and from the server's word: before a session
                // timeout (less 2 s) from the kill, the earliest our own timer (a session
                // timeout of silence) could say it of a session connected at the kill.
                let last = m.last_lost.map_or(f64::NAN, |d| d.as_secs_f64());
                println!(
                    "{n:>6} {peer:>7}: planted loss of all {n}: {} reported lost (the last {last:.1} \
                     s after the kill), {} back, {} unaccounted within a session timeout",
                    m.lost,
                    m.back,
                    n - (m.back + m.lost).min(n)
                );
                if peer.starts_with("ours") {
                    assert!(
                        m.lost == n && m.back == 0,
                        "{peer}: the planted loss went unseen: {} of {n} lost, {} back",
                        m.lost,
                        m.back
                    );
                    assert!(
                        m.last_lost
                            .is_some_and(|d| d < SESSION - Duration::from_secs(2)),
                        "{peer}: the planted loss was said {last:.1} s after the kill (the \
                         restart and its writes took {:.1} s): too late to tell the server's \
                         answer from our own timer",
                        m.restart.down.as_secs_f64()
                    );
                    planted_checks += 1;
                }
            } else if peer.starts_with("ours") {
                assert_eq!(m.lost, 0, "sessions lost across a short restart");
                assert_eq!(m.back, n, "not every session came back");
            } else if m.lost > 0 || m.back + m.lost < n {
                println!(
                    "{n:>6} {peer:>7}: {} lost, {} not back within a session timeout",
                    m.lost,
                    n - (m.back + m.lost).min(n)
                );
            }
            // On an ensemble the plot shows what a user waits: the election and the return.
            let waited = m.restart.election.unwrap_or_default() + m.all_back;
            curve.push((n, peer, waited.as_secs_f64() * 1e3, m.rss_kb_per_session));
        }
    }
    assert!(
        !plant || planted_checks > 0,
        "--plant-loss checked none of ours (name ours in --clients, and let it fit)"
    );
    // A whole run gets a plot (`plot_file`): every client, three N or more, one of them 1 000
    // or more (a closer look at one or two N would overwrite the whole run's plot).
    if !args.quick && !plant && only.is_none() && ns.len() >= 3 && curve.iter().any(|c| c.0 >= 1000)
    {
        let name = plot_file(what);
        match plot(&curve, &name, what) {
            Ok(()) => println!("wrote {name}"),
            Err(e) => println!("no plot: {e}"),
        }
    }
}

/// Draws the plot of a run from its record (the `{"bench":"sessions",...}` lines it printed).
fn replot(file: &str) {
    let text = std::fs::read_to_string(file).expect("the run's record");
    let mut what = "standalone".to_owned();
    let mut curve: Vec<(usize, &'static str, f64, f64)> = Vec::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(r#"{"bench":"sessions""#))
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        let (Some(n), Some(back), Some(rss)) = (
            num("sessions"),
            num("all_back_ms"),
            num("rss_kb_per_session"),
        ) else {
            continue;
        };
        let client = match v.get("client").and_then(serde_json::Value::as_str) {
            Some("ours") => "ours",
            Some("zkc") => "zkc",
            Some("curator") => "curator",
            _ => continue,
        };
        if let Some(t) = v.get("target").and_then(serde_json::Value::as_str) {
            what = t.to_owned();
        }
        let election = num("election_ms").filter(|e| e.is_finite()).unwrap_or(0.0);
        curve.push((n as usize, client, back + election, rss));
    }
    let name = plot_file(&what);
    match plot(&curve, &name, &what) {
        Ok(()) => println!("wrote {name}"),
        Err(e) => println!("no plot: {e}"),
    }
}

/// The plot of a run on `what` ("ensemble, split cores", say): `benches/sessions.png`,
/// `sessions-ensemble.png`, `sessions-ensemble-split.png`, ...
fn plot_file(what: &str) -> String {
    format!(
        "{}/sessions{}{}.png",
        env!("CARGO_MANIFEST_DIR"),
        if what.starts_with("ensemble") {
            "-ensemble"
        } else {
            ""
        },
        if what.ends_with("split cores") {
            "-split"
        } else {
            ""
        }
    )
}

/// Every session's return after the restart, and the memory each costs, against N, for each
/// client (N = 1 left out: a process's own first costs).
fn plot(
    curve: &[(usize, &str, f64, f64)],
    file: &str,
    what: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::style::{BLUE, GREEN, MAGENTA};
    let line = |peer: &str, y: fn(&(usize, &str, f64, f64)) -> f64| -> Vec<(f64, f64)> {
        curve
            .iter()
            .filter(|c| c.1 == peer && c.0 > 1)
            .map(|c| (c.0 as f64, y(c)))
            .collect()
    };
    let lines = |y: fn(&(usize, &str, f64, f64)) -> f64| -> Vec<Line> {
        vec![
            ("zk-recipes".into(), BLUE, line("ours", y)),
            ("zookeeper-client".into(), GREEN, line("zkc", y)),
            ("Curator".into(), MAGENTA, line("curator", y)),
        ]
    };
    let back = match (what.starts_with("ensemble"), what.ends_with("split cores")) {
        (true, false) => "the leader killed: every session back",
        (true, true) => "leader killed, every session back (split cores)",
        (false, false) => "every session back after the restart",
        (false, true) => "every session back after the restart (split cores)",
    };
    plot_panels(
        file,
        &[
            (back, "sessions (N)", "ms", lines(|c| c.2)),
            (
                "resident memory per session",
                "sessions (N)",
                "KB",
                lines(|c| c.3),
            ),
        ],
    )
}

struct Measured {
    rss_kb_per_session: f64,
    threads_per_session: f64,
    maps_per_session: f64,
    files_per_session: f64,
    connect: Duration,
    /// From the worker's start of connecting until the server counted every session.
    server_sees: Duration,
    /// The restart's times.
    restart: Restart,
    /// From the server answering again until the last session was back.
    all_back: Duration,
    back_p50: Duration,
    back_p99: Duration,
    back: usize,
    lost: usize,
    peak_per_100ms: usize,
    /// CPU the client's process spent from just before the kill until its last session was
    /// back (ms, user and system).
    client_cpu: f64,
    /// CPU the servers spent over the same span: the members that lived through it (an
    /// ensemble), or the restarted server since its start (standalone, its start included).
    server_cpu: f64,
    /// Whether the client's JIT was quiet before the kill (Curator's JVM; always for ours and
    /// `zookeeper-client`).
    jit_quiet: bool,
    /// From the kill until the last session the client said lost was said lost.
    last_lost: Option<Duration>,
}

fn measure(
    server: &Servers,
    n: usize,
    peer: &str,
    curator: Option<&str>,
    cores: Option<&[usize]>,
    plant: bool,
    jit_most: Duration,
) -> Measured {
    let mut cmd = match (peer, curator) {
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
    if let Some(cores) = cores {
        // SAFETY: between fork and exec the closure makes one system call
        // (`sched_setaffinity`) on a set built before the fork; it allocates nothing.
        let set = cpu_set(cores);
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let mut w = Worker::start(cmd);
    let base = w.next_line();
    let started = now_ns();
    w.say("connect");
    // The server's count, polled while the worker connects (a bench's design, not a wait for
    // an answer: `mntr` is the server's own view).
    let until = Instant::now() + Duration::from_secs(300);
    while server.alive() < n {
        assert!(
            Instant::now() < until,
            "the server never counted {n} sessions"
        );
        if let Ok(Some(status)) = w.child.try_wait() {
            panic!("the {peer} worker ended while connecting ({status}): see its stderr");
        }
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
    let files_per_session = (field(&connected, 5) - field(&base, 4)) / n as f64;
    let connect = Duration::from_secs_f64(field(&connected, 1) / 1e3);
    // A JVM's restart measured while it still compiles its connecting code would count that
    // compiling as reconnecting: the kill waits for its JIT to be quiet (at most `jit_most`).
    // Its reconnecting code compiles during the storm itself, as a Curator user's would.
    let jit_quiet = peer != "curator" || jvm_jit_quiet(std::slice::from_mut(&mut w), jit_most);
    // The restart: killed and started again (or the leader killed and a new one serving).
    let client_cpu_was = cpu_ms(w.child.id());
    let members_were = server.cpu();
    let restart = server.restart(plant);
    w.say(&format!(
        "answering {} {}",
        restart.answering, restart.killed
    ));
    let back = w.next_line();
    let client_cpu = cpu_ms(w.child.id()) - client_cpu_was;
    let server_cpu = server.cpu_since(&members_were);
    w.close_stdin();
    let _ = w.child.wait();
    // `back <count> <lost> <last loss, ms after the kill, or -1> <ms after answering, each> ...`
    let mut parts = back.split_whitespace().skip(1);
    let count: usize = parts.next().and_then(|v| v.parse().ok()).expect("count");
    let lost: usize = parts.next().and_then(|v| v.parse().ok()).expect("lost");
    let last_lost: f64 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .expect("last loss");
    let last_lost = (last_lost >= 0.0).then(|| Duration::from_secs_f64(last_lost / 1e3));
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
        files_per_session,
        connect,
        server_sees,
        restart,
        all_back: at(1.0),
        back_p50: at(0.5),
        back_p99: at(0.99),
        back: count,
        lost,
        peak_per_100ms: peak,
        client_cpu,
        server_cpu,
        jit_quiet,
        last_lost,
    }
}

/// The CPU (user and system, ms) process `pid` has spent so far, from /proc (NaN if gone).
fn cpu_ms(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // After the command's closing parenthesis: state (field 3), ..., utime (14), stime (15).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks * 1e3 / hz
}

/// This process's resident memory (KB), threads, memory mappings and open files, from /proc
/// (the kernel allows a process `vm.max_map_count` mappings, 65 530 by default).
fn usage() -> (u64, u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count() as u64);
    let files = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    (field("VmRSS:"), field("Threads:"), maps, files)
}

/// A worker: `connect n` in `ZKR_SESSIONS_WORKER`. Says
/// `base <rss KB> <threads> <maps> <files>`; on `connect`, connects its sessions and says
/// `connected <ms> <rss KB> <threads> <maps> <files>`; on `answering <ns> <killed ns>` (the
/// server is back at the first CLOCK_MONOTONIC instant; it was killed at the second), waits
/// until every session is back or lost (at most a session timeout) and says `back ...`
/// (`report_back`).
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
    let (rss, threads, maps, files) = usage();
    say(format!("base {rss} {threads} {maps} {files}"));
    let mut stdin = std::io::stdin().lock().lines();
    if !matches!(stdin.next(), Some(Ok(l)) if l == "connect") {
        return;
    }
    if peer == "zkc" {
        return zkc_worker(&connect, n, &say, &mut stdin);
    }
    let reads_all = peer == "ours-io";
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
                                .io_thread_reads_all(reads_all)
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
    // Each session's id, to tell its return from a new session that a client calls one.
    let ids: Vec<_> = clients.iter().map(Client::session_id).collect();
    let (rss, threads, maps, files) = usage();
    say(format!(
        "connected {:.1} {rss} {threads} {maps} {files}",
        took.as_secs_f64() * 1e3
    ));
    let Some((answering, killed)) = answering(&mut stdin) else {
        return;
    };
    let mut back: Vec<Option<Instant>> = vec![None; n];
    // Each session settles once, by its first word after the kill (what it said before, a
    // flap say, is not the restart's outcome): back (`Reconnected` on the same session id) or
    // lost (`Lost`; `Connected`, a session new since; `Reconnected` on another id). A new
    // session after a lost one is not its return.
    let mut settled_each = vec![false; n];
    let mut lost = 0;
    let mut last_lost = None;
    let mut settled = 0;
    let until = Instant::now() + SESSION;
    // One thread reads every subscription in turn (a thread per session would cost what is
    // being measured).
    while settled < n && Instant::now() < until {
        let mut any = false;
        for (i, sub) in subs.iter().enumerate() {
            while let Some(e) = sub.try_recv() {
                any = true;
                if settled_each[i] || e.at < killed {
                    continue;
                }
                match e.state {
                    ConnectionState::Reconnected if ids[i] == Some(e.session_id) => {
                        back[i] = Some(e.at)
                    }
                    ConnectionState::Reconnected
                    | ConnectionState::Lost
                    | ConnectionState::Connected => {
                        lost += 1;
                        last_lost = last_lost.max(Some(e.at));
                    }
                    _ => continue,
                }
                settled_each[i] = true;
                settled += 1;
            }
        }
        if !any {
            // Each event carries its own instant: the pause only delays the report, and a
            // short one would cost this process CPU the bench measures (`client cpu`).
            thread::sleep(Duration::from_millis(20));
        }
    }
    say(report_back(&back, lost, last_lost, answering, killed));
    for c in &clients {
        c.close();
    }
}

/// Reads `answering <ns> <killed ns>` (the server answers again since the first
/// CLOCK_MONOTONIC instant; it was killed at the second) and returns both instants on this
/// process's clock.
fn answering(
    stdin: &mut impl Iterator<Item = std::io::Result<String>>,
) -> Option<(Instant, Instant)> {
    let line = stdin.next()?.ok()?;
    let mut parts = line.strip_prefix("answering ")?.split(' ');
    let (ns, killed): (u64, u64) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    let (now, at) = (Instant::now(), now_ns());
    Some((
        now.checked_sub(Duration::from_nanos(at.saturating_sub(ns)))?,
        now.checked_sub(Duration::from_nanos(at.saturating_sub(killed)))?,
    ))
}

/// `back <count> <lost> <ms from the kill to the last loss said, or -1> <ms after answering,
/// per session back>...`
fn report_back(
    back: &[Option<Instant>],
    lost: usize,
    last_lost: Option<Instant>,
    answering: Instant,
    killed: Instant,
) -> String {
    let last = last_lost.map_or(-1.0, |at| {
        at.saturating_duration_since(killed).as_secs_f64() * 1e3
    });
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
    format!("back {} {lost} {last:.1} {}", times.len(), times.join(" "))
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
    // (session, when, back or lost): every return and the end, as they come.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Instant, bool)>();
    for (i, c) in clients.iter().enumerate() {
        let mut state = c.state_watcher();
        let tx = tx.clone();
        rt.spawn(async move {
            let mut left = false;
            loop {
                match state.changed().await {
                    SessionState::SyncConnected if left => {
                        left = false;
                        let _ = tx.send((i, Instant::now(), true));
                    }
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                        let _ = tx.send((i, Instant::now(), false));
                        return;
                    }
                    SessionState::SyncConnected => {}
                    _ => left = true,
                }
            }
        });
    }
    drop(tx);
    let (rss, threads, maps, files) = usage();
    say(format!(
        "connected {:.1} {rss} {threads} {maps} {files}",
        took.as_secs_f64() * 1e3
    ));
    let Some((answering, killed)) = answering(stdin) else {
        return;
    };
    let mut back: Vec<Option<Instant>> = vec![None; n];
    // Each session settles once, by its first word after the kill (as ours do, above).
    let mut settled_each = vec![false; n];
    let (mut lost, mut settled, mut last_lost) = (0, 0, None);
    let until = Instant::now() + SESSION;
    while settled < n {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(left) {
            Ok((i, at, came_back)) if !settled_each[i] && at >= killed => {
                settled_each[i] = true;
                settled += 1;
                match came_back {
                    true => back[i] = Some(at),
                    false => {
                        lost += 1;
                        last_lost = last_lost.max(Some(at));
                    }
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    say(report_back(&back, lost, last_lost, answering, killed));
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
