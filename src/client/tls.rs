//! TLS (feature `tls`, on `rustls` with the `ring` provider: no OpenSSL). The settings
//! ([`TlsOptions`]) name PEM files, and every connection reads them again, so a rotated
//! certificate or key is used from the next reconnect on, with no restart.

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::dial::bound;
use super::link::OpenError;
use crate::error::ConnectFailure;

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
#[derive(Clone, PartialEq, Eq)]
pub struct TlsOptions {
    ca: Store,
    identity: Option<Identity>,
    server_name: Option<String>,
    crls: Option<PathBuf>,
}

/// A password that is wiped when dropped.
type Password = zeroize::Zeroizing<String>;

/// Where the trusted authorities are.
#[derive(Clone, PartialEq, Eq)]
enum Store {
    /// A PEM file of certificates.
    Pem(PathBuf),
    /// A PKCS#12 trust store and its password.
    Pkcs12(PathBuf, Password),
}

/// Where the client's own certificate chain and key are.
#[derive(Clone, PartialEq, Eq)]
enum Identity {
    /// PEM files: the chain, the key, and the key's password if it is encrypted.
    Pem(PathBuf, PathBuf, Option<Password>),
    /// A PKCS#12 key store and its password.
    Pkcs12(PathBuf, Password),
}

impl TlsOptions {
    /// Trusts the certificate authorities in the PEM file `ca` (one or more certificates),
    /// and no others.
    pub fn new(ca: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions::trusting(Store::Pem(ca.into()))
    }

    /// Trusts the certificate authorities of the PKCS#12 trust store `store` (its trusted
    /// certificate entries, as `keytool -importcert -storetype PKCS12` writes them; Java's
    /// `ssl.trustStore.type=PKCS12`), opened with `password`, and no others.
    pub fn pkcs12_trust_store(store: impl Into<PathBuf>, password: &str) -> TlsOptions {
        TlsOptions::trusting(Store::Pkcs12(
            store.into(),
            Password::new(password.to_owned()),
        ))
    }

    fn trusting(ca: Store) -> TlsOptions {
        TlsOptions {
            ca,
            identity: None,
            server_name: None,
            crls: None,
        }
    }

    /// Presents the certificate chain in the PEM file `cert` (the client's certificate
    /// first), proven with the private key in the PEM file `key` (PKCS#8, PKCS#1 or SEC1).
    /// ZooKeeper's x509 authentication then names the client by its certificate's subject,
    /// which ACLs can grant to (`x509` scheme); a server with `ssl.clientAuth=need` admits
    /// no client without one.
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsOptions {
        self.identity = Some(Identity::Pem(cert.into(), key.into(), None));
        self
    }

    /// As [`identity`](Self::identity), with the private key in `key` encrypted (a PEM
    /// `ENCRYPTED PRIVATE KEY`, PKCS#8 with PBES2, PBKDF2 (SHA-2 or SHA-1) or scrypt, AES-CBC
    /// or 3DES: what `openssl pkcs8 -topk8` writes, today and in OpenSSL 1.0, and
    /// what ZooKeeper's Java client opens with `ssl.keyStore.password`). The password is
    /// wiped when these options are dropped and never reaches a log or `Debug`; a wrong one
    /// fails `connect` with [`Error::Tls`](crate::Error::Tls) at once. An unencrypted key is
    /// taken as it is.
    pub fn identity_encrypted(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        password: &str,
    ) -> TlsOptions {
        self.identity = Some(Identity::Pem(
            cert.into(),
            key.into(),
            Some(Password::new(password.to_owned())),
        ));
        self
    }

    /// As [`identity`](Self::identity), from the PKCS#12 key store `store` (Java's
    /// `ssl.keyStore.type=PKCS12`: one private key with its certificate chain, as `keytool
    /// -genkeypair -storetype PKCS12` or `openssl pkcs12 -export` write it), opened with
    /// `password`. PBES2 with AES (what keytool and OpenSSL 3 write) and the older
    /// PBE-SHA1 schemes are read. The password is wiped when these options are dropped.
    pub fn identity_pkcs12(mut self, store: impl Into<PathBuf>, password: &str) -> TlsOptions {
        self.identity = Some(Identity::Pkcs12(
            store.into(),
            Password::new(password.to_owned()),
        ));
        self
    }

