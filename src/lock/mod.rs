//! Lock recipes and the core they share.
//!
//! - [`InterProcessMutex`]: reentrant mutual exclusion across processes.
//! - [`InterProcessReadWriteLock`]: shared readers, exclusive writers, downgrade.
//! - [`InterProcessSemaphoreV2`] and [`InterProcessSemaphoreMutex`]: N leases, and the
//!   non-reentrant one-lease mutex built on them.
//! - [`InterProcessMultiLock`]: several locks of any of these kinds, all or none, in one
//!   global order.
//! - [`FencingGate`]: lets a protected resource refuse a holder that lost its lock.
//! - `HerdLock` (feature `testing`): the naive lock of the early articles, a baseline for the
//!   benches only.
//! - [`revoke`]: asks a holder of a revocable lock to let go.
//! - [`inspect`]: who holds a lock and who waits, by each node's own rule.
//! - [`WhileHeld`]: writes the server applies only while a lock node exists.
//!
//! Every guard dereferences to a [`Lease`]: `is_held()`, `lost()`, `valid_until()`,
//! `check()`, `run(work)` and `fencing_token()`.

pub(crate) mod core;
mod fencing;
pub(crate) mod follow;
#[cfg(feature = "testing")]
mod herd;
mod inspect;
mod lease;
mod metrics;
mod multi;
mod mutex;
pub(crate) mod names;
mod revocation;
mod rwlock;
mod semaphore;
pub(crate) mod watching;
mod while_held;

use std::sync::Arc;
use std::time::Duration;

pub use self::core::MIN_ATTEMPT;
pub use self::fencing::{FencingGate, StaleToken};
#[cfg(feature = "testing")]
pub use self::herd::{HerdGuard, HerdLock};
pub use self::inspect::{inspect, HoldKind, LineEntry};
pub use self::lease::{Lease, RunError};
pub use self::metrics::{LockMetrics, Timing};
pub use self::multi::{InterProcessMultiLock, LockSpec, MultiLockGuard};
pub use self::mutex::{InterProcessMutex, InterProcessMutexGuard};
pub use self::names::session_of;
pub use self::revocation::{revoke, REVOKE_MESSAGE};
pub use self::rwlock::InterProcessReadWriteLock;
pub use self::semaphore::{InterProcessSemaphoreMutex, InterProcessSemaphoreV2, SemaphoreLease};
pub use self::while_held::WhileHeld;

/// How a lock behaves; the defaults suit most uses.
#[derive(Clone)]
pub struct LockOptions {
    holder_id: Option<Arc<str>>,
    acl: Option<Vec<crate::acl::Acl>>,
    lost_on_suspend: bool,
    fast_handoff: bool,
    lease_margin: Option<Duration>,
    #[cfg(feature = "testing")]
    hooks: TestHooks,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            holder_id: None,
            acl: None,
            lost_on_suspend: false,
            fast_handoff: true,
            lease_margin: None,
            #[cfg(feature = "testing")]
            hooks: TestHooks::default(),
        }
    }
}

impl std::fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockOptions")
            .field("holder_id", &self.holder_id)
            .field("lost_on_suspend", &self.lost_on_suspend)
            .field("fast_handoff", &self.fast_handoff)
            .field("lease_margin", &self.lease_margin)
            .finish()
    }
}

impl LockOptions {
    /// The defaults: holder id from host, process and thread; SUSPENDED does not count as
    /// lost; fast handoff on; lease margin a tenth of the session timeout (at least 50 ms).
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// The text stored in our lock node, which others read with `current_holder()`. Default:
    /// `host:pid:thread`.
    pub fn holder_id(mut self, id: impl Into<String>) -> Self {
        self.holder_id = Some(Arc::from(id.into()));
        self
    }

    /// Treat SUSPENDED as lost: `is_held()` turns false and `lost()` fires as soon as the
    /// connection breaks, not only when the session is gone. Safer for work that must never
    /// overlap; costs a re-acquire after every blip.
    pub fn lost_on_suspend(mut self, yes: bool) -> Self {
        self.lost_on_suspend = yes;
        self
    }

    /// When the node we wait on was the only one ahead of us and is deleted, take the lock
    /// without listing again (on by default; off only to measure what it saves).
    pub fn fast_handoff(mut self, yes: bool) -> Self {
        self.fast_handoff = yes;
        self
    }

    /// How much earlier than the session's certain validity a lease stops being valid (default
    /// a tenth of the session timeout, at least 50 ms). It covers clock drift and scheduling,
    /// and on an ensemble it should be at least half the servers' `tickTime` (see "Lease
    /// bound" in the `client` module docs).
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// The ACL of this lock's nodes and of the lock path when the lock creates it (default: the
    /// client's, see `ClientBuilder::default_acl`).
    pub fn acl(mut self, acl: Vec<crate::acl::Acl>) -> Self {
        self.acl = Some(acl);
        self
    }

