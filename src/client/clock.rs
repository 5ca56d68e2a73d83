//! The clock the lease bound is kept on: one that also counts the time the machine spent
//! suspended.
//!
//! `Instant` reads `CLOCK_MONOTONIC` on Linux, which stops while the machine is suspended (a
//! laptop's lid closed, a virtual machine frozen by its host) and does not count that time once
//! it resumes. The servers' clocks do count it. A bound kept on `Instant` alone would, after a
//! resume, still vouch for a session the leader expired while this machine slept. Linux's
//! `CLOCK_BOOTTIME` is `CLOCK_MONOTONIC` plus the time spent suspended.
//!
//! So the readings the bound is made of (the send and answer times in `touches`, the anchor
//! kept as `leader_saw`) are taken on the *lease clock*: an `Instant` moved forward by the time
//! spent suspended since this process first looked ([`lease_time`]). Their differences count
//! suspended time, as the servers' do. A bound goes back to an ordinary `Instant` for its users
//! by taking off the time spent suspended by then ([`to_instant`]): a suspend after the anchor
//! brings every bound that rests on it closer by as much.
//!
//! A reading must be moved onto the lease clock when it is taken, never later: a suspend
//! between the two would be counted as if it came before the reading, and the bound would
//! overstate by its length.
//!
//! Elsewhere than Linux the suspended time reads zero (the lease clock is `Instant`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// A testing seam: time added to `CLOCK_BOOTTIME`'s readings (and not `CLOCK_MONOTONIC`'s),
/// as a suspend of the machine that long would.
static SUSPENDED_BY_TESTS: AtomicU64 = AtomicU64::new(0);

fn suspended_by_tests() -> Duration {
    Duration::from_nanos(SUSPENDED_BY_TESTS.load(Ordering::SeqCst))
}

/// A bracket this narrow is taken at once; otherwise the narrowest of `READINGS`.
const TIGHT: Duration = Duration::from_micros(20);
/// How many brackets a reading may take to find a tight one.
const READINGS: usize = 8;

/// A testing seam: a stall inside the next bracket (between its MONOTONIC reading and its
/// second BOOTTIME reading), as a preemption or a `SIGSTOP` there would make.
#[cfg(test)]
static STALL_INSIDE_NEXT_BRACKET: Mutex<Option<Duration>> = Mutex::new(None);

/// `CLOCK_BOOTTIME` − `CLOCK_MONOTONIC` now, the time the machine has spent suspended since it
/// booted, bracketed: `(lo, hi)` with `lo <= true <= hi`. The two clocks cannot be read at one
/// instant, and a preemption between two readings would add its length to a plain difference:
/// BOOTTIME read before and after MONOTONIC brackets the offset at the MONOTONIC reading.
///
/// A bracket stretched by a stall inside it (a preemption, the process stopped) is still a
/// bracket, but its high end overstates the offset by the stall, and the high end kept is the
/// highest seen (see [`suspended`]): every bound read after it would come that much early, for
/// the rest of the process. So a wide bracket is read again, and the narrowest of a few is
/// taken: a stall lands in one bracket, not in several in a row.
fn suspended_since_boot() -> (Duration, Duration) {
    let mut best = bracket();
    for _ in 1..READINGS {
        if best.1.saturating_sub(best.0) <= TIGHT {
            break;
        }
        let next = bracket();
        if next.1.saturating_sub(next.0) < best.1.saturating_sub(best.0) {
            best = next;
        }
    }
    best
}

