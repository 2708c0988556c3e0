//! The outbox loop: the persisted queue of (alert, sink) deliveries ([`Outbox`], the store
//! implements it) delivered by one worker per sink, until shutdown ([`run_outbox`]).
//!
//! This module does not make attempts (the [`super::delivery`] workers do) nor decide retry
//! times ([`super::backoff`]); it owns the store calls, which run here one at a time.

use super::backoff::{expired, next_attempt};
use super::delivery::{Deliver, Done, Job, Sinks, WorkerOptions, worker};
use super::{DEFAULT_TIMEOUT, DeliveryError, SinkId};
use crate::alert::Alert;
use crate::clock::Timebase;
use crate::config::AlertConfig;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

/// The persisted queue of (alert, sink) deliveries, as the delivery loop sees it.
///
/// The contract the loop relies on:
/// - `due` returns rows whose next attempt time is `<= now_ms`, oldest (lowest id) first, at
///   most `limit`; `attempts` is the number of attempts already made (0 for a new row);
/// - **order within an incident**: for one `(sink, dedup_key)`, `due` returns only the
///   oldest row that is neither delivered nor permanently failed, and only when that row is due.
///   So a resolve never overtakes its trigger while the trigger waits for a retry. (SQL:
///   `AND NOT EXISTS (SELECT 1 FROM outbox o2 WHERE o2.sink = o.sink AND o2.dedup_key =
///   o.dedup_key AND o2.id < o.id AND <o2 pending>)`);
/// - `delivered` and `failed` record the outcome; `failed` with `permanent` sets the row aside
///   for good (not returned by `due` again); otherwise it increments the attempts and sets the
///   next attempt time to `next_ms`.
///
/// Rows in flight are still "pending" to the store; the loop skips those itself.
///
/// The methods are futures so that an implementation over a blocking store can run its
/// queries off the async threads (the daemon's uses `spawn_blocking`).
pub trait Outbox: Send {
    fn due(
        &mut self,
        now_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Vec<(i64, SinkId, Alert, u32)>> + Send;
    fn delivered(&mut self, id: i64, at_ms: i64) -> impl Future<Output = ()> + Send;
    fn failed(
        &mut self,
        id: i64,
        error: &str,
        next_ms: i64,
        permanent: bool,
    ) -> impl Future<Output = ()> + Send;
}

/// The loop's settings.
#[derive(Debug, Clone)]
pub struct OutboxOptions {
    /// How often to look for due retries (new alerts also wake the loop at once).
    pub poll: Duration,
    /// The most new rows taken per look.
    pub batch: usize,
    /// One attempt's time limit.
    pub timeout: Duration,
    /// Stop retrying a trigger, reminder or notice this long after it was raised. Resolves are
    /// retried for as long as it takes.
    pub expire: Duration,
    pub clock: Timebase,
    /// Where each attempt's outcome is counted (`mcpulse_alert_deliveries_total`); none in
    /// tests that do not look.
    pub fleet: Option<crate::fleet::Fleet>,
}

/// Counts one attempt's outcome for `/metrics`.
fn count(opts: &OutboxOptions, sink: &SinkId, outcome: &'static str) {
    if let Some(fleet) = &opts.fleet {
        fleet.alert_delivery(sink.as_str(), outcome);
    }
}

impl Default for OutboxOptions {
    fn default() -> Self {
        OutboxOptions {
            poll: Duration::from_secs(1),
            batch: 64,
            timeout: DEFAULT_TIMEOUT,
            expire: Duration::from_secs(24 * 3600),
            clock: Timebase::system(),
            fleet: None,
        }
    }
}

/// Delivers the outbox to the configured sinks until `shutdown` turns true (or its sender
/// goes). `wake` is notified when new alerts are stored; outcomes are counted in `fleet`.
/// Returns the outbox.
pub async fn run_outbox<O: Outbox>(
    outbox: O,
    sinks: Arc<RwLock<Vec<AlertConfig>>>,
    wake: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
    fleet: crate::fleet::Fleet,
) -> O {
    let opts = OutboxOptions {
        fleet: Some(fleet),
        ..OutboxOptions::default()
    };
    run_outbox_with(outbox, Sinks(sinks), wake, shutdown, opts).await
}

/// [`run_outbox`] with any [`Deliver`] and explicit options.
///
/// Shape: this task owns the outbox (all store calls happen here, one at a time) and one
/// worker task per sink, each delivering its own queue in order. A slow or hanging sink holds
/// up only its own queue, and only for [`OutboxOptions::timeout`] per attempt; the checks never
/// wait on any of it. On shutdown the workers are aborted mid-attempt (a command's process group
/// is killed); those rows stay pending and are sent again on the next start.
pub async fn run_outbox_with<O: Outbox, D: Deliver>(
    mut outbox: O,
    deliverer: D,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
    opts: OutboxOptions,
) -> O {
    let deliverer = Arc::new(deliverer);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut workers = JoinSet::new();
    let mut queues: HashMap<SinkId, mpsc::UnboundedSender<Job>> = HashMap::new();
    // id -> (sink, dedup_key) of every row handed to a worker and not yet recorded.
    let mut in_flight: HashMap<i64, (SinkId, String)> = HashMap::new();
    let mut tick = tokio::time::interval(opts.poll.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
                continue;
            }
            Some(done) = done_rx.recv() => {
                record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
                while let Ok(done) = done_rx.try_recv() {
                    record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
                }
            }
            _ = wake.notified() => {}
            _ = tick.tick() => {}
        }
        // After any of these, look: a finished delivery may have unblocked the next alert of
        // its incident, a wake means new rows, a tick means retries may be due.
        let now = opts.clock.now_ms();
        let rows = outbox
            .due(now, opts.batch.saturating_add(in_flight.len()))
            .await;
        let mut busy: HashSet<(SinkId, String)> = in_flight.values().cloned().collect();
        for (id, sink, alert, attempts) in rows {
            if in_flight.contains_key(&id) {
                continue;
            }
            let key = (sink.clone(), alert.dedup_key.clone());
            if busy.contains(&key) {
                continue; // an earlier alert of this incident is still on its way to this sink
            }
            if let Some(error) = expired(&alert, attempts, now, opts.expire) {
                tracing::error!(sink = %deliverer.describe(&sink), dedup_key = %alert.dedup_key, %error, "alert not delivered");
                count(&opts, &sink, "dropped");
                outbox.failed(id, &error, now, true).await;
                continue;
            }
            let queue = queues.entry(sink.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                workers.spawn(worker(
                    sink,
                    deliverer.clone(),
                    WorkerOptions {
                        timeout: opts.timeout,
                        expire: opts.expire,
                        clock: opts.clock,
                    },
                    rx,
                    done_tx.clone(),
                ));
                tx
            });
            if queue
                .send(Job {
                    id,
                    alert,
                    attempts,
                })
                .is_ok()
            {
                busy.insert(key.clone());
                in_flight.insert(id, key);
            }
        }
    }
    // Record what already finished; abort the rest (they stay pending in the store).
    while let Ok(done) = done_rx.try_recv() {
        record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
    }
    workers.shutdown().await;
    outbox
}

