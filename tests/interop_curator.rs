//! Interoperability with Apache Curator 5.4: Java and Rust contenders share one lock.
//!
//! A Java driver of ours (`tests/java/CuratorLockDriver.java`, compiled with `javac` at test
//! time against Debian's `libcurator-recipes-java`) holds Curator locks; the Rust side uses this
//! crate's on the same paths. Both sides stamp acquire/release with the wall clock in
//! microseconds, so their hold intervals compare on one clock. Without Java or the jars the
//! tests say so and pass as skipped, except under CI (`CI` set), where they must run.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use rstest::rstest;
use zk_recipes::lock::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex};
use zk_recipes::Client;

const JARS: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";

fn micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The compiled driver's class directory, or why there is none.
fn driver() -> Option<&'static PathBuf> {
    static DRIVER: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = DRIVER.get_or_init(|| {
        for jar in JARS.split(':') {
            if !std::path::Path::new(jar).exists() {
                return Err(format!(
                    "{jar} missing (apt-get install libcurator-recipes-java)"
                ));
            }
        }
        // Cargo's own scratch space for tests, so nothing is left in the system temp dir.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-driver");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let sources = [
            "CuratorLockDriver.java",
            "CuratorBarrierDriver.java",
            "CuratorGroupDriver.java",
            "CuratorCounterDriver.java",
            "CuratorQueueDriver.java",
            "CuratorTreeDriver.java",
        ]
        .map(|f| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/").to_string() + f);
        let status = Command::new("javac")
            .args(["-cp", JARS, "-d"])
            .arg(&dir)
            .args(sources)
            .status()
            .map_err(|e| format!("no javac ({e})"))?;
        if !status.success() {
            return Err("javac failed".into());
        }
        Ok(dir)
    });
    match built {
        Ok(dir) => Some(dir),
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("interop tests must run in CI: {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// In secure mode (`ZKR_TEST_SECURE=1`), how the Java client reaches the TLS-only,
/// SASL-requiring server: Netty with TLS (PEM trust store, as `ZKClientConfig` reads it from
/// system properties) and a JAAS `Client` section with the suite's SASL user; and the Netty
/// jars it needs on its classpath.
/// In Kerberos mode (`ZKR_TEST_KERBEROS=1`), a JAAS `Client` section with the suite's
/// principal and keytab, and the realm's configuration.
fn java_security() -> (Vec<String>, String) {
    if let Some(k) = kerberos() {
        let jaas = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("interop-krb5-jaas-{}.conf", std::process::id()));
        write_java_kerberos_jaas(&jaas, KERBEROS_CLIENT, &k.keytab);
        let mut args = vec![
            format!("-Djava.security.krb5.conf={}", k.kdc.krb5_conf().display()),
            format!("-Djava.security.auth.login.config={}", jaas.display()),
        ];
        let mut netty = String::new();
        if let Some(secure) = secure() {
            args.extend(java_tls(secure));
            netty = zk_recipes::testing::netty_classpath();
        }
        return (args, netty);
    }
    let Some(secure) = secure() else {
        return (Vec::new(), String::new());
    };
    let jaas = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("interop-jaas-{}.conf", std::process::id()));
    let (user, password) = SECURE_USER;
    write_java_client_jaas(&jaas, user, password);
    let mut args = java_tls(secure);
    args.push(format!(
        "-Djava.security.auth.login.config={}",
        jaas.display()
    ));
    let netty = zk_recipes::testing::netty_classpath();
    (args, netty)
}

/// The Java client's TLS settings for the suite's servers.
fn java_tls(secure: &Secure) -> Vec<String> {
    vec![
        "-Dzookeeper.client.secure=true".to_string(),
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty".into(),
        format!(
            "-Dzookeeper.ssl.trustStore.location={}",
            secure.pki.ca().display()
        ),
        "-Dzookeeper.ssl.trustStore.type=PEM".into(),
    ]
}

/// One Java process holding a Curator lock.
struct Java {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    acq: Vec<u64>,
    rel: Vec<u64>,
}

impl Java {
    fn start(
        dir: &std::path::Path,
        connect: &str,
        path: &str,
        kind: &str,
        rounds: u32,
        hold_ms: i64,
    ) -> Java {
        let (rounds, hold_ms) = (rounds.to_string(), hold_ms.to_string());
        Java::run(
            dir,
            "CuratorLockDriver",
            &[connect, path, kind, &rounds, &hold_ms],
        )
    }

