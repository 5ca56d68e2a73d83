//! The tree cache (`CuratorCache`, issue 38) against a real ZooKeeper: its snapshot, its
//! events, never an older state, convergence after a reconnection and a lost session, and
//! saying when it is stale.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zk_recipes::cache::{CacheEvent, CacheOptions, CuratorCache};
use zk_recipes::{Client, ConnectionState, CreateMode};

/// The server's tree under `root`: path → data (read node by node).
fn server_tree(c: &Client, root: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        let Ok((data, _)) = c.data(&p) else { continue };
        out.insert(p.clone(), data);
        for child in c.children(&p).unwrap_or_default() {
            todo.push(format!("{p}/{child}"));
        }
    }
    out
}

fn cache_tree(cache: &CuratorCache) -> BTreeMap<String, Vec<u8>> {
    cache
        .nodes()
        .into_iter()
        .map(|n| (n.path, n.data.map(|d| d.to_vec()).unwrap_or_default()))
        .collect()
}

/// Waits until the cache holds exactly the server's tree.
fn converges(cache: &CuratorCache, c: &Client, root: &str) -> bool {
    wait_for(SOON, || {
        (cache.is_current() && cache_tree(cache) == server_tree(c, root)).then_some(())
    })
    .is_some()
}

/// Every event the listeners heard, and a check run on each: a node's state never goes back
/// (by `czxid`, then `mzxid`), per path.
fn record(cache: &CuratorCache) -> Arc<Mutex<Vec<CacheEvent>>> {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    cache.add_listener(move |e| h.lock().unwrap().push(e.clone()));
    heard
}

fn assert_never_back(heard: &[CacheEvent]) {
    let mut last: HashMap<String, (i64, i64)> = HashMap::new();
    for e in heard {
        let (path, at) = match e {
            CacheEvent::Created(n) => (&n.path, (n.stat.czxid, n.stat.mzxid)),
            CacheEvent::Changed { new, .. } => (&new.path, (new.stat.czxid, new.stat.mzxid)),
            CacheEvent::Deleted(n) => (&n.path, (n.stat.czxid, n.stat.mzxid)),
            _ => continue,
        };
        if let Some(before) = last.get(path) {
            let deleted_then_shown = matches!(e, CacheEvent::Deleted(_)) && *before == at;
            assert!(
                at > *before || deleted_then_shown,
                "{path} went back: {before:?} then {at:?} ({e:?})"
            );
        }
        last.insert(path.clone(), at);
    }
}

/// The first full read holds the tree as the server has it, read from memory after.
#[test]
fn the_first_read_holds_the_whole_tree() {
    let s = server();
    let root = root("cache-snapshot");
    let c = connect(&s.connect_string(), SOON);
    c.create(&root, b"r", CreateMode::Persistent).unwrap();
    for a in 0..4 {
        let pa = format!("{root}/a{a}");
        c.create(&pa, format!("a{a}").as_bytes(), CreateMode::Persistent)
            .unwrap();
        for b in 0..5 {
            c.create(&format!("{pa}/b{b}"), b"", CreateMode::Persistent)
                .unwrap();
        }
    }
    let cache = CuratorCache::new(&c, &root, CacheOptions::default()).unwrap();
    let heard = record(&cache);
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    assert_eq!(cache_tree(&cache), server_tree(&c, &root));
    assert_eq!(cache.size(), 1 + 4 + 20);
    assert_eq!(cache.children(&format!("{root}/a1")).len(), 5);
    assert_eq!(
        cache
            .get(&format!("{root}/a2"))
            .unwrap()
            .data
            .unwrap()
            .as_ref(),
        b"a2"
    );
    assert!(heard.lock().unwrap().contains(&CacheEvent::Initialized));
    let memory = cache.memory();
    assert_eq!(memory.nodes, 25);
    assert!(memory.per_node() > 0);
}

/// Changes made after the start reach the cache and its listeners, in order; it ends equal to
/// the server's tree, and no node's state went back on the way.
#[test]
fn changes_are_followed_in_order_and_never_go_back() {
    changes_are_followed_in_order_and_never_go_back_with(CacheOptions::new(), "");
}

