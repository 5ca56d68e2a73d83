//! A worker process: one client, one recipe, contending until its stdin closes; it writes
//! down every acquire, every vouched piece of work, every refused `run` and every timed call.
//!
//! Beside its records it speaks to the coordinator over its standard streams:
//! - `W <when>` on stdout: a write the server checked against the hold (`while_held`) was
//!   answered at `when`. The nemesis may be waiting for that cue to cut the member off (the moment a
//!   lease bound that trusts the write's own send time overstates the most).
//! - `D` on stdout: a write hold is about to be downgraded. The worker waits for a line on
//!   stdin before it goes on; a nemesis waiting for this cue stops the process before that
//!   line is sent.
//! - `G <token> <L|Z> <acquired>` on stdout: a write to the protected resource, the
//!   coordinator's `FencingGate` for this lock, from a live hold (`L`, its piece vouched) or a
//!   zombie (`Z`: its lease refused a `run`, and it writes anyway, as a paused holder that
//!   resumes does). The coordinator answers `1` (admitted) or `0` on stdin; the worker waits
//!   for the answer, as a write to a real resource does.
//!
//! A record that cannot be written ends the process with status 3, which fails the run.
//!
//! The mutex and write-lock workers also pause themselves, one watch in four, right after a
//! waiter's watch on the node ahead is set and before it waits, until that node is gone: a
//! thread preempted at that instant while its predecessor leaves (the seed article's race).
//! The stop is written down (`S <from> <to>`) and counts as a pause of the process. If the
//! waiter is then first in line, its turn has come: it writes `P <when>`, and the checker
//! expects it to hold the lock next (an `A`), unless its acquire failed (`F`), had less than
//! a second left, met a change of its client's state (`C <when> <state>`) or a pause of its
//! process.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::ops::Deref;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use zk_recipes::barriers::DistributedDoubleBarrier;
use zk_recipes::lock::{InterProcessMultiLock, Lease, LockOptions, LockSpec, RunError, WhileHeld};
use zk_recipes::nodes::GroupMember;
use zk_recipes::partition::Partitioner;
use zk_recipes::{
    Client, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, LeaderLatch, LeaderSelector,
};

use crate::{mono, SEMAPHORE_LEASES, SESSION, TICK, WORKERS_PER_RECIPE};

/// The exit status of a worker that could not write a record down.
pub const LOST_RECORD: i32 = 3;

/// Appends one line per record, unbuffered: a process killed or paused loses nothing written.
struct Records(Mutex<File>);

impl Records {
    fn line(&self, line: String) {
        if let Err(e) = self.0.lock().write_all(format!("{line}\n").as_bytes()) {
            eprintln!("a record could not be written: {e}");
            std::process::exit(LOST_RECORD);
        }
    }
}

/// The worker's side of the coordinator's streams.
struct Coordinator {
    /// The gate's answers, read from stdin by their own thread.
    answers: Receiver<bool>,
    /// Serialises a question and the wait for its answer (the selector's thread and ours).
    asking: Mutex<()>,
    /// Whether this recipe's exclusive holds write through the gate.
    gated: bool,
}

impl Coordinator {
    fn say(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // The coordinator is gone: the run is over.
            std::process::exit(0);
        }
    }

    /// A write to the protected resource with `token`; true if the gate admitted it.
    fn gate(&self, token: i64, zombie: bool, acquired: u64) -> bool {
        if !self.gated {
            return true;
        }
        let _asking = self.asking.lock();
        self.say(&format!(
            "G {token} {} {acquired}",
            if zombie { 'Z' } else { 'L' }
        ));
        // No answer means stdin closed: the stdin thread ends the process.
        self.answers.recv().unwrap_or(false)
    }

    /// Says a write hold is about to be downgraded (`D`), and waits for the coordinator's
    /// go: a nemesis waiting for this cue stops the process first, so the downgrade runs on a
    /// hold a pause may have cost (a writer's GC pause at the worst moment).
    fn before_downgrade(&self) {
        let _asking = self.asking.lock();
        self.say("D");
        let _ = self.answers.recv();
    }
}

/// What one worker needs at hand inside a hold (cheap to clone: the selector's term runs on
/// the selector's thread).
#[derive(Clone)]
struct Ctx {
    records: Arc<Records>,
    coordinator: Arc<Coordinator>,
    client: Client,
    /// A node of its own this worker writes to while it holds (the cue for timed faults).
    scratch: String,
    /// The checker's adversary: records its work even when `run` says the lease expired.
    liar: bool,
}

