//! The `tracing` feature's spans: an acquire, a handshake and a reconnect, each with the
//! session id (or the server) as a field, seen by a subscriber as a service would install.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use zk_recipes::lock::InterProcessMutex;
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
    fn record(&self, _: &Id, _: &Record<'_>) {}
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

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
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
    let handshakes = recorder.find("zk_recipes.handshake");
    assert!(
        handshakes
            .iter()
            .any(|h| field(h, "server") == Some(&f.proxy.connect_string())),
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
}
