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
//! - every lock is held again, soon, after the last fault healed, and at a progress
//!   checkpoint every minute of faults;
//! - a semaphore of `SEMAPHORE_LEASES` leases never has more holders than that;
//! - each lock's protected resource (a `FencingGate` in this process, which the workers write
//!   to after each vouched piece, and once more as zombies after their lease refused a `run`)
//!   never takes an older hold's write after a newer hold's, nor refuses the newer for the
//!   older's token;
//! - a double barrier's member passes enter only if at some instant of its call every member
//!   was in (entering, inside, leaving, or with a node of a session its client gave up on
//!   still standing), and leave only if at some instant none stayed inside (`membership.rs`);
//! - a group member's node, once seen on a session, is never missing while that session
//!   lives, and is seen again after the faults;
//! - no record is lost and no worker exits on its own.
//!
//! `--stop-at-first` checks the records after every fault and stops at the first violation,
//! printing how many seconds of faults it took (the planted-bug runs, `plants.sh`).
//!
//! `cargo test --test jepsen` runs a short seeded set (CI). Longer:
//! `cargo test --release --test jepsen -- --seconds 3600`; replay one with `--seed N`
//! (`ZKR_JEPSEN_SECS` / `ZKR_JEPSEN_SEED` do the same). The seed is printed first.
//! Its own binary without the test harness (`harness = false`): it runs its workers by
//! starting itself again with `ZKR_JEPSEN_WORKER` set. `worker.rs` is a worker process,
//! `nemesis.rs` the faults, `checker.rs` the proof; this file starts and ends it all.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use zk_recipes::lock::FencingGate;
use zk_recipes::testing::{FaultProxy, ServerOptions, TestingCluster};

mod cache;
mod checker;
mod counter;
mod membership;
mod nemesis;
#[allow(dead_code)]
#[path = "../common/pki.rs"]
mod pki;
mod queue;
mod replicas;
mod worker;

/// The SASL user of a `--secure` run.
const SASL_USER: (&str, &str) = ("jepsen", "jepsen's password");
/// The Kerberos principal of a `--kerberos` run's workers and coordinator.
const KERBEROS_PRINCIPAL: &str = "jepsen";

/// A builder secured as the run's `security` settings say (`get` reads one): TLS with SASL
/// DIGEST-MD5 for `--secure`, Kerberos for `--kerberos` (both: TLS and Kerberos). Every
/// member shares the principal `zookeeper/localhost`, named whole (Java's
/// `zookeeper.server.principal`).
fn secured(
    mut builder: zk_recipes::ClientBuilder,
    get: impl Fn(&str) -> Option<String>,
) -> zk_recipes::ClientBuilder {
    if let Some(ca) = get("ZKR_JEPSEN_CA") {
        let (user, password) = SASL_USER;
        builder = builder
            .tls(zk_recipes::TlsOptions::new(ca))
            .sasl_digest(user, password);
    }
    if let Some(keytab) = get("ZKR_JEPSEN_KEYTAB") {
        builder = builder.sasl_gssapi(
            zk_recipes::GssapiOptions::new()
                .principal(KERBEROS_PRINCIPAL)
                .keytab(keytab)
                .server_principal(format!(
                    "{}@{}",
                    zk_recipes::testing::KDC_SERVER_PRINCIPAL,
                    zk_recipes::testing::KDC_REALM
                )),
        );
    }
    builder
}

use checker::{check, read, GateWrite, Report};
use nemesis::{Nemesis, FIREWALLED, KINDS};

/// The workers' session timeout: short, so that paused holders lose their sessions often.
const SESSION: Duration = Duration::from_secs(2);
/// The testing ensemble's tick.
const TICK: Duration = Duration::from_millis(100);
/// What a timed acquire may take past its deadline (a scheduling slice on a loaded machine).
const EPSILON: Duration = Duration::from_millis(500);
/// Every recipe that promises exclusivity (or a bounded number of holders), each on its own
/// path.
const RECIPES: [&str; 16] = [
    "mutex",
    "semaphore-mutex",
    "semaphore-v2",
    "semaphore-v2x2",
    "write-lock",
    "read-write",
    "leader-selector",
    "leader-latch",
    "partition",
    "multi-lock",
    "double-barrier",
    "group",
    counter::COUNTER,
    queue::ONCE,
    queue::LEAST,
    cache::CACHE,
];
/// The items the `partition` recipe's workers share, each checked as a lock of its own: its
/// owners' vouched pieces never overlap, its tokens never go back, and it is owned again after
/// the faults. A worker writes each item's records to a file of its own (`<records>.<item>`).
const PARTITION_ITEMS: [&str; 4] = [
    "partition/i0",
    "partition/i1",
    "partition/i2",
    "partition/i3",
];

/// The second lock of the `multi-lock` recipe's sets; the first is the `mutex` recipe's, so
/// that its holds are checked against the mutex workers' as well as each other's.
const MULTI_SECOND: &str = "multi-lock/b";

/// The members of the `group` recipe, one per worker, each checked on its own: its node, once
/// seen on a session, stays while that session lives, and it is seen again on its session
/// after the faults.
const GROUP_MEMBERS: [&str; WORKERS_PER_RECIPE] = ["group/m0", "group/m1", "group/m2"];

/// The files a worker's holds are in, each with the lock they are of: its records, for every
/// recipe but `partition`, whose holds are per item, and `multi-lock`, whose holds are of two
/// locks (the mutex recipe's, with the first lock's tokens in its records, and its own second
/// lock, with that one's tokens in `<records>.b`).
fn hold_files(w: &Worker) -> Vec<(&'static str, PathBuf)> {
    match w.recipe {
        "partition" => PARTITION_ITEMS
            .iter()
            .map(|group| (*group, item_records(&w.records, group)))
            .collect(),
        "multi-lock" => vec![
            ("mutex", w.records.clone()),
            (MULTI_SECOND, item_records(&w.records, MULTI_SECOND)),
        ],
        "group" => vec![(GROUP_MEMBERS[w.member], w.records.clone())],
        recipe => vec![(recipe, w.records.clone())],
    }
}

