//! A machine suspended while it holds a lock (a laptop's lid, a virtual machine frozen by its
//! host): the servers' clocks ran on meanwhile, so a lease must count the suspended time, which
//! `Instant` (CLOCK_MONOTONIC) does not see. The library keeps its bounds on CLOCK_BOOTTIME's
//! count of suspended time; here the suspend is made through that clock's seam
//! (`testing::suspend_lease_clock`), which moves it for the whole process: this binary holds
//! this one test alone.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::testing::suspend_lease_clock;
use zk_recipes::InterProcessMutex;

#[test]
fn a_suspend_past_the_bound_ends_the_lease_at_once_and_the_leader_renews_it_after() {
    init_logs();
    let client = connect(&server().connect_string(), Duration::from_secs(10));
    let mutex = InterProcessMutex::new(&client, &root("suspend")).expect("mutex");
    let guard = mutex.acquire().expect("acquire");
    guard.check().expect("valid once acquired");
    let until = guard.valid_until().expect("a bound");
    let session_until = client.session_valid_until().expect("a session bound");

    // The machine sleeps for longer than the bound had left: on resume, nothing of the old
    // bound may still vouch, though no event came and no `Instant` moved.
    let left = until.saturating_duration_since(Instant::now());
    suspend_lease_clock(left + Duration::from_secs(1));
    assert!(
        guard.check().is_err(),
        "a lease still valid after a suspend longer than its bound"
    );
    assert!(guard.valid_until().is_none_or(|u| u <= Instant::now()));
    let moved = client.session_valid_until().expect("a session bound");
    assert!(
        moved + left < session_until + Duration::from_millis(1),
        "the session's bound moved by less than the suspend: {:?} before, {:?} after",
        session_until,
        moved
    );

    // The session was never expired (the suspend was only the clock's): the next heartbeat the
    // leader answers, sent after the resume, vouches again.
    let renewed = wait_for(SOON, || guard.check().ok());
    assert!(
        renewed.is_some(),
        "the lease was not renewed after the resume"
    );
    guard.release().expect("release");
}
