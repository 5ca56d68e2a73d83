//! A paused "zombie" holder cannot damage the resource after another process took the lock.
//!
//! The first holder's network stalls (a fault proxy holds its bytes) longer than its session.
//! Its lease check fails on its own clock, the server hands the lock to a second process, and
//! when the zombie wakes and tries to write with its old fencing token, the resource's
//! `FencingGate` refuses the write.
//!
//! ```text
//! cargo run -p zk-recipes-examples --example fencing
//! ```

use std::time::{Duration, Instant};

use zk_recipes::lock::{FencingGate, InterProcessMutex};
use zk_recipes::testing::{FaultProxy, TestingServer};
use zk_recipes::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("error,zookeeper=off"),
    )
    .init();
    let server = TestingServer::start()?;
    let proxy = FaultProxy::start(server.addr())?;
    let storage = FencingGate::new(); // stands in for the resource the lock protects

    let zombie_client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(2))
        .tick_time(server.tick_time())
        .connect()?;
    let zombie_lock = InterProcessMutex::new(&zombie_client, "/examples/fencing")?;
    let zombie = zombie_lock.acquire()?;
    let zombie_token = zombie.fencing_token()?;
    storage.admit(zombie_token)?;
    println!("zombie holds the lock, token {zombie_token}, and writes: accepted");

    println!("zombie's network stalls (every byte held)...");
    proxy.blackhole();
    let stalled = Instant::now();
    while zombie.check().is_ok() {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "zombie's own lease check fails after {:?}, although no event has reached it (is_held() = {})",
        stalled.elapsed(),
        zombie.is_held()
    );

    let next_client = Client::builder(&server.connect_string()).connect()?;
    let next_lock = InterProcessMutex::new(&next_client, "/examples/fencing")?;
    let next = next_lock
        .try_acquire_for(Duration::from_secs(30))?
        .ok_or("the lock was never freed")?;
    let next_token = next.fencing_token()?;
    storage.admit(next_token)?;
    println!("the server expired the zombie; the next holder has token {next_token} and writes: accepted");

    proxy.heal();
    match storage.admit(zombie_token) {
        Ok(()) => println!("zombie's late write was accepted: THIS MUST NOT HAPPEN"),
        Err(refused) => {
            println!("zombie wakes and writes with token {zombie_token}: refused ({refused})")
        }
    }
    match zombie.release() {
        Ok(()) => {
            println!("zombie's release says it held the lock throughout: THIS MUST NOT HAPPEN")
        }
        Err(e) => println!("zombie's release reports the loss: {e}"),
    }
    Ok(())
}
