//! TLS (feature `tls`, on `rustls` with the `ring` provider: no OpenSSL). The settings
//! ([`TlsOptions`]) name PEM files, and every connection reads them again, so a rotated
//! certificate or key is used from the next reconnect on, with no restart.

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::dial::bound;
use super::link::OpenError;

/// How the client secures its connections: the servers' certificates checked against a
/// certificate authority, and optionally a certificate of the client's own. Give it to
/// [`ClientBuilder::tls`](crate::ClientBuilder::tls). Needs the `tls` feature.
///
/// Every connection reads the files again: a certificate renewed in place is used from the
/// next reconnect on. A server's certificate must name the host the connect string gives
/// for it (a DNS name, or an IP address as an IP SAN), or the name set with
/// [`server_name`](Self::server_name).
///
/// ```no_run
/// use zk_recipes::{Client, TlsOptions};
/// let client = Client::builder("zk1.example:2281,zk2.example:2281")
///     .tls(TlsOptions::new("/etc/zk/ca.pem").identity("/etc/zk/me.pem", "/etc/zk/me.key"))
///     .connect()?;
/// # Ok::<(), zk_recipes::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    ca: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl TlsOptions {
    /// Trusts the certificate authorities in the PEM file `ca` (one or more certificates),
    /// and no others.
    pub fn new(ca: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions {
            ca: ca.into(),
            identity: None,
            server_name: None,
        }
    }

    /// Presents the certificate chain in the PEM file `cert` (the client's certificate
    /// first), proven with the private key in the PEM file `key` (PKCS#8, PKCS#1 or SEC1).
    /// ZooKeeper's x509 authentication then names the client by its certificate's subject,
    /// which ACLs can grant to (`x509` scheme); a server with `ssl.clientAuth=need` admits
    /// no client without one.
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsOptions {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// Checks every server's certificate against `name` instead of the host the connect
    /// string gives for it (servers reached by address whose certificates carry a name).
    pub fn server_name(mut self, name: impl Into<String>) -> TlsOptions {
        self.server_name = Some(name.into());
        self
    }

    /// Reads the files into a TLS client configuration.
    pub(crate) fn load(&self) -> Result<Arc<ClientConfig>, String> {
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(&self.ca)
            .map_err(|e| format!("the CA file {}: {e}", self.ca.display()))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("the CA file {}: {e}", self.ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("a CA certificate in {}: {e}", self.ca.display()))?;
        }
        if roots.is_empty() {
            return Err(format!(
                "the CA file {} holds no certificate",
                self.ca.display()
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("the certificate file {}: {e}", cert.display()))?;
                if chain.is_empty() {
                    return Err(format!(
                        "the certificate file {} holds no certificate",
                        cert.display()
                    ));
                }
                // The key's contents never reach a message: only its path. The file's bytes
                // are wiped once parsed (the parsed key goes to rustls, whose copy is its own).
                let pem = std::fs::read(key)
                    .map(super::Secret::new)
                    .map_err(|e| format!("the key file {}: {e}", key.display()))?;
                let key_der = PrivateKeyDer::from_pem_slice(&pem)
                    .map_err(|e| format!("the key file {}: {e}", key.display()))?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    format!("the key in {} for {}: {e}", key.display(), cert.display())
                })?
            }
        };
        Ok(Arc::new(config))
    }

    /// Runs the TLS handshake on `sock`, checking the server's certificate against `host`
    /// (or the name set), all by `until`.
    pub(crate) fn handshake(
        &self,
        sock: &TcpStream,
        host: &str,
        until: Instant,
    ) -> Result<ClientConnection, OpenError> {
        let config = self.load().map_err(OpenError::Tls)?;
        let name = self.server_name.as_deref().unwrap_or(host);
        let server = ServerName::try_from(name.to_owned())
            .map_err(|e| OpenError::Tls(format!("{name:?} cannot name a certificate: {e}")))?;
        let mut conn =
            ClientConnection::new(config, server).map_err(|e| OpenError::Tls(e.to_string()))?;
        let mut s = sock;
        while conn.is_handshaking() {
            if Instant::now() >= until {
                return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
            }
            bound(sock, until)?;
            while conn.wants_write() {
                conn.write_tls(&mut s)?;
            }
            if conn.is_handshaking() && conn.wants_read() {
                if conn.read_tls(&mut s)? == 0 {
                    return Err(OpenError::Tls(
                        "the server closed the connection during the TLS handshake (is it a \
                         TLS port? does it want a client certificate?)"
                            .into(),
                    ));
                }
                if let Err(e) = conn.process_new_packets() {
                    // The alert that tells the server why, then the error.
                    while conn.wants_write() {
                        if conn.write_tls(&mut s).is_err() {
                            break;
                        }
                    }
                    return Err(OpenError::Tls(e.to_string()));
                }
            }
        }
        while conn.wants_write() {
            conn.write_tls(&mut s)?;
        }
        Ok(conn)
    }
}
