//! The checker: reads every worker's records and proves the promises.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use zk_recipes::lock::MIN_ATTEMPT;

use crate::cache::{self, CACHE};
use crate::counter::{self, COUNTER};
use crate::membership::{self, BARRIER, GROUP};
use crate::queue;
use crate::{Worker, EPSILON};

/// One hold: from the moment its acquire returned (`A`) to the end of the last piece of work
/// its lease vouched for (`H`). A lease check that passes at `t` vouches for the whole hold up
/// to `t`: the leader cannot have expired the session before, so the node stood all along.
#[derive(Clone, Copy)]
pub struct Hold {
    pub start: u64,
    pub end: u64,
    pub token: i64,
    /// Excludes every other hold (all but read holds).
    pub exclusive: bool,
    /// When its latest vouched piece of work began.
    pub last_piece: u64,
}

#[derive(Default)]
pub struct Recorded {
    /// Holds with at least one vouched piece of work.
    pub holds: Vec<Hold>,
    /// Vouched pieces of work.
    pub pieces: usize,
    /// `(asked, returned, patience)` of each timed acquire.
    pub timed: Vec<(u64, u64, u64)>,
    /// `run` calls the lease refused: before the work (`N`), or after it (`E`, expired).
    pub refused_before: usize,
    pub refused_after: usize,
    /// Lines that do not parse, but for a last one cut short.
    pub malformed: usize,
    /// Spells the worker stopped its own waiter's thread (`S <from> <to>`): pauses, as far as
    /// a deadline is concerned.
    pub paused: Vec<(u64, u64)>,
    /// Turns that came to a paused waiter (`P`): its predecessor gone, its node first in line.
    pub turns: usize,
    /// Of those, turns not taken: the acquire returned without the lock and without an error,
    /// with at least `TURN_SLACK` of its patience left when the turn came (`(turn, due)`).
    pub missed_turns: Vec<(u64, u64)>,
}

/// How much of its patience a waiter whose turn came must still have for the checker to
/// expect it to take the lock: a woken waiter takes it without a round trip.
pub const TURN_SLACK: Duration = Duration::from_secs(1);

