//! The checker's rules for the recipes that hold nothing exclusively: a double barrier's
//! members (none passes enter unless all have come in, none passes leave while another stays
//! inside) and a group's members (a node once seen on a session stays while the session
//! lives). Their records are their own (`worker.rs`: `double_barrier`, `group_member`).

/// The double barrier's recipe.
pub const BARRIER: &str = "double-barrier";
/// The group's recipe.
pub const GROUP: &str = "group";

/// Where a double barrier's member was, as its records tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In an `enter` call: its node made or being made, waiting for the others.
    Entering,
    /// Its `enter` passed, and its `leave` has not begun.
    Inside,
    /// In a `leave` call.
    Leaving,
    /// Neither: before its first call, after a `leave` returned, after an `enter` that did not
    /// pass.
    Out,
}

/// One call: enter or leave, when it began and, once it returned, when and whether it passed.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub leave: bool,
    pub start: u64,
    pub end: Option<(u64, bool)>,
    /// For an enter that passed, the session its node was made on.
    pub session: Option<i64>,
}

/// A double barrier member's records.
#[derive(Default)]
pub struct Calls {
    pub calls: Vec<Call>,
    /// When its client said a session was lost, and which: `(when, session)`.
    pub lost: Vec<(u64, i64)>,
    /// When its client began a session, and which.
    pub sessions: Vec<(u64, i64)>,
    /// Spans in which a node of a session its client had given up on may still have stood
    /// (`G0` to `G1`, or to the end of the records).
    pub ghosts: Vec<(u64, u64)>,
    pub malformed: usize,
}

/// The records of a double barrier's member, `text` as `parse` takes it (a last line without
/// its newline left out).
pub fn parse_calls(text: &str) -> Calls {
    let mut out = Calls::default();
    // Ghosts not yet seen gone: (session, index into `ghosts`).
    let mut open_ghosts: Vec<(&str, usize)> = Vec::new();
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let at = f.get(1).and_then(|t| t.parse::<u64>().ok());
        match (f.as_slice(), at) {
            (["E" | "L", _], Some(at)) => out.calls.push(Call {
                leave: f[0] == "L",
                start: at,
                end: None,
                session: None,
            }),
            (["R", _, outcome @ ("P" | "T" | "F"), rest @ ..], Some(at)) if rest.len() <= 1 => {
                match out.calls.last_mut() {
                    Some(c) if c.end.is_none() => {
                        c.end = Some((at, *outcome == "P"));
                        c.session = rest.first().and_then(|s| s.parse().ok());
                    }
                    _ => out.malformed += 1,
                }
            }
            (["C", _, "Lost", session], Some(at)) => match session.parse() {
                Ok(session) => out.lost.push((at, session)),
                Err(_) => out.malformed += 1,
            },
            (["C", _, "Connected", session], Some(at)) => match session.parse() {
                Ok(session) => out.sessions.push((at, session)),
                Err(_) => out.malformed += 1,
            },
            (["G0", _, session], Some(at)) => {
                out.ghosts.push((at, u64::MAX));
                open_ghosts.push((*session, out.ghosts.len() - 1));
            }
            // Losses are followed apart: their ends come in any order.
            (["G1", _, session], Some(at)) => {
                match open_ghosts.iter().position(|(s, _)| s == session) {
                    Some(k) => {
                        let (_, g) = open_ghosts.swap_remove(k);
                        out.ghosts[g].1 = at;
                    }
                    None => out.malformed += 1,
                }
            }
            (["C", ..], Some(_)) => {}
            _ => out.malformed += 1,
        }
    }
    // Written by another thread, and stamped with when the client decided them: in time's
    // order, not the file's.
    out.sessions.sort_unstable();
    out.lost.sort_unstable();
    out.ghosts.sort_unstable();
    out
}

impl Calls {
    /// The spans `[from, to)` in which this member was at a place `ok` admits (`u64::MAX`: to
    /// the end of the records).
    fn spans(&self, ok: impl Fn(Place) -> bool) -> Vec<(u64, u64)> {
        let mut spans = Vec::new();
        let mut place = Place::Out;
        let mut since = 0u64;
        let mut go = |to: Place, at: u64, place: &mut Place, since: &mut u64| {
            if ok(*place) && at > *since {
                spans.push((*since, at));
            }
            *place = to;
            *since = at;
        };
        for c in &self.calls {
            go(
                if c.leave {
                    Place::Leaving
                } else {
                    Place::Entering
                },
                c.start,
                &mut place,
                &mut since,
            );
            if let Some((at, passed)) = c.end {
                let after = if !c.leave && passed {
                    Place::Inside
                } else {
                    Place::Out
                };
                go(after, at, &mut place, &mut since);
            }
        }
        go(Place::Out, u64::MAX, &mut place, &mut since);
        spans
    }

