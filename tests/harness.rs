//! The test harness itself: servers start, stop and restart, never outlive their process, and
//! say how to install ZooKeeper when it is missing.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use zk_recipes::testing::{pid_alive, HarnessError, ServerOptions, TestingServer};

#[test]
fn server_starts_stops_and_restarts_on_the_same_port_with_the_same_data() {
    init_logs();
    let server = TestingServer::start().unwrap();
    let first_pid = server.pid().unwrap();
    let client = connect(&server.connect_string(), std::time::Duration::from_secs(10));
    client
        .create("/kept", b"data", zk_recipes::CreateMode::Persistent)
        .unwrap();
    client.close();

    server.stop();
    assert!(server.pid().is_none());
    assert!(wait_for(SOON, || (!pid_alive(first_pid)).then_some(())).is_some());
    assert!(
        server.four_letter("srvr").is_err(),
        "a stopped server answers nothing"
    );

    server.restart().unwrap();
    assert_ne!(server.pid(), Some(first_pid));
    let client = connect(&server.connect_string(), std::time::Duration::from_secs(10));
    assert_eq!(client.data("/kept").unwrap().0, b"data");
}

#[test]
fn a_wrong_classpath_is_a_clear_error_that_says_how_to_install_zookeeper() {
    let err = TestingServer::with_options(ServerOptions {
        classpath: Some("/nonexistent/zookeeper.jar".into()),
        ..Default::default()
    })
    .err()
    .expect("must not start");
    assert!(matches!(err, HarnessError::ZooKeeperMissing(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("apt-get install zookeeper"), "{msg}");
    assert!(msg.contains("/nonexistent/zookeeper.jar"), "{msg}");
}

#[test]
fn no_jvm_or_server_directory_outlives_the_test_binary_even_when_it_is_killed() {
    init_logs();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_a_server_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("ZKR_HARNESS_CHILD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let pid: u32 = lines
        .find_map(|l| {
            l.strip_prefix("JVM_PID=")
                .map(|p| p.trim().parse().unwrap())
        })
        .expect("the child never reported its server");
    let dir = lines
        .find_map(|l| l.strip_prefix("DIR=").map(std::path::PathBuf::from))
        .expect("the child never reported its directory");
    assert!(dir.exists());
    assert!(
        pid_alive(pid),
        "the child's JVM should run while the child does"
    );

    child.kill().unwrap(); // SIGKILL: no destructor runs in the child
    child.wait().unwrap();

    assert!(
        wait_for(SOON, || (!pid_alive(pid)).then_some(())).is_some(),
        "JVM {pid} outlived the process that started it"
    );
    assert!(
        wait_for(SOON, || (!dir.exists()).then_some(())).is_some(),
        "the killed process's server directory {} was left behind",
        dir.display()
    );
}

/// Run only by `no_jvm_or_server_directory_outlives_the_test_binary_even_when_it_is_killed`, in a child process.
#[test]
#[ignore = "child process of no_jvm_or_server_directory_outlives_the_test_binary_even_when_it_is_killed"]
fn child_holds_a_server_until_killed() {
    if std::env::var_os("ZKR_HARNESS_CHILD").is_none() {
        return;
    }
    let server = TestingServer::start().unwrap();
    println!("JVM_PID={}", server.pid().unwrap());
    println!("DIR={}", server.dir().display());
    // Wait to be killed; stdin is closed, so block on something that never comes.
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _ = rx.recv();
    drop(server);
}

#[test]
fn a_proxy_closes_the_sockets_of_connections_that_ended_on_their_own() {
    // In a child process of its own, so that no other test's descriptors are counted.
    let said = run_alone("child_counts_a_proxys_descriptors", "ZKR_PROXY_CHILD");
    assert!(said.contains("PROXY_CHILD_DONE"));
}

/// Run only by `a_proxy_closes_the_sockets_of_connections_that_ended_on_their_own`, in a child
/// process.
#[test]
#[ignore = "child process of a_proxy_closes_the_sockets_of_connections_that_ended_on_their_own"]
fn child_counts_a_proxys_descriptors() {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;
    use zk_recipes::testing::FaultProxy;

    if std::env::var_os("ZKR_PROXY_CHILD").is_none() {
        return;
    }
    // A target that answers every connection by closing it: each connection through the
    // proxy ends by itself, never by a cut.
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = FaultProxy::start(target.local_addr().unwrap()).unwrap();
    let before = open_descriptors();
    let rounds = 50;
    // Passing, and with the client's bytes not read (the request pump then reads nothing, so
    // only the other pump can see the end).
    for (mode, stall) in [("passing", false), ("stalled", true)] {
        if stall {
            proxy.stall_requests();
        }
        for _ in 0..rounds {
            let mut client = TcpStream::connect(proxy.addr()).unwrap();
            drop(target.accept().unwrap());
            // The proxy passes the end on: the client reads end-of-stream.
            let mut byte = [0u8; 1];
            assert_eq!(client.read(&mut byte).unwrap(), 0);
        }
        // The proxy's sockets of every ended connection (the accepted one and the one to the
        // target) are closed once its pumps notice, without a cut, a change of mode or the
        // proxy's drop.
        let settled = wait_for(Duration::from_secs(10), || {
            (open_descriptors() <= before).then_some(())
        });
        assert!(
            settled.is_some(),
            "{mode}: {} descriptors open after {rounds} ended connections, {before} before",
            open_descriptors()
        );
    }
    assert_eq!(proxy.accepted(), 2 * rounds);
    drop(proxy);
    println!("PROXY_CHILD_DONE");
}

/// A proxy's held-byte counts are the sum over its live connections, per direction, and forget
/// a connection that ended while holding (its bytes are gone with it).
#[test]
fn a_proxys_held_counts_add_up_its_connections_and_forget_ended_ones() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use zk_recipes::testing::FaultProxy;

    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = FaultProxy::start(target.local_addr().unwrap()).unwrap();
    proxy.hold_replies();
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for greeting in [&b"hello"[..], &b"hey"[..]] {
        clients.push(TcpStream::connect(proxy.addr()).unwrap());
        let (mut server_side, _) = target.accept().unwrap();
        server_side.write_all(greeting).unwrap();
        servers.push(server_side);
    }
    let both = wait_for(SOON, || (proxy.held_replies() == 8).then_some(()));
    assert!(both.is_some(), "held {}", proxy.held_replies());
    assert_eq!(proxy.held_requests(), 0);
    // The first connection ends on the server's side: the client hears the end, not the bytes.
    drop(servers.remove(0));
    let mut byte = [0u8; 1];
    assert_eq!(clients[0].read(&mut byte).unwrap(), 0);
    assert_eq!(proxy.held_replies(), 3);
    proxy.cut();
    assert_eq!(proxy.held_bytes(), 0);
}

/// A delayed proxy hands on every byte, in order and in both directions, none before its delay
/// from when the proxy read it; a heal hands on at once what still waits.
#[test]
fn a_delayed_proxy_delivers_every_byte_in_order_and_none_early() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};
    use zk_recipes::testing::FaultProxy;

    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = FaultProxy::start(target.local_addr().unwrap()).unwrap();
    let delay = Duration::from_millis(150);
    proxy.delay(delay);
    let mut client = TcpStream::connect(proxy.addr()).unwrap();
    let (mut server_side, _) = target.accept().unwrap();
    for i in 0..4u8 {
        let chunk = vec![i; 3000 + usize::from(i)];
        let sent = Instant::now();
        client.write_all(&chunk).unwrap();
        let mut got = vec![0u8; chunk.len()];
        server_side.read_exact(&mut got).unwrap();
        assert!(sent.elapsed() >= delay, "chunk {i} came early");
        assert_eq!(got, chunk, "chunk {i} changed on the way");
        let sent = Instant::now();
        server_side.write_all(&chunk[..10]).unwrap();
        let mut back = [0u8; 10];
        client.read_exact(&mut back).unwrap();
        assert!(sent.elapsed() >= delay, "reply {i} came early");
        assert_eq!(back, [i; 10]);
    }
    // Bytes sent just before the sender closes still arrive, late, then the end.
    let sent = Instant::now();
    server_side.write_all(b"bye").unwrap();
    server_side.shutdown(std::net::Shutdown::Write).unwrap();
    let mut last = Vec::new();
    client.read_to_end(&mut last).unwrap();
    assert_eq!(last, b"bye", "what came before the close was lost");
    assert!(sent.elapsed() >= delay, "the last bytes came early");
    // Waiting bytes go on a heal, whatever their delay was (on a new connection: the one
    // above ended).
    let mut client = TcpStream::connect(proxy.addr()).unwrap();
    let (mut server_side, _) = target.accept().unwrap();
    proxy.delay(Duration::from_secs(3600));
    client.write_all(b"late").unwrap();
    let waiting = wait_for(SOON, || (proxy.held_requests() == 4).then_some(()));
    assert!(waiting.is_some(), "held {}", proxy.held_requests());
    proxy.heal();
    let mut late = [0u8; 4];
    server_side.read_exact(&mut late).unwrap();
    assert_eq!(&late, b"late");
}

