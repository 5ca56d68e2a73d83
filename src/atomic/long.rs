//! A counter changed by compare-and-set, with a lock to fall back on (Curator's
//! `DistributedAtomicLong`).

use std::thread;
use std::time::{Duration, Instant};

use crate::lock::InterProcessMutex;
use crate::{Client, Error, Result, RetryPolicy, Stat, ZkCode};

/// Curator's `PromotedToLock`: after the optimistic tries fail, take a mutex at `lock_path`
/// and try again while holding it (still by compare-and-set, so processes that do not take
/// the lock cannot be overwritten).
#[derive(Debug, Clone)]
pub struct PromotedToLock {
    lock_path: String,
    retry: RetryPolicy,
    timeout: Option<Duration>,
}

impl PromotedToLock {
    /// Promotion to an [`InterProcessMutex`] at `lock_path` (Curator's node layout), waiting
    /// for it without a bound and trying once under it.
    pub fn new(lock_path: &str) -> PromotedToLock {
        PromotedToLock {
            lock_path: lock_path.to_owned(),
            retry: RetryPolicy::never(),
            timeout: None,
        }
    }

    /// Waits at most `timeout` for the lock (the change fails if it is not taken by then).
    pub fn timeout(mut self, timeout: Duration) -> PromotedToLock {
        self.timeout = Some(timeout);
        self
    }

    /// Tries again under the lock as `retry` allows (the default: once).
    pub fn retry(mut self, retry: RetryPolicy) -> PromotedToLock {
        self.retry = retry;
        self
    }
}

/// How a change went: Curator's `AtomicValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AtomicValue {
    /// True if the change was made. False if every try met a newer value (the value then is
    /// unchanged by this call).
    pub succeeded: bool,
    /// The value the last try read (0 if the node was missing).
    pub pre_value: i64,
    /// The value written if the change was made; otherwise 0, as in Curator.
    pub post_value: i64,
    /// What the change took.
    pub stats: AtomicStats,
}

/// The tries and time a change took (Curator's `AtomicStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AtomicStats {
    /// Optimistic tries.
    pub optimistic_tries: u32,
    /// Tries under the promoted lock.
    pub promoted_lock_tries: u32,
    /// Time spent on the optimistic tries.
    pub optimistic_time: Duration,
    /// Time spent on the lock (its wait included) and the tries under it.
    pub promoted_time: Duration,
}

/// One try's outcome.
enum Try {
    Done(i64),
    /// Someone changed the node between our read and our write.
    Raced,
}

/// A 64-bit counter at one node, changed by compare-and-set: each change reads the value and
/// writes the new one at the version it read, trying again (as its [`RetryPolicy`] allows)
/// when another change came between, and, with [`PromotedToLock`], once more under a lock.
/// Apache Curator's `DistributedAtomicLong`, on the same node (8 bytes, big-endian; a missing
/// node or empty data reads as 0), so a Curator process and ours can count together.
///
/// Every change reported as made is one conditional write on the value it read, so two made
/// increments never return the same value. A write whose answer is lost is not sent again
/// (Curator's retry can apply such a change twice and report it failed): it returns
/// [`Error::OutcomeUnknown`], meaning it may have been applied, once. Any other error means
/// the call changed nothing.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use zk_recipes::atomic::DistributedAtomicLong;
/// use zk_recipes::{Client, RetryPolicy};
/// use std::time::Duration;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let runs = DistributedAtomicLong::new(
///     &client,
///     "/jobs/nightly/runs",
///     RetryPolicy::exponential(Duration::from_millis(5), Duration::from_millis(200)).max_retries(10),
/// )?;
/// let change = runs.increment()?;
/// if change.succeeded {
///     println!("this is run {}", change.post_value);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DistributedAtomicLong {
    client: Client,
    path: String,
    retry: RetryPolicy,
    promoted: Option<(PromotedToLock, InterProcessMutex)>,
}

/// The bytes of `value` as Curator keeps them.
fn encode(value: i64) -> [u8; 8] {
    value.to_be_bytes()
}

