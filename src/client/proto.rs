//! The ZooKeeper wire protocol: jute records, opcodes and reserved xids, as the server's
//! `zookeeper.jute` defines them. Pure encoding and decoding, no I/O: every decoder takes bytes
//! from the network and returns a typed [`Malformed`] error on anything it cannot read, never a
//! panic.

use crate::acl::{Acl, Id, Permission};
use crate::client::types::{Stat, WatchKind};
use crate::client::Secret;

/// Opcodes (`ZooDefs.OpCode`).
pub(crate) mod op {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    /// `getChildren` without the stat: what a `multiRead` lists with.
    pub const GET_CHILDREN: i32 = 8;
    pub const SET_ACL: i32 = 7;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const CREATE_TTL: i32 = 21;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
    pub const SET_WATCHES: i32 = 101;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const WHO_AM_I: i32 = 107;
    pub const RECONFIG: i32 = 16;
    #[cfg(feature = "sasl")]
    pub const SASL: i32 = 102;
    pub const CLOSE_SESSION: i32 = -11;
    /// In a multi's header: the end of the list; in its answer: a failed operation.
    pub const ERROR: i32 = -1;
}

/// Reserved xids (`ClientCnxn`).
pub(crate) mod xid {
    pub const NOTIFICATION: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

/// Frames longer than this are refused (the server's own `jute.maxbuffer` is 1 MiB by default;
/// a listing of a very large directory can be somewhat bigger).
pub(crate) const MAX_FRAME: usize = 16 << 20;

/// Bytes the server sent that are not a record we can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub &'static str);

impl From<Malformed> for crate::error::Error {
    fn from(e: Malformed) -> Self {
        crate::error::Error::Protocol(e.0.to_owned())
    }
}

pub(crate) type Decoded<T> = std::result::Result<T, Malformed>;

/// Builds one frame: a length prefix (filled in by [`Enc::finish`]) and the record.
pub(crate) struct Enc(Vec<u8>);

impl Enc {
    /// A frame that starts with a request header `(xid, op)`.
    pub fn request(xid: i32, op: i32) -> Enc {
        // Room for a lock's create (path, holder id, ACL) without growing on the way.
        let mut e = Enc(Vec::with_capacity(256));
        e.0.extend_from_slice(&[0; 4]);
        e.i32(xid).i32(op);
        e
    }

    /// A frame without a request header (the connect request).
    pub fn bare() -> Enc {
        Enc(vec![0; 4])
    }

    pub fn i32(&mut self, v: i32) -> &mut Enc {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Enc {
        self.0.push(v as u8);
        self
    }

    pub fn buffer(&mut self, v: &[u8]) -> &mut Enc {
        self.i32(len_i32(v.len()));
        self.0.extend_from_slice(v);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Enc {
        self.buffer(v.as_bytes())
    }

    pub fn strs(&mut self, v: &[String]) -> &mut Enc {
        self.i32(len_i32(v.len()));
        for s in v {
            self.str(s);
        }
        self
    }

    pub fn acl(&mut self, acl: &[Acl]) -> &mut Enc {
        self.i32(len_i32(acl.len()));
        for a in acl {
            self.i32(a.perms.bits() as i32)
                .str(&a.id.scheme)
                .str(&a.id.id);
        }
        self
    }

    /// The finished frame, length prefix included.
    pub fn finish(mut self) -> Vec<u8> {
        let len = len_i32(self.0.len() - 4);
        self.0[..4].copy_from_slice(&len.to_be_bytes());
        self.0
    }
}

/// Lengths we send are bounded by the caller's checks (1 MiB of data, paths, ACLs); saturate
/// rather than wrap if one ever is not.
fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Writes the xid into a finished request frame (it is chosen under the send lock, after the
/// record was encoded).
pub(crate) fn set_xid(frame: &mut [u8], xid: i32) {
    if let Some(slot) = frame.get_mut(4..8) {
        slot.copy_from_slice(&xid.to_be_bytes());
    }
}

/// A finished request frame's operation code (0 for a frame too short to have one).
pub(crate) fn opcode(frame: &[u8]) -> i32 {
    frame
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_be_bytes)
}

/// A listing's names (a `GetChildren` answer), decoded into one text: two allocations
/// however long the listing, where a `Vec<String>` makes one per name. The lock core reads
/// every listing of its line this way; it is read twice per contended acquisition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Names {
    text: String,
    /// Where each name ends in `text`; each begins where the one before it ends.
    ends: Vec<usize>,
}

impl Names {
    /// These names but `gone`.
    pub fn without(&self, gone: &str) -> Names {
        let mut out = Names {
            text: String::with_capacity(self.text.len()),
            ends: Vec::with_capacity(self.ends.len()),
        };
        for name in self.iter().filter(|n| *n != gone) {
            out.text.push_str(name);
            out.ends.push(out.text.len());
        }
        out
    }