/// Where a partition worker writes the records of `group`'s item.
fn item_records(records: &Path, group: &str) -> PathBuf {
    let item = group.rsplit('/').next().unwrap_or(group);
    let mut name = records.as_os_str().to_owned();
    name.push(format!(".{item}"));
    PathBuf::from(name)
}
const WORKERS_PER_RECIPE: usize = 3;
/// The leases of the `semaphore-v2x2` recipe (its three workers contend for two).
const SEMAPHORE_LEASES: usize = 2;
/// How often the faults pause for a progress checkpoint.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);
/// How soon every lock must be held again once the faults pause.
const SETTLE: Duration = Duration::from_secs(30);
/// How long after a barrier's pass the records that excuse it may still be unwritten: a
/// member's client writes that its session was lost once it reaches a server again, after a
/// pause or a cut of up to 9 s.
const UNWRITTEN: Duration = Duration::from_secs(20);
/// Default length of the fault phase (CI): long enough for the first round, which draws every
/// kind once (about 80 s with all 23 when each finds its cue soon).
const CI_SECONDS: u64 = 110;

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
        worker::worker();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("no_two_vouched_holds_overlap: test");
        return;
    }
    // A libtest-style name filter that does not match: nothing to run here.
    let flag_values = ["--seconds", "--seed", "--nemesis", "--fast-clock"];
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
    let secure = args.iter().any(|a| a == "--secure")
        || std::env::var("ZKR_JEPSEN_SECURE").is_ok_and(|v| v == "1");
    // `--kerberos`: members that require SASL and serve GSSAPI, a KDC in the run's
    // namespaces, workers that authenticate from a keytab (with `--secure`, over TLS).
    let kerberos = args.iter().any(|a| a == "--kerberos")
        || std::env::var("ZKR_JEPSEN_KERBEROS").is_ok_and(|v| v == "1");
    let stop_at_first = args.iter().any(|a| a == "--stop-at-first");
    // `--replicas-each-fault`: after every fault, the workers stopped and the members'
    // replicas compared; the run stops at the first divergence, naming the faults before it
    // (to find what makes ZooKeeper's replicas diverge; see `replicas.rs`).
    let replicas_each_fault = args.iter().any(|a| a == "--replicas-each-fault");
    // `--fast-clock R`: the members' clocks run R times as fast as the machine's (clients'
    // do not), so the leader expires sessions early, by `(R - 1) / R` of their timeout.
    let fast_clock: Option<f64> = args.iter().position(|a| a == "--fast-clock").map(|i| {
        let rate = args.get(i + 1).and_then(|v| v.parse().ok());
        rate.filter(|r: &f64| r.is_finite() && *r > 0.0)
            .expect("--fast-clock: a positive rate, such as 1.05")
    });
    // `--nemesis a,b`: only these fault kinds (names as in `nemesis::KINDS`).
    let kinds: Vec<&'static str> = match args.iter().position(|a| a == "--nemesis") {
        Some(i) => {
            let wanted = args.get(i + 1).map(String::as_str).unwrap_or_default();
            let kinds: Vec<&'static str> = KINDS
                .iter()
                .copied()
                .filter(|k| wanted.split(',').any(|w| w == *k))
                .collect();
            assert!(
                !kinds.is_empty(),
                "--nemesis: none of {wanted:?} is in {KINDS:?}"
            );
            kinds
        }
        None => KINDS.to_vec(),
    };
    // As root, the run goes on in network and mount namespaces of its own (this process is
    // replaced): there the ensemble's links can be severed by a firewall, election links
    // included, and its logs' disks frozen, without touching the machine's.
    let namespaces = match zk_recipes::testing::enter_private_namespaces() {
        Ok(()) => true,
        Err(e) if std::env::var("ZKR_REQUIRE_NAMESPACES").is_ok_and(|v| v == "1") => {
            panic!("ZKR_REQUIRE_NAMESPACES=1, but: {e}")
        }
        Err(e) => {
            println!(
                "jepsen: no namespaces of its own ({e}): the faults {FIREWALLED:?} are left out"
            );
            false
        }
    };
    let kinds: Vec<&'static str> = kinds
        .into_iter()
        .filter(|k| namespaces || !FIREWALLED.contains(k))
        .collect();
    assert!(!kinds.is_empty(), "--nemesis: no kind left to draw");
    let _ = env_logger::builder().is_test(true).try_init();
    checker::self_test();
    replicas::self_test();
    println!("jepsen: the checker's rules each fired on records made to break them");
    let mut options = Options {
        seconds,
        seed,
        secure,
        kerberos,
        stop_at_first,
        replicas_each_fault,
        kinds,
        namespaces,
        fast_clock,
    };
    // A run in which the server's replicas diverged proves nothing about the recipes either
    // way: it is run again, on a seed of its own, up to twice (about three CI-length runs in
    // ten diverged on Debian's 3.8.0: see `replicas.rs`).
    for attempt in 0..3 {
        if attempt > 0 {
            options.seed = mono() ^ seed;
        }
        if let Verdict::Checked = run(&options) {
            return;
        }
    }
    panic!("ZooKeeper's replicas diverged in three runs in a row: no verdict");
}

/// What a run concluded about the recipes.
enum Verdict {
    /// Its checks ran (a failed one panics).
    Checked,
    /// ZooKeeper's replicas diverged (`replicas.rs`): its records are kept and said where, and
    /// its checks are not asserted.
    Void,
}

