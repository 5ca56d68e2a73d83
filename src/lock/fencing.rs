//! A gate a protected resource puts in front of its writes, so that a holder that was paused
//! past its lease (a "zombie") cannot write after another holder took over.

use std::fmt;

use parking_lot::Mutex;

/// A write was refused because a newer holder has written already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleToken {
    /// The token the write came with.
    pub token: i64,
    /// The largest token seen so far.
    pub highest: i64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fencing token {} is older than {}: a newer lock holder has written since",
            self.token, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

/// Accepts a write only with a fencing token at least as large as every token seen before.
///
/// For exclusive holders (mutexes, write locks, semaphores of one lease, leaders): their
/// tokens grow with each new holder. Readers of a read/write lock share the lock, and a reader
/// queued behind a downgraded write carries a newer token than the downgraded holder: do not
/// put readers' writes through the same gate as the writers'.
///
/// ```
/// use zk_recipes::lock::FencingGate;
/// let gate = FencingGate::new();
/// assert!(gate.admit(7).is_ok());
/// assert!(gate.admit(9).is_ok());
/// assert!(gate.admit(7).is_err()); // the holder with token 7 lost the lock to 9
/// ```
#[derive(Debug, Default)]
pub struct FencingGate {
    highest: Mutex<Option<i64>>,
}

impl FencingGate {
    /// A gate that has seen no token yet.
    pub fn new() -> FencingGate {
        FencingGate::default()
    }

    /// Admits a write with `token`, or refuses it if a larger token was admitted before.
    pub fn admit(&self, token: i64) -> Result<(), StaleToken> {
        Self::admit_locked(&mut self.highest.lock(), token)
    }

    /// The rule, under the gate's lock: `token` goes if no larger one went before, and is
    /// then the largest.
    fn admit_locked(highest: &mut Option<i64>, token: i64) -> Result<(), StaleToken> {
        match *highest {
            Some(h) if token < h => Err(StaleToken { token, highest: h }),
            _ => {
                *highest = Some(token);
                Ok(())
            }
        }
    }

    /// Runs `write` only if `token` is admitted; the check and the write happen under one lock,
    /// so no newer holder can slip in between.
    pub fn write<T>(&self, token: i64, write: impl FnOnce() -> T) -> Result<T, StaleToken> {
        let mut highest = self.highest.lock();
        Self::admit_locked(&mut highest, token)?;
        Ok(write())
    }

    /// The largest token admitted so far.
    pub fn highest(&self) -> Option<i64> {
        *self.highest.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_admits_equal_and_larger_tokens_and_refuses_smaller_ones_saying_which() {
        let gate = FencingGate::new();
        assert_eq!(gate.highest(), None);
        assert_eq!(gate.admit(7), Ok(()));
        // The same holder writes again with its token.
        assert_eq!(gate.admit(7), Ok(()));
        assert_eq!(gate.admit(9), Ok(()));
        assert_eq!(gate.highest(), Some(9));
        assert_eq!(
            gate.admit(8),
            Err(StaleToken {
                token: 8,
                highest: 9
            })
        );
        // A refusal changes nothing.
        assert_eq!(gate.highest(), Some(9));
        assert_eq!(gate.admit(9), Ok(()));
    }

    #[test]
    fn a_gated_write_runs_only_when_its_token_is_admitted_and_moves_the_gate() {
        let gate = FencingGate::new();
        let mut ran = Vec::new();
        assert_eq!(gate.write(5, || ran.push(5)), Ok(()));
        assert_eq!(gate.write(5, || ran.push(55)), Ok(()));
        assert_eq!(gate.write(6, || 66), Ok(66));
        assert_eq!(gate.highest(), Some(6));
        let refused = gate.write(5, || ran.push(0));
        assert_eq!(
            refused,
            Err(StaleToken {
                token: 5,
                highest: 6
            })
        );
        assert_eq!(ran, vec![5, 55]);
        // A write and an admit share the gate.
        assert!(gate.admit(5).is_err());
        assert_eq!(
            gate.write(-1, || ()),
            Err(StaleToken {
                token: -1,
                highest: 6
            })
        );
    }

    #[test]
    fn a_stale_token_says_which_token_lost_to_which() {
        let e = StaleToken {
            token: 3,
            highest: 4,
        };
        assert_eq!(
            e.to_string(),
            "fencing token 3 is older than 4: a newer lock holder has written since"
        );
    }
}
