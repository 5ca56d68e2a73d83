//! The wire floor for a queue's put (issue 38): one `create` of a persistent sequential
//! `queue-` node holding Curator's envelope around one item, as ours and Curator's put, in
//! pre-encoded frames on a blocking socket.

use std::io;
use std::time::Duration;

use super::super::figures::Figures;
use super::{put_i32, put_str, Wire, CREATE};

const PERSISTENT_SEQUENTIAL: i32 = 2;

impl Wire {
    /// Puts `item` in a new node under the queue `dir` (which must exist).
    fn put_item(&mut self, dir: &str, item: &[u8]) -> io::Result<()> {
        let f = self.request(CREATE, |b| {
            put_str(b, &format!("{dir}/queue-"));
            // Curator's envelope: version, one item (opcode, length, bytes), the end mark.
            put_i32(b, (4 + 5 + item.len() + 1) as i32);
            b.extend_from_slice(&[0, 1, 0, 1, 1]);
            put_i32(b, item.len() as i32);
            b.extend_from_slice(item);
            b.push(2);
            put_i32(b, 1); // one ACL: world:anyone, all
            put_i32(b, 31);
            put_str(b, "world");
            put_str(b, "anyone");
            put_i32(b, PERSISTENT_SEQUENTIAL);
        });
        self.send(&f)?;
        self.expect_ok()
    }
}

/// `n` sessions, a thread each, put `item` into the queue `dir` (which must exist) for
/// `run_for`: puts per second, client CPU per put.
pub fn puts(addr: &str, dir: &str, item: &[u8], n: usize, run_for: Duration) -> Figures {
    let (dir, item) = (dir.to_owned(), item.to_vec());
    super::sessions_for(addr, n, run_for, move |w| {
        w.put_item(&dir, &item).map(|()| true)
    })
}