/// The same, on one-shot watches.
#[test]
fn changes_are_followed_in_order_and_never_go_back_on_one_shot_watches() {
    changes_are_followed_in_order_and_never_go_back_with(
        CacheOptions::new().one_shot_watches(),
        "-one-shot",
    );
}

fn changes_are_followed_in_order_and_never_go_back_with(options: CacheOptions, tag: &str) {
    let s = server();
    let root = root(&format!("cache-follow{tag}"));
    let writer = connect(&s.connect_string(), SOON);
    writer.create(&root, b"", CreateMode::Persistent).unwrap();
    let cache = CuratorCache::new(&connect(&s.connect_string(), SOON), &root, options).unwrap();
    let heard = record(&cache);
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    for i in 0..40 {
        let p = format!("{root}/n{}", i % 7);
        match writer.exists(&p).unwrap() {
            None => {
                writer
                    .create(&p, format!("{i}").as_bytes(), CreateMode::Persistent)
                    .unwrap();
            }
            Some(_) if i % 3 == 0 => writer.delete(&p).unwrap(),
            Some(_) => {
                writer
                    .set_data(&p, format!("{i}").as_bytes(), None)
                    .unwrap();
            }
        }
    }
    assert!(
        converges(&cache, &writer, &root),
        "never matched the server"
    );
    assert_never_back(&heard.lock().unwrap());
}

/// While the connection is down the cache says it is stale; what changed meanwhile (made,
/// deleted, changed: no event replays it for a persistent watch) is there once it is back.
#[test]
fn after_a_reconnection_the_cache_reads_again_what_changed_meanwhile() {
    after_a_reconnection_the_cache_reads_again_what_changed_meanwhile_with(CacheOptions::new(), "");
}

/// The same, on one-shot watches.
#[test]
fn after_a_reconnection_the_cache_reads_again_what_changed_meanwhile_on_one_shot_watches() {
    after_a_reconnection_the_cache_reads_again_what_changed_meanwhile_with(
        CacheOptions::new().one_shot_watches(),
        "-one-shot",
    );
}

fn after_a_reconnection_the_cache_reads_again_what_changed_meanwhile_with(
    options: CacheOptions,
    tag: &str,
) {
    let f = faulty();
    let root = &*format!("/cache-reconnect{tag}");
    let writer = connect(&f.server.connect_string(), SOON);
    writer.create(root, b"", CreateMode::Persistent).unwrap();
    for n in ["keep", "drop", "change"] {
        writer
            .create(&format!("{root}/{n}"), b"0", CreateMode::Persistent)
            .unwrap();
    }
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let cache = CuratorCache::new(&client, root, options).unwrap();
    let heard = record(&cache);
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    let sub = client.subscribe();
    f.proxy.blackhole();
    next_state(&sub, ConnectionState::Suspended);
    assert!(!cache.is_current(), "current while the connection is down");
    writer.delete(&format!("{root}/drop")).unwrap();
    writer
        .set_data(&format!("{root}/change"), b"1", None)
        .unwrap();
    writer
        .create(&format!("{root}/new"), b"n", CreateMode::Persistent)
        .unwrap();
    f.proxy.heal();
    next_state(&sub, ConnectionState::Reconnected);
    assert!(converges(&cache, &writer, root), "never matched the server");
    assert!(cache.get(&format!("{root}/drop")).is_none());
    assert_eq!(
        cache
            .get(&format!("{root}/change"))
            .unwrap()
            .data
            .unwrap()
            .as_ref(),
        b"1"
    );
    assert_never_back(&heard.lock().unwrap());
}

/// After the session is lost, the cache reads the whole tree again on the next one and
/// converges; nodes gone meanwhile leave it.
#[test]
fn after_a_session_loss_the_cache_is_built_again() {
    after_a_session_loss_the_cache_is_built_again_with(CacheOptions::new(), "");
}

/// The same, on one-shot watches.
#[test]
fn after_a_session_loss_the_cache_is_built_again_on_one_shot_watches() {
    after_a_session_loss_the_cache_is_built_again_with(
        CacheOptions::new().one_shot_watches(),
        "-one-shot",
    );
}

