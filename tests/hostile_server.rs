//! A hostile server: a fake socket (this test's own listener, never the library's) that
//! answers the handshake, then sends garbage, an oversized frame, an answer nobody asked for,
//! or half a frame. The client must see connection loss and reconnect, never panic or hang;
//! a read on the next (well-behaved) connection then succeeds.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use rstest::rstest;
use zk_recipes::{Client, ConnectionState::*, Error};

#[derive(Clone, Copy, Debug)]
enum Misdeed {
    Garbage,
    OversizedFrame,
    UnknownXid,
    HalfAFrame,
    Nothing,
}

/// A fake server: its own loopback listener, each connection served by `serve(n, stream)`
/// (`n` counts connections from 0) on a thread of its own. Declared before the client, it is
/// dropped after it: it stops accepting, shuts every connection it took and joins every
/// thread it started, so none outlives the test (also when the test panics).
struct Fake {
    addr: String,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    taken: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Fake {
    fn serve(serve: impl Fn(usize, TcpStream) + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let taken = Arc::new(Mutex::new(Vec::new()));
        let (seen, stopping, keep) = (connections.clone(), stop.clone(), taken.clone());
        let serve = Arc::new(serve);
        let accept = thread::spawn(move || {
            let mut threads = Vec::new();
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(s) = stream else { break };
                let Ok(mine) = s.try_clone() else { break };
                if let Ok(c) = s.try_clone() {
                    keep.lock().push(c);
                }
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let serve = serve.clone();
                threads.push(thread::spawn(move || {
                    serve(n, s);
                    // Closed when served, whatever clones are kept.
                    let _ = mine.shutdown(std::net::Shutdown::Both);
                }));
            }
            for t in threads {
                let _ = t.join();
            }
        });
        Fake {
            addr,
            connections,
            stop,
            taken,
            accept: Some(accept),
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop; every connection's thread sees its socket shut.
        let _ = TcpStream::connect(&self.addr);
        for s in self.taken.lock().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn connect_answer(read_only: bool) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    b.extend_from_slice(&4000i32.to_be_bytes()); // timeout
    b.extend_from_slice(&0x42i64.to_be_bytes()); // session id
    b.extend_from_slice(&16i32.to_be_bytes());
    b.extend_from_slice(&[7; 16]);
    b.push(read_only as u8);
    frame(&b)
}

fn reply(xid: i32, record: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&xid.to_be_bytes());
    b.extend_from_slice(&1i64.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(record);
    frame(&b)
}

/// Serves connections: the first misbehaves on its first request, the later ones answer
/// every request as an `exists` that found a node (an all-zero stat), and pings.
fn fake_server(misdeed: Misdeed, read_only: bool) -> Fake {
    Fake::serve(move |n, mut s| {
        if read_frame(&mut s).is_none() || s.write_all(&connect_answer(read_only)).is_err() {
            return;
        }
        let mut first = n == 0;
        while let Some(req) = read_frame(&mut s) {
            let xid = i32::from_be_bytes([req[0], req[1], req[2], req[3]]);
            if xid == -2 {
                let _ = s.write_all(&reply(-2, &[]));
                continue;
            }
            if first {
                first = false;
                let bytes = match misdeed {
                    Misdeed::Garbage => frame(b"\x01\x02not a reply"),
                    Misdeed::OversizedFrame => 0x7fff_fff0i32.to_be_bytes().to_vec(),
                    Misdeed::UnknownXid => reply(xid + 1000, &[0; 68]),
                    Misdeed::HalfAFrame => {
                        let mut f = reply(xid, &[0; 68]);
                        f.truncate(20);
                        f
                    }
                    Misdeed::Nothing => reply(xid, &[0; 68]),
                };
                let _ = s.write_all(&bytes);
                if matches!(misdeed, Misdeed::HalfAFrame) {
                    return; // closes mid-frame
                }
                continue;
            }
            if s.write_all(&reply(xid, &[0; 68])).is_err() {
                return;
            }
        }
    })
}

#[rstest]
#[case::garbage(Misdeed::Garbage)]
#[case::oversized_frame(Misdeed::OversizedFrame)]
#[case::unknown_xid(Misdeed::UnknownXid)]
#[case::half_a_frame(Misdeed::HalfAFrame)]
fn a_misbehaving_server_costs_a_reconnect_never_a_panic_or_a_hang(#[case] misdeed: Misdeed) {
    init_logs();
    let fake = fake_server(misdeed, false);
    let client = Client::builder(&fake.addr)
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let sub = client.subscribe();
    // Without retries the misdeed itself is seen: connection loss.
    let first = client.with_timeout(SOON).delete_version("/x", 0);
    assert!(
        matches!(first, Err(Error::ConnectionLoss { .. })),
        "{misdeed:?}: {first:?}"
    );
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    assert!(fake.connections() >= 2);
    // A retried read goes through on the next connection.
    assert!(client.with_timeout(SOON).exists("/x").unwrap().is_some());
}

#[test]
fn a_read_only_server_is_refused_unless_allowed() {
    init_logs();
    let fake = fake_server(Misdeed::Nothing, true);
    let addr = fake.addr.clone();
    let refused = Client::builder(&addr)
        .connection_timeout(Duration::from_millis(800))
        .connect();
    assert!(matches!(refused, Err(Error::Timeout { .. })), "{refused:?}");
    assert!(fake.connections() >= 1);
    let allowed = Client::builder(&addr)
        .allow_read_only(true)
        .connect()
        .unwrap();
    assert!(allowed.exists("/x").unwrap().is_some());
}

/// A server without containers (before 3.5.3) answers the container create `Unimplemented`:
/// the lock makes its path persistent instead and works on. The fake plays such a server just
/// far enough for one acquisition.
#[test]
fn without_container_support_a_lock_path_is_made_persistent() {
    init_logs();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let fake = Fake::serve(move |_, mut s| {
        {
            if read_frame(&mut s).is_none() || s.write_all(&connect_answer(false)).is_err() {
                return;
            }
            let mut made: Vec<String> = Vec::new();
            let mut created: Vec<String> = Vec::new();
            while let Some(req) = read_frame(&mut s) {
                let xid = i32::from_be_bytes([req[0], req[1], req[2], req[3]]);
                let op = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
                let path = || {
                    let len = i32::from_be_bytes([req[8], req[9], req[10], req[11]]) as usize;
                    String::from_utf8_lossy(&req[12..12 + len]).into_owned()
                };
                let (err, record): (i32, Vec<u8>) = match op {
                    -2 | 11 => (0, vec![]), // ping
                    19 => {
                        log.lock().unwrap().push(format!("container {}", path()));
                        (-6, vec![]) // Unimplemented
                    }
                    // create (1, the path alone) or create2 (15, and a stat)
                    1 | 15 => {
                        let p = path();
                        let parent = p.rsplit_once('/').map_or("", |x| x.0).to_owned();
                        if !parent.is_empty() && !made.contains(&parent) {
                            (-101, vec![]) // NoNode: the lock path is missing
                        } else {
                            let name = if p.ends_with('-') {
                                format!("{p}0000000001")
                            } else {
                                made.push(p.clone());
                                log.lock().unwrap().push(format!("persistent {p}"));
                                p
                            };
                            created.push(name.clone());
                            let mut r = (name.len() as i32).to_be_bytes().to_vec();
                            r.extend_from_slice(name.as_bytes());
                            if op == 15 {
                                r.extend_from_slice(&[0; 68]);
                            }
                            (0, r)
                        }
                    }
                    3 => {
                        // exists: what was made (and the root) is there.
                        let p = path();
                        if p == "/" || made.contains(&p) {
                            (0, vec![0; 68])
                        } else {
                            (-101, vec![])
                        }
                    }
                    // getChildren (8, the names alone) or getChildren2 (12, and a stat)
                    8 | 12 => {
                        // The children of the lock path: our node.
                        let kids: Vec<&str> = created
                            .iter()
                            .filter_map(|c| c.strip_prefix("/lock/"))
                            .collect();
                        let mut r = (kids.len() as i32).to_be_bytes().to_vec();
                        for k in kids {
                            r.extend_from_slice(&(k.len() as i32).to_be_bytes());
                            r.extend_from_slice(k.as_bytes());
                        }
                        if op == 12 {
                            r.extend_from_slice(&[0; 68]);
                        }
                        (0, r)
                    }
                    _ => (0, vec![0; 68]), // exists, delete, sync, ...: fine
                };
                let mut b = Vec::new();
                b.extend_from_slice(&xid.to_be_bytes());
                b.extend_from_slice(&1i64.to_be_bytes());
                b.extend_from_slice(&err.to_be_bytes());
                b.extend_from_slice(&record);
                if s.write_all(&frame(&b)).is_err() {
                    return;
                }
            }
        }
    });
    let client = Client::builder(&fake.addr)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .unwrap();
    let mutex = zk_recipes::InterProcessMutex::new(&client, "/lock").unwrap();
    let guard = mutex.try_acquire_for(SOON).unwrap().expect("not acquired");
    assert!(guard.node_path().starts_with("/lock/_c_"));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, ["container /lock", "persistent /lock"], "{seen:?}");
}

/// Answers the handshake (read-only or not), then pings, and each request with what `special`
/// says for its `(xid, opcode)`, or else as an `exists` that found a node (an all-zero stat).
fn answer_requests(
    mut s: TcpStream,
    read_only: bool,
    special: impl Fn(i32, i32) -> Option<Vec<u8>>,
) {
    if read_frame(&mut s).is_none() || s.write_all(&connect_answer(read_only)).is_err() {
        return;
    }
    answer_with(s, special);
}

fn answer_with(mut s: TcpStream, special: impl Fn(i32, i32) -> Option<Vec<u8>>) {
    while let Some(req) = read_frame(&mut s) {
        let xid = i32::from_be_bytes([req[0], req[1], req[2], req[3]]);
        let opcode = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
        let answer = if xid == -2 {
            reply(-2, &[])
        } else {
            special(xid, opcode).unwrap_or_else(|| reply(xid, &[0; 68]))
        };
        if s.write_all(&answer).is_err() {
            return;
        }
    }
}

/// A reply with an error code and no record.
fn error_reply(xid: i32, err: i32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&xid.to_be_bytes());
    b.extend_from_slice(&1i64.to_be_bytes());
    b.extend_from_slice(&err.to_be_bytes());
    frame(&b)
}