struct Options {
    seconds: u64,
    seed: u64,
    secure: bool,
    /// Kerberos: a KDC, members serving GSSAPI, workers with a keytab.
    kerberos: bool,
    /// Check after every fault and stop at the first violation (planted bugs).
    stop_at_first: bool,
    /// Compare the replicas after every fault and stop at the first divergence.
    replicas_each_fault: bool,
    /// How fast the members' clocks run, if not at the machine's rate.
    fast_clock: Option<f64>,
    kinds: Vec<&'static str>,
    /// The run is in namespaces of its own: the ensemble can be
    /// [`TestingCluster::firewalled`].
    namespaces: bool,
}

/// Each lock's protected resource: its gate, and the writes it took in its order.
type Gates = HashMap<&'static str, Mutex<(FencingGate, Vec<GateWrite>)>>;

struct Worker {
    recipe: &'static str,
    child: Child,
    /// Where the gate's answers go; taken (closed) to end the worker.
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    /// Reads the worker's stdout: cues and gate writes.
    reader: Option<JoinHandle<()>>,
    proxies: Vec<FaultProxy>,
    records: PathBuf,
    /// Which of its recipe's workers it is (`0..WORKERS_PER_RECIPE`).
    member: usize,
    /// Its recipe's path.
    path: String,
}

/// Every worker process, and what the coordinator keeps for them: each lock's protected
/// resource (a gate and the writes it took) and the cues of answered writes. Dropping this
/// resumes and kills them all, also on panic.
struct Workers {
    workers: Vec<Worker>,
    gates: Arc<Gates>,
    /// A worker whose write was just answered, and when.
    cues: Receiver<(usize, u64)>,
    /// A worker about to downgrade a write hold, waiting for a line on its stdin: handed over
    /// only to a nemesis waiting for it (a rendezvous), which then owes the worker that line.
    downgrades: Receiver<usize>,
}

impl std::ops::Deref for Workers {
    type Target = Vec<Worker>;
    fn deref(&self) -> &Vec<Worker> {
        &self.workers
    }
}

