//! Opening TCP connections: resolving a host within the caller's deadline, and dialing its
//! addresses with a fair share of that deadline each.
//!
//! Names are resolved again on every dial (nothing is cached here), so a member whose address
//! changed is found at its new one.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Opens a TCP connection to `host:port` by `until`: the name resolved within that deadline,
/// then each address it gave tried in turn.
pub(crate) fn dial(host: &str, port: u16, until: Instant) -> io::Result<TcpStream> {
    let addrs = resolve(host, port, until)?;
    dial_addrs(&addrs, until)
}

/// Tries each address in turn until one connects. Each gets an equal share of what is left of
/// the budget (the last one all of it), so a silent first address cannot starve the others.
pub(crate) fn dial_addrs(addrs: &[SocketAddr], until: Instant) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
    for (i, addr) in addrs.iter().enumerate() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        // `addrs.len() - i` is at least 1: `i` is an index into `addrs`.
        let share = (left / (addrs.len() - i) as u32).max(Duration::from_millis(1));
        match TcpStream::connect_timeout(addr, share) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Sets both socket timeouts to what is left until `until` (at least a millisecond, since
/// zero means "never" to the socket).
pub(crate) fn bound(s: &TcpStream, until: Instant) -> io::Result<()> {
    let left = until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))
}

/// A lookup on its way: its result, once the resolver gave it.
type Answer = Option<Result<Vec<SocketAddr>, String>>;

#[derive(Default)]
struct Lookup {
    answer: Mutex<Answer>,
    done: Condvar,
}

type Lookups = HashMap<(String, u16), Arc<Lookup>>;

/// The lookups under way in this process, by name and port: a client that dials again while
/// the resolver still hangs waits for the same lookup instead of starting another thread.
fn in_flight() -> &'static Mutex<Lookups> {
    static LOOKUPS: OnceLock<Mutex<Lookups>> = OnceLock::new();
    LOOKUPS.get_or_init(Default::default)
}

/// Resolves `host`, giving up at `until`. An address literal needs no lookup. The system
/// resolver takes no deadline, so a name is looked up on a short-lived thread and waited for
/// until `until`; a lookup that takes longer fails this attempt, and its thread ends when
/// the resolver gives up by itself (`timeout` × `attempts` in resolv.conf). At most one such
/// thread runs per name.
pub(crate) fn resolve(host: &str, port: u16, until: Instant) -> io::Result<Vec<SocketAddr>> {
    resolve_with(host, port, until, |name, port| {
        (name, port).to_socket_addrs().map(|a| a.collect())
    })
}

/// What the system resolver does, or a test's stand-in for it.
type Resolver = fn(&str, u16) -> io::Result<Vec<SocketAddr>>;

fn resolve_with(
    host: &str,
    port: u16,
    until: Instant,
    lookup: Resolver,
) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let key = (host.to_owned(), port);
    let lookup = {
        let mut map = in_flight().lock();
        match map.get(&key) {
            Some(l) => l.clone(),
            None => {
                let l = Arc::new(Lookup::default());
                let (name, theirs) = (key.clone(), l.clone());
                thread::Builder::new()
                    .name("zk-resolve".into())
                    .spawn(move || {
                        let result = lookup(&name.0, name.1).map_err(|e| e.to_string());
                        in_flight().lock().remove(&name);
                        *theirs.answer.lock() = Some(result);
                        theirs.done.notify_all();
                    })?;
                map.insert(key, l.clone());
                l
            }
        }
    };
    let mut answer = lookup.answer.lock();
    while answer.is_none() {
        if lookup.done.wait_until(&mut answer, until).timed_out() {
            break;
        }
    }
    match answer.clone() {
        Some(Ok(addrs)) if addrs.is_empty() => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host} has no address"),
        )),
        Some(Ok(addrs)) => Ok(addrs),
        Some(Err(e)) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("resolving {host}: {e}"),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("resolving {host} did not finish in time"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 20 item 10: the first address resolved used to take the whole budget; a silent
    /// one then left none for a good address after it.
    #[cfg(feature = "testing")]
    #[test]
    fn a_silent_first_address_leaves_time_for_the_next() {
        use crate::testing::SilentPort;
        let silent = SilentPort::start().unwrap();
        // Anything that takes the connection.
        let port = crate::testing::taking_port().unwrap();
        let good = port.local_addr().unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        let s = dial_addrs(&[silent.addr(), good], until)
            .expect("the second address connects within the budget");
        assert_eq!(s.peer_addr().unwrap(), good);
    }

    #[test]
    fn an_address_literal_is_not_looked_up() {
        let until = Instant::now();
        assert_eq!(
            resolve("::1", 2181, until).unwrap(),
            vec!["[::1]:2181".parse().unwrap()]
        );
    }

    /// Issue 20 item 10: the system resolver takes no deadline, ours does; and a hanging
    /// lookup is shared, not started again by every dial.
    #[test]
    fn a_hanging_lookup_ends_the_attempt_at_its_deadline_and_runs_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        static RELEASE: OnceLock<crossbeam_channel::Receiver<()>> = OnceLock::new();
        let (release, rx) = crossbeam_channel::bounded::<()>(0);
        RELEASE.set(rx).unwrap();
        fn hanging(_: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
            STARTED.fetch_add(1, Ordering::SeqCst);
            let _ = RELEASE.get().map(|r| r.recv());
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        }
        for _ in 0..2 {
            let asked = Instant::now();
            let until = asked + Duration::from_millis(200);
            let e = resolve_with("hangs.invalid", 1, until, hanging).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert!(Instant::now() >= until);
            // The promised bound, with room for a loaded machine.
            assert!(Instant::now() < until + Duration::from_secs(1));
        }
        assert_eq!(STARTED.load(Ordering::SeqCst), 1);
        drop(release);
        // The lookup finishes (its thread ends) and answers whoever still waits.
        let addrs = resolve_with(
            "hangs.invalid",
            1,
            Instant::now() + Duration::from_secs(10),
            hanging,
        );
        assert_eq!(addrs.unwrap(), vec![SocketAddr::from(([127, 0, 0, 1], 1))]);
        assert!(!in_flight()
            .lock()
            .contains_key(&("hangs.invalid".to_string(), 1)));
    }

    #[test]
    fn a_name_resolves_within_its_deadline() {
        let addrs = resolve("localhost", 2181, Instant::now() + Duration::from_secs(5)).unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