/// Issue 19's second hole. A server before 3.7 lets a session resume on a read-only server
/// (cut off from its quorum, so no leader counts the session alive), and answers its writes
/// `NotReadOnly`. Neither the read-only handshake nor those answers may move the lease
/// bound. The fake plays such a server: its first connection is a normal one, the later ones
/// resume the same session read-only.
#[test]
fn a_read_only_server_never_extends_the_lease() {
    init_logs();
    let first_conn = Arc::new(parking_lot::Mutex::new(None::<TcpStream>));
    let keep = first_conn.clone();
    let fake = Fake::serve(move |n, s| {
        let read_only = n > 0;
        if n == 0 {
            *keep.lock() = s.try_clone().ok();
        }
        // Writes (setData 5, check 13, multi 14, sync 9) fail NotReadOnly on a read-only
        // server.
        answer_requests(s, read_only, |xid, opcode| {
            (read_only && matches!(opcode, 5 | 9 | 13 | 14)).then(|| error_reply(xid, -119))
        });
    });
    let addr = fake.addr.clone();
    let client = Client::builder(&addr)
        .session_timeout(Duration::from_secs(4))
        .tick_time(Duration::from_millis(100))
        .allow_read_only(true)
        .connect()
        .unwrap();
    let sub = client.subscribe();
    client.set_data("/x", b"1", None).unwrap();
    let before = client.session_valid_until().expect("a lease bound");

    // The quorum is gone: the next connection resumes the session read-only.
    let first = first_conn.lock().take().expect("the first connection");
    first.shutdown(std::net::Shutdown::Both).unwrap();
    next_state(&sub, Suspended);
    next_state(&sub, ConnectedReadOnly);
    assert!(client.is_read_only());
    assert_eq!(
        client.set_data("/x", b"2", None),
        Err(Error::ZooKeeper {
            code: zk_recipes::ZkCode::NotReadOnly,
            path: "/x".into()
        })
    );
    assert!(client.exists("/x").unwrap().is_some());
    let after = client.session_valid_until().expect("a lease bound");
    assert!(
        after <= before,
        "a read-only server moved the lease bound by {:?}",
        after - before
    );
}