impl Workers {
    /// Every gate's writes so far, in each gate's order.
    fn gate_writes(&self) -> HashMap<&'static str, Vec<GateWrite>> {
        self.gates
            .iter()
            .map(|(recipe, gate)| (*recipe, gate.lock().1.clone()))
            .collect()
    }

    /// The records checked as they are now, once the run is over: every record written.
    fn check(
        &self,
        pauses: &[(usize, u64, u64)],
        counted: Option<i64>,
        drained: &HashMap<&'static str, Vec<String>>,
        cache_end: &cache::End,
    ) -> Report {
        check(
            &self.workers,
            pauses,
            &self.gate_writes(),
            u64::MAX,
            counted,
            Some((drained, cache_end)),
        )
    }

    /// The records checked while the workers run: a barrier's passes of the last
    /// `UNWRITTEN` are left for later, as what excuses them (a member's client saying its
    /// session was lost, once it is back from a pause or a cut) may not be written yet.
    fn check_so_far(&self, pauses: &[(usize, u64, u64)]) -> Report {
        let horizon = mono().saturating_sub(UNWRITTEN.as_nanos() as u64);
        check(
            &self.workers,
            pauses,
            &self.gate_writes(),
            horizon,
            None,
            None,
        )
    }

    /// Workers whose process ended before the coordinator ended it.
    fn exited(&mut self) -> Vec<String> {
        self.workers
            .iter_mut()
            .enumerate()
            .filter_map(|(i, w)| match w.child.try_wait() {
                Ok(Some(status)) => Some(format!(
                    "worker {i} ({}) exited during the run: {status}",
                    w.recipe
                )),
                _ => None,
            })
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if matches!(w.child.try_wait(), Ok(Some(_))) {
                continue;
            }
            signal(w.child.id(), "-CONT");
            drop(w.stdin.lock().take());
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
        for w in &mut self.workers {
            if let Some(r) = w.reader.take() {
                let _ = r.join();
            }
        }
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn run(o: &Options) -> Verdict {
    let (seconds, seed, secure) = (o.seconds, o.seed, o.secure);
    println!(
        "jepsen: seed {seed}, {seconds} s of faults (replay with --seed {seed}){}",
        match (secure, o.kerberos) {
            (true, true) => ", over TLS and Kerberos",
            (true, false) => ", over TLS and SASL",
            (false, true) => ", over Kerberos",
            (false, false) => "",
        }
    );
    let mut dir = tempfile::Builder::new()
        .prefix("zkr-jepsen-")
        .tempdir()
        .expect("temp dir");
    // The workers' records and logs, kept for a look after the run; also when it fails.
    let keep = KeepOnFailure(dir.path().to_owned());
    if std::env::var_os("ZKR_JEPSEN_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!("records and logs kept in {}", dir.path().display());
    }
    // syncLimit 40 ticks (4 s): a follower keeps serving its clients through a leader's pause
    // of up to 4 s, longer than the sessions (2 s), so a paused leader resumes with sessions
    // to expire and requests waiting in its sockets.
    // With --secure: TLS-only members that require SASL; the workers speak both (the fault
    // proxies pass the bytes through untouched).
    let pki = secure.then(|| pki::Pki::new("jepsen"));
    let mut security = Vec::new();
    let mut options = ServerOptions {
        sync_limit: 40,
        ..ServerOptions::default()
    };
    if let Some(rate) = o.fast_clock {
        // Every member, so that whoever leads expires sessions early (an election never takes
        // leadership back from a sitting leader: one fast member would lead only at times).
        options.clock_rates = vec![rate; 3];
        println!("jepsen: the members' clocks run at {rate} times the machine's");
    }
    if let Some(pki) = &pki {
        options.tls = Some(pki.server(false));
        options.sasl = Some(zk_recipes::testing::ServerSasl {
            users: vec![(SASL_USER.0.into(), SASL_USER.1.into())],
            required: true,
            kerberos: None,
        });
        security.push(("ZKR_JEPSEN_CA", pki.ca().display().to_string()));
    }
    // With --kerberos: a KDC in the run's namespaces; the members log in as
    // `zookeeper/localhost` at start, the workers get their tickets from a keytab on every
    // connection (the KDC is not faulted: it is the clients' infrastructure, not ZooKeeper's).
    let kdc = o
        .kerberos
        .then(|| zk_recipes::testing::Kdc::start().expect("a KDC"));
    if let Some(kdc) = &kdc {
        let keytab = kdc.add_principal(KERBEROS_PRINCIPAL).expect("a principal");
        options.sasl = Some(zk_recipes::testing::ServerSasl {
            users: Vec::new(),
            required: true,
            kerberos: Some(kdc.server().expect("the members' principal")),
        });
        // The coordinator's own clients read it from here; the workers get it in their
        // environment. Set before this process's first Kerberos call; a run done again (its
        // replicas diverged) makes a KDC of its own, on another port, set before that run's
        // first call: no Kerberos call is under way between two runs.
        std::env::set_var("KRB5_CONFIG", kdc.krb5_conf());
        security.push(("KRB5_CONFIG", kdc.krb5_conf().display().to_string()));
        security.push(("ZKR_JEPSEN_KEYTAB", keytab.display().to_string()));
    }
    // Firewalled, the members fsync every transaction (forceSync=yes), so a stalled log disk
    // stalls what the member acknowledges. A machine whose namespaces work but that lacks
    // what the firewall or the disks need (nft, loop devices) runs without those faults.
    let firewalled = o.namespaces.then(|| {
        let options = ServerOptions {
            force_sync: true,
            ..options.clone()
        };
        TestingCluster::firewalled(3, options)
    });
    let (cluster, firewalled) = match firewalled {
        Some(Ok(cluster)) => (cluster, true),
        Some(Err(e)) if std::env::var("ZKR_REQUIRE_NAMESPACES").is_ok_and(|v| v == "1") => {
            panic!("ZKR_REQUIRE_NAMESPACES=1, but no firewalled ensemble: {e}")
        }
        other => {
            if let Some(Err(e)) = other {
                println!(
                    "jepsen: no firewalled ensemble ({e}): the faults {FIREWALLED:?} are left out"
                );
            }
            let cluster = TestingCluster::partitionable(3, options).expect("ensemble");
            (cluster, false)
        }
    };
    let kinds: Vec<&'static str> = o
        .kinds
        .iter()
        .copied()
        .filter(|k| firewalled || !FIREWALLED.contains(k))
        .collect();
    assert!(!kinds.is_empty(), "--nemesis: no kind left to draw");
    cluster
        .wait_for_leader(Duration::from_secs(30))
        .expect("a leader");

    // First the checker's own adversary: workers that record their work even when `run`
    // says the hold expired meanwhile (what a holder that trusts its guard blindly does),
    // with their holders paused past the session. The checker must see them overlap.
    // A planted-bug run skips it: the bug is the adversary.
    if !o.stop_at_first {
        let mut liars = spawn(
            &cluster,
            dir.path(),
            &["mutex"],
            "liar",
            seed,
            true,
            &security,
        );
        let mut rng = fastrand::Rng::with_seed(seed);
        let started = mono();
        wait_until(Duration::from_secs(60), || held_since(&liars, started))
            .expect("the liars hold before the faults");
        let pauses = {
            let nemesis = Nemesis::new(&cluster, &liars, firewalled);
            for _ in 0..4 {
                nemesis.fault(&mut rng, "long-holder-pause");
            }
            let pauses = nemesis.pauses.lock().clone();
            pauses
        };
        workers_end(&mut liars);
        let report = liars.check(&pauses, None, &HashMap::new(), &cache::End::default());
        println!(
            "jepsen self-check: {} overlaps among {} holds recorded by holders that ignore \
             their lease, over {} pauses past the session",
            report.overlaps.len(),
            report.holds,
            pauses.len()
        );
        assert!(
            !report.overlaps.is_empty(),
            "the checker saw no overlap among holders that ignore their lease; seed {seed}"
        );
    }

    let mut workers = spawn(
        &cluster,
        dir.path(),
        &RECIPES,
        "jepsen",
        seed,
        false,
        &security,
    );
    let started = mono();
    wait_until(Duration::from_secs(60), || held_since(&workers, started))
        .expect("every recipe held once before the faults");
    let mut rng = fastrand::Rng::with_seed(seed);
    let chaos_for = Duration::from_secs(seconds);
    let chaos_started = Instant::now();
    let mut exited = Vec::new();
    let mut first: Option<(f64, String)> = None;
    // Progress checkpoints: every CHECKPOINT_EVERY of faults, a pause in them, and every lock
    // must be held again within SETTLE (a recipe stuck on a lost wake-up shows here, not only
    // at the end).
    let mut stuck_at_checkpoints: Vec<String> = Vec::new();
    let mut checkpoints = 0u32;
    let mut slowest_recovery = Duration::ZERO;
    let mut next_checkpoint = CHECKPOINT_EVERY;
    let (counts, pauses, (missed_cues, restarts_again), cue_lag) = {
        let nemesis = Nemesis::new(&cluster, &workers, firewalled);
        let draws: Vec<&'static str> = kinds
            .iter()
            .flat_map(|&k| std::iter::repeat_n(k, nemesis::weight(k)))
            .collect();
        let mut step = 0usize;
        let mut faults_log: Vec<String> = Vec::new();
        while chaos_started.elapsed() < chaos_for {
            // Quiet between faults: the adversary's rhythm, not a synchronisation.
            thread::sleep(Duration::from_millis(rng.u64(200..800)));
            // The first faults are one of each kind, then at random by weight.
            let kind = if step < kinds.len() {
                kinds[step]
            } else {
                draws[rng.usize(0..draws.len())]
            };
            step += 1;
            let began = mono();
            nemesis.fault(&mut rng, kind);
            // The faults' timeline, kept with the records.
            faults_log.push(format!("F {began} {} {kind}", mono()));
            let _ = std::fs::write(
                dir.path().join("nemesis.records"),
                faults_log.join("\n") + "\n",
            );
            if o.replicas_each_fault {
                // Every worker stopped, as a pause of the nemesis's (the checker excuses what a
                // pause excuses).
                let stopped = mono();
                for w in workers.iter() {
                    signal(w.child.id(), "-STOP");
                }
                let diverged = replicas::diverged(&cluster, Duration::from_secs(1));
                for w in workers.iter() {
                    signal(w.child.id(), "-CONT");
                }
                let resumed = mono();
                nemesis
                    .pauses
                    .lock()
                    .extend((0..workers.len()).map(|w| (w, stopped, resumed)));
                if let Some(why) = diverged {
                    println!(
                        "jepsen: the replicas diverged {why}, after fault {step}; the faults \
                         before it, newest last:\n  {}",
                        faults_log[faults_log.len().saturating_sub(6)..].join("\n  ")
                    );
                    dump_ensemble(&cluster, dir.path(), "diverged-early");
                    break;
                }
            }
            if chaos_started.elapsed() >= next_checkpoint {
                next_checkpoint += CHECKPOINT_EVERY;
                nemesis.heal_all();
                checkpoints += 1;
                let (since, waited) = (mono(), Instant::now());
                if wait_until(SETTLE, || held_since(&workers, since)).is_none() {
                    let secs = chaos_started.elapsed().as_secs_f64();
                    dump_ensemble(&cluster, dir.path(), &format!("checkpoint-{secs:.0}s"));
                    stuck_at_checkpoints.push(format!(
                        "after {secs:.0} s of faults, not held again within {SETTLE:?}: {:?}",
                        not_held_since(&workers, since)
                    ));
                }
                slowest_recovery = slowest_recovery.max(waited.elapsed());
            }
            if o.stop_at_first {
                let report = workers.check_so_far(&nemesis.pauses.lock());
                let found = report
                    .violations()
                    .chain(&stuck_at_checkpoints)
                    .next()
                    .cloned();
                if let Some(v) = found {
                    first = Some((chaos_started.elapsed().as_secs_f64(), v));
                    break;
                }
            }
        }
        nemesis.heal_all();
        let counts = nemesis.counts.lock().clone();
        let pauses = nemesis.pauses.lock().clone();
        let missed = (*nemesis.missed_cues.lock(), *nemesis.restarts_again.lock());
        let mut lag = nemesis.cue_lag.lock().clone();
        lag.sort_unstable();
        let cue_lag = (!lag.is_empty()).then(|| {
            (
                Duration::from_nanos(lag[lag.len() / 2]),
                Duration::from_nanos(lag[lag.len() * 9 / 10]),
            )
        });
        (counts, pauses, missed, cue_lag)
    };
    exited.extend(workers.exited());
    if let Some((secs, line)) = &first {
        println!("jepsen: first violation after {secs:.1} s of faults: {line}");
    }
    let healed = mono();
    // Progress: after the last fault, every lock is held again.
    let settle = SETTLE;
    let progressed = wait_until(settle, || held_since(&workers, healed)).is_some();
    if !progressed {
        dump_ensemble(&cluster, dir.path(), "end");
    }
    let stuck = not_held_since(&workers, healed);
    let ended = mono();
    let cache_end = cache_final_round(&cluster, &workers, &security);
    exited.extend(workers.exited());
    // Whether the server kept its own promise, compared with nothing writing: the workers
    // stopped (`workers_end` lets them go on), for well under their sessions' timeout.
    for w in workers.iter() {
        signal(w.child.id(), "-STOP");
    }
    let diverged = replicas::diverged(&cluster, Duration::from_secs(1));
    if diverged.is_some() {
        dump_ensemble(&cluster, dir.path(), "diverged");
    }
    let statuses = workers_end(&mut workers);
    let counted = final_count(&cluster, &security, "jepsen");
    let drained = final_drain(&cluster, &security, "jepsen");
    let report = workers.check(&pauses, counted, &drained, &cache_end);
    drop(workers);
    println!(
        "jepsen (seed {seed}): {} holds ({} of them read holds; {} vouched pieces of work) \
         checked over {:.0} s, {} timed acquires, {} runs refused before the work and {} \
         after it, {} gate writes ({} by zombies, {} of them refused), closest handover {:?}, \
         faults {counts:?} ({missed_cues} timed faults without a cue; from a write's \
         answer to its cut, p50 and p90: {cue_lag:?}; {restarts_again} restarts healed and \
         done again), {checkpoints} \
         progress checkpoints (slowest recovery {slowest_recovery:?}), overlaps {}, \
         stale tokens {}, fencing violations {}, deadlines missed {} (worst overrun {:?}), \
         turns missed {} of {} that came to paused waiters, \
         double-barrier passes {} ({} broke it), group looks {} ({} found a node gone \
         under a live session), counter increments made {} ({} of unknown outcome; final \
         value {counted:?}; {} violations), queue items put {} and handed over {} ({} twice, \
         at least once; {} left at the end), cache events {} ({} caches settled at \
         the end; {} violations), \
         held again after the last fault: {progressed}",
        report.holds,
        report.read_holds,
        report.pieces,
        (ended - started) as f64 / 1e9,
        report.timed,
        report.refused_before,
        report.refused_after,
        report.gate_writes,
        report.zombie_writes,
        report.zombies_refused,
        report.closest,
        report.overlaps.len(),
        report.stale.len(),
        report.fenced.len(),
        report.late.len(),
        report.worst_overrun,
        report.missed_turns.len(),
        report.turns,
        report.barrier_passes,
        report.barrier.len(),
        report.looks,
        report.presence.len(),
        report.increments,
        report.unknown_increments,
        report.counter.len(),
        report.queued,
        report.dequeued,
        report.dequeued_twice,
        drained.values().map(Vec::len).sum::<usize>(),
        report.cache_events,
        report.caches_settled,
        report.cache.len(),
    );
    for line in report
        .violations()
        .chain(&stuck_at_checkpoints)
        .chain(&exited)
        .chain(&statuses)
        .take(20)
    {
        println!("  {line}");
    }
    let replay = format!("replay with --seed {seed}");
    if let Some(why) = diverged {
        println!(
            "jepsen: ZooKeeper's replicas diverged {why} (a server bug: see \
             tests/jepsen/replicas.rs); the run's checks are void, its records kept in {}",
            keep.copy("void")
        );
        return Verdict::Void;
    }
    assert!(
        report.overlaps.is_empty(),
        "two vouched holds overlapped; {replay}"
    );
    assert!(
        report.stale.is_empty(),
        "a fencing token went back; {replay}"
    );
    assert!(
        report.fenced.is_empty(),
        "a gate took writes out of the holds' order; {replay}"
    );
    assert!(
        report.late.is_empty(),
        "a timed acquire missed its deadline; {replay}"
    );
    assert!(
        report.missed_turns.is_empty(),
        "a waiter whose turn came did not take the lock (a lost wake-up); {replay}"
    );
    assert!(
        report.barrier.is_empty(),
        "a member passed the double barrier before the others; {replay}"
    );
    assert!(
        report.presence.is_empty(),
        "a group member's node went while its session lived; {replay}"
    );
    assert!(
        report.counter.is_empty(),
        "the counter's history is not a counter's; {replay}"
    );
    assert!(
        report.queue.is_empty(),
        "a queue lost an item, made one up, or handed one over twice; {replay}"
    );
    assert!(
        report.cache.is_empty(),
        "a cache went back, showed a value from nowhere, or did not converge; {replay}"
    );
    assert!(report.lost.is_empty(), "records were lost; {replay}");
    assert!(
        exited.is_empty() && statuses.is_empty(),
        "a worker ended wrongly; {replay}"
    );
    assert!(
        stuck_at_checkpoints.is_empty(),
        "a lock was not held again at a progress checkpoint; {replay}"
    );
    assert!(
        progressed,
        "not held again within {settle:?} of the last fault: {stuck:?}; {replay}"
    );
    assert!(report.holds > 0 && report.timed > 0 && report.gate_writes > 0);
    assert!(report.barrier_passes > 0 && report.looks > 0 && report.increments > 0);
    assert!(report.cache_events > 0 && report.caches_settled == WORKERS_PER_RECIPE);
    assert!(
        counted.is_some(),
        "the counter's final value could not be read"
    );
    drop(keep);
    drop(dir);
    Verdict::Checked
}

/// While alive, a panic (a failed check) keeps the run's records and logs: copies them to a
/// directory of their own and says where.
/// What every member says of itself, its clients and the ephemeral nodes of each session
/// (four-letter words `srvr`, `cons`, `dump`, `wchc`), into `ensemble-<label>.txt` among the
/// records: when a lock is not held again, this tells a stuck recipe (nodes whose sessions
/// are alive and connected, nobody acquiring) from an ensemble that lost its way (members
/// disagreeing, nodes of sessions nobody holds).
fn dump_ensemble(cluster: &TestingCluster, dir: &Path, label: &str) {
    let mut out = format!("ensemble at {} (CLOCK_MONOTONIC ns)\n", mono());
    for m in 0..cluster.len() {
        for word in ["srvr", "cons", "dump", "wchc"] {
            let answer = cluster
                .four_letter(m, word)
                .unwrap_or_else(|e| format!("(no answer: {e})\n"));
            out.push_str(&format!("== member {m} {word}\n{answer}\n"));
        }
    }
    let file = dir.join(format!("ensemble-{label}.txt"));
    if let Err(e) = std::fs::write(&file, out) {
        println!("could not keep the ensemble's state: {e}");
    }
}

struct KeepOnFailure(PathBuf);

impl KeepOnFailure {
    /// Copies the run's records and logs to a directory beside them named with `ext`; says
    /// where, or why not.
    fn copy(&self, ext: &str) -> String {
        let kept = self.0.with_extension(ext);
        let copied = std::fs::create_dir_all(&kept).and_then(|()| {
            for entry in std::fs::read_dir(&self.0)? {
                let entry = entry?;
                std::fs::copy(entry.path(), kept.join(entry.file_name()))?;
            }
            Ok(())
        });
        match copied {
            Ok(()) => kept.display().to_string(),
            Err(e) => format!("(nowhere: {e})"),
        }
    }
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if thread::panicking() {
            println!(
                "the failed run's records and logs are in {}",
                self.copy("failed")
            );
        }
    }
}