fn after_a_session_loss_the_cache_is_built_again_with(options: CacheOptions, tag: &str) {
    let f = faulty();
    let root = &*format!("/cache-session{tag}");
    let writer = connect(&f.server.connect_string(), SOON);
    writer.create(root, b"", CreateMode::Persistent).unwrap();
    writer
        .create(&format!("{root}/old"), b"", CreateMode::Persistent)
        .unwrap();
    let client = connect(&f.proxy.connect_string(), Duration::from_millis(1500));
    let cache = CuratorCache::new(&client, root, options).unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    let sub = client.subscribe();
    let (id, passwd) = client.testing_session_credentials().unwrap();
    f.proxy.blackhole();
    next_state(&sub, ConnectionState::Suspended);
    writer.delete(&format!("{root}/old")).unwrap();
    writer
        .create(&format!("{root}/young"), b"y", CreateMode::Persistent)
        .unwrap();
    assert!(expire(&f.server, id, &passwd));
    f.proxy.heal();
    assert!(converges(&cache, &writer, root), "never matched the server");
    assert_ne!(client.session_id(), Some(id));
    // And it follows changes on the new session.
    writer
        .set_data(&format!("{root}/young"), b"z", None)
        .unwrap();
    assert!(converges(&cache, &writer, root));
}

/// A cache of one node holds that node only, and follows its creation, changes and deletion.
#[test]
fn a_single_node_cache_holds_the_node_alone() {
    a_single_node_cache_holds_the_node_alone_with(CacheOptions::new(), "");
}

/// The same, on one-shot watches.
#[test]
fn a_single_node_cache_holds_the_node_alone_on_one_shot_watches() {
    a_single_node_cache_holds_the_node_alone_with(
        CacheOptions::new().one_shot_watches(),
        "-one-shot",
    );
}

fn a_single_node_cache_holds_the_node_alone_with(options: CacheOptions, tag: &str) {
    let s = server();
    let root = root(&format!("cache-single{tag}"));
    let writer = connect(&s.connect_string(), SOON);
    let options = options.single_node();
    let cache = CuratorCache::new(&connect(&s.connect_string(), SOON), &root, options).unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    assert_eq!(cache.size(), 0);
    writer.create(&root, b"1", CreateMode::Persistent).unwrap();
    writer
        .create(&format!("{root}/child"), b"", CreateMode::Persistent)
        .unwrap();
    writer.set_data(&root, b"2", None).unwrap();
    let seen = wait_for(SOON, || {
        let n = cache.get(&root)?;
        (n.data.as_deref() == Some(&b"2"[..])).then_some(n)
    });
    assert!(seen.is_some(), "the node's change never reached the cache");
    assert_eq!(cache.size(), 1, "a single-node cache holds no children");
    writer.delete(&format!("{root}/child")).unwrap();
    writer.delete(&root).unwrap();
    assert!(wait_for(SOON, || (cache.size() == 0).then_some(())).is_some());
}

/// A node this client may not read is left out (as the server leaves its events out): the
/// cache of the rest is built and current (review 38b, finding 4: the full read failed on it
/// for ever).
#[test]
fn a_node_this_client_may_not_read_is_left_out() {
    let s = server();
    let root = root("cache-private");
    let owner = zk_recipes::Client::builder(&s.connect_string())
        .authorization("digest", b"owner:secret".to_vec())
        .connect()
        .unwrap();
    owner.create(&root, b"", CreateMode::Persistent).unwrap();
    owner
        .create(&format!("{root}/public"), b"p", CreateMode::Persistent)
        .unwrap();
    owner
        .create_with_acl(
            &format!("{root}/private"),
            b"s",
            CreateMode::Persistent,
            &zk_recipes::acl::creator_all(),
        )
        .unwrap();
    let cache = CuratorCache::new(
        &connect(&s.connect_string(), SOON),
        &root,
        CacheOptions::default(),
    )
    .unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON), "never current");
    assert!(cache.get(&format!("{root}/public")).is_some());
    assert!(cache.get(&format!("{root}/private")).is_none());
}

/// A closed cache is not current (review 38b, finding 5).
#[test]
fn a_closed_cache_is_not_current() {
    let s = server();
    let root = root("cache-closed");
    let c = connect(&s.connect_string(), SOON);
    c.create(&root, b"", CreateMode::Persistent).unwrap();
    let cache = CuratorCache::new(&c, &root, CacheOptions::default()).unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    cache.close();
    assert!(!cache.is_current());
}

