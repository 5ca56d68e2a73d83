//! A shared `i32` on [`SharedValue`] (Curator's `SharedCount`).

use std::time::Duration;

use super::value::{SharedValue, VersionedValue};
use crate::{Client, Error, Result};

/// A count every process reads from memory and sets with a compare-and-set: a
/// [`SharedValue`] holding a 32-bit signed integer, 4 bytes big-endian, as Apache Curator's
/// `SharedCount` keeps it (so both can share one count). What it shows never goes back, as
/// for the value.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use zk_recipes::shared::SharedCount;
/// use zk_recipes::Client;
///
/// let client = Client::builder("127.0.0.1:2181").connect()?;
/// let workers = SharedCount::new(&client, "/jobs/nightly/workers", 4)?;
/// workers.start()?;
/// // Raise it by one, whatever others do meanwhile.
/// loop {
///     let seen = workers.versioned_count()?;
///     if workers.try_set_count(&seen, seen.value + 1)? {
///         break;
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SharedCount {
    value: SharedValue,
}

/// The bytes of `count` as Curator keeps them.
pub(crate) fn encode(count: i32) -> [u8; 4] {
    count.to_be_bytes()
}

/// The count in `bytes` (its first 4; Curator ignores the rest too).
fn decode(path: &str, bytes: &[u8]) -> Result<i32> {
    bytes
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_be_bytes)
        .ok_or_else(|| Error::Malformed {
            path: path.into(),
            what: format!("a count takes 4 bytes, found {}", bytes.len()),
        })
}

impl SharedCount {
    /// A count at `path`; `seed` is written by [`start`](Self::start) if the node is missing.
    pub fn new(client: &Client, path: &str, seed: i32) -> Result<SharedCount> {
        Ok(SharedCount {
            value: SharedValue::new(client, path, &encode(seed))?,
        })
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        self.value.path()
    }

    /// Makes the node with the seed if it is missing, reads it and starts following it (see
    /// [`SharedValue::start`]).
    ///
    /// # Errors
    /// As [`SharedValue::start`].
    pub fn start(&self) -> Result<()> {
        self.value.start()
    }

    /// The count as last seen.
    ///
    /// # Errors
    /// `Malformed` if the node holds fewer than 4 bytes.
    pub fn count(&self) -> Result<i32> {
        Ok(self.versioned_count()?.value)
    }

    /// The count as last seen, with what [`try_set_count`](Self::try_set_count) takes.
    ///
    /// # Errors
    /// `Malformed` if the node holds fewer than 4 bytes.
    pub fn versioned_count(&self) -> Result<VersionedValue<i32>> {
        let v = self.value.versioned_value();
        Ok(VersionedValue {
            value: decode(self.path(), &v.value)?,
            version: v.version,
            zxid: v.zxid,
        })
    }

    /// Calls `listener` with each newer count seen (see [`SharedValue::add_listener`]); a
    /// value that is not a count is skipped.
    pub fn add_listener(&self, listener: impl Fn(&VersionedValue<i32>) + Send + Sync + 'static) {
        let path = self.path().to_owned();
        self.value
            .add_listener(move |v| match decode(&path, &v.value) {
                Ok(count) => listener(&VersionedValue {
                    value: count,
                    version: v.version,
                    zxid: v.zxid,
                }),
                Err(e) => log::warn!("{e}"),
            });
    }

    /// See [`SharedValue::is_current`].
    pub fn is_current(&self) -> bool {
        self.value.is_current()
    }

    /// See [`SharedValue::wait_current`].
    pub fn wait_current(&self, timeout: Duration) -> bool {
        self.value.wait_current(timeout)
    }

    /// Sets the count whatever it is (see [`SharedValue::set_value`]).
    ///
    /// # Errors
    /// As [`SharedValue::set_value`].
    pub fn set_count(&self, count: i32) -> Result<()> {
        self.value.set_value(&encode(count))
    }

    /// Sets the count only if it has not changed since `previous` was read (see
    /// [`SharedValue::try_set_value`]).
    ///
    /// # Errors
    /// As [`SharedValue::try_set_value`].
    pub fn try_set_count(&self, previous: &VersionedValue<i32>, count: i32) -> Result<bool> {
        let previous = VersionedValue {
            value: encode(previous.value).to_vec(),
            version: previous.version,
            zxid: previous.zxid,
        };
        self.value.try_set_value(&previous, &encode(count))
    }

    /// Stops following the count (see [`SharedValue::close`]).
    pub fn close(&self) {
        self.value.close();
    }
}
