//! Several workers, each with its own ZooKeeper session, take turns on one lock.
//!
//! ```text
//! cargo run -p zk-recipes-examples --example mutex                    # starts its own ZooKeeper
//! ZK_CONNECT=127.0.0.1:2181 cargo run -p zk-recipes-examples --example mutex
//! ```

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::lock::{InterProcessMutex, LockOptions};
use zk_recipes::testing::TestingServer;
use zk_recipes::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,zookeeper=off"),
    )
    .init();
    let _server;
    let connect = match std::env::var("ZK_CONNECT") {
        Ok(c) => c,
        Err(_) => {
            _server = TestingServer::start()?;
            _server.connect_string()
        }
    };
    let started = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (connect, log) = (connect.clone(), log.clone());
            thread::spawn(move || -> zk_recipes::Result<()> {
                let client = Client::builder(&connect)
                    .session_timeout(Duration::from_secs(10))
                    .connect()?;
                let options = LockOptions::new().holder_id(format!("worker-{w}"));
                let mutex = InterProcessMutex::with_options(&client, "/examples/mutex", options)?;
                for round in 0..3 {
                    let guard = mutex.acquire()?;
                    let token = guard.fencing_token()?;
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                        "{:>7.3}s worker-{w} round {round}: holds {} (fencing token {token})",
                        started.elapsed().as_secs_f64(),
                        guard.node_path().rsplit('/').next().unwrap_or(""),
                    ));
                    thread::sleep(Duration::from_millis(20)); // the work
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a worker panicked")??;
    }
    for line in log.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("{line}");
    }
    println!("12 turns, one at a time, tokens increasing with every new holder");
    Ok(())
}
