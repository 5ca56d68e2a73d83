//! Certificates for the TLS tests, made fresh by each test: a certificate authority, a server
//! certificate for the loopback address, and client certificates by common name. Nothing is
//! checked in, so nothing expires.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use zk_recipes::testing::ServerTls;
use zk_recipes::TlsOptions;

pub struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A new certificate authority named `name`, its files in a directory removed on drop.
    pub fn new(name: &str) -> Pki {
        Pki::in_dir(name, tempfile::tempdir().unwrap())
    }

    /// For a process-wide authority, never dropped: its files under cargo's target
    /// directory, not the system temp dir.
    pub fn lasting(name: &str) -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("pki-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        Pki::in_dir(name, dir)
    }

    fn in_dir(name: &str, dir: tempfile::TempDir) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let pki = Pki { dir, ca, ca_key };
        // The server's key store: its key and certificate in one PEM file.
        let (cert, key) = pki.issue("zookeeper", &["127.0.0.1", "localhost"]);
        std::fs::write(pki.path("server.pem"), format!("{key}{cert}")).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A certificate (PEM) and its key (PEM, PKCS#8) for `cn`, valid for `names`.
    fn issue(&self, cn: &str, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// Writes a client certificate for `cn` into `cert` and `key` (replacing what is there).
    pub fn write_client(&self, cn: &str, cert: &Path, key: &Path) {
        let (c, k) = self.issue(cn, &[]);
        std::fs::write(cert, c).unwrap();
        std::fs::write(key, k).unwrap();
    }

    /// Client options that trust this CA and present a certificate for `cn`.
    pub fn client(&self, cn: &str) -> TlsOptions {
        let (cert, key) = (
            self.path(&format!("{cn}.pem")),
            self.path(&format!("{cn}.key")),
        );
        self.write_client(cn, &cert, &key);
        TlsOptions::new(self.ca()).identity(cert, key)
    }

    /// The server side: this CA's server certificate, trusting this CA's clients.
    pub fn server(&self, client_auth_required: bool) -> ServerTls {
        ServerTls {
            key_store: self.path("server.pem"),
            trust_store: self.ca(),
            client_auth_required,
            client: self.client("harness"),
            plaintext_too: false,
        }
    }
}
