//! The tree cache's rules (`CuratorCache`, issue 38). Each of the recipe's workers writes to a
//! part of the tree of its own (`<path>/w<worker>/k<j>`, some with a child `c`: made, changed,
//! deleted) and keeps a cache of the whole tree, writing down what it writes and every event
//! its cache's listener hears, in order:
//!
//! - `V <path> <value>`: a write of `value` to `path` is about to be sent (made or changed);
//!   `Z <path> <value> <czxid> <mzxid>`: a change was answered, the node then at that stat;
//! - `c|m <at> <path> <czxid> <mzxid> <value>`: the cache took the node in (`c`), or a newer
//!   state of it (`m`); `d <at> <path> <czxid> <mzxid>`: the node left the cache, as it was;
//!   `i <at>`: a full read finished;
//! - `q <at>`: the coordinator said "quiet" and the worker's writes stopped;
//! - at the end, `s <path> <czxid> <mzxid> <value>` for every node cached, then
//!   `S <at> <current|stale>`.
//!
//! Values are the writers' own (`w<worker>-<n>`, or the coordinator's `end-<n>`); a node with
//! no data shows `-`. The end of a run (`main.rs`, `cache_final_round`): the writers stop;
//! with the tree still, the coordinator changes it while one cache's connection is refused
//! (the cache must read the tree again on the same session) and another's process is
//! stopped past its session's timeout (a new session); the caches then settle and write
//! themselves down, and the coordinator reads the tree. Then:
//!
//! - **never goes back**: in each cache, each node's states come in the order of their
//!   zxids (`czxid`, then `mzxid`), a node is not taken in twice without leaving in between,
//!   and a node that left does not come back as it was (its `czxid` no newer than what it
//!   showed);
//! - **nothing from nowhere**: every value shown was written to that node by someone;
//! - **one history**: a node's state (`czxid`, `mzxid`) has one value in every cache, in the
//!   writers' answers and in the coordinator's read;
//! - **listeners hear everything**: each cache's events, replayed, give what it holds at the
//!   end;
//! - **converges**: at the end, each cache holds exactly the tree the coordinator read.

use std::collections::{BTreeMap, HashMap, HashSet};

/// The recipe's name.
pub const CACHE: &str = "cache";

/// A node as seen: `(czxid, mzxid, value)`.
pub type State = (i64, i64, String);

/// What one cache heard, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Created(u64, String, State),
    Changed(u64, String, State),
    Deleted(u64, String, i64, i64),
    Initialized(u64),
}

/// One worker's records.
#[derive(Default, Debug)]
pub struct Records {
    /// Values written (attempted), with their node.
    pub written: Vec<(String, String)>,
    /// Changes answered: node, value, `czxid`, `mzxid`.
    pub answered: Vec<(String, String, i64, i64)>,
    pub events: Vec<Event>,
    /// What the cache held at the end, and whether it said it was current.
    pub end: Option<(BTreeMap<String, State>, bool)>,
    /// Whether the worker stopped writing.
    pub quiet: bool,
    pub malformed: usize,
}

/// The records in `text`.
pub fn parse(text: &str) -> Records {
    let mut r = Records::default();
    let mut dump: BTreeMap<String, State> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let int = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        let at = f.get(1).and_then(|v| v.parse::<u64>().ok());
        let state = |i: usize| Some((int(i)?, int(i + 1)?, (*f.get(i + 2)?).to_owned()));
        let ok = match (f.first().copied(), f.len()) {
            (Some("V"), 3) => {
                r.written.push((f[1].to_owned(), f[2].to_owned()));
                true
            }
            (Some("Z"), 5) => match (int(3), int(4)) {
                (Some(c), Some(m)) => {
                    r.answered.push((f[1].to_owned(), f[2].to_owned(), c, m));
                    true
                }
                _ => false,
            },
            (Some(k @ ("c" | "m")), 6) => match (at, state(3)) {
                (Some(at), Some(s)) => {
                    let path = f[2].to_owned();
                    r.events.push(if k == "c" {
                        Event::Created(at, path, s)
                    } else {
                        Event::Changed(at, path, s)
                    });
                    true
                }
                _ => false,
            },
            (Some("d"), 5) => match (at, int(3), int(4)) {
                (Some(at), Some(c), Some(m)) => {
                    r.events.push(Event::Deleted(at, f[2].to_owned(), c, m));
                    true
                }
                _ => false,
            },
            (Some("i"), 2) => at.map(|at| r.events.push(Event::Initialized(at))).is_some(),
            (Some("q"), 2) => {
                r.quiet = true;
                true
            }
            (Some("s"), 5) => match state(2) {
                Some(s) => {
                    dump.insert(f[1].to_owned(), s);
                    true
                }
                None => false,
            },
            (Some("S"), 3) => {
                r.end = Some((std::mem::take(&mut dump), f[2] == "current"));
                true
            }
            _ => false,
        };
        if !ok {
            r.malformed += 1;
        }
    }
    r
}

