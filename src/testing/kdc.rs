//! A Kerberos realm on loopback for tests: MIT krb5's KDC (Debian's `krb5-kdc`, with
//! `krb5-admin-server` for `kadmin.local`), its database, principals and keytabs in a
//! directory of its own, all gone when the [`Kdc`] is dropped (or our process dies).

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::jvm::{self, Jvm, TempDir};
use super::server::ServerKerberos;
use super::HarnessError;

/// The realm every harness KDC serves.
pub const REALM: &str = "ZK-RECIPES.TEST";

/// The principal of the harness's ZooKeeper servers: `zookeeper/<host>` for `localhost`,
/// the name a client forms for `127.0.0.1` once the host is canonicalized.
pub const SERVER_PRINCIPAL: &str = "zookeeper/localhost";

/// A running KDC for realm [`REALM`] on a loopback port, with a configuration file that
/// clients and servers point at (`KRB5_CONFIG`, `java.security.krb5.conf`).
pub struct Kdc {
    dir: TempDir,
    port: u16,
    process: parking_lot::Mutex<Option<Jvm>>,
}

impl std::fmt::Debug for Kdc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kdc")
            .field("realm", &REALM)
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Where Debian installs a program of the KDC's.
fn program(name: &str) -> Result<PathBuf, HarnessError> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .ok_or_else(|| {
            HarnessError::ZooKeeperMissing(format!(
                "{name} not found (apt-get install krb5-kdc krb5-admin-server krb5-user)"
            ))
        })
}

impl Kdc {
    /// Makes the realm's database and starts its KDC; returns once it takes connections
    /// (at most 30 s).
    pub fn start() -> Result<Kdc, HarnessError> {
        let dir = TempDir::new("kdc")?;
        let port = jvm::free_port()?;
        let d = dir.path();
        // Clients: TCP only (`udp_preference_limit`), and a host canonicalized as Java's
        // client does it (a reverse lookup of 127.0.0.1 gives `localhost`).
        let mut conf = String::new();
        let _ = write!(
            conf,
            "[libdefaults]\n  default_realm = {REALM}\n  dns_lookup_kdc = false\n  \
             dns_lookup_realm = false\n  udp_preference_limit = 1\n  rdns = true\n  \
             dns_canonicalize_hostname = true\n  ticket_lifetime = 1h\n  forwardable = false\n\
             [realms]\n  {REALM} = {{\n    kdc = 127.0.0.1:{port}\n  }}\n\
             [domain_realm]\n  localhost = {REALM}\n"
        );
        std::fs::write(d.join("krb5.conf"), conf)?;
        let mut kdc = String::new();
        let _ = write!(
            kdc,
            "[kdcdefaults]\n  kdc_ports = {port}\n  kdc_tcp_ports = {port}\n\
             [realms]\n  {REALM} = {{\n    database_name = {db}\n    key_stash_file = {stash}\n    \
             acl_file = {acl}\n    max_life = 1h\n    max_renewable_life = 1d\n    \
             supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n  }}\n\
             [logging]\n  kdc = FILE:{log}\n",
            db = d.join("principal").display(),
            stash = d.join("stash").display(),
            acl = d.join("kadm5.acl").display(),
            log = d.join("kdc.log").display(),
        );
        std::fs::write(d.join("kdc.conf"), kdc)?;
        std::fs::write(d.join("kadm5.acl"), "")?;
        let k = Kdc {
            dir,
            port,
            process: parking_lot::Mutex::new(None),
        };
        // The master key protects the database file only, which dies with the directory.
        k.run(
            "kdb5_util",
            &["-r", REALM, "create", "-s", "-P", "zk-recipes-test-master"],
        )?;
        k.serve()?;
        k.add_principal(SERVER_PRINCIPAL)?;
        Ok(k)
    }

