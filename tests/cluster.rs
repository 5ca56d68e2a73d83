//! A client on a 3-server ensemble: it keeps its session when the member it talks to dies,
//! and its lease cannot be stretched by a follower cut off from the leader.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::testing::{ServerOptions, TestingCluster};
use zk_recipes::{ConnectionState::*, CreateMode, InterProcessMutex};

#[test]
fn session_survives_losing_the_leader_of_a_three_server_ensemble() {
    init_logs();
    let cluster = TestingCluster::start(3).unwrap();
    let leader = cluster
        .wait_for_leader(SOON)
        .expect("an ensemble elects a leader");
    // Talk to the leader only, so that killing it surely breaks our connection; the other
    // members are listed after it for the client to move to.
    let order: Vec<String> = std::iter::once(leader)
        .chain((0..3).filter(|&i| i != leader))
        .map(|i| cluster.addr(i).to_string())
        .collect();
    let client = connect(&order.join(","), Duration::from_secs(8));
    let id = client.session_id().unwrap();
    client.create("/e", b"", CreateMode::Ephemeral).unwrap();
    let sub = client.subscribe();

    cluster.kill(leader);

    assert_eq!(next_state(&sub, Suspended).session_id, id);
    assert_eq!(next_state(&sub, Reconnected).session_id, id);
    assert_eq!(client.exists("/e").unwrap().unwrap().ephemeral_owner, id.0);
    let new_leader = cluster
        .wait_for_leader(SOON)
        .expect("the survivors elect a leader");
    assert_ne!(new_leader, leader);

    cluster.restart(leader).unwrap();
    assert!(cluster.pid(leader).is_some());
}

/// A follower cut off from the leader goes on answering its clients (reads, pings) for
/// `syncLimit` ticks, while the leader may be expiring their sessions. The lease bound rests
/// only on answers that went through the leader (a sync heartbeat), so `check()` fails within
/// a session timeout of the cut, the earliest the leader could expire the session, although
/// the follower still answers.
#[test]
fn a_follower_cut_off_from_the_leader_cannot_stretch_the_lease() {
    init_logs();
    let cluster = TestingCluster::with_options(
        3,
        ServerOptions {
            // 100 ms ticks: the follower serves for 6 s after it last heard from the leader.
            sync_limit: 60,
            ..Default::default()
        },
    )
    .unwrap();
    let leader = cluster.wait_for_leader(SOON).expect("a leader");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let client = connect(&cluster.addr(follower).to_string(), Duration::from_secs(2));
    let timeout = client.session_timeout();
    let mutex = InterProcessMutex::new(&client, "/anchored").unwrap();
    let guard = mutex.acquire().unwrap();
    assert!(guard.check().is_ok());
    // A second client of the same follower that holds nothing, so has nothing pending at the
    // leader: it shows that the follower keeps serving reads after the cut. (The holder has
    // its lease heartbeat pending there, and the follower holds its session's later requests
    // behind it.)
    let plain = connect(&cluster.addr(follower).to_string(), Duration::from_secs(10));
    wait_for(SOON, || plain.exists("/").ok()).expect("the plain client never connected");

    // Freeze the other two members: the follower hears nothing from the leader any more.
    let others: Vec<usize> = (0..3).filter(|&i| i != follower).collect();
    let cut_at = Instant::now();
    for &i in &others {
        cluster.pause(i);
    }
    let failed_at =
        wait_for(SOON, || guard.check().is_err().then(Instant::now)).expect("check() never failed");
    let follower_answers = plain.with_timeout(Duration::from_secs(2)).exists("/");
    for &i in &others {
        cluster.resume(i);
    }
    assert!(
        failed_at - cut_at <= timeout,
        "check() held for {:?} after the cut; the leader could expire the session after {timeout:?}",
        failed_at - cut_at
    );
    assert!(
        follower_answers.is_ok(),
        "the follower should still answer when check() fails: {follower_answers:?}"
    );
}