/// What the fake answers a write with, in `answers_that_the_leader_did_not_vouch_for...`.
#[derive(Clone, Copy, Debug)]
enum WriteAnswer {
    /// A transaction whose one check passed.
    TransactionPassed,
    /// A transaction whose check failed `SessionExpired`, under a header that says 0: what the
    /// leader answers while it expires the session (its check runs per operation).
    TransactionExpired,
    /// A write that succeeded, with the zxid of a transaction.
    WritePassed,
    /// `NoAuth`: with `enableEagerACLCheck` a follower answers it alone.
    WriteNoAuth,
    /// Success with zxid 0: no transaction made it, the server we talk to answered alone.
    WriteZxidZero,
}

fn write_answer(how: WriteAnswer, xid: i32) -> Vec<u8> {
    // Reply header: xid, zxid, err; then the record.
    let answer = |zxid: i64, err: i32, record: &[u8]| {
        let mut b = Vec::new();
        b.extend_from_slice(&xid.to_be_bytes());
        b.extend_from_slice(&zxid.to_be_bytes());
        b.extend_from_slice(&err.to_be_bytes());
        b.extend_from_slice(record);
        frame(&b)
    };
    // A transaction's results: one (type, done, err) header each, then the closing one.
    let result = |kind: i32, err: i32| {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_be_bytes());
        r.push(0);
        r.extend_from_slice(&err.to_be_bytes());
        if kind == -1 {
            r.extend_from_slice(&err.to_be_bytes());
        }
        r.extend_from_slice(&(-1i32).to_be_bytes());
        r.push(1);
        r.extend_from_slice(&(-1i32).to_be_bytes());
        r
    };
    match how {
        WriteAnswer::TransactionPassed => answer(9, 0, &result(13, 0)),
        WriteAnswer::TransactionExpired => answer(9, 0, &result(-1, -112)),
        WriteAnswer::WritePassed => answer(9, 0, &[0; 68]),
        WriteAnswer::WriteNoAuth => answer(9, -102, &[]),
        WriteAnswer::WriteZxidZero => answer(0, 0, &[0; 68]),
    }
}