    /// The names, in the order the server sent them.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| {
            // `names` refused a listing with an end inside a character, so each range lies on
            // character boundaries; `get` checks it anyway rather than trust it.
            self.text.get(start..end).unwrap_or("")
        })
    }
}

/// Reads a record from a frame body.
pub(crate) struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    pub fn new(body: &'a [u8]) -> Dec<'a> {
        Dec(body)
    }

    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        let (head, rest) = self
            .0
            .split_at_checked(n)
            .ok_or(Malformed("record ends early"))?;
        self.0 = rest;
        Ok(head)
    }

    pub fn i32(&mut self) -> Decoded<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self) -> Decoded<i64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub fn bool(&mut self) -> Decoded<bool> {
        Ok(self.take(1)?[0] != 0)
    }

    /// A buffer; `-1` (null) reads as empty.
    pub fn buffer(&mut self) -> Decoded<Vec<u8>> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Vec::new());
        }
        Ok(self.take(len as usize)?.to_vec())
    }

    pub fn str(&mut self) -> Decoded<String> {
        String::from_utf8(self.buffer()?).map_err(|_| Malformed("string is not UTF-8"))
    }

    /// A vector's length; null reads as 0. Bounded by the bytes left, so garbage cannot make us
    /// allocate more than the frame holds.
    fn count(&mut self) -> Decoded<usize> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(0);
        }
        if n as usize > self.0.len() {
            return Err(Malformed("vector longer than its frame"));
        }
        Ok(n as usize)
    }

    pub fn strs(&mut self) -> Decoded<Vec<String>> {
        let n = self.count()?;
        // Sized once for an ordinary listing (a string takes at least its 4-byte length; at
        // most 1024 ahead, so that a garbage count reserves no more than a few pages before
        // its strings fail): collecting through `Result` would grow it step by step.
        let mut out = Vec::with_capacity(n.min(self.0.len() / 4).min(1024));
        for _ in 0..n {
            out.push(self.str()?);
        }
        Ok(out)
    }

    /// A vector of strings as [`Names`]: one text and its ends, however many names.
    pub fn names(&mut self) -> Decoded<Names> {
        let n = self.count()?;
        // Both sized once, from what the record holds (each name takes its 4-byte length
        // besides its bytes), so garbage cannot make them larger than the frame.
        let mut ends = Vec::with_capacity(n.min(self.0.len() / 4).min(1024));
        let mut bytes = Vec::with_capacity(self.0.len().saturating_sub(4 * n));
        for _ in 0..n {
            let len = self.i32()?;
            // A null string reads as empty, as `str` reads it.
            if len > 0 {
                bytes.extend_from_slice(self.take(len as usize)?);
            }
            ends.push(bytes.len());
        }
        // Checked once for the whole text, not name by name (a listing is read twice per
        // contended acquisition). Valid text cut only where characters begin gives valid
        // names; a cut inside a character means a name that is not UTF-8 on its own.
        let text = String::from_utf8(bytes).map_err(|_| Malformed("string is not UTF-8"))?;
        if !ends.iter().all(|&end| text.is_char_boundary(end)) {
            return Err(Malformed("string is not UTF-8"));
        }
        Ok(Names { text, ends })
    }

    pub fn stat(&mut self) -> Decoded<Stat> {
        Ok(Stat {
            czxid: self.i64()?,
            mzxid: self.i64()?,
            ctime: self.i64()?,
            mtime: self.i64()?,
            version: self.i32()?,
            cversion: self.i32()?,
            aversion: self.i32()?,
            ephemeral_owner: self.i64()?,
            data_length: self.i32()?,
            num_children: self.i32()?,
            pzxid: self.i64()?,
        })
    }

    pub fn acl(&mut self) -> Decoded<Vec<Acl>> {
        let n = self.count()?;
        (0..n)
            .map(|_| {
                let perms = Permission::from_bits(self.i32()? as u32);
                let scheme = self.str()?;
                let id = self.str()?;
                Ok(Acl {
                    perms,
                    id: Id { scheme, id },
                })
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `ReplyHeader`: every answer after the handshake starts with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyHeader {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
}

impl ReplyHeader {
    pub fn decode(d: &mut Dec<'_>) -> Decoded<ReplyHeader> {
        Ok(ReplyHeader {
            xid: d.i32()?,
            zxid: d.i64()?,
            err: d.i32()?,
        })
    }

    /// The header as the server writes it (an answer made up client-side carries it).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&self.xid.to_be_bytes());
        b.extend_from_slice(&self.zxid.to_be_bytes());
        b.extend_from_slice(&self.err.to_be_bytes());
        b
    }
}

/// The first frame a client sends on a connection. Its `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ConnectRequest {
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Secret,
    pub read_only: bool,
}

impl std::fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectRequest")
            .field("last_zxid_seen", &self.last_zxid_seen)
            .field("timeout_ms", &self.timeout_ms)
            .field("session_id", &self.session_id)
            .field("passwd", &Redacted(self.passwd.len()))
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// A secret's place in a `Debug`: its length, never its bytes.
struct Redacted(usize);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes, redacted>", self.0)
    }
}