/// Issue 19's first hole, as its adversary: a holder on a follower that has been idle (so the
/// leader last heard of its session a while ago) makes one write through the leader, and then
/// that follower is cut off from the other members while it keeps serving its clients. The
/// leader expires the session from the last touch that reached it, before the idle time; a
/// client on the majority side then gets the lock. Every `Ok` the old holder's `check()` gave
/// must come before that client's acquire returned.
#[test]
fn a_partitioned_follower_s_holder_stops_vouching_before_the_majority_grants_the_lock() {
    let HolderOnAFollower {
        cluster,
        follower,
        holder,
        contender,
        ..
    } = holder_on_a_follower();
    let path = root("partitioned-holder");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    let guard = held.acquire().unwrap();

    // Busy on the follower for a while (every read touches the session there), then idle
    // for less than the client's ping interval (2/9 of the session timeout), then one write
    // through the leader. The idle time is the adversary's choice, not a synchronisation.
    let busy_until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < busy_until {
        holder.exists("/").unwrap();
    }
    std::thread::sleep(Duration::from_millis(800));
    holder
        .create(&format!("{path}-write"), b"", CreateMode::Persistent)
        .unwrap();
    assert!(cluster.isolate(follower));
    // The follower still serves its clients.
    holder
        .exists("/")
        .expect("the isolated follower should still answer reads");

    let (failed_at, acquired_at) = vouching_race(&guard, &contender, &path);
    cluster.rejoin(follower);
    assert_vouched_before(failed_at, acquired_at);
}

/// A partitionable ensemble, a holder's client on one follower only, and a contender's on the
/// other two members (the majority side), both with 4 s sessions.
struct HolderOnAFollower {
    cluster: TestingCluster,
    leader: usize,
    follower: usize,
    holder: zk_recipes::Client,
    contender: zk_recipes::Client,
}

fn holder_on_a_follower() -> HolderOnAFollower {
    init_logs();
    let cluster = TestingCluster::partitionable(3, ServerOptions::default()).unwrap();
    let leader = cluster.wait_for_leader(SOON).expect("a leader");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let majority: Vec<String> = (0..3)
        .filter(|&i| i != follower)
        .map(|i| cluster.addr(i).to_string())
        .collect();
    let session = Duration::from_secs(4);
    let holder = connect(&cluster.addr(follower).to_string(), session);
    let contender = connect(&majority.join(","), session);
    HolderOnAFollower {
        cluster,
        leader,
        follower,
        holder,
        contender,
    }
}

/// The majority side's client queues for the lock at `path` while the old holder's `check()`
/// is sampled every millisecond. Returns when the old holder first stopped vouching (every
/// `Ok` came before) and when the other client's acquire returned.
fn vouching_race(
    guard: &zk_recipes::InterProcessMutexGuard<'_>,
    contender: &zk_recipes::Client,
    path: &str,
) -> (Instant, Instant) {
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            let other = InterProcessMutex::new(contender, path).unwrap();
            let taken = other.acquire().expect("the majority side takes the lock");
            let acquired_at = Instant::now();
            drop(taken);
            acquired_at
        });
        let give_up = Instant::now() + SOON;
        let failed_at = loop {
            if guard.check().is_err() || Instant::now() >= give_up {
                break Instant::now();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        (failed_at, other.join().unwrap())
    })
}

fn assert_vouched_before(failed_at: Instant, acquired_at: Instant) {
    eprintln!(
        "check() failed {:?} before the majority side got the lock",
        acquired_at.saturating_duration_since(failed_at)
    );
    assert!(
        failed_at < acquired_at,
        "the old holder's check() first failed {:?} after the majority side got the lock",
        failed_at - acquired_at
    );
}