/// Makes, changes and deletes nodes at every depth under `root` (a subtree made at once, a
/// childless node deleted and made again with children, each while the cache's
/// answers and events are held, so that it hears all of a step at once), then checks the
/// cache matches the server and no node's state went back on the way.
fn churn_deep(
    cache: &CuratorCache,
    heard: &Mutex<Vec<CacheEvent>>,
    writer: &Client,
    root: &str,
    proxy: &zk_recipes::testing::FaultProxy,
) {
    let mk = |p: &str, d: &[u8]| {
        writer
            .create(&format!("{root}{p}"), d, CreateMode::Persistent)
            .unwrap();
    };
    proxy.hold_replies();
    mk("/a", b"a");
    mk("/a/b", b"b");
    mk("/a/b/c", b"c");
    mk("/a/b/c/d", b"d");
    writer
        .set_data(&format!("{root}/a/b"), b"b2", None)
        .unwrap();
    proxy.heal();
    assert!(converges(cache, writer, root), "a subtree made at once");
    writer.delete(&format!("{root}/a/b/c/d")).unwrap();
    writer.delete(&format!("{root}/a/b/c")).unwrap();
    assert!(converges(cache, writer, root), "a subtree deleted");
    // A childless node deleted and made again with a child, heard at once: its own
    // deletion is all that says it may have children now.
    proxy.hold_replies();
    writer.delete(&format!("{root}/a/b")).unwrap();
    mk("/a/b", b"again");
    mk("/a/b/x", b"x");
    proxy.heal();
    assert!(
        converges(cache, writer, root),
        "a node made again, with other children"
    );
    mk("/a/b/x/y", b"y");
    writer
        .set_data(&format!("{root}/a/b/x/y"), b"y2", None)
        .unwrap();
    mk("/a/b/x/z", b"z");
    assert!(
        converges(cache, writer, root),
        "changes below a node made again"
    );
    assert_never_back(&heard.lock().unwrap());
}

/// On one-shot watches, a subtree made at once, and a node deleted and made again with
/// other children, are followed at every depth (each read leaves the watches its node needs;
/// a deletion heard is a node to read and to list again, as it may be back with children).
#[test]
fn on_one_shot_watches_subtrees_made_and_made_again_are_followed() {
    let f = faulty();
    let root = "/cache-one-shot-deep";
    let writer = connect(&f.server.connect_string(), SOON);
    writer.create(root, b"", CreateMode::Persistent).unwrap();
    let options = CacheOptions::new().one_shot_watches();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(30));
    let cache = CuratorCache::new(&client, root, options).unwrap();
    let heard = record(&cache);
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    churn_deep(&cache, &heard, &writer, root, &f.proxy);
    // The root itself deleted (with what is below it) and made again.
    for p in ["/a/b/x/z", "/a/b/x/y", "/a/b/x", "/a/b", "/a", ""] {
        writer.delete(&format!("{root}{p}")).unwrap();
    }
    assert!(wait_for(SOON, || (cache.size() == 0).then_some(())).is_some());
    writer
        .create(root, b"back", CreateMode::Persistent)
        .unwrap();
    writer
        .create(&format!("{root}/n"), b"n", CreateMode::Persistent)
        .unwrap();
    assert!(converges(&cache, &writer, root), "the root made again");
    assert_never_back(&heard.lock().unwrap());
}

