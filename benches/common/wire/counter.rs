//! The wire floor for a counter (issue 38): an increment with nothing spare, a `getData` and a
//! `setData` at the version read (8 bytes, big-endian, as ours and Curator's), again at once on
//! a race, in pre-encoded frames on a blocking socket.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::super::figures::Figures;
use super::super::{process_cpu, run_window};
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
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let mut w = Wire::connect(addr).expect("the wire floor's session");
            let (path, stop, count, start) =
                (path.to_owned(), stop.clone(), count.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    if w.increment(&path).expect("increment") {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
                w.close();
            })
        })
        .collect();
    let cpu = process_cpu();
    let (counted, secs) = run_window(&start, &stop, &count, run_for, threads);
    let cpu = process_cpu() - cpu;
    let total = count.load(Ordering::Relaxed).max(1);
    Figures {
        per_second: counted as f64 / secs,
        cpu_us_per_acq: cpu.as_secs_f64() * 1e6 / total as f64,
        acquisitions: total as f64,
        ..Default::default()
    }
}
