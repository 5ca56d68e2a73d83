//! The client's one watch registry: which channels wait for which (path, kind). A watcher is
//! registered only once the server has set the watch, at most once per channel, and is
//! removed when it fires (one-shot kinds), when its waiter gives up, or when the session ends.
//! After a reconnect to the same session the registry tells the server what to restore.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;

use super::proto::{Notification, SetWatches};
use super::types::{WatchEvent, WatchKind};

/// The kinds of watch the server keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WatchType {
    /// Set by a data read: data changes and deletion.
    Data,
    /// Set by `exists` (also on a missing node): creation, data changes, deletion.
    Exist,
    /// Set by a children listing: child added or removed, deletion.
    Child,
    /// `addWatch` persistent: every change at the path; stays set.
    Persistent,
    /// `addWatch` persistent recursive: changes at the path and below; stays set.
    PersistentRecursive,
}

/// Work the reader thread does the moment a watch fires, before the event is delivered (a
/// lock waiter's next read then goes out without waiting for the waiter's thread to wake).
/// Must not block.
pub(crate) type OnFire = Arc<dyn Fn() + Send + Sync>;

/// A watcher to register when the server answers: `path` as the server names it.
#[derive(Clone)]
pub(crate) struct WatchReg {
    /// Shared, not copied, by the copies a request makes on its way (the request, its
    /// outgoing frame, the registration as set).
    pub path: Arc<str>,
    pub kind: WatchType,
    pub tx: Sender<WatchEvent>,
    pub on_fire: Option<OnFire>,
    /// Shared by the copies of one request's registration.
    state: Arc<RegState>,
}

/// Where one request's watch registration stands.
#[derive(Default)]
struct RegState {
    /// Set when the caller stopped waiting for the answer: the watch is then not registered.
    cancelled: AtomicBool,
    /// Set when this request's registration was counted (its answer came).
    counted: AtomicBool,
}

impl WatchReg {
    pub fn new(path: &str, kind: WatchType, tx: &Sender<WatchEvent>) -> WatchReg {
        WatchReg {
            path: Arc::from(path),
            kind,
            tx: tx.clone(),
            on_fire: None,
            state: Arc::default(),
        }
    }
}

impl WatchReg {
    /// The watch as the server set it. An `exists` watch on a node that exists is a data watch
    /// there (as the Java client and `zookeeper-client` register it): restored after a
    /// reconnect as an exist watch, the server would wait for a creation and never report the
    /// node's deletion meanwhile.
    pub fn as_set(&self, found: bool) -> WatchReg {
        let mut set = self.clone();
        if found && set.kind == WatchType::Exist {
            set.kind = WatchType::Data;
        }
        set
    }
}

/// A registered watcher: where its events go, and what to do first when it fires.
#[derive(Clone)]
pub(crate) struct Watcher {
    pub tx: Sender<WatchEvent>,
    pub on_fire: Option<OnFire>,
    /// How many of the channel's requests set this watch and still stand: a request that
    /// gives up takes away only its own.
    count: usize,
}

/// The watchers at one path, one list per kind (indexed by [`WatchType::index`]).
#[derive(Default)]
struct AtPath {
    lists: [Vec<Watcher>; 5],
}

impl AtPath {
    fn is_empty(&self) -> bool {
        self.lists.iter().all(Vec::is_empty)
    }
}

impl WatchType {
    const ALL: [WatchType; 5] = [
        WatchType::Data,
        WatchType::Exist,
        WatchType::Child,
        WatchType::Persistent,
        WatchType::PersistentRecursive,
    ];

    fn index(self) -> usize {
        match self {
            WatchType::Data => 0,
            WatchType::Exist => 1,
            WatchType::Child => 2,
            WatchType::Persistent => 3,
            WatchType::PersistentRecursive => 4,
        }
    }
}

/// Keyed by path, so that a lookup borrows the path it is given: a notification, a release
/// and a give-up each look at one entry, with no key to allocate (they run on every lock
/// handoff).
#[derive(Default)]
pub(crate) struct Registry {
    map: HashMap<Arc<str>, AtPath>,
    /// Paths with a persistent recursive watcher: only then does an event look at its path's
    /// ancestors.
    recursive: usize,
}

