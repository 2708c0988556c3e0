//! What a piece of code logged, as a test sees it: [`Capture`] is a `tracing` subscriber that
//! keeps each event's level and fields. String fields are kept as they were recorded (not
//! through `Debug`, whose escaping would hide whether the code made a value inert before
//! logging it); other values through `Debug` (a `%` field's `Display`, a number).

use std::sync::{Arc, Mutex, PoisonError};

/// One event: its level and fields, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub level: String,
    pub fields: Vec<(String, String)>,
}

impl Event {
    /// The value of field `name`, if the event has it (`message` is the event's text).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `LEVEL name=value name=value …`, for assertions on the whole line.
    pub fn line(&self) -> String {
        let mut s = self.level.clone();
        for (k, v) in &self.fields {
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }
}

/// A subscriber that keeps every event (set it with `tracing::subscriber::set_default` or
/// `with_default`; it sees what is logged on that thread, a current-thread runtime's tasks
/// included).
#[derive(Debug, Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<Event>>>);

impl Capture {
    pub fn new() -> Capture {
        Capture::default()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<Event> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Fields(Vec<(String, String)>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        self.0.push((f.name().to_owned(), v.to_owned()));
    }
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        self.0.push((f.name().to_owned(), format!("{v:?}")));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Event {
                level: event.metadata().level().to_string(),
                fields: fields.0,
            });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
