//! A machine suspended while it holds a lock (a laptop's lid, a virtual machine frozen by its
//! host): the servers' clocks ran on meanwhile, so a lease must count the suspended time, which
//! `Instant` (CLOCK_MONOTONIC) does not see. The library keeps its bounds on CLOCK_BOOTTIME's
//! count of suspended time; here the suspend is made through that clock's seam
//! (`testing::suspend_lease_clock`), which moves it for the whole process: the tests of this
//! binary take turns.

mod common;

use std::time::{Duration, Instant};

use common::*;
use parking_lot::Mutex;
use zk_recipes::leader::LeaderLatch;
use zk_recipes::lock::InterProcessReadWriteLock;
use zk_recipes::testing::suspend_lease_clock;
use zk_recipes::InterProcessMutex;

/// The seam moves the clock for the whole process: one test at a time.
static SEAM: Mutex<()> = Mutex::new(());

#[test]
fn a_suspend_past_the_bound_ends_the_lease_at_once_and_the_leader_renews_it_after() {
    let _one_at_a_time = SEAM.lock();
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

/// A latch whose line token was lost to a suspension (SUSPENDED, then back on the same
/// session) and whose lease bound then runs out while it stays first in line: nothing else
/// holds a live token, so unless the latch keeps one while it waits to lead again, no heartbeat
/// goes out, the bound never comes back, and it never leads again (nor does anyone behind it).
#[test]
fn a_latch_first_in_line_whose_bound_ran_out_leads_again() {
    let _one_at_a_time = SEAM.lock();
    let faulty = faulty();
    let client = connect(&faulty.proxy.connect_string(), Duration::from_secs(4));
    let latch = LeaderLatch::new(&client, &root("latch-after-lapse"), "only").expect("latch");
    latch.start().expect("start");
    assert!(latch.await_leadership(SOON).expect("await"));
    // SUSPENDED and back on the same session: the latch's place in line keeps a lost token.
    faulty.proxy.cut();
    assert!(
        latch.await_leadership(SOON).expect("await"),
        "not leading again after the reconnect"
    );
    // The bound runs out while the connection lives on.
    suspend_lease_clock(client.session_timeout());
    assert!(
        latch.await_leadership(SOON).expect("await"),
        "first in line on a live session, yet never leading again"
    );
    latch.close();
}

/// The bound, not an event, ends leadership: right after a suspend past the bound (nothing
/// told the latch: no event, no answer), `has_leadership()` says no.
#[test]
fn a_latch_whose_bound_ran_out_in_a_suspend_does_not_lead() {
    let _one_at_a_time = SEAM.lock();
    let client = connect(&server().connect_string(), Duration::from_secs(4));
    let latch = LeaderLatch::new(&client, &root("latch-suspended"), "only").expect("latch");
    latch.start().expect("start");
    assert!(latch.await_leadership(SOON).expect("await"));
    suspend_lease_clock(client.session_timeout() + Duration::from_secs(1));
    assert!(
        !latch.has_leadership(),
        "a latch leads past its lease bound"
    );
    latch.close();
}

/// A downgrade looks at the write hold's bound once more after its look at the write node
/// was answered: the bound may run out while that look is on the wire (here a suspend lands
/// right then). No read hold comes of a write hold whose bound ran out.
#[test]
fn a_downgrade_whose_bound_runs_out_during_its_look_at_the_write_node_gives_no_read() {
    let _one_at_a_time = SEAM.lock();
    let client = connect(&server().connect_string(), Duration::from_secs(4));
    let past_the_bound = client.session_timeout() + Duration::from_secs(1);
    let options = zk_recipes::LockOptions::new()
        .testing_after_look(move |_| suspend_lease_clock(past_the_bound));
    let rw = InterProcessReadWriteLock::with_options(&client, &root("downgrade-look"), options)
        .expect("lock");
    let write = rw.write_lock().acquire().expect("write");
    write.check().expect("valid before the downgrade");
    let read = write.downgrade();
    assert!(
        read.is_err(),
        "a read hold on a write hold whose bound ran out during the downgrade"
    );
}
