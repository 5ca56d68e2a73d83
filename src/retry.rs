//! When to retry an operation that failed with connection loss, and how long to wait first.

use std::time::Duration;

/// Exponential backoff with a cap, bounded by a number of retries and by total elapsed time.
///
/// The n-th retry (n starting at 0) waits `base * 2^n`, capped at `max_sleep` (with jitter:
/// between half of that and all of it), then the next connection; no retry starts once
/// `max_retries` have been made or `max_elapsed` has passed since the first attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// First backoff.
    pub base: Duration,
    /// Largest backoff.
    pub max_sleep: Duration,
    /// Most retries after the first attempt.
    pub max_retries: u32,
    /// Give up once this much time has passed since the first attempt.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(50),
            max_sleep: Duration::from_secs(2),
            max_retries: 10,
            max_elapsed: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..Default::default()
        }
    }

    /// Backoffs from `base`, doubling up to `max_sleep`; the default count and time limits
    /// (set them with [`max_retries`](Self::max_retries) and
    /// [`max_elapsed`](Self::max_elapsed)). The policy is `#[non_exhaustive]`, so that a
    /// setting can be added without breaking anyone: build it from here or from
    /// [`Default`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use zk_recipes::RetryPolicy;
    ///
    /// let policy = RetryPolicy::exponential(Duration::from_millis(20), Duration::from_secs(1))
    ///     .max_retries(5)
    ///     .max_elapsed(Duration::from_secs(30));
    /// assert_eq!(policy.backoff(1, Duration::ZERO), Some(Duration::from_millis(40)));
    /// assert_eq!(policy.backoff(5, Duration::ZERO), None);
    /// ```
    pub fn exponential(base: Duration, max_sleep: Duration) -> Self {
        RetryPolicy {
            base,
            max_sleep,
            ..Default::default()
        }
    }

    /// The same policy with at most `n` retries after the first attempt.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The same policy, giving up once `d` has passed since the first attempt.
    pub fn max_elapsed(mut self, d: Duration) -> Self {
        self.max_elapsed = d;
        self
    }

    /// The backoff before retry number `retry` (0-based), or `None` if no retry is allowed
    /// after `elapsed` since the first attempt.
    pub fn backoff(&self, retry: u32, elapsed: Duration) -> Option<Duration> {
        if retry >= self.max_retries || elapsed >= self.max_elapsed {
            return None;
        }
        let factor = 1u32.checked_shl(retry.min(20)).unwrap_or(u32::MAX);
        Some(self.base.saturating_mul(factor).min(self.max_sleep))
    }
}

/// `d` with jitter: somewhere between half of it and all of it, so that clients that lost
/// their connection together do not come back together.
pub(crate) fn jitter(d: Duration) -> Duration {
    d / 2 + (d / 2).mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_keeps_between_half_and_all() {
        let d = Duration::from_millis(400);
        for _ in 0..1000 {
            let j = jitter(d);
            assert!(j >= d / 2 && j <= d, "{j:?}");
        }
    }

    #[test]
    fn doubles_up_to_the_cap_and_stops() {
        let p = RetryPolicy {
            base: Duration::from_millis(10),
            max_sleep: Duration::from_millis(50),
            max_retries: 4,
            max_elapsed: Duration::from_secs(1),
        };
        let got: Vec<_> = (0..5).map(|n| p.backoff(n, Duration::ZERO)).collect();
        assert_eq!(
            got,
            vec![
                Some(Duration::from_millis(10)),
                Some(Duration::from_millis(20)),
                Some(Duration::from_millis(40)),
                Some(Duration::from_millis(50)),
                None
            ]
        );
        assert_eq!(p.backoff(0, Duration::from_secs(1)), None);
        assert_eq!(RetryPolicy::never().backoff(0, Duration::ZERO), None);
        assert!(p.backoff(31, Duration::ZERO).is_none());
        let long = RetryPolicy {
            max_retries: 100,
            ..p
        };
        assert_eq!(
            long.backoff(64, Duration::ZERO),
            Some(Duration::from_millis(50))
        );
    }
}