    /// True if the session this member had when its last enter before `p` passed was said
    /// lost by `UNWRITTEN` after `p`: its node may have gone with it before `p`.
    fn lost_inside(&self, p: u64) -> bool {
        let Some(entered) = self
            .calls
            .iter()
            .rev()
            .find(|c| !c.leave && matches!(c.end, Some((at, true)) if at <= p))
        else {
            return false;
        };
        // The session the pass named; else the one the client had then.
        let session = entered.session.or_else(|| {
            let at = entered.end.map_or(0, |(at, _)| at);
            self.sessions
                .iter()
                .rev()
                .find(|(began, _)| *began <= at)
                .map(|&(_, s)| s)
        });
        let Some(session) = session else {
            return false;
        };
        let by = p.saturating_add(crate::UNWRITTEN.as_nanos() as u64);
        self.lost
            .iter()
            .any(|&(at, lost)| lost == session && at <= by)
    }

    /// The enter calls that passed, as `(start, passed at)`.
    pub fn passes(&self, leave: bool) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.calls.iter().filter_map(move |c| match c.end {
            Some((at, true)) if c.leave == leave => Some((c.start, at)),
            _ => None,
        })
    }
}

/// The spans sorted, those that overlap or touch made one.
fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (from, to) in spans {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

/// The spans in both lists (each sorted and disjoint).
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (from, to) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if from < to {
            out.push((from, to));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The double barrier's rules over its members' records `(worker, calls)`; what breaks them
/// goes to `violations`. Passes at or after `horizon` are left for a later check (what
/// excuses them may not be written yet). Returns how many passes were checked.
///
/// - **Enter**: a member passed enter at `p` (its call from `s`) only if at some instant of
///   `[s, p]` every member was in: entering, inside or leaving, or with a node of a session
///   its client had given up on still standing. The member that saw the last node come saw
///   every member's node at once, and a member's node is there only from its enter call to
///   the end of its leave call, or, made on a session its client then called lost, until the
///   servers end that session too. (Leaving counts as in: a leave whose round the others gave
///   up on, their own leaves timed out, may keep its member's node standing, and the
///   barrier's nodes carry no round to tell it from a member of the next; see
///   `recipes/barriers.md`.)
/// - **Leave**: a member passed leave at `p` only if at some instant of `[s, p]` no member was
///   inside, but for a member whose client said, by `UNWRITTEN` after `p`, that the session
///   it had when its last enter before `p` passed was lost (its node went with that session:
///   it is out of the round, whether or not it knew yet). The last node of the round went at
///   such an instant.
pub fn check_barrier(
    members: &[(usize, Calls)],
    horizon: u64,
    violations: &mut Vec<String>,
) -> usize {
    let mut checked = 0;
    for (w, calls) in members {
        for leave in [false, true] {
            for (s, p) in calls.passes(leave).filter(|&(_, p)| p < horizon) {
                checked += 1;
                let mut common = vec![(s, p.saturating_add(1))];
                let mut excused = Vec::new();
                for (x, other) in members.iter().filter(|(x, _)| x != w) {
                    let spans = if leave {
                        if other.lost_inside(p) {
                            excused.push(*x);
                            continue;
                        }
                        other.spans(|place| place != Place::Inside)
                    } else {
                        let mut spans = other.spans(|place| place != Place::Out);
                        spans.extend(other.ghosts.iter().copied());
                        merge(spans)
                    };
                    common = intersect(&common, &spans);
                }
                if common.is_empty() {
                    violations.push(format!(
                        "{BARRIER}: worker {w} passed {} at {p} (called at {s}) with {}{}",
                        if leave { "leave" } else { "enter" },
                        if leave {
                            "another member inside all along"
                        } else {
                            "no instant at which every member was in"
                        },
                        if excused.is_empty() {
                            String::new()
                        } else {
                            format!(" (workers {excused:?} excused: a session lost)")
                        }
                    ));
                }
            }
        }
    }
    checked
}

/// [`check_barrier`] over every pass (the self-test's).
fn check_barrier_all(members: &[(usize, Calls)], violations: &mut Vec<String>) -> usize {
    check_barrier(members, u64::MAX, violations)
}

/// One look at a group member's node through its own session.
#[derive(Clone, Copy, Debug)]
pub struct Look {
    pub from: u64,
    pub to: u64,
    pub session: i64,
    /// The node was there and the session's own.
    pub ours: bool,
    pub present: bool,
    pub owner: i64,
}

/// A group member's records.
#[derive(Default)]
pub struct Looks {
    pub looks: Vec<Look>,
    /// Writes answered on a session, after a look that did not find the node ours:
    /// `(when, session)`.
    pub alive: Vec<(u64, i64)>,
    pub malformed: usize,
}

/// The records of a group member (as [`parse_calls`] takes them).
pub fn parse_looks(text: &str) -> Looks {
    let mut out = Looks::default();
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["O", from, to, session, present, owner] => {
                match (
                    from.parse(),
                    to.parse(),
                    session.parse::<i64>(),
                    owner.parse::<i64>(),
                ) {
                    (Ok(from), Ok(to), Ok(session), Ok(owner)) => out.looks.push(Look {
                        from,
                        to,
                        session,
                        present: *present == "1",
                        ours: *present == "1" && owner == session,
                        owner,
                    }),
                    _ => out.malformed += 1,
                }
            }
            ["V", at, session] => match (at.parse(), session.parse()) {
                (Ok(at), Ok(session)) => out.alive.push((at, session)),
                _ => out.malformed += 1,
            },
            ["C", ..] => {}
            _ => out.malformed += 1,
        }
    }
    out
}