/// Only an answer the leader gave after it found the session alive moves the lease bound.
/// Each case answers one write (a transaction or a `setData`) its way; the controls show the
/// bound does move for a write that passed.
#[rstest]
#[case::an_expired_session_s_transaction(WriteAnswer::TransactionExpired, false)]
#[case::no_auth_from_a_follower_alone(WriteAnswer::WriteNoAuth, false)]
#[case::an_answer_without_a_transaction(WriteAnswer::WriteZxidZero, false)]
#[case::a_transaction_that_passed(WriteAnswer::TransactionPassed, true)]
#[case::a_write_that_passed(WriteAnswer::WritePassed, true)]
fn only_answers_the_leader_vouched_for_move_the_lease_bound(
    #[case] how: WriteAnswer,
    #[case] moves: bool,
) {
    init_logs();
    let fake = Fake::serve(move |_, s| {
        // setData 5, multi 14.
        answer_requests(s, false, |xid, opcode| {
            matches!(opcode, 5 | 14).then(|| write_answer(how, xid))
        });
    });
    let addr = fake.addr.clone();
    let tick = Duration::from_millis(100);
    let client = Client::builder(&addr)
        .session_timeout(Duration::from_secs(4))
        .tick_time(tick)
        .connect()
        .unwrap();
    // A touch the leader would have learned of by the time a write sent a tick later reaches
    // it: an answered read, then a tick of quiet (time the bound's rule needs to pass; no
    // event marks it).
    assert!(client.exists("/x").unwrap().is_some());
    thread::sleep(tick + tick / 2);
    let before = client.session_valid_until().expect("a lease bound");
    let result = match how {
        WriteAnswer::TransactionPassed | WriteAnswer::TransactionExpired => client
            .multi(&[zk_recipes::Op::Check {
                path: "/x".into(),
                version: None,
            }])
            .map(drop),
        _ => client.set_data("/x", b"1", None).map(drop),
    };
    let after = client.session_valid_until().expect("a lease bound");
    let refused = matches!(
        how,
        WriteAnswer::TransactionExpired | WriteAnswer::WriteNoAuth
    );
    assert_eq!(result.is_err(), refused, "{result:?}");
    if moves {
        assert!(after > before, "a write that passed did not move the bound");
    } else {
        assert!(
            after <= before,
            "{how:?} moved the lease bound by {:?}",
            after - before
        );
    }
}