    /// Checks every server's certificate against `name` instead of the host the connect
    /// string gives for it (servers reached by address whose certificates carry a name).
    pub fn server_name(mut self, name: impl Into<String>) -> TlsOptions {
        self.server_name = Some(name.into());
        self
    }

    /// Refuses servers whose certificate a certificate revocation list in the PEM file `crls`
    /// revokes (one or more `X509 CRL` blocks, as `openssl ca -gencrl` writes them). Java's
    /// `ssl.crl` fetches CRLs from the certificates' distribution points instead; here they
    /// are a file, read on every connection like the others, so a CRL published in place
    /// applies from the next connection on. Keep one CRL per issuer in the file, the latest:
    /// rustls's verifier takes the first CRL whose issuer matches and looks no further (an
    /// older one ahead of a newer one hides the newer's revocations), and a delta CRL is
    /// refused. Every certificate of a server's chain below the trusted authority must be
    /// covered by a CRL from its issuer: one whose status cannot be told is refused, as
    /// revoked ones are. A CRL past its next update still counts (refusing every server when
    /// a CRL is late would be an outage of its own; Java refuses it).
    pub fn crls(mut self, crls: impl Into<PathBuf>) -> TlsOptions {
        self.crls = Some(crls.into());
        self
    }

    /// Reads the files into a TLS client configuration.
    pub(crate) fn load(&self) -> Result<Arc<ClientConfig>, String> {
        let mut roots = RootCertStore::empty();
        let (authorities, file) = match &self.ca {
            Store::Pem(ca) => {
                let what = |e: &dyn std::fmt::Display| format!("the CA file {}: {e}", ca.display());
                let certs = CertificateDer::pem_file_iter(ca)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| what(&e))?;
                (certs, ca)
            }
            Store::Pkcs12(store, password) => (pkcs12::trusted(store, password)?, store),
        };
        for cert in authorities {
            roots
                .add(cert)
                .map_err(|e| format!("a CA certificate in {}: {e}", file.display()))?;
        }
        if roots.is_empty() {
            return Err(match &self.ca {
                Store::Pem(_) => format!("the CA file {} holds no certificate", file.display()),
                Store::Pkcs12(..) => format!(
                    "the PKCS#12 trust store {} holds no trusted certificate entry (as \
                     `keytool -importcert` makes them; certificates stored beside a key, or by \
                     `openssl pkcs12` without a key, are not marked trusted)",
                    file.display()
                ),
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.crls {
            None => versions.with_root_certificates(roots),
            Some(file) => {
                let what =
                    |e: &dyn std::fmt::Display| format!("the CRL file {}: {e}", file.display());
                let crls = CertificateRevocationListDer::pem_file_iter(file)
                    .and_then(|crls| crls.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| what(&e))?;
                if crls.is_empty() {
                    return Err(what(&"it holds no CRL"));
                }
                let verifier =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                        .with_crls(crls)
                        .build()
                        .map_err(|e| what(&e))?;
                versions.with_webpki_verifier(verifier)
            }
        };
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(Identity::Pkcs12(store, password)) => {
                let (chain, key) = pkcs12::identity(store, password)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the key store {}: {e}", store.display()))?
            }
            Some(Identity::Pem(cert, key, password)) => {
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
                let key_der = match password {
                    Some(password) => decrypt_key(&pem, password)
                        .map_err(|e| format!("the key file {}: {e}", key.display()))?,
                    None => PrivateKeyDer::from_pem_slice(&pem)
                        .map_err(|e| format!("the key file {}: {e}", key.display()))?,
                };
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
        let config = self
            .load()
            .map_err(|why| OpenError::Tls(ConnectFailure::TlsFiles, why))?;
        let name = self.server_name.as_deref().unwrap_or(host);
        let server = ServerName::try_from(name.to_owned()).map_err(|e| {
            OpenError::Tls(
                ConnectFailure::Tls,
                format!("{name:?} cannot name a certificate: {e}"),
            )
        })?;
        let mut conn = ClientConnection::new(config, server)
            .map_err(|e| OpenError::Tls(classify(&e), e.to_string()))?;
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
                        ConnectFailure::Tls,
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
                    return Err(OpenError::Tls(classify(&e), e.to_string()));
                }
            }
        }
        while conn.wants_write() {
            conn.write_tls(&mut s)?;
        }
        Ok(conn)
    }
}