    pub(crate) fn acl_for<'a>(&'a self, client: &'a crate::Client) -> &'a [crate::acl::Acl] {
        self.acl.as_deref().unwrap_or_else(|| client.default_acl())
    }

    /// The holder id to write into the node: shared, not copied, per acquisition.
    pub(crate) fn holder_id_text(&self) -> Arc<str> {
        self.holder_id.clone().unwrap_or_else(default_holder_id)
    }

    /// Test hook: runs just before the create of a contender node is sent, with its path.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_before_create(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.hooks.before_create = Some(Arc::new(f));
        self
    }

    /// Test hook: runs after the watch on the node ahead is set and before the wait begins,
    /// with the watched path.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_after_watch_set(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.hooks.after_watch_set = Some(Arc::new(f));
        self
    }

    /// Test hook: runs when a downgrade's look at the write node has been answered, before its
    /// last look at the write hold's bound, with the read node's path.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn testing_after_look(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.hooks.after_look = Some(Arc::new(f));
        self
    }
}

#[cfg(feature = "testing")]
impl LockOptions {
    /// Runs the `testing_before_create` hook, if any, with the path `path` makes (made only
    /// if there is a hook).
    pub(crate) fn hook_before_create(&self, path: impl FnOnce() -> String) {
        self.hooks.before_create(path);
    }
}

#[cfg(feature = "testing")]
type Hook = Arc<dyn Fn(&str) + Send + Sync>;

#[cfg(feature = "testing")]
#[derive(Clone, Default)]
struct TestHooks {
    before_create: Option<Hook>,
    after_watch_set: Option<Hook>,
    after_look: Option<Hook>,
}

#[cfg(feature = "testing")]
impl TestHooks {
    /// The path is made only if a hook wants it (the benches build with `testing` on).
    fn before_create(&self, path: impl FnOnce() -> String) {
        if let Some(h) = &self.before_create {
            h(&path())
        }
    }
    fn after_watch_set(&self, path: &str) {
        if let Some(h) = &self.after_watch_set {
            h(path)
        }
    }
    fn after_look(&self, path: &str) {
        if let Some(h) = &self.after_look {
            h(path)
        }
    }
}

fn default_holder_id() -> Arc<str> {
    // Kept per thread, made again only when the process id changed (a forked child): the
    // formatting would otherwise be redone on every acquisition.
    thread_local! {
        static ID: std::cell::RefCell<Option<(u32, Arc<str>)>> = const { std::cell::RefCell::new(None) };
    }
    let pid = std::process::id();
    let make = || {
        let thread = std::thread::current();
        let name = thread
            .name()
            .map_or_else(|| format!("{:?}", thread.id()), str::to_owned);
        Arc::<str>::from(format!("{}:{pid}:{name}", host()))
    };
    ID.try_with(|id| {
        let mut id = id.borrow_mut();
        match id.as_ref() {
            Some((made_in, text)) if *made_in == pid => text.clone(),
            _ => id.insert((pid, make())).1.clone(),
        }
    })
    // The cache is gone once the thread is ending (another thread-local's destructor may
    // still take a lock): made afresh then.
    .unwrap_or_else(|_| make())
}

/// This machine's name, read once.
fn host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "unknown-host".into())
    })
}

#[cfg(test)]
mod tests {
    use super::default_holder_id;

    fn pid_in(id: &str) -> Option<String> {
        id.split(':').nth(1).map(str::to_owned)
    }

    /// A reviewer's finding: the per-thread cache kept the parent's pid in a forked child,
    /// whose locks then named the wrong process as their holder.
    #[test]
    fn a_forked_child_names_itself_as_holder() {
        assert_eq!(
            pid_in(&default_holder_id()),
            Some(std::process::id().to_string())
        );
        // SAFETY: the child only reads its pid, formats a string and exits without unwinding
        // or running the parent's destructors.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let ok = pid_in(&default_holder_id()) == Some(std::process::id().to_string());
            // SAFETY: ends the child at once, as a forked test child must.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }

    /// A reviewer's finding: a lock taken in another thread-local's destructor, after the
    /// cache's own was destroyed, panicked there (and a panic in a destructor aborts).
    #[test]
    fn a_holder_id_can_be_had_while_a_thread_ends() {
        struct TakesALock;
        impl Drop for TakesALock {
            fn drop(&mut self) {
                assert!(!default_holder_id().is_empty());
            }
        }
        thread_local! {
            static LATE: TakesALock = const { TakesALock };
        }
        let ended = std::thread::spawn(|| {
            // Registered before the cache, so destroyed after it.
            LATE.with(|_| {});
            let _ = default_holder_id();
        })
        .join();
        assert!(ended.is_ok());
    }
}
