//! What the batch examples share: their command line and their logger (the package exists
//! for its examples, see Cargo.toml).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;
use std::thread;
use std::time::{Duration, Instant};

use zk_recipes::testing::TestingServer;

/// The command line of a batch example: a coordinator that starts worker processes of
/// itself, or one worker (`--worker`).
pub struct Args(Vec<String>);

impl Args {
    /// This process's arguments; the logger set up quiet (errors only, unless `RUST_LOG`).
    pub fn from_env() -> Args {
        env_logger::Builder::from_env(
            env_logger::Env::default().default_filter_or("error,zookeeper=off"),
        )
        .init();
        Args(std::env::args().skip(1).collect())
    }

    /// The value after `name`, if given.
    pub fn flag(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }

    /// True if `name` is given.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    /// `--connect`, else `ZK_CONNECT`.
    pub fn connect(&self) -> Option<String> {
        self.flag("--connect")
            .or_else(|| std::env::var("ZK_CONNECT").ok())
    }

    /// The value after `name` in milliseconds, else `default_ms`.
    pub fn millis(&self, name: &str, default_ms: u64) -> Duration {
        Duration::from_millis(
            self.flag(name)
                .and_then(|s| s.parse().ok())
                .unwrap_or(default_ms),
        )
    }

    /// The session timeout (`--session-ms`, 2 s) and the servers' tickTime for the lease
    /// bound (`--tick-ms`, ZooKeeper's sample configuration: 2 s).
    pub fn session_and_tick(&self) -> (Duration, Duration) {
        (
            self.millis("--session-ms", 2000),
            self.millis("--tick-ms", 2000),
        )
    }

    /// How many workers the coordinator runs (`--workers`, else `default`), at least `least`.
    pub fn workers(&self, default: usize, least: usize) -> usize {
        self.flag("--workers")
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
            .max(least)
    }

    /// The coordinator's ensemble: `--connect` / `ZK_CONNECT` (with `--tick-ms`), or a
    /// ZooKeeper started here, kept while the returned server lives. Returns it, the connect
    /// string and the tickTime to give the clients.
    pub fn ensemble(
        &self,
    ) -> Result<(Option<TestingServer>, String, Duration), Box<dyn std::error::Error>> {
        let tick = self.session_and_tick().1;
        Ok(match self.connect() {
            Some(c) => (None, c, tick),
            None => {
                println!("starting ZooKeeper (Debian package) on a free loopback port");
                let server = TestingServer::start()?;
                let (connect, tick) = (server.connect_string(), server.tick_time());
                (Some(server), connect, tick)
            }
        })
    }
}

/// A worker process of a batch example.
pub struct WorkerProcess {
    /// Its id.
    pub id: String,
    /// The process.
    pub child: Child,
    /// Its standard input: closing it is the graceful stop.
    pub stdin: Option<ChildStdin>,
}

/// Starts `count` workers (`worker-0`, `worker-1`, ...) with [`spawn_worker`].
pub fn spawn_workers(
    count: usize,
    connect: &str,
    extra: &[&OsStr],
    timing: (Duration, Duration),
    lines: &Sender<(String, Instant)>,
) -> std::io::Result<Vec<WorkerProcess>> {
    (0..count)
        .map(|i| spawn_worker(&format!("worker-{i}"), connect, extra, timing, lines))
        .collect()
}

/// Starts this program again as worker `id` (`--worker --id ID --connect CONNECT
/// --session-ms --tick-ms`, then `extra`); every line it prints goes to `lines` with when it
/// came.
pub fn spawn_worker(
    id: &str,
    connect: &str,
    extra: &[&OsStr],
    (session, tick): (Duration, Duration),
    lines: &Sender<(String, Instant)>,
) -> std::io::Result<WorkerProcess> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--worker", "--id", id, "--connect", connect])
        .args(extra)
        .args(["--session-ms", &session.as_millis().to_string()])
        .args(["--tick-ms", &tick.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let lines = lines.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send((line, Instant::now()));
        }
    });
    let stdin = child.stdin.take();
    Ok(WorkerProcess {
        id: id.to_owned(),
        child,
        stdin,
    })
}
