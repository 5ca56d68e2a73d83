//! A changing ensemble: its published configuration, and a new server list for the client.

use crossbeam_channel::Sender;

use crate::client::ensemble::{EnsembleConfig, CONFIG_NODE};
use crate::client::request::Req;
use crate::client::types::{Stat, WatchEvent};
use crate::client::watches::{WatchReg, WatchType};
use crate::connect_string::ConnectString;
use crate::error::{Error, Result};

use super::{Client, Retry};

impl Client {
    /// The ensemble's dynamic configuration (ZooKeeper ≥ 3.5), from the servers' own node
    /// `/zookeeper/config`, which no chroot or namespace hides. Its
    /// [`client_hosts`](EnsembleConfig::client_hosts) make a list for
    /// [`update_hosts`](Self::update_hosts), with their plaintext client ports: the
    /// configuration has no place for a `secureClientPort`, so a TLS client gives each its
    /// TLS port first (or lets [`follow_ensemble`](crate::ClientBuilder::follow_ensemble)
    /// do it, with its secure-port rule).
    ///
    /// # Errors
    /// `Protocol` if the node does not hold a configuration; the errors of a read.
    pub fn ensemble_config(&self) -> Result<(EnsembleConfig, Stat)> {
        self.config_inner(None)
    }

    /// Like [`ensemble_config`](Self::ensemble_config), and leaves a watch that reports into
    /// `tx` when the configuration changes (a reconfiguration).
    pub fn ensemble_config_watch(&self, tx: &Sender<WatchEvent>) -> Result<(EnsembleConfig, Stat)> {
        self.config_inner(Some(WatchReg::new(CONFIG_NODE, WatchType::Data, tx)))
    }

    fn config_inner(&self, reg: Option<WatchReg>) -> Result<(EnsembleConfig, Stat)> {
        let (data, stat) = self.retried(CONFIG_NODE, Retry::OnConnectionLoss, || {
            let req = Req::GetData {
                path: CONFIG_NODE.into(),
                watch: reg.clone(),
            };
            let (reply, _) = self.request(CONFIG_NODE, &req)?;
            let mut d = reply.record();
            Ok((d.buffer()?, d.stat()?))
        })?;
        let text = String::from_utf8_lossy(&data);
        let config = EnsembleConfig::parse(&text).ok_or_else(|| {
            Error::Protocol(format!("{CONFIG_NODE} holds no ensemble configuration"))
        })?;
        Ok((config, stat))
    }

    /// Changes the ensemble's membership (ZooKeeper ≥ 3.5 with `reconfigEnabled`, and a
    /// client allowed to: a super user, or servers with `skipACL`): `joining` are
    /// `server.N=host:quorum:election[:role];[host:]client_port` specs, `leaving` server ids;
    /// `from_version` makes it conditional on the configuration still being that version.
    /// Returns the new configuration. Not retried (it is not idempotent).
    ///
    /// # Errors
    /// `ReconfigDisabled`, `NoAuth`, `NewConfigNoQuorum`, `ReconfigInProgress`, `BadVersion`
    /// from the server; `BadArguments` for nothing to change.
    pub fn reconfig(
        &self,
        joining: &[&str],
        leaving: &[u64],
        from_version: Option<u64>,
    ) -> Result<(EnsembleConfig, Stat)> {
        if joining.is_empty() && leaving.is_empty() {
            return Err(Error::BadArguments(
                "a reconfiguration with no change".into(),
            ));
        }
        let leaving: Vec<String> = leaving.iter().map(u64::to_string).collect();
        let req = Req::Reconfig {
            joining: joining.join(","),
            leaving: leaving.join(","),
            from: from_version.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX)),
        };
        let (reply, _) = self.request(CONFIG_NODE, &req)?;
        let mut d = reply.record();
        let (data, stat) = (d.buffer()?, d.stat()?);
        let config = EnsembleConfig::parse(&String::from_utf8_lossy(&data)).ok_or_else(|| {
            Error::Protocol("the reconfiguration's answer holds no configuration".into())
        })?;
        Ok((config, stat))
    }

    /// The servers this client connects to now (`host:port`, after
    /// [`update_hosts`](Self::update_hosts) or
    /// [`follow_ensemble`](crate::ClientBuilder::follow_ensemble) changed them).
    pub fn servers(&self) -> Vec<String> {
        self.core
            .host_list()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Changes the servers this client connects to, as ZooKeeper's `updateServerList` does,
    /// keeping the session: `connect_string` lists the new servers (its chroot, if any, must
    /// be the client's own). So that the ensemble's clients spread evenly with as few moves
    /// as possible, a client whose server stays in a grown list moves with probability
    /// 1 − old/new, to a new server; in a list that stayed the same size or shrank, it stays;
    /// a client whose server left always moves. A move is a reconnect (SUSPENDED, then
    /// RECONNECTED on the same session). Host names are resolved again on every dial.
    /// Returns whether this client moves.
    ///
    /// # Errors
    /// `BadArguments` for a bad connect string or another chroot.
    pub fn update_hosts(&self, connect_string: &str) -> Result<bool> {
        let parsed = ConnectString::parse(connect_string)?;
        if parsed.chroot.is_some() && parsed.chroot != self.core.config.connect.chroot {
            return Err(Error::BadArguments(format!(
                "{connect_string:?}: a client's chroot cannot change"
            )));
        }
        Ok(self.core.update_hosts(parsed.hosts))
    }
}