pub fn worker() -> ! {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let _ = env_logger::try_init();
    // The coordinator answers gate writes on stdin and ends us by closing it (also when it
    // dies).
    let (answer_tx, answers) = crossbeam_channel::unbounded();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let _ = answer_tx.send(line.trim() == "1");
        }
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
    let coordinator = Arc::new(Coordinator {
        answers,
        asking: Mutex::new(()),
        gated: !matches!(
            recipe.as_str(),
            "semaphore-v2x2"
                | "partition"
                | "multi-lock"
                | "double-barrier"
                | "group"
                | "counter"
                | "queue-once"
                | "queue-least"
                | "cache"
        ),
    });
    let client = connect(&id, SESSION);
    let scratch = format!("{path}-scratch/{id}");
    while let Err(e) = client.ensure_path(&scratch) {
        log::warn!("worker {id}: scratch node: {e}");
    }
    let ctx = Ctx {
        records: records.clone(),
        coordinator,
        client: client.clone(),
        scratch,
        liar: std::env::var_os("ZKR_JEPSEN_LIAR").is_some(),
    };
    match recipe.as_str() {
        "mutex" => {
            let m = InterProcessMutex::with_options(&client, &path, turn_pauses(&ctx, seed))
                .expect("recipe");
            contend(&ctx, &mut rng, |d| m.try_acquire_for(d));
        }
        "semaphore-mutex" => {
            let s = InterProcessSemaphoreMutex::new(&client, &path).expect("recipe");
            contend(&ctx, &mut rng, |d| s.try_acquire_for(d));
        }
        "semaphore-v2" => {
            let s = InterProcessSemaphoreV2::new(&client, &path, 1).expect("recipe");
            contend(&ctx, &mut rng, |d| s.try_acquire_for(d));
        }
        "semaphore-v2x2" => {
            // More workers than leases: never more holders than leases at once.
            let s = InterProcessSemaphoreV2::new(&client, &path, SEMAPHORE_LEASES).expect("recipe");
            contend(&ctx, &mut rng, |d| s.try_acquire_for(d));
        }
        "write-lock" => {
            let rw =
                InterProcessReadWriteLock::with_options(&client, &path, turn_pauses(&ctx, seed))
                    .expect("recipe");
            contend(&ctx, &mut rng, |d| rw.write_lock().try_acquire_for(d));
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
                let acquired = mono();
                records.line(format!("A {acquired} {kind}"));
                hold(&ctx, &guard, &mut rng, kind, acquired, 20);
                if !reader && rng.bool() {
                    ctx.coordinator.before_downgrade();
                    if let Ok(read) = guard.downgrade() {
                        let acquired = mono();
                        records.line(format!("A {acquired} R"));
                        hold(&ctx, &read, &mut rng, 'R', acquired, 20);
                    }
                }
            }
        }
        "leader-selector" => {
            let rng = Mutex::new(rng);
            let term = ctx.clone();
            let selector = LeaderSelector::new(&client, &path, &id, move |leader| {
                let acquired = mono();
                term.records.line(format!("A {acquired}"));
                let mut rng = rng.lock();
                while !leader.is_cancelled()
                    && vouch(&term, leader.lease(), &mut rng, 'W', acquired)
                {
                    idle_then_write(&term, leader.lease(), &mut rng);
                }
            })
            .expect("recipe")
            .auto_requeue();
            selector.start().expect("start");
            // Leads whenever it can until the coordinator ends the process.
            let (_keep, never) = crossbeam_channel::bounded::<()>(0);
            let _ = never.recv();
        }
        "leader-latch" => {
            // What a latch vouches for is `has_leadership()` before and after each piece of
            // work, under one term's lease (its token); a new term is a new hold.
            let latch = LeaderLatch::new(&client, &path, &id).expect("recipe");
            latch.start().expect("start");
            loop {
                if !latch
                    .await_leadership(Duration::from_secs(3))
                    .unwrap_or(false)
                {
                    continue;
                }
                let Some(lease) = latch.lease() else { continue };
                let acquired = mono();
                records.line(format!("A {acquired}"));
                for _ in 0..rng.u32(1..=40) {
                    let Ok(token) = lease.fencing_token() else {
                        break;
                    };
                    if !latch.has_leadership() {
                        break;
                    }
                    let start = mono();
                    // The work itself (a stand-in for a real job's), not a synchronisation.
                    thread::sleep(Duration::from_millis(rng.u64(1..50)));
                    let end = mono();
                    let still = latch.lease();
                    if !(still.is_some_and(|now| Arc::ptr_eq(&now, &lease))
                        && latch.has_leadership())
                    {
                        records.line(format!("X {end} E"));
                        zombie_write(&ctx, token, acquired);
                        break;
                    }
                    records.line(format!("H {start} {end} {token}"));
                    ctx.coordinator.gate(token, false, acquired);
                    idle_then_write(&ctx, &lease, &mut rng);
                }
            }
        }
        "multi-lock" => {
            // Sets of two locks: the mutex recipe's (its workers contend for it alone) and one
            // of this recipe's own. Each piece is written down twice, with each lock's token:
            // to the records (the mutex's) and to `<records>.b` (the second lock's).
            let parent = path.rsplit_once('/').map_or("", |(p, _)| p).to_owned();
            let (first_path, second_path) = (format!("{parent}/mutex"), format!("{path}-b"));
            let multi = InterProcessMultiLock::with_locks(
                &client,
                vec![
                    LockSpec::Mutex(first_path.clone()),
                    LockSpec::Mutex(second_path.clone()),
                ],
            )
            .expect("recipe");
            let out = var("ZKR_JEPSEN_OUT");
            let second = Records(Mutex::new(
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(crate::item_records(
                        std::path::Path::new(&out),
                        crate::MULTI_SECOND,
                    ))
                    .expect("second lock's records"),
            ));
            loop {
                // More patience than the single locks' (5–15 s): a set waits in the mutex
                // workers' line holding its own lock, and with their patience it starved there
                // (the own lock not held again within a checkpoint's 30 s, in a CI run).
                let patience = Duration::from_millis(rng.u64(5000..15000));
                let asked = mono();
                let got = multi.try_acquire_for(patience);
                if got.is_err() {
                    records.line(format!("F {}", mono()));
                }
                records.line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
                let Ok(Some(guard)) = got else { continue };
                let Ok(tokens) = guard.fencing_tokens() else {
                    continue;
                };
                // Each lock's token, by its node's path.
                let token_of = |lock: &str| {
                    tokens
                        .iter()
                        .find(|(node, _)| node.starts_with(&format!("{lock}/")))
                        .map(|(_, t)| *t)
                };
                let (Some(first), Some(other)) = (token_of(&first_path), token_of(&second_path))
                else {
                    continue;
                };
                let acquired = mono();
                records.line(format!("A {acquired}"));
                second.line(format!("A {acquired}"));
                for _ in 0..rng.u32(1..=20) {
                    let work = Duration::from_millis(rng.u64(1..50));
                    match guard.run(|| {
                        let start = mono();
                        // The work itself (a stand-in for a real job's), not a synchronisation.
                        thread::sleep(work);
                        (start, mono())
                    }) {
                        Ok((start, end)) => {
                            records.line(format!("H {start} {end} {first}"));
                            second.line(format!("H {start} {end} {other}"));
                        }
                        Err(RunError::Expired { .. }) => {
                            records.line(format!("X {} E", mono()));
                            break;
                        }
                        Err(_) => {
                            records.line(format!("X {} N", mono()));
                            break;
                        }
                    }
                }
            }
        }
        "partition" => {
            // Each owned item's pieces of work, vouched by its lease, into the item's own
            // records; a new token for an item is a new hold of it.
            let out = var("ZKR_JEPSEN_OUT");
            let files: HashMap<String, Records> = crate::PARTITION_ITEMS
                .iter()
                .map(|group| {
                    let item = group.rsplit('/').next().unwrap_or(group).to_owned();
                    let file = OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(crate::item_records(std::path::Path::new(&out), group))
                        .expect("item records file");
                    (item, Records(Mutex::new(file)))
                })
                .collect();
            let share =
                Partitioner::new(&client, &path, &id, files.keys().cloned()).expect("recipe");
            share.start().expect("start");
            let mut tokens: HashMap<String, i64> = HashMap::new();
            loop {
                for owned in share.owned() {
                    let (Some(rec), Ok(token)) = (files.get(owned.item()), owned.fencing_token())
                    else {
                        continue;
                    };
                    if tokens.insert(owned.item().to_owned(), token) != Some(token) {
                        rec.line(format!("A {}", mono()));
                    }
                    let work = Duration::from_millis(rng.u64(1..50));
                    match owned.run(|| {
                        let start = mono();
                        // The work itself (a stand-in for a real job's), not a synchronisation.
                        thread::sleep(work);
                        (start, mono())
                    }) {
                        Ok((start, end)) => rec.line(format!("H {start} {end} {token}")),
                        Err(RunError::Expired { .. }) => rec.line(format!("X {} E", mono())),
                        Err(_) => rec.line(format!("X {} N", mono())),
                    }
                }
                // A worker's pace between rounds over its items, not a synchronisation.
                share.wait_for_change(Duration::from_millis(rng.u64(5..50)));
            }
        }
        "double-barrier" => double_barrier(&ctx, &mut rng, &path),
        "group" => group_member(&ctx, &mut rng, &path, &id),
        "counter" => counter(&ctx, &mut rng, &path),
        "queue-once" => queue(&ctx, &mut rng, &path, &id, true),
        "queue-least" => queue(&ctx, &mut rng, &path, &id, false),
        "cache" => cache(&ctx, &mut rng, &path, &id),
        other => panic!("unknown recipe {other}"),
    }
    std::process::exit(0)
}