impl Registry {
    /// Registers `reg`, unless it was cancelled. A channel that already waits there is not
    /// added twice; it takes the newer `on_fire`.
    pub fn add(&mut self, reg: WatchReg) {
        if reg.state.cancelled.load(Ordering::SeqCst) {
            return;
        }
        reg.state.counted.store(true, Ordering::SeqCst);
        let list = &mut self.map.entry(reg.path).or_default().lists[reg.kind.index()];
        match list.iter_mut().find(|w| w.tx.same_channel(&reg.tx)) {
            Some(w) => {
                w.on_fire = reg.on_fire;
                w.count += 1;
            }
            None => {
                if list.is_empty() && reg.kind == WatchType::PersistentRecursive {
                    self.recursive += 1;
                }
                list.push(Watcher {
                    tx: reg.tx,
                    on_fire: reg.on_fire,
                    count: 1,
                });
            }
        }
    }

    /// Removes `tx` from every watch at `path`; returns the kinds left with no watcher, which
    /// the server may be told to drop.
    pub fn remove(&mut self, path: &str, tx: &Sender<WatchEvent>) -> Vec<WatchType> {
        let mut emptied = Vec::new();
        let Some(at) = self.map.get_mut(path) else {
            return emptied;
        };
        for kind in WatchType::ALL {
            let list = &mut at.lists[kind.index()];
            let before = list.len();
            list.retain(|w| !w.tx.same_channel(tx));
            if list.is_empty() && before > 0 {
                emptied.push(kind);
            }
        }
        if emptied.contains(&WatchType::PersistentRecursive) {
            self.recursive -= 1;
        }
        if at.is_empty() {
            self.map.remove(path);
        }
        emptied
    }

    /// The kinds some watcher waits on at `path`.
    pub fn kinds_at(&self, path: &str) -> Vec<WatchType> {
        let Some(at) = self.map.get(path) else {
            return Vec::new();
        };
        WatchType::ALL
            .into_iter()
            .filter(|kind| !at.lists[kind.index()].is_empty())
            .collect()
    }

    /// Cancels `reg`: not registered if its answer comes later; if it came already, its own
    /// registration is taken back (an `exists` watch under the kind it was set as, see
    /// [`WatchReg::as_set`]), and the channel stays registered while another of its requests
    /// set the same watch.
    pub fn cancel(&mut self, reg: &WatchReg) {
        reg.state.cancelled.store(true, Ordering::SeqCst);
        if !reg.state.counted.swap(false, Ordering::SeqCst) {
            return;
        }
        let kinds: &[WatchType] = match reg.kind {
            WatchType::Exist => &[WatchType::Exist, WatchType::Data],
            _ => std::slice::from_ref(&reg.kind),
        };
        let Some(at) = self.map.get_mut(&*reg.path) else {
            return;
        };
        for kind in kinds {
            let list = &mut at.lists[kind.index()];
            let Some(w) = list.iter_mut().find(|w| w.tx.same_channel(&reg.tx)) else {
                continue;
            };
            // Its one registration, under whichever kind it was set as.
            w.count = w.count.saturating_sub(1);
            list.retain(|w| w.count > 0);
            if list.is_empty() && *kind == WatchType::PersistentRecursive {
                self.recursive -= 1;
            }
            break;
        }
        if at.is_empty() {
            self.map.remove(&*reg.path);
        }
    }

