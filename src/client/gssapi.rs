//! SASL GSSAPI (Kerberos V5, RFC 4752) on the system's GSSAPI library (feature `gssapi`): the
//! mechanism ZooKeeper's `Krb5LoginModule` servers serve. On each new connection, before any
//! other request: the security context is made with the server's principal (mutual
//! authentication: a server without the principal's key cannot finish it), then the server's
//! offer of security layers is answered with "none" (ZooKeeper's `auth` quality of
//! protection; the connection itself is TLS's to protect).
//!
//! Credentials are acquired again on every connection, so a client that lives for days gets
//! fresh tickets: from its keytab, through a ticket cache in memory that the library renews
//! (MIT krb5's client keytab), or from a ticket cache someone else keeps fresh (`kinit`,
//! `k5start`).

use std::ffi::CString;
use std::fmt;
use std::path::PathBuf;

use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
use libgssapi::credential::Cred;
use libgssapi::error::{Error as GssError, MajorFlags};
use libgssapi::name::Name;
use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE, GSS_NT_KRB5_PRINCIPAL};

/// How the client authenticates with Kerberos (SASL GSSAPI): whose credentials, and which
/// server principal it expects. Give it to
/// [`ClientBuilder::sasl_gssapi`](crate::ClientBuilder::sasl_gssapi). Needs the `gssapi`
/// feature (and MIT krb5's GSSAPI library: Debian's `libkrb5-dev` to build).
///
/// The Kerberos configuration is the system's, as for every Kerberos program
/// (`/etc/krb5.conf`, or the file `KRB5_CONFIG` names).
///
/// The server's principal is `zookeeper/<host>` for the host each connection dials, as
/// ZooKeeper's Java client names it, its realm from the Kerberos configuration. The host is
/// canonicalized by the Kerberos library as its configuration says: MIT krb5 looks the name
/// up, and with `rdns` (on by default, off in some distributions' `krb5.conf`) takes the
/// reverse name of the first address found. Java's client takes the reverse name of the
/// address it dials, whatever `krb5.conf` says: for servers dialled by IP address on a host
/// with `rdns = false`, or a name with several addresses each with a principal of its own,
/// the two differ; name each server by its host name with
/// [`canonicalize_host(false)`](Self::canonicalize_host) (Java's
/// `zookeeper.sasl.client.canonicalize.hostname=false`), or give the whole
/// [`server_principal`](Self::server_principal). [`service`](Self::service) replaces
/// `zookeeper` (Java's `zookeeper.sasl.client.username`). A server whose principal the KDC
/// does not know, or that does not prove itself, is passed over for the next one, as a
/// server whose certificate does not verify is; the client stops only when every server
/// failed so before it ever connected.
///
/// ```no_run
/// use zk_recipes::{Client, GssapiOptions};
/// // A service's own principal, from its keytab: tickets renewed for as long as it runs.
/// let client = Client::builder("zk1.example.com:2181,zk2.example.com:2181")
///     .sasl_gssapi(
///         GssapiOptions::new()
///             .principal("batch/worker7.example.com@EXAMPLE.COM")
///             .keytab("/etc/security/keytabs/batch.keytab"),
///     )
///     .connect()?;
/// # Ok::<(), zk_recipes::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct GssapiOptions {
    principal: Option<String>,
    keytab: Option<PathBuf>,
    ccache: Option<String>,
    service: String,
    server_principal: Option<String>,
    canonicalize_host: bool,
}

impl Default for GssapiOptions {
    fn default() -> Self {
        GssapiOptions::new()
    }
}

impl GssapiOptions {
    /// The default ticket cache's principal and tickets (what `kinit` made), the server as
    /// `zookeeper/<host>`.
    pub fn new() -> GssapiOptions {
        GssapiOptions {
            principal: None,
            keytab: None,
            ccache: None,
            service: "zookeeper".to_owned(),
            server_principal: None,
            canonicalize_host: true,
        }
    }

    /// The client's principal (`user@REALM`, `service/host@REALM`; without a realm, the
    /// configuration's default realm). Without it: the ticket cache's principal, or the
    /// keytab's first.
    pub fn principal(mut self, principal: impl Into<String>) -> GssapiOptions {
        self.principal = Some(principal.into());
        self
    }

