//! InterProcessReadWriteLock against a real server.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zk_recipes::lock::InterProcessReadWriteLock;
use zk_recipes::{Client, ConnectionState, Error};

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

fn children(c: &Client, path: &str) -> Vec<String> {
    let mut v = c.children(path).unwrap_or_default();
    v.sort();
    v
}

/// Counts who is inside, and every moment the rules were broken.
#[derive(Default)]
struct Checker {
    state: Mutex<(usize, usize, usize)>, // readers, writers, overlaps
}

impl Checker {
    fn enter(&self, writer: bool) {
        let mut s = self.state.lock().unwrap();
        if s.1 > 0 || (writer && s.0 > 0) {
            s.2 += 1;
        }
        if writer {
            s.1 += 1;
        } else {
            s.0 += 1;
        }
    }
    fn leave(&self, writer: bool) {
        let mut s = self.state.lock().unwrap();
        if writer {
            s.1 -= 1;
        } else {
            s.0 -= 1;
        }
    }
    fn overlaps(&self) -> usize {
        self.state.lock().unwrap().2
    }
}

#[test]
fn four_readers_hold_at_once() {
    let path = root("rw-readers");
    let all_in = Arc::new(Barrier::new(4));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (path, all_in) = (path.clone(), all_in.clone());
            thread::spawn(move || {
                let c = client();
                let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
                let guard = lock.read_lock().try_acquire_for(SOON).unwrap();
                assert!(guard.is_some(), "a reader was kept out by other readers");
                // Every reader holds its read lock here, at the same time.
                all_in.wait();
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn eight_clients_hundred_rounds_ten_percent_writes_never_overlap() {
    let path = root("rw-mixed");
    let checker = Arc::new(Checker::default());
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (path, checker) = (path.clone(), checker.clone());
            thread::spawn(move || {
                let c = client();
                let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
                for round in 0..100 {
                    let writer = (round + w) % 10 == 0;
                    let side = if writer {
                        lock.write_lock()
                    } else {
                        lock.read_lock()
                    };
                    let _g = side.acquire().unwrap();
                    checker.enter(writer);
                    thread::sleep(Duration::from_micros(300));
                    checker.leave(writer);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // That readers share is shown, without depending on timing, by four_readers_hold_at_once.
    assert_eq!(checker.overlaps(), 0, "a writer overlapped someone");
    assert!(children(&client(), &path).is_empty());
}

#[test]
fn a_queued_writer_is_not_starved_by_later_readers() {
    let path = root("rw-starve");
    let c = client();
    let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let first_read = lock.read_lock().acquire().unwrap();
    let (log_tx, log_rx) = mpsc::channel();

    let w = {
        let (path, log_tx) = (path.clone(), log_tx.clone());
        thread::spawn(move || {
            let c = client();
            let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
            let g = lock.write_lock().acquire().unwrap();
            log_tx.send("writer in").unwrap();
            thread::sleep(Duration::from_millis(50));
            log_tx.send("writer out").unwrap();
            drop(g);
        })
    };
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    let r = {
        let (path, log_tx) = (path.clone(), log_tx.clone());
        thread::spawn(move || {
            let c = client();
            let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
            let _g = lock.read_lock().acquire().unwrap();
            log_tx.send("late reader in").unwrap();
        })
    };
    wait_for(SOON, || (children(&c, &path).len() == 3).then_some(())).unwrap();
    assert!(
        log_rx.try_recv().is_err(),
        "someone got in past the first reader"
    );

    drop(first_read);
    let log: Vec<&str> = (0..3).map(|_| log_rx.recv_timeout(SOON).unwrap()).collect();
    assert_eq!(log, ["writer in", "writer out", "late reader in"]);
    w.join().unwrap();
    r.join().unwrap();
}

#[test]
fn downgrade_keeps_a_queued_writer_out_until_the_read_is_released() {
    let path = root("rw-downgrade");
    let c = client();
    let lock = Arc::new(InterProcessReadWriteLock::new(&c, &path).unwrap());
    let write = lock.write_lock().acquire().unwrap();
    // True from the downgrade until the read is released; the queued writer reads it the
    // moment it gets in, so a writer let in early is caught whatever the timing.
    let reading = Arc::new(AtomicBool::new(false));
    let (in_tx, in_rx) = mpsc::channel();
    let queued = {
        let (path, reading) = (path.clone(), reading.clone());
        thread::spawn(move || {
            let c = client();
            let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
            let _g = lock.write_lock().acquire().unwrap();
            in_tx.send(reading.load(Ordering::SeqCst)).unwrap();
        })
    };
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();

    // Another thread of this process gets no bypass while the write lock is held.
    let other = lock.clone();
    let bypass = thread::spawn(move || other.read_lock().try_acquire().unwrap().is_some());
    assert!(
        !bypass.join().unwrap(),
        "another thread read while the write lock was held"
    );

    let read = lock
        .read_lock()
        .try_acquire()
        .unwrap()
        .expect("downgrade is immediate");
    reading.store(true, Ordering::SeqCst);
    drop(write);
    // Still reading, and the queued writer waits behind our read node.
    assert!(read.is_held());
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    reading.store(false, Ordering::SeqCst);
    drop(read);
    let writer_saw_reading = in_rx
        .recv_timeout(SOON)
        .expect("the queued writer never got in");
    assert!(
        !writer_saw_reading,
        "the queued writer got in while the downgraded read was held"
    );
    queued.join().unwrap();
}

#[test]
fn upgrade_is_refused_at_once_without_creating_a_node() {
    let path = root("rw-upgrade");
    let c = client();
    let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let read = lock.read_lock().acquire().unwrap();
    let before = children(&c, &path);
    let err = lock.write_lock().acquire().unwrap_err();
    assert!(matches!(err, Error::LockUpgrade { .. }), "{err:?}");
    assert!(err.to_string().contains("release the read lock first"));
    assert!(matches!(
        lock.write_lock().try_acquire_for(SOON),
        Err(Error::LockUpgrade { .. })
    ));
    assert_eq!(children(&c, &path), before);
    drop(read);
    assert!(
        lock.write_lock().try_acquire().unwrap().is_some(),
        "after release, write works"
    );
}

#[test]
fn both_sides_are_reentrant_participants_split_by_kind_and_the_path_ends_clean() {
    let path = root("rw-reentrant");
    let c = client();
    let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
    {
        let w1 = lock.write_lock().acquire().unwrap();
        let w2 = lock.write_lock().acquire().unwrap();
        assert_eq!(children(&c, &path).len(), 1);
        drop(w1);
        assert_eq!(lock.write_lock().participant_nodes().unwrap().len(), 1);
        drop(w2);
    }
    let r1 = lock.read_lock().acquire().unwrap();
    let _r2 = lock.read_lock().acquire().unwrap();
    let other_client = client();
    let other = InterProcessReadWriteLock::new(&other_client, &path).unwrap();
    let _r3 = other.read_lock().acquire().unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting_writer = {
        let path = path.clone();
        thread::spawn(move || {
            let c = client();
            let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
            let g = lock.write_lock().acquire().unwrap();
            tx.send(()).unwrap();
            drop(g);
        })
    };
    wait_for(SOON, || (children(&c, &path).len() == 3).then_some(())).unwrap();
    let reads = lock.read_lock().participant_nodes().unwrap();
    let writes = lock.write_lock().participant_nodes().unwrap();
    assert_eq!((reads.len(), writes.len()), (2, 1));
    assert!(reads.iter().all(|n| n.contains("__READ__")));
    assert!(writes[0].contains("__WRIT__"));
    drop(r1);
    drop(_r2);
    drop(_r3);
    rx.recv_timeout(SOON).unwrap();
    waiting_writer.join().unwrap();
    other_client.close();
    c.close();
    assert!(children(&client(), &path).is_empty());
}

#[test]
fn when_the_writers_session_is_lost_a_reader_acquires_and_the_lost_guard_knows() {
    let f = faulty();
    let writer_client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let writer_lock = InterProcessReadWriteLock::new(&writer_client, "/rw-lost").unwrap();
    let write = writer_lock.write_lock().acquire().unwrap();
    let sub = writer_client.subscribe();

    f.proxy.blackhole();
    let reader_client = connect(&f.server.connect_string(), Duration::from_secs(10));
    let reader_lock = InterProcessReadWriteLock::new(&reader_client, "/rw-lost").unwrap();
    let read = reader_lock.read_lock().try_acquire_for(SOON).unwrap();
    assert!(read.is_some(), "the lost writer's lock was never freed");
    while sub.recv_timeout(SOON).expect("no LOST").state != ConnectionState::Lost {}
    assert!(!write.is_held());
    assert!(write.check().is_err());
    f.proxy.heal();
    assert!(matches!(write.release(), Err(Error::SessionLost { .. })));
}

#[test]
fn a_lost_write_hold_gives_no_read_while_another_client_writes() {
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    let path = "/rw-downgrade-after-loss";
    let lock = InterProcessReadWriteLock::new(&client, path).unwrap();
    let write = lock.write_lock().acquire().unwrap();
    expire_and_renew(&f, &client);
    let theirs = InterProcessReadWriteLock::new(&other, path).unwrap();
    let their_write = theirs
        .write_lock()
        .try_acquire_for(SOON)
        .unwrap()
        .expect("never freed");

    let read = lock.read_lock().try_acquire_for(Duration::from_secs(3));
    assert!(
        matches!(read, Err(Error::SessionLost { .. })),
        "a read built on a lost write hold: {:?}",
        read.map(|g| g.map(|g| g.node_path().to_string()))
    );
    assert!(matches!(write.downgrade(), Err(Error::SessionLost { .. })));
    assert!(their_write.check().is_ok());
}

/// Another client's writer, queued behind ours: takes the write lock, says so (`entered`),
/// waits for our word, then tells whether it still holds and what else the line holds.
fn their_writer(
    theirs: &InterProcessReadWriteLock,
    other: &Client,
    path: &str,
    entered: impl FnOnce(),
    go: mpsc::Receiver<()>,
) -> (bool, Vec<String>) {
    let guard = theirs
        .write_lock()
        .try_acquire_for(SOON)
        .unwrap()
        .expect("never freed");
    entered();
    go.recv().unwrap();
    let others: Vec<String> = children(other, path)
        .into_iter()
        .filter(|n| !guard.node_path().ends_with(n.as_str()))
        .collect();
    (guard.check().is_ok(), others)
}

/// A downgrade's read node is made on the write hold's session or not at all. Here the
/// session is lost between the downgrade's check of the write hold and the read node's create
/// (expired, and the client on a new session): another client's writer, queued behind the
/// write, is granted when the write's node goes, and a read node made on the new session would
/// be granted at once beside it (it is named to stand right behind the write). Found by the
/// partition harness: a writer and a downgraded read held together for 40 ms.
#[test]
fn a_downgrade_whose_session_is_lost_before_its_read_node_is_made_gives_no_read() {
    let f = Arc::new(faulty());
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(4));
    let other = connect(&f.server.connect_string(), Duration::from_secs(10));
    let path = "/rw-downgrade-session-lost-midway";
    let armed = Arc::new(AtomicBool::new(false));
    let options = {
        let (f, client, armed) = (f.clone(), client.clone(), armed.clone());
        zk_recipes::LockOptions::new().testing_before_create(move |node| {
            if node.contains("__READ__") && armed.swap(false, Ordering::SeqCst) {
                expire_and_renew(&f, &client);
            }
        })
    };
    let lock = InterProcessReadWriteLock::with_options(&client, path, options).unwrap();
    let write = lock.write_lock().acquire().unwrap();
    let lost = client.session_id().unwrap();
    // Another client's writer queues behind the write; once in, it waits for our word, then
    // tells whether it still holds and what the line holds besides it.
    let theirs = InterProcessReadWriteLock::new(&other, path).unwrap();
    let (in_tx, in_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        // Dropped with this closure, also when an assertion fails: their writer stops waiting.
        let go_tx = go_tx;
        let (theirs, other) = (&theirs, &other);
        let their_write =
            s.spawn(move || their_writer(theirs, other, path, || in_tx.send(()).unwrap(), go_rx));
        wait_for(SOON, || (children(other, path).len() == 2).then_some(()))
            .expect("their writer queues");
        armed.store(true, Ordering::SeqCst);
        let read = write.downgrade();
        assert!(
            matches!(read, Err(Error::SessionLost { session_id }) if session_id == lost),
            "a read on a new session: {:?}",
            read.map(|r| r.node_path().to_string())
        );
        in_rx.recv_timeout(SOON).expect("their writer never got in");
        go_tx.send(()).unwrap();
        let (held, others) = their_write.join().unwrap();
        assert!(held);
        // Nothing of ours is left in the line.
        assert!(others.is_empty(), "{others:?}");
    });
}

/// A downgrade whose write node is deleted by someone else (an operator, a revocation tool)
/// between the check of the write hold and the create of the read node, the session alive
/// throughout: another client's writer, queued behind the write, holds as soon as the write
/// node goes, so a read granted on the same session would stand beside it. The downgrade
/// checks the write node again after its create and refuses (reviewer's scenario).
#[test]
fn a_downgrade_whose_write_node_is_deleted_before_its_read_node_is_made_gives_no_read() {
    let ours = client();
    let other = client();
    let path = root("rw-downgrade-write-node-deleted");
    let their_in = Arc::new(AtomicBool::new(false));
    let write_node = Arc::new(Mutex::new(String::new()));
    let armed = Arc::new(AtomicBool::new(false));
    let options = {
        let (other, their_in, write_node, armed) = (
            other.clone(),
            their_in.clone(),
            write_node.clone(),
            armed.clone(),
        );
        zk_recipes::LockOptions::new().testing_before_create(move |node| {
            if node.contains("__READ__") && armed.swap(false, Ordering::SeqCst) {
                let doomed = write_node.lock().unwrap().clone();
                other.delete(&doomed).unwrap();
                wait_for(SOON, || their_in.load(Ordering::SeqCst).then_some(()))
                    .expect("their writer never got in");
            }
        })
    };
    let lock = InterProcessReadWriteLock::with_options(&ours, &path, options).unwrap();
    let write = lock.write_lock().acquire().unwrap();
    *write_node.lock().unwrap() = write.node_path().to_string();
    let session = ours.session_id().unwrap();
    let theirs = InterProcessReadWriteLock::new(&other, &path).unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        let go_tx = go_tx;
        let (theirs, other, path, their_in) = (&theirs, &other, &path, &their_in);
        let their_write = s.spawn(move || {
            their_writer(
                theirs,
                other,
                path,
                || their_in.store(true, Ordering::SeqCst),
                go_rx,
            )
        });
        wait_for(SOON, || (children(other, path).len() == 2).then_some(()))
            .expect("their writer queues");
        armed.store(true, Ordering::SeqCst);
        let read = write.downgrade();
        assert!(
            matches!(&read, Err(Error::NotHeld { node }) if *node == *write_node.lock().unwrap()),
            "a read beside their writer: {:?}",
            read.map(|r| r.node_path().to_string())
        );
        // The session was never lost: only the node went.
        assert_eq!(ours.session_id(), Some(session));
        go_tx.send(()).unwrap();
        let (held, others) = their_write.join().unwrap();
        assert!(held);
        // Nothing of ours is left in the line.
        assert!(others.is_empty(), "{others:?}");
    });
}

#[test]
fn write_guard_downgrade_keeps_a_queued_writer_out_until_the_read_is_released() {
    let c = client();
    let path = root("rw-downgrade-guard");
    let lock = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let write = lock.write_lock().acquire().unwrap();
    let other_client = client();
    let other = InterProcessReadWriteLock::new(&other_client, &path).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting_writer = thread::spawn(move || {
        let g = other.write_lock().acquire().unwrap();
        tx.send(()).unwrap();
        drop(g);
    });
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    let read = write.downgrade().unwrap();
    assert!(read.check().is_ok());
    assert!(
        lock.write_lock().participant_nodes().unwrap().len() == 1,
        "only the queued writer"
    );
    assert!(
        rx.try_recv().is_err(),
        "the queued writer got in past the downgraded read"
    );
    read.release().unwrap();
    rx.recv_timeout(SOON)
        .expect("the writer never got the lock");
    waiting_writer.join().unwrap();
    let read_guard = lock.read_lock().acquire().unwrap();
    assert!(matches!(
        read_guard.downgrade(),
        Err(Error::IllegalState(_))
    ));
}

/// Issue 19's eighth hole, first half: a read lock sharing a path with a plain mutex (say
/// `zk-lock --read` beside an `InterProcessMutex` holder) must treat the mutex's node as a
/// writer, not let the reader in beside it.
#[test]
fn a_reader_waits_for_a_plain_mutex_holder_on_the_same_path() {
    let c = client();
    let path = root("rw-mixed-mutex");
    let mutex = zk_recipes::InterProcessMutex::new(&c, &path).unwrap();
    let held = mutex.acquire().unwrap();
    let other = client();
    let rw = InterProcessReadWriteLock::new(&other, &path).unwrap();
    let read = rw
        .read_lock()
        .try_acquire_for(Duration::from_millis(500))
        .unwrap();
    assert!(read.is_none(), "a reader got in beside the mutex's holder");
    drop(held);
    assert!(rw.read_lock().try_acquire_for(SOON).unwrap().is_some());
}

/// The second half: a plain mutex queued right behind a writer must not take the fast
/// handoff when that writer downgrades: its read node lands between them.
#[test]
fn a_mutex_behind_a_writer_that_downgrades_waits_for_the_read() {
    let c = client();
    let path = root("rw-mixed-downgrade");
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let write = rw.write_lock().acquire().unwrap();
    let other_client = client();
    let other_id = other_client.session_id().unwrap();
    let (tx, rx) = mpsc::channel();
    let p = path.clone();
    let waiting = thread::spawn(move || {
        let mutex = zk_recipes::InterProcessMutex::new(&other_client, &p).unwrap();
        let g = mutex.acquire().unwrap();
        tx.send(()).unwrap();
        drop(g);
    });
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    let read = write.downgrade().unwrap();
    // The waiting mutex has seen the write node go: it now watches the read node (the
    // server's own list of watches says so), and does not hold.
    wait_for(SOON, || {
        watchers_of(read.node_path())
            .contains(&format!("0x{:x}", other_id.0))
            .then_some(())
    })
    .expect("the mutex never came to wait on the downgraded read");
    assert!(
        rx.try_recv().is_err(),
        "the mutex got in past the downgraded read"
    );
    drop(read);
    rx.recv_timeout(SOON).expect("the mutex never got the lock");
    waiting.join().unwrap();
}

/// Fencing tokens grow with every exclusive holder, across a downgrade too: the downgraded
/// read keeps its write's token, so the writer queued behind it (whose node is older than the
/// read node) still holds a newer token than anything the downgraded holder showed.
#[test]
fn a_downgraded_hold_keeps_its_write_token_below_the_next_writer_s() {
    let c = client();
    let path = root("rw-downgrade-token");
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let write = rw.write_lock().acquire().unwrap();
    let write_token = write.fencing_token().unwrap();
    let other_client = client();
    let other = InterProcessReadWriteLock::new(&other_client, &path).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting = thread::spawn(move || {
        let g = other.write_lock().acquire().unwrap();
        tx.send(g.fencing_token().unwrap()).unwrap();
        drop(g);
    });
    wait_for(SOON, || (children(&c, &path).len() == 2).then_some(())).unwrap();
    let read = write.downgrade().unwrap();
    assert_eq!(read.fencing_token().unwrap(), write_token);
    drop(read);
    let next = rx
        .recv_timeout(SOON)
        .expect("the writer never got the lock");
    assert!(next > write_token, "{next} after {write_token}");
    waiting.join().unwrap();
}

/// A reader behind two writers watches the nearer one, whose going does not free the lock:
/// the farther writer still holds. When the nearer one goes (its client closed), the reader
/// looks at the line again and watches the holder; it does not take the lock on the event.
#[test]
fn a_reader_behind_two_writers_does_not_go_when_the_nearer_one_leaves() {
    let path = root("rw-reader-behind-two-writers");
    let (c1, c2, c3) = (client(), client(), client());
    let held = InterProcessReadWriteLock::new(&c1, &path).unwrap();
    let first = held.write_lock().acquire().unwrap();
    let second = {
        let rw = InterProcessReadWriteLock::new(&c2, &path).unwrap();
        thread::spawn(move || drop(rw.write_lock().acquire()))
    };
    let queued = |n: usize| {
        wait_for(SOON, || {
            let line = children(&c1, &path);
            (line.len() == n).then_some(line)
        })
        .expect("the line never grew")
    };
    queued(2);
    let (tx, rx) = mpsc::channel();
    let reader = {
        let rw = InterProcessReadWriteLock::new(&c3, &path).unwrap();
        thread::spawn(move || {
            let guard = rw.read_lock().acquire().unwrap();
            tx.send(()).unwrap();
            drop(guard);
        })
    };
    let line = queued(3);
    let by_seq = |name: &String| name[name.len() - 10..].to_owned();
    let mut line_by_seq = line;
    line_by_seq.sort_by_key(by_seq);
    let (holder, nearer) = (
        format!("{path}/{}", line_by_seq[0]),
        format!("{path}/{}", line_by_seq[1]),
    );
    let reader_session = format!("0x{:x}", c3.session_id().unwrap().0);
    let watching = |target: &str| watchers_of(target).contains(&reader_session);
    assert!(
        wait_for(SOON, || watching(&nearer).then_some(())).is_some(),
        "the reader never watched the nearer writer"
    );

    c2.close();
    second.join().unwrap();
    let looked = wait_for(SOON, || {
        (watching(&holder) || rx.try_recv().is_ok()).then_some(watching(&holder))
    });
    assert_eq!(
        looked,
        Some(true),
        "the reader took the lock while the first writer held it"
    );
    assert!(
        rx.try_recv().is_err(),
        "a read while the first writer holds"
    );
    drop(first);
    rx.recv_timeout(SOON).expect("the reader never read");
    reader.join().unwrap();
}