    /// The watchers a notification goes to. One-shot watchers it fires are removed.
    pub fn fire(&mut self, n: &Notification) -> Vec<Watcher> {
        use WatchType::*;
        let one_shot: &[WatchType] = match n.kind {
            WatchKind::Created | WatchKind::DataChanged => &[Data, Exist],
            WatchKind::Deleted => &[Data, Exist, Child],
            WatchKind::ChildrenChanged => &[Child],
            WatchKind::Other | WatchKind::SessionLost | WatchKind::Closed => &[],
        };
        let mut out = Vec::new();
        // Taken out and put back only if something is left (one lookup for the usual event,
        // which fires the path's only watcher).
        if let Some((path, mut at)) = self.map.remove_entry(n.path.as_str()) {
            for kind in one_shot {
                let fired = &mut at.lists[kind.index()];
                if out.is_empty() {
                    // The list itself, not a copy of it.
                    out = std::mem::take(fired);
                } else {
                    out.append(fired);
                }
            }
            if n.kind != WatchKind::Other {
                out.extend(at.lists[Persistent.index()].iter().cloned());
            }
            if !at.is_empty() {
                self.map.insert(path, at);
            }
        }
        if self.recursive > 0 && n.kind != WatchKind::ChildrenChanged && n.kind != WatchKind::Other
        {
            for ancestor in ancestors(&n.path) {
                if let Some(at) = self.map.get(ancestor) {
                    out.extend(at.lists[PersistentRecursive.index()].iter().cloned());
                }
            }
        }
        // One channel set for two kinds hears of the event once.
        let mut i = 0;
        while i < out.len() {
            if out[..i].iter().any(|u| u.tx.same_channel(&out[i].tx)) {
                out.remove(i);
            } else {
                i += 1;
            }
        }
        out
    }

    /// What to ask the server to restore on a resumed session, in frames of at most about
    /// 128 KiB of paths each (as the Java client does; the server's own limit is 1 MiB).
    pub fn to_restore(&self, relative_zxid: i64) -> Vec<SetWatches> {
        const BATCH: usize = 128 * 1024;
        let empty = || SetWatches {
            relative_zxid,
            data: Vec::new(),
            exist: Vec::new(),
            child: Vec::new(),
            persistent: Vec::new(),
            persistent_recursive: Vec::new(),
        };
        let mut out = Vec::new();
        let mut set = empty();
        let mut size = 0;
        for (path, at) in &self.map {
            for kind in WatchType::ALL {
                if at.lists[kind.index()].is_empty() {
                    continue;
                }
                if size + path.len() > BATCH && size > 0 {
                    out.push(std::mem::replace(&mut set, empty()));
                    size = 0;
                }
                size += path.len() + 4;
                let list = match kind {
                    WatchType::Data => &mut set.data,
                    WatchType::Exist => &mut set.exist,
                    WatchType::Child => &mut set.child,
                    WatchType::Persistent => &mut set.persistent,
                    WatchType::PersistentRecursive => &mut set.persistent_recursive,
                };
                list.push(path.to_string());
            }
        }
        if size > 0 {
            out.push(set);
        }
        out
    }

    /// Forgets every watcher (the session is gone, and its watches with it); returns each
    /// channel once per path, to be told.
    pub fn drain(&mut self) -> Vec<(String, Sender<WatchEvent>)> {
        self.recursive = 0;
        let mut out: Vec<(String, Sender<WatchEvent>)> = Vec::new();
        for (path, at) in self.map.drain() {
            for w in at.lists.into_iter().flatten() {
                if !out
                    .iter()
                    .any(|(p, t)| **p == *path && t.same_channel(&w.tx))
                {
                    out.push((path.to_string(), w.tx));
                }
            }
        }
        out
    }

    /// Registered watchers, all kinds.
    #[cfg(any(test, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.map
            .values()
            .flat_map(|at| at.lists.iter())
            .map(Vec::len)
            .sum()
    }
}

