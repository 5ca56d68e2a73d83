//! Parsing of `host:port[,host:port...][/chroot]`.

use crate::error::{Error, Result};
use crate::paths;

/// One server of the ensemble, as written in the connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or IP literal (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectString {
    /// The servers, in the order given.
    pub hosts: Vec<HostPort>,
    /// The chroot suffix, if any (`None` for none or `/`).
    pub chroot: Option<String>,
}

fn bad(s: &str, why: &str) -> Error {
    Error::BadArguments(format!("connect string {s:?}: {why}"))
}

/// A host name or address as a connect string may give it (no spaces, no control
/// characters: it reaches logs and the resolver).
pub(crate) fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'))
}

impl ConnectString {
    /// Parses and checks a connect string without resolving any name.
    pub fn parse(s: &str) -> Result<ConnectString> {
        let (hosts_part, chroot) = match s.find('/') {
            Some(i) => (&s[..i], Some(&s[i..])),
            None => (s, None),
        };
        let chroot = match chroot {
            None | Some("/") => None,
            Some(c) => {
                paths::validate(c, false).map_err(|e| bad(s, &format!("chroot: {e}")))?;
                Some(c.to_owned())
            }
        };
        if hosts_part.trim().is_empty() {
            return Err(bad(
                s,
                "no host given (expected host:port[,host:port][/chroot])",
            ));
        }
        let mut hosts = Vec::new();
        for item in hosts_part.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad(s, "empty host between commas"));
            }
            let (host, port) = if let Some(rest) = item.strip_prefix('[') {
                let end = rest
                    .find(']')
                    .ok_or_else(|| bad(s, "unclosed '[' in an IPv6 host"))?;
                let port = rest[end + 1..]
                    .strip_prefix(':')
                    .ok_or_else(|| bad(s, &format!("{item}: port missing")))?;
                (&rest[..end], port)
            } else {
                let i = item
                    .rfind(':')
                    .ok_or_else(|| bad(s, &format!("{item}: port missing (host:port)")))?;
                (&item[..i], &item[i + 1..])
            };
            if !valid_host(host) {
                return Err(bad(s, &format!("{host:?} is not a host name or address")));
            }
            let port: u16 = port
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad(s, &format!("{port:?} is not a port (1-65535)")))?;
            hosts.push(HostPort {
                host: host.to_owned(),
                port,
            });
        }
        Ok(ConnectString { hosts, chroot })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_and_chroot() {
        let c = ConnectString::parse("127.0.0.1:2181, zk2:2182,[::1]:2183/app/a").unwrap();
        assert_eq!(c.hosts.len(), 3);
        assert_eq!(c.hosts[1].host, "zk2");
        assert_eq!(c.hosts[2].host, "::1");
        assert_eq!(c.hosts[2].port, 2183);
        assert_eq!(c.chroot.as_deref(), Some("/app/a"));
        assert_eq!(ConnectString::parse("h:1/").unwrap().chroot, None);
    }

    #[test]
    fn refuses_bad_strings() {
        for s in [
            "",
            "/x",
            "host",
            "host:",
            "host:0",
            "host:70000",
            "host:abc",
            "a:1,,b:2",
            "a b:1",
            "h:1/app/",
            "h:1//x",
            "[::1:5",
        ] {
            assert!(
                matches!(ConnectString::parse(s), Err(Error::BadArguments(_))),
                "{s:?}"
            );
        }
    }
}
