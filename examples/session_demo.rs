//! The framework client keeping a session honest through real faults.
//!
//! Starts its own ZooKeeper (from the Debian package) through the test harness, puts a fault
//! proxy in front of it, and shows what the client reports while the connection is cut, while
//! the server restarts, and while the network holds every byte for longer than the session.
//!
//! ```text
//! cargo run -p zk-recipes-examples --example session_demo
//! ```

use std::time::{Duration, Instant};

use zk_recipes::testing::{FaultProxy, TestingServer};
use zk_recipes::{Client, ConnectionState, CreateMode, Subscription};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,zookeeper=off"),
    )
    .init();
    let started = Instant::now();
    let t = move || format!("{:>6.2}s", started.elapsed().as_secs_f64());

    println!(
        "{} starting ZooKeeper (Debian package) on a free loopback port",
        t()
    );
    let server = TestingServer::start()?;
    let proxy = FaultProxy::start(server.addr())?;

    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(3))
        .tick_time(server.tick_time())
        .connect()?;
    let events = client.subscribe();
    let id = client.session_id().ok_or("no session")?;
    let node = client.create("/demo-", b"", CreateMode::EphemeralSequential)?;
    println!(
        "{} connected: session {id}, timeout {:?} (granted by the server), ephemeral {node}",
        t(),
        client.session_timeout()
    );
    let left = client
        .session_valid_until()
        .map(|v| v.saturating_duration_since(Instant::now()));
    println!(
        "{} the server cannot expire this session for {left:?} yet",
        t()
    );

    println!("\n{} 1. cutting the connection", t());
    proxy.cut();
    wait_for(&events, ConnectionState::Reconnected, &t);
    report(&client, &node, &t)?;

    println!(
        "\n{} 2. restarting the server (shorter than the session)",
        t()
    );
    server.restart()?;
    wait_for(&events, ConnectionState::Reconnected, &t);
    report(&client, &node, &t)?;

    println!(
        "\n{} 3. holding every byte for longer than the session",
        t()
    );
    proxy.blackhole();
    let bounded = client
        .with_timeout(Duration::from_millis(500))
        .exists(&node);
    println!(
        "{} a call with a 500 ms deadline returned: {bounded:?}",
        t()
    );
    wait_for(&events, ConnectionState::Lost, &t);
    proxy.heal();
    wait_for(&events, ConnectionState::Connected, &t);
    println!(
        "{} new session {}, old ephemeral node gone: {}",
        t(),
        show(&client),
        client.exists(&node)?.is_none()
    );

    client.close();
    println!(
        "\n{} closed; the server's JVM goes when the harness is dropped",
        t()
    );
    Ok(())
}

fn report(client: &Client, node: &str, t: &dyn Fn() -> String) -> zk_recipes::Result<()> {
    println!(
        "{} session {}, ephemeral node still there: {}",
        t(),
        show(client),
        client.exists(node)?.is_some()
    );
    Ok(())
}

fn show(client: &Client) -> String {
    client
        .session_id()
        .map_or("none".into(), |id| id.to_string())
}

fn wait_for(events: &Subscription, until: ConnectionState, t: &dyn Fn() -> String) {
    while let Some(e) = events.recv_timeout(Duration::from_secs(30)) {
        println!("{}    event: {:?} (session {})", t(), e.state, e.session_id);
        if e.state == until {
            return;
        }
    }
    println!("{} gave up waiting for {until:?}", t());
}