    /// Gets tickets with the keys in this keytab (`ktutil`, `kadmin ktadd`), kept in a ticket
    /// cache in this process's memory and renewed from the keytab as they near their end:
    /// what a client that runs for days needs. The keytab is read on every connection.
    pub fn keytab(mut self, keytab: impl Into<PathBuf>) -> GssapiOptions {
        self.keytab = Some(keytab.into());
        self
    }

    /// The ticket cache to use (`FILE:/tmp/krb5cc_batch`, `KCM:`, ...) instead of the default
    /// one. With a [`keytab`](Self::keytab) too, tickets got from the keytab are kept there.
    pub fn ccache(mut self, ccache: impl Into<String>) -> GssapiOptions {
        self.ccache = Some(ccache.into());
        self
    }

    /// The service part of the server's principal: `zookeeper` unless the servers run as
    /// another (Java's `zookeeper.sasl.client.username`).
    pub fn service(mut self, service: impl Into<String>) -> GssapiOptions {
        self.service = service.into();
        self
    }

    /// The server's whole principal (`zookeeper/zk.example.com@EXAMPLE.COM`), for every host:
    /// for servers that all share one principal (Java's `zookeeper.server.principal`).
    pub fn server_principal(mut self, principal: impl Into<String>) -> GssapiOptions {
        self.server_principal = Some(principal.into());
        self
    }

    /// Whether the dialled host is canonicalized before it names the server's principal (by
    /// the Kerberos library, as its configuration says: a forward and, with `rdns`, a reverse
    /// lookup). On by default; off, the principal is `zookeeper/<host as dialled>` in the
    /// configuration's default realm.
    pub fn canonicalize_host(mut self, canonicalize: bool) -> GssapiOptions {
        self.canonicalize_host = canonicalize;
        self
    }

    /// The client's principal as given, for logs.
    pub(crate) fn who(&self) -> &str {
        self.principal
            .as_deref()
            .unwrap_or("(the ticket cache's principal)")
    }

    /// The ticket cache tickets from the keytab go into: the one given, or one in this
    /// process's memory per keytab and principal (so clients with the same identity share
    /// their tickets, and a user's own cache is never written).
    fn ccache_name(&self) -> Option<String> {
        use std::hash::{Hash, Hasher};
        if let Some(c) = &self.ccache {
            return Some(c.clone());
        }
        let keytab = self.keytab.as_ref()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (keytab, &self.principal).hash(&mut h);
        Some(format!("MEMORY:zk-recipes-{:016x}", h.finish()))
    }

    /// The server principal for `host`, and whether it is a host-based service name.
    fn target(&self, host: &str) -> (String, bool) {
        match &self.server_principal {
            Some(p) => (p.clone(), false),
            None if self.canonicalize_host => (format!("{}@{host}", self.service), true),
            None => (format!("{}/{host}", self.service), false),
        }
    }
}

/// Paths and names only: nothing here is a secret, but a keytab's path is shown as given.
impl fmt::Debug for GssapiOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GssapiOptions")
            .field("principal", &self.principal)
            .field("keytab", &self.keytab)
            .field("ccache", &self.ccache)
            .field("service", &self.service)
            .field("server_principal", &self.server_principal)
            .field("canonicalize_host", &self.canonicalize_host)
            .finish()
    }
}

/// Why a Kerberos exchange could not go on.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth another try later: the KDC could not be reached or said it cannot serve now, or
    /// tickets a keytab renews ended while it could not be reached.
    Transient(String),
    /// About this one server: its principal unknown to the KDC, or a server that did not
    /// prove itself or refused the ticket (a stale keytab there). Another server may do.
    Server(String),
    /// About this client's own credentials, the same for every server: retrying does not
    /// mend it.
    Refused(String),
}