impl ConnectRequest {
    /// The frame (it holds the password: wiped when dropped).
    pub fn encode(&self) -> Secret {
        let mut e = Enc::bare();
        e.i32(0)
            .i64(self.last_zxid_seen)
            .i32(self.timeout_ms)
            .i64(self.session_id)
            .buffer(&self.passwd)
            .bool(self.read_only);
        Secret::new(e.finish())
    }
}

/// The server's answer to a [`ConnectRequest`]. A timeout of 0 or less means the session asked
/// for has expired. Its `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ConnectResponse {
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Secret,
    pub read_only: bool,
}

impl std::fmt::Debug for ConnectResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectResponse")
            .field("timeout_ms", &self.timeout_ms)
            .field("session_id", &self.session_id)
            .field("passwd", &Redacted(self.passwd.len()))
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl ConnectResponse {
    pub fn decode(body: &[u8]) -> Decoded<ConnectResponse> {
        let mut d = Dec::new(body);
        let _protocol_version = d.i32()?;
        Ok(ConnectResponse {
            timeout_ms: d.i32()?,
            session_id: d.i64()?,
            passwd: Secret::new(d.buffer()?),
            // Servers before 3.4 leave the flag out.
            read_only: d.bool().unwrap_or(false),
        })
    }

    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::bare();
        e.i32(0)
            .i32(self.timeout_ms)
            .i64(self.session_id)
            .buffer(&self.passwd)
            .bool(self.read_only);
        e.finish()
    }
}

/// `addAuth`: an `AuthPacket` under the reserved auth xid.
/// The frame holds the credentials: wiped when dropped.
pub(crate) fn auth_request(scheme: &str, credentials: &[u8]) -> Secret {
    let mut e = Enc::request(xid::AUTH, op::AUTH);
    e.i32(0).str(scheme).buffer(credentials);
    Secret::new(e.finish())
}

/// `SetWatches` (or `SetWatches2` when there are persistent watches): the watches to restore
/// on a resumed session, for changes after `relative_zxid`.
pub(crate) struct SetWatches {
    pub relative_zxid: i64,
    pub data: Vec<String>,
    pub exist: Vec<String>,
    pub child: Vec<String>,
    pub persistent: Vec<String>,
    pub persistent_recursive: Vec<String>,
}

impl SetWatches {
    pub fn encode(&self) -> Vec<u8> {
        let persistent = !self.persistent.is_empty() || !self.persistent_recursive.is_empty();
        let opcode = if persistent {
            op::SET_WATCHES2
        } else {
            op::SET_WATCHES
        };
        let mut e = Enc::request(xid::SET_WATCHES, opcode);
        e.i64(self.relative_zxid)
            .strs(&self.data)
            .strs(&self.exist)
            .strs(&self.child);
        if persistent {
            e.strs(&self.persistent).strs(&self.persistent_recursive);
        }
        e.finish()
    }
}

/// A notification (`WatcherEvent`, under xid -1): what happened, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notification {
    pub kind: WatchKind,
    pub path: String,
}

impl Notification {
    pub fn decode(d: &mut Dec<'_>) -> Decoded<Notification> {
        let kind = match d.i32()? {
            1 => WatchKind::Created,
            2 => WatchKind::Deleted,
            3 => WatchKind::DataChanged,
            4 => WatchKind::ChildrenChanged,
            _ => WatchKind::Other,
        };
        let _keeper_state = d.i32()?;
        Ok(Notification {
            kind,
            path: d.str()?,
        })
    }
}

