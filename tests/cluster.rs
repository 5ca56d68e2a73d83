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
    // A plain client of the same follower, with nothing pending at the leader: it shows that
    // the follower keeps serving reads after the cut. (Ours has its lease heartbeat pending
    // there, and the follower holds its session's later requests behind it.)
    let plain = zookeeper::ZooKeeper::connect(
        &cluster.addr(follower).to_string(),
        Duration::from_secs(10),
        |_| {},
    )
    .unwrap();
    wait_for(SOON, || plain.exists("/", false).ok()).expect("the plain client never connected");

    // Freeze the other two members: the follower hears nothing from the leader any more.
    let others: Vec<usize> = (0..3).filter(|&i| i != follower).collect();
    let cut_at = Instant::now();
    for &i in &others {
        cluster.pause(i);
    }
    let failed_at =
        wait_for(SOON, || guard.check().is_err().then(Instant::now)).expect("check() never failed");
    let follower_answers = plain.exists("/", false);
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