/// Starts `WORKERS_PER_RECIPE` worker processes per recipe, each behind its own fault proxy
/// to every member, on paths under `/<tag>`, and a thread per worker that reads its stdout:
/// cues go to the nemesis, gate writes to the lock's gate, whose answer goes back on stdin.
fn spawn(
    cluster: &TestingCluster,
    dir: &Path,
    recipes: &[&'static str],
    tag: &str,
    seed: u64,
    liar: bool,
    security: &[(&str, String)],
) -> Workers {
    let exe = std::env::current_exe().expect("own path");
    let gates: Arc<Gates> = Arc::new(
        recipes
            .iter()
            .map(|r| (*r, Mutex::new((FencingGate::new(), Vec::new()))))
            .collect(),
    );
    let (cue_tx, cues) = crossbeam_channel::bounded(64);
    let (downgrade_tx, downgrades) = crossbeam_channel::bounded(0);
    let mut workers = Workers {
        workers: Vec::new(),
        gates: gates.clone(),
        cues,
        downgrades,
    };
    for (r, &recipe) in recipes.iter().enumerate() {
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
                .env(
                    "RUST_LOG",
                    std::env::var("ZKR_JEPSEN_LOG").unwrap_or_else(|_| "zk_recipes=info".into()),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(log);
            if liar {
                command.env("ZKR_JEPSEN_LIAR", "1");
            }
            command.envs(security.iter().map(|(k, v)| (k, v)));
            let mut child = command.spawn().expect("worker");
            let stdin = Arc::new(Mutex::new(child.stdin.take()));
            let stdout = child.stdout.take().expect("piped stdout");
            let reader = {
                let (stdin, gates) = (stdin.clone(), gates.clone());
                let cues = (cue_tx.clone(), downgrade_tx.clone());
                thread::spawn(move || serve(index, recipe, stdout, &stdin, &gates, &cues))
            };
            workers.workers.push(Worker {
                recipe,
                child,
                stdin,
                reader: Some(reader),
                proxies,
                records,
                member: k,
                path: format!("/{tag}/{recipe}"),
            });
        }
    }
    workers
}

/// The coordinator's side of one worker's streams, until its stdout closes.
fn serve(
    index: usize,
    recipe: &'static str,
    stdout: std::process::ChildStdout,
    stdin: &Mutex<Option<ChildStdin>>,
    gates: &Gates,
    (cues, downgrades): &(Sender<(usize, u64)>, Sender<usize>),
) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["W", when] => {
                // Nobody waiting: the cue is dropped.
                let _ = cues.try_send((index, when.parse().unwrap_or(0)));
            }
            // A nemesis waiting for this cue answers once it has stopped the worker; nobody
            // waiting: go on at once.
            ["D"] if downgrades.try_send(index).is_err() => answer(stdin, true),
            ["G", token, kind, acquired] => {
                let (Ok(token), Ok(acquired)) = (token.parse::<i64>(), acquired.parse::<u64>())
                else {
                    continue;
                };
                let admitted = {
                    let mut gate = gates[recipe].lock();
                    let admitted = gate.0.admit(token).is_ok();
                    gate.1.push(GateWrite {
                        at: mono(),
                        worker: index,
                        acquired,
                        token,
                        zombie: *kind == "Z",
                        admitted,
                    });
                    admitted
                };
                answer(stdin, admitted);
            }
            _ => {}
        }
    }
}