/// The closing multi header, or an answer's: `(type, done, err)`.
pub(crate) fn multi_header(d: &mut Dec<'_>) -> Decoded<(i32, bool, i32)> {
    Ok((d.i32()?, d.bool()?, d.i32()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_frame_carries_its_length_and_header() {
        let mut e = Enc::request(7, op::EXISTS);
        e.str("/a").bool(true);
        let mut f = e.finish();
        assert_eq!(&f[..4], &(f.len() as i32 - 4).to_be_bytes());
        set_xid(&mut f, 9);
        let mut d = Dec::new(&f[4..]);
        assert_eq!(d.i32(), Ok(9));
        assert_eq!(d.i32(), Ok(op::EXISTS));
        assert_eq!(d.str().as_deref(), Ok("/a"));
        assert_eq!(d.bool(), Ok(true));
        assert!(d.is_empty());
    }

    #[test]
    fn the_connect_answer_round_trips_and_tolerates_old_servers() {
        let resp = ConnectResponse {
            timeout_ms: 4000,
            session_id: 99,
            passwd: Secret::new(vec![1; 16]),
            read_only: true,
        };
        let f = resp.encode();
        assert_eq!(ConnectResponse::decode(&f[4..]), Ok(resp.clone()));
        let short = &f[4..f.len() - 1];
        assert_eq!(
            ConnectResponse::decode(short).map(|r| r.read_only),
            Ok(false)
        );
        assert!(ConnectResponse::decode(&[0, 0, 0]).is_err());
    }

    /// The session password never reaches `Debug` (issue 39, item 7): a request or answer
    /// printed says how long it is, not what it is.
    #[test]
    fn the_session_password_never_reaches_debug() {
        let req = ConnectRequest {
            last_zxid_seen: 5,
            timeout_ms: 10_000,
            session_id: 0x1234,
            passwd: Secret::new(vec![0xab; 16]),
            read_only: false,
        };
        let resp = ConnectResponse {
            timeout_ms: 10_000,
            session_id: 0x1234,
            passwd: Secret::new(vec![0xab; 16]),
            read_only: false,
        };
        for shown in [format!("{req:?}"), format!("{resp:?}"), format!("{req:#?}")] {
            assert!(!shown.contains("171"), "{shown}");
            assert!(!shown.to_lowercase().contains("ab, "), "{shown}");
            assert!(shown.contains("16 bytes, redacted"), "{shown}");
            assert!(shown.contains("4660"), "the rest is shown: {shown}");
        }
    }

    proptest::proptest! {
        /// Whatever bytes a server sends, every decoder returns a value or `Malformed`.
        #[test]
        fn decoders_never_panic_on_garbage(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = ConnectResponse::decode(&bytes);
            let mut d = Dec::new(&bytes);
            if let Ok(h) = ReplyHeader::decode(&mut d) {
                let _ = h.xid;
                let _ = Notification::decode(&mut Dec::new(&bytes[16..]));
            }
            let _ = Dec::new(&bytes).stat();
            let _ = Dec::new(&bytes).acl();
            let _ = Dec::new(&bytes).strs();
            let _ = Dec::new(&bytes).names();
            let mut d = Dec::new(&bytes);
            for _ in 0..8 {
                if multi_header(&mut d).is_err() || d.str().is_err() {
                    break;
                }
            }
        }
    }

    proptest::proptest! {
        /// A listing encoded as the server does reads back name by name, and nothing of the
        /// record after it is taken.
        #[test]
        fn names_read_back_what_was_listed(
            listed in proptest::collection::vec(".{0,40}", 0..40),
            tail in proptest::prelude::any::<i64>(),
        ) {
            let mut e = Enc::bare();
            e.strs(&listed).i64(tail);
            let frame = e.0;
            let mut d = Dec::new(&frame[4..]);
            let names = d.names().map_err(|m| proptest::test_runner::TestCaseError::fail(m.0))?;
            proptest::prop_assert_eq!(names.iter().count(), listed.len());
            proptest::prop_assert!(names.iter().eq(listed.iter().map(String::as_str)));
            proptest::prop_assert_eq!(d.i64(), Ok(tail));
        }
    }

    proptest::proptest! {
        /// A listing shaped as the server's but with hostile entries (null and negative
        /// lengths, bytes that are not UTF-8, a record cut short): `names` accepts exactly what
        /// `strs` accepts, with the same names, and leaves the same bytes unread. (The error's
        /// text may differ: `names` checks the text once, after reading every entry.)
        #[test]
        fn names_accept_what_strs_accepts(
            entries in proptest::collection::vec(
                // A null (-1) or negative length now and then; bytes that make characters cut
                // in two between names common: the halves of `é`, a byte never in UTF-8, and
                // ASCII.
                (proptest::sample::select(vec![None, None, None, Some(-1), Some(-7)]),
                 proptest::collection::vec(
                    proptest::sample::select(vec![b'a', b'0', 0xc3, 0xa9, 0xff]),
                    0..5,
                )),
                0..8,
            ),
            miscount in proptest::sample::select(vec![0, 0, 0, 1, -1, -9]),
            cut in proptest::sample::select(vec![0usize, 0, 0, 1, 3]),
        ) {
            let mut e = Enc::bare();
            e.i32(entries.len() as i32 + miscount);
            for (null, bytes) in &entries {
                match null {
                    Some(len) => e.i32(*len),
                    None => e.buffer(bytes),
                };
            }
            let record = &e.0[4..];
            let record = &record[..record.len().saturating_sub(cut)];
            let (mut a, mut b) = (Dec::new(record), Dec::new(record));
            let names = a.names();
            let strs = b.strs();
            proptest::prop_assert_eq!(names.is_ok(), strs.is_ok(), "{:?} / {:?}", names, strs);
            if let (Ok(names), Ok(strs)) = (names, strs) {
                proptest::prop_assert!(names.iter().eq(strs.iter().map(String::as_str)));
                proptest::prop_assert_eq!(a.0, b.0);
            }
        }
    }

    proptest::proptest! {
        /// Text cut into names anywhere, inside characters too: `names` accepts exactly the
        /// listings `strs` accepts (every cut between characters), with the same names.
        #[test]
        fn names_cut_anywhere_agree_with_strs(
            text in "[aé]{0,12}",
            mut cuts in proptest::collection::vec(0usize..24, 0..6),
        ) {
            let bytes = text.as_bytes();
            cuts.iter_mut().for_each(|c| *c = (*c).min(bytes.len()));
            cuts.sort_unstable();
            let mut e = Enc::bare();
            e.i32(cuts.len() as i32 + 1);
            let mut start = 0;
            for &c in cuts.iter().chain([bytes.len()].iter()) {
                e.buffer(&bytes[start..c]);
                start = c;
            }
            let names = Dec::new(&e.0[4..]).names();
            let strs = Dec::new(&e.0[4..]).strs();
            proptest::prop_assert_eq!(
                names.is_ok(),
                cuts.iter().all(|&c| text.is_char_boundary(c))
            );
            proptest::prop_assert_eq!(names.is_ok(), strs.is_ok());
            if let (Ok(names), Ok(strs)) = (names, strs) {
                proptest::prop_assert!(names.iter().eq(strs.iter().map(String::as_str)));
            }
        }
    }

    #[test]
    fn a_null_name_reads_as_empty_and_a_broken_one_is_refused() {
        let mut e = Enc::bare();
        e.i32(3).str("a").i32(-1).str("b");
        let names = Dec::new(&e.0[4..]).names().expect("names");
        assert_eq!(names.iter().collect::<Vec<_>>(), ["a", "", "b"]);
        let mut e = Enc::bare();
        e.i32(1).buffer(&[0xc3, 0x28]);
        assert!(Dec::new(&e.0[4..]).names().is_err());
        // Each half of one character: the two together are UTF-8, neither name is.
        let mut e = Enc::bare();
        e.i32(2).buffer(&[b'a', 0xc3]).buffer(&[0xa9, b'b']);
        assert!(Dec::new(&e.0[4..]).names().is_err());
        let mut e = Enc::bare();
        e.i32(2).str("a").i32(5).bool(true).bool(true);
        assert!(Dec::new(&e.0[4..]).names().is_err());
    }

    #[test]
    fn garbage_lengths_are_refused_without_allocating() {
        let mut d = Dec::new(&[0x7f, 0xff, 0xff, 0xff, 1, 2]);
        assert!(d.names().is_err());
        let mut d = Dec::new(&[0x7f, 0xff, 0xff, 0xff, 1, 2]);
        assert!(d.strs().is_err());
        let mut d = Dec::new(&[0x7f, 0xff, 0xff, 0xff, 1, 2]);
        assert!(d.buffer().is_err());
        let mut d = Dec::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(d.buffer(), Ok(Vec::new()));
    }
}
