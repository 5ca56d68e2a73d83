//! What the leader has certainly seen of our session: the ground of the lease bound.
//!
//! The leader alone expires sessions, and it counts a session alive only from touches that
//! reached it. A client on a follower touches the session there with every request and ping;
//! the follower collects those touches and hands them to the leader only in its answer to the
//! leader's next ping (the leader pings each follower every half tick). A request the follower
//! forwards to the leader (a write, a `sync`) touches nothing there. So an answer that went
//! through the leader proves that the follower reached the leader, not that our latest touch
//! did: cut the follower off right after, and the leader expires the session from the touches
//! it had before.
//!
//! What does prove a touch at the leader is the order of the follower's one link to it. Say a
//! request or ping `R1`, sent at `s1`, was answered by the follower at `a1`: the follower
//! touched the session at some `t1` in `[s1, a1)`. Say a later request `R2`, sent at `s2`,
//! went through the leader and was answered. The follower forwarded `R2` at some `f2 >= s2`.
//! If the follower answered a ping of the leader between `t1` and `f2`, that answer carried
//! our touch and went out ahead of `R2` on the same link, and the leader applies a follower's
//! touches before it takes the follower's next request into its pipeline: the leader touched
//! the session after `t1 >= s1`, before it answered `R2`. It expires a session no earlier
//! than its last touch plus the timeout (rounded up to the next tick), so it cannot expire
//! ours before `s1 + timeout`. The leader pings every half tick, so with `s2 >= a1 + tick`
//! the interval `(t1, f2)` spans two ping periods, and a ping late by up to half a tick still
//! falls inside it.
//!
//! This rests on the leader pinging while it runs. A stalled leader (a long GC pause) pings
//! nobody: the follower keeps our touches, and a request forwarded meanwhile waits in the
//! leader's socket ahead of the ping reply the leader asks for when it resumes. So an answer
//! whose own wait (from its send, or from the answer before it if later: a session's answers
//! come in order) took longer than half a tick vouches for nothing, and neither does anything
//! sent before a tick after it came: the stall covered part of its trip.
//!
//! Hence the rule kept here, per connection: when an answer from the leader's side arrives,
//! after such a short wait, for something sent at `s2`, the bound may move to the send time of the
//! latest answered request or ping whose answer came at least a tick before `s2`. Two things
//! also anchor: the handshake (the leader creates or revalidates the session after we sent
//! it), and nothing from a read-only server (it has no leader).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Most touches kept per connection; the oldest go first (which only makes the bound
/// shorter).
const MOST: usize = 256;

/// A request that went through the leader, answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Through {
    pub sent: Instant,
    /// When its own wait began: its send, or the answer before it on the connection if that
    /// came later (a session's answers come in order, so it queued behind that one).
    pub waited_from: Instant,
    pub answered: Instant,
    /// The leader checked the session for it.
    pub checked: bool,
}

/// The answered requests and pings of one connection, as evidence of touches.
pub(crate) struct Touches {
    /// `(sent, answered)`, both increasing: a connection's answers come in order.
    seen: VecDeque<(Instant, Instant)>,
    /// How long the follower may hold a touch before the leader applies it: a tick.
    relay: Duration,
    /// When the latest answer through the leader that took longer than half a tick came: the
    /// leader may have stalled until then.
    stalled_until: Option<Instant>,
}

impl Touches {
    pub fn new(relay: Duration) -> Touches {
        Touches {
            seen: VecDeque::new(),
            relay,
            stalled_until: None,
        }
    }

    /// The server answered something sent at `sent`: it touched the session then or later.
    /// Touches closer together than an eighth of the relay time are thinned out (the bound
    /// loses at most that much).
    pub fn touched(&mut self, sent: Instant, answered: Instant) {
        if let Some(&(last, _)) = self.seen.back() {
            if sent < last + self.relay / 8 {
                return;
            }
        }
        if self.seen.len() == MOST {
            self.seen.pop_front();
        }
        self.seen.push_back((sent, answered));
    }