/// True if some look after `since` found the member's node there and its session's own.
pub fn seen_since(looks: &Looks, since: u64) -> bool {
    looks.looks.iter().any(|l| l.ours && l.from > since)
}

/// A group member's rule: once a look on session `S` found the node there and `S`'s own, no
/// later look on `S` finds it missing (or another's) while `S` lives, which a write answered
/// on `S` after that look proves (the leader takes none on a session it expired). Returns how
/// many looks were checked.
pub fn check_group(worker: usize, looks: &Looks, violations: &mut Vec<String>) -> usize {
    for (n, l) in looks.looks.iter().enumerate() {
        if l.ours {
            continue;
        }
        let seen_before = looks.looks[..n]
            .iter()
            .rfind(|e| e.session == l.session && e.ours);
        let alive_after = looks
            .alive
            .iter()
            .find(|&&(at, s)| s == l.session && at >= l.to);
        if let (Some(seen), Some((at, _))) = (seen_before, alive_after) {
            violations.push(format!(
                "{GROUP}: worker {worker}'s node, seen on session {:#x} at {}, was {} at \
                 [{}, {}], and the session was alive at {at}",
                l.session,
                seen.to,
                if l.present {
                    format!("another session's ({:#x})", l.owner)
                } else {
                    "missing".to_owned()
                },
                l.from,
                l.to,
            ));
        }
    }
    looks.looks.len()
}

