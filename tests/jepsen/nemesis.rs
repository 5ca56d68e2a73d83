//! The nemesis: faults applied and healed, one at a time or several overlapping.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use zk_recipes::testing::{FaultProxy, TestingCluster};

use crate::{likely_holder, mono, signal, Workers, SESSION};

/// Every kind of fault, by name. The first run of a harness draws each once, in this order.
pub const KINDS: [&str; 23] = [
    // A holder's process pauses (a GC pause), shorter or longer than its session.
    "holder-pause",
    "long-holder-pause",
    // A read/write lock's writer stopped past its session the moment before it downgrades its
    // write hold (on its cue): the downgrade then runs on a hold that may be gone.
    "downgrade-pause",
    // The leader, or a follower, pauses: up to past a session, within syncLimit.
    "leader-pause",
    "follower-pause",
    // A member cut off from the others (0.5–4 s) while it keeps serving its clients.
    "isolation",
    // A follower's link to its leader held one way: the leader still reaches it.
    "one-way",
    // A worker's connections cut, or refused for a while.
    "client-cut",
    "client-refuse",
    // The leader dies and comes back.
    "leader-kill",
    // The member a holder talks to cut off from the others the moment the holder's write
    // (checked against its hold) is answered: before the follower passed the write's touch
    // on to the leader. The instant a bound anchored in the write's own send time overstates.
    "write-timed-isolation",
    // The leader cut off past syncLimit (5–9 s): the others elect a new one while the deposed
    // leader still answers its clients' reads until it notices.
    "long-leader-isolation",
    // A follower dies and comes back.
    "follower-kill",
    // Both followers die: the quorum is lost, then regained.
    "quorum-loss",
    // A worker's links go silent (sockets open, no byte passes), then heal.
    "client-blackhole",
    // The lease bound's documented residual race, in its order: a leader stall that ends,
    // then at once the holder's follower's link to the leader held, then the follower cut off.
    "residual-race",
    // A follower restarts with its disk lost (snapshots and logs gone), synced anew.
    "empty-disk",
    // A worker's link to its member slow: every byte late by 20–400 ms, both ways.
    "client-delay",
    // With a firewall (see FIREWALLED): a member severed from the others on every link,
    // election links included (0.5–9 s): unlike an isolation, it cannot even vote.
    "member-cut",
    // The leader and one follower severed from each other while each still reaches the third
    // member: a partition that is not transitive.
    "bridge",
    // What the leader sends to a follower is dropped (the other way round from "one-way"): on
    // the links open at the cut, the follower's bytes still reach the leader; a link the
    // follower opens again cannot complete its handshake.
    "leader-mute",
    // A member's transaction log stalls (the leader's two times in three): every write and
    // fsync on its disk blocks for 0.5–6 s, and the members fsync every transaction.
    "fsync-stall",
    // Two or three of the faults above at once, overlapping.
    "composed",
];

/// The kinds that need a [`TestingCluster::firewalled`] ensemble (a root run, in namespaces
/// of its own); left out of a run without one, which says so.
pub const FIREWALLED: [&str; 4] = ["member-cut", "bridge", "leader-mute", "fsync-stall"];

/// How often each kind is drawn after the first round, relative to the others: the
/// write-timed isolation aims at the whole class of bounds that overstate (the one the lease
/// exists to rule out), and a composed fault covers many orders of many faults.
pub fn weight(kind: &str) -> usize {
    match kind {
        "write-timed-isolation" => 3,
        "composed" => 2,
        _ => 1,
    }
}

/// The kinds that kill a member: a composed fault has at most one of them.
const KILLS: [&str; 3] = ["leader-kill", "follower-kill", "quorum-loss"];

/// What a composed fault draws its parts from: every kind but those that kill a member (one
/// may be added), the residual race (an order of faults already), the lost disk (a restart)
/// and composed faults themselves.
fn composable(kind: &str) -> bool {
    !KILLS.contains(&kind) && !matches!(kind, "residual-race" | "empty-disk" | "composed")
}

/// The faults and what they leave for the checker.
pub struct Nemesis<'a> {
    pub cluster: &'a TestingCluster,
    pub workers: &'a Workers,
    /// The cluster is [`TestingCluster::firewalled`]: the [`FIREWALLED`] kinds may be drawn.
    firewalled: bool,
    /// How many faults of each kind were injected (a composed fault also counts its parts).
    pub counts: Mutex<BTreeMap<&'static str, u32>>,
    /// `(worker, from, to)`: when the nemesis kept a worker's process stopped.
    pub pauses: Mutex<Vec<(usize, u64, u64)>>,
    /// The workers stopped now: how many faults stopped each, and since when.
    stopped: Mutex<BTreeMap<usize, (u32, u64)>>,
    /// Write-timed isolations, and downgrade pauses, that found no cue in time.
    pub missed_cues: Mutex<u32>,
    /// For each write-timed cut, nanoseconds from the write's answer to the cut.
    pub cue_lag: Mutex<Vec<u64>>,
    /// Restarts of a member that did not serve in time beside another fault, healed and
    /// started again.
    pub restarts_again: Mutex<u32>,
}