/// A stalled leader (a long GC pause) pings no follower, so the touches a follower takes
/// meanwhile stay with it. A write sent during the stall waits in the leader's socket; the
/// follower is then cut off one way (the leader still reaches it, it no longer reaches the
/// leader), and the leader resumes: it answers the write, through the follower, without
/// having heard of any touch since the stall began, and later expires the session from the
/// touch before the stall. The answer must not let the holder vouch for the stall's touches.
#[test]
fn a_write_answered_after_a_leader_stall_does_not_vouch_for_touches_the_leader_missed() {
    let HolderOnAFollower {
        cluster,
        leader,
        follower,
        holder,
        contender,
    } = holder_on_a_follower();
    let path = root("stalled-leader");
    let held = InterProcessMutex::new(&holder, &path).unwrap();
    let guard = held.acquire().unwrap();

    cluster.pause(leader);
    // Busy on the follower while the leader is frozen: every read touches the session there,
    // and none of those touches reaches the leader. The length is the adversary's choice.
    let busy_until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < busy_until {
        holder.exists("/").unwrap();
    }
    let before = cluster
        .sent_bytes(follower, leader)
        .expect("a proxied link");
    let (failed_at, acquired_at) = std::thread::scope(|s| {
        let write =
            s.spawn(|| holder.create(&format!("{path}-write"), b"", CreateMode::Persistent));
        // The follower forwarded the write: it lies in the frozen leader's socket.
        wait_for(SOON, || {
            (cluster.sent_bytes(follower, leader) > Some(before)).then_some(())
        })
        .expect("the follower forwards the write");
        assert!(cluster.hold_sends(follower, leader));
        // The stall goes on past the write (the adversary's choice), then ends.
        std::thread::sleep(Duration::from_millis(300));
        cluster.resume(leader);
        write
            .join()
            .unwrap()
            .expect("the resumed leader answers the write");
        vouching_race(&guard, &contender, &path)
    });
    cluster.rejoin(follower);
    assert_vouched_before(failed_at, acquired_at);
}

/// Issue 20: read-only mode done fully. A member cut off from its quorum serves reads (with
/// `readonlymode.enabled`); a client that allows it is `ConnectedReadOnly` there, with a
/// session of that server's own. Once the quorum is back, the client takes a new session from
/// a read-write server (as the Java client does: a read-only session is never resumed there),
/// without a LOST for the session that was never the ensemble's.
#[test]
fn a_read_only_member_serves_reads_and_the_quorum_gives_a_new_session() {
    init_logs();
    // A read-only server makes local sessions only.
    let options = ServerOptions {
        system_properties: vec![("readonlymode.enabled".into(), "true".into())],
        config: vec![("localSessionsEnabled".into(), "true".into())],
        ..ServerOptions::default()
    };
    let cluster = TestingCluster::with_options(3, options).unwrap();
    cluster.wait_for_leader(SOON).expect("a leader");
    let setup = connect(&cluster.connect_string(), Duration::from_secs(10));
    let path = root("read-only");
    setup
        .create(&path, b"before", CreateMode::Persistent)
        .unwrap();
    setup.sync(&path).unwrap();
    drop(setup);
    let survivor = 0;
    cluster.kill(1);
    cluster.kill(2);
    // The survivor starts its read-only server a while after it lost the quorum.
    wait_for(SOON, || {
        zk_recipes::testing::four_letter(cluster.addr(survivor), "isro", Duration::from_secs(1))
            .ok()
            .filter(|a| a.trim() == "ro")
    })
    .expect("the survivor never served read-only");

    let (client, ro_session, sub) = read_only_client(&cluster.connect_string());
    assert_eq!(client.data(&path).unwrap().0, b"before");
    assert!(matches!(
        client.set_data(&path, b"no", None),
        Err(zk_recipes::Error::ZooKeeper {
            code: zk_recipes::ZkCode::NotReadOnly,
            ..
        })
    ));

    cluster.restart(1).unwrap();
    cluster.restart(2).unwrap();
    // Back on the quorum: a new session, no LOST.
    next_read_write_session(&client, &sub, ro_session, "no new session from the quorum");
    client.set_data(&path, b"after", None).unwrap();
    // Two sessions (the read-only server's, then the quorum's), and no loss between them.
    let m = client.metrics();
    assert_eq!((m.sessions, m.session_losses), (2, 0), "{m:?}");
}

