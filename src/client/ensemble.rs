//! A changing ensemble: the configuration the servers publish at `/zookeeper/config`
//! ([`EnsembleConfig`]), and the rule by which a client given a new server list moves to a
//! fair share of the new servers without dropping its session (ZooKeeper's
//! `StaticHostProvider.updateServerList`).

use std::net::IpAddr;

use crate::connect_string::HostPort;

/// The servers' own node with the ensemble's dynamic configuration (ZooKeeper ≥ 3.5). It lies
/// outside any chroot or namespace.
pub const CONFIG_NODE: &str = "/zookeeper/config";

/// The ensemble's dynamic configuration, as published at [`CONFIG_NODE`]
/// (see [`Client::ensemble_config`](crate::Client::ensemble_config)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnsembleConfig {
    /// The configuration's version (a zxid, hexadecimal in the node): it grows with every
    /// reconfiguration.
    pub version: u64,
    /// The members, by server id.
    pub servers: Vec<EnsembleMember>,
}

/// One member of the ensemble, from a `server.N=...` line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnsembleMember {
    /// The server id (`N`).
    pub id: u64,
    /// `participant` (votes) or `observer`.
    pub role: String,
    /// Where clients reach it (`;host:port` or `;port` in the line), if it serves clients.
    pub client: Option<HostPort>,
}

impl EnsembleConfig {
    /// Parses the node's text: `server.N=host:quorum:election[:role][;[client_host:]port]`
    /// lines and a `version=` line; anything else is ignored. A member whose client address
    /// is `0.0.0.0` (any) is reached at its quorum host.
    pub fn parse(text: &str) -> Option<EnsembleConfig> {
        let mut version = None;
        let mut servers = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("version=") {
                version = u64::from_str_radix(v.trim(), 16).ok();
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let Some(id) = key.strip_prefix("server.").and_then(|n| n.parse().ok()) else {
                continue;
            };
            let (quorum, client) = match value.split_once(';') {
                Some((q, c)) => (q, Some(c)),
                None => (value, None),
            };
            // A member with several addresses (`a:1:2|b:3:4:role`): the first names its host,
            // the last carries its role.
            let first = quorum.split('|').next().unwrap_or_default();
            let last = quorum.rsplit('|').next().unwrap_or_default();
            let parts: Vec<&str> = split_host(first);
            let role_parts: Vec<&str> = split_host(last);
            let quorum_host = parts.first().copied().unwrap_or_default();
            let role = role_parts
                .get(3)
                .copied()
                .unwrap_or("participant")
                .to_owned();
            let client = client.and_then(|c| {
                let (host, port) = match c.rsplit_once(':') {
                    Some((h, p)) => (h.trim_matches(['[', ']']), p),
                    None => (quorum_host, c),
                };
                let host = if host.is_empty() || host == "0.0.0.0" || host == "::" {
                    quorum_host
                } else {
                    host
                };
                // Checked as a connect string's host is, before it can reach a log or a
                // dial: whoever may write the node (any user under `skipACL`, a superuser
                // always) must not smuggle text into either. A member without a valid
                // address has none, and a configuration with such a member is not followed.
                if !crate::connect_string::valid_host(host) {
                    return None;
                }
                Some(HostPort {
                    host: host.to_owned(),
                    port: port.trim().parse().ok().filter(|p| *p != 0)?,
                })
            });
            servers.push(EnsembleMember { id, role, client });
        }
        Some(EnsembleConfig {
            version: version?,
            servers,
        })
    }

    /// The members' client addresses, in server-id order; `None` unless the configuration
    /// gives one for every member. (A member whose client port is in its own static
    /// `zoo.cfg`, the layout of ensembles set up before 3.5, is published without one: a
    /// list of the others only would send every client to them.)
    pub fn client_hosts(&self) -> Option<Vec<HostPort>> {
        let mut members: Vec<&EnsembleMember> = self.servers.iter().collect();
        members.sort_by_key(|m| m.id);
        members.iter().map(|m| m.client.clone()).collect()
    }
}

