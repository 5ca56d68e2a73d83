//! The counter's rules (`DistributedAtomicLong`, issue 38): its workers increment one counter
//! and write each call down (`I <from> <to> <post>`: made, returning `post`; `N <from> <to>`:
//! not made, every try met a newer value or it failed before its write; `U <from> <to>`: its
//! write's answer was lost, so it may have been applied once). The counter starts at 0 and nobody else changes it. Its history must then be
//! that of a linearizable counter whose made increments each return a value of their own:
//!
//! - no value is returned by two made increments;
//! - an increment made before another began returns the smaller value (real time);
//! - no made increment returns more than the calls begun before it returned (made or of
//!   unknown outcome): each adds one, at most once, between its start and its end;
//! - once every worker has stopped, the counter is at least the number made and at most that
//!   plus the calls whose outcome is unknown (each of those applied at most once), and no
//!   smaller than any value returned.

/// The recipe's name.
pub const COUNTER: &str = "counter";

/// One worker's increments.
#[derive(Default, Debug)]
pub struct Increments {
    /// Made: when the call began and returned, and the value it returned.
    pub made: Vec<(u64, u64, i64)>,
    /// Calls whose outcome is unknown (an error): when they began and returned.
    pub unknown: Vec<(u64, u64)>,
    /// Calls that were not made (every try raced).
    pub raced: usize,
    pub malformed: usize,
}

/// The increments in a worker's records.
pub fn parse_increments(text: &str) -> Increments {
    let mut incs = Increments::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        match (f.first().copied(), num(1), num(2)) {
            (Some("I"), Some(from), Some(to)) => {
                match f.get(3).and_then(|v| v.parse::<i64>().ok()) {
                    Some(post) if f.len() == 4 => incs.made.push((from, to, post)),
                    _ => incs.malformed += 1,
                }
            }
            (Some("N"), Some(_), Some(_)) if f.len() == 3 => incs.raced += 1,
            (Some("U"), Some(from), Some(to)) if f.len() == 3 => incs.unknown.push((from, to)),
            _ => incs.malformed += 1,
        }
    }
    incs
}

/// True if an increment began after `since` and was made.
pub fn made_since(incs: &Increments, since: u64) -> bool {
    incs.made.iter().any(|&(from, _, _)| from > since)
}

/// Checks every worker's increments together; with `last`, the counter's value once every
/// worker stopped. Returns the number of made increments checked.
pub fn check_counter(
    workers: &[(usize, Increments)],
    last: Option<i64>,
    violations: &mut Vec<String>,
) -> usize {
    let mut made: Vec<(u64, u64, i64, usize)> = workers
        .iter()
        .flat_map(|(w, incs)| incs.made.iter().map(move |&(a, b, p)| (a, b, p, *w)))
        .collect();
    // No value twice.
    made.sort_by_key(|m| m.2);
    for pair in made.windows(2) {
        if pair[0].2 == pair[1].2 {
            violations.push(format!(
                "counter: workers {} and {} were both told their increment made {}",
                pair[0].3, pair[1].3, pair[0].2
            ));
        }
    }
    // Real time: walking the increments by when they began, every one that returned before
    // the current one began must have returned a smaller value.
    let mut by_end = made.clone();
    by_end.sort_by_key(|m| m.1);
    let mut by_start = made.clone();
    by_start.sort_by_key(|m| m.0);
    let mut ended = by_end.iter().peekable();
    let mut highest: Option<(i64, usize)> = None;
    for &(from, _, post, w) in &by_start {
        while let Some(&&(_, to, p, v)) = ended.peek() {
            if to >= from {
                break;
            }
            if highest.is_none_or(|(h, _)| p > h) {
                highest = Some((p, v));
            }
            ended.next();
        }
        if let Some((h, v)) = highest.filter(|&(h, _)| h >= post) {
            violations.push(format!(
                "counter: worker {w}'s increment began after worker {v}'s had returned {h}, \
                 and returned {post} (not more)"
            ));
        }
    }
    // Never ahead of the calls that could have made it.
    let mut starts: Vec<u64> = workers
        .iter()
        .flat_map(|(_, incs)| {
            incs.made
                .iter()
                .map(|m| m.0)
                .chain(incs.unknown.iter().map(|u| u.0))
        })
        .collect();
    starts.sort_unstable();
    for &(_, to, post, w) in &made {
        let begun = starts.partition_point(|&s| s < to) as i64;
        if post > begun {
            violations.push(format!(
                "counter: worker {w}'s increment returned {post}, but only {begun} calls had \
                 begun by then"
            ));
        }
    }
    if let Some(last) = last {
        let unknown: usize = workers.iter().map(|(_, i)| i.unknown.len()).sum();
        let (least, most) = (made.len() as i64, (made.len() + unknown) as i64);
        if last < least || last > most {
            violations.push(format!(
                "counter: ended at {last} after {least} increments made and {unknown} of \
                 unknown outcome (it must be within {least}..={most})"
            ));
        }
        if let Some(top) = made.last().filter(|m| m.2 > last) {
            violations.push(format!(
                "counter: ended at {last}, below the {} worker {} was told it made",
                top.2, top.3
            ));
        }
    }
    made.len()
}

/// The rules, each fired on records made to break it (and quiet on records that keep them).
pub fn self_test() {
    let fine = parse_increments("I 1 2 1\nN 3 4\nU 5 6\nI 7 8 3\n");
    let other = parse_increments("I 1 9 2\n");
    let mut v = Vec::new();
    let workers = vec![(0, fine), (1, other)];
    assert_eq!(check_counter(&workers, Some(3), &mut v), 3);
    assert!(v.is_empty(), "{v:?}");
    check_counter(&workers, Some(4), &mut v);
    assert!(v.is_empty(), "one unknown may have been applied: {v:?}");
    // A value twice.
    let twice = vec![
        (0, parse_increments("I 1 2 1\n")),
        (1, parse_increments("I 1 3 1\n")),
    ];
    check_counter(&twice, None, &mut v);
    assert!(v.iter().any(|l| l.contains("both told")), "{v:?}");
    // Back in real time.
    v.clear();
    let back = vec![
        (0, parse_increments("I 1 2 5\n")),
        (1, parse_increments("I 3 4 4\n")),
    ];
    check_counter(&back, None, &mut v);
    assert!(v.iter().any(|l| l.contains("began after")), "{v:?}");
    // Overlapping calls may return in either order.
    v.clear();
    let overlapping = vec![
        (0, parse_increments("I 1 4 2\n")),
        (1, parse_increments("I 2 3 1\n")),
    ];
    check_counter(&overlapping, None, &mut v);
    assert!(v.is_empty(), "{v:?}");
    // Lost increments, and an extra one nobody may have made.
    for last in [1, 5] {
        v.clear();
        check_counter(&workers, Some(last), &mut v);
        assert!(v.iter().any(|l| l.contains("ended at")), "{last}: {v:?}");
    }
    // Ahead of the calls begun: a call applied twice.
    v.clear();
    let ahead = vec![
        (0, parse_increments("I 1 2 1\nI 3 4 3\n")),
        (1, parse_increments("N 1 2\n")),
    ];
    check_counter(&ahead, None, &mut v);
    assert!(v.iter().any(|l| l.contains("had begun")), "{v:?}");
    let bad = parse_increments("I 1 2\nX\n");
    assert_eq!(bad.malformed, 2);
}