    /// Something went through the leader and was answered (see [`Through`]). Returns the send
    /// time of the latest touch the leader had certainly applied before it answered, if any.
    ///
    /// Nothing when its own wait took longer than half a tick: the leader (or our follower)
    /// stalled while the request was on its way, and a stalled leader pings nobody, so the
    /// follower may not have passed our touches on ahead of the request. Nor for anything
    /// sent before a tick after such a slow answer came (checked or not): the stall may have
    /// covered its whole wait, and the leader, on resuming, checks what waited in its socket
    /// before the follower's touches that follow it, and may expire the session right after.
    pub fn leader_answered(&mut self, r: Through) -> Option<Instant> {
        let (sent, answered) = (r.sent, r.answered);
        if answered > r.waited_from + self.relay / 2 {
            self.stalled_until = Some(answered);
            return None;
        }
        if !r.checked || self.stalled_until.is_some_and(|s| sent < s + self.relay) {
            return None;
        }
        let settled = |&(_, answered): &(Instant, Instant)| answered + self.relay <= sent;
        while self.seen.len() >= 2 && self.seen.get(1).is_some_and(settled) {
            self.seen.pop_front();
        }
        self.seen.front().filter(|t| settled(t)).map(|&(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    /// Touches from `t0` every 20 ms until `until_ms`, each answered 2 ms after it was sent.
    fn busy_until(t0: Instant, until_ms: u64) -> Touches {
        let mut touches = Touches::new(TICK);
        for ms in (0..=until_ms).step_by(20) {
            touches.touched(at(t0, ms), at(t0, ms + 2));
        }
        touches
    }

    /// Sent at `sent`, answered at `answered`, nothing queued before it, checked.
    fn through(sent: Instant, answered: Instant) -> Through {
        Through {
            sent,
            waited_from: sent,
            answered,
            checked: true,
        }
    }

    #[test]
    fn a_leader_answer_vouches_only_for_touches_a_tick_older_than_its_request() {
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        touches.touched(at(t0, 0), at(t0, 5));
        touches.touched(at(t0, 50), at(t0, 55));
        touches.touched(at(t0, 300), at(t0, 305));
        // Sent 60 ms after the last answer: nothing is a tick older.
        assert_eq!(
            touches.leader_answered(through(at(t0, 60), at(t0, 65))),
            None
        );
        // Sent at 160: the touch answered at 55 is settled, the one at 305 is not.
        assert_eq!(
            touches.leader_answered(through(at(t0, 160), at(t0, 165))),
            Some(at(t0, 50))
        );
        // Later, the newest settled one.
        assert_eq!(
            touches.leader_answered(through(at(t0, 405), at(t0, 410))),
            Some(at(t0, 300))
        );
        assert_eq!(
            touches.leader_answered(through(at(t0, 1000), at(t0, 1005))),
            Some(at(t0, 300))
        );
    }

    #[test]
    fn the_issue_19_idle_then_write_case_anchors_before_the_idle_time() {
        // Busy until 0, idle 800 ms, then one write at 800: the leader last had our touch from
        // the busy period, and so does the bound.
        let t0 = Instant::now();
        let mut touches = busy_until(t0, 400);
        assert_eq!(
            touches.leader_answered(through(at(t0, 1200), at(t0, 1205))),
            Some(at(t0, 400))
        );
    }

    #[test]
    fn a_slow_answer_vouches_for_nothing() {
        // The same touches; the write sent at 505 was answered 60 ms later, more than half a
        // tick: the leader stalled meanwhile, and may not have had the follower's touches.
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        touches.touched(at(t0, 0), at(t0, 5));
        touches.touched(at(t0, 300), at(t0, 305));
        assert_eq!(
            touches.leader_answered(through(at(t0, 405), at(t0, 450))),
            Some(at(t0, 300))
        );
        assert_eq!(
            touches.leader_answered(through(at(t0, 505), at(t0, 565))),
            None
        );
    }

    #[test]
    fn after_a_slow_answer_nothing_sent_before_a_tick_later_vouches() {
        // A heartbeat sent at 405 waited out a leader's stall and was answered at 1900; a
        // write sent at 1870, at the stall's end, was answered quickly after it. The leader
        // checked that write before it heard of any touch since the stall began.
        let t0 = Instant::now();
        let mut touches = busy_until(t0, 1800);
        assert_eq!(
            touches.leader_answered(through(at(t0, 405), at(t0, 1900))),
            None
        );
        assert_eq!(
            touches.leader_answered(through(at(t0, 1870), at(t0, 1905))),
            None
        );
        assert_eq!(
            touches.leader_answered(through(at(t0, 1999), at(t0, 2004))),
            None
        );
        // Sent a tick after the slow answer (exactly, or later): the resumed leader has
        // pinged meanwhile.
        assert_eq!(
            touches.leader_answered(through(at(t0, 2000), at(t0, 2005))),
            Some(at(t0, 1800))
        );
        assert_eq!(
            touches.leader_answered(through(at(t0, 2010), at(t0, 2020))),
            Some(at(t0, 1800))
        );
    }

    #[test]
    fn an_answer_queued_behind_ours_waited_only_from_the_one_before() {
        // Forty writes pipelined at 405: the last is answered at 600, 5 ms after the one
        // before it. Its own wait was 5 ms, not 195: the leader did not stall.
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        touches.touched(at(t0, 0), at(t0, 5));
        touches.touched(at(t0, 300), at(t0, 305));
        let queued = Through {
            sent: at(t0, 405),
            waited_from: at(t0, 595),
            answered: at(t0, 600),
            checked: true,
        };
        assert_eq!(touches.leader_answered(queued), Some(at(t0, 300)));
    }

    #[test]
    fn close_touches_are_thinned_and_the_list_stays_bounded() {
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        for us in 0..100_000u64 {
            let s = t0 + Duration::from_micros(us * 50);
            touches.touched(s, s + Duration::from_micros(10));
        }
        assert!(touches.seen.len() <= MOST);
        let last = touches.seen.back().map(|&(s, _)| s).unwrap();
        assert!(last + TICK / 8 > t0 + Duration::from_micros(99_999 * 50));
    }

    #[test]
    fn touches_an_eighth_of_a_tick_apart_are_all_kept_and_closer_ones_are_not() {
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        let eighth = TICK / 8;
        // Exactly an eighth apart: each kept.
        for k in 0..4u32 {
            touches.touched(t0 + eighth * k, t0 + eighth * k + Duration::from_micros(10));
        }
        assert_eq!(touches.seen.len(), 4);
        // Closer than that to the last kept one: thinned out.
        let last = t0 + eighth * 3;
        touches.touched(last + eighth / 2, last + eighth);
        touches.touched(last + eighth - Duration::from_nanos(1), last + eighth);
        assert_eq!(touches.seen.len(), 4);
    }

    #[test]
    fn an_answer_that_waited_exactly_half_a_tick_still_vouches() {
        // The stall rule counts waits longer than half a tick; one of exactly that is not.
        let t0 = Instant::now();
        let mut touches = Touches::new(TICK);
        touches.touched(at(t0, 0), at(t0, 5));
        touches.touched(at(t0, 300), at(t0, 305));
        assert_eq!(
            touches.leader_answered(through(at(t0, 405), at(t0, 455))),
            Some(at(t0, 300))
        );
        assert_eq!(touches.stalled_until, None);
    }
}
