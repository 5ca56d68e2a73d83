//! Lock paths are containers: the server reaps them once the last contender is gone, and a
//! lock whose path was reaped makes it again (Curator's latch went idle there, CURATOR-724).
//! A private server checks for empty containers every 100 ms.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::testing::{ServerOptions, TestingServer};
use zk_recipes::{Client, InterProcessMutex, InterProcessSemaphoreV2, LeaderLatch};

fn reaping_server() -> TestingServer {
    init_logs();
    TestingServer::with_options(ServerOptions {
        container_check_interval: Some(Duration::from_millis(100)),
        ..server_options()
    })
    .unwrap()
}

fn reaped(client: &Client, path: &str) {
    wait_for(SOON, || {
        client.exists(path).unwrap().is_none().then_some(())
    })
    .unwrap_or_else(|| panic!("{path} was never reaped"));
}

#[test]
fn a_lock_path_and_its_new_ancestors_go_after_use_and_come_back_on_the_next_acquire() {
    let server = reaping_server();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let mutex = InterProcessMutex::new(&client, "/jobs/nightly").unwrap();
    drop(mutex.acquire().unwrap());
    reaped(&client, "/jobs/nightly");
    reaped(&client, "/jobs");
    // The same lock value, its path gone between two acquisitions.
    let guard = mutex
        .try_acquire_for(SOON)
        .unwrap()
        .expect("the path was not made again");
    assert!(guard.check().is_ok());
    drop(guard);
    // A semaphore's two folders and its own path go too.
    let sem = InterProcessSemaphoreV2::new(&client, "/limits/uploads", 2).unwrap();
    drop(sem.acquire().unwrap());
    reaped(&client, "/limits");
    assert!(sem.try_acquire_for(SOON).unwrap().is_some());
}

#[test]
fn a_leader_latch_joins_again_after_its_path_was_reaped() {
    let server = reaping_server();
    let client = connect(&server.connect_string(), Duration::from_secs(10));
    let first = LeaderLatch::new(&client, "/election", "a").unwrap();
    first.start().unwrap();
    assert!(first.await_leadership(SOON).unwrap());
    first.close();
    reaped(&client, "/election");
    let second = LeaderLatch::new(&client, "/election", "b").unwrap();
    second.start().unwrap();
    assert!(
        second.await_leadership(SOON).unwrap(),
        "the latch went idle after its path was reaped"
    );
}