/// What a TLS failure means to a user: which part of the server's certificate did not verify,
/// or whether the server refused the handshake.
pub(crate) fn classify(e: &rustls::Error) -> ConnectFailure {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                ConnectFailure::CertificateNameMismatch
            }
            C::Expired | C::ExpiredContext { .. } => ConnectFailure::CertificateExpired,
            C::NotValidYet | C::NotValidYetContext { .. } => ConnectFailure::CertificateNotYetValid,
            C::UnknownIssuer => ConnectFailure::CertificateUnknownIssuer,
            C::Revoked => ConnectFailure::CertificateRevoked,
            _ => ConnectFailure::CertificateInvalid,
        },
        rustls::Error::AlertReceived(_) => ConnectFailure::TlsRefusedByServer,
        // The client's own CRLs cannot be used.
        rustls::Error::InvalidCertRevocationList(_) => ConnectFailure::TlsFiles,
        _ => ConnectFailure::Tls,
    }
}

/// Paths and names only: a password shows as whether there is one.
impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ca, trust_store) = match &self.ca {
            Store::Pem(p) => (Some(p), None),
            Store::Pkcs12(p, _) => (None, Some(p)),
        };
        let (identity, encrypted_key, key_store) = match &self.identity {
            None => (None, false, None),
            Some(Identity::Pem(c, k, pw)) => (Some((c, k)), pw.is_some(), None),
            Some(Identity::Pkcs12(p, _)) => (None, false, Some(p)),
        };
        f.debug_struct("TlsOptions")
            .field("ca", &ca)
            .field("pkcs12_trust_store", &trust_store)
            .field("identity", &identity)
            .field("encrypted_key", &encrypted_key)
            .field("pkcs12_key_store", &key_store)
            .field("server_name", &self.server_name)
            .field("crls", &self.crls)
            .finish()
    }
}

/// PKCS#12 stores (Java's `PKCS12` key and trust stores), on `p12-keystore`.
mod pkcs12 {
    use std::path::Path;

    use p12_keystore::{KeyStore, KeyStoreEntry};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    fn open(store: &Path, password: &str) -> Result<KeyStore, String> {
        let bytes = std::fs::read(store)
            .map(crate::client::Secret::new)
            .map_err(|e| format!("the PKCS#12 store {}: {e}", store.display()))?;
        KeyStore::from_pkcs12(&bytes, password).map_err(|e| {
            format!(
                "the PKCS#12 store {} does not open (a wrong password, or not PKCS#12): {e}",
                store.display()
            )
        })
    }

    /// The trusted certificates of the trust store.
    pub(super) fn trusted(
        store: &Path,
        password: &str,
    ) -> Result<Vec<CertificateDer<'static>>, String> {
        Ok(open(store, password)?
            .entries()
            .filter_map(|(_, e)| match e {
                KeyStoreEntry::Certificate(c) => Some(CertificateDer::from(c.as_der().to_vec())),
                _ => None,
            })
            .collect())
    }

    /// The key store's one private key and its chain.
    pub(super) fn identity(
        store: &Path,
        password: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let keys = open(store, password)?;
        // Which of several keys to present is the user's to say, not the first alias's.
        let count = keys
            .entries()
            .filter(|(_, e)| matches!(e, KeyStoreEntry::PrivateKeyChain(_)))
            .count();
        if count > 1 {
            return Err(format!(
                "the PKCS#12 store {} holds {count} private keys; give one that holds only \
                 the client's",
                store.display()
            ));
        }
        let Some((_, chain)) = keys.private_key_chain() else {
            return Err(format!(
                "the PKCS#12 store {} holds no private key with its certificate",
                store.display()
            ));
        };
        let certs = chain
            .chain()
            .iter()
            .map(|c| CertificateDer::from(c.as_der().to_vec()))
            .collect();
        let key = PrivateKeyDer::Pkcs8(chain.key().to_vec().into());
        Ok((certs, key))
    }
}

