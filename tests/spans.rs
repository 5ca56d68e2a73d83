//! The `tracing` feature's spans: an acquire, a handshake and a reconnect, each with the
//! session id (or the server) as a field, seen by a subscriber as a service would install.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use zk_recipes::lock::{InterProcessMutex, InterProcessSemaphoreMutex};
use zk_recipes::ConnectionState::{Reconnected, Suspended};

/// A span's fields, as names and values.
type SpanFields = Vec<(String, String)>;

/// Every span opened, as its name and its fields.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(String, SpanFields)>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().into(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().into(), value.into()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields(Vec::new());
        span.record(&mut fields);
        let mut spans = self.0.lock().unwrap();
        spans.push((span.metadata().name().into(), fields.0));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &Id, values: &Record<'_>) {
        let mut fields = Fields(Vec::new());
        values.record(&mut fields);
        let mut spans = self.0.lock().unwrap();
        if let Some((_, known)) = (id.into_u64() as usize)
            .checked_sub(1)
            .and_then(|i| spans.get_mut(i))
        {
            known.extend(fields.0);
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    fn find(&self, name: &str) -> Vec<SpanFields> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

/// The field's last value (a field recorded after the span opened comes after its `Empty`).
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn acquire_handshake_and_reconnect_open_spans_with_the_session_id() {
    let recorder = Recorder::default();
    // For the whole process: the client's own threads open the handshake spans.
    tracing::subscriber::set_global_default(recorder.clone()).unwrap();
    let f = faulty();
    let client = connect(&f.proxy.connect_string(), Duration::from_secs(10));
    let session = client.session_id().unwrap().to_string();
    // The new session's handshake names the session it was granted.
    let handshakes = recorder.find("zk_recipes.handshake");
    assert!(
        handshakes
            .iter()
            .any(|h| field(h, "server") == Some(&f.proxy.connect_string())
                && field(h, "session_id") == Some(&session)),
        "{handshakes:?}"
    );

    let sub = client.subscribe();
    f.proxy.cut();
    next_state(&sub, Suspended);
    next_state(&sub, Reconnected);
    let reconnects = recorder.find("zk_recipes.reconnect");
    assert!(
        reconnects
            .iter()
            .any(|r| field(r, "session_id") == Some(&session)),
        "{reconnects:?}"
    );

    let path = root("spans");
    let mutex = InterProcessMutex::new(&client, &path).unwrap();
    drop(mutex.acquire().unwrap());
    let acquires = recorder.find("zk_recipes.acquire");
    assert!(
        acquires
            .iter()
            .any(|a| field(a, "path") == Some(&path) && field(a, "session_id") == Some(&session)),
        "{acquires:?}"
    );

    // A recipe built on others (the semaphore takes an internal mutex, then a lease) shows as
    // one acquire, on the path the caller named (reviewer's finding: two, on inner paths).
    let semaphore_path = root("spans-semaphore");
    let semaphore = InterProcessSemaphoreMutex::new(&client, &semaphore_path).unwrap();
    let before = recorder.find("zk_recipes.acquire").len();
    drop(semaphore.acquire().unwrap());
    let acquires = recorder.find("zk_recipes.acquire");
    let new: Vec<&str> = acquires[before..]
        .iter()
        .filter_map(|a| field(a, "path"))
        .filter(|p| p.starts_with(semaphore_path.as_str()))
        .collect();
    assert_eq!(new, [semaphore_path.as_str()], "{acquires:?}");
}
