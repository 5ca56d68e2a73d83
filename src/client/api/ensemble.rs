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
    /// [`update_hosts`](Self::update_hosts).
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