/// The value in `bytes`: 0 for none, the first 8 otherwise (Curator ignores the rest too).
fn decode(path: &str, bytes: &[u8]) -> Result<i64> {
    if bytes.is_empty() {
        return Ok(0);
    }
    bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .ok_or_else(|| Error::Malformed {
            path: path.into(),
            what: format!("a long takes 8 bytes, found {}", bytes.len()),
        })
}

impl DistributedAtomicLong {
    /// A counter at `path`, its optimistic tries governed by `retry` (the first try is
    /// always made; [`RetryPolicy::never`] makes only that one).
    pub fn new(client: &Client, path: &str, retry: RetryPolicy) -> Result<DistributedAtomicLong> {
        crate::paths::validate(path, false)?;
        Ok(DistributedAtomicLong {
            client: client.clone(),
            path: path.to_owned(),
            retry,
            promoted: None,
        })
    }

    /// Falls back on a lock after the optimistic tries (see [`PromotedToLock`]).
    ///
    /// # Errors
    /// `InvalidPath` for a bad lock path.
    pub fn with_promotion(mut self, promoted: PromotedToLock) -> Result<DistributedAtomicLong> {
        let mutex = InterProcessMutex::new(&self.client, &promoted.lock_path)?;
        self.promoted = Some((promoted, mutex));
        Ok(self)
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The value now (0 if the node is missing); `succeeded` is always true.
    ///
    /// # Errors
    /// `Malformed` if the node holds 1 to 7 bytes; what the read meets.
    pub fn get(&self) -> Result<AtomicValue> {
        let value = self.read()?.map_or(Ok(0), |(v, _)| Ok::<_, Error>(v))?;
        Ok(AtomicValue {
            succeeded: true,
            pre_value: value,
            post_value: value,
            stats: AtomicStats::default(),
        })
    }

    /// Adds 1.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn increment(&self) -> Result<AtomicValue> {
        self.add(1)
    }

