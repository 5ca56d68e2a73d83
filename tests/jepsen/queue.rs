//! The queues' rules (`DistributedQueue`, issue 38). Each of a queue's workers puts items of
//! its own (`w<worker>-<n>`, `n` counting up) and takes items, and writes each call down:
//!
//! - `P <from> <to> <item> <node>`: put, in `node`; `Q <from> <to> <item>`: the put's answer was
//!   lost (it may be in the queue, once); `N <from> <to>`: not put;
//! - `t <from>`: a take begins; then one of `T <to> <item> <node>` (handed over), `K <to> <node>`
//!   (exactly once: the removal's answer was lost, so `node`'s item may be gone unworked),
//!   `Z <to>` (nothing taken, or an error);
//! - at least once, after the work: `D <to> <node>` (`done` removed it), `U <to> <node>`
//!   (`done`'s answer was lost: removed, or to be handed over again), `E <to>` (not removed),
//!   or `R <to> <node>` (the job failed and the item was let go: it must come back).
//!
//! Once every worker has stopped, the coordinator drains each queue (exactly once) and the
//! items left count as delivered. Then:
//!
//! - **nothing is lost**: every item put (`P`) was delivered (exactly once: handed over; at
//!   least once: handed over to a worker whose `done` then removed it, `T` then `D`: a take
//!   whose `done` failed, or whose job was let go, must see the item come back; one the stop
//!   cut short in its work or its `done` is excused, as that `done` may have committed),
//!   drained, or is the item of a `K` take's node; and, exactly once, at most one per worker
//!   stopped inside a take (`t` with nothing after it: its removal may have committed
//!   unwritten) is excused;
//! - **nothing comes from nowhere**: every item handed over was put (`P` or `Q`), or is one of
//!   its worker's next two items after its last record (a put, of one or a batch of two, the
//!   stop cut short);
//! - **exactly once**: in the `queue-once` recipe, no item is handed over twice (drain
//!   included); the `queue-least` recipe's items may come twice (a worker whose session was
//!   lost while it worked), which is counted, not a violation.

use std::collections::{HashMap, HashSet};

/// The exactly-once queue's recipe.
pub const ONCE: &str = "queue-once";
/// The at-least-once queue's recipe.
pub const LEAST: &str = "queue-least";

/// One worker's calls.
#[derive(Default, Debug)]
pub struct Calls {
    /// Items put: the item and its node.
    pub put: Vec<(String, String)>,
    /// Items whose put's answer was lost.
    pub maybe_put: Vec<String>,
    /// Items handed over, and when.
    pub taken: Vec<(String, u64)>,
    /// Items whose `done` removed them (at least once: `T` then `D` of its node).
    pub done: Vec<String>,
    /// Nodes of takes (exactly once) or `done`s (at least once) whose removal's answer was
    /// lost.
    pub unknown: Vec<String>,
    /// True if the records end inside a take.
    pub cut_in_take: bool,
    /// At least once: the item handed over last, if the records end before its `done` said.
    pub cut_in_work: Option<String>,
    pub malformed: usize,
}

/// The calls in a worker's records, `text` as written (a last line without its newline left
/// out).
pub fn parse(text: &str) -> Calls {
    let mut calls = Calls::default();
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let mut in_take = false;
    // The last item handed over, by node: `D` names the node.
    let mut last_taken: Option<(String, String)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        match (f.as_slice(), num(1)) {
            (["P", _, _, item, node], Some(_)) if num(2).is_some() => {
                calls.put.push(((*item).to_owned(), (*node).to_owned()));
            }
            (["Q", _, _, item], Some(_)) if num(2).is_some() => {
                calls.maybe_put.push((*item).to_owned())
            }
            (["N", _, _], Some(_)) if num(2).is_some() => {}
            (["t", _], Some(_)) => in_take = true,
            (["T", _, item, node], Some(at)) => {
                calls.taken.push(((*item).to_owned(), at));
                last_taken = Some(((*item).to_owned(), (*node).to_owned()));
                in_take = false;
            }
            (["K", _, node], Some(_)) => {
                calls.unknown.push((*node).to_owned());
                in_take = false;
            }
            (["Z", _], Some(_)) => in_take = false,
            (["D", _, node], Some(_)) => match last_taken.take() {
                Some((item, n)) if n == *node => calls.done.push(item),
                _ => calls.malformed += 1,
            },
            (["E", _], Some(_)) => last_taken = None,
            (["R", _, _], Some(_)) => last_taken = None,
            (["U", _, node], Some(_)) => {
                calls.unknown.push((*node).to_owned());
                last_taken = None;
            }
            _ => calls.malformed += 1,
        }
    }
    calls.cut_in_take = in_take;
    // Handed over, then the records end: the stop came in the work or in its `done`, which
    // may have removed the item unwritten.
    if let Some((item, _)) = last_taken {
        calls.cut_in_work = Some(item);
    }
    calls
}