/// The clock-rate adversary is real: a server whose clocks run twice as fast (libfaketime in
/// its JVM) expires a silent session in about half its timeout by the machine's clock, where a
/// server at the machine's rate waits at least the timeout less the client's ping interval.
#[test]
fn a_server_whose_clock_runs_fast_expires_a_silent_session_early() {
    let server = TestingServer::with_options(ServerOptions {
        clock_rates: vec![2.0],
        ..server_options()
    })
    .expect("a server with a fast clock");
    let proxy = zk_recipes::testing::FaultProxy::start(server.addr()).expect("proxy");
    let timeout = std::time::Duration::from_secs(9);
    let held = connect(&proxy.connect_string(), timeout);
    let watcher = connect(&server.connect_string(), timeout);
    let path = root("fast-clock");
    held.create(&path, b"", zk_recipes::CreateMode::Ephemeral)
        .unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(watcher.exists_watch(&path, &tx).unwrap().is_some());

    proxy.blackhole();
    let silent = std::time::Instant::now();
    let event = rx.recv_timeout(SOON).expect("the node never went");
    let took = silent.elapsed();
    assert_eq!(event.kind, zk_recipes::WatchKind::Deleted);
    // At the machine's rate the session outlives the silence by at least two thirds of its
    // timeout (the client pings a third of the way); at twice the rate, by at most a half.
    assert!(
        took < timeout * 3 / 5,
        "a session expired {took:?} into the silence: the clock does not run fast"
    );
    proxy.heal();
}

/// Every planted bug still applies to today's tree (`git apply --check`): a plant whose code
/// moved stops being a test of the harness without anyone noticing (two had, until this test).
#[test]
fn every_planted_bug_still_applies_to_the_tree() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = std::path::Path::new(root).join("tests/jepsen/plants");
    let mut plants: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    plants.sort();
    assert!(plants.len() >= 10, "plants missing from {}", dir.display());
    let stale: Vec<String> = plants
        .iter()
        .filter(|p| {
            let checked = Command::new("git")
                .args(["apply", "--check", "--unsafe-paths"])
                .arg(p)
                .current_dir(root)
                .stderr(Stdio::null())
                .status()
                .expect("git, which tests/jepsen/plants.sh needs too");
            !checked.success()
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(stale.is_empty(), "plants that no longer apply: {stale:?}");
}