/// Issue 20: a client on a read-only member keeps asking the other servers it knows whether
/// one serves read-write (`isro`, as the Java client does) and moves there by itself, while
/// the read-only member stays read-only (so no closing connection sent it away). The
/// read-write server here is a standalone one listed beside the cluster's survivor, behind a
/// proxy that refuses until the client is settled on the read-only member.
#[test]
fn a_client_on_a_read_only_member_moves_to_a_read_write_server_it_finds() {
    init_logs();
    let read_only_mode = ("readonlymode.enabled".to_string(), "true".to_string());
    let options = ServerOptions {
        system_properties: vec![read_only_mode.clone()],
        config: vec![("localSessionsEnabled".into(), "true".into())],
        ..ServerOptions::default()
    };
    let cluster = TestingCluster::with_options(3, options).unwrap();
    cluster.wait_for_leader(SOON).expect("a leader");
    let survivor = 0;
    cluster.kill(1);
    cluster.kill(2);
    let is_ro = |i| {
        zk_recipes::testing::four_letter(cluster.addr(i), "isro", Duration::from_secs(1))
            .ok()
            .filter(|a| a.trim() == "ro")
    };
    wait_for(SOON, || is_ro(survivor)).expect("the survivor never served read-only");
    // A read-write server answers `isro` only with read-only mode enabled, as a member of a
    // real ensemble that allows read-only clients has it.
    let writable = zk_recipes::testing::TestingServer::with_options(ServerOptions {
        system_properties: vec![read_only_mode],
        ..ServerOptions::default()
    })
    .unwrap();
    let proxy = zk_recipes::testing::FaultProxy::start(writable.addr()).unwrap();
    proxy.refuse();

    let (client, ro_session, sub) =
        read_only_client(&format!("{},{}", cluster.addr(survivor), proxy.addr()));

    proxy.heal();
    next_read_write_session(
        &client,
        &sub,
        ro_session,
        "the client never moved to the read-write server",
    );
    assert!(proxy.accepted() >= 2, "a probe and a session");
    client
        .create(&root("found-rw"), b"", CreateMode::Persistent)
        .unwrap();
    assert!(
        is_ro(survivor).is_some(),
        "the survivor stayed read-only: the client left by itself"
    );
}

/// Issue 21: a TLS-only, SASL-enforcing 3-member ensemble. A lock held through the loss of
/// the leader (every member drops its clients until a new one is elected) keeps its session,
/// TLS and SASL done again on the new connection; a contender takes the lock once it is
/// released.
#[test]
fn a_tls_only_sasl_enforcing_ensemble_keeps_a_hold_through_a_member_loss() {
    init_logs();
    let pki = common::pki::Pki::new("ensemble");
    let options = ServerOptions {
        tls: Some(pki.server(false)),
        sasl: Some(zk_recipes::testing::ServerSasl {
            users: vec![("ops".into(), "ops pw".into())],
            required: true,
            kerberos: None,
        }),
        ..ServerOptions::default()
    };
    let cluster = TestingCluster::with_options(3, options).unwrap();
    let leader = cluster.wait_for_leader(SOON).expect("a leader");
    let client_on = |first: usize| {
        let order: Vec<String> = std::iter::once(first)
            .chain((0..3).filter(|&i| i != first))
            .map(|i| cluster.addr(i).to_string())
            .collect();
        zk_recipes::Client::builder(&order.join(","))
            .session_timeout(Duration::from_secs(10))
            .tick_time(cluster.tick_time())
            .tls(zk_recipes::TlsOptions::new(pki.ca()))
            .sasl_digest("ops", "ops pw")
            .connect()
            .expect("a TLS and SASL session")
    };
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let holder = client_on(follower);
    let contender = client_on(follower);
    let path = root("secure-ensemble");
    let mutex = InterProcessMutex::new(&holder, &path).unwrap();
    let guard = mutex.try_acquire_for(SOON).unwrap().expect("the lock");
    let id = holder.session_id();
    let sub = holder.subscribe();

    cluster.kill(leader);
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    assert_eq!(holder.session_id(), id, "the same session");
    guard.check().expect("the hold survives the leader's loss");

    let theirs = InterProcessMutex::new(&contender, &path).unwrap();
    assert!(theirs.try_acquire_for(Duration::ZERO).unwrap().is_none());
    drop(guard);
    assert!(theirs.try_acquire_for(SOON).unwrap().is_some());
}