/// True if an item was handed over after `since`.
pub fn taken_since(calls: &Calls, since: u64) -> bool {
    calls.taken.iter().any(|&(_, at)| at > since)
}

/// What the checks counted.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Counts {
    pub put: usize,
    pub taken: usize,
    /// Items handed over more than once (at least once only).
    pub twice: usize,
}

/// Checks one queue's workers together; with `drained`, the items left in the queue once they
/// all stopped (without it, while they run: only what cannot depend on the end).
pub fn check(
    recipe: &str,
    workers: &[(usize, Calls)],
    drained: Option<&[String]>,
    violations: &mut Vec<String>,
) -> Counts {
    let mut counts = Counts::default();
    let mut handed: HashMap<&str, usize> = HashMap::new();
    // What counts as delivered: exactly once, a hand-over; at least once, a removal after
    // the work (a hand-over whose `done` failed must be followed by another).
    let mut delivered: HashSet<&str> = HashSet::new();
    for (_, calls) in workers {
        counts.put += calls.put.len();
        for (item, _) in &calls.taken {
            *handed.entry(item).or_default() += 1;
            counts.taken += 1;
            if recipe == ONCE {
                delivered.insert(item);
            }
        }
        if recipe != ONCE {
            delivered.extend(calls.done.iter().map(String::as_str));
            delivered.extend(calls.cut_in_work.as_deref());
        }
    }
    for item in drained.unwrap_or_default() {
        *handed.entry(item).or_default() += 1;
        delivered.insert(item);
    }
    // Every item a put was written down for, made or of unknown outcome.
    let put_items = || {
        workers.iter().flat_map(|(_, c)| {
            c.put
                .iter()
                .map(|(i, _)| i.as_str())
                .chain(c.maybe_put.iter().map(String::as_str))
        })
    };
    let puts: HashSet<&str> = put_items().collect();
    // A worker's items count up: one past its last record may have been put unwritten.
    let last_n: HashMap<&str, u64> = put_items()
        .filter_map(|i| {
            i.rsplit_once('-')
                .and_then(|(w, n)| Some((w, n.parse().ok()?)))
        })
        .fold(HashMap::new(), |mut m, (w, n)| {
            let e = m.entry(w).or_insert(0);
            *e = (*e).max(n);
            m
        });
    let mut handed_sorted: Vec<(&str, usize)> = handed.iter().map(|(k, v)| (*k, *v)).collect();
    handed_sorted.sort_unstable();
    for (item, times) in handed_sorted {
        if times > 1 {
            if recipe == ONCE {
                violations.push(format!("{recipe}: {item} was handed over {times} times"));
            } else {
                counts.twice += 1;
            }
        }
        let cut_short = item
            .rsplit_once('-')
            .and_then(|(w, n)| Some((w, n.parse::<u64>().ok()?)))
            .is_some_and(|(w, n)| {
                let last = last_n.get(w).copied().unwrap_or(0);
                n > last && n <= last + 2
            });
        if !puts.contains(item) && !cut_short {
            violations.push(format!("{recipe}: {item} was handed over but never put"));
        }
    }
    if drained.is_some() {
        let unknown: HashSet<&str> = workers
            .iter()
            .flat_map(|(_, c)| c.unknown.iter().map(String::as_str))
            .collect();
        // A take of the at-least-once queue that the stop cut short leaves its item locked
        // until its session ends, then free for the drain: nothing to excuse there.
        let excused = if recipe == ONCE {
            workers.iter().filter(|(_, c)| c.cut_in_take).count()
        } else {
            0
        };
        let lost: Vec<&str> = workers
            .iter()
            .flat_map(|(_, c)| c.put.iter())
            .filter(|(item, node)| {
                !delivered.contains(item.as_str()) && !unknown.contains(node.as_str())
            })
            .map(|(item, _)| item.as_str())
            .collect();
        if lost.len() > excused {
            violations.push(format!(
                "{recipe}: {} items put were never handed over nor left in the queue (at most \
                 {excused} excused by takes the stop cut short): {:?}",
                lost.len(),
                &lost[..lost.len().min(10)]
            ));
        }
    }
    counts
}