/// Answers a worker's question on its stdin (`1` or `0`); nothing if it was ended.
fn answer(stdin: &Mutex<Option<ChildStdin>>, yes: bool) {
    if let Some(s) = stdin.lock().as_mut() {
        let _ = writeln!(s, "{}", u8::from(yes));
    }
}

/// True once every recipe of `workers` has a piece of work vouched for that began after `since`.
fn held_since(workers: &Workers, since: u64) -> bool {
    not_held_since(workers, since).is_empty()
}

/// The recipes of `workers` without a piece of work vouched for that began after `since` (a
/// leader's term may span the faults).
fn not_held_since(workers: &Workers, since: u64) -> Vec<&'static str> {
    let files: Vec<(&'static str, PathBuf)> = workers.iter().flat_map(hold_files).collect();
    let mut locks: Vec<&'static str> = files.iter().map(|(lock, _)| *lock).collect();
    locks.sort_unstable();
    locks.dedup();
    locks.retain(|lock| {
        !files
            .iter()
            .filter(|(l, _)| l == lock)
            .any(|(_, file)| checker::progress_since(lock, &tail(file), since))
    });
    locks
}

/// The last 64 KiB of a records file, from its first whole line: enough to see the latest holds
/// (a poll every 50 ms must not read a long run's whole records).
fn tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(TAIL);
    let mut text = String::new();
    if file.seek(SeekFrom::Start(from)).is_err() || file.read_to_string(&mut text).is_err() {
        return String::new();
    }
    match (from, text.find('\n')) {
        (0, _) => text,
        (_, Some(i)) => text[i + 1..].to_owned(),
        (_, None) => String::new(),
    }
}