/// Issue 20, item 2: a peer that trickles a byte at a time keeps the socket from ever timing
/// out, yet sends no whole answer. The connection must be declared dead once no whole frame
/// came for the read timeout (two thirds of the session timeout), per frame, not per byte.
#[test]
fn a_peer_that_trickles_bytes_is_declared_dead_by_the_read_timeout() {
    init_logs();
    let fake = Fake::serve(move |n, mut s| {
        {
            if n > 0 {
                return answer_requests(s, false, |_, _| None);
            }
            if read_frame(&mut s).is_none() || s.write_all(&connect_answer(false)).is_err() {
                return;
            }
            // The first request is answered one byte every 100 ms, for ever.
            let Some(req) = read_frame(&mut s) else {
                return;
            };
            let xid = i32::from_be_bytes([req[0], req[1], req[2], req[3]]);
            let answer = reply(xid, &[0; 68]);
            for b in answer.iter().cycle() {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
    });
    let addr = fake.addr.clone();
    // What the fake grants, whatever is asked.
    let session = Duration::from_secs(4);
    let client = Client::builder(&addr)
        .session_timeout(session)
        .tick_time(Duration::from_millis(100))
        .connect()
        .unwrap();
    let sub = client.subscribe();
    let asked = std::time::Instant::now();
    let c = client.clone();
    let call = thread::spawn(move || c.exists("/x"));
    next_state(&sub, Suspended);
    let dead_after = asked.elapsed();
    // The read timeout, plus one trickle interval and scheduling.
    let bound = session * 2 / 3 + Duration::from_millis(400);
    assert!(
        dead_after <= bound,
        "the trickling peer was declared dead only after {dead_after:?} (bound {bound:?})"
    );
    next_state(&sub, Reconnected);
    let _ = call.join().unwrap();
}

/// Issue 20, item 9: an answer that says the session expired is final: LOST comes at once,
/// not when (or if) the server closes the connection.
#[test]
fn an_answer_that_says_session_expired_loses_the_session_at_once() {
    init_logs();
    // setData (5) is answered SessionExpired; the connection stays open.
    let fake = Fake::serve(|_, s| {
        answer_requests(s, false, |xid, opcode| {
            (opcode == 5).then(|| error_reply(xid, -112))
        })
    });
    let addr = fake.addr.clone();
    let client = Client::builder(&addr)
        .session_timeout(Duration::from_secs(4))
        .tick_time(Duration::from_millis(100))
        .connect()
        .unwrap();
    let id = client.session_id().unwrap();
    let sub = client.subscribe();
    let _ = client.set_data("/x", b"1", None);
    next_state(&sub, Suspended);
    let lost = next_state(&sub, Lost);
    assert_eq!(lost.session_id, id);
}

/// An old server (3.5 knows no `addWatch`): to an opcode it does not know it answers
/// `Unimplemented` with zxid -1 and closes the connection (ZooKeeper's
/// `UnimplementedRequestProcessor`, straight from the request throttler, ahead of whatever is
/// still in its pipeline); everything else it answers as an `exists` that found a node,
/// except `exists("/slow")`, which stays in the pipeline. No old server is packaged here, so
/// this one is faked with the real one's bytes.
fn old_server() -> Fake {
    const ADD_WATCH: i32 = 106;
    Fake::serve(|_, mut s| {
        if read_frame(&mut s).is_none() || s.write_all(&connect_answer(false)).is_err() {
            return;
        }
        while let Some(req) = read_frame(&mut s) {
            let xid = i32::from_be_bytes([req[0], req[1], req[2], req[3]]);
            let op = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
            if op == ADD_WATCH {
                let mut b = Vec::new();
                b.extend_from_slice(&xid.to_be_bytes());
                // The request never entered the pipeline: zxid -1.
                b.extend_from_slice(&(-1i64).to_be_bytes());
                b.extend_from_slice(&(-6i32).to_be_bytes());
                let _ = s.write_all(&frame(&b));
                return;
            }
            if op == 3 && req.get(12..17) == Some(&b"/slow"[..]) {
                continue;
            }
            let record: &[u8] = if xid == -2 { &[] } else { &[0; 68] };
            if s.write_all(&reply(xid, record)).is_err() {
                return;
            }
        }
    })
}

/// Issue 20 item 10: an opcode an old server does not know cost every user of the client
/// its connection, on every call. Now once: the next call fails at once, unsent, and the
/// connection stays.
#[test]
fn an_opcode_an_old_server_does_not_know_costs_the_connection_once() {
    init_logs();
    let old = old_server();
    let (addr, connections) = (&old.addr, &old.connections);
    let client = Client::builder(addr)
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let sub = client.subscribe();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let unimplemented = |r: Result<(), Error>| matches!(r, Err(ref e) if e.is_code(zk_recipes::ZkCode::Unimplemented));
    let watch = || client.add_watch("/a", zk_recipes::AddWatchMode::Persistent, &tx);
    assert!(unimplemented(watch()));
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    let after_refusal = connections.load(Ordering::SeqCst);
    for _ in 0..3 {
        assert!(unimplemented(watch()));
    }
    // Still the same connection, which still serves.
    assert!(client.with_timeout(SOON).exists("/x").unwrap().is_some());
    assert_eq!(connections.load(Ordering::SeqCst), after_refusal);
    assert!(sub.try_recv().is_none(), "the connection was dropped again");
}

/// The review of item 10: an old server's refusal overtakes the requests still in its
/// pipeline (here a slow `exists`), which was taken for an answer out of order, so nothing
/// was remembered and every call cost the connection again.
#[test]
fn a_refusal_ahead_of_a_pending_answer_is_remembered() {
    init_logs();
    let old = old_server();
    let (addr, connections) = (&old.addr, &old.connections);
    // No retries: the refusal itself must reach the caller, not a retry's answer.
    let client = Client::builder(addr)
        .retry_policy(zk_recipes::RetryPolicy::never())
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let watch = || client.add_watch("/a", zk_recipes::AddWatchMode::Persistent, &tx);
    let unimplemented = |r: Result<(), Error>| matches!(r, Err(ref e) if e.is_code(zk_recipes::ZkCode::Unimplemented));
    let sub = client.subscribe();
    thread::scope(|s| {
        let slow = s.spawn(|| client.with_timeout(Duration::from_secs(1)).exists("/slow"));
        wait_for(SOON, || (client.metrics().requests >= 1).then_some(()))
            .expect("the slow read went out");
        assert!(unimplemented(watch()));
        let _ = slow.join();
    });
    // The server closed after its refusal: the client is back on a new connection.
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    let after_refusal = connections.load(Ordering::SeqCst);
    for _ in 0..3 {
        assert!(unimplemented(watch()));
    }
    assert_eq!(connections.load(Ordering::SeqCst), after_refusal);
}

/// The review of item 10: each server of an ensemble of old ones is remembered on its own;
/// the memory of one was dropped on attaching to the next, so every call cost a connection.
#[test]
fn each_old_server_costs_the_connection_once() {
    init_logs();
    let servers: Vec<_> = (0..3).map(|_| old_server()).collect();
    let connect_string: Vec<&str> = servers.iter().map(|f| f.addr.as_str()).collect();
    let client = Client::builder(&connect_string.join(","))
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let total = || -> usize { servers.iter().map(Fake::connections).sum() };
    for _ in 0..8 {
        let r = client.add_watch("/a", zk_recipes::AddWatchMode::Persistent, &tx);
        assert!(
            matches!(r, Err(ref e) if e.is_code(zk_recipes::ZkCode::Unimplemented)),
            "{r:?}"
        );
        client.wait_connected(SOON).unwrap();
    }
    // The first connection, then at most one more per server's refusal.
    assert!(total() <= 4, "{} connections for 8 calls", total());
}
