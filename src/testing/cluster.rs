//! An ensemble of real ZooKeeper servers on loopback.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::disk::{FreezableDisk, PREALLOC_KB};
use super::firewall::Firewall;
use super::jvm::{self, four_letter_over, Jvm, Process, TempDir};
use super::namespace::in_private_namespaces;
use super::proxy::FaultProxy;
use super::server::{mode_of, wait_ready, ServerOptions};
use super::HarnessError;

struct Member {
    client_port: u16,
    /// The client port its line in the dynamic configuration names: a plaintext port beside
    /// `client_port` when that one is TLS's (the configuration has no place for it).
    published_port: u16,
    /// Where it listens for followers (as leader) and for election messages.
    quorum_port: u16,
    election_port: u16,
    jvm: Mutex<Option<Jvm>>,
    /// With [`TestingCluster::partitionable`]: `links[j]` carries this member's quorum link to
    /// member `j` (none for itself).
    links: Vec<Option<FaultProxy>>,
    /// Its `server.N=...` line.
    spec: String,
    /// With [`TestingCluster::firewalled`]: the group id it runs with (the firewall tells its
    /// connections by it) and the disk of its transaction log.
    group: Option<u32>,
    log_disk: Option<FreezableDisk>,
}

/// `n` ZooKeeper servers forming one ensemble on loopback, each with distinct client, quorum
/// and election ports. Members are numbered from 0. Every JVM is killed on drop.
///
/// A [`partitionable`](Self::partitionable) ensemble routes every member's quorum links
/// through fault proxies, so that [`isolate`](Self::isolate) can cut a member off from the
/// others while it keeps its client port: a follower then goes on answering its clients'
/// reads for `syncLimit` ticks while the leader, on the majority side, expires their sessions.
pub struct TestingCluster {
    options: ServerOptions,
    classpath: String,
    // Dropped in this order: the members (their log disks unmounted) and the firewall before
    // the directory that holds the disks goes.
    members: Vec<Member>,
    firewall: Option<Firewall>,
    dir: TempDir,
}

/// How [`TestingCluster::build`] lays the ensemble out.
#[derive(Default, Clone, Copy)]
struct Layout {
    /// Quorum links through fault proxies.
    partitionable: bool,
    /// Members' client addresses in the dynamic configuration.
    dynamic: bool,
    /// Members with a group id each under a firewall, and logs on freezable disks.
    firewalled: bool,
}

impl TestingCluster {
    /// Starts an `n`-server ensemble with default options and waits until it has a leader.
    pub fn start(n: usize) -> Result<TestingCluster, HarnessError> {
        TestingCluster::with_options(n, ServerOptions::default())
    }

    /// Starts an `n`-server ensemble with `options`.
    pub fn with_options(n: usize, options: ServerOptions) -> Result<TestingCluster, HarnessError> {
        TestingCluster::build(n, 0, options, Layout::default(), &[])
    }

    /// Starts an `n`-member ensemble that can change its membership (`reconfigEnabled`, every
    /// member's client address in its `server.N` line, `zookeeper.skipACL` so that any client
    /// may call [`Client::reconfig`](crate::Client::reconfig)), with `spare` more members
    /// configured but not running: [`start_member`](Self::start_member) starts one, and a
    /// reconfiguration with its [`member_spec`](Self::member_spec) adds it.
    pub fn reconfigurable(
        n: usize,
        spare: usize,
        options: ServerOptions,
    ) -> Result<TestingCluster, HarnessError> {
        TestingCluster::reconfigurable_with_static_clients(n, spare, &[], options)
    }

    /// A [`reconfigurable`](Self::reconfigurable) ensemble in which the members in
    /// `static_clients` keep their client port in their own static file, the layout of
    /// ensembles from before 3.5: their lines in the configuration (`/zookeeper/config`) name
    /// no client address, although they serve clients. (A reconfiguration cannot make such a
    /// line: the server refuses a joining member without a client address.)
    pub fn reconfigurable_with_static_clients(
        n: usize,
        spare: usize,
        static_clients: &[usize],
        mut options: ServerOptions,
    ) -> Result<TestingCluster, HarnessError> {
        options
            .system_properties
            .push(("zookeeper.skipACL".into(), "yes".into()));
        let layout = Layout {
            dynamic: true,
            ..Layout::default()
        };
        TestingCluster::build(n, spare, options, layout, static_clients)
    }