/// The rules, each shown to fire on records made to break it (and to pass records that keep
/// it).
pub fn self_test() {
    let calls = |text: &str| parse_calls(text);
    // Three members in a round: all enter, all leave.
    let a = calls("E 10\nR 30 P\nL 40\nR 60 P\n");
    let b = calls("E 12\nR 31 P\nL 45\nR 61 P\n");
    let c = calls("E 20\nR 30 P\nL 50\nR 60 P\n");
    let mut v = Vec::new();
    assert_eq!(
        check_barrier_all(&[(0, a), (1, b), (2, c)], &mut v),
        6,
        "passes counted"
    );
    assert!(v.is_empty(), "a sound round called broken: {v:?}");
    // The third member had not entered yet when the first two passed enter.
    let a = calls("E 10\nR 15 P\n");
    let b = calls("E 11\nR 15 P\n");
    let c = calls("L 1\nR 5 P\nE 20\n");
    let mut v = Vec::new();
    check_barrier_all(&[(0, a), (1, b), (2, c)], &mut v);
    assert_eq!(v.len(), 2, "enter before all came in not seen: {v:?}");
    // A member still leaving counts as in (its node may stand); one resting out does not,
    // unless a node of a session its client gave up on still stood.
    let a = calls("E 10\nR 15 P\n");
    let b = calls("E 11\nR 15 P\n");
    let mut v = Vec::new();
    check_barrier_all(&[(0, a), (1, b), (2, calls("L 1\nR 20 T\n"))], &mut v);
    assert!(v.is_empty(), "a member still leaving: {v:?}");
    let (a, b) = (calls("E 10\nR 15 P\n"), calls("E 11\nR 15 P\n"));
    let ghost = calls("L 1\nC 2 Lost 7\nG0 2 7\nR 3 P\nG1 12 7\n");
    check_barrier_all(&[(0, a), (1, b), (2, ghost)], &mut v);
    assert!(
        v.is_empty(),
        "a member whose node outlived its session: {v:?}"
    );
    let (a, b) = (calls("E 10\nR 15 P\n"), calls("E 11\nR 15 P\n"));
    let gone = calls("L 1\nC 2 Lost 7\nG0 2 7\nR 3 P\nG1 5 7\n");
    check_barrier_all(&[(0, a), (1, b), (2, gone)], &mut v);
    assert_eq!(
        v.len(),
        2,
        "a member out, its old node gone, counted as in: {v:?}"
    );
    // The second member passed leave while the third stayed inside.
    let a = calls("E 10\nR 20 P\nL 30\n");
    let b = calls("E 10\nR 20 P\nL 30\nR 35 P\n");
    let mut v = Vec::new();
    check_barrier_all(&[(0, a), (1, b), (2, calls("E 10\nR 20 P\n"))], &mut v);
    assert_eq!(v.len(), 1, "leave with a member inside not seen: {v:?}");
    // ... unless the session it entered on was lost (said within `UNWRITTEN`).
    let c = calls("C 5 Connected 6\nE 10\nR 20 P\nC 25 Lost 6\n");
    let mut v = Vec::new();
    let b = calls("E 10\nR 20 P\nL 30\nR 35 P\n");
    check_barrier_all(&[(1, b), (2, c)], &mut v);
    assert!(v.is_empty(), "a member out with its session: {v:?}");
    // Two losses followed apart end in either order.
    let g = calls("G0 1 7\nG0 2 8\nG1 3 7\nG1 4 8\n");
    assert_eq!((g.malformed, g.ghosts.clone()), (0, vec![(1, 3), (2, 4)]));
    // The session a pass names counts, with no `Connected` written (a first session).
    let c = calls("E 10\nR 20 P 6\nC 25 Lost 6\n");
    let mut v = Vec::new();
    let b = calls("E 10\nR 20 P\nL 30\nR 35 P\n");
    check_barrier_all(&[(1, b), (2, c)], &mut v);
    assert!(
        v.is_empty(),
        "a member that lost the session it entered on: {v:?}"
    );
    // Another session's loss, or one said long after, excuses nothing (the review's case:
    // inside all through, a loss much later).
    let late = crate::UNWRITTEN.as_nanos() as u64 + 100;
    for c in [
        calls("C 5 Connected 6\nE 10\nR 20 P\nL 800\nR 850 P\nE 860\nC 900 Lost 7\n"),
        calls(&format!("C 5 Connected 6\nE 10\nR 20 P\nC {late} Lost 6\n")),
    ] {
        let mut v = Vec::new();
        let b = calls("E 10\nR 20 P\nL 30\nR 35 P\n");
        check_barrier_all(&[(1, b), (2, c)], &mut v);
        assert_eq!(
            v.len(),
            1,
            "an unrelated loss excused a member inside: {v:?}"
        );
    }

    // A group member: seen, then missing on the same session while it lived.
    let looks = parse_looks("O 1 2 7 1 7\nO 3 4 7 0 0\nV 5 7\n");
    let mut v = Vec::new();
    check_group(0, &looks, &mut v);
    assert_eq!(v.len(), 1, "a node gone under a live session not seen");
    // Missing after the session ended (no write answered on it after): no promise broken;
    // missing on a new session before it was made: none either.
    let looks = parse_looks("O 1 2 7 1 7\nO 3 4 7 0 0\nO 5 6 8 0 0\nV 7 8\nO 8 9 8 1 8\n");
    let mut v = Vec::new();
    check_group(0, &looks, &mut v);
    assert!(v.is_empty(), "a lost session's node called broken: {v:?}");
    assert!(seen_since(&looks, 7) && !seen_since(&looks, 8));
}
