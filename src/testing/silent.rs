//! A silent server: a loopback port that takes no connection.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

/// A loopback port whose listen backlog is full: the kernel drops every new connection
/// attempt, so a connect there waits in silence until its own timeout, as to a host that
/// drops packets (where [`FaultProxy::refuse`](super::FaultProxy::refuse) answers at once).
pub struct SilentPort {
    _listener: TcpListener,
    _filler: TcpStream,
    addr: SocketAddr,
}

impl SilentPort {
    /// Opens one.
    pub fn start() -> std::io::Result<SilentPort> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        // A backlog of 0 holds one connection; the filler takes it, and nothing accepts.
        // SAFETY: the listener's fd is valid while it lives; `listen` only sets its backlog.
        if unsafe { libc::listen(listener.as_raw_fd(), 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let filler = TcpStream::connect(addr)?;
        Ok(SilentPort {
            _listener: listener,
            _filler: filler,
            addr,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// A loopback port that takes connections (the kernel completes them; nothing accepts or
/// answers): for the client's own unit tests of dialing. Keep it to keep the port.
#[cfg(test)]
pub(crate) fn taking_port() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
}

/// A connected loopback pair whose far end never reads (the second stream, to be kept open):
/// writes to the first fill the sockets' buffers and then block, as to a server that stopped
/// reading. For the client's own unit tests of its write bounds; no protocol is spoken.
#[cfg(test)]
pub(crate) fn unread_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let near = TcpStream::connect(listener.local_addr()?)?;
    let (far, _) = listener.accept()?;
    Ok((near, far))
}

/// Fills `sock`'s send buffers without blocking, to the last byte they take now (its far end
/// must not read): the next write blocks, as to a server that stopped reading.
#[cfg(test)]
pub(crate) fn fill(sock: &TcpStream) -> std::io::Result<()> {
    use std::io::Write;
    sock.set_nonblocking(true)?;
    for size in [64 * 1024, 1024, 1] {
        let chunk = vec![0u8; size];
        let mut w = sock;
        while w.write(&chunk).is_ok() {}
    }
    sock.set_nonblocking(false)
}