/// Every state change of the worker's client, with its session (`C <when> <state> <session>`):
/// a double barrier's member whose session was lost is out of its round, and a group
/// member's observations are per session.
fn record_states(ctx: &Ctx) {
    let states = ctx.client.subscribe();
    let records = ctx.records.clone();
    // The session the client had before the subscription (its `Connected` went out before
    // anyone listened); a newer one's comes through the subscription.
    if let Some(session) = ctx.client.session_id() {
        records.line(format!("C {} Connected {}", mono(), session.0));
    }
    // Not joined: it ends with the process.
    let _ = thread::Builder::new().name("states".into()).spawn(move || {
        while let Ok(e) = states.receiver().recv() {
            // When the client decided it, on the records' clock.
            let at = mono().saturating_sub(e.at.elapsed().as_nanos() as u64);
            records.line(format!("C {at} {:?} {}", e.state, e.session_id.0));
        }
    });
}

/// Rounds of a double barrier of `WORKERS_PER_RECIPE` members, for ever: enter, work a while
/// inside, leave, rest a while outside. Each call is written down as it begins (`E <when>`,
/// `L <when>`) and as it returns (`R <when> P|T|F`: passed, timed out, failed): the checker
/// knows at each instant whether a member was entering, inside, leaving or out, and proves
/// that no member passed enter unless at some instant of its call all were in, and none
/// passed leave while another stayed inside all through its call. A member's node of a
/// session its client gave up on may outlive that (see `ghosts`).
fn double_barrier(ctx: &Ctx, rng: &mut fastrand::Rng, path: &str) -> ! {
    record_states(ctx);
    let barrier =
        DistributedDoubleBarrier::new(&ctx.client, path, WORKERS_PER_RECIPE).expect("recipe");
    ghosts(ctx, path);
    let outcome = |r: &zk_recipes::Result<bool>| match r {
        Ok(true) => 'P',
        Ok(false) => 'T',
        Err(_) => 'F',
    };
    loop {
        // More patience than the locks': a round waits for its slowest member, whom the
        // nemesis may pause for seconds.
        let patience = Duration::from_millis(rng.u64(5000..15000));
        ctx.records.line(format!("E {}", mono()));
        let entered = barrier.enter(patience);
        // A pass names the session its node was made on (the one whose loss takes it).
        let made_on = barrier
            .node_path()
            .and_then(|node| session_of_member(&node))
            .map_or(String::new(), |s| format!(" {s}"));
        ctx.records
            .line(format!("R {} {}{made_on}", mono(), outcome(&entered)));
        if matches!(entered, Ok(true)) {
            // The phase's work inside the barrier (a stand-in for a real job's), not a
            // synchronisation.
            thread::sleep(Duration::from_millis(rng.u64(0..300)));
            ctx.records.line(format!("L {}", mono()));
            let left = barrier.leave(patience);
            ctx.records.line(format!("R {} {}", mono(), outcome(&left)));
        }
        // Rest between rounds: a member out of the barrier for a while, so that a barrier
        // that lets the others through without it is seen to.
        thread::sleep(Duration::from_millis(rng.u64(0..300)));
    }
}