async fn record<O: Outbox, D: Deliver>(
    outbox: &mut O,
    deliverer: &D,
    in_flight: &mut HashMap<i64, (SinkId, String)>,
    done: Done,
    opts: &OutboxOptions,
) {
    in_flight.remove(&done.id);
    let now = opts.clock.now_ms();
    let sink = deliverer.describe(&done.sink);
    let outcome = match &done.result {
        Ok(()) => "delivered",
        Err(e) if e.is_permanent() => "dropped",
        Err(_) => "failed",
    };
    count(opts, &done.sink, outcome);
    match done.result {
        Ok(()) => {
            tracing::debug!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, "alert delivered");
            outbox.delivered(done.id, now).await;
        }
        Err(e) if e.is_permanent() => {
            tracing::error!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, error = %e, "alert not delivered; not retrying");
            outbox.failed(done.id, &e.to_string(), now, true).await;
        }
        Err(e) => {
            // The backoff, or later if the sink said when (a rate limit's Retry-After).
            let mut next = next_attempt(done.attempts, now, &done.alert.dedup_key);
            if let DeliveryError::Status {
                retry_after_ms: Some(wait),
                ..
            } = &e
            {
                next = next.max(now.saturating_add(*wait));
            }
            tracing::warn!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, error = %e, retry_in_ms = next - now, "alert delivery failed; will retry");
            outbox.failed(done.id, &e.to_string(), next, false).await;
        }
    }
}
