//! The nemesis: one fault at a time, applied and healed.

use std::thread;
use std::time::Duration;

use zk_recipes::testing::{FaultProxy, TestingCluster};

use crate::{likely_holder, mono, signal, Workers, SESSION};

/// How many faults of each kind were injected.
#[derive(Default, Debug)]
pub struct Faults {
    pub holder_pauses: u32,
    pub long_holder_pauses: u32,
    pub leader_pauses: u32,
    pub follower_pauses: u32,
    pub isolations: u32,
    pub one_way_cuts: u32,
    pub client_cuts: u32,
    pub refusals: u32,
    pub leader_kills: u32,
}

/// One fault of `kind`, applied and healed.
pub fn nemesis(
    cluster: &TestingCluster,
    workers: &Workers,
    rng: &mut fastrand::Rng,
    kind: u32,
    faults: &mut Faults,
    pauses: &mut Vec<(usize, u64, u64)>,
) {
    let ms = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_millis(rng.u64(lo..hi));
    let workers = &workers.0;
    match kind {
        // A holder's process pauses (a GC pause), shorter or longer than its session.
        0 | 1 => {
            let long = kind == 1;
            let w = if long || rng.bool() {
                likely_holder(workers)
            } else {
                rng.usize(0..workers.len())
            };
            let d = if long {
                SESSION + ms(rng, 200, 1500)
            } else {
                ms(rng, 100, 800)
            };
            let pid = workers[w].child.id();
            let from = mono();
            signal(pid, "-STOP");
            thread::sleep(d);
            signal(pid, "-CONT");
            pauses.push((w, from, mono()));
            if long {
                faults.long_holder_pauses += 1;
            } else {
                faults.holder_pauses += 1;
            }
        }
        // The leader, or a follower, pauses: shorter or longer than a session, up to about
        // syncLimit (past it, the others elect another).
        2 | 3 => {
            let leader = cluster.leader();
            let member = match (kind, leader) {
                (2, Some(l)) => l,
                (_, l) => (0..3)
                    .filter(|&i| Some(i) != l)
                    .nth(rng.usize(0..2))
                    .unwrap_or(0),
            };
            cluster.pause(member);
            thread::sleep(ms(rng, 200, 4500));
            cluster.resume(member);
            if kind == 2 {
                faults.leader_pauses += 1;
            } else {
                faults.follower_pauses += 1;
            }
        }
        // A member cut off from the others while it keeps serving its clients.
        4 => {
            let member = rng.usize(0..3);
            cluster.isolate(member);
            thread::sleep(ms(rng, 500, 4000));
            cluster.rejoin(member);
            faults.isolations += 1;
        }
        // A follower's link to its leader held one way: the leader still reaches it.
        5 => {
            if let Some(l) = cluster.leader() {
                let f = (0..3).filter(|&i| i != l).nth(rng.usize(0..2)).unwrap_or(0);
                cluster.hold_sends(f, l);
                thread::sleep(ms(rng, 500, 3000));
                cluster.rejoin(f);
                faults.one_way_cuts += 1;
            }
        }
        // A worker's connections cut, or refused for a while.
        6 => {
            let w = rng.usize(0..workers.len());
            workers[w].proxies.iter().for_each(FaultProxy::cut);
            faults.client_cuts += 1;
        }
        7 => {
            let w = rng.usize(0..workers.len());
            workers[w].proxies.iter().for_each(FaultProxy::refuse);
            thread::sleep(ms(rng, 300, 3000));
            workers[w].proxies.iter().for_each(FaultProxy::heal);
            faults.refusals += 1;
        }
        // The leader dies and comes back.
        _ => {
            if let Some(l) = cluster.leader() {
                cluster.kill(l);
                thread::sleep(ms(rng, 300, 2000));
                cluster.restart(l).expect("restart");
                faults.leader_kills += 1;
            }
        }
    }
}