/// One bracket of the offset (see [`suspended_since_boot`]).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn bracket() -> (Duration, Duration) {
    use rustix::time::{clock_gettime, ClockId};
    let to = |t: rustix::time::Timespec| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    };
    let before = to(clock_gettime(ClockId::Boottime)) + suspended_by_tests();
    let monotonic = to(clock_gettime(ClockId::Monotonic));
    #[cfg(test)]
    {
        // Taken first: the seam's lock is not held through the stall.
        let stall = STALL_INSIDE_NEXT_BRACKET.lock().take();
        if let Some(stall) = stall {
            std::thread::sleep(stall);
        }
    }
    let after = to(clock_gettime(ClockId::Boottime)) + suspended_by_tests();
    (
        before.saturating_sub(monotonic),
        after.saturating_sub(monotonic),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn bracket() -> (Duration, Duration) {
    (suspended_by_tests(), suspended_by_tests())
}

/// The time this machine spent suspended since the process first asked, bracketed as
/// [`suspended_since_boot`] is. Each end kept is the highest seen: a reading's low end is at
/// most the offset at its time and the offset never falls, so the highest low end is still a
/// low end (sends read it); this reading's high end is at least the offset now, so the highest
/// high end is one too (bounds are read through it). Neither end ever falls, so a bound never
/// moves later without new evidence; a preemption inside a reading only shortens the bounds
/// read after it.
fn suspended() -> (Duration, Duration) {
    static BASE: OnceLock<Duration> = OnceLock::new();
    static KEPT: Mutex<Option<(Duration, Duration)>> = Mutex::new(None);
    let (lo, hi) = suspended_since_boot();
    let base = *BASE.get_or_init(|| lo);
    let (lo, hi) = {
        let mut kept = KEPT.lock();
        let (klo, khi) = kept.unwrap_or((lo, hi));
        let now = (klo.max(lo), khi.max(hi));
        *kept = Some(now);
        now
    };
    (lo.saturating_sub(base), hi.saturating_sub(base))
}

/// `at`, a reading of `Instant` taken just now, on the lease clock. The suspended time's lower
/// estimate: a reading moved too late would let a bound resting on it overstate.
pub(crate) fn lease_time(at: Instant) -> Instant {
    at + suspended().0
}

/// Now, on the lease clock.
pub(crate) fn lease_now() -> Instant {
    lease_time(Instant::now())
}

/// A lease-clock instant as the `Instant` it falls on now (earlier by the time spent suspended
/// so far, its upper estimate: reading noise only shortens a bound); `None` if that is before
/// `Instant`'s range.
pub(crate) fn to_instant(at: Instant) -> Option<Instant> {
    at.checked_sub(suspended().1)
}

/// Moves the lease clock forward by `by`, as a suspend of the machine that long would: from
/// now on, `CLOCK_BOOTTIME` reads `by` later and `CLOCK_MONOTONIC` does not (process-wide, for
/// every client). Only for tests of what a suspend does to leases.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn testing_suspend(by: Duration) {
    let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
    SUSPENDED_BY_TESTS.fetch_add(nanos, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_that_never_slept_keeps_lease_time_on_instant() {
        // Neither this process nor its tests suspended the clock here (the seam is only
        // used by the integration test of its own binary).
        let at = Instant::now();
        let lease = lease_time(at);
        assert!(lease >= at);
        assert!(lease - at < Duration::from_millis(50), "{:?}", lease - at);
        assert_eq!(to_instant(lease).map(|i| i <= lease), Some(true));
    }

    #[test]
    fn a_stall_inside_a_reading_does_not_shorten_every_later_bound() {
        let (_, hi) = suspended();
        *STALL_INSIDE_NEXT_BRACKET.lock() = Some(Duration::from_millis(50));
        let (_, stalled) = suspended();
        let (_, after) = suspended();
        assert!(
            STALL_INSIDE_NEXT_BRACKET.lock().is_none(),
            "the stall was not taken"
        );
        // The kept high end may rise by a narrow bracket's width, never by the stall.
        for h in [stalled, after] {
            assert!(
                h.saturating_sub(hi) < Duration::from_millis(5),
                "a 50 ms stall inside a reading moved the high end by {:?}",
                h - hi
            );
        }
    }

    #[test]
    fn neither_end_of_the_suspended_time_ever_falls() {
        // Each raw reading's bracket moves with its own preemptions; the kept ends may only
        // rise, so no bound read through them moves later without new evidence. (Kept
        // process-wide: this binary's other tests only raise them further.)
        let (mut lo, mut hi) = suspended();
        for _ in 0..20_000 {
            let (l, h) = suspended();
            assert!(l >= lo, "the low end went down: {lo:?} then {l:?}");
            assert!(h >= hi, "the high end went down: {hi:?} then {h:?}");
            assert!(l <= h, "inverted bracket ({l:?}, {h:?})");
            (lo, hi) = (l, h);
        }
    }
}