    /// Runs the driver class `class` with `args`.
    fn run(dir: &std::path::Path, class: &str, args: &[&str]) -> Java {
        let (security, netty) = java_security();
        let cp = format!("{}:{JARS}{netty}", dir.display());
        let mut child = Command::new("java")
            .args(security)
            .args(["-cp", &cp, class])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("java");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let stdin = child.stdin.take();
        Java {
            child,
            stdin,
            lines,
            acq: Vec::new(),
            rel: Vec::new(),
        }
    }

    /// Reads lines until one starts with `what`; records ACQ/REL stamps on the way. Returns
    /// the line.
    fn wait(&mut self, what: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(SOON)
                .unwrap_or_else(|_| panic!("Java never said {what}"));
            if let Some(t) = line.strip_prefix("ACQ ") {
                self.acq.push(t.parse().unwrap());
            } else if let Some(t) = line.strip_prefix("REL ") {
                self.rel.push(t.parse().unwrap());
            }
            assert_ne!(line, "TIMEOUT", "the Curator lock timed out");
            if line.starts_with(what) {
                return line;
            }
        }
    }

    /// Lets a `hold_ms = -1` driver release its current round.
    fn release(&mut self) {
        self.say("go");
    }

    /// Writes `line` to the driver's standard input.
    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn intervals(&self) -> Vec<(u64, u64)> {
        self.acq
            .iter()
            .copied()
            .zip(self.rel.iter().copied())
            .collect()
    }
}