/// A member's nodes that may outlive their session as its client sees it. A client calls a
/// session lost when no server took it back within its timeout; the servers may keep it
/// longer (a new leader gives every session a fresh timeout), and the member's nodes of it
/// with it, which the others count. On each `Lost`: `G0 <when> <session>` (when the client
/// decided it), then, once a listing of the barrier (`path`) through the client shows no
/// member node named for that session (a watch on each waits for its deletion),
/// `G1 <when> <session>`. The checker counts the member in between.
fn ghosts(ctx: &Ctx, path: &str) {
    let states = ctx.client.subscribe();
    let (records, client, path) = (ctx.records.clone(), ctx.client.clone(), path.to_owned());
    // Not joined: it ends with the process.
    let _ = thread::Builder::new().name("ghosts".into()).spawn(move || {
        while let Ok(e) = states.receiver().recv() {
            if e.state != zk_recipes::ConnectionState::Lost {
                continue;
            }
            let at = mono().saturating_sub(e.at.elapsed().as_nanos() as u64);
            let lost = e.session_id.0;
            records.line(format!("G0 {at} {lost}"));
            // Each loss watched apart: a second loss meanwhile is written down at once.
            let (records, client, path) = (records.clone(), client.clone(), path.clone());
            let _ = thread::Builder::new().name("ghost".into()).spawn(move || {
                loop {
                    let listed = client.with_timeout(Duration::from_secs(1)).children(&path);
                    let Ok(names) = listed else {
                        // The client without a session yet: it looks again once it has one.
                        let _ = client.wait_connected(Duration::from_secs(1));
                        continue;
                    };
                    let left: Vec<String> = names
                        .into_iter()
                        .filter(|n| session_of_member(n) == Some(lost))
                        .collect();
                    if left.is_empty() {
                        break;
                    }
                    for name in left {
                        gone(&client, &format!("{path}/{name}"), lost);
                    }
                }
                records.line(format!("G1 {} {lost}", mono()));
            });
        }
    });
}

/// Returns once `node` is gone or no longer `session`'s (a deletion waited for on a watch,
/// each look bounded).
fn gone(client: &Client, node: &str, session: i64) {
    loop {
        let (tx, rx) = crossbeam_channel::unbounded();
        let quick = client.with_timeout(Duration::from_secs(1));
        match quick.exists_watch(node, &tx) {
            Ok(Some(stat)) if stat.ephemeral_owner == session => {
                let _ = rx.recv_timeout(Duration::from_secs(1));
            }
            Ok(_) => return,
            // The client without a session yet: it looks again once it has one.
            Err(_) => {
                let _ = client.wait_connected(Duration::from_secs(1));
            }
        }
        let _ = client.remove_watch(node, &tx);
    }
}

/// The session a double barrier's member node (a name or a path) was made on: its name's
/// first 16 hex digits.
fn session_of_member(node: &str) -> Option<i64> {
    let name = node.rsplit('/').next()?;
    let hex: String = name.get(..18)?.chars().filter(|c| *c != '-').collect();
    u64::from_str_radix(hex.get(..16)?, 16)
        .ok()
        .map(|v| v as i64)
}

/// A group member, observed through its own session for ever: every 20–200 ms, whether its
/// node is there and whose it is (`O <from> <to> <session> <1|0> <owner>`, from a read on
/// `session` answered in `[from, to]`). After a read that did not find the node ours, a write
/// on the same session (`V <when> <session>`): once it is answered, the session certainly
/// lived when the node was missing (a session the leader expired takes no write), which is
/// what the checker needs to call a missing node a broken promise.
fn group_member(ctx: &Ctx, rng: &mut fastrand::Rng, path: &str, id: &str) -> ! {
    record_states(ctx);
    let member = GroupMember::new(&ctx.client, path, id, id.as_bytes()).expect("recipe");
    member.start().expect("start");
    let node = format!("{path}/{id}");
    loop {
        // The observer's cadence, not a synchronisation.
        thread::sleep(Duration::from_millis(rng.u64(20..200)));
        // Each look's calls end within half a second of it (a deadline, not a per-call
        // timeout).
        let quick = ctx.client.with_timeout(Duration::from_millis(500));
        let (from, before) = (mono(), ctx.client.session_id());
        let looked = quick.exists(&node);
        let (to, after) = (mono(), ctx.client.session_id());
        let (Ok(stat), Some(session)) = (looked, before.filter(|s| Some(*s) == after)) else {
            continue;
        };
        let owner = stat.map_or(0, |s| s.ephemeral_owner);
        let ours = owner == session.0;
        ctx.records.line(format!(
            "O {from} {to} {} {} {owner}",
            session.0,
            u8::from(stat.is_some())
        ));
        if !ours
            && quick.set_data(&ctx.scratch, b"v", None).is_ok()
            && ctx.client.session_id() == Some(session)
        {
            ctx.records.line(format!("V {} {}", mono(), session.0));
        }
    }
}