    /// The client port member `i`'s line in the ensemble's configuration names. For TLS
    /// members of a [`reconfigurable`](Self::reconfigurable) ensemble it is a plaintext port
    /// beside the TLS one ([`addr`](Self::addr)): ZooKeeper's dynamic configuration has no
    /// place for a secure port.
    pub fn published_port(&self, i: usize) -> u16 {
        self.members[i].published_port
    }

    /// The `server.N=...` line of member `i`, as a reconfiguration that adds it takes it.
    pub fn member_spec(&self, i: usize) -> String {
        self.members[i].spec.clone()
    }

    /// Starts spare member `i` of a [`reconfigurable`](Self::reconfigurable) ensemble; it
    /// follows the leader without a vote until a reconfiguration adds it.
    pub fn start_member(&self, i: usize) -> Result<(), HarnessError> {
        self.spawn(i)?;
        let guard = self.members[i].jvm.lock();
        if let Some(jvm) = guard.as_ref() {
            wait_ready(
                self.addr(i),
                &self.options.security(),
                "srvr",
                |a| mode_of(a).is_some(),
                jvm,
                self.options.start_timeout,
            )?;
        }
        Ok(())
    }

    /// Starts an `n`-server ensemble whose members reach each other's quorum ports through
    /// fault proxies (one per ordered pair), for [`isolate`](Self::isolate) and
    /// [`rejoin`](Self::rejoin).
    ///
    /// Only the quorum links (follower to leader, the link a follower serves from) go through
    /// proxies. Election links cannot be cut this way: ZooKeeper 3.8 answers a connection from
    /// a member with a lower id by dialling back the election address that member advertises,
    /// which is its own listening port, so the link would bypass any proxy. A member whose
    /// quorum links are cut may still vote, but can neither follow nor lead anyone.
    pub fn partitionable(n: usize, options: ServerOptions) -> Result<TestingCluster, HarnessError> {
        let layout = Layout {
            partitionable: true,
            ..Layout::default()
        };
        TestingCluster::build(n, 0, options, layout, &[])
    }

    /// A [`partitionable`](Self::partitionable) ensemble for the harshest faults, on top of
    /// the proxies':
    ///
    /// - every link between two members, election links included, can be severed:
    ///   [`sever`](Self::sever), [`sever_one_way`](Self::sever_one_way),
    ///   [`sever_member`](Self::sever_member), until mended. Packets are
    ///   dropped (nftables), so the members see silence, not a closed connection; clients'
    ///   links are untouched.
    /// - each member's transaction log (`dataLogDir`) is on a small file system of its own
    ///   that [`freeze_log`](Self::freeze_log) stalls: every write and `fsync` to it blocks
    ///   until [`thaw_log`](Self::thaw_log) (with `force_sync`, each transaction waits for
    ///   its `fsync`).
    ///
    /// Needs root, and a process inside namespaces of its own
    /// ([`enter_private_namespaces`](super::enter_private_namespaces)), so that the rules and
    /// mounts touch nothing of the machine's; an error otherwise. Each member runs with a
    /// group id of its own, by which the firewall tells its connections from the others'.
    pub fn firewalled(n: usize, options: ServerOptions) -> Result<TestingCluster, HarnessError> {
        if !in_private_namespaces() {
            return Err(HarnessError::StartFailed(
                "a firewalled ensemble needs a process in namespaces of its own: call \
                 testing::enter_private_namespaces first thing in main (as root)"
                    .into(),
            ));
        }
        let layout = Layout {
            partitionable: true,
            firewalled: true,
            ..Layout::default()
        };
        TestingCluster::build(n, 0, options, layout, &[])
    }