/// `path` and every ancestor up to the root.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur.rfind('/') {
            Some(0) if cur.len() > 1 => Some("/"),
            Some(0) | None => None,
            Some(i) => Some(&cur[..i]),
        };
        Some(cur)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    fn note(kind: WatchKind, path: &str) -> Notification {
        Notification {
            kind,
            path: path.into(),
        }
    }

    #[test]
    fn a_channel_is_registered_once_and_fires_once() {
        let mut r = Registry::default();
        let (tx, _rx) = unbounded();
        for _ in 0..3 {
            r.add(WatchReg::new("/a", WatchType::Data, &tx));
        }
        assert_eq!(r.len(), 1);
        assert_eq!(r.fire(&note(WatchKind::Deleted, "/a")).len(), 1);
        assert_eq!(r.fire(&note(WatchKind::Deleted, "/a")).len(), 0);
    }

    #[test]
    fn a_channel_registered_again_takes_the_newer_work_to_do_on_fire() {
        use std::sync::atomic::AtomicUsize;
        let mut r = Registry::default();
        let (tx, _rx) = unbounded();
        let ran = Arc::new(AtomicUsize::new(0));
        for add in [1, 10] {
            let ran = ran.clone();
            let mut reg = WatchReg::new("/a", WatchType::Data, &tx);
            reg.on_fire = Some(Arc::new(move || {
                ran.fetch_add(add, Ordering::SeqCst);
            }));
            r.add(reg);
        }
        let fired = r.fire(&note(WatchKind::Deleted, "/a"));
        assert_eq!(fired.len(), 1);
        for w in &fired {
            (w.on_fire.as_ref().unwrap())();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 10);
    }

    #[test]
    fn many_watches_are_restored_in_several_frames() {
        let mut r = Registry::default();
        let (tx, _rx) = unbounded();
        for i in 0..3000 {
            r.add(WatchReg::new(&format!("/{i:0>100}"), WatchType::Data, &tx));
        }
        let sets = r.to_restore(1);
        assert!(sets.len() >= 2);
        assert_eq!(sets.iter().map(|s| s.data.len()).sum::<usize>(), 3000);
        assert!(sets.iter().all(|s| s.encode().len() < 200 * 1024));
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_nothing() {
        let mut r = Registry::default();
        let (a, _ra) = unbounded();
        let (b, _rb) = unbounded();
        for tx in [&a, &b] {
            r.add(WatchReg::new("/x", WatchType::Data, tx));
        }
        assert!(r.remove("/x", &a).is_empty());
        assert_eq!(r.remove("/x", &b), vec![WatchType::Data]);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn persistent_watches_stay_and_recursive_ones_see_descendants() {
        let mut r = Registry::default();
        let (tx, _rx) = unbounded();
        r.add(WatchReg::new("/a", WatchType::PersistentRecursive, &tx));
        let late = WatchReg::new("/b", WatchType::Data, &tx);
        r.cancel(&late);
        r.add(late);
        assert_eq!(r.fire(&note(WatchKind::Deleted, "/b")).len(), 0);
        assert_eq!(r.to_restore(7).len(), 1);
        assert_eq!(r.fire(&note(WatchKind::Created, "/a/b/c")).len(), 1);
        assert_eq!(r.fire(&note(WatchKind::DataChanged, "/a")).len(), 1);
        assert_eq!(r.fire(&note(WatchKind::ChildrenChanged, "/a")).len(), 0);
        assert_eq!(r.fire(&note(WatchKind::Created, "/ab")).len(), 0);
        assert_eq!(ancestors("/a/b").collect::<Vec<_>>(), ["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/").collect::<Vec<_>>(), ["/"]);
    }

    #[test]
    fn a_recursive_watch_removed_or_cancelled_no_longer_sees_descendants() {
        let mut r = Registry::default();
        let (tx, _rx) = unbounded();
        r.add(WatchReg::new("/a", WatchType::PersistentRecursive, &tx));
        r.add(WatchReg::new("/a", WatchType::Data, &tx));
        assert_eq!(r.remove("/a", &tx).len(), 2);
        assert_eq!(r.fire(&note(WatchKind::Created, "/a/b")).len(), 0);
        let reg = WatchReg::new("/a", WatchType::PersistentRecursive, &tx);
        r.add(reg.clone());
        assert_eq!(r.fire(&note(WatchKind::Created, "/a/b")).len(), 1);
        r.cancel(&reg);
        assert_eq!(r.fire(&note(WatchKind::Created, "/a/b")).len(), 0);
        assert_eq!(r.len(), 0);
        assert!(r.to_restore(1).is_empty());
    }
}
