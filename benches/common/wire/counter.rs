//! The wire floor for a counter (issue 38): an increment with nothing spare, a `getData` and a
//! `setData` at the version read (8 bytes, big-endian, as ours and Curator's), again at once on
//! a race, in pre-encoded frames on a blocking socket.

use std::io;
use std::time::Duration;

use super::super::figures::Figures;
use super::{get_i32, put_i32, put_str, Wire, GET_DATA};

const SET_DATA: i32 = 5;

impl Wire {
    /// One increment of the counter at `path` (which must exist): true if made, false if the
    /// write met a newer version.
    fn increment(&mut self, path: &str) -> io::Result<bool> {
        let get = self.request(GET_DATA, |b| {
            put_str(b, path);
            b.push(0);
        });
        self.send(&get)?;
        if self.answer()? != 0 {
            return Err(io::Error::other("getData failed"));
        }
        // Reply header (16 bytes), the data (length, bytes), then the stat, whose data version
        // follows four longs.
        let len = get_i32(&self.frame, 16).max(0) as usize;
        let value = if len >= 8 {
            let mut v = [0u8; 8];
            v.copy_from_slice(&self.frame[20..28]);
            i64::from_be_bytes(v)
        } else {
            0
        };
        let version = get_i32(&self.frame, 20 + len + 32);
        let set = self.request(SET_DATA, |b| {
            put_str(b, path);
            put_i32(b, 8);
            b.extend_from_slice(&value.wrapping_add(1).to_be_bytes());
            put_i32(b, version);
        });
        self.send(&set)?;
        Ok(self.answer()? == 0)
    }
}

/// `n` sessions, a thread each, increment the counter at `path` (which must exist) for
/// `run_for`: increments made per second, client CPU per made one.
pub fn increments(addr: &str, path: &str, n: usize, run_for: Duration) -> Figures {
    let path = path.to_owned();
    super::sessions_for(addr, n, run_for, move |w| w.increment(&path))
}
