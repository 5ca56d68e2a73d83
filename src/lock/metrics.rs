//! Per-lock figures a service can export, with no metrics dependency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A count and a total duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timing {
    /// How many.
    pub count: u64,
    /// Their total duration.
    pub total: Duration,
}

impl Timing {
    /// The mean, or zero when there is none.
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            Duration::ZERO
        } else {
            self.total / self.count.min(u32::MAX as u64) as u32
        }
    }
}

/// A snapshot of one lock's figures since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockMetrics {
    /// Successful acquisitions (re-entries not counted).
    pub acquisitions: u64,
    /// Attempts that gave up at their deadline (or found the lock busy with `try_acquire`).
    pub timeouts: u64,
    /// Holds and waits that ended because the session was lost.
    pub losses: u64,
    /// Time from asking to holding, for successful acquisitions.
    pub wait: Timing,
    /// Time from holding to release.
    pub hold: Timing,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquisitions: AtomicU64,
    timeouts: AtomicU64,
    losses: AtomicU64,
    wait_count: AtomicU64,
    wait_nanos: AtomicU64,
    hold_count: AtomicU64,
    hold_nanos: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl Counters {
    pub fn acquired(&self, waited: Duration) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.wait_count.fetch_add(1, Ordering::Relaxed);
        self.wait_nanos.fetch_add(nanos(waited), Ordering::Relaxed);
    }

    pub fn timed_out(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn lost(&self) {
        self.losses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn released(&self, held: Duration) {
        self.hold_count.fetch_add(1, Ordering::Relaxed);
        self.hold_nanos.fetch_add(nanos(held), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LockMetrics {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LockMetrics {
            acquisitions: l(&self.acquisitions),
            timeouts: l(&self.timeouts),
            losses: l(&self.losses),
            wait: Timing {
                count: l(&self.wait_count),
                total: Duration::from_nanos(l(&self.wait_nanos)),
            },
            hold: Timing {
                count: l(&self.hold_count),
                total: Duration::from_nanos(l(&self.hold_nanos)),
            },
        }
    }
}