/// The counter's value once every worker has stopped, read by a client of the coordinator's
/// own, straight to the ensemble (a write whose answer a worker lost may still land after
/// this read: it was counted as of unknown outcome, so the bounds hold either way).
fn final_count(cluster: &TestingCluster, security: &[(&str, String)], tag: &str) -> Option<i64> {
    let client = coordinator_client(cluster, security)?;
    let path = format!("/{tag}/{}", counter::COUNTER);
    client.sync(&path).ok()?;
    zk_recipes::atomic::DistributedAtomicLong::new(&client, &path, zk_recipes::RetryPolicy::never())
        .ok()?
        .get()
        .ok()
        .map(|v| v.pre_value)
}

/// What is left in each queue once every worker has stopped, taken out exactly once by a
/// client of the coordinator's own: items locked by a stopped worker's session come free when
/// the session expires, so the drain goes on until the queue is empty (or nothing came for
/// 30 s).
fn final_drain(
    cluster: &TestingCluster,
    security: &[(&str, String)],
    tag: &str,
) -> HashMap<&'static str, Vec<String>> {
    let client = coordinator_client(cluster, security);
    let mut left: HashMap<&'static str, Vec<String>> = HashMap::new();
    for recipe in [queue::ONCE, queue::LEAST] {
        let items = left.entry(recipe).or_default();
        let Some(client) = &client else { continue };
        let path = format!("/{tag}/{recipe}");
        let Ok(q) = zk_recipes::queue::DistributedQueue::new(client, &path) else {
            continue;
        };
        // Until empty, or nothing taken for 30 s (items locked by a stopped worker's session
        // come free within its timeout).
        let mut until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            match q.take_once(Duration::from_secs(1)) {
                Ok(Some(item)) => {
                    items.extend(
                        item.items()
                            .iter()
                            .map(|i| String::from_utf8_lossy(i).into_owned()),
                    );
                    until = Instant::now() + Duration::from_secs(30);
                }
                Ok(None) if q.items().is_ok_and(|i| i.is_empty()) => break,
                _ => {}
            }
        }
    }
    left
}

