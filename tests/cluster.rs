//! A client on a 3-server ensemble keeps its session when the member it talks to dies.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::testing::TestingCluster;
use zk_recipes::{ConnectionState::*, CreateMode};

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
