//! An ensemble of real ZooKeeper servers on loopback.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::jvm::{self, four_letter, Jvm, TempDir};
use super::server::{mode_of, wait_ready, ServerOptions};
use super::HarnessError;

struct Member {
    client_port: u16,
    jvm: Mutex<Option<Jvm>>,
}

/// `n` ZooKeeper servers forming one ensemble on loopback, each with distinct client, quorum
/// and election ports. Members are numbered from 0. Every JVM is killed on drop.
pub struct TestingCluster {
    options: ServerOptions,
    classpath: String,
    dir: TempDir,
    members: Vec<Member>,
}

impl TestingCluster {
    /// Starts an `n`-server ensemble with default options and waits until it has a leader.
    pub fn start(n: usize) -> Result<TestingCluster, HarnessError> {
        TestingCluster::with_options(n, ServerOptions::default())
    }

    /// Starts an `n`-server ensemble with `options`.
    pub fn with_options(n: usize, options: ServerOptions) -> Result<TestingCluster, HarnessError> {
        if n == 0 {
            return Err(HarnessError::StartFailed(
                "an ensemble needs a member".into(),
            ));
        }
        let classpath = jvm::classpath(options.classpath.as_deref())?;
        let dir = TempDir::new("cluster")?;
        let mut ports = Vec::new();
        // Hold every listener until all ports are chosen, so no two members get the same one.
        let mut held = Vec::new();
        for _ in 0..n * 3 {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
            ports.push(l.local_addr()?.port());
            held.push(l);
        }
        drop(held);
        let mut servers = String::new();
        for i in 0..n {
            let _ = writeln!(
                servers,
                "server.{}=127.0.0.1:{}:{}",
                i + 1,
                ports[3 * i + 1],
                ports[3 * i + 2]
            );
        }
        let mut members = Vec::new();
        for i in 0..n {
            let member_dir = dir.path().join(format!("m{}", i + 1));
            let data = member_dir.join("data");
            std::fs::create_dir_all(&data)?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
            let mut cfg = options.base_config(&data, ports[3 * i]);
            let _ = writeln!(cfg, "initLimit=50");
            let _ = writeln!(cfg, "syncLimit={}", options.sync_limit);
            let _ = writeln!(cfg, "standaloneEnabled=false");
            let _ = writeln!(cfg, "reconfigEnabled=false");
            cfg.push_str(&servers);
            std::fs::write(member_dir.join("zoo.cfg"), cfg)?;
            members.push(Member {
                client_port: ports[3 * i],
                jvm: Mutex::new(None),
            });
        }
        let cluster = TestingCluster {
            options,
            classpath,
            dir,
            members,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_serving(&(0..n).collect::<Vec<_>>())?;
        Ok(cluster)
    }

    fn spawn(&self, i: usize) -> Result<(), HarnessError> {
        let member_dir = self.dir.path().join(format!("m{}", i + 1));
        let jvm = Jvm::spawn(
            &self.classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &self.options.jvm_properties(),
            &[member_dir.join("zoo.cfg").display().to_string()],
            &member_dir.join("server.log"),
            // Every member's wrapper removes the whole ensemble's directory if we die.
            self.dir.path(),
        )?;
        *self.members[i].jvm.lock() = Some(jvm);
        Ok(())
    }

    /// Waits until each of `which` serves requests as leader or follower.
    fn wait_serving(&self, which: &[usize]) -> Result<(), HarnessError> {
        for &i in which {
            let guard = self.members[i].jvm.lock();
            let Some(jvm) = guard.as_ref() else { continue };
            wait_ready(
                self.addr(i),
                "srvr",
                |a| matches!(mode_of(a), Some("leader" | "follower")),
                jvm,
                self.options.start_timeout,
            )?;
        }
        Ok(())
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: an ensemble has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Client address of member `i`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port))
    }

    /// Every member's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        (0..self.members.len())
            .map(|i| self.addr(i).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The JVM pid of member `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].jvm.lock().as_ref().map(|j| j.pid())
    }

    /// Kills member `i` (like a crash).
    pub fn kill(&self, i: usize) {
        if let Some(j) = self.members[i].jvm.lock().take() {
            j.kill();
        }
    }

    /// Freezes member `i` (`SIGSTOP`): its sockets stay open but it answers nothing, as a
    /// member behind a partition does. The others notice only by timeouts.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Lets a [`pause`](Self::pause)d member run again (`SIGCONT`).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, sig: &str) {
        if let Some(pid) = self.pid(i) {
            let _ = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status();
        }
    }

    /// Starts member `i` again (killing it first if it runs) and waits until it serves.
    pub fn restart(&self, i: usize) -> Result<(), HarnessError> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_serving(&[i])
    }

    /// The member that is leader now, if one says so.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.members[i].jvm.lock().is_some()
                && four_letter(self.addr(i), "srvr", Duration::from_secs(2))
                    .is_ok_and(|a| mode_of(&a) == Some("leader"))
        })
    }

    /// Waits until some member is leader, at most `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Option<usize> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Some(l);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestingCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