    /// Subtracts 1.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn decrement(&self) -> Result<AtomicValue> {
        self.add(-1)
    }

    /// Subtracts `delta` (wrapping, as Curator's does).
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn subtract(&self, delta: i64) -> Result<AtomicValue> {
        self.add(delta.wrapping_neg())
    }

    /// Adds `delta` (wrapping on overflow, as Curator's does).
    ///
    /// # Errors
    /// `OutcomeUnknown` if a write's answer was lost (it may have been applied, once); any
    /// other error means nothing was changed: `Malformed`
    /// if the node holds 1 to 7 bytes; what a call meets otherwise (`NoAuth`, `Timeout`...).
    pub fn add(&self, delta: i64) -> Result<AtomicValue> {
        self.change(|value| value.wrapping_add(delta))
    }

    /// Sets `value`, by compare-and-set on whatever value is there (tried again as the policy
    /// allows, as a change is).
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn try_set(&self, value: i64) -> Result<AtomicValue> {
        self.change(|_| value)
    }

    /// Sets `new` if the value is `expected` now: one try. Values are compared, not bytes: a
    /// missing node, or one with empty data, holds 0, and a node of more than 8 bytes holds
    /// its first 8 (Curator compares bytes and never matches those).
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn compare_and_set(&self, expected: i64, new: i64) -> Result<AtomicValue> {
        let start = Instant::now();
        let read = self.read()?;
        let pre = read.as_ref().map_or(0, |(v, _)| *v);
        let mut done = AtomicValue {
            succeeded: false,
            pre_value: pre,
            post_value: 0,
            stats: AtomicStats {
                optimistic_tries: 1,
                ..AtomicStats::default()
            },
        };
        if pre == expected {
            if let Try::Done(post) = self.write(read.map(|(_, stat)| stat), new)? {
                done.succeeded = true;
                done.post_value = post;
            }
        }
        done.stats.optimistic_time = start.elapsed();
        Ok(done)
    }

    /// Sets `value` whatever is there: a write without a version, or a create if the node is
    /// missing.
    ///
    /// # Errors
    /// What the calls meet.
    pub fn force_set(&self, value: i64) -> Result<()> {
        loop {
            match self.client.set_data(&self.path, &encode(value), None) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_no_node() => {}
                Err(e) => return Err(e),
            }
            match self.create(value) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_node_exists() => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes the node with `value` if it is missing: true if this call made it.
    ///
    /// # Errors
    /// What the create meets.
    pub fn initialize(&self, value: i64) -> Result<bool> {
        match self.create(value) {
            Ok(()) => Ok(true),
            Err(e) if e.is_node_exists() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A change: optimistic tries as the policy allows, then (with promotion) tries under
    /// the lock.
    fn change(&self, make: impl Fn(i64) -> i64) -> Result<AtomicValue> {
        let mut done = AtomicValue {
            succeeded: false,
            pre_value: 0,
            post_value: 0,
            stats: AtomicStats::default(),
        };
        let start = Instant::now();
        let made = self.tries(&self.retry, &make, &mut done, |s| &mut s.optimistic_tries)?;
        done.stats.optimistic_time = start.elapsed();
        if made {
            return Ok(done);
        }
        let Some((promoted, mutex)) = &self.promoted else {
            return Ok(done);
        };
        let start = Instant::now();
        let guard = match promoted.timeout {
            Some(timeout) => mutex.try_acquire_for(timeout)?,
            None => Some(mutex.acquire()?),
        };
        if let Some(guard) = guard {
            let tried = self.tries(&promoted.retry, &make, &mut done, |s| {
                &mut s.promoted_lock_tries
            });
            if let Err(e) = guard.release() {
                log::debug!("{}: releasing the promoted lock: {e}", self.path);
            }
            tried?;
        }
        done.stats.promoted_time = start.elapsed();
        Ok(done)
    }

    /// Tries `make` on the value read, again after each race as `retry` allows: true once a
    /// try made its change.
    fn tries(
        &self,
        retry: &RetryPolicy,
        make: &impl Fn(i64) -> i64,
        done: &mut AtomicValue,
        count: impl Fn(&mut AtomicStats) -> &mut u32,
    ) -> Result<bool> {
        let start = Instant::now();
        let mut retries = 0;
        loop {
            *count(&mut done.stats) += 1;
            let read = self.read()?;
            done.pre_value = read.as_ref().map_or(0, |(v, _)| *v);
            let new = make(done.pre_value);
            if let Try::Done(post) = self.write(read.map(|(_, stat)| stat), new)? {
                done.succeeded = true;
                done.post_value = post;
                return Ok(true);
            }
            let Some(backoff) = retry.backoff(retries, start.elapsed()) else {
                return Ok(false);
            };
            retries += 1;
            // A backoff between optimistic tries, as the caller's policy asks: it spreads
            // the contenders out.
            thread::sleep(backoff);
        }
    }

    /// The value and its node's stat; `None` if the node is missing.
    fn read(&self) -> Result<Option<(i64, Stat)>> {
        match self.client.data(&self.path) {
            Ok((data, stat)) => Ok(Some((decode(&self.path, &data)?, stat))),
            Err(e) if e.is_no_node() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `new` over what was read: at the version read, or as a create if the node was
    /// missing. `Raced` if someone changed the node meanwhile.
    fn write(&self, read: Option<Stat>, new: i64) -> Result<Try> {
        let written = match read {
            Some(stat) => self
                .client
                .set_data(&self.path, &encode(new), Some(stat.version))
                .map(|_| ()),
            None => self.create(new),
        };
        match written {
            Ok(()) => Ok(Try::Done(new)),
            Err(e) if e.is_node_exists() || e.is_no_node() || e.is_code(ZkCode::BadVersion) => {
                Ok(Try::Raced)
            }
            Err(e) => Err(e.unknown_if_lost(&self.path)),
        }
    }

    /// Makes the node with `value` (its parents as containers), sending the create once: a
    /// retry could meet our own node and take it for another's change.
    fn create(&self, value: i64) -> Result<()> {
        self.client
            .create_once_under_containers(&self.path, &encode(value))
    }
}
