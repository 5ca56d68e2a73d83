//! A worker process: one client, one recipe, contending until its stdin closes; it writes
//! down every acquire, every vouched piece of work and every timed call.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Deref;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use zk_recipes::lock::{Lease, RunError};
use zk_recipes::{
    Client, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, LeaderLatch, LeaderSelector,
};

use crate::{mono, SESSION, TICK, WORKERS_PER_RECIPE};

/// Appends one line per record, unbuffered: a process killed or paused loses nothing written.
struct Records(Mutex<File>);

impl Records {
    fn line(&self, line: String) {
        let _ = self.0.lock().write_all(format!("{line}\n").as_bytes());
    }
}

pub fn worker() -> ! {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let _ = env_logger::try_init();
    // The coordinator ends us by closing our stdin (also when it dies).
    thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let records = Arc::new(Records(Mutex::new(
        OpenOptions::new()
            .append(true)
            .create(true)
            .open(var("ZKR_JEPSEN_OUT"))
            .expect("records file"),
    )));
    let seed: u64 = var("ZKR_JEPSEN_SEED").parse().unwrap_or(1);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (recipe, path, id) = (
        var("ZKR_JEPSEN_RECIPE"),
        var("ZKR_JEPSEN_PATH"),
        var("ZKR_JEPSEN_WORKER"),
    );
    let client = loop {
        let mut builder = Client::builder(&var("ZKR_JEPSEN_CONNECT"))
            .session_timeout(SESSION)
            .tick_time(TICK)
            .connection_timeout(Duration::from_secs(30));
        if let Ok(ca) = std::env::var("ZKR_JEPSEN_CA") {
            let (user, password) = super::SASL_USER;
            builder = builder
                .tls(zk_recipes::TlsOptions::new(ca))
                .sasl_digest(user, password);
        }
        match builder.connect() {
            Ok(c) => break c,
            Err(e) => log::warn!("worker {id}: connect: {e}"),
        }
    };
    match recipe.as_str() {
        "mutex" => {
            let m = InterProcessMutex::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| m.try_acquire_for(d));
        }
        "semaphore-mutex" => {
            let s = InterProcessSemaphoreMutex::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| s.try_acquire_for(d));
        }
        "semaphore-v2" => {
            let s = InterProcessSemaphoreV2::new(&client, &path, 1).expect("recipe");
            contend(&records, &mut rng, |d| s.try_acquire_for(d));
        }
        "write-lock" => {
            let rw = InterProcessReadWriteLock::new(&client, &path).expect("recipe");
            contend(&records, &mut rng, |d| rw.write_lock().try_acquire_for(d));
        }
        "read-write" => {
            // Two writers that downgrade half their holds, and a reader: readers may share,
            // nothing may overlap a write hold.
            let rw = InterProcessReadWriteLock::new(&client, &path).expect("recipe");
            let reader = id.parse::<usize>().unwrap_or(0) % WORKERS_PER_RECIPE == 0;
            loop {
                let patience = Duration::from_millis(rng.u64(100..3000));
                let asked = mono();
                let side = if reader {
                    rw.read_lock()
                } else {
                    rw.write_lock()
                };
                let got = side.try_acquire_for(patience);
                records.line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
                let Ok(Some(guard)) = got else { continue };
                let kind = if reader { 'R' } else { 'W' };
                records.line(format!("A {} {kind}", mono()));
                for _ in 0..rng.u32(1..=20) {
                    if !vouch(&records, &guard, &mut rng, kind) {
                        break;
                    }
                }
                if !reader && rng.bool() {
                    if let Ok(read) = guard.downgrade() {
                        records.line(format!("A {} R", mono()));
                        for _ in 0..rng.u32(1..=20) {
                            if !vouch(&records, &read, &mut rng, 'R') {
                                break;
                            }
                        }
                    }
                }
            }
        }
        "leader-selector" => {
            let r = records.clone();
            let rng = Mutex::new(rng);
            let selector = LeaderSelector::new(&client, &path, &id, move |ctx| {
                r.line(format!("A {}", mono()));
                while !ctx.is_cancelled() && vouch(&r, ctx.lease(), &mut rng.lock(), 'W') {}
            })
            .expect("recipe")
            .auto_requeue();
            selector.start().expect("start");
            // Leads whenever it can until the coordinator ends the process.
            let (_keep, never) = crossbeam_channel::bounded::<()>(0);
            let _ = never.recv();
        }
        "leader-latch" => {
            // A latch has no fencing token of its own (0 for all): what it vouches for is
            // `has_leadership()` before and after each piece of work, each its own hold (a
            // latch may lead again on a new session between two pieces).
            let latch = LeaderLatch::new(&client, &path, &id).expect("recipe");
            latch.start().expect("start");
            loop {
                if !latch
                    .await_leadership(Duration::from_secs(3))
                    .unwrap_or(false)
                {
                    continue;
                }
                records.line(format!("A {}", mono()));
                let start = mono();
                thread::sleep(Duration::from_millis(rng.u64(1..50)));
                let end = mono();
                if latch.has_leadership() {
                    records.line(format!("H {start} {end} 0"));
                }
            }
        }
        other => panic!("unknown recipe {other}"),
    }
    std::process::exit(0)
}

/// Timed acquires forever; each hold vouches for 1 to 40 pieces of work (up to about two
/// seconds of holding, so that faults land inside holds), then releases.
fn contend<G: Deref<Target = Lease>>(
    records: &Records,
    rng: &mut fastrand::Rng,
    acquire: impl Fn(Duration) -> zk_recipes::Result<Option<G>>,
) {
    loop {
        let patience = Duration::from_millis(rng.u64(100..3000));
        let asked = mono();
        let got = acquire(patience);
        records.line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
        let Ok(Some(guard)) = got else { continue };
        records.line(format!("A {}", mono()));
        for _ in 0..rng.u32(1..=40) {
            if !vouch(records, &guard, rng, 'W') {
                break;
            }
        }
    }
}

/// One piece of work through `run`: recorded only if the hold was valid before and after it.
/// `kind`: `W` for a hold that excludes every other, `R` for a read hold.
fn vouch(records: &Records, lease: &Lease, rng: &mut fastrand::Rng, kind: char) -> bool {
    let Ok(token) = lease.fencing_token() else {
        return false;
    };
    let work = Duration::from_millis(rng.u64(1..50));
    match lease.run(|| {
        let start = mono();
        // The work itself (a stand-in for a real job's), not a synchronisation.
        thread::sleep(work);
        (start, mono())
    }) {
        Ok((start, end)) => {
            records.line(format!("H {start} {end} {token} {kind}"));
            true
        }
        // The checker's adversary: a holder that trusts its guard blindly.
        Err(RunError::Expired {
            output: (start, end),
            ..
        }) if std::env::var_os("ZKR_JEPSEN_LIAR").is_some() => {
            records.line(format!("H {start} {end} {token} {kind}"));
            false
        }
        Err(_) => false,
    }
}