/// MIT krb5's codes (`krb5/krb5.h`), as GSSAPI's minor status carries them.
mod code {
    pub const KDC_UNREACH: i32 = -1_765_328_228;
    pub const REALM_CANT_RESOLVE: i32 = -1_765_328_164;
    pub const REALM_UNKNOWN: i32 = -1_765_328_230;
    pub const SVC_UNAVAILABLE: i32 = -1_765_328_355;
    pub const TKT_EXPIRED: i32 = -1_765_328_352;
    pub const S_PRINCIPAL_UNKNOWN: i32 = -1_765_328_377;
    /// GSSAPI's routine errors (the major status's middle byte, an enumeration).
    pub const ROUTINE_MASK: u32 = 0x00ff_0000;
    pub const CREDENTIALS_EXPIRED: u32 = 11 << 16;
    pub const CONTEXT_EXPIRED: u32 = 12 << 16;
}

impl Failure {
    /// Classifies GSSAPI's error `e` while doing `what`.
    fn of(what: &str, e: GssError, options: &GssapiOptions) -> Failure {
        let why = format!("{what}: {e}");
        // The minor status is MIT's signed code, carried in an unsigned field.
        let minor = e.minor as i32;
        let routine = e.major.bits() & code::ROUTINE_MASK;
        let expired = minor == code::TKT_EXPIRED
            || routine == code::CREDENTIALS_EXPIRED
            || routine == code::CONTEXT_EXPIRED;
        if matches!(
            minor,
            code::KDC_UNREACH
                | code::REALM_CANT_RESOLVE
                | code::REALM_UNKNOWN
                | code::SVC_UNAVAILABLE
        ) || (expired && options.keytab.is_some())
        {
            // A keytab's tickets that ended are renewed as soon as the KDC answers (MIT
            // reports a failed renewal as the old tickets' end).
            Failure::Transient(why)
        } else if minor == code::S_PRINCIPAL_UNKNOWN {
            Failure::Server(why)
        } else {
            Failure::Refused(why)
        }
    }
}

/// An exchange whose KDC work is done: the credentials acquired and the first token made,
/// before any connection is made with them (a slow or unreachable KDC then never holds a
/// session on a server).
pub(crate) struct Started {
    ctx: ClientCtx,
    token: Vec<u8>,
    target: String,
}

/// The first part of a GSSAPI exchange with the server `host`: credentials and the service
/// ticket, and the first token.
pub(crate) fn start(options: &GssapiOptions, host: &str) -> Result<Started, Failure> {
    let (target, host_based) = options.target(host);
    let kind = if host_based {
        GSS_NT_HOSTBASED_SERVICE
    } else {
        GSS_NT_KRB5_PRINCIPAL
    };
    let name = Name::new(target.as_bytes(), Some(kind))
        .map_err(|e| Failure::Refused(format!("server principal {target:?}: {e}")))?;
    let cred = acquire(options)?;
    let flags = CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_INTEG_FLAG;
    let mut ctx = ClientCtx::new(Some(cred), name, flags, Some(GSS_MECH_KRB5));
    let token = ctx
        .step(None, None)
        .map_err(|e| Failure::of(&format!("no service ticket for {target}"), e, options))?
        .map(|t| t.to_vec())
        .unwrap_or_default();
    Ok(Started { ctx, token, target })
}