/// True if the cache heard of a change after `since` (the writers keep writing).
pub fn heard_since(r: &Records, since: u64) -> bool {
    r.events.iter().rev().any(|e| match e {
        Event::Created(at, ..) | Event::Changed(at, ..) | Event::Deleted(at, ..) => *at > since,
        Event::Initialized(_) => false,
    })
}

/// The coordinator's part: the values it wrote in the final round, and the tree as it read
/// it once the caches had settled.
#[derive(Default, Debug)]
pub struct End {
    pub written: Vec<(String, String)>,
    pub tree: BTreeMap<String, State>,
    /// Why the coordinator could not read the tree, if it could not.
    pub unread: Option<String>,
}

/// What the rules looked at.
#[derive(Default, Debug)]
pub struct Counts {
    pub events: usize,
    pub caches_settled: usize,
}

/// Checks every cache worker's records together; with `end`, the end of the run as well.
/// While the run goes on, a value shown after `horizon` is not asked to be among the writes:
/// its writer's records may have been read before the write was written down.
pub fn check(
    root: &str,
    workers: &[(usize, Records)],
    horizon: u64,
    end: Option<&End>,
    violations: &mut Vec<String>,
) -> Counts {
    let mut counts = Counts::default();
    let mut say = |v: String| {
        if violations.len() < 64 {
            violations.push(v);
        }
    };
    // Nothing from nowhere: the values written to each node (empty data for the nodes the
    // workers make with no data: the root and their own parts).
    let written: HashSet<(&str, &str)> = workers
        .iter()
        .flat_map(|(_, r)| r.written.iter())
        .chain(end.iter().flat_map(|e| e.written.iter()))
        .map(|(p, v)| (p.as_str(), v.as_str()))
        .collect();
    let bare = |path: &str| {
        path == root
            || path
                .strip_prefix(root)
                .and_then(|rest| rest.strip_prefix("/w"))
                .is_some_and(|w| !w.contains('/'))
    };
    // One history: a state has one value wherever it is seen.
    let mut history: HashMap<(String, i64, i64), (String, String)> = HashMap::new();
    let mut one = |path: &str, s: &State, whose: String, say: &mut dyn FnMut(String)| {
        let key = (path.to_owned(), s.0, s.1);
        match history.get(&key) {
            Some((value, first)) if *value != s.2 => say(format!(
                "cache: {path} at czxid {:#x} mzxid {:#x} is {value:?} to {first} and {:?} to \
                 {whose}",
                s.0, s.1, s.2
            )),
            Some(_) => {}
            None => {
                history.insert(key, (s.2.clone(), whose));
            }
        }
    };
    for (w, r) in workers {
        for (path, value, c, m) in &r.answered {
            one(
                path,
                &(*c, *m, value.clone()),
                format!("worker {w}'s write"),
                &mut say,
            );
        }
    }
    for (w, r) in workers {
        let mut shown: HashMap<&str, (Option<State>, i64, i64)> = HashMap::new();
        let mut held: BTreeMap<String, State> = BTreeMap::new();
        for e in &r.events {
            counts.events += 1;
            match e {
                Event::Created(at, path, s) | Event::Changed(at, path, s) => {
                    let created = matches!(e, Event::Created(..));
                    let whose = format!("worker {w}'s cache at {at}");
                    one(path, s, whose.clone(), &mut say);
                    if *at <= horizon
                        && !written.contains(&(path.as_str(), s.2.as_str()))
                        && !(s.2 == "-" && bare(path))
                    {
                        say(format!(
                            "cache: {whose} showed {path} as {:?}, which nobody wrote to it",
                            s.2
                        ));
                    }
                    match shown.get(path.as_str()) {
                        Some((Some(_), ..)) if created => say(format!(
                            "cache: {whose} took {path} in again without it leaving"
                        )),
                        None | Some((None, ..)) if !created => say(format!(
                            "cache: {whose} changed {path}, which it did not show"
                        )),
                        Some((Some(old), ..)) if (s.0, s.1) <= (old.0, old.1) => say(format!(
                            "cache: {whose} showed {path} going back, from czxid {:#x} mzxid \
                             {:#x} to czxid {:#x} mzxid {:#x}",
                            old.0, old.1, s.0, s.1
                        )),
                        Some((None, c, m)) if s.0 <= *m => say(format!(
                            "cache: {whose} showed {path} back (czxid {:#x}) after it left as \
                             czxid {c:#x} mzxid {m:#x}",
                            s.0
                        )),
                        _ => {}
                    }
                    shown.insert(path, (Some(s.clone()), s.0, s.1));
                    held.insert(path.clone(), s.clone());
                }
                Event::Deleted(at, path, c, m) => {
                    match shown.get(path.as_str()) {
                        Some((Some(old), ..)) if (old.0, old.1) != (*c, *m) => say(format!(
                            "cache: worker {w}'s cache at {at} deleted {path} as czxid {c:#x} \
                             mzxid {m:#x}, having shown czxid {:#x} mzxid {:#x}",
                            old.0, old.1
                        )),
                        Some((Some(_), ..)) => {}
                        _ => say(format!(
                            "cache: worker {w}'s cache at {at} deleted {path}, which it did not \
                             show"
                        )),
                    }
                    shown.insert(path, (None, *c, *m));
                    held.remove(path);
                }
                Event::Initialized(_) => {}
            }
        }
        let Some(end) = end else { continue };
        let Some((dump, current)) = &r.end else {
            say(format!(
                "cache: worker {w}'s cache did not write itself down at the end"
            ));
            continue;
        };
        counts.caches_settled += 1;
        for (path, s) in dump {
            one(path, s, format!("worker {w}'s cache at the end"), &mut say);
        }
        if !current {
            say(format!(
                "cache: worker {w}'s cache said it was stale at the end"
            ));
        }
        if held != *dump {
            say(format!(
                "cache: worker {w}'s listeners were not told of every change: its events \
                 give {}",
                differences(&held, dump)
            ));
        }
        if let Some(why) = &end.unread {
            say(format!(
                "cache: the coordinator could not read the tree at the end ({why}): \
                 convergence not judged"
            ));
        } else if end.tree != *dump {
            say(format!(
                "cache: worker {w}'s cache did not converge: beside the server's tree it has {}",
                differences(dump, &end.tree)
            ));
        }
    }
    if let Some(end) = end {
        for (path, s) in &end.tree {
            one(path, s, "the coordinator's read".into(), &mut say);
        }
    }
    counts
}