/// The cache's end (`cache.rs`): its workers stop writing; with the tree still, the
/// coordinator changes every worker's part of it while the first worker's connections are
/// refused (its cache must read the tree again on the same session) and the second's process
/// is stopped past its session's timeout (a new session); then the caches settle and write
/// themselves down, and the coordinator reads the tree.
fn cache_final_round(
    cluster: &TestingCluster,
    workers: &Workers,
    security: &[(&str, String)],
) -> cache::End {
    let mut end = cache::End::default();
    let caches: Vec<&Worker> = workers
        .iter()
        .filter(|w| w.recipe == cache::CACHE)
        .collect();
    let Some(root) = caches.first().map(|w| w.path.clone()) else {
        return end;
    };
    let said = |w: &Worker, what: &str| tail(&w.records).lines().any(|l| l.starts_with(what));
    caches.iter().for_each(|w| answer(&w.stdin, true));
    if wait_until(SETTLE, || caches.iter().all(|w| said(w, "q "))).is_none() {
        println!("jepsen: a cache worker did not stop writing within {SETTLE:?}");
    }
    let Some(client) = coordinator_client(cluster, security) else {
        end.unread = Some("no client of the coordinator's".into());
        return end;
    };
    // Each phase's calls end within ten seconds (a deadline from the phase's start).
    let timed = || client.with_timeout(Duration::from_secs(10));
    let began = Instant::now();
    let (cut, stopped) = (caches[0], caches.get(1).copied());
    cut.proxies.iter().for_each(FaultProxy::refuse);
    if let Some(w) = stopped {
        signal(w.child.id(), "-STOP");
    }
    // Every worker's part changed: a node and its child made, the first node deleted (with
    // its child), the last one's data changed.
    let client = timed();
    let parts = client.children(&root).unwrap_or_default();
    for (n, part) in parts.iter().enumerate() {
        let part = format!("{root}/{part}");
        let mut keys = client.children(&part).unwrap_or_default();
        keys.sort();
        let made = format!("{part}/end");
        for (path, value) in [
            (made.clone(), format!("end-{n}")),
            (format!("{made}/c"), format!("end-{n}-c")),
        ] {
            end.written.push((path.clone(), value.clone()));
            let _ = client.create(&path, value.as_bytes(), zk_recipes::CreateMode::Persistent);
        }
        if let Some(first) = keys.first() {
            let key = format!("{part}/{first}");
            let _ = client.delete(&format!("{key}/c"));
            let _ = client.delete(&key);
        }
        if let Some(last) = keys.get(1..).and_then(<[String]>::last) {
            let key = format!("{part}/{last}");
            let value = format!("end-{n}-set");
            end.written.push((key.clone(), value.clone()));
            let _ = client.set_data(&key, value.as_bytes(), None);
        }
    }
    // The faults' lengths, the adversary's rhythm: the refused worker is let back within its
    // session's timeout, the stopped one resumes past it.
    thread::sleep(Duration::from_millis(700).saturating_sub(began.elapsed()));
    cut.proxies.iter().for_each(FaultProxy::heal);
    thread::sleep((SESSION + Duration::from_millis(1500)).saturating_sub(began.elapsed()));
    if let Some(w) = stopped {
        signal(w.child.id(), "-CONT");
    }
    caches.iter().for_each(|w| answer(&w.stdin, true));
    // Each settles within 30 s of its go.
    if wait_until(SETTLE + Duration::from_secs(10), || {
        caches.iter().all(|w| said(w, "S "))
    })
    .is_none()
    {
        println!("jepsen: a cache did not write itself down in time");
    }
    let client = timed();
    let tree = client
        .sync(&root)
        .and_then(|()| worker::read_tree(&client, &root));
    match tree {
        Ok(nodes) => {
            for n in nodes {
                let value = n.data.as_deref().filter(|d| !d.is_empty()).map_or_else(
                    || "-".to_owned(),
                    |d| String::from_utf8_lossy(d).into_owned(),
                );
                end.tree.insert(n.path, (n.stat.czxid, n.stat.mzxid, value));
            }
        }
        Err(e) => end.unread = Some(e.to_string()),
    }
    end
}

/// A client of the coordinator's own, straight to the ensemble.
fn coordinator_client(
    cluster: &TestingCluster,
    security: &[(&str, String)],
) -> Option<zk_recipes::Client> {
    let builder = zk_recipes::Client::builder(&cluster.connect_string())
        .session_timeout(Duration::from_secs(10))
        .tick_time(TICK)
        .connection_timeout(Duration::from_secs(30));
    let builder = secured(builder, |key| {
        security
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    });
    builder.connect().ok()
}

/// Stops every worker (their records are complete: each line was written at once); returns
/// those that did not end as told (status 0 once their stdin closes).
fn workers_end(workers: &mut Workers) -> Vec<String> {
    let mut wrong = Vec::new();
    for w in &mut workers.workers {
        signal(w.child.id(), "-CONT");
        drop(w.stdin.lock().take());
    }
    for (i, w) in workers.workers.iter_mut().enumerate() {
        match w.child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => wrong.push(format!("worker {i} ({}) ended with {status}", w.recipe)),
            Err(e) => wrong.push(format!("worker {i} ({}): {e}", w.recipe)),
        }
        if let Some(r) = w.reader.take() {
            let _ = r.join();
        }
    }
    wrong
}

/// Of a lock chosen at random, the worker whose latest vouched interval is the latest: probably
/// its holder. (Not the latest over all locks: that is mostly the same few recipes, and a fault
/// aimed at holders must reach every kind of hold, the read/write lock's writers too.)
fn likely_holder(workers: &[Worker], rng: &mut fastrand::Rng) -> usize {
    let mut recipes: Vec<&'static str> = workers.iter().map(|w| w.recipe).collect();
    recipes.dedup();
    let recipe = recipes[rng.usize(0..recipes.len())];
    (0..workers.len())
        .filter(|&i| workers[i].recipe == recipe)
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