/// A server without persistent watches: ZooKeeper 3.8 with the optimized watch manager, which
/// answers `addWatch` with `MarshallingError` (its `addWatch(path, watcher, mode)` throws), as
/// a server before 3.6 answers `Unimplemented`. The cache falls back to one-shot watches by
/// itself, is built, and follows changes at every depth.
#[test]
fn on_a_server_without_persistent_watches_the_cache_falls_back_to_one_shot_ones() {
    let mut options = server_options();
    options.system_properties.push((
        "zookeeper.watchManagerName".into(),
        "org.apache.zookeeper.server.watch.WatchManagerOptimized".into(),
    ));
    let s = zk_recipes::testing::TestingServer::with_options(options).expect("start ZooKeeper");
    let proxy = zk_recipes::testing::FaultProxy::start(s.addr()).expect("start proxy");
    let root = "/cache-fallback";
    let writer = connect(&s.connect_string(), SOON);
    // The server is the one the test needs: it refuses persistent watches.
    let (tx, _rx) = crossbeam_channel::unbounded();
    let refused = writer.add_watch(root, zk_recipes::AddWatchMode::PersistentRecursive, &tx);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.is_code(zk_recipes::ZkCode::MarshallingError)),
        "this server should refuse persistent watches: {refused:?}"
    );
    writer.create(root, b"", CreateMode::Persistent).unwrap();
    writer
        .create(&format!("{root}/old"), b"o", CreateMode::Persistent)
        .unwrap();
    let client = connect(&proxy.connect_string(), Duration::from_secs(30));
    let cache = CuratorCache::new(&client, root, CacheOptions::new()).unwrap();
    let heard = record(&cache);
    cache.start().unwrap();
    assert!(cache.wait_current(SOON), "never built");
    assert!(converges(&cache, &writer, root));
    churn_deep(&cache, &heard, &writer, root, &proxy);
}

/// A closed cache on one-shot watches leaves no watcher in its client's registry (the
/// watches the server still holds fire into nothing).
#[test]
fn a_closed_cache_on_one_shot_watches_leaves_no_watcher_behind() {
    let s = server();
    let root = root("cache-one-shot-closed");
    let c = connect(&s.connect_string(), SOON);
    c.create(&root, b"", CreateMode::Persistent).unwrap();
    for n in 0..5 {
        c.create(&format!("{root}/n{n}"), b"", CreateMode::Persistent)
            .unwrap();
    }
    let before = c.testing_watch_count();
    let cache = CuratorCache::new(&c, &root, CacheOptions::new().one_shot_watches()).unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    assert!(c.testing_watch_count() > before, "no one-shot watch set");
    cache.close();
    assert_eq!(c.testing_watch_count(), before);
}

/// On one-shot watches, a listing still to be made when a read in the same look fails (a
/// read that timed out on a connection that stayed up: requests held by a proxy past the
/// cache's step) is made later; lost, the parent's child watch (fired) would never be set
/// again and the new child never seen (review 38e, finding 1).
#[test]
fn on_one_shot_watches_a_listing_due_when_a_read_times_out_is_made_later() {
    let f = faulty();
    let root = "/cache-one-shot-timeout";
    let writer = connect(&f.server.connect_string(), SOON);
    writer.create(root, b"", CreateMode::Persistent).unwrap();
    writer
        .create(&format!("{root}/x"), b"0", CreateMode::Persistent)
        .unwrap();
    // A session long enough that the held requests time the read out before the client
    // gives the connection up (two thirds of the session).
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(40));
    let cache = CuratorCache::new(&client, root, CacheOptions::new().one_shot_watches()).unwrap();
    cache.start().unwrap();
    assert!(cache.wait_current(SOON));
    let sent = client.metrics().requests;
    // Every request held from here: the cache's read of a first change waits for its
    // step's deadline (10 s), and meanwhile both events of the transaction below queue up,
    // so that its next look takes them together.
    f.proxy.hold_requests();
    writer
        .set_data(&format!("{root}/x"), b"first", None)
        .unwrap();
    assert!(
        wait_for(SOON, || (client.metrics().requests > sent).then_some(())).is_some(),
        "the cache never read the first change"
    );
    // One transaction: a child made and a node changed.
    writer
        .multi(&[
            zk_recipes::Op::Create {
                path: format!("{root}/n"),
                data: b"n".to_vec(),
                mode: CreateMode::Persistent,
            },
            zk_recipes::Op::SetData {
                path: format!("{root}/x"),
                data: b"1".to_vec(),
                version: None,
            },
        ])
        .unwrap();
    // The second look (both events, its read held too) times out in turn; the third look's
    // read is the sign, some 20 s in, short of the client's read timeout (two thirds of the
    // 40 s session), so the connection stays up all along.
    assert!(
        wait_for(Duration::from_secs(40), || {
            (client.metrics().requests >= sent + 3).then_some(())
        })
        .is_some(),
        "the cache did not look three times"
    );
    assert_eq!(client.metrics().suspensions, 0, "the connection went down");
    f.proxy.heal();
    assert!(
        converges(&cache, &writer, root),
        "the new child was never seen"
    );
}
