//! The store as the rest of the monitor reaches it from async code: the alert outbox the sink
//! loop drains ([`StoreOutbox`], a [`crate::sink::Outbox`]) and the history the API pages
//! ([`StoreHistory`], a [`crate::api::HistorySource`]). Each turns the store's rows into what
//! its reader takes.
//!
//! This module does not own the queries (the [`Store`] does) nor the daemon's writer loop.

use super::Store;
use crate::alert::Alert;
use crate::sink::SinkId;
use std::sync::{Arc, Mutex};

/// The store as the outbox the sink loop drains. Every call runs under `spawn_blocking`: the
/// store's lock may be held for a while (a batch of results being written, a prune step), and
/// the wait must not hold an async thread.
pub struct StoreOutbox {
    store: Arc<Mutex<Store>>,
}

impl StoreOutbox {
    pub fn new(store: Arc<Mutex<Store>>) -> StoreOutbox {
        StoreOutbox { store }
    }

    /// Runs `f` on the store off the async threads; `None` if it panicked (logged).
    async fn blocking<T, F>(&self, what: &'static str, f: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> T + Send + 'static,
    {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s)
        })
        .await
        {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(error = %e, "{what} panicked");
                None
            }
        }
    }
}

impl crate::sink::Outbox for StoreOutbox {
    async fn due(&mut self, now_ms: i64, limit: usize) -> Vec<(i64, SinkId, Alert, u32)> {
        let due = self
            .blocking("reading the alert outbox", move |s| {
                s.due_alerts(now_ms, limit)
            })
            .await;
        match due {
            Some(Ok(items)) => items
                .into_iter()
                .map(|i| (i.id, i.sink, i.alert, i.attempts))
                .collect(),
            Some(Err(e)) => {
                tracing::error!(error = %e, "reading the alert outbox failed");
                Vec::new()
            }
            None => Vec::new(),
        }
    }
    async fn delivered(&mut self, id: i64, at_ms: i64) {
        let r = self
            .blocking("recording an alert delivery", move |s| {
                s.mark_delivered(id, at_ms)
            })
            .await;
        if let Some(Err(e)) = r {
            tracing::error!(error = %e, "recording an alert delivery failed");
        }
    }
    async fn failed(&mut self, id: i64, error: &str, next_ms: i64, permanent: bool) {
        let next = if permanent { i64::MAX } else { next_ms };
        let error = error.to_owned();
        let r = self
            .blocking("recording an alert failure", move |s| {
                s.mark_failed(id, &error, next)
            })
            .await;
        if let Some(Err(e)) = r {
            tracing::error!(error = %e, "recording an alert failure failed");
        }
    }
}

/// The store as the API's history source.
pub struct StoreHistory {
    store: Arc<Mutex<Store>>,
}

impl StoreHistory {
    pub fn new(store: Arc<Mutex<Store>>) -> StoreHistory {
        StoreHistory { store }
    }
}

impl crate::api::HistorySource for StoreHistory {
    fn history(
        &self,
        target: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Option<Vec<crate::check::HistoryRow>>, super::StoreError> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .history_page(target, before, limit)
    }
    fn stats(
        &self,
        target: &str,
        now_ms: i64,
    ) -> Result<Vec<crate::check::Stats>, super::StoreError> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats(target, now_ms)
    }
    fn tool_stats(
        &self,
        target: &str,
        now_ms: i64,
    ) -> Result<Vec<crate::check::ToolStats>, super::StoreError> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tool_stats(target, now_ms)
    }
    fn uptime_hours(
        &self,
        targets: &[String],
        from_hour: i64,
    ) -> Result<Vec<super::HourCount>, super::StoreError> {
        self.lock().uptime_hours(targets, from_hour)
    }
    fn checks_between(
        &self,
        target: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<(i64, crate::state::Health, crate::check::PhaseTimings)>, super::StoreError>
    {
        self.lock().checks_between(target, from_ms, to_ms, limit)
    }
    fn events(
        &self,
        target: &str,
        limit: usize,
    ) -> Result<Vec<serde_json::Value>, super::StoreError> {
        self.lock().transitions(target, limit)
    }
    fn sent_alerts(
        &self,
        target: &str,
        limit: usize,
    ) -> Result<Vec<super::SentAlert>, super::StoreError> {
        self.lock().sent_alerts(target, limit)
    }
    fn accepted_contract(&self, target: &str) -> Result<Option<String>, super::StoreError> {
        self.lock().accepted_contract(target)
    }
}

impl StoreHistory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}