fn ms(rng: &mut fastrand::Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.u64(lo..hi))
}

impl<'a> Nemesis<'a> {
    pub fn new(cluster: &'a TestingCluster, workers: &'a Workers, firewalled: bool) -> Nemesis<'a> {
        Nemesis {
            cluster,
            workers,
            firewalled,
            counts: Mutex::new(BTreeMap::new()),
            pauses: Mutex::new(Vec::new()),
            stopped: Mutex::new(BTreeMap::new()),
            missed_cues: Mutex::new(0),
            cue_lag: Mutex::new(Vec::new()),
            restarts_again: Mutex::new(0),
        }
    }

    /// One fault of `kind` (a name from [`KINDS`]), applied and healed.
    pub fn fault(&self, rng: &mut fastrand::Rng, kind: &'static str) {
        let (cluster, workers) = (self.cluster, &self.workers.workers);
        let counted = match kind {
            "holder-pause" | "long-holder-pause" => {
                let long = kind == "long-holder-pause";
                let w = if long || rng.bool() {
                    likely_holder(workers, rng)
                } else {
                    rng.usize(0..workers.len())
                };
                let d = if long {
                    SESSION + ms(rng, 200, 1500)
                } else {
                    ms(rng, 100, 800)
                };
                self.pause_worker(w, d);
                true
            }
            "leader-pause" | "follower-pause" => {
                let Some(member) = self.leader_or_follower(kind == "leader-pause", rng) else {
                    return;
                };
                cluster.pause(member);
                thread::sleep(ms(rng, 200, 4500));
                cluster.resume(member);
                true
            }
            "isolation" => {
                let member = rng.usize(0..3);
                cluster.isolate(member);
                thread::sleep(ms(rng, 500, 4000));
                cluster.rejoin(member);
                true
            }
            "one-way" => {
                let (Some(l), Some(f)) = (cluster.leader(), self.follower(rng)) else {
                    return;
                };
                cluster.hold_sends(f, l);
                thread::sleep(ms(rng, 500, 3000));
                cluster.rejoin(f);
                true
            }
            "client-cut" => {
                let w = rng.usize(0..workers.len());
                workers[w].proxies.iter().for_each(FaultProxy::cut);
                true
            }
            "client-refuse" | "client-blackhole" => {
                let w = rng.usize(0..workers.len());
                let fault = if kind == "client-refuse" {
                    FaultProxy::refuse
                } else {
                    FaultProxy::blackhole
                };
                workers[w].proxies.iter().for_each(fault);
                thread::sleep(ms(rng, 300, 4000));
                workers[w].proxies.iter().for_each(FaultProxy::heal);
                true
            }
            "leader-kill" | "follower-kill" => {
                let Some(member) = self.leader_or_follower(kind == "leader-kill", rng) else {
                    return;
                };
                cluster.kill(member);
                thread::sleep(ms(rng, 300, 2000));
                self.restart(member, false);
                true
            }
            "write-timed-isolation" => self.write_timed_isolation(rng),
            "downgrade-pause" => self.downgrade_pause(rng),
            "long-leader-isolation" => {
                let Some(l) = cluster.leader() else { return };
                cluster.isolate(l);
                thread::sleep(ms(rng, 5000, 9000));
                cluster.rejoin(l);
                true
            }
            "quorum-loss" => {
                let Some(l) = cluster.leader() else { return };
                let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
                followers.iter().for_each(|&f| cluster.kill(f));
                thread::sleep(ms(rng, 300, 3000));
                for &f in &followers {
                    self.restart(f, false);
                }
                true
            }
            "residual-race" => self.residual_race(rng),
            "empty-disk" => {
                let Some(f) = self.follower(rng) else { return };
                self.restart(f, true);
                true
            }
            "client-delay" => {
                let w = if rng.bool() {
                    likely_holder(workers, rng)
                } else {
                    rng.usize(0..workers.len())
                };
                let by = ms(rng, 20, 400);
                workers[w].proxies.iter().for_each(|p| p.delay(by));
                thread::sleep(ms(rng, 1000, 5000));
                workers[w].proxies.iter().for_each(FaultProxy::heal);
                true
            }
            "member-cut" => {
                let Some(m) = self.leader_or_follower(rng.bool(), rng) else {
                    return;
                };
                cluster.sever_member(m);
                thread::sleep(ms(rng, 500, 9000));
                cluster.mend_member(m);
                true
            }
            "bridge" | "leader-mute" => {
                let (Some(l), Some(f)) = (cluster.leader(), self.follower(rng)) else {
                    return;
                };
                if kind == "bridge" {
                    cluster.sever(l, f);
                    thread::sleep(ms(rng, 1000, 9000));
                    cluster.mend(l, f);
                } else {
                    cluster.sever_one_way(l, f);
                    thread::sleep(ms(rng, 500, 6000));
                    cluster.mend_one_way(l, f);
                }
                true
            }
            "fsync-stall" => {
                let Some(m) = self.leader_or_follower(rng.usize(0..3) != 0, rng) else {
                    return;
                };
                if !cluster.freeze_log(m) {
                    return;
                }
                thread::sleep(ms(rng, 500, 6000));
                cluster.thaw_log(m);
                true
            }
            "composed" => {
                self.composed(rng);
                true
            }
            other => panic!("unknown fault kind {other}"),
        };
        if counted {
            *self.counts.lock().entry(kind).or_default() += 1;
        }
    }

    /// Starts member `m` again (with its disk lost if `empty`) and waits until it serves. A
    /// fault running beside this one (a composed fault) may keep it from joining for longer
    /// than the harness waits: then every link is mended and every disk thawed, and it is
    /// started once more; a member that cannot serve even then fails the run.
    fn restart(&self, m: usize, empty: bool) {
        let start = |empty: bool| {
            if empty {
                self.cluster.restart_empty(m)
            } else {
                self.cluster.restart(m)
            }
        };
        if let Err(e) = start(empty) {
            println!("jepsen: member {m} did not serve after its restart ({e}); healing, again");
            *self.restarts_again.lock() += 1;
            self.cluster.mend_all();
            for i in 0..self.cluster.len() {
                self.cluster.thaw_log(i);
                self.cluster.resume(i);
                self.cluster.rejoin(i);
            }
            if let Err(e) = start(false) {
                panic!("member {m} does not serve after a second restart, all healed: {e}");
            }
        }
    }

    /// Stops worker `w`'s process for `d` (`SIGSTOP`), and notes when.
    fn pause_worker(&self, w: usize, d: Duration) {
        self.stop_worker(w);
        thread::sleep(d);
        self.continue_worker(w);
    }

    /// Stops worker `w`'s process (`SIGSTOP`) unless a fault running beside this one already
    /// has: stops count, so that the shorter of two overlapping pauses does not end the longer.
    fn stop_worker(&self, w: usize) {
        let mut stopped = self.stopped.lock();
        let (count, _) = stopped.entry(w).or_insert((0, 0));
        if *count == 0 {
            signal(self.workers.workers[w].child.id(), "-STOP");
            stopped.insert(w, (1, mono()));
        } else {
            *count += 1;
        }
    }

    /// Ends one stop of worker `w`; the last lets the process run on (`SIGCONT`) and notes
    /// when it was stopped, for the checker.
    fn continue_worker(&self, w: usize) {
        let mut stopped = self.stopped.lock();
        let Some((count, since)) = stopped.get_mut(&w) else {
            return;
        };
        *count = count.saturating_sub(1);
        if *count == 0 {
            let since = *since;
            stopped.remove(&w);
            signal(self.workers.workers[w].child.id(), "-CONT");
            self.pauses.lock().push((w, since, mono()));
        }
    }

    /// The leader now, or a follower.
    fn leader_or_follower(&self, leader: bool, rng: &mut fastrand::Rng) -> Option<usize> {
        if leader {
            self.cluster.leader()
        } else {
            self.follower(rng)
        }
    }

    /// A member that is not the leader now (a random one if none leads).
    fn follower(&self, rng: &mut fastrand::Rng) -> Option<usize> {
        let leader = self.cluster.leader();
        let others: Vec<usize> = (0..3).filter(|&i| Some(i) != leader).collect();
        (!others.is_empty()).then(|| others[rng.usize(0..others.len())])
    }

    /// The member worker `w` is attached to now (through its proxy to it).
    fn member_of(&self, w: usize) -> Option<usize> {
        self.workers.workers[w]
            .proxies
            .iter()
            .position(|p| p.connections() > 0)
    }

    /// Sends about half the leader's clients elsewhere, then waits (up to 3 s) for a holder
    /// attached to a follower to say its write was answered, and cuts that follower off from
    /// the others at once (both ways, or its sends to the leader), for 1–4 s.
    fn write_timed_isolation(&self, rng: &mut fastrand::Rng) -> bool {
        let Some(leader) = self.cluster.leader() else {
            return false;
        };
        self.spread_from(leader, rng);
        let cues = &self.workers.cues;
        // Cues from before now are stale.
        while cues.try_recv().is_ok() {}
        let until = Instant::now() + Duration::from_secs(3);
        while let Ok((w, answered)) = cues.recv_deadline(until) {
            match self.member_of(w) {
                Some(m) if m != leader => {
                    self.cue_lag.lock().push(mono().saturating_sub(answered));
                    // Cut off both ways, or only its sends to the leader (which then expires the
                    // session while the follower still hears it, and closes the connection).
                    if rng.bool() {
                        self.cluster.isolate(m);
                    } else {
                        self.cluster.hold_sends(m, leader);
                    }
                    thread::sleep(ms(rng, 1000, 4000));
                    self.cluster.rejoin(m);
                    return true;
                }
                _ => continue,
            }
        }
        *self.missed_cues.lock() += 1;
        false
    }

    /// Waits (up to 15 s: a writer downgrades about every 10 s under the faults) for a writer
    /// about to downgrade, stops its process before it goes on, and keeps it stopped past its
    /// session.
    fn downgrade_pause(&self, rng: &mut fastrand::Rng) -> bool {
        let Ok(w) = self
            .workers
            .downgrades
            .recv_timeout(Duration::from_secs(15))
        else {
            *self.missed_cues.lock() += 1;
            return false;
        };
        self.stop_worker(w);
        // The go it waits for, read once it runs again.
        crate::answer(&self.workers.workers[w].stdin, true);
        thread::sleep(SESSION + ms(rng, 200, 1500));
        self.continue_worker(w);
        true
    }

    /// Cuts the links of about half the workers attached to `member`, so that they reconnect
    /// elsewhere: each isolation of a follower sends its clients away, and without this they
    /// gather on the leader, where no fault aimed at followers finds them.
    fn spread_from(&self, member: usize, rng: &mut fastrand::Rng) {
        for (w, worker) in self.workers.workers.iter().enumerate() {
            if self.member_of(w) == Some(member) && rng.bool() {
                worker.proxies.iter().for_each(FaultProxy::cut);
            }
        }
    }

    /// The residual race of the lease bound, in its order, around a likely holder's follower.
    fn residual_race(&self, rng: &mut fastrand::Rng) -> bool {
        let Some(l) = self.cluster.leader() else {
            return false;
        };
        let w = likely_holder(&self.workers.workers, rng);
        let f = match self.member_of(w) {
            Some(m) if m != l => m,
            _ => match self.follower(rng) {
                Some(f) => f,
                None => return false,
            },
        };
        self.cluster.pause(l);
        thread::sleep(ms(rng, 300, 1500));
        self.cluster.resume(l);
        thread::sleep(ms(rng, 0, 30));
        self.cluster.hold_sends(f, l);
        thread::sleep(ms(rng, 0, 100));
        self.cluster.isolate(f);
        thread::sleep(ms(rng, 1000, 4000));
        self.cluster.rejoin(f);
        true
    }

    /// Two or three faults at once, each starting up to 1.5 s after the first; at most one of
    /// them kills a member. Everything is healed after the last ends.
    fn composed(&self, rng: &mut fastrand::Rng) {
        // Distinct kinds: two pauses of one process, or two isolations of one member, would
        // end each other early and count a fault that did not last.
        let n = rng.usize(2..=3);
        let mut kinds: Vec<&'static str> = KINDS
            .into_iter()
            .filter(|k| composable(k) && (self.firewalled || !FIREWALLED.contains(k)))
            .collect();
        rng.shuffle(&mut kinds);
        let mut parts: Vec<&'static str> = kinds[..n].to_vec();
        if rng.bool() {
            parts[0] = KILLS[rng.usize(0..KILLS.len())];
        }
        thread::scope(|s| {
            for (i, kind) in parts.into_iter().enumerate() {
                let mut part_rng = fastrand::Rng::with_seed(rng.u64(..));
                let start = if i == 0 { 0 } else { rng.u64(0..1500) };
                s.spawn(move || {
                    thread::sleep(Duration::from_millis(start));
                    self.fault(&mut part_rng, kind);
                });
            }
        });
        self.heal_all();
    }

    /// Every member resumed, rejoined, mended and its log thawed, every worker's link healed
    /// and process running.
    pub fn heal_all(&self) {
        self.cluster.mend_all();
        for m in 0..self.cluster.len() {
            self.cluster.thaw_log(m);
            self.cluster.resume(m);
            self.cluster.rejoin(m);
        }
        for w in &self.workers.workers {
            w.proxies.iter().for_each(FaultProxy::heal);
            signal(w.child.id(), "-CONT");
        }
    }
}