/// Increments of one counter forever, each written down with when it began and returned: made
/// (`I <from> <to> <value>`), not made (`N <from> <to>`: raced, or failed before its write),
/// or of unknown outcome (`U <from> <to>`: the write's answer was lost). Optimistic tries, then a mutex, as Curator's `PromotedToLock`.
fn counter(ctx: &Ctx, rng: &mut fastrand::Rng, path: &str) -> ! {
    use zk_recipes::atomic::{DistributedAtomicLong, PromotedToLock};
    let retry =
        zk_recipes::RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(20))
            .max_retries(3);
    loop {
        // Each increment's calls end within two seconds (a deadline, not a per-call timeout).
        let client = ctx.client.with_timeout(Duration::from_secs(2));
        let promoted = PromotedToLock::new(&format!("{path}-lock"))
            .timeout(Duration::from_secs(1))
            .retry(retry.clone());
        let c = DistributedAtomicLong::new(&client, path, retry.clone())
            .and_then(|c| c.with_promotion(promoted))
            .expect("recipe");
        let from = mono();
        let done = c.increment();
        let to = mono();
        ctx.records.line(match done {
            Ok(v) if v.succeeded => format!("I {from} {to} {}", v.post_value),
            Ok(_) => format!("N {from} {to}"),
            Err(zk_recipes::Error::OutcomeUnknown { .. }) => format!("U {from} {to}"),
            // Nothing was written.
            Err(_) => format!("N {from} {to}"),
        });
        // A worker's pace between increments, not a synchronisation: a few a second each, so
        // that the counter's load on the 2-core ensemble stays a small share of the run's
        // (at 0–30 ms, three workers made 17 905 increments in one CI-length run).
        thread::sleep(Duration::from_millis(rng.u64(50..250)));
    }
}

/// Puts and takes on one queue forever, each written down (`queue.rs` has the records and the
/// rules): items of this worker's own, `w<id>-<n>`; each round puts one (a batch of two now and
/// then) and takes one, exactly once (`once`) or at least once (then marked done after a
/// stand-in for the work).
fn queue(ctx: &Ctx, rng: &mut fastrand::Rng, path: &str, id: &str, once: bool) -> ! {
    use zk_recipes::queue::DistributedQueue;
    let queue = DistributedQueue::new(&ctx.client, path).expect("recipe");
    let mut n = 0u64;
    let mut next = || {
        n += 1;
        format!("w{id}-{n}")
    };
    loop {
        // Each call's requests end within two seconds (a deadline, not a per-call timeout).
        let client = ctx.client.with_timeout(Duration::from_secs(2));
        let q = DistributedQueue::new(&client, path).expect("recipe");
        let items: Vec<String> = (0..if rng.u8(0..4) == 0 { 2 } else { 1 })
            .map(|_| next())
            .collect();
        let from = mono();
        let put = if items.len() == 1 {
            q.put(items[0].as_bytes()).map(|node| vec![node])
        } else {
            q.put_all(&items.iter().map(String::as_bytes).collect::<Vec<_>>())
        };
        let to = mono();
        match put {
            Ok(nodes) => {
                for (item, node) in items.iter().zip(nodes) {
                    ctx.records.line(format!("P {from} {to} {item} {node}"));
                }
            }
            Err(zk_recipes::Error::OutcomeUnknown { .. }) => {
                for item in &items {
                    ctx.records.line(format!("Q {from} {to} {item}"));
                }
            }
            Err(_) => ctx.records.line(format!("N {from} {to}")),
        }
        // Up to three takes a round (the first waits a while, the others not), so that
        // the workers take faster than they put and the queue stays short.
        for k in 0..3 {
            let patience = if k == 0 {
                Duration::from_millis(rng.u64(100..1000))
            } else {
                Duration::ZERO
            };
            if !take_one(ctx, rng, &q, &queue, once, patience) {
                break;
            }
        }
        // A worker's pace, not a synchronisation: a few rounds a second.
        thread::sleep(Duration::from_millis(rng.u64(50..250)));
    }
}

/// One take, written down (`t`, then `T`, `K` or `Z`; at least once, `D` or `E` after the
/// work): true if an item was handed over.
fn take_one(
    ctx: &Ctx,
    rng: &mut fastrand::Rng,
    q: &zk_recipes::queue::DistributedQueue,
    queue: &zk_recipes::queue::DistributedQueue,
    once: bool,
    patience: Duration,
) -> bool {
    ctx.records.line(format!("t {}", mono()));
    if once {
        match q.take_once(patience) {
            Ok(Some(item)) => {
                ctx.records.line(format!(
                    "T {} {} {}",
                    mono(),
                    String::from_utf8_lossy(&item.items()[0]),
                    item.node()
                ));
                true
            }
            Err(zk_recipes::Error::OutcomeUnknown { path }) => {
                ctx.records.line(format!("K {} {path}", mono()));
                false
            }
            _ => {
                ctx.records.line(format!("Z {}", mono()));
                false
            }
        }
    } else {
        match queue.take(patience) {
            Ok(Some(taken)) => {
                ctx.records.line(format!(
                    "T {} {} {}",
                    mono(),
                    String::from_utf8_lossy(&taken.items()[0]),
                    taken.node()
                ));
                // The work, a stand-in (not a synchronisation): faults land inside it.
                thread::sleep(Duration::from_millis(rng.u64(0..100)));
                let node = taken.node().to_owned();
                // One job in five fails and is let go: the item must come back.
                if rng.u8(0..5) == 0 {
                    taken.release();
                    ctx.records.line(format!("R {} {node}", mono()));
                    return true;
                }
                match taken.done() {
                    Ok(()) => ctx.records.line(format!("D {} {node}", mono())),
                    // Removed, or to be handed to another consumer: either is a delivery.
                    Err(zk_recipes::Error::OutcomeUnknown { .. }) => {
                        ctx.records.line(format!("U {} {node}", mono()))
                    }
                    Err(_) => ctx.records.line(format!("E {}", mono())),
                }
                true
            }
            _ => {
                ctx.records.line(format!("Z {}", mono()));
                false
            }
        }
    }
}