pub fn read(path: &Path) -> Recorded {
    parse(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The records in `text`. Whatever follows the last newline is a line still being written (or
/// cut short by the end of its process) and is left out, even where it would parse: `H s e 12`
/// with its token cut short would read as a stale token.
pub fn parse(text: &str) -> Recorded {
    let mut out = Recorded::default();
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    // The current hold: when its acquire returned, and whether a piece of it is recorded.
    let mut acquired: Option<u64> = None;
    let mut open = false;
    // A turn that came (`P`) in the acquire under way, and once that acquire returned without
    // an error (`T`), the turn and the acquire's due time, until the next line says whether
    // it took the lock (`A`).
    let mut turn: Option<u64> = None;
    let mut awaiting: Option<(u64, u64)> = None;
    let complete = if text.ends_with('\n') {
        text.lines().count()
    } else {
        text.lines().count().saturating_sub(1)
    };
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        if let Some((at, due)) = awaiting.take() {
            if f.first() != Some(&"A") && due >= at + TURN_SLACK.as_nanos() as u64 {
                out.missed_turns.push((at, due));
            }
        }
        match f.as_slice() {
            ["P", at] => match at.parse() {
                Ok(at) => {
                    out.turns += 1;
                    turn = Some(at);
                }
                Err(_) if n < complete => out.malformed += 1,
                Err(_) => {}
            },
            // A failed acquire, or a change of the client's state after the turn came: the
            // waiter may have needed round trips its patience did not have. Excused.
            ["F", _] | ["C", ..] => turn = None,
            ["S", from, to] => match (from.parse(), to.parse()) {
                (Ok(from), Ok(to)) => out.paused.push((from, to)),
                _ if n < complete => out.malformed += 1,
                _ => {}
            },
            ["A", a, ..] => {
                acquired = a.parse().ok();
                open = false;
            }
            ["H", s, e, t, rest @ ..] => {
                let exclusive = rest.first() != Some(&"R");
                let parsed = (s.parse::<u64>(), e.parse(), t.parse());
                if parsed.0.is_err() || parsed.1.is_err() || parsed.2.is_err() {
                    if n < complete {
                        out.malformed += 1;
                    }
                    continue;
                }
                if let (Ok(start), Ok(end), Ok(token)) = parsed {
                    out.pieces += 1;
                    match out.holds.last_mut() {
                        Some(h) if open => {
                            h.end = end;
                            h.last_piece = start;
                        }
                        _ => {
                            out.holds.push(Hold {
                                start: acquired.unwrap_or(start).min(start),
                                end,
                                token,
                                exclusive,
                                last_piece: start,
                            });
                            open = true;
                        }
                    }
                }
            }
            ["T", a, r, p] => {
                if let (Ok(a), Ok(r), Ok(p)) = (a.parse::<u64>(), r.parse(), p.parse::<u64>()) {
                    out.timed.push((a, r, p));
                    if let Some(at) = turn.take() {
                        awaiting = Some((at, a + p));
                    }
                } else if n < complete {
                    out.malformed += 1;
                }
            }
            ["X", _, "N"] => out.refused_before += 1,
            ["X", _, "E"] => out.refused_after += 1,
            // A line cut short by the end of the process is no loss; any other is.
            _ if n >= complete => {}
            _ => out.malformed += 1,
        }
    }
    out
}

/// One write to a lock's protected resource, as its `FencingGate` took it (in the gate's
/// order).
#[derive(Clone, Copy, Debug)]
pub struct GateWrite {
    /// When the gate took it.
    pub at: u64,
    pub worker: usize,
    /// When the writer's hold began (its acquire returned): names the hold.
    pub acquired: u64,
    pub token: i64,
    /// Written by a holder whose lease had refused a `run`.
    pub zombie: bool,
    pub admitted: bool,
}

#[derive(Default)]
pub struct Report {
    pub holds: usize,
    /// Of which read holds (a read/write lock's readers and downgrades).
    pub read_holds: usize,
    pub pieces: usize,
    pub timed: usize,
    pub overlaps: Vec<String>,
    pub stale: Vec<String>,
    pub late: Vec<String>,
    /// Writes the gates took out of the holds' order (a zombie admitted after a newer holder
    /// wrote, or a newer holder refused for an older one's token).
    pub fenced: Vec<String>,
    /// Turns that came to a waiter and were not taken (a lost wake-up).
    pub missed_turns: Vec<String>,
    /// Turns that came to a paused waiter.
    pub turns: usize,
    /// Records lost or unreadable.
    pub lost: Vec<String>,
    pub worst_overrun: Duration,
    /// The smallest time between the end of one worker's vouched hold and the start of
    /// another worker's hold of the same lock (how close a handover came to an overlap).
    pub closest: Option<(Duration, &'static str)>,
    /// `run` calls the lease refused before the work, and after it.
    pub refused_before: usize,
    pub refused_after: usize,
    /// Gate writes, and of them zombies' (admitted while no newer holder had written, or
    /// refused).
    pub gate_writes: usize,
    pub zombie_writes: usize,
    pub zombies_refused: usize,
    /// Double-barrier passes (enter and leave) checked, and those that broke the barrier's
    /// promise.
    pub barrier_passes: usize,
    pub barrier: Vec<String>,
    /// Group members' looks at their own nodes, and nodes gone under a live session.
    pub looks: usize,
    pub presence: Vec<String>,
    /// Counter increments made, those of unknown outcome, and what breaks a counter's
    /// history.
    pub increments: usize,
    pub unknown_increments: usize,
    pub counter: Vec<String>,
    /// Queue items put and handed over (per queue), items handed over twice at least once,
    /// and what breaks a queue's promise.
    pub queued: usize,
    pub dequeued: usize,
    pub dequeued_twice: usize,
    pub queue: Vec<String>,
    /// Cache events checked, caches that wrote themselves down at the end, and what breaks
    /// a cache's promise.
    pub cache_events: usize,
    pub caches_settled: usize,
    pub cache: Vec<String>,
}

impl Report {
    /// Everything that breaks a promise, in one list.
    pub fn violations(&self) -> impl Iterator<Item = &String> {
        self.overlaps
            .iter()
            .chain(&self.stale)
            .chain(&self.late)
            .chain(&self.fenced)
            .chain(&self.missed_turns)
            .chain(&self.barrier)
            .chain(&self.presence)
            .chain(&self.counter)
            .chain(&self.queue)
            .chain(&self.cache)
            .chain(&self.lost)
    }
}

/// How many holds of `recipe` may overlap (read holds aside).
pub fn capacity(recipe: &str) -> usize {
    if recipe == "semaphore-v2x2" {
        crate::SEMAPHORE_LEASES
    } else {
        1
    }
}

/// True if the records `text` of `lock` (a lock, a partition's item, the double barrier or a
/// group member) show progress after `since`: a piece of work vouched for, a barrier's enter
/// passed, a member's node seen on its session.
pub fn progress_since(lock: &str, text: &str, since: u64) -> bool {
    if lock == BARRIER {
        membership::parse_calls(text)
            .passes(false)
            .any(|(_, at)| at > since)
    } else if lock.starts_with(&format!("{GROUP}/")) {
        membership::seen_since(&membership::parse_looks(text), since)
    } else if lock == COUNTER {
        counter::made_since(&counter::parse_increments(text), since)
    } else if lock == queue::ONCE || lock == queue::LEAST {
        queue::taken_since(&queue::parse(text), since)
    } else if lock == CACHE {
        cache::heard_since(&cache::parse(text), since)
    } else {
        parse(text).holds.iter().any(|h| h.last_piece > since)
    }
}

pub fn check(
    workers: &[Worker],
    pauses: &[(usize, u64, u64)],
    gates: &HashMap<&'static str, Vec<GateWrite>>,
    horizon: u64,
    counted: Option<i64>,
    end: Option<(&HashMap<&'static str, Vec<String>>, &cache::End)>,
) -> Report {
    let drained = end.map(|e| e.0);
    let mut report = Report::default();
    let mut by_recipe: HashMap<&'static str, Vec<(usize, Hold)>> = HashMap::new();
    let mut barrier = Vec::new();
    let mut increments = Vec::new();
    let mut queues: HashMap<&'static str, Vec<(usize, queue::Calls)>> = HashMap::new();
    let mut caches = Vec::new();
    let mut cache_root = None;
    for (i, w) in workers.iter().enumerate() {
        if w.recipe == CACHE {
            let records = cache::parse(&std::fs::read_to_string(&w.records).unwrap_or_default());
            if records.malformed > 0 {
                report.lost.push(format!(
                    "{CACHE}: worker {i} wrote {} records that do not parse",
                    records.malformed
                ));
            }
            caches.push((i, records));
            cache_root = Some(w.path.clone());
            continue;
        }
        if w.recipe == queue::ONCE || w.recipe == queue::LEAST {
            let calls = queue::parse(&std::fs::read_to_string(&w.records).unwrap_or_default());
            if calls.malformed > 0 {
                report.lost.push(format!(
                    "{}: worker {i} wrote {} records that do not parse",
                    w.recipe, calls.malformed
                ));
            }
            queues.entry(w.recipe).or_default().push((i, calls));
            continue;
        }
        if w.recipe == COUNTER {
            let incs =
                counter::parse_increments(&std::fs::read_to_string(&w.records).unwrap_or_default());
            if incs.malformed > 0 {
                report.lost.push(format!(
                    "{COUNTER}: worker {i} wrote {} records that do not parse",
                    incs.malformed
                ));
            }
            report.unknown_increments += incs.unknown.len();
            increments.push((i, incs));
            continue;
        }
        // The recipes that hold nothing exclusively have records and rules of their own.
        if w.recipe == BARRIER || w.recipe == GROUP {
            let text = std::fs::read_to_string(&w.records).unwrap_or_default();
            let malformed = if w.recipe == BARRIER {
                let calls = membership::parse_calls(&text);
                let malformed = calls.malformed;
                barrier.push((i, calls));
                malformed
            } else {
                let looks = membership::parse_looks(&text);
                report.looks += membership::check_group(i, &looks, &mut report.presence);
                looks.malformed
            };
            if malformed > 0 {
                report.lost.push(format!(
                    "{}: worker {i} wrote {malformed} records that do not parse",
                    w.recipe
                ));
            }
            continue;
        }
        let rec = read(&w.records);
        report.holds += rec.holds.len();
        report.read_holds += rec.holds.iter().filter(|h| !h.exclusive).count();
        report.pieces += rec.pieces;
        report.timed += rec.timed.len();
        report.refused_before += rec.refused_before;
        report.refused_after += rec.refused_after;
        report.turns += rec.turns;
        // A turn that a pause of the process (the nemesis's) overlapped is excused too.
        let missed = rec.missed_turns.iter().filter(|(at, due)| {
            !pauses
                .iter()
                .any(|&(w, from, to)| w == i && from <= *due && to >= *at)
        });
        for (at, due) in missed {
            report.missed_turns.push(format!(
                "{}: worker {i}'s turn came at {at} (its predecessor gone, its node first in \
                 line), {:?} before its acquire's due, and it did not take the lock",
                w.recipe,
                Duration::from_nanos(due - at),
            ));
        }
        if rec.malformed > 0 {
            report.lost.push(format!(
                "{}: worker {i} wrote {} records that do not parse",
                w.recipe, rec.malformed
            ));
        }
        // Holds are of the worker's lock, but for a multi-lock's, which are of the mutex
        // recipe's lock first (and of its second lock, below).
        let own = crate::hold_files(w)
            .first()
            .map_or(w.recipe, |(lock, _)| *lock);
        by_recipe
            .entry(own)
            .or_default()
            .extend(rec.holds.into_iter().map(|h| (i, h)));
        // A partition worker's holds are per item, each item a lock of its own; a multi-lock
        // worker's are also of its second lock.
        for (lock, file) in crate::hold_files(w)
            .into_iter()
            .filter(|(_, f)| *f != w.records)
        {
            let items = read(&file);
            report.holds += items.holds.len();
            report.pieces += items.pieces;
            report.refused_before += items.refused_before;
            report.refused_after += items.refused_after;
            if items.malformed > 0 {
                report.lost.push(format!(
                    "{lock}: worker {i} wrote {} records that do not parse",
                    items.malformed
                ));
            }
            by_recipe
                .entry(lock)
                .or_default()
                .extend(items.holds.into_iter().map(|h| (i, h)));
        }
        let mut own_pauses: Vec<(u64, u64)> = pauses
            .iter()
            .filter(|p| p.0 == i)
            .map(|&(_, from, to)| (from, to))
            .chain(rec.paused.iter().copied())
            .collect();
        own_pauses.sort_unstable();
        for (asked, returned, patience) in rec.timed {
            // A timed acquire returns by max(deadline, start + MIN_ATTEMPT); a process stopped
            // then (or within EPSILON after, before it wrote down the time) returns once it
            // runs again. Pauses that ended before do not move an absolute deadline.
            let min_attempt = MIN_ATTEMPT.as_nanos() as u64;
            let epsilon = EPSILON.as_nanos() as u64;
            let mut due = asked + patience.max(min_attempt);
            for &(from, to) in &own_pauses {
                if from <= due + epsilon && to > due {
                    due = to;
                }
            }
            let over = Duration::from_nanos(returned.saturating_sub(due));
            report.worst_overrun = report.worst_overrun.max(over);
            if over > EPSILON {
                report.late.push(format!(
                    "{}: worker {i} asked for {:?}, returned after {:?}, {over:?} past its due",
                    w.recipe,
                    Duration::from_nanos(patience),
                    Duration::from_nanos(returned - asked),
                ));
            }
        }
    }
    report.barrier_passes = membership::check_barrier(&barrier, horizon, &mut report.barrier);
    report.increments = counter::check_counter(&increments, counted, &mut report.counter);
    for (recipe, calls) in queues {
        let left = drained.map(|d| d.get(recipe).map_or(&[][..], Vec::as_slice));
        let counts = queue::check(recipe, &calls, left, &mut report.queue);
        report.queued += counts.put;
        report.dequeued += counts.taken;
        report.dequeued_twice += counts.twice;
    }
    if let Some(root) = cache_root {
        let counts = cache::check(&root, &caches, horizon, end.map(|e| e.1), &mut report.cache);
        report.cache_events = counts.events;
        report.caches_settled = counts.caches_settled;
    }
    for (recipe, holds) in by_recipe {
        sweep(recipe, holds, &mut report);
    }
    for (recipe, writes) in gates {
        check_gate(recipe, writes, &mut report);
    }
    report
}

/// The holds of one lock, `(worker, hold)`: no more overlapping than the lock allows, tokens
/// in order, and the closest handover between two workers.
fn sweep(recipe: &'static str, mut holds: Vec<(usize, Hold)>, report: &mut Report) {
    holds.sort_by_key(|(_, h)| h.start);
    let capacity = capacity(recipe);
    // Holds still open at the current one's start.
    let mut active: Vec<(usize, Hold)> = Vec::new();
    let mut top_token = i64::MIN;
    // The exclusive hold that ended last so far, and its worker.
    let mut last_end: Option<(usize, u64)> = None;
    for &(i, h) in &holds {
        active.retain(|(_, a)| a.end > h.start);
        // A handover is from one holder to the next: locks of one holder at a time only.
        if h.exclusive && capacity == 1 {
            if let Some((j, end)) = last_end {
                if j != i && h.start >= end {
                    let gap = Duration::from_nanos(h.start - end);
                    if report.closest.is_none_or(|(c, _)| gap < c) {
                        report.closest = Some((gap, recipe));
                    }
                }
            }
            if last_end.is_none_or(|(_, end)| h.end > end) {
                last_end = Some((i, h.end));
            }
        }
        // Read holds share with each other; nothing else shares beyond the capacity.
        let conflicting: Vec<&(usize, Hold)> = active
            .iter()
            .filter(|(_, a)| a.exclusive || h.exclusive)
            .collect();
        let over = if capacity == 1 {
            conflicting.len()
        } else if conflicting.len() >= capacity {
            1
        } else {
            0
        };
        for &&(j, a) in conflicting.iter().take(over) {
            report.overlaps.push(format!(
                "{recipe}: worker {j} vouched [{}, {}] (token {}{}), worker {i} held \
                 from {} (token {}{}): {:?} together{}",
                a.start,
                a.end,
                a.token,
                if a.exclusive { "" } else { ", read" },
                h.start,
                h.token,
                if h.exclusive { "" } else { ", read" },
                Duration::from_nanos(a.end.min(h.end) - h.start),
                if capacity > 1 {
                    format!(", {} holders of {capacity} leases", conflicting.len() + 1)
                } else {
                    String::new()
                }
            ));
        }
        active.push((i, h));
        // Fencing tokens order the exclusive holds (a gate is for writers).
        if h.exclusive && capacity == 1 {
            if h.token < top_token {
                report.stale.push(format!(
                    "{recipe}: worker {i} held with token {} after token {top_token}",
                    h.token
                ));
            }
            top_token = top_token.max(h.token);
        }
    }
}

/// The gate of one lock, over its writes in the order it took them. Holds are named by their
/// acquire time: a hold that began later is the newer (the overlap check orders them).
/// - A write admitted after a newer hold's write was admitted: the gate let an older holder
///   (a zombie) write over the newer one's work.
/// - A write from the newest hold that has written refused: an older holder's token was larger.
fn check_gate(recipe: &str, writes: &[GateWrite], report: &mut Report) {
    // The newest hold whose write was admitted so far: (acquired, worker, token).
    let mut newest: Option<(u64, usize, i64)> = None;
    for w in writes {
        report.gate_writes += 1;
        if w.zombie {
            report.zombie_writes += 1;
            if !w.admitted {
                report.zombies_refused += 1;
            }
        }
        let newer_wrote = newest.filter(|&(acq, worker, _)| acq > w.acquired && worker != w.worker);
        if w.admitted {
            if let Some((acq, worker, token)) = newer_wrote {
                report.fenced.push(format!(
                    "{recipe}: at {}, worker {}'s write (token {}, hold from {}{}) admitted \
                     after worker {worker}'s (token {token}, hold from {acq}, newer)",
                    w.at,
                    w.worker,
                    w.token,
                    w.acquired,
                    if w.zombie { ", a zombie" } else { "" },
                ));
            }
            if newest.is_none_or(|(acq, _, _)| w.acquired >= acq) {
                newest = Some((w.acquired, w.worker, w.token));
            }
        } else if newest.is_some_and(|(acq, worker, _)| w.acquired > acq && worker != w.worker)
            && !w.zombie
        {
            report.fenced.push(format!(
                "{recipe}: at {}, worker {}'s write (token {}, hold from {}) refused for an \
                 older hold's token",
                w.at, w.worker, w.token, w.acquired,
            ));
        }
    }
}

/// The checker's rules, each shown to fire on records made to break it (run before every
/// harness run: a checker that cannot fail proves nothing).
pub fn self_test() {
    membership::self_test();
    counter::self_test();
    queue::self_test();
    cache::self_test();
    let hold = |start: u64, end: u64, token: i64, exclusive: bool| Hold {
        start,
        end,
        token,
        exclusive,
        last_piece: start,
    };
    // A line cut short is left out; a complete one is not.
    let r = parse("A 1\nH 2 3 4294967412 R\nT 1 2 15");
    assert_eq!(
        (r.holds.len(), r.timed.len()),
        (1, 0),
        "a cut line was parsed"
    );
    assert!(!r.holds[0].exclusive);
    assert_eq!(parse("A 1\nH 2 3 7\nH 4 x 7\n").malformed, 1);
    assert_eq!(parse("X 5 N\nX 6 E\n").refused_before, 1);
    // A turn that came with 2 s of patience left and was not taken; one taken; one whose
    // acquire failed; one with less than the slack left; one whose answer is not written yet.
    let s = 1_000_000_000u64;
    let missed = |text: String| parse(&text).missed_turns.len();
    assert_eq!(
        missed(format!("P {s}\nT 0 {} {}\nT 1 2 3\n", 3 * s, 3 * s)),
        1
    );
    assert_eq!(
        missed(format!("P {s}\nT 0 {} {}\nP {s}\n", 3 * s, 3 * s)),
        1
    );
    assert_eq!(missed(format!("P {s}\nT 0 {s} {}\nA {s}\n", 3 * s)), 0);
    assert_eq!(
        missed(format!("P {s}\nF {s}\nT 0 {s} {}\nT 1 2 3\n", 3 * s)),
        0
    );
    assert_eq!(
        missed(format!("P {s}\nT 0 {s} {}\nT 1 2 3\n", s + s / 2)),
        0
    );
    assert_eq!(missed(format!("P {s}\nT 0 {s} {}\n", 3 * s)), 0);
    assert_eq!(
        missed(format!(
            "P {s}\nC {s} Suspended\nT 0 {s} {}\nT 1 2 3\n",
            3 * s
        )),
        0
    );
    // Overlaps: two exclusive holds; a read within a write; reads share; a two-lease
    // semaphore holds two but not three.
    let overlaps = |recipe: &'static str, holds: &[Hold]| {
        let mut report = Report::default();
        sweep(
            recipe,
            holds.iter().copied().enumerate().collect(),
            &mut report,
        );
        (report.overlaps.len(), report.stale.len())
    };
    assert_eq!(
        overlaps("mutex", &[hold(0, 10, 1, true), hold(5, 20, 2, true)]).0,
        1
    );
    assert_eq!(
        overlaps("mutex", &[hold(0, 10, 1, true), hold(11, 20, 2, true)]),
        (0, 0)
    );
    assert_eq!(
        overlaps("read-write", &[hold(0, 10, 1, true), hold(5, 8, 1, false)]).0,
        1
    );
    assert_eq!(
        overlaps("read-write", &[hold(0, 10, 1, false), hold(5, 8, 2, false)]).0,
        0
    );
    let two = [hold(0, 10, 1, true), hold(2, 10, 2, true)];
    assert_eq!(overlaps("semaphore-v2x2", &two).0, 0);
    let three = [two[0], two[1], hold(5, 10, 3, true)];
    assert_eq!(overlaps("semaphore-v2x2", &three).0, 1);
    // A token that goes back.
    assert_eq!(
        overlaps("mutex", &[hold(0, 10, 5, true), hold(11, 20, 4, true)]).1,
        1
    );
    // Gates: a zombie admitted after a newer hold wrote; a newer hold refused for an older's
    // token; a zombie refused, and writes in order, are fine.
    let write =
        |worker: usize, acquired: u64, token: i64, zombie: bool, admitted: bool| GateWrite {
            at: 0,
            worker,
            acquired,
            token,
            zombie,
            admitted,
        };
    let fenced = |writes: Vec<GateWrite>| {
        let mut report = Report::default();
        check_gate("mutex", &writes, &mut report);
        report.fenced.len()
    };
    assert_eq!(
        fenced(vec![
            write(1, 20, 9, false, true),
            write(0, 10, 10, true, true)
        ]),
        1
    );
    assert_eq!(
        fenced(vec![
            write(0, 10, 10, false, true),
            write(1, 20, 9, false, false)
        ]),
        1
    );
    assert_eq!(
        fenced(vec![
            write(0, 10, 5, false, true),
            write(1, 20, 9, false, true)
        ]),
        0
    );
    assert_eq!(
        fenced(vec![
            write(1, 20, 9, false, true),
            write(0, 10, 5, true, false)
        ]),
        0
    );
}