/// `host:port:port[:role]`, with an IPv6 host in brackets kept whole.
fn split_host(s: &str) -> Vec<&str> {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            let mut parts = vec![host];
            parts.extend(tail.trim_start_matches(':').split(':'));
            return parts;
        }
    }
    s.split(':').collect()
}

/// What a client does when its server list changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Move {
    /// Keep the current connection.
    Stay,
    /// Reconnect (same session) to one of these servers first, then to any.
    To(Vec<HostPort>),
}

/// ZooKeeper's rule (`StaticHostProvider.updateServerList`) for a client on `current` whose
/// list goes from `old` to `new`, so that clients spread evenly over the new ensemble while as
/// few as possible move: when the list grows, a client whose server stays moves with
/// probability 1 − |old| / |new|, to a server that was not in the old list; when it stays the
/// same or shrinks, such a client stays. A client whose server left always moves: to a server
/// of both lists with the probability that evens the load, to a new one otherwise. `roll` is
/// a uniform draw from [0, 1).
pub(crate) fn plan_move(
    old: &[HostPort],
    new: &[HostPort],
    current: Option<&HostPort>,
    roll: f32,
) -> Move {
    let kept: Vec<HostPort> = new.iter().filter(|h| old.contains(h)).cloned().collect();
    let added: Vec<HostPort> = new.iter().filter(|h| !old.contains(h)).cloned().collect();
    let mine_stays = current.is_some_and(|c| new.contains(c));
    let (m, n, kept_n) = (old.len() as f32, new.len() as f32, kept.len() as f32);
    if new.len() > old.len() {
        if !mine_stays || roll <= 1.0 - m / n {
            return Move::To(if added.is_empty() {
                new.to_vec()
            } else {
                added
            });
        }
        return Move::Stay;
    }
    if mine_stays {
        return Move::Stay;
    }
    // To a kept server with the probability that leaves every new server its fair share.
    let p_old = if m > kept_n {
        (kept_n * (m - n)) / (n * (m - kept_n))
    } else {
        1.0
    };
    let pool = if roll < p_old { kept } else { added };
    Move::To(if pool.is_empty() { new.to_vec() } else { pool })
}

/// Which servers a client that follows the ensemble may be sent to. Whoever can write
/// `/zookeeper/config` (any user under the server's `skipACL`, a superuser always) names the
/// servers a following client dials, hands its session password and replays its credentials
/// to; so a configuration is followed only if every server it names is admitted: a host of
/// the connect string (any port), a name in the domain of one of its names (the name without
/// its first label, itself of two labels or more: `zk1.prod.example.com` admits
/// `*.prod.example.com`), or one the user allowed with
/// [`follow_ensemble_hosts`](crate::ClientBuilder::follow_ensemble_hosts).
#[derive(Debug, Clone, Default)]
pub(crate) struct FollowRule {
    seeds: Vec<String>,
    allowed: Vec<HostPattern>,
}

/// One entry of [`FollowRule`]'s allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// This host.
    Host(String),
    /// Any name that ends with `.<domain>`.
    Domain(String),
    /// Any address in this network.
    Net(IpAddr, u8),
}

impl HostPattern {
    /// `host`, `*.domain`, or `address/prefix`.
    fn parse(s: &str) -> Option<HostPattern> {
        let s = s.trim().to_ascii_lowercase();
        if s.parse::<IpAddr>().is_ok() {
            return Some(HostPattern::Host(canonical(&s)));
        }
        if let Some(domain) = s.strip_prefix("*.") {
            return crate::connect_string::valid_host(domain)
                .then(|| HostPattern::Domain(domain.to_owned()));
        }
        if let Some((net, bits)) = s.split_once('/') {
            let net: IpAddr = net.parse().ok()?;
            let bits: u8 = bits.parse().ok()?;
            let most = if net.is_ipv4() { 32 } else { 128 };
            return (bits <= most).then_some(HostPattern::Net(net, bits));
        }
        crate::connect_string::valid_host(&s).then_some(HostPattern::Host(s))
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Host(h) => h == host,
            HostPattern::Domain(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostPattern::Net(net, bits) => match (net, host.parse::<IpAddr>()) {
                (IpAddr::V4(n), Ok(IpAddr::V4(a))) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*bits)).unwrap_or(0);
                    u32::from(*n) & mask == u32::from(a) & mask
                }
                (IpAddr::V6(n), Ok(IpAddr::V6(a))) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(*bits)).unwrap_or(0);
                    u128::from(*n) & mask == u128::from(a) & mask
                }
                _ => false,
            },
        }
    }
}

