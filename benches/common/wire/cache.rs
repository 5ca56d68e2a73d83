//! The wire floor of the cache bench (issue 38): what any client must do to hold a tree and
//! hear its changes, on the same hand-encoded frames and blocking sockets as the mutex floor.
//!
//! - Build: a persistent recursive watch on the root (`addWatch`), then the tree read level by
//!   level, `getData` and `getChildren` of every node of a level written at once by a thread
//!   while the answers are read through a buffer; nothing kept but the count (a floor stores
//!   nothing).
//! - Event: on a `NodeDataChanged` notification, `getData` of its path and the answer read:
//!   the node's new data in hand, the least a cache does before it can tell a listener.

use std::io::{self, BufReader, Read, Write};
use std::thread;
use std::time::Instant;

use super::{
    get_i32, get_str, put_i32, put_str, read_frame, Wire, GET_CHILDREN, GET_DATA, NOTIFICATION,
};

const SET_DATA: i32 = 5;
const ADD_WATCH: i32 = 106;
const PERSISTENT_RECURSIVE: i32 = 1;
/// A notification's `NodeDataChanged`.
const DATA_CHANGED: i32 = 3;

impl Wire {
    /// Sets a persistent recursive watch on `path`.
    pub fn add_recursive_watch(&mut self, path: &str) -> io::Result<()> {
        let f = self.request(ADD_WATCH, |b| {
            put_str(b, path);
            put_i32(b, PERSISTENT_RECURSIVE);
        });
        self.send(&f)?;
        self.expect_ok()
    }

    /// Sets `path`'s data (any version).
    pub fn set_data(&mut self, path: &str, data: &[u8]) -> io::Result<()> {
        let f = self.request(SET_DATA, |b| {
            put_str(b, path);
            put_i32(b, data.len() as i32);
            b.extend_from_slice(data);
            put_i32(b, -1);
        });
        self.send(&f)?;
        self.expect_ok()
    }

    /// Reads the tree at `root` (watch first): the nodes read. Each level's requests are
    /// all written by a thread of their own while this one reads the answers through a
    /// buffer, so the server always has work queued.
    pub fn read_tree(&mut self, root: &str) -> io::Result<usize> {
        self.add_recursive_watch(root)?;
        let mut answers = BufReader::with_capacity(1 << 20, self.sock.try_clone()?);
        let mut nodes = 0;
        let mut level = vec![root.to_owned()];
        while !level.is_empty() {
            let mut frames = Vec::with_capacity(level.len() * 64);
            for p in &level {
                frames.extend(self.request(GET_DATA, |b| {
                    put_str(b, p);
                    b.push(0);
                }));
                frames.extend(self.request(GET_CHILDREN, |b| {
                    put_str(b, p);
                    b.push(0);
                }));
            }
            self.reads += 2 * level.len() as u64;
            let mut sock = self.sock.try_clone()?;
            let writer = thread::spawn(move || sock.write_all(&frames));
            let mut next = Vec::new();
            for p in &level {
                if self.answer_from(&mut answers)? == 0 {
                    nodes += 1;
                }
                if self.answer_from(&mut answers)? == 0 {
                    next.extend(self.children().into_iter().map(|c| format!("{p}/{c}")));
                }
            }
            writer
                .join()
                .map_err(|_| io::Error::other("the floor's writer panicked"))??;
            level = next;
        }
        Ok(nodes)
    }

    /// Reads from `from` until an answer (not a notification) comes; returns its error code.
    fn answer_from(&mut self, from: &mut impl Read) -> io::Result<i32> {
        loop {
            read_frame(&mut *from, &mut self.frame)?;
            if get_i32(&self.frame, 0) >= 0 {
                return Ok(get_i32(&self.frame, 12));
            }
        }
    }

    /// Waits for the next `NodeDataChanged` notification and reads its node's data: the data,
    /// and when the notification came.
    pub fn next_change(&mut self) -> io::Result<(Vec<u8>, Instant)> {
        loop {
            self.read_frame()?;
            if get_i32(&self.frame, 0) != NOTIFICATION || get_i32(&self.frame, 16) != DATA_CHANGED {
                continue;
            }
            let heard = Instant::now();
            let (path, _) = get_str(&self.frame, 24);
            let f = self.request(GET_DATA, |b| {
                put_str(b, &path);
                b.push(0);
            });
            self.send(&f)?;
            if self.answer()? != 0 {
                continue;
            }
            let n = get_i32(&self.frame, 16).max(0) as usize;
            let data = self.frame.get(20..20 + n).unwrap_or_default().to_vec();
            return Ok((data, heard));
        }
    }
}