/// A cache of the recipe's whole tree, and writes to a part of it of this worker's own, each
/// written down (`cache.rs` has the records and the rules), until the coordinator says quiet
/// (a line on stdin); then, at its second line, with the tree still, the cache settles and
/// writes itself down.
fn cache(ctx: &Ctx, rng: &mut fastrand::Rng, path: &str, id: &str) -> ! {
    use zk_recipes::cache::{CacheOptions, CuratorCache};
    let own = format!("{path}/w{id}");
    while let Err(e) = ctx.client.ensure_path(&own) {
        log::warn!("worker {id}: {own}: {e}");
    }
    // The third of the recipe's workers watches with one-shot watches (as on a server before
    // 3.6), the others with a persistent recursive watch.
    let options = if id
        .parse::<usize>()
        .is_ok_and(|i| i % crate::WORKERS_PER_RECIPE == 2)
    {
        CacheOptions::new().one_shot_watches()
    } else {
        CacheOptions::new()
    };
    let cache = CuratorCache::new(&ctx.client, path, options).expect("recipe");
    let records = ctx.records.clone();
    cache.add_listener(move |e| records.line(cache_event(e)));
    cache.start().expect("the cache starts");
    let answers = &ctx.coordinator.answers;
    let mut n = 0u64;
    while answers.is_empty() {
        // Each write's requests end within two seconds (a deadline, not a per-call timeout).
        let client = ctx.client.with_timeout(Duration::from_secs(2));
        let key = format!("{own}/k{}", rng.u8(0..5));
        let child = format!("{key}/c");
        let mut value = || {
            n += 1;
            format!("w{id}-{n}")
        };
        match client.exists(&key) {
            Ok(None) => {
                let v = value();
                ctx.records.line(format!("V {key} {v}"));
                let _ = client.create(&key, v.as_bytes(), zk_recipes::CreateMode::Persistent);
            }
            Ok(Some(_)) => match rng.u8(0..10) {
                0..=4 => {
                    let target = if rng.bool() { &key } else { &child };
                    let v = value();
                    ctx.records.line(format!("V {target} {v}"));
                    match client.set_data(target, v.as_bytes(), None) {
                        Ok(stat) => {
                            ctx.records
                                .line(format!("Z {target} {v} {} {}", stat.czxid, stat.mzxid));
                            // A burst now and then: the node set again at once, so that its
                            // two changes reach the caches close together.
                            if rng.u8(0..3) == 0 {
                                let v = value();
                                ctx.records.line(format!("V {target} {v}"));
                                if let Ok(stat) = client.set_data(target, v.as_bytes(), None) {
                                    ctx.records.line(format!(
                                        "Z {target} {v} {} {}",
                                        stat.czxid, stat.mzxid
                                    ));
                                }
                            }
                        }
                        Err(e) if e.is_no_node() && target == &child => {
                            let v = value();
                            ctx.records.line(format!("V {child} {v}"));
                            let _ = client.create(
                                &child,
                                v.as_bytes(),
                                zk_recipes::CreateMode::Persistent,
                            );
                        }
                        Err(_) => {}
                    }
                }
                5..=6 => {
                    let _ = client.delete(&child);
                }
                _ => {
                    // The node and its child, in one transaction when it has one.
                    if client.delete(&key).is_err() {
                        let _ = client.multi(&[
                            zk_recipes::Op::Delete {
                                path: child.clone(),
                                version: None,
                            },
                            zk_recipes::Op::Delete {
                                path: key.clone(),
                                version: None,
                            },
                        ]);
                    }
                }
            },
            Err(_) => {}
        }
        // A worker's pace, not a synchronisation: a few writes a second each.
        thread::sleep(Duration::from_millis(rng.u64(50..300)));
    }
    let _ = answers.recv();
    ctx.records.line(format!("q {}", mono()));
    // The coordinator's final round, then its go.
    let _ = answers.recv();
    settle_cache(ctx, &cache, path);
    // Idle until stdin closes (its thread ends the process).
    loop {
        thread::park();
    }
}

/// A cache's event as a record line.
fn cache_event(e: &zk_recipes::cache::CacheEvent) -> String {
    use zk_recipes::cache::{CacheEvent, CachedNode};
    let state = |n: &CachedNode| {
        let value = n.data.as_deref().filter(|d| !d.is_empty()).map_or_else(
            || "-".to_owned(),
            |d| String::from_utf8_lossy(d).into_owned(),
        );
        format!("{} {} {} {value}", n.path, n.stat.czxid, n.stat.mzxid)
    };
    match e {
        CacheEvent::Created(n) => format!("c {} {}", mono(), state(n)),
        CacheEvent::Changed { new, .. } => format!("m {} {}", mono(), state(new)),
        CacheEvent::Deleted(n) => {
            format!("d {} {} {} {}", mono(), n.path, n.stat.czxid, n.stat.mzxid)
        }
        CacheEvent::Initialized => format!("i {}", mono()),
        _ => format!("? {}", mono()),
    }
}