/// The private key in `pem`: the `ENCRYPTED PRIVATE KEY` block decrypted with `password`, or,
/// when there is none, an unencrypted key as it is. Every buffer that held the key is wiped.
fn decrypt_key(pem: &[u8], password: &str) -> Result<PrivateKeyDer<'static>, String> {
    const BEGIN: &[u8] = b"-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &[u8] = b"-----END ENCRYPTED PRIVATE KEY-----";
    let find = |what: &[u8], from: usize| {
        pem.get(from..)?
            .windows(what.len())
            .position(|w| w == what)
            .map(|i| i + from)
    };
    let Some(start) = find(BEGIN, 0) else {
        return PrivateKeyDer::from_pem_slice(pem).map_err(|e| e.to_string());
    };
    let end = find(END, start).ok_or("an ENCRYPTED PRIVATE KEY block that does not end")?;
    let block = &pem[start..end + END.len()];
    let (_, der) = pkcs8::der::pem::decode_vec(block)
        .map_err(|e| format!("the ENCRYPTED PRIVATE KEY block: {e}"))?;
    let der = super::Secret::new(der);
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
        .map_err(|e| format!("the ENCRYPTED PRIVATE KEY block: {e}"))?;
    // A wrong password shows as a key that does not decrypt (PBES2 has no check of its own).
    let plain = info.decrypt(password.as_bytes()).map_err(|e| {
        format!(
            "the key does not decrypt with the password given (a wrong password, or an \
             encryption other than PBES2 with PBKDF2 or scrypt and AES or 3DES): {e}"
        )
    })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription, CertificateError as C};

    #[test]
    fn certificate_failures_are_told_apart_with_or_without_their_context() {
        let told = |e: rustls::Error| classify(&e);
        let cert = rustls::Error::InvalidCertificate;
        assert_eq!(
            told(cert(C::NotValidForName)),
            ConnectFailure::CertificateNameMismatch
        );
        assert_eq!(
            told(cert(C::NotValidForNameContext {
                expected: rustls::pki_types::ServerName::try_from("zk1.example.com").unwrap(),
                presented: vec!["DnsName(\"elsewhere.test\")".into()],
            })),
            ConnectFailure::CertificateNameMismatch
        );
        assert_eq!(told(cert(C::Expired)), ConnectFailure::CertificateExpired);
        assert_eq!(
            told(rustls::Error::InvalidCertRevocationList(
                rustls::CertRevocationListError::BadSignature
            )),
            ConnectFailure::TlsFiles
        );
        let now = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(9));
        let then = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(5));
        assert_eq!(
            told(cert(C::ExpiredContext {
                time: now,
                not_after: then
            })),
            ConnectFailure::CertificateExpired
        );
        assert_eq!(
            told(cert(C::NotValidYetContext {
                time: then,
                not_before: now
            })),
            ConnectFailure::CertificateNotYetValid
        );
        assert_eq!(
            told(cert(C::UnknownIssuer)),
            ConnectFailure::CertificateUnknownIssuer
        );
        assert_eq!(told(cert(C::Revoked)), ConnectFailure::CertificateRevoked);
        assert_eq!(
            told(cert(C::BadSignature)),
            ConnectFailure::CertificateInvalid
        );
        assert_eq!(
            told(rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired
            )),
            ConnectFailure::TlsRefusedByServer
        );
        assert_eq!(told(rustls::Error::DecryptError), ConnectFailure::Tls);
    }
}