/// The rules above, each shown to fire on records made to break it.
pub fn self_test() {
    let w = |text: &str| parse(text);
    // A clean history: put, taken, the rest drained.
    let a = w(
        "P 1 2 w0-1 /q/queue-1\nP 3 4 w0-2 /q/queue-2\nt 5\nT 6 w0-1 /q/queue-1\nD 7 /q/queue-1\n",
    );
    let mut v = Vec::new();
    let c = check(ONCE, &[(0, a)], Some(&["w0-2".into()]), &mut v);
    assert!(v.is_empty(), "{v:?}");
    assert_eq!((c.put, c.taken), (2, 1));
    // At least once: handed over, its `done` failed, never seen again: lost (an at-most-once
    // queue); its `done` removed it: delivered.
    let failed = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\nE 5\n";
    let mut v = Vec::new();
    check(LEAST, &[(0, w(failed))], Some(&[]), &mut v);
    assert!(v.iter().any(|l| l.contains("never handed over")), "{v:?}");
    // A job let go whose item never came back: lost; one cut short by the stop: excused.
    let released = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\nR 5 /q/queue-1\n";
    let mut v = Vec::new();
    check(LEAST, &[(0, w(released))], Some(&[]), &mut v);
    assert!(v.iter().any(|l| l.contains("never handed over")), "{v:?}");
    let cut = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\n";
    let mut v = Vec::new();
    check(LEAST, &[(0, w(cut))], Some(&[]), &mut v);
    assert!(v.is_empty(), "{v:?}");
    // ... unless `done`'s answer was lost (removed, or to come back).
    let unknown = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\nU 5 /q/queue-1\n";
    let mut v = Vec::new();
    check(LEAST, &[(0, w(unknown))], Some(&[]), &mut v);
    assert!(v.is_empty(), "{v:?}");
    let mut v = Vec::new();
    let text = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\nD 5 /q/queue-1\n";
    check(LEAST, &[(0, w(text))], Some(&[]), &mut v);
    assert!(v.is_empty(), "{v:?}");
    // Twice, exactly once: a violation; at least once: counted.
    let twice = || {
        vec![
            (
                0,
                w("P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-1 /q/queue-1\nD 6 /q/queue-1\n"),
            ),
            (1, w("t 3\nT 5 w0-1 /q/queue-1\nD 7 /q/queue-1\n")),
        ]
    };
    let mut v = Vec::new();
    check(ONCE, &twice(), Some(&[]), &mut v);
    assert!(v.iter().any(|l| l.contains("2 times")), "{v:?}");
    let mut v = Vec::new();
    assert_eq!(check(LEAST, &twice(), Some(&[]), &mut v).twice, 1);
    assert!(v.is_empty(), "{v:?}");
    // Lost: put, never handed over, not drained.
    let mut v = Vec::new();
    check(
        ONCE,
        &[(0, w("P 1 2 w0-1 /q/queue-1\n"))],
        Some(&[]),
        &mut v,
    );
    assert!(v.iter().any(|l| l.contains("never handed over")), "{v:?}");
    // ... unless its take's answer was lost, or a take was cut short by the stop.
    for end in ["t 3\nK 4 /q/queue-1\n", "t 3\n"] {
        let mut v = Vec::new();
        let text = format!("P 1 2 w0-1 /q/queue-1\n{end}");
        check(ONCE, &[(0, w(&text))], Some(&[]), &mut v);
        assert!(v.is_empty(), "{end:?}: {v:?}");
    }
    // ... and not while the workers run (the end is not known).
    let mut v = Vec::new();
    check(ONCE, &[(0, w("P 1 2 w0-1 /q/queue-1\n"))], None, &mut v);
    assert!(v.is_empty(), "{v:?}");
    // From nowhere: handed over, never put, and not the worker's next item.
    let mut v = Vec::new();
    let text = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-7 /q/queue-9\n";
    check(LEAST, &[(0, w(text))], Some(&["w0-1".into()]), &mut v);
    assert!(v.iter().any(|l| l.contains("never put")), "{v:?}");
    let mut v = Vec::new();
    let text = "P 1 2 w0-1 /q/queue-1\nt 3\nT 4 w0-2 /q/queue-2\nD 5 /q/queue-2\nt 6\nT 7 w0-3 /q/queue-3\nD 8 /q/queue-3\n";
    check(LEAST, &[(0, w(text))], Some(&["w0-1".into()]), &mut v);
    assert!(v.is_empty(), "the batch of two the stop cut short: {v:?}");
    // A line cut short is left out; garbage is counted.
    assert_eq!(w("P 1 2 w0-1 /q/queue-1\nT 4 w0").put.len(), 1);
    assert_eq!(w("nonsense 1\n").malformed, 1);
}