impl Drop for Java {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> Client {
    connect(&server().connect_string(), Duration::from_secs(10))
}

fn nodes(c: &Client, path: &str) -> usize {
    c.children(path).map_or(0, |v| v.len())
}

/// Holds one of our locks for `rounds` rounds of `hold`, recording wall-clock intervals.
fn rust_rounds(
    kind: &str,
    path: &str,
    rounds: u32,
    hold: Duration,
    out: Arc<Mutex<Vec<(u64, u64)>>>,
) -> thread::JoinHandle<()> {
    let (kind, path) = (kind.to_owned(), path.to_owned());
    thread::spawn(move || {
        let c = client();
        let record = |out: &Arc<Mutex<Vec<(u64, u64)>>>| {
            let a = micros();
            thread::sleep(hold);
            out.lock().unwrap().push((a, micros()));
        };
        match kind.as_str() {
            "mutex" => {
                let m = InterProcessMutex::new(&c, &path).unwrap();
                for _ in 0..rounds {
                    let _g = m.acquire().unwrap();
                    record(&out);
                }
            }
            "semaphore" => {
                let m = InterProcessSemaphoreMutex::new(&c, &path).unwrap();
                for _ in 0..rounds {
                    let _l = m.acquire().unwrap();
                    record(&out);
                }
            }
            "write" | "read" => {
                let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
                let side = if kind == "write" {
                    rw.write_lock()
                } else {
                    rw.read_lock()
                };
                for _ in 0..rounds {
                    let _g = side.acquire().unwrap();
                    record(&out);
                }
            }
            other => panic!("{other}"),
        }
    })
}

fn assert_no_overlap(mut all: Vec<(u64, u64)>) {
    all.sort();
    for w in all.windows(2) {
        assert!(w[1].0 >= w[0].1, "holds overlap: {:?} and {:?}", w[0], w[1]);
    }
}

#[rstest]
#[case::mutex_rust_first("mutex", true)]
#[case::mutex_java_first("mutex", false)]
#[case::semaphore_rust_first("semaphore", true)]
#[case::semaphore_java_first("semaphore", false)]
#[case::write_rust_first("write", true)]
#[case::write_java_first("write", false)]
fn exclusive_locks_are_shared_by_java_and_rust_without_overlap(
    #[case] kind: &str,
    #[case] rust_first: bool,
) {
    let Some(dir) = driver() else { return };
    let path = root(&format!("interop-{kind}"));
    let observer = client();
    let queue_dir = if kind == "semaphore" {
        format!("{path}/locks")
    } else {
        path.clone()
    };
    let rust = Arc::new(Mutex::new(Vec::new()));
    let (mut java, rust_thread);
    if rust_first {
        rust_thread = rust_rounds(kind, &path, 4, Duration::from_millis(40), rust.clone());
        wait_for(SOON, || {
            (!rust.lock().unwrap().is_empty() || nodes(&observer, &queue_dir) > 0).then_some(())
        })
        .expect("Rust never took the lock");
        java = Java::start(dir, &server().connect_string(), &path, kind, 4, 40);
    } else {
        java = Java::start(dir, &server().connect_string(), &path, kind, 4, 40);
        java.wait("ACQ");
        rust_thread = rust_rounds(kind, &path, 4, Duration::from_millis(40), rust.clone());
    }
    java.wait("DONE");
    rust_thread.join().unwrap();
    let ours = rust.lock().unwrap().clone();
    assert_eq!((ours.len(), java.intervals().len()), (4, 4));
    let mut all = ours;
    all.extend(java.intervals());
    assert_no_overlap(all);
}

#[test]
fn java_and_rust_readers_share_the_read_lock() {
    let Some(dir) = driver() else { return };
    let path = root("interop-readers");
    let c = client();
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let ours = rw.read_lock().acquire().unwrap();
    let held_from = micros();
    let mut java = Java::start(dir, &server().connect_string(), &path, "read", 1, 50);
    java.wait("DONE");
    let held_to = micros();
    drop(ours);
    let (a, r) = java.intervals()[0];
    assert!(
        a >= held_from && r <= held_to,
        "the Java reader did not read while we read"
    );
}

#[test]
fn a_java_writer_queued_behind_rust_readers_is_not_starved() {
    let Some(dir) = driver() else { return };
    let path = root("interop-java-writer");
    let c = client();
    let rw = InterProcessReadWriteLock::new(&c, &path).unwrap();
    let first = rw.read_lock().acquire().unwrap();
    let mut writer = Java::start(dir, &server().connect_string(), &path, "write", 1, 30);
    writer.wait("QUEUED");
    wait_for(SOON, || (nodes(&c, &path) == 2).then_some(())).expect("the Java writer never queued");
    let late = Arc::new(Mutex::new(Vec::new()));
    let late_reader = rust_rounds("read", &path, 1, Duration::from_millis(10), late.clone());
    wait_for(SOON, || (nodes(&c, &path) == 3).then_some(())).expect("the late reader never queued");
    drop(first);
    writer.wait("DONE");
    late_reader.join().unwrap();
    let (_, writer_released) = writer.intervals()[0];
    let (late_acquired, _) = late.lock().unwrap()[0];
    assert!(
        late_acquired >= writer_released,
        "a later Rust reader overtook the queued Java writer"
    );
}

#[test]
fn a_rust_writer_queued_behind_java_readers_is_not_starved() {
    let Some(dir) = driver() else { return };
    let path = root("interop-rust-writer");
    let c = client();
    let mut first = Java::start(dir, &server().connect_string(), &path, "read", 1, -1);
    first.wait("ACQ");
    let written = Arc::new(Mutex::new(Vec::new()));
    let writer = rust_rounds(
        "write",
        &path,
        1,
        Duration::from_millis(30),
        written.clone(),
    );
    wait_for(SOON, || (nodes(&c, &path) == 2).then_some(())).expect("the Rust writer never queued");
    let mut late = Java::start(dir, &server().connect_string(), &path, "read", 1, 10);
    late.wait("QUEUED");
    wait_for(SOON, || (nodes(&c, &path) == 3).then_some(()))
        .expect("the late Java reader never queued");
    first.release();
    late.wait("DONE");
    writer.join().unwrap();
    let (_, writer_released) = written.lock().unwrap()[0];
    let (late_acquired, _) = late.intervals()[0];
    assert!(
        late_acquired >= writer_released,
        "a later Java reader overtook the queued Rust writer"
    );
}

#[test]
fn the_queue_order_across_languages_follows_the_node_sequence() {
    let Some(dir) = driver() else { return };
    let path = root("interop-order");
    let c = client();
    let holder = InterProcessMutex::new(&c, &path).unwrap();
    let guard = holder.acquire().unwrap();
    let mut javas = Vec::new();
    let mut rusts = Vec::new();
    // Queue Java, Rust, Java, Rust, each only once the previous one stands in line.
    for i in 0..4 {
        if i % 2 == 0 {
            let mut j = Java::start(dir, &server().connect_string(), &path, "mutex", 1, 20);
            j.wait("QUEUED");
            javas.push(j);
        } else {
            let out = Arc::new(Mutex::new(Vec::new()));
            rusts.push((
                rust_rounds("mutex", &path, 1, Duration::from_millis(20), out.clone()),
                out,
            ));
        }
        wait_for(SOON, || (nodes(&c, &path) == i + 2).then_some(()))
            .expect("contender never queued");
    }
    drop(guard);
    for j in &mut javas {
        j.wait("DONE");
    }
    let mut starts = Vec::new();
    for (i, (t, out)) in rusts.into_iter().enumerate() {
        t.join().unwrap();
        starts.push((out.lock().unwrap()[0].0, 2 * i + 1));
    }
    for (i, j) in javas.iter().enumerate() {
        starts.push((j.intervals()[0].0, 2 * i));
    }
    starts.sort();
    let order: Vec<usize> = starts.into_iter().map(|s| s.1).collect();
    assert_eq!(
        order,
        [0, 1, 2, 3],
        "acquisition order did not follow the queue"
    );
}

#[test]
fn a_curator_holders_node_guards_rust_writes_while_it_holds() {
    let Some(dir) = driver() else { return };
    let path = root("interop-while-held");
    let rust = client();
    let target = format!("{path}-state");
    rust.create(&target, b"", zk_recipes::CreateMode::Persistent)
        .unwrap();
    let mut java = Java::start(dir, &server().connect_string(), &path, "mutex", 1, -1);
    java.wait("ACQ");
    let line = zk_recipes::lock::inspect(&rust, &path).unwrap();
    let holder = line
        .iter()
        .find(|e| e.holds)
        .expect("Curator holds the lock");
    let guarded = zk_recipes::WhileHeld::for_node(&rust, &holder.path);
    guarded
        .set_data(&target, b"while Curator holds", None)
        .unwrap();
    java.release();
    java.wait("DONE");
    let late = guarded.set_data(&target, b"after", None);
    assert!(
        matches!(late, Err(zk_recipes::Error::NotHeld { .. })),
        "{late:?}"
    );
    assert_eq!(rust.data(&target).unwrap().0, b"while Curator holds");
}

/// The wall-clock stamp at the end of a driver's line.
fn stamp(line: &str) -> u64 {
    line.rsplit(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap()
}

/// Curator and Rust members meet at one double barrier, each side on Curator's nodes: the
/// Curator member, in first, passes `enter` only after the last Rust member came; the Rust
/// members, leaving first, pass `leave` only after the Curator member began to leave.
#[test]
fn curator_and_rust_members_meet_at_one_double_barrier() {
    use zk_recipes::barriers::DistributedDoubleBarrier;
    let Some(dir) = driver() else { return };
    let path = root("interop-double-barrier");
    let connect = server().connect_string();
    let mut java = Java::run(
        dir,
        "CuratorBarrierDriver",
        &[&connect, "double", &path, "3"],
    );
    java.wait("ENTERING");
    let observer = client();
    wait_for(SOON, || (nodes(&observer, &path) == 1).then_some(()))
        .expect("the Curator member never entered");
    let clients: Vec<Client> = (0..2).map(|_| client()).collect();
    let barriers: Vec<Arc<DistributedDoubleBarrier>> = clients
        .iter()
        .map(|c| Arc::new(DistributedDoubleBarrier::new(c, &path, 3).unwrap()))
        .collect();
    let first = {
        let b = barriers[0].clone();
        thread::spawn(move || b.enter(SOON))
    };
    wait_for(SOON, || (nodes(&observer, &path) == 2).then_some(()))
        .expect("the first Rust member never entered");
    let last_came = micros();
    assert!(barriers[1].enter(SOON).unwrap());
    assert!(first.join().unwrap().unwrap());
    let entered = stamp(&java.wait("ENTERED"));
    assert!(
        entered >= last_came,
        "Curator passed enter {} µs before the last member came",
        last_came - entered
    );
    let leaving: Vec<_> = barriers
        .iter()
        .map(|b| {
            let b = b.clone();
            thread::spawn(move || (b.leave(SOON), micros()))
        })
        .collect();
    // Both Rust members wait: each has deleted its node, or (the lowest) watches the highest.
    for (b, c) in barriers.iter().zip(&clients) {
        wait_for(SOON, || {
            (b.node_path().is_none() || c.testing_watch_count() > 0).then_some(())
        })
        .expect("a Rust member never began to leave");
    }
    java.release();
    let java_leaving = stamp(&java.wait("LEAVING"));
    java.wait("LEFT");
    for l in leaving {
        let (left, at) = l.join().unwrap();
        assert!(left.unwrap());
        assert!(
            at >= java_leaving,
            "a Rust member passed leave before the Curator member began to leave"
        );
    }
    wait_for(SOON, || (nodes(&observer, &path) == 0).then_some(()))
        .expect("members or the ready node stayed");
}

/// A barrier set on one side holds the other side's waiter until it is removed, both ways.
#[test]
fn a_barrier_set_on_one_side_holds_the_other_side_until_removed() {
    use zk_recipes::barriers::DistributedBarrier;
    let Some(dir) = driver() else { return };
    let connect = server().connect_string();
    let ours = client();
    // Curator sets it; a Rust waiter waits; Curator removes it.
    let path = root("interop-barrier-curator");
    Java::run(dir, "CuratorBarrierDriver", &[&connect, "set", &path]).wait("DONE");
    let barrier = DistributedBarrier::new(&ours, &path).unwrap();
    assert!(barrier.is_set().unwrap());
    assert!(!barrier.wait_on_barrier(Duration::from_millis(200)).unwrap());
    let waiting = {
        let path = path.clone();
        thread::spawn(move || {
            let c = client();
            let passed = DistributedBarrier::new(&c, &path)
                .unwrap()
                .wait_on_barrier(SOON);
            (passed, micros())
        })
    };
    let mut remover = Java::run(dir, "CuratorBarrierDriver", &[&connect, "remove", &path]);
    let removed = stamp(&remover.wait("REMOVING"));
    remover.wait("DONE");
    let (passed, at) = waiting.join().unwrap();
    assert!(passed.unwrap());
    assert!(at >= removed, "the Rust waiter passed a set barrier");
    // Rust sets it; a Curator waiter waits; Rust removes it.
    let path = root("interop-barrier-rust");
    let barrier = DistributedBarrier::new(&ours, &path).unwrap();
    barrier.set_barrier().unwrap();
    let mut java = Java::run(dir, "CuratorBarrierDriver", &[&connect, "wait", &path]);
    java.wait("WAITING");
    let removed = micros();
    barrier.remove_barrier().unwrap();
    let passed = stamp(&java.wait("PASSED"));
    assert!(passed >= removed, "the Curator waiter passed a set barrier");
}

/// A Curator `GroupMember` and ours see each other (same nodes: `<path>/<id>`, the payload as
/// data), also as one leaves.
#[test]
fn curator_and_rust_group_members_see_each_other() {
    use zk_recipes::nodes::GroupMember;
    let Some(dir) = driver() else { return };
    let path = root("interop-group");
    let connect = server().connect_string();
    let mut java = Java::run(
        dir,
        "CuratorGroupDriver",
        &[&connect, &path, "curator", "pj"],
    );
    java.wait("READY");
    let ours = client();
    let me = GroupMember::new(&ours, &path, "rust", b"pr").unwrap();
    me.start().unwrap();
    assert!(me.wait_joined(SOON).unwrap());
    let (tx, rx) = crossbeam_channel::unbounded();
    while !me.watch_members(&tx).unwrap().contains_key("curator") {
        rx.recv_timeout(SOON)
            .expect("the Curator member never showed");
    }
    assert_eq!(me.current_members().unwrap()["curator"], b"pj");
    java.say("2");
    assert_eq!(java.wait("MEMBERS"), "MEMBERS curator=pj,rust=pr");
    // Curator's member leaves: ours sees it go.
    java.say("");
    java.wait("CLOSED");
    while me.watch_members(&tx).unwrap().contains_key("curator") {
        rx.recv_timeout(SOON)
            .expect("the Curator member never left");
    }
}

/// A Curator `InterProcessMultiLock` and ours over the same two paths (the constituent
/// mutexes are Curator's layout on both sides) take turns and never hold at once, nor
/// deadlock: ours takes its locks in path order, and Curator is given that order.
#[test]
fn curator_and_rust_multi_locks_over_the_same_paths_never_overlap() {
    use zk_recipes::lock::InterProcessMultiLock;
    let Some(dir) = driver() else { return };
    let (a, b) = (root("interop-multi-a"), root("interop-multi-b"));
    let both = format!("{a},{b}");
    let mut java = Java::start(dir, &server().connect_string(), &both, "multi", 4, 40);
    java.wait("ACQ");
    let ours = client();
    let multi = InterProcessMultiLock::new(&ours, &[&b, &a]).unwrap();
    let mut intervals = Vec::new();
    for _ in 0..4 {
        let guard = multi
            .try_acquire_for(SOON)
            .unwrap()
            .expect("ours never took the set");
        let start = micros();
        guard.check().unwrap();
        // The hold's length (a stand-in for work), not a synchronisation.
        thread::sleep(Duration::from_millis(40));
        intervals.push((start, micros()));
        guard.release().unwrap();
    }
    java.wait("DONE");
    assert_eq!(java.intervals().len(), 4);
    intervals.extend(java.intervals());
    assert_no_overlap(intervals);
}

/// The values a driver's line lists after `word`.
fn listed(line: &str, word: &str) -> Vec<i64> {
    line.trim_start_matches(word)
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// A Curator `DistributedAtomicLong` and ours increment one counter at once (8 bytes,
/// big-endian, on both sides), both falling back on the same promoted lock: no value is
/// returned twice, across the two, and the counter ends at the number made.
#[test]
fn curator_and_rust_increment_one_counter_without_a_value_twice() {
    use zk_recipes::atomic::{DistributedAtomicLong, PromotedToLock};
    let Some(dir) = driver() else { return };
    let path = root("interop-long");
    let connect = server().connect_string();
    let mut java = Java::run(
        dir,
        "CuratorCounterDriver",
        &[&connect, &path, &format!("{path}-count")],
    );
    java.wait("READY");
    const EACH: usize = 150;
    java.say(&format!("inc {EACH}"));
    let ours = client();
    let retry =
        zk_recipes::RetryPolicy::exponential(Duration::from_millis(1), Duration::from_millis(5))
            .max_retries(3);
    let counter = DistributedAtomicLong::new(&ours, &path, retry.clone())
        .unwrap()
        .with_promotion(PromotedToLock::new(&format!("{path}-lock")).retry(retry.max_retries(50)))
        .unwrap();
    let mut made: Vec<i64> = (0..EACH)
        .filter_map(|_| {
            let v = counter.increment().unwrap();
            v.succeeded.then_some(v.post_value)
        })
        .collect();
    made.extend(listed(&java.wait("MADE"), "MADE "));
    let distinct: std::collections::BTreeSet<i64> = made.iter().copied().collect();
    assert_eq!(distinct.len(), made.len(), "a value was returned twice");
    assert_eq!(counter.get().unwrap().pre_value, made.len() as i64);
    assert!(
        made.len() > EACH,
        "too few increments were made: {}",
        made.len()
    );
}

/// A Curator `SharedCount` and ours raise one count by compare-and-set at once (4 bytes,
/// big-endian, on both sides): every raise is counted once.
#[test]
fn curator_and_rust_raise_one_shared_count_by_compare_and_set() {
    use zk_recipes::shared::SharedCount;
    let Some(dir) = driver() else { return };
    let path = root("interop-count");
    let connect = server().connect_string();
    let mut java = Java::run(
        dir,
        "CuratorCounterDriver",
        &[&connect, &format!("{path}-long"), &path],
    );
    java.wait("READY");
    const EACH: usize = 100;
    java.say(&format!("count {EACH}"));
    let count = SharedCount::new(&client(), &path, 0).unwrap();
    count.start().unwrap();
    let mut made = Vec::new();
    for _ in 0..EACH {
        loop {
            let seen = count.versioned_count().unwrap();
            if count.try_set_count(&seen, seen.value + 1).unwrap() {
                made.push(i64::from(seen.value) + 1);
                break;
            }
        }
    }
    made.extend(listed(&java.wait("COUNTED"), "COUNTED "));
    let distinct: std::collections::BTreeSet<i64> = made.iter().copied().collect();
    assert_eq!(distinct.len(), 2 * EACH, "a raise was counted twice");
    assert_eq!(distinct.last().copied(), Some(2 * EACH as i64));
    let last = wait_for(SOON, || {
        let n = count.count().ok()?;
        (n == 2 * EACH as i32).then_some(n)
    });
    assert!(last.is_some(), "ours never showed the final count");
}

/// The items a consumer driver printed (`ITEM x` lines) until `n` came, in order.
fn items_from(java: &mut Java, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| java.wait("ITEM ").trim_start_matches("ITEM ").to_owned())
        .collect()
}

/// A Curator producer feeds our consumers: single puts and a `putMulti` (one node, two items),
/// taken at least once and exactly once, first in first out, the multi's items together.
#[test]
fn curator_puts_and_rust_takes_from_one_queue() {
    use zk_recipes::queue::DistributedQueue;
    let Some(dir) = driver() else { return };
    let path = root("interop-queue-in");
    let connect = server().connect_string();
    let mut java = Java::run(
        dir,
        "CuratorQueueDriver",
        &[&connect, &path, &format!("{path}-locks"), "producer"],
    );
    java.wait("READY");
    java.say("put 20 c");
    java.wait("PUT");
    java.say("multi x,y");
    java.wait("PUT");
    let queue = DistributedQueue::new(&client(), &path).unwrap();
    let mut got: Vec<Vec<String>> = Vec::new();
    for k in 0.. {
        let items = if k % 2 == 0 {
            match queue.take_once(Duration::ZERO).unwrap() {
                Some(item) => item.into_items(),
                None => break,
            }
        } else {
            match queue.take(Duration::ZERO).unwrap() {
                Some(taken) => {
                    let items = taken.items().to_vec();
                    taken.done().unwrap();
                    items
                }
                None => break,
            }
        };
        got.push(
            items
                .iter()
                .map(|i| String::from_utf8_lossy(i).into_owned())
                .collect(),
        );
    }
    let mut want: Vec<Vec<String>> = (0..20).map(|i| vec![format!("c-{i}")]).collect();
    want.push(vec!["x".into(), "y".into()]);
    assert_eq!(got, want);
}

/// Our producer feeds a Curator consumer (safe mode, same lock path): single puts and a
/// batch, each item consumed once, the queue and its locks empty after.
#[test]
fn rust_puts_and_a_curator_consumer_takes_each_item_once() {
    use zk_recipes::queue::DistributedQueue;
    let Some(dir) = driver() else { return };
    let path = root("interop-queue-out");
    let locks = format!("{path}-locks");
    let connect = server().connect_string();
    let ours = client();
    let queue = DistributedQueue::new(&ours, &path).unwrap();
    for i in 0..20 {
        queue.put(format!("r-{i}").as_bytes()).unwrap();
    }
    let batch: Vec<Vec<u8>> = (20..30).map(|i| format!("r-{i}").into_bytes()).collect();
    queue.put_all(&batch).unwrap();
    queue.put_multi(&[b"m-0".as_slice(), b"m-1"]).unwrap();
    let mut java = Java::run(
        dir,
        "CuratorQueueDriver",
        &[&connect, &path, &locks, "consumer"],
    );
    java.wait("READY");
    let got = items_from(&mut java, 32);
    let mut want: Vec<String> = (0..30).map(|i| format!("r-{i}")).collect();
    want.extend(["m-0".to_owned(), "m-1".to_owned()]);
    assert_eq!(got, want, "out of order, lost or twice");
    assert!(wait_children(&ours, &path, SOON, <[String]>::is_empty));
    assert!(wait_children(&ours, &locks, SOON, <[String]>::is_empty));
}

/// A Curator safe-mode consumer and our exactly-once consumer drain one queue together: the
/// locks keep them apart, so no item is consumed twice and none is lost.
#[test]
fn a_curator_consumer_and_ours_share_a_queue_and_no_item_is_taken_twice() {
    use zk_recipes::queue::DistributedQueue;
    let Some(dir) = driver() else { return };
    let path = root("interop-queue-shared");
    let locks = format!("{path}-locks");
    let connect = server().connect_string();
    let ours = client();
    let queue = DistributedQueue::new(&ours, &path).unwrap();
    const N: usize = 200;
    let items: Vec<Vec<u8>> = (0..N).map(|i| format!("s-{i}").into_bytes()).collect();
    for chunk in items.chunks(50) {
        queue.put_all(chunk).unwrap();
    }
    let mut java = Java::run(
        dir,
        "CuratorQueueDriver",
        &[&connect, &path, &locks, "consumer"],
    );
    java.wait("READY");
    // Curator's consumer is under way (it has consumed one) before ours starts: both take.
    let mut theirs: Vec<String> = items_from(&mut java, 1);
    let mut taken: Vec<String> = Vec::new();
    while let Some(item) = queue.take_once(Duration::from_millis(500)).unwrap() {
        taken.extend(
            item.items()
                .iter()
                .map(|i| String::from_utf8_lossy(i).into_owned()),
        );
    }
    // Whatever we did not take, Curator did: once the queue is empty, Curator is stopped
    // (its standard input closed) and everything it printed is read.
    assert!(wait_children(&ours, &path, SOON, <[String]>::is_empty));
    drop(java.stdin.take());
    loop {
        match java.lines.recv_timeout(SOON) {
            Ok(line) => theirs.extend(line.strip_prefix("ITEM ").map(str::to_owned)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the Curator consumer did not end"),
        }
    }
    let mut all: Vec<String> = taken.iter().chain(&theirs).cloned().collect();
    all.sort();
    let count = all.len();
    all.dedup();
    assert_eq!(count, all.len(), "an item was taken twice");
    assert_eq!(all.len(), N, "an item was lost");
    assert!(
        !taken.is_empty(),
        "ours took nothing: the test shows no sharing"
    );
    assert!(
        !theirs.is_empty(),
        "Curator took nothing: the test shows no sharing"
    );
}

/// Our `CuratorCache` of a tree Curator writes: built while Curator grows it, followed while
/// Curator changes it (data set, leaves and whole branches deleted, nodes made again), it ends
/// equal to the server's tree, and no node it showed ever went back.
#[test]
fn our_cache_of_a_tree_curator_writes_converges_and_never_goes_back() {
    use std::collections::{BTreeMap, HashMap};
    use zk_recipes::cache::{CacheEvent, CacheOptions, CuratorCache};
    let Some(dir) = driver() else { return };
    let root = root("interop-cache");
    let ours = client();
    ours.ensure_path(&root).unwrap();
    let cache = CuratorCache::new(&ours, &root, CacheOptions::new()).unwrap();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    cache.add_listener(move |e| h.lock().unwrap().push(e.clone()));
    cache.start().unwrap();
    let mut java = Java::run(
        dir,
        "CuratorTreeDriver",
        &[&server().connect_string(), &root],
    );
    java.wait("READY");
    java.say("grow 300");
    java.wait("DONE");
    java.say("churn 600 7");
    java.wait("DONE");
    let tree = |c: &Client| {
        let mut out = BTreeMap::new();
        let mut todo = vec![root.clone()];
        while let Some(p) = todo.pop() {
            let Ok((data, _)) = c.data(&p) else { continue };
            out.insert(p.clone(), data);
            for child in c.children(&p).unwrap_or_default() {
                todo.push(format!("{p}/{child}"));
            }
        }
        out
    };
    let cached = || -> BTreeMap<String, Vec<u8>> {
        cache
            .nodes()
            .into_iter()
            .map(|n| (n.path, n.data.map(|d| d.to_vec()).unwrap_or_default()))
            .collect()
    };
    let want = tree(&ours);
    assert!(
        want.len() > 100,
        "Curator's tree is too small to show much: {}",
        want.len()
    );
    assert!(
        wait_for(SOON, || (cache.is_current() && cached() == want)
            .then_some(()))
        .is_some(),
        "the cache did not converge to the tree Curator wrote"
    );
    let mut last: HashMap<String, (i64, i64)> = HashMap::new();
    for e in heard.lock().unwrap().iter() {
        let (path, at, deleted) = match e {
            CacheEvent::Created(n) => (&n.path, (n.stat.czxid, n.stat.mzxid), false),
            CacheEvent::Changed { new, .. } => (&new.path, (new.stat.czxid, new.stat.mzxid), false),
            CacheEvent::Deleted(n) => (&n.path, (n.stat.czxid, n.stat.mzxid), true),
            _ => continue,
        };
        if let Some(before) = last.get(path) {
            assert!(
                at > *before || (deleted && at == *before),
                "{path} went back: {before:?} then {at:?}"
            );
        }
        last.insert(path.clone(), at);
    }
    cache.close();
}
