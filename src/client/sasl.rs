//! SASL DIGEST-MD5 (RFC 2831), the mechanism ZooKeeper's `DigestLoginModule` serves: the
//! client's side (feature `sasl`). Two round trips on each new connection, before any other
//! request: an empty first message, the server's challenge answered with a digest of the
//! password, and the server's own digest checked (so a server that does not know the password
//! is not believed either).

use std::fmt;

use md5::{Digest, Md5};
use zeroize::{Zeroize, Zeroizing};

use super::Secret;

/// Where ZooKeeper's SASL server lives: the protocol and server name its clients use.
const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";

/// A user and password for SASL DIGEST-MD5 (see `ClientBuilder::sasl_digest`). Its `Debug`
/// shows the user only; the password is wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SaslCredentials {
    pub user: String,
    pub password: Zeroizing<String>,
}

impl fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The SASL mechanism a client authenticates with, and its settings.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Mechanism {
    /// DIGEST-MD5 with a user and password.
    Digest(SaslCredentials),
    /// GSSAPI: Kerberos.
    #[cfg(feature = "gssapi")]
    Gssapi(super::gssapi::GssapiOptions),
}

impl Mechanism {
    /// Who the client authenticates as, for logs.
    pub fn who(&self) -> &str {
        match self {
            Mechanism::Digest(c) => &c.user,
            #[cfg(feature = "gssapi")]
            Mechanism::Gssapi(o) => o.who(),
        }
    }
}

/// One DIGEST-MD5 exchange.
pub(crate) struct DigestMd5<'a> {
    credentials: &'a SaslCredentials,
    cnonce: String,
    /// What the server must answer last, once our response went out.
    expected: Option<String>,
}

impl<'a> DigestMd5<'a> {
    /// A new exchange; `cnonce` must be unpredictable (fresh random bytes).
    pub fn new(credentials: &'a SaslCredentials, cnonce: String) -> DigestMd5<'a> {
        DigestMd5 {
            credentials,
            cnonce,
            expected: None,
        }
    }

    /// The response to the server's challenge.
    pub fn respond(&mut self, challenge: &[u8]) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(challenge)
            .map_err(|_| "the server's SASL challenge is not text".to_string())?;
        let directives = parse(text)?;
        let get = |key: &str| {
            directives
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
        };
        let nonce = get("nonce").ok_or("the SASL challenge has no nonce")?;
        let realm = get("realm").unwrap_or("");
        if let Some(qop) = get("qop") {
            if !qop.split(',').any(|q| q.trim() == "auth") {
                return Err(format!(
                    "the server offers SASL protection {qop:?}, not plain authentication"
                ));
            }
        }
        if get("algorithm").is_some_and(|a| a != "md5-sess") {
            return Err("the SASL challenge asks for an algorithm other than md5-sess".into());
        }
        let utf8 = get("charset").is_some_and(|c| c.eq_ignore_ascii_case("utf-8"));
        let c = self.credentials;
        let nc = "00000001";
        // The client's digest, and the one the server must prove it knows the password with.
        let with = |method| {
            digest(
                DIGEST_URI,
                &encode(&c.user),
                &encode(realm),
                &encode(&c.password),
                nonce,
                &self.cnonce,
                nc,
                method,
            )
        };
        let response = with("AUTHENTICATE");
        self.expected = Some(with(""));
        let mut out = String::new();
        if utf8 {
            out.push_str("charset=utf-8,");
        }
        out.push_str(&format!(
            "username={},realm={},nonce={},nc={nc},cnonce={},digest-uri=\"{DIGEST_URI}\",\
             maxbuf=65536,response={response},qop=auth",
            quote(&c.user),
            quote(realm),
            quote(nonce),
            quote(&self.cnonce),
        ));
        Ok(out.into_bytes())
    }

    /// Checks the server's last message: it proves the server knows the password too.
    pub fn verify(&self, last: &[u8]) -> Result<(), String> {
        let expected = self
            .expected
            .as_deref()
            .ok_or("a SASL answer before the challenge")?;
        let text = std::str::from_utf8(last).map_err(|_| "the SASL answer is not text")?;
        let directives = parse(text)?;
        match directives.iter().find(|(k, _)| k == "rspauth") {
            Some((_, v)) if v == expected => Ok(()),
            Some(_) => {
                Err("the server's SASL proof is wrong: it does not know the password".into())
            }
            None => Err("the server's last SASL message carries no proof".into()),
        }
    }
}

