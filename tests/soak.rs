//! Fault soak on a 3-node ensemble: no fault sequence ever lets two valid holders in.
//!
//! 16 clients, each behind its own fault proxies (one per ensemble member), contend on one lock
//! while a seeded chaos thread cuts connections, black-holes a client past its session timeout,
//! and kills and restarts ensemble members (the leader too), never more than one down. Every
//! hold does its work through `guard.run(...)` against a resource behind a `FencingGate`.
//!
//! CI mode runs about 30 s of faults per lock kind. `ZKR_SOAK_SECS=600` runs longer;
//! `ZKR_SOAK_SEED=<n>` replays a run (the seed is printed, also when a run fails).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rstest::rstest;
use zk_recipes::lock::{FencingGate, InterProcessMutex, InterProcessReadWriteLock, Lease};
use zk_recipes::testing::{FaultProxy, TestingCluster};
use zk_recipes::Client;

const SESSION: Duration = Duration::from_secs(2);
const PATH: &str = "/soak/lock";

/// A tiny seeded generator (xorshift64), so a run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A valid hold: it passed `run`'s checks before and after its work.
#[derive(Clone, Copy)]
struct Hold {
    start: Instant,
    end: Instant,
    exclusive: bool,
}

#[derive(Default)]
struct Faults {
    cuts: AtomicU64,
    expiries: AtomicU64,
    member_kills: AtomicU64,
    leader_kills: AtomicU64,
}

struct Member {
    client: Client,
    proxies: Vec<FaultProxy>,
}

