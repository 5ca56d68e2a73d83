//! The checker: reads every worker's records and proves the promises.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use zk_recipes::lock::MIN_ATTEMPT;

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
}

pub fn read(path: &Path) -> Recorded {
    let mut out = Recorded::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The current hold: when its acquire returned, and whether a piece of it is recorded.
    let mut acquired: Option<u64> = None;
    let mut open = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["A", a, ..] => {
                acquired = a.parse().ok();
                open = false;
            }
            ["H", s, e, t, rest @ ..] => {
                let exclusive = rest.first() != Some(&"R");
                if let (Ok(start), Ok(end), Ok(token)) = (s.parse::<u64>(), e.parse(), t.parse()) {
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
                if let (Ok(a), Ok(r), Ok(p)) = (a.parse(), r.parse(), p.parse()) {
                    out.timed.push((a, r, p));
                }
            }
            // A line cut short by the end of the process.
            _ => {}
        }
    }
    out
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
    pub worst_overrun: Duration,
}

pub fn check(workers: &[Worker], pauses: &[(usize, u64, u64)]) -> Report {
    let mut report = Report::default();
    let mut by_recipe: HashMap<&str, Vec<(usize, Hold)>> = HashMap::new();
    for (i, w) in workers.iter().enumerate() {
        let rec = read(&w.records);
        report.holds += rec.holds.len();
        report.read_holds += rec.holds.iter().filter(|h| !h.exclusive).count();
        report.pieces += rec.pieces;
        report.timed += rec.timed.len();
        by_recipe
            .entry(w.recipe)
            .or_default()
            .extend(rec.holds.into_iter().map(|h| (i, h)));
        let mut own_pauses: Vec<(u64, u64)> = pauses
            .iter()
            .filter(|p| p.0 == i)
            .map(|&(_, from, to)| (from, to))
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
    for (recipe, mut holds) in by_recipe {
        holds.sort_by_key(|(_, h)| h.start);
        // Holds still open at the current one's start; read holds may share, nothing else.
        let mut active: Vec<(usize, Hold)> = Vec::new();
        let mut top_token = i64::MIN;
        for &(i, h) in &holds {
            active.retain(|(_, a)| a.end > h.start);
            for &(j, a) in &active {
                if a.exclusive || h.exclusive {
                    report.overlaps.push(format!(
                        "{recipe}: worker {j} vouched [{}, {}] (token {}{}), worker {i} held \
                         from {} (token {}{}): {:?} together",
                        a.start,
                        a.end,
                        a.token,
                        if a.exclusive { "" } else { ", read" },
                        h.start,
                        h.token,
                        if h.exclusive { "" } else { ", read" },
                        Duration::from_nanos(a.end.min(h.end) - h.start)
                    ));
                }
            }
            active.push((i, h));
            // Fencing tokens order the exclusive holds (a gate is for writers).
            if h.exclusive {
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
    report
}