/// Issue 21: the ensemble's published configuration, and a new server list that leaves out
/// the client's server: the client moves to one of the new servers on the same session, and
/// a hold taken before the move stays valid.
#[test]
fn a_client_moves_to_a_new_server_list_without_losing_its_session() {
    init_logs();
    let cluster = TestingCluster::start(3).unwrap();
    cluster.wait_for_leader(SOON).expect("a leader");
    let (config, _) = connect(&cluster.connect_string(), Duration::from_secs(10))
        .ensemble_config()
        .unwrap();
    assert_eq!(config.servers.len(), 3, "{config:?}");

    // The client knows only member 0, through a proxy that shows where it connects.
    let proxy = zk_recipes::testing::FaultProxy::start(cluster.addr(0)).unwrap();
    let client = connect(&proxy.connect_string(), Duration::from_secs(10));
    let id = client.session_id();
    let path = root("moving");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    let guard = mutex.try_acquire_for(SOON).unwrap().expect("the lock");
    let sub = client.subscribe();

    let others = format!("{},{}", cluster.addr(1), cluster.addr(2));
    assert!(
        client.update_hosts(&others).unwrap(),
        "its server left: it must move"
    );
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    assert_eq!(client.session_id(), id, "the same session");
    // Nothing goes through the old server any more: cutting it off costs nothing.
    proxy.refuse();
    client.sync(&path).unwrap();
    assert!(
        sub.try_recv().is_none(),
        "the client was still on the old server"
    );
    guard.check().expect("the hold survives the move");
    assert!(client
        .update_hosts("127.0.0.1:1/elsewhere")
        .is_err_and(|e| matches!(e, zk_recipes::Error::BadArguments(_))));
}

/// Waits for the client's new session after it was read-only: never LOST (the read-only
/// session was never the ensemble's), a session other than `ro_session`, read-write.
fn next_read_write_session(
    client: &zk_recipes::Client,
    sub: &zk_recipes::Subscription,
    ro_session: zk_recipes::SessionId,
    what: &str,
) {
    let connected = loop {
        let e = sub.recv_timeout(SOON).unwrap_or_else(|| panic!("{what}"));
        assert_ne!(e.state, Lost, "LOST for a read-only session");
        if e.state == Connected {
            break e;
        }
    };
    assert_ne!(connected.session_id, ro_session);
    assert!(!client.is_read_only());
}

/// A client that allows read-only servers, attached to one: its session and events.
fn read_only_client(
    connect_string: &str,
) -> (
    zk_recipes::Client,
    zk_recipes::SessionId,
    zk_recipes::Subscription,
) {
    let client = zk_recipes::Client::builder(connect_string)
        .session_timeout(Duration::from_secs(10))
        .tick_time(Duration::from_millis(100))
        .allow_read_only(true)
        .connect()
        .unwrap();
    assert!(client.is_read_only());
    let ro_session = client.session_id().unwrap();
    let sub = client.subscribe();
    (client, ro_session, sub)
}
