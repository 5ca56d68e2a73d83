//! The few pieces of the ZooKeeper wire protocol the session relay reads or writes: length
//! framing, the connect handshake, and close-session. Everything else passes through as bytes.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Frames larger than this are not ZooKeeper traffic we expect (the server's own limit is
/// `jute.maxbuffer`, 1 MiB by default, plus headers).
const MAX_FRAME: usize = 16 << 20;

/// Reads one length-prefixed frame body.
pub(crate) fn read_frame(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if len < 0 || len as usize > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame length {len} out of range"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Writes `body` with its length prefix.
pub(crate) fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as i32).to_be_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }
    fn buffer(&mut self) -> Option<Vec<u8>> {
        let len = self.i32()?;
        if len < 0 {
            return Some(Vec::new());
        }
        let (head, rest) = self.0.split_at_checked(len as usize)?;
        self.0 = rest;
        Some(head.to_vec())
    }
    fn bool_opt(&mut self) -> Option<bool> {
        self.take::<1>().map(|b| b[0] != 0)
    }
}

/// The first frame a client sends on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: bool,
}

impl ConnectRequest {
    pub fn decode(body: &[u8]) -> Option<ConnectRequest> {
        let mut r = Reader(body);
        Some(ConnectRequest {
            protocol_version: r.i32()?,
            last_zxid_seen: r.i64()?,
            timeout_ms: r.i32()?,
            session_id: r.i64()?,
            passwd: r.buffer()?,
            read_only: r.bool_opt().unwrap_or(false),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(45);
        b.extend_from_slice(&self.protocol_version.to_be_bytes());
        b.extend_from_slice(&self.last_zxid_seen.to_be_bytes());
        b.extend_from_slice(&self.timeout_ms.to_be_bytes());
        b.extend_from_slice(&self.session_id.to_be_bytes());
        b.extend_from_slice(&(self.passwd.len() as i32).to_be_bytes());
        b.extend_from_slice(&self.passwd);
        b.push(self.read_only as u8);
        b
    }
}

/// The server's answer to a [`ConnectRequest`]. A timeout of 0 means the session asked for
/// has expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectResponse {
    pub protocol_version: i32,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: bool,
}

impl ConnectResponse {
    pub fn decode(body: &[u8]) -> Option<ConnectResponse> {
        let mut r = Reader(body);
        Some(ConnectResponse {
            protocol_version: r.i32()?,
            timeout_ms: r.i32()?,
            session_id: r.i64()?,
            passwd: r.buffer()?,
            read_only: r.bool_opt().unwrap_or(false),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(37);
        b.extend_from_slice(&self.protocol_version.to_be_bytes());
        b.extend_from_slice(&self.timeout_ms.to_be_bytes());
        b.extend_from_slice(&self.session_id.to_be_bytes());
        b.extend_from_slice(&(self.passwd.len() as i32).to_be_bytes());
        b.extend_from_slice(&self.passwd);
        b.push(self.read_only as u8);
        b
    }
}

const OP_CLOSE_SESSION: i32 = -11;
const OP_AUTH: i32 = 100;
/// The xid the protocol reserves for authentication packets and their replies.
pub(crate) const AUTH_XID: i32 = -4;

/// An `addAuth` request frame body: header (xid -4, op auth) and `AuthPacket`.
pub(crate) fn auth_request(scheme: &str, credentials: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + scheme.len() + credentials.len());
    b.extend_from_slice(&AUTH_XID.to_be_bytes());
    b.extend_from_slice(&OP_AUTH.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&(scheme.len() as i32).to_be_bytes());
    b.extend_from_slice(scheme.as_bytes());
    b.extend_from_slice(&(credentials.len() as i32).to_be_bytes());
    b.extend_from_slice(credentials);
    b
}

/// The `(xid, error code)` of a reply frame body.
pub(crate) fn reply_header(body: &[u8]) -> Option<(i32, i32)> {
    let mut r = Reader(body);
    let xid = r.i32()?;
    let _zxid = r.i64()?;
    Some((xid, r.i32()?))
}

/// Attaches to session `session_id` over a fresh connection and closes it, so that its
/// ephemeral nodes go now rather than when the server would expire it. Returns `Ok(false)` if
/// the server says the session had already expired.
pub(crate) fn close_session(
    sock: &mut TcpStream,
    session_id: i64,
    passwd: &[u8],
    timeout: Duration,
) -> io::Result<bool> {
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    sock.set_nodelay(true)?;
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0,
        timeout_ms: timeout.as_millis().min(i32::MAX as u128) as i32,
        session_id,
        passwd: passwd.to_vec(),
        read_only: false,
    };
    write_frame(sock, &req.encode())?;
    let resp = ConnectResponse::decode(&read_frame(sock)?)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad connect response"))?;
    if resp.timeout_ms <= 0 {
        return Ok(false);
    }
    let mut header = Vec::with_capacity(8);
    header.extend_from_slice(&1i32.to_be_bytes());
    header.extend_from_slice(&OP_CLOSE_SESSION.to_be_bytes());
    write_frame(sock, &header)?;
    read_frame(sock)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_round_trips() {
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 42,
            timeout_ms: 6000,
            session_id: 0x1234_5678_9abc_def0,
            passwd: vec![7; 16],
            read_only: false,
        };
        assert_eq!(ConnectRequest::decode(&req.encode()), Some(req));
        let resp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: 4000,
            session_id: 99,
            passwd: vec![1; 16],
            read_only: true,
        };
        assert_eq!(ConnectResponse::decode(&resp.encode()), Some(resp.clone()));
        // Old servers leave out the read-only flag.
        let short = &resp.encode()[..resp.encode().len() - 1];
        assert_eq!(
            ConnectResponse::decode(short).map(|r| r.read_only),
            Some(false)
        );
        assert_eq!(ConnectResponse::decode(&[0, 0, 0]), None);
    }

    #[test]
    fn frames_are_length_prefixed_and_bounded() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"abc").unwrap();
        assert_eq!(buf, [0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(read_frame(&mut &buf[..]).unwrap(), b"abc");
        let huge = (-1i32).to_be_bytes();
        assert!(read_frame(&mut &huge[..]).is_err());
    }
}