/// With the tree still: reads it straight (synced first), waits (30 s at most) until the cache
/// is current and holds just that, and writes down what it holds (`s` lines, then `S`).
fn settle_cache(ctx: &Ctx, cache: &zk_recipes::cache::CuratorCache, path: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    let (tx, heard) = crossbeam_channel::unbounded();
    cache.add_listener(move |_| {
        let _ = tx.send(());
    });
    let snapshot = |nodes: Vec<zk_recipes::cache::CachedNode>| -> Vec<String> {
        nodes
            .iter()
            .map(|n| cache_event(&zk_recipes::cache::CacheEvent::Created(n.clone())))
            .map(|l| l.splitn(3, ' ').nth(2).unwrap_or_default().to_owned())
            .collect()
    };
    let truth = loop {
        let client = ctx.client.with_deadline(until);
        match client.sync(path).and_then(|()| read_tree(&client, path)) {
            Ok(tree) => break Some(snapshot(tree)),
            Err(e) if std::time::Instant::now() < until => log::warn!("reading the tree: {e}"),
            Err(_) => break None,
        }
    };
    loop {
        // The listener first, then the look: no event falls between them unheard.
        while heard.try_recv().is_ok() {}
        if cache.is_current() && truth.as_ref() == Some(&snapshot(cache.nodes())) {
            break;
        }
        if heard.recv_deadline(until).is_err() {
            break;
        }
    }
    for line in snapshot(cache.nodes()) {
        ctx.records.line(format!("s {line}"));
    }
    let current = if cache.is_current() {
        "current"
    } else {
        "stale"
    };
    ctx.records.line(format!("S {} {current}", mono()));
}