/// The rest of the exchange with the server `host`: `ask` sends a SASL token and returns the
/// server's answer.
pub(crate) fn finish<E>(
    started: Started,
    host: &str,
    mut ask: impl FnMut(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<Result<(), Failure>, E> {
    let Started {
        mut ctx,
        mut token,
        target,
    } = started;
    // Context tokens until the context is made: the server's AP-REP proves it has the key
    // (Kerberos needs one round; a few more are allowed, never an endless exchange).
    let mut answer = ask(&token)?;
    let mut rounds = 0;
    while !ctx.is_complete() {
        rounds += 1;
        if answer.is_empty() || rounds > 8 {
            return Ok(Err(Failure::Server(format!(
                "the server {host} did not answer with a Kerberos token (does it serve \
                 GSSAPI, with a principal of its own in a Krb5LoginModule JAAS section?)"
            ))));
        }
        token = match ctx.step(Some(&answer), None) {
            Ok(t) => t.map(|t| t.to_vec()).unwrap_or_default(),
            Err(e) => {
                return Ok(Err(Failure::Server(format!(
                    "the server {host} did not prove itself as {target}: {e}"
                ))))
            }
        };
        answer = ask(&token)?;
    }
    // A context made from tickets that had already ended (a KDC allows its clock skew past a
    // ticket's end, and dates what it issues no later) is expired as soon as it is made: its
    // flags are not to be had, and that is the cause to report.
    let granted = match ctx.flags() {
        Ok(f) => f,
        Err(e) => {
            return Ok(Err(Failure::Transient(format!(
                "the security context with {host} ended as it was made (tickets at their \
                 end): {e}"
            ))))
        }
    };
    if !granted.contains(CtxFlags::GSS_C_MUTUAL_FLAG) {
        return Ok(Err(Failure::Server(format!(
            "the server {host} did not authenticate itself (no mutual authentication)"
        ))));
    }
    // The server's offer (RFC 4752, 3.1): a bit mask of the security layers it takes, and its
    // largest buffer. We take none (bit 1): ZooKeeper's default quality of protection.
    let offer = match ctx.unwrap(&answer) {
        Ok(o) => o.to_vec(),
        Err(e) => {
            return Ok(Err(Failure::Server(format!(
                "the security-layer offer of {host} does not verify: {e}"
            ))))
        }
    };
    if offer.len() != 4 || offer[0] & 1 == 0 {
        return Ok(Err(Failure::Server(format!(
            "the server {host} insists on a SASL security layer (integrity or privacy on \
             every packet), which this client does not speak; run the servers with qop \
             \"auth\""
        ))));
    }
    // "No security layer", and a largest buffer of 0 as the RFC asks with it; no
    // authorization identity: the authenticated principal is who we are.
    let choice = match ctx.wrap(false, &[1, 0, 0, 0]) {
        Ok(c) => c.to_vec(),
        Err(e) => {
            return Ok(Err(Failure::Server(format!(
                "wrapping the security-layer choice for {host}: {e}"
            ))))
        }
    };
    ask(&choice)?;
    Ok(Ok(()))
}

/// The client's credentials, acquired afresh (`gss_acquire_cred_from`, MIT krb5 ≥ 1.11): from
/// the given or default ticket cache, and with a keytab, from it whenever the cache's tickets
/// are missing or near their end.
fn acquire(options: &GssapiOptions) -> Result<Cred, Failure> {
    use libgssapi_sys as sys;
    let refused = |why: String| Failure::Refused(why);
    let bad = |what: &str| refused(format!("{what} contains a NUL byte"));
    let keytab = options
        .keytab
        .as_ref()
        .map(|k| CString::new(k.as_os_str().as_encoded_bytes()).map_err(|_| bad("the keytab path")))
        .transpose()?;
    if let Some(k) = &options.keytab {
        // A clear message for the commonest mistake (GSSAPI's own says only "no credentials"),
        // for a keytab that is a file (`FILE:` or no prefix).
        let file = k
            .to_str()
            .and_then(|s| s.strip_prefix("FILE:"))
            .map_or(k.as_path(), std::path::Path::new);
        // Another kind of keytab (`MEMORY:`, `DIR:`) is GSSAPI's alone to read.
        let other_kind = k
            .to_str()
            .is_some_and(|s| s.contains(':') && !s.starts_with("FILE:"));
        let unreadable = (!other_kind)
            .then(|| std::fs::File::open(file).err())
            .flatten();
        if let Some(e) = unreadable {
            return Err(refused(format!(
                "the keytab {} cannot be read: {e}",
                k.display()
            )));
        }
    }
    let ccache = options
        .ccache_name()
        .map(|c| CString::new(c).map_err(|_| bad("the ticket cache name")))
        .transpose()?;
    let principal = options
        .principal
        .as_ref()
        .map(|p| CString::new(p.as_str()).map_err(|_| bad("the principal")))
        .transpose()?;
    let mut elements = Vec::new();
    if let Some(k) = &keytab {
        elements.push(sys::gss_key_value_element_desc {
            key: c"client_keytab".as_ptr(),
            value: k.as_ptr(),
        });
    }
    if let Some(c) = &ccache {
        elements.push(sys::gss_key_value_element_desc {
            key: c"ccache".as_ptr(),
            value: c.as_ptr(),
        });
    }
    let store = sys::gss_key_value_set_desc {
        count: elements.len() as sys::OM_uint32,
        elements: elements.as_mut_ptr(),
    };
    // No store at all when there is nothing in it: the library's defaults.
    let store_ptr: *const sys::gss_key_value_set_desc = if elements.is_empty() {
        std::ptr::null()
    } else {
        &store
    };
    // The Kerberos principal name type, 1.2.840.113554.1.2.2.1 (RFC 1964).
    let mut principal_oid_bytes = *b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01";
    let mut principal_oid = sys::gss_OID_desc {
        length: principal_oid_bytes.len() as sys::OM_uint32,
        elements: principal_oid_bytes.as_mut_ptr().cast(),
    };
    let mut minor: sys::OM_uint32 = 0;
    let mut name: sys::gss_name_t = std::ptr::null_mut();
    if let Some(p) = &principal {
        let mut buffer = sys::gss_buffer_desc {
            length: p.as_bytes().len(),
            value: p.as_ptr() as *mut _,
        };
        // SAFETY: the buffer and OID point at live locals for the call; `name` receives a
        // name we release below.
        let major =
            unsafe { sys::gss_import_name(&mut minor, &mut buffer, &mut principal_oid, &mut name) };
        if major != sys::GSS_S_COMPLETE {
            return Err(refused(format!(
                "the principal {:?}: {}",
                options.principal.as_deref().unwrap_or(""),
                GssError {
                    major: MajorFlags::from_bits_retain(major),
                    minor
                }
            )));
        }
    }
    let mut cred: sys::gss_cred_id_t = std::ptr::null_mut();
    // SAFETY: `name` is null or the name imported above; the store's strings live in
    // `keytab`/`ccache` and the static keys until the call returns; the mechanism set and
    // the outputs we do not take are null, as the API allows; `cred` receives a credential
    // whose ownership passes to `Cred::from_c` below.
    let major = unsafe {
        sys::gss_acquire_cred_from(
            &mut minor,
            name,
            0,
            std::ptr::null_mut(),
            sys::GSS_C_INITIATE as sys::gss_cred_usage_t,
            store_ptr,
            &mut cred,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if !name.is_null() {
        let mut release_minor = 0;
        // SAFETY: `name` was imported above and is released once.
        unsafe { sys::gss_release_name(&mut release_minor, &mut name) };
    }
    if major != sys::GSS_S_COMPLETE {
        let e = GssError {
            major: MajorFlags::from_bits_retain(major),
            minor,
        };
        let whose = options.who();
        return Err(Failure::of(
            &format!("no Kerberos credentials for {whose}"),
            e,
            options,
        ));
    }
    // SAFETY: `cred` was just made for us and nothing else holds it.
    Ok(unsafe { Cred::from_c(cred) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_principal_is_formed_as_javas_client_forms_it() {
        let o = GssapiOptions::new();
        assert_eq!(
            o.target("zk1.example"),
            ("zookeeper@zk1.example".into(), true)
        );
        let o = o.canonicalize_host(false).service("zk");
        assert_eq!(o.target("zk1.example"), ("zk/zk1.example".into(), false));
        let o = o.server_principal("zookeeper/all@R");
        assert_eq!(o.target("zk1.example"), ("zookeeper/all@R".into(), false));
    }

    #[test]
    fn a_keytab_gets_a_ticket_cache_in_memory_of_its_own_unless_one_is_named() {
        assert_eq!(GssapiOptions::new().ccache_name(), None);
        let a = GssapiOptions::new().keytab("/k1").principal("a");
        let b = GssapiOptions::new().keytab("/k1").principal("b");
        assert!(a.ccache_name().unwrap().starts_with("MEMORY:"));
        assert_ne!(a.ccache_name(), b.ccache_name());
        assert_eq!(a.ccache_name(), a.clone().ccache_name());
        let named = a.ccache("FILE:/tmp/x");
        assert_eq!(named.ccache_name().as_deref(), Some("FILE:/tmp/x"));
    }
}