/// How `a` differs from `b`, the first few nodes.
fn differences(a: &BTreeMap<String, State>, b: &BTreeMap<String, State>) -> String {
    let mut out = Vec::new();
    for (p, s) in a {
        match b.get(p) {
            None => out.push(format!("{p} extra")),
            Some(t) if t != s => out.push(format!(
                "{p} at mzxid {:#x} not {:#x} ({:?} not {:?})",
                s.1, t.1, s.2, t.2
            )),
            Some(_) => {}
        }
    }
    out.extend(
        b.keys()
            .filter(|p| !a.contains_key(*p))
            .map(|p| format!("{p} missing")),
    );
    let n = out.len();
    out.truncate(4);
    format!("{n} nodes different: {}", out.join(", "))
}

/// Each rule shown to fire on records made to break it.
pub fn self_test() {
    let root = "/t/cache";
    let good = "V /t/cache/w0/k0 w0-1\nc 10 /t/cache 1 1 -\nc 11 /t/cache/w0 2 2 -\n\
                i 12\nc 13 /t/cache/w0/k0 5 5 w0-1\nV /t/cache/w0/k0 w0-2\n\
                Z /t/cache/w0/k0 w0-2 5 7\nm 14 /t/cache/w0/k0 5 7 w0-2\nq 15\n\
                s /t/cache 1 1 -\ns /t/cache/w0 2 2 -\ns /t/cache/w0/k0 5 7 w0-2\nS 16 current\n";
    let end = End {
        written: vec![],
        tree: parse(good).end.expect("dump").0,
        unread: None,
    };
    let run = |text: &str, end: Option<&End>| {
        let mut v = Vec::new();
        check(root, &[(0, parse(text))], u64::MAX, end, &mut v);
        v
    };
    assert_eq!(run(good, Some(&end)), Vec::<String>::new());
    let broken = [
        // Goes back.
        good.replace("m 14 /t/cache/w0/k0 5 7", "m 14 /t/cache/w0/k0 5 4"),
        // Comes back after leaving, as it was.
        good.replace(
            "q 15\n",
            "d 15 /t/cache/w0/k0 5 7\nc 16 /t/cache/w0/k0 5 7 w0-2\nq 17\n",
        ),
        // A value nobody wrote.
        good.replace(
            "m 14 /t/cache/w0/k0 5 7 w0-2",
            "m 14 /t/cache/w0/k0 5 7 w0-9",
        ),
        // A state with another value than the writer's answer.
        good.replace("Z /t/cache/w0/k0 w0-2 5 7", "Z /t/cache/w0/k0 w0-1 5 7"),
        // Events that do not give the end.
        good.replace("m 14 /t/cache/w0/k0 5 7 w0-2\n", ""),
        // Stale at the end.
        good.replace("S 16 current", "S 16 stale"),
        // No end written.
        good.replace("S 16 current\n", ""),
    ];
    for (i, text) in broken.iter().enumerate() {
        assert!(
            !run(text, Some(&end)).is_empty(),
            "cache rule {i} did not fire"
        );
    }
    // Does not converge: the server's tree has a node the cache lacks.
    let mut more = End {
        written: vec![("/t/cache/w0/k1".into(), "end-1".into())],
        tree: end.tree.clone(),
        unread: None,
    };
    more.tree
        .insert("/t/cache/w0/k1".into(), (9, 9, "end-1".into()));
    assert!(
        !run(good, Some(&more)).is_empty(),
        "convergence did not fire"
    );
    // While the run goes on, the end is not asked for.
    assert_eq!(
        run(&good.replace("S 16 current\n", ""), None),
        Vec::<String>::new()
    );
}