#[rstest]
#[case::mutex(false)]
#[case::rwlock(true)]
fn no_fault_sequence_lets_two_valid_holders_in(#[case] rwlock: bool) {
    init_logs();
    let seed = std::env::var("ZKR_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ (u64::from(std::process::id()) << 32) ^ u64::from(rwlock)
        });
    let chaos_for = Duration::from_secs(
        std::env::var("ZKR_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let kind = if rwlock {
        "rwlock (12 readers, 4 writers)"
    } else {
        "mutex (16 clients)"
    };
    println!(
        "soak {kind}: seed {seed}, {chaos_for:?} of faults (replay with ZKR_SOAK_SEED={seed})"
    );

    let cluster = Arc::new(TestingCluster::start(3).expect("ensemble"));
    let members: Vec<Arc<Member>> = (0..16)
        .map(|_| {
            let proxies: Vec<FaultProxy> = (0..3)
                .map(|m| FaultProxy::start(cluster.addr(m)).unwrap())
                .collect();
            let connect = proxies
                .iter()
                .map(|p| p.connect_string())
                .collect::<Vec<_>>()
                .join(",");
            let client = Client::builder(&connect)
                .session_timeout(SESSION)
                .tick_time(Duration::from_millis(100))
                .connection_timeout(Duration::from_secs(10))
                .connect()
                .expect("connect");
            Arc::new(Member { client, proxies })
        })
        .collect();

    let gate = Arc::new(FencingGate::new());
    let admitted: Arc<Mutex<Vec<i64>>> = Arc::default();
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let acquired_at: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::new(Mutex::new(vec![Vec::new(); 16]));
    let worst_overrun = Arc::new(Mutex::new(Duration::ZERO));
    let stop = Arc::new(AtomicBool::new(false));

    let workers: Vec<_> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (m, gate, admitted, holds, acquired_at, worst_overrun, stop) = (
                m.clone(),
                gate.clone(),
                admitted.clone(),
                holds.clone(),
                acquired_at.clone(),
                worst_overrun.clone(),
                stop.clone(),
            );
            let writer = !rwlock || i < 4;
            thread::spawn(move || {
                let mutex = InterProcessMutex::new(&m.client, PATH).unwrap();
                let rw = InterProcessReadWriteLock::new(&m.client, PATH).unwrap();
                let lock = if !rwlock {
                    &mutex
                } else if writer {
                    rw.write_lock()
                } else {
                    rw.read_lock()
                };
                let patience = SESSION * 4;
                while !stop.load(Ordering::SeqCst) {
                    let asked = Instant::now();
                    let got = lock.try_acquire_for(patience);
                    let over = asked.elapsed().saturating_sub(patience);
                    let mut w = worst_overrun.lock().unwrap();
                    *w = (*w).max(over);
                    drop(w);
                    let Ok(Some(guard)) = got else { continue };
                    acquired_at.lock().unwrap()[i].push(Instant::now());
                    work(&guard, writer, &gate, &admitted, &holds);
                    drop(guard);
                }
            })
        })
        .collect();

    // Chaos: the first three faults are one of each kind, then at random.
    let faults = Arc::new(Faults::default());
    let mut rng = Rng(seed | 1);
    let chaos_started = Instant::now();
    let mut step = 0u64;
    let mut last_fault_healed = Instant::now();
    while chaos_started.elapsed() < chaos_for {
        thread::sleep(Duration::from_millis(200 + rng.below(800)));
        let action = if step < 3 { step } else { rng.below(3) };
        step += 1;
        match action {
            0 => {
                let m = &members[rng.below(16) as usize];
                for p in &m.proxies {
                    p.cut();
                }
                faults.cuts.fetch_add(1, Ordering::SeqCst);
            }
            1 => {
                let m = &members[rng.below(16) as usize];
                for p in &m.proxies {
                    p.blackhole();
                }
                thread::sleep(SESSION + Duration::from_millis(800));
                for p in &m.proxies {
                    p.heal();
                }
                faults.expiries.fetch_add(1, Ordering::SeqCst);
            }
            _ => {
                let leader = cluster.leader();
                let victim = if step == 3 || rng.below(2) == 0 {
                    leader.unwrap_or(0)
                } else {
                    rng.below(3) as usize
                };
                if Some(victim) == leader {
                    faults.leader_kills.fetch_add(1, Ordering::SeqCst);
                }
                cluster.kill(victim);
                thread::sleep(Duration::from_millis(500 + rng.below(1500)));
                cluster.restart(victim).expect("restart member");
                faults.member_kills.fetch_add(1, Ordering::SeqCst);
            }
        }
        last_fault_healed = Instant::now();
    }

    // Faults are over: everyone must get the lock again, soon.
    let settle = SESSION + Duration::from_secs(2);
    let everyone_back = wait_for(SOON * 2, || {
        let at = acquired_at.lock().unwrap();
        at.iter()
            .all(|v| v.iter().any(|t| *t > last_fault_healed))
            .then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().expect("worker");
    }

    let holds = holds.lock().unwrap().clone();
    let overlaps = count_overlaps(holds.clone());
    let tokens = admitted.lock().unwrap().clone();
    let stale_accepted = tokens.windows(2).filter(|w| w[1] < w[0]).count();
    let at = acquired_at.lock().unwrap().clone();
    let per_client: Vec<usize> = at.iter().map(Vec::len).collect();
    let slowest_back = at
        .iter()
        .filter_map(|v| {
            v.iter()
                .find(|t| **t > last_fault_healed)
                .map(|t| *t - last_fault_healed)
        })
        .max()
        .unwrap_or_default();
    for m in &members {
        m.client.close();
    }
    let observer = connect(&cluster.connect_string(), Duration::from_secs(10));
    let left = observer.children(PATH).map(|c| c.len()).unwrap_or(0);
    let worst_overrun = *worst_overrun.lock().unwrap();

    println!(
        "soak {kind} (seed {seed}): valid holds {}, overlapping valid holds {overlaps}, fenced writes {}, \
         stale-token writes accepted {stale_accepted}, faults: {} cuts, {} expiries, {} member kills ({} of the leader), \
         acquisitions per client {per_client:?}, slowest first acquisition after the last fault {slowest_back:?} \
         (bound {settle:?}), worst acquire overrun past its deadline {worst_overrun:?}, nodes left {left}",
        holds.len(),
        tokens.len(),
        faults.cuts.load(Ordering::SeqCst),
        faults.expiries.load(Ordering::SeqCst),
        faults.member_kills.load(Ordering::SeqCst),
        faults.leader_kills.load(Ordering::SeqCst),
    );
    let replay = format!("replay with ZKR_SOAK_SEED={seed}");
    assert_eq!(overlaps, 0, "two valid holders at once; {replay}");
    assert_eq!(stale_accepted, 0, "a stale token was admitted; {replay}");
    assert!(
        faults.cuts.load(Ordering::SeqCst) > 0 && faults.expiries.load(Ordering::SeqCst) > 0,
        "{replay}"
    );
    assert!(
        faults.member_kills.load(Ordering::SeqCst) > 0
            && faults.leader_kills.load(Ordering::SeqCst) > 0,
        "{replay}"
    );
    assert!(
        everyone_back.is_some(),
        "a client never acquired after the faults: {per_client:?}; {replay}"
    );
    assert!(
        slowest_back <= settle,
        "a waiter took {slowest_back:?} after the last fault; {replay}"
    );
    assert!(
        worst_overrun < Duration::from_secs(1),
        "an acquire ran {worst_overrun:?} past its deadline; {replay}"
    );
    assert_eq!(left, 0, "nodes left under the lock path; {replay}");
}

/// One hold's work: a fenced write (writers) or a read, done through `run` so that only holds
/// whose lease was certainly valid throughout count.
fn work(
    guard: &Lease,
    writer: bool,
    gate: &FencingGate,
    admitted: &Mutex<Vec<i64>>,
    holds: &Mutex<Vec<Hold>>,
) {
    let Ok(token) = guard.fencing_token() else {
        return;
    };
    let result = guard.run(|| {
        let start = Instant::now();
        let wrote = if writer {
            gate.write(token, || {
                admitted.lock().unwrap().push(token);
                thread::sleep(Duration::from_millis(2));
            })
            .is_ok()
        } else {
            thread::sleep(Duration::from_millis(2));
            true
        };
        (start, Instant::now(), wrote)
    });
    if let Ok((start, end, true)) = result {
        holds.lock().unwrap().push(Hold {
            start,
            end,
            exclusive: writer,
        });
    }
}

/// Valid holds that overlap one that must be alone.
fn count_overlaps(mut holds: Vec<Hold>) -> usize {
    holds.sort_by_key(|h| h.start);
    let mut overlaps = 0;
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.exclusive || b.exclusive {
                overlaps += 1;
            }
        }
    }
    overlaps
}