/// The user, realm or password as the digest takes it (RFC 2831, 2.1.2.1, and Java's
/// `DigestMD5Base.stringToByte_8859_1`, which the server checks with): ISO 8859-1 when every
/// character fits, whatever the charset; UTF-8 otherwise, which only a server that said
/// `charset=utf-8` accepts (without it, Java would send `?` for each such character, which
/// no password matches either).
fn encode(s: &str) -> Secret {
    Secret::new(if s.chars().all(|c| (c as u32) < 256) {
        s.chars().map(|c| c as u8).collect()
    } else {
        s.as_bytes().to_vec()
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `response` value (RFC 2831, 2.1.2.1) for `method` (`AUTHENTICATE` for the client's,
/// empty for the server's `rspauth`), with md5-sess and qop=auth.
#[allow(clippy::too_many_arguments)]
fn digest(
    uri: &str,
    user: &[u8],
    realm: &[u8],
    password: &[u8],
    nonce: &str,
    cnonce: &str,
    nc: &str,
    method: &str,
) -> String {
    let mut secret = Md5::new();
    secret.update(user);
    secret.update(b":");
    secret.update(realm);
    secret.update(b":");
    secret.update(password);
    // H(user:realm:password) stands for the password (who has it can answer any
    // challenge): it, and what is made from it, wiped once used.
    let mut hashed = secret.finalize();
    let mut a1 = Secret::new(hashed.to_vec());
    hashed.as_mut_slice().zeroize();
    a1.extend_from_slice(format!(":{nonce}:{cnonce}").as_bytes());
    let mut ha1 = Md5::digest(a1.as_slice());
    let ha1_hex = Zeroizing::new(hex(&ha1));
    ha1.as_mut_slice().zeroize();
    let ha2 = hex(&Md5::digest(format!("{method}:{uri}").as_bytes()));
    let last = Zeroizing::new(format!("{}:{nonce}:{nc}:{cnonce}:auth:{ha2}", *ha1_hex));
    hex(&Md5::digest(last.as_bytes()))
}

/// A quoted-string with `"` and `\` escaped.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// `key=value` or `key="quoted value"` directives, comma-separated.
fn parse(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_owned();
        if key.is_empty() {
            return Err("a SASL directive without a name".into());
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => value.push(c),
                    None => return Err(format!("the SASL directive {key} is not closed")),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_owned();
        }
        out.push((key, value));
    }
}

/// A fresh client nonce: 16 bytes from the system's random source, in hex.
pub(crate) fn cnonce() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes for the SASL nonce: {e}"))?;
    Ok(hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2831, section 4: the example exchange, digest for digest.
    #[test]
    fn the_rfc_example_digests_match() {
        let args = |method| {
            digest(
                "imap/elwood.innosoft.com",
                b"chris",
                b"elwood.innosoft.com",
                b"secret",
                "OA6MG9tEQGm2hh",
                "OA6MHXh6VqTrRk",
                "00000001",
                method,
            )
        };
        assert_eq!(args("AUTHENTICATE"), "d388dad90d4bbd760a152321f2143af7");
        assert_eq!(args(""), "ea40f60335c427b5527b84dbabcdfffd");
    }

    #[test]
    fn a_response_answers_the_challenge_and_the_proof_is_checked() {
        let creds = SaslCredentials {
            user: "bob".into(),
            password: Zeroizing::new("pw".into()),
        };
        let mut m = DigestMd5::new(&creds, "cn".into());
        let challenge =
            br#"realm="zk-sasl-md5",nonce="abc",qop="auth",charset=utf-8,algorithm=md5-sess"#;
        let response = String::from_utf8(m.respond(challenge).unwrap()).unwrap();
        let d = parse(&response).unwrap();
        let get = |k: &str| d.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("username").as_deref(), Some("bob"));
        assert_eq!(get("digest-uri").as_deref(), Some(DIGEST_URI));
        let expected = digest(
            DIGEST_URI,
            b"bob",
            b"zk-sasl-md5",
            b"pw",
            "abc",
            "cn",
            "00000001",
            "",
        );
        assert!(m.verify(format!("rspauth={expected}").as_bytes()).is_ok());
        assert!(m
            .verify(b"rspauth=00000000000000000000000000000000")
            .is_err());
        assert!(m.verify(b"").is_err());
    }

    #[test]
    fn directives_parse_quotes_and_escapes_and_refuse_garbage() {
        let d = parse(r#"a="x,\"y\"",b=2 , c="""#).unwrap();
        assert_eq!(
            d,
            vec![
                ("a".into(), "x,\"y\"".into()),
                ("b".into(), "2".into()),
                ("c".into(), "".into())
            ]
        );
        assert!(parse(r#"a="open"#).is_err());
        assert!(parse("=x").is_err());
    }

    #[test]
    fn values_are_digested_in_iso_8859_1_when_they_fit_and_utf_8_only_otherwise() {
        assert_eq!(encode("pässwort").as_slice(), b"p\xe4sswort");
        assert_eq!(encode("bob").as_slice(), b"bob");
        assert_eq!(encode("пароль").as_slice(), "пароль".as_bytes());
    }

    #[test]
    fn the_password_never_reaches_debug() {
        let creds = SaslCredentials {
            user: "bob".into(),
            password: Zeroizing::new("hunter2".into()),
        };
        assert!(!format!("{creds:?}").contains("hunter2"));
    }
}