    /// Starts the KDC's process (again) on its port; returns once it takes connections (at
    /// most 30 s) and is still running.
    fn serve(&self) -> Result<(), HarnessError> {
        let mut process = self.process.lock();
        if process.as_ref().is_some_and(Jvm::is_alive) {
            return Ok(());
        }
        let krb5kdc = program("krb5kdc")?;
        let log = self.dir.path().join("krb5kdc.out");
        let (conf, profile) = (self.krb5_conf(), self.dir.path().join("kdc.conf"));
        let started = Jvm::spawn_program(
            &krb5kdc,
            &["-n", "-r", REALM],
            &[("KRB5_CONFIG", &conf), ("KRB5_KDC_PROFILE", &profile)],
            &log,
            self.dir.path(),
        )?;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let until = Instant::now() + Duration::from_secs(30);
        // Taking connections, and ours: a process that died (its port taken by another) is
        // no KDC of ours, whatever answers there.
        while !started.is_alive()
            || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
        {
            if Instant::now() >= until || !started.is_alive() {
                return Err(HarnessError::StartFailed(format!(
                    "the KDC did not take connections on {addr}: {}",
                    jvm::log_tail(&log)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *process = Some(started);
        Ok(())
    }

    /// Stops the KDC (`SIGKILL`): its clients can no longer get tickets until
    /// [`restart`](Self::restart). Its database and keytabs stay.
    pub fn stop(&self) {
        if let Some(p) = self.process.lock().take() {
            p.kill();
        }
    }

    /// Starts a stopped KDC again, on the same port.
    pub fn restart(&self) -> Result<(), HarnessError> {
        self.serve()
    }

    /// The realm's configuration file, for `KRB5_CONFIG` and `java.security.krb5.conf`.
    pub fn krb5_conf(&self) -> PathBuf {
        self.dir.path().join("krb5.conf")
    }

    /// The KDC's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Makes `principal` (without the realm: `client`, `zookeeper/localhost`) with a random
    /// key, and a keytab holding that key; returns the keytab's path.
    pub fn add_principal(&self, principal: &str) -> Result<PathBuf, HarnessError> {
        self.add_principal_living(principal, None)
    }

    /// As [`add_principal`](Self::add_principal), with tickets that live at most `life` (the
    /// principal's `maxlife`), for tests of renewal.
    pub fn add_principal_living(
        &self,
        principal: &str,
        life: Option<Duration>,
    ) -> Result<PathBuf, HarnessError> {
        let file: String = principal
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let keytab = self.dir.path().join(format!("{file}.keytab"));
        let mut add = String::from("addprinc -randkey ");
        if let Some(life) = life {
            let _ = write!(add, "-maxlife \"{} seconds\" ", life.as_secs().max(1));
        }
        add.push_str(principal);
        self.run("kadmin.local", &["-r", REALM, "-q", &add])?;
        let ktadd = format!("ktadd -k {} {principal}", keytab.display());
        self.run("kadmin.local", &["-r", REALM, "-q", &ktadd])?;
        Ok(keytab)
    }

    /// Gets `principal`'s tickets with its `keytab` into the ticket cache `ccache`
    /// (`FILE:...`), as `kinit -kt` does: for clients that use a ticket cache only.
    pub fn kinit(&self, principal: &str, keytab: &Path, ccache: &str) -> Result<(), HarnessError> {
        let keytab = keytab.display().to_string();
        let p = format!("{principal}@{REALM}");
        self.run_with(
            "kinit",
            &["-k", "-t", &keytab, &p],
            &[("KRB5CCNAME", ccache)],
        )
    }

    /// What the ZooKeeper servers of the harness need to accept Kerberos clients: the
    /// principal [`SERVER_PRINCIPAL`] and its keytab (made with the realm).
    pub fn server(&self) -> Result<ServerKerberos, HarnessError> {
        let keytab = self.dir.path().join("zookeeper_localhost.keytab");
        Ok(ServerKerberos {
            principal: format!("{SERVER_PRINCIPAL}@{REALM}"),
            keytab,
            krb5_conf: self.krb5_conf(),
        })
    }

    /// The KDC's log: one line per ticket it issued or refused (`AS_REQ`, `TGS_REQ`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kdc.log")).unwrap_or_default()
    }

    fn run(&self, name: &str, args: &[&str]) -> Result<(), HarnessError> {
        self.run_with(name, args, &[])
    }

    fn run_with(
        &self,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<(), HarnessError> {
        let out = Command::new(program(name)?)
            .args(args)
            .env("KRB5_CONFIG", self.krb5_conf())
            .env("KRB5_KDC_PROFILE", self.dir.path().join("kdc.conf"))
            .envs(envs.iter().copied())
            .output()?;
        // kadmin.local reports a failed query on stderr with exit status 0.
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || err.contains("while ") || err.contains("error") {
            return Err(HarnessError::StartFailed(format!(
                "{name} {}: {}",
                args.join(" "),
                err.trim()
            )));
        }
        Ok(())
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        self.stop();
    }
}
