//! What a bench measures against: the harness's single server, or (`--ensemble`) a real
//! three-member ensemble that fsyncs every write, whose one follower every client of the run
//! talks to (as most of an ensemble's clients do: writes go through it to the leader), or with
//! `--on-leader` the leader itself (no forwarding hop, and the leader's own CPU shared with its
//! clients' connections).

use zk_recipes::testing::{ServerOptions, TestingCluster, TestingServer};

/// A server or an ensemble a bench's clients talk to.
pub trait Zk {
    /// The address every client of the run connects to (one member of an ensemble).
    fn connect_string(&self) -> String;
    /// The server processes whose CPU and JIT the bench reads (every member of an ensemble).
    fn pids(&self) -> Vec<u32>;
    /// A four-letter word's answer from the member the clients talk to.
    fn four_letter(&self, word: &str) -> std::io::Result<String>;
}

impl Zk for TestingServer {
    fn connect_string(&self) -> String {
        TestingServer::connect_string(self)
    }
    fn pids(&self) -> Vec<u32> {
        self.pid().into_iter().collect()
    }
    fn four_letter(&self, word: &str) -> std::io::Result<String> {
        TestingServer::four_letter(self, word)
    }
}

/// A three-member ensemble with `forceSync=yes`, and the member the clients talk to.
pub struct Ensemble {
    pub cluster: TestingCluster,
    /// The member every client of the run talks to: a follower, or the leader (`on_leader`).
    pub member: usize,
}

impl Ensemble {
    /// Starts it: every member fsyncs each write to its transaction log before it acks. The
    /// clients will talk to the leader if `on_leader`, else to a follower.
    pub fn start(on_leader: bool) -> Ensemble {
        let cluster = TestingCluster::with_options(
            3,
            ServerOptions {
                force_sync: true,
                ..ServerOptions::default()
            },
        )
        .expect("start a three-member ensemble (apt-get install zookeeper)");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let leader = loop {
            match cluster.leader() {
                Some(l) => break l,
                None if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                None => panic!("no member says it leads"),
            }
        };
        let member = match on_leader {
            true => leader,
            false => (0..3).find(|&i| i != leader).unwrap_or(0),
        };
        Ensemble { cluster, member }
    }
}

impl Zk for Ensemble {
    fn connect_string(&self) -> String {
        self.cluster.addr(self.member).to_string()
    }
    fn pids(&self) -> Vec<u32> {
        (0..3).filter_map(|i| self.cluster.pid(i)).collect()
    }
    fn four_letter(&self, word: &str) -> std::io::Result<String> {
        self.cluster.four_letter(self.member, word)
    }
}

/// The harness's server, or with `--ensemble` a three-member ensemble that fsyncs.
pub enum Target {
    One(TestingServer),
    Three(Ensemble),
}

impl Zk for Target {
    fn connect_string(&self) -> String {
        match self {
            Target::One(s) => Zk::connect_string(s),
            Target::Three(e) => e.connect_string(),
        }
    }
    fn pids(&self) -> Vec<u32> {
        match self {
            Target::One(s) => Zk::pids(s),
            Target::Three(e) => e.pids(),
        }
    }
    fn four_letter(&self, word: &str) -> std::io::Result<String> {
        match self {
            Target::One(s) => Zk::four_letter(s, word),
            Target::Three(e) => e.four_letter(word),
        }
    }
}