impl FollowRule {
    /// The rule for a client given `seeds` (its connect string's hosts) and the user's
    /// `allowed` entries; an entry that is none of the three forms is refused.
    pub fn new(seeds: &[HostPort], allowed: &[String]) -> Result<FollowRule, String> {
        let allowed = allowed
            .iter()
            .map(|a| {
                HostPattern::parse(a).ok_or_else(|| {
                    format!("{a:?} is not a host, *.domain or address/prefix to follow")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut seeds: Vec<String> = seeds.iter().map(|h| canonical(&h.host)).collect();
        // The seeds' domains, as patterns of their own.
        let domains: Vec<HostPattern> = seeds
            .iter()
            .filter(|s| s.parse::<IpAddr>().is_err())
            .filter_map(|s| s.split_once('.').map(|(_, d)| d))
            .filter(|d| d.contains('.'))
            .map(|d| HostPattern::Domain(d.to_owned()))
            .collect();
        seeds.dedup();
        let mut rule = FollowRule { seeds, allowed };
        rule.allowed.extend(domains);
        Ok(rule)
    }

    /// Whether a configuration may send this client to `host`.
    pub fn admits(&self, host: &str) -> bool {
        let host = canonical(host);
        self.seeds.contains(&host) || self.allowed.iter().any(|p| p.matches(&host))
    }
}

/// A host as the follow rule compares it: an address in its one canonical form
/// (`0:0:0:0:0:0:0:1` and `[::1]` are `::1`, as ZooKeeper may publish the first for the
/// second), a name in lower case.
fn canonical(host: &str) -> String {
    let host = host.trim_matches(['[', ']']);
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// Where a followed server is dialled. ZooKeeper's dynamic configuration publishes each
/// member's plaintext client port only (`secureClientPort` stays in its static file), so a
/// TLS client must be told, or work out from its seeds, the port each serves TLS on.
#[derive(Clone, Default)]
pub(crate) enum FollowPort {
    /// The published port (a plaintext client).
    #[default]
    Published,
    /// This port on every server.
    Fixed(u16),
    /// As the user's function says for a server's host and published port; `None`: the
    /// server is not to be dialled, and the configuration is not followed.
    With(std::sync::Arc<FollowPortFn>),
}

/// The user's rule for [`FollowPort::With`].
pub(crate) type FollowPortFn = dyn Fn(&str, u16) -> Option<u16> + Send + Sync;

impl std::fmt::Debug for FollowPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FollowPort::Published => f.write_str("Published"),
            FollowPort::Fixed(p) => write!(f, "Fixed({p})"),
            FollowPort::With(_) => f.write_str("With(<fn>)"),
        }
    }
}

impl FollowPort {
    /// A TLS client's rule when the user gave none: the one port every seed names (the seeds
    /// are TLS addresses: the user dials them so), or none to be had.
    pub fn from_seeds(seeds: &[HostPort]) -> Option<FollowPort> {
        let first = seeds.first()?.port;
        seeds
            .iter()
            .all(|s| s.port == first)
            .then_some(FollowPort::Fixed(first))
    }

    /// `hosts` as this client dials them; `Err` names the first server it has no port for.
    pub fn place(&self, hosts: Vec<HostPort>) -> Result<Vec<HostPort>, HostPort> {
        hosts
            .into_iter()
            .map(|h| {
                let port = match self {
                    FollowPort::Published => Some(h.port),
                    FollowPort::Fixed(p) => Some(*p),
                    // The user's code runs on the client's event thread: a panic there is
                    // "no port" (and said), never the end of that thread.
                    FollowPort::With(f) => {
                        let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            f(&h.host, h.port)
                        }));
                        asked
                            .unwrap_or_else(|_| {
                                log::warn!(
                                    "follow_ensemble_secure_port_with panicked for {h}: not \
                                     following"
                                );
                                None
                            })
                            .filter(|p| *p != 0)
                    }
                };
                match port {
                    Some(port) => Ok(HostPort { port, ..h }),
                    None => Err(h),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect_string::ConnectString;

    #[test]
    fn a_tls_client_dials_followed_servers_on_their_tls_port() {
        let hp = |h: &str, port| HostPort {
            host: h.into(),
            port,
        };
        let published = vec![hp("a", 2181), hp("b", 2181)];
        let same = FollowPort::from_seeds(&[hp("a", 2281), hp("c", 2281)]).unwrap();
        assert_eq!(
            same.place(published.clone()).unwrap(),
            vec![hp("a", 2281), hp("b", 2281)]
        );
        assert!(FollowPort::from_seeds(&[hp("a", 2281), hp("c", 2282)]).is_none());
        let by_fn = FollowPort::With(std::sync::Arc::new(|h: &str, p: u16| {
            (h == "a").then_some(p + 100)
        }));
        assert_eq!(by_fn.place(published.clone()), Err(hp("b", 2181)));
        // A rule that panics (a map lookup of a port it does not know) refuses the server,
        // on the caller's thread, which goes on (review of issue 39: it ended the client's
        // event thread, and with it the notice of a lock node's deletion).
        let panics = FollowPort::With(std::sync::Arc::new(|_: &str, p: u16| {
            let known = std::collections::HashMap::from([(2181u16, 2281u16)]);
            Some(known[&(p + 1)])
        }));
        assert_eq!(panics.place(published.clone()), Err(hp("a", 2181)));
        assert_eq!(
            FollowPort::Published.place(published.clone()).unwrap(),
            published
        );
    }

    fn hosts(ports: &[u16]) -> Vec<HostPort> {
        ports
            .iter()
            .map(|&port| HostPort {
                host: "10.0.0.1".into(),
                port,
            })
            .collect()
    }

    #[test]
    fn the_config_node_parses_with_roles_and_client_addresses() {
        let text = "server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\n\
                    server.2=10.0.0.2:2888:3888:observer;10.0.0.9:2182\n\
                    server.3=[::1]:2888:3888;2183\n\
                    server.4=10.0.0.4:2888:3888\n\
                    version=10000000a";
        let c = EnsembleConfig::parse(text).unwrap();
        assert_eq!(c.version, 0x10000000a);
        assert_eq!(c.servers.len(), 4);
        assert_eq!(c.servers[1].role, "observer");
        assert_eq!(c.client_hosts(), None, "server.4 has no client address");
        let complete = EnsembleConfig {
            servers: c.servers[..3].to_vec(),
            ..c.clone()
        };
        let clients: Vec<String> = complete
            .client_hosts()
            .unwrap()
            .iter()
            .map(|h| h.to_string())
            .collect();
        assert_eq!(clients, ["10.0.0.1:2181", "10.0.0.9:2182", "[::1]:2183"]);
        assert!(
            EnsembleConfig::parse("server.1=a:1:2;3").is_none(),
            "no version"
        );
        let multi = EnsembleConfig::parse("server.1=a:1:2|b:3:4:observer;2181\nversion=1").unwrap();
        // Hosts a connect string would refuse are no client address (and so no list).
        for bad in ["ev il:2181", "evil\u{1b}[31m:2181", "h:0", "h:x"] {
            let c = EnsembleConfig::parse(&format!("server.1=a:1:2;{bad}\nversion=1")).unwrap();
            assert_eq!(c.servers[0].client, None, "{bad:?}");
            assert_eq!(c.client_hosts(), None, "{bad:?}");
        }
        assert_eq!(multi.servers[0].role, "observer");
        assert_eq!(multi.client_hosts().unwrap()[0].to_string(), "a:2181");
    }

    /// Over many clients, the share that moves is what evens the load: growing from 3 to 5
    /// servers, 2/5 of the clients of the staying servers move, all to the 2 new ones.
    #[test]
    fn a_growing_list_moves_a_fair_share_to_the_new_servers() {
        let (old, new) = (hosts(&[1, 2, 3]), hosts(&[1, 2, 3, 4, 5]));
        let mut moved = 0;
        let trials = 10_000;
        for i in 0..trials {
            let current = &old[i % 3];
            let roll = (i as f32 + 0.5) / trials as f32;
            match plan_move(&old, &new, Some(current), roll) {
                Move::Stay => {}
                Move::To(pool) => {
                    assert_eq!(pool, hosts(&[4, 5]));
                    moved += 1;
                }
            }
        }
        let share = moved as f32 / trials as f32;
        assert!((share - 0.4).abs() < 0.01, "{share}");
    }

    #[test]
    fn a_shrinking_list_moves_only_the_clients_of_servers_that_left() {
        let (old, new) = (hosts(&[1, 2, 3, 4, 5]), hosts(&[1, 2, 3]));
        assert_eq!(plan_move(&old, &new, Some(&old[0]), 0.0), Move::Stay);
        match plan_move(&old, &new, Some(&old[4]), 0.5) {
            Move::To(pool) => assert!(pool.iter().all(|h| new.contains(h))),
            Move::Stay => panic!("a client of a server that left must move"),
        }
    }

    #[test]
    fn a_client_whose_server_left_for_new_ones_moves_to_them() {
        let (old, new) = (hosts(&[1, 2, 3]), hosts(&[4, 5, 6]));
        assert_eq!(
            plan_move(&old, &new, Some(&old[0]), 0.9),
            Move::To(new.clone())
        );
    }

    #[test]
    fn a_following_client_goes_only_where_its_seeds_or_its_allow_list_admit() {
        let seeds = ConnectString::parse("zk1.prod.example.com:2181,10.1.2.3:2181")
            .unwrap()
            .hosts;
        let rule = FollowRule::new(&seeds, &[]).unwrap();
        for yes in ["zk1.prod.example.com", "ZK7.prod.example.com", "10.1.2.3"] {
            assert!(rule.admits(yes), "{yes}");
        }
        for no in [
            "evil.example.com",
            "prod.example.com",
            "zk1.prod.example.com.evil",
            "xprod.example.com",
            "10.1.2.4",
            "127.0.0.1",
        ] {
            assert!(!rule.admits(no), "{no}");
        }
        let allowed =
            ["*.dr.example.com", "10.1.0.0/16", "192.168.7.7", "fd00::/8"].map(String::from);
        let rule = FollowRule::new(&seeds, &allowed).unwrap();
        for yes in ["a.dr.example.com", "10.1.200.9", "192.168.7.7", "fd00::1"] {
            assert!(rule.admits(yes), "{yes}");
        }
        for no in ["dr.example.com", "10.2.0.1", "192.168.7.8", "fe80::1"] {
            assert!(!rule.admits(no), "{no}");
        }
        for bad in ["a b", "*.", "10.0.0.0/33", "x/8"] {
            assert!(FollowRule::new(&seeds, &[bad.into()]).is_err(), "{bad}");
        }
        // An address is one address however it is written (review of issue 39: a seed
        // `[::1]` did not admit the `0:0:0:0:0:0:0:1` a configuration names).
        let v6 = ConnectString::parse("[::1]:2181,[FD00:0::7]:2181")
            .unwrap()
            .hosts;
        let rule = FollowRule::new(&v6, &["0:0:0:0:0:0:0:9".into()]).unwrap();
        for yes in ["0:0:0:0:0:0:0:1", "[::1]", "fd00::7", "FD00:0:0::7", "::9"] {
            assert!(rule.admits(yes), "{yes}");
        }
        assert!(!rule.admits("::2"));
        // A two-label seed admits no domain (`example.com` would admit all of `.com`'s).
        let short = ConnectString::parse("example.com:2181").unwrap().hosts;
        assert!(!FollowRule::new(&short, &[]).unwrap().admits("evil.com"));
    }
}