/// Every node of the tree at `path`, sorted by path, read straight from the server.
pub fn read_tree(
    client: &Client,
    path: &str,
) -> zk_recipes::Result<Vec<zk_recipes::cache::CachedNode>> {
    let mut out = Vec::new();
    let mut todo = vec![path.to_owned()];
    while let Some(p) = todo.pop() {
        match client.data(&p) {
            Ok((data, stat)) => {
                out.push(zk_recipes::cache::CachedNode {
                    path: p.clone(),
                    stat,
                    data: Some(data.into()),
                });
            }
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        }
        match client.children(&p) {
            Ok(names) => todo.extend(names.iter().map(|n| format!("{p}/{n}"))),
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Timed acquires forever; each hold vouches for 1 to 40 pieces of work (up to about two
/// seconds of holding, so that faults land inside holds), then releases.
fn contend<G: Deref<Target = Lease>>(
    ctx: &Ctx,
    rng: &mut fastrand::Rng,
    acquire: impl Fn(Duration) -> zk_recipes::Result<Option<G>>,
) {
    loop {
        let patience = Duration::from_millis(rng.u64(100..3000));
        let asked = mono();
        let got = acquire(patience);
        if got.is_err() {
            ctx.records.line(format!("F {}", mono()));
        }
        ctx.records
            .line(format!("T {asked} {} {}", mono(), patience.as_nanos()));
        let Ok(Some(guard)) = got else { continue };
        let acquired = mono();
        ctx.records.line(format!("A {acquired}"));
        hold(ctx, &guard, rng, 'W', acquired, 40);
    }
}

/// Up to `most` pieces of work under `lease`, now and then after an idle spell and a write;
/// after a write, on without idling for at least a session timeout more (a job that records its
/// intent, then works on it): the stretch a bound that trusted the write too much would vouch
/// for wrongly.
fn hold(ctx: &Ctx, lease: &Lease, rng: &mut fastrand::Rng, kind: char, acquired: u64, most: u32) {
    let pieces = rng.u32(1..=most);
    let mut done = 0;
    let mut on_until = 0;
    while done < pieces || mono() < on_until {
        done += 1;
        if !vouch(ctx, lease, rng, kind, acquired) {
            break;
        }
        // After a write, work without idling until the stretch is over.
        if mono() >= on_until && idle_then_write(ctx, lease, rng) {
            on_until = mono() + SESSION.as_nanos() as u64;
        }
    }
}

/// Now and then, what a real holder does between two pieces of work: nothing for a while
/// (its connection only pings), sometimes a read, and a write the server checks against the
/// hold; then it tells the coordinator the write was answered (`W <when>`). The pieces after
/// it are vouched for by a bound the write may have moved: what a fault timed on this cue
/// tests. Liars never idle: their pauses should land inside their work. True if a write was
/// answered.
fn idle_then_write(ctx: &Ctx, lease: &Lease, rng: &mut fastrand::Rng) -> bool {
    if ctx.liar || rng.u32(0..4) != 0 {
        return false;
    }
    // Workload shape (an idle holder), not a synchronisation.
    thread::sleep(Duration::from_millis(rng.u64(0..900)));
    // Short calls: a write stuck behind a fault must not stop the holder from working on while
    // its lease says it may (what the lease is for, and what a bound that overstates betrays).
    let quick = ctx.client.with_timeout(Duration::from_millis(250));
    // Half the time a read just before the write: a fresh touch that the write's answer may
    // seem to vouch for before the follower passed it on.
    if rng.bool() {
        if quick.exists(&ctx.scratch).is_err() {
            return false;
        }
        thread::sleep(Duration::from_millis(rng.u64(0..60)));
    }
    let wrote = WhileHeld::for_node(&quick, lease.node_path())
        .set_data(&ctx.scratch, b"w", None)
        .is_ok();
    if wrote {
        ctx.coordinator.say(&format!("W {}", mono()));
    }
    wrote
}

/// One piece of work through `run`: recorded only if the hold was valid before and after it,
/// then written to the gate. A refused `run` is recorded (`X <time> N|E`), and the worker
/// writes to the gate once more as a zombie would, with its old token.
/// `kind`: `W` for a hold that excludes every other, `R` for a read hold.
fn vouch(ctx: &Ctx, lease: &Lease, rng: &mut fastrand::Rng, kind: char, acquired: u64) -> bool {
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
            ctx.records.line(format!("H {start} {end} {token} {kind}"));
            // Readers share the lock and do not write through the writers' gate.
            if kind == 'W' {
                ctx.coordinator.gate(token, false, acquired);
            }
            true
        }
        // The checker's adversary: a holder that trusts its guard blindly.
        Err(RunError::Expired {
            output: (start, end),
            ..
        }) if ctx.liar => {
            ctx.records.line(format!("H {start} {end} {token} {kind}"));
            false
        }
        Err(RunError::Expired {
            output: (_, end), ..
        }) => {
            ctx.records.line(format!("X {end} E"));
            if kind == 'W' {
                zombie_write(ctx, token, acquired);
            }
            false
        }
        Err(_) => {
            ctx.records.line(format!("X {} N", mono()));
            // A zombie does not ask its lease: it writes as it would have.
            if kind == 'W' {
                zombie_write(ctx, token, acquired);
            }
            false
        }
    }
}

/// A holder whose lease lapsed under its work writes anyway: at once, and once more 1–3 s
/// later, as a holder paused meanwhile would on resuming (by then the next holder has
/// usually taken over and written). The gate must refuse each write that comes after a newer
/// holder's.
fn zombie_write(ctx: &Ctx, token: i64, acquired: u64) {
    ctx.coordinator.gate(token, true, acquired);
    let coordinator = ctx.coordinator.clone();
    let late = Duration::from_millis(fastrand::u64(1000..3000));
    // Not joined: the worker goes on meanwhile, and the process ends with the run.
    let _ = thread::Builder::new().name("zombie".into()).spawn(move || {
        // The adversary's timing, not a synchronisation.
        thread::sleep(late);
        coordinator.gate(token, true, acquired);
    });
}

/// A client of the worker's, through its proxies (a new session each time it connects).
fn connect(id: &str, session: Duration) -> Client {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    loop {
        let builder = Client::builder(&var("ZKR_JEPSEN_CONNECT"))
            .session_timeout(session)
            .tick_time(TICK)
            .connection_timeout(Duration::from_secs(30));
        let builder = super::secured(builder, |k| std::env::var(k).ok());
        match builder.connect() {
            Ok(c) => return c,
            Err(e) => log::warn!("worker {id}: connect: {e}"),
        }
    }
}

/// Lock options whose waiters now and then stop right after their watch is set (see the
/// module's doc), with a generator of their own drawn from `seed`. The node ahead is watched,
/// and the line read, by an observer: a client of its own session, so that its watch can
/// neither stand in for the lock's (a wake-up the lock's client would hear only because the
/// observer asked) nor change what the lock's client reads. Every state change of the lock's
/// client is written down (`C <when>`): a turn that meets one is excused, as it may cost the
/// waiter the round trips its patience had left.
fn turn_pauses(ctx: &Ctx, seed: u64) -> LockOptions {
    let observer = connect("observer", Duration::from_secs(10));
    let states = ctx.client.subscribe();
    let records = ctx.records.clone();
    // Not joined: it ends with the process.
    let _ = thread::Builder::new().name("states".into()).spawn(move || {
        while let Ok(e) = states.receiver().recv() {
            records.line(format!("C {} {:?}", mono(), e.state));
        }
    });
    let (ctx, rng) = (
        ctx.clone(),
        Mutex::new(fastrand::Rng::with_seed(seed ^ 0x7475726e)),
    );
    LockOptions::new().testing_after_watch_set(move |watched| {
        if rng.lock().u32(0..4) == 0 {
            pause_until_gone(&ctx, &observer, watched);
        }
    })
}

/// Sequence number of a lock node's name (its last ten digits).
fn sequence(name: &str) -> Option<u64> {
    name.get(name.len().checked_sub(10)?..)?.parse().ok()
}

/// Stops the waiter's thread until `watched` is gone (a wait of at most 3 s, and three calls
/// of at most 1 s each), then writes `P <when>` if our node is first in line: the lock is
/// free and ours to take. The stop is written down as a pause (`S <from> <to>`): the
/// acquire's deadline may pass meanwhile, as it may for a process stopped.
fn pause_until_gone(ctx: &Ctx, observer: &Client, watched: &str) {
    let from = mono();
    let turn = turn_after(ctx, observer, watched);
    let to = mono();
    ctx.records.line(format!("S {from} {to}"));
    if turn {
        ctx.records.line(format!("P {to}"));
    }
}

/// Waits until `watched` is gone (at most 3 s); true if our node is then first in line.
fn turn_after(ctx: &Ctx, observer: &Client, watched: &str) -> bool {
    let client = observer.with_timeout(Duration::from_secs(1));
    let (tx, rx) = crossbeam_channel::unbounded();
    if !matches!(client.exists_watch(watched, &tx), Ok(Some(_))) {
        // Gone already (or not looked at): the watch a missing node leaves is taken back.
        let _ = client.remove_watch(watched, &tx);
        return false;
    }
    let gone = loop {
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok(e) if e.kind == zk_recipes::WatchKind::Deleted => break true,
            Ok(_) => continue,
            Err(_) => break false,
        }
    };
    if !gone {
        let _ = client.remove_watch(watched, &tx);
        return false;
    }
    let Some((parent, name)) = watched.rsplit_once('/') else {
        return false;
    };
    let (Some(after), Ok(line)) = (sequence(name), client.children(parent)) else {
        return false;
    };
    let mut line: Vec<(u64, String)> = line
        .into_iter()
        .filter_map(|n| Some((sequence(&n)?, n)))
        .collect();
    line.sort_unstable();
    // Our node came right after the watched one (a waiter watches the node just ahead of it):
    // the first behind it, if our session owns it.
    let Some((_, first)) = line.first() else {
        return false;
    };
    line.iter()
        .find(|(seq, _)| *seq > after)
        .is_some_and(|(_, n)| {
            n == first
                && client
                    .exists(&format!("{parent}/{n}"))
                    .ok()
                    .flatten()
                    .is_some_and(|stat| {
                        Some(stat.ephemeral_owner) == ctx.client.session_id().map(|s| s.0)
                    })
        })
}