    fn build(
        n: usize,
        spare: usize,
        mut options: ServerOptions,
        layout: Layout,
        static_clients: &[usize],
    ) -> Result<TestingCluster, HarnessError> {
        let Layout {
            partitionable,
            dynamic,
            firewalled,
        } = layout;
        let total = n + spare;
        if n == 0 {
            return Err(HarnessError::StartFailed(
                "an ensemble needs a member".into(),
            ));
        }
        if firewalled {
            options
                .system_properties
                .push(("zookeeper.preAllocSize".into(), PREALLOC_KB.to_string()));
        }
        let groups = firewalled.then(|| Firewall::gids(total));
        let classpath = jvm::classpath(options.classpath.as_deref(), options.needs_netty())?;
        let dir = TempDir::new("cluster")?;
        options.prepare(dir.path())?;
        let mut ports = Vec::new();
        // Hold every listener until all ports are chosen, so no two members get the same one.
        let mut held = Vec::new();
        for _ in 0..total * 3 {
            let l = jvm::reserve_port()?;
            ports.push(l.local_addr()?.port());
            held.push(l);
        }
        // TLS members of a changing ensemble serve TLS on their static `secureClientPort`
        // and plaintext on the port their line publishes, as production ensembles must: the
        // dynamic configuration knows only the plaintext one.
        let mut published: Vec<u16> = (0..total).map(|j| ports[3 * j]).collect();
        if dynamic && options.needs_netty() {
            for p in &mut published {
                let l = jvm::reserve_port()?;
                *p = l.local_addr()?.port();
                held.push(l);
            }
        }
        drop(held);
        // A member's line: with its client address for a reconfigurable ensemble, unless the
        // member keeps it in its static file.
        let spec = |j: usize, quorum: u16| {
            let mut line = format!("server.{}=127.0.0.1:{}:{}", j + 1, quorum, ports[3 * j + 2]);
            if dynamic {
                line.push_str(":participant");
                if !static_clients.contains(&j) {
                    let _ = write!(line, ";127.0.0.1:{}", published[j]);
                }
            }
            line
        };
        let mut members = Vec::new();
        for i in 0..total {
            let mut links = Vec::new();
            for j in 0..n {
                links.push(if partitionable && j != i {
                    let quorum = SocketAddr::from(([127, 0, 0, 1], ports[3 * j + 1]));
                    Some(FaultProxy::start(quorum)?)
                } else {
                    None
                });
            }
            // Member i's view of the ensemble: the others' quorum ports through its proxies.
            // A spare member starts with the initial ensemble and itself.
            let mut servers = String::new();
            for (j, link) in links.iter().enumerate() {
                let quorum = link.as_ref().map_or(ports[3 * j + 1], |p| p.addr().port());
                let _ = writeln!(servers, "{}", spec(j, quorum));
            }
            if i >= n {
                let _ = writeln!(servers, "{}", spec(i, ports[3 * i + 1]));
            }
            let member_dir = dir.path().join(format!("m{}", i + 1));
            let data = member_dir.join("data");
            std::fs::create_dir_all(&data)?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
            let mut cfg = options.base_config(&data, ports[3 * i], None);
            let log_disk = if firewalled {
                let disk =
                    FreezableDisk::new(&member_dir.join("log.img"), &member_dir.join("log"))?;
                let _ = writeln!(cfg, "dataLogDir={}", disk.path().display());
                Some(disk)
            } else {
                None
            };
            if dynamic && !static_clients.contains(&i) {
                // The client address is in the member's line.
                cfg = cfg
                    .lines()
                    .filter(|l| !l.starts_with("clientPort"))
                    .map(|l| format!("{l}\n"))
                    .collect();
            }
            let _ = writeln!(cfg, "initLimit=50");
            let _ = writeln!(cfg, "syncLimit={}", options.sync_limit);
            let _ = writeln!(cfg, "standaloneEnabled=false");
            let _ = writeln!(cfg, "reconfigEnabled={dynamic}");
            cfg.push_str(&servers);
            std::fs::write(member_dir.join("zoo.cfg"), cfg)?;
            members.push(Member {
                client_port: ports[3 * i],
                published_port: published[i],
                quorum_port: ports[3 * i + 1],
                election_port: ports[3 * i + 2],
                jvm: Mutex::new(None),
                links,
                spec: spec(i, ports[3 * i + 1]),
                group: groups.as_ref().map(|g| g[i]),
                log_disk,
            });
        }
        let firewall = match groups {
            Some(groups) => {
                // The ports member a dials to reach member b: b's quorum and election ports,
                // and the proxy in front of b's quorum port that a was given.
                let reach = (0..total)
                    .map(|a| {
                        (0..total)
                            .map(|b| {
                                let mut p = vec![ports[3 * b + 1], ports[3 * b + 2]];
                                if let Some(Some(proxy)) = members[a].links.get(b) {
                                    p.push(proxy.addr().port());
                                }
                                if a == b {
                                    p.clear();
                                }
                                p
                            })
                            .collect()
                    })
                    .collect();
                Some(Firewall::install(groups, reach)?)
            }
            None => None,
        };
        let cluster = TestingCluster {
            options,
            classpath,
            members,
            firewall,
            dir,
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
            Process {
                group: self.members[i].group,
                clock_rate: self.options.clock_rate(i),
            },
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
                &self.options.security(),
                "srvr",
                |a| matches!(mode_of(a), Some("leader" | "follower")),
                jvm,
                self.options.start_timeout,
            )?;
        }
        Ok(())
    }

    /// The members' `tickTime`: give it to [`ClientBuilder::tick_time`](crate::ClientBuilder::tick_time).
    pub fn tick_time(&self) -> Duration {
        self.options.tick_time
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

    /// Member `i`'s quorum and election ports, where the other members reach it (the others
    /// dial its quorum port through their proxies in a [`partitionable`](Self::partitionable)
    /// ensemble).
    pub fn member_ports(&self, i: usize) -> (u16, u16) {
        (self.members[i].quorum_port, self.members[i].election_port)
    }

    /// The port member `from` dials to reach member `to`'s quorum port (the fault proxy in
    /// front of it) in a [`partitionable`](Self::partitionable) ensemble; `None` otherwise.
    pub fn quorum_link_port(&self, from: usize, to: usize) -> Option<u16> {
        self.link(from, to).map(|p| p.addr().port())
    }

    /// The group id member `i` runs with in a [`firewalled`](Self::firewalled) ensemble: a
    /// process with it is member `i` to the firewall (a test probes the rules so).
    pub fn member_group(&self, i: usize) -> Option<u32> {
        self.members[i].group
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

    /// Kills member `i` (like a crash). Its log's disk thaws first: a process blocked on a
    /// frozen file system cannot die.
    pub fn kill(&self, i: usize) {
        // Thawed under the JVM's lock, which `freeze_log` takes too: no freeze lands between
        // the thaw and the kill, and none after it (the member is then not running).
        let jvm = {
            let mut jvm = self.members[i].jvm.lock();
            self.thaw_log(i);
            jvm.take()
        };
        if let Some(j) = jvm {
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

    /// Cuts member `i` off from every other member while it keeps its client port: its quorum
    /// links (both ways) hold every byte, as a network partition does, until
    /// [`rejoin`](Self::rejoin). Needs a [`partitionable`](Self::partitionable) ensemble;
    /// false (and nothing done) otherwise.
    ///
    /// A follower so cut off goes on answering its clients' reads until it has heard nothing
    /// from the leader for `syncLimit` ticks; the leader meanwhile counts its clients'
    /// sessions only from what reached it before the cut.
    pub fn isolate(&self, i: usize) -> bool {
        self.each_link_of(i, FaultProxy::blackhole)
    }

    /// Ends [`isolate`](Self::isolate): the held bytes are delivered (as TCP would retransmit
    /// them) and new links pass.
    pub fn rejoin(&self, i: usize) -> bool {
        self.each_link_of(i, FaultProxy::heal)
    }

    /// Holds every byte member `from` sends to member `to` on the quorum link `from` opened
    /// to `to` (a follower's link to its leader), while `to` still reaches `from`: one way of
    /// a partition, until [`rejoin`](Self::rejoin)`(from)`. False if there is no such link
    /// (not [`partitionable`](Self::partitionable), or `from == to`).
    pub fn hold_sends(&self, from: usize, to: usize) -> bool {
        self.link(from, to).map(FaultProxy::hold_requests).is_some()
    }

    /// Bytes member `from` has delivered to member `to` on the quorum link it opened to it;
    /// `None` without such a link. A test waits for it to grow to know that something the
    /// member forwarded reached the other.
    pub fn sent_bytes(&self, from: usize, to: usize) -> Option<u64> {
        self.link(from, to).map(FaultProxy::requests_passed)
    }

    fn link(&self, from: usize, to: usize) -> Option<&FaultProxy> {
        self.members.get(from)?.links.get(to)?.as_ref()
    }

    /// Applies `f` to every quorum link from and to member `i`; false if there are none.
    fn each_link_of(&self, i: usize, f: impl Fn(&FaultProxy)) -> bool {
        let mut any = false;
        for (j, member) in self.members.iter().enumerate() {
            let links = if j == i {
                member.links.iter().flatten().collect::<Vec<_>>()
            } else {
                member.links[i].iter().collect()
            };
            for link in links {
                f(link);
                any = true;
            }
        }
        any
    }

    /// Severs every link between members `a` and `b`, both ways, election links included: the
    /// packets are dropped until [`mend`](Self::mend)`(a, b)`. Cuts count: a link severed
    /// twice (by two overlapping faults) passes again after two mends. False (nothing done)
    /// unless the ensemble is [`firewalled`](Self::firewalled).
    pub fn sever(&self, a: usize, b: usize) -> bool {
        self.firewall_with(|f| f.cut(&[(a, b), (b, a)]))
    }

    /// Lifts one [`sever`](Self::sever)`(a, b)`.
    pub fn mend(&self, a: usize, b: usize) -> bool {
        self.firewall_with(|f| f.lift(&[(a, b), (b, a)]))
    }

    /// Drops what member `from` sends to member `to`, on every link between them whoever
    /// opened it, until [`mend_one_way`](Self::mend_one_way): on the links open when it
    /// starts, `to`'s bytes still reach `from` (which can no longer acknowledge them); a new
    /// link between the two cannot open either way, since TCP's handshake needs both. False
    /// unless [`firewalled`](Self::firewalled).
    pub fn sever_one_way(&self, from: usize, to: usize) -> bool {
        self.firewall_with(|f| f.cut(&[(from, to)]))
    }

    /// Lifts one [`sever_one_way`](Self::sever_one_way)`(from, to)`.
    pub fn mend_one_way(&self, from: usize, to: usize) -> bool {
        self.firewall_with(|f| f.lift(&[(from, to)]))
    }

    /// Severs every link of member `i` to the others, both ways, election links included; its
    /// clients still reach it. Until [`mend_member`](Self::mend_member). False unless
    /// [`firewalled`](Self::firewalled).
    pub fn sever_member(&self, i: usize) -> bool {
        let pairs = self.pairs_of(i);
        self.firewall_with(|f| f.cut(&pairs))
    }

    /// Lifts one [`sever_member`](Self::sever_member)`(i)`.
    pub fn mend_member(&self, i: usize) -> bool {
        let pairs = self.pairs_of(i);
        self.firewall_with(|f| f.lift(&pairs))
    }

    /// Lifts every cut in force, however made.
    pub fn mend_all(&self) -> bool {
        self.firewall_with(Firewall::lift_all)
    }

    /// The one-way cuts in force: `(from, to)` drops what `from` sends to `to`.
    pub fn severed(&self) -> Vec<(usize, usize)> {
        self.firewall.as_ref().map_or_else(Vec::new, Firewall::cuts)
    }

    /// Both directions between member `i` and each other member.
    fn pairs_of(&self, i: usize) -> Vec<(usize, usize)> {
        (0..self.members.len())
            .filter(|&j| j != i)
            .flat_map(|j| [(i, j), (j, i)])
            .collect()
    }

    fn firewall_with(&self, f: impl FnOnce(&Firewall) -> Result<(), HarnessError>) -> bool {
        self.firewall.as_ref().is_some_and(|fw| f(fw).is_ok())
    }

    /// Freezes member `i`'s transaction log disk: its writes and `fsync`s block until
    /// [`thaw_log`](Self::thaw_log) (or a kill, which thaws first). False (nothing done)
    /// unless the ensemble is [`firewalled`](Self::firewalled) and the member runs, or if the
    /// disk was frozen already.
    pub fn freeze_log(&self, i: usize) -> bool {
        let member = &self.members[i];
        let running = member.jvm.lock();
        running.is_some()
            && member
                .log_disk
                .as_ref()
                .is_some_and(|d| d.freeze().unwrap_or(false))
    }

    /// Thaws member `i`'s log disk if frozen.
    pub fn thaw_log(&self, i: usize) {
        if let Some(d) = &self.members[i].log_disk {
            d.thaw();
        }
    }

    /// Starts member `i` again (killing it first if it runs) and waits until it serves.
    pub fn restart(&self, i: usize) -> Result<(), HarnessError> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_serving(&[i])
    }

    /// Starts member `i` again with its disk lost: kills it, removes its snapshots and
    /// transaction logs (its `myid` stays, as an operator who replaces a disk restores it),
    /// and waits until it serves again, synced from the leader. Its votes and acknowledgements
    /// before the loss are gone with the disk.
    pub fn restart_empty(&self, i: usize) -> Result<(), HarnessError> {
        self.kill(i);
        let data = self.dir.path().join(format!("m{}", i + 1)).join("data");
        let mut lost = vec![data.join("version-2")];
        if let Some(disk) = &self.members[i].log_disk {
            lost.push(disk.path().join("version-2"));
        }
        for logs in lost.iter().filter(|l| l.exists()) {
            std::fs::remove_dir_all(logs)?;
        }
        self.spawn(i)?;
        self.wait_serving(&[i])
    }

    /// The member that is leader now, if one says so.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.members[i].jvm.lock().is_some()
                && self
                    .four_letter(i, "srvr")
                    .is_ok_and(|a| mode_of(&a) == Some("leader"))
        })
    }

    /// Sends a four-letter word (`srvr`, `wchp`, `cons`, ...) to member `i` and returns the
    /// answer.
    pub fn four_letter(&self, i: usize, word: &str) -> std::io::Result<String> {
        four_letter_over(
            self.addr(i),
            word,
            Duration::from_secs(2),
            &self.options.security(),
        )
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
