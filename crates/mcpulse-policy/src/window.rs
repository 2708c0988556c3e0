//! Sliding windows over calls: what the circuit breaker ([`crate::breaker`]) and the health
//! thresholds ([`crate::thresholds`]) judge.
//!
//! Two shapes, as resilience4j has them:
//! - **count-based**: the last `calls` calls, whenever they happened. A ring of one small record
//!   per call, so memory is `O(calls)`, fixed when the window is made.
//! - **time-based**: the calls of the last `span`, split into `buckets` equal slots. A call is
//!   added to the slot of its time; a slot older than the span is cleared when its turn comes
//!   round again. Memory is `O(buckets)` and **does not grow with the call rate**: a million
//!   calls a second fill the same slots as one. The price is granularity: at any instant the
//!   window covers between `span - span/buckets` and `span` of history (the oldest slot leaves
//!   whole).
//!
//! Each call records whether it failed, whether it was slow (the caller decides both: what
//! counts as a failure and how slow is slow are the breaker's settings, not the window's) and
//! its latency. The latency goes into a fixed log-linear histogram ([`Histogram`]), so
//! [`Window::quantile`] (p95) is bounded in memory and time, with a documented accuracy:
//! exact below 16 µs, and above it the upper edge of the bucket that holds the quantile, never
//! lower than the true value and at most 12.5 % higher.
//!
//! Recording and [`Window::stats`] allocate nothing (the ring and the slots are allocated when
//! the window is made); [`Window::quantile`] allocates nothing either and walks
//! `BINS × slots` counters, so it is meant for a health check, not for every call.
//!
//! Time is milliseconds on the caller's monotonic clock. A time earlier than one already seen
//! is taken as the latest seen (a clock that steps back must not resurrect cleared slots).

use std::time::Duration;

/// Latency bins: values under 16 µs exactly, then 8 bins per power of two up to 2^32 µs
/// (about 71 minutes); anything longer lands in the last bin.
pub const BINS: usize = 16 + 28 * 8;

/// Which kind of window, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// The last `calls` calls (at least 1; at most [`MAX_COUNT`]).
    Count { calls: u32 },
    /// The calls of the last `span`, in `buckets` slots (at least 1; at most [`MAX_BUCKETS`]).
    Time { span: Duration, buckets: u32 },
}

/// The largest count-based window (a larger setting is cut to it): 10 000 records of 4 bytes
/// plus the histogram (under 1 KiB), under 50 KiB.
pub const MAX_COUNT: u32 = 10_000;
/// The most slots of a time-based window (a larger setting is cut to it); a slot is about 1 KiB.
pub const MAX_BUCKETS: u32 = 120;

/// A policy setting out of range. The policies never panic on one (each clamps or ignores
/// what it cannot use), but a config that asks for it is wrong, and the gateway's config parser
/// says so, with the setting's place in the file, by calling the policy's `validate`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {rule}")]
pub struct Invalid {
    /// The setting, as the policy's field names it (`failure_rate`).
    pub setting: &'static str,
    /// What it must be (`must be above 0 and at most 1`).
    pub rule: &'static str,
}

pub(crate) fn require(ok: bool, setting: &'static str, rule: &'static str) -> Result<(), Invalid> {
    if ok {
        Ok(())
    } else {
        Err(Invalid { setting, rule })
    }
}

/// A rate in (0, 1]: 0 would trip on every call, and NaN never.
pub(crate) fn require_rate(rate: f64, setting: &'static str) -> Result<(), Invalid> {
    require(
        rate > 0.0 && rate <= 1.0,
        setting,
        "must be above 0 and at most 1",
    )
}

impl WindowSpec {
    /// Whether the sizes are in range (see [`Invalid`]).
    pub fn validate(&self) -> Result<(), Invalid> {
        match *self {
            WindowSpec::Count { calls } => require(
                (1..=MAX_COUNT).contains(&calls),
                "window.calls",
                "must be 1 to 10000",
            ),
            WindowSpec::Time { span, buckets } => {
                require(
                    (1..=MAX_BUCKETS).contains(&buckets),
                    "window.buckets",
                    "must be 1 to 120",
                )?;
                require(
                    millis(span) >= u64::from(buckets),
                    "window.span",
                    "must be at least 1 ms per bucket",
                )
            }
        }
    }
}

impl Default for WindowSpec {
    /// The last 100 calls (resilience4j's `slidingWindowSize`).
    fn default() -> WindowSpec {
        WindowSpec::Count { calls: 100 }
    }
}

/// One finished call, as the window sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// A failure that counts (the caller applied its set of counted failures).
    pub failed: bool,
    /// Slower than the caller's slow-call threshold.
    pub slow: bool,
    pub latency: Duration,
}

/// Counts over the window at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub calls: u64,
    pub failures: u64,
    pub slow: u64,
}

impl Stats {
    /// Failures over calls, 0 to 1 (0 when there were no calls).
    pub fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.calls)
    }

    /// Slow calls over calls, 0 to 1 (0 when there were no calls).
    pub fn slow_rate(&self) -> f64 {
        ratio(self.slow, self.calls)
    }

    fn add(&mut self, other: &Stats) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }
}

#[allow(clippy::cast_precision_loss)] // a rate needs no more than f64's 53 bits
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A fixed log-linear latency histogram in microseconds (HdrHistogram's layout with 3 bits of
/// sub-bucket precision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Box<[u32; BINS]>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: Box::new([0; BINS]),
        }
    }
}

impl Histogram {
    /// The bin of a latency of `us` microseconds.
    pub fn bin(us: u64) -> usize {
        if us < 16 {
            // Below 16 the value is its own bin (fits: us < 16).
            return usize::try_from(us).unwrap_or(0);
        }
        let us = us.min((1u64 << 32) - 1);
        let exp = 63 - us.leading_zeros(); // 4..=31
        let sub = (us >> (exp - 3)) & 7;
        let idx = 16 + u64::from(exp - 4) * 8 + sub;
        usize::try_from(idx).unwrap_or(BINS - 1).min(BINS - 1)
    }

    /// The largest latency (µs) that falls into `bin`: what a quantile in it reports.
    pub fn upper(bin: usize) -> u64 {
        if bin < 16 {
            return u64::try_from(bin).unwrap_or(0);
        }
        let k = u64::try_from(bin - 16).unwrap_or(0);
        let exp = 4 + k / 8;
        let sub = k % 8;
        let width = 1u64 << (exp - 3);
        // The bin covers [2^exp + sub*width, 2^exp + (sub+1)*width).
        (1u64 << exp) + (sub + 1) * width - 1
    }

    fn add(&mut self, bin: usize) {
        if let Some(c) = self.counts.get_mut(bin) {
            *c = c.saturating_add(1);
        }
    }

    fn remove(&mut self, bin: usize) {
        if let Some(c) = self.counts.get_mut(bin) {
            *c = c.saturating_sub(1);
        }
    }

    fn clear(&mut self) {
        self.counts.fill(0);
    }

    fn count(&self, bin: usize) -> u64 {
        self.counts.get(bin).map_or(0, |c| u64::from(*c))
    }
}

/// The `q` quantile (0 to 1) of the calls counted in `hists`, `total` of them in all.
fn quantile_of<'a>(
    hists: impl Iterator<Item = &'a Histogram> + Clone,
    total: u64,
    q: f64,
) -> Option<Duration> {
    if total == 0 {
        return None;
    }
    // The rank of the quantile call, 1-based: ceil(q * total), at least 1 (nearest rank).
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0u64;
    for bin in 0..BINS {
        seen = seen.saturating_add(hists.clone().map(|h| h.count(bin)).sum::<u64>());
        if seen >= rank {
            return Some(Duration::from_micros(Histogram::upper(bin)));
        }
    }
    None
}

/// A duration in whole milliseconds, saturating (the policies' clock unit).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One call in a count-based ring: 4 bytes.
#[derive(Debug, Clone, Copy)]
struct Record {
    bin: u16,
    failed: bool,
    slow: bool,
}

/// One slot of a time-based window.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// Which period (`time / width`) the slot holds; its counts are stale unless it is recent.
    period: u64,
    stats: Stats,
    hist: Histogram,
}

#[derive(Debug, Clone)]
enum Shape {
    Count {
        ring: Vec<Record>,
        capacity: usize,
        /// Where the next record goes once the ring is full.
        next: usize,
        stats: Stats,
        hist: Histogram,
    },
    Time {
        width_ms: u64,
        slots: Vec<Slot>,
        /// The latest time seen (ms).
        latest_ms: u64,
    },
}

/// A sliding window (see the module doc).
#[derive(Debug, Clone)]
pub struct Window {
    shape: Shape,
}

impl Window {
    /// An empty window. Sizes are clamped to `1..=MAX_COUNT` calls, `1..=MAX_BUCKETS` slots, and
    /// a slot of at least 1 ms.
    pub fn new(spec: WindowSpec) -> Window {
        let shape = match spec {
            WindowSpec::Count { calls } => {
                let capacity = usize::try_from(calls.clamp(1, MAX_COUNT)).unwrap_or(1);
                Shape::Count {
                    ring: Vec::with_capacity(capacity),
                    capacity,
                    next: 0,
                    stats: Stats::default(),
                    hist: Histogram::default(),
                }
            }
            WindowSpec::Time { span, buckets } => {
                let buckets = buckets.clamp(1, MAX_BUCKETS);
                let span_ms = millis(span);
                let width_ms = (span_ms / u64::from(buckets)).max(1);
                let n = usize::try_from(buckets).unwrap_or(1);
                Shape::Time {
                    width_ms,
                    // `period` 0 with zero counts is an empty slot either way.
                    slots: vec![Slot::default(); n],
                    latest_ms: 0,
                }
            }
        };
        Window { shape }
    }

    /// Adds a call that finished at `now_ms`.
    pub fn record(&mut self, now_ms: u64, call: Call) {
        let bin = Histogram::bin(micros(call.latency));
        let one = Stats {
            calls: 1,
            failures: u64::from(call.failed),
            slow: u64::from(call.slow),
        };
        match &mut self.shape {
            Shape::Count {
                ring,
                capacity,
                next,
                stats,
                hist,
            } => {
                let record = Record {
                    bin: u16::try_from(bin).unwrap_or(u16::MAX),
                    failed: call.failed,
                    slow: call.slow,
                };
                if ring.len() < *capacity {
                    ring.push(record);
                } else if let Some(old) = ring.get_mut(*next) {
                    stats.calls = stats.calls.saturating_sub(1);
                    stats.failures = stats.failures.saturating_sub(u64::from(old.failed));
                    stats.slow = stats.slow.saturating_sub(u64::from(old.slow));
                    hist.remove(usize::from(old.bin));
                    *old = record;
                    *next = (*next + 1) % *capacity;
                }
                stats.add(&one);
                hist.add(bin);
            }
            Shape::Time {
                width_ms,
                slots,
                latest_ms,
            } => {
                *latest_ms = (*latest_ms).max(now_ms);
                let period = *latest_ms / *width_ms;
                let n = slots.len() as u64;
                let Some(slot) = usize::try_from(period % n.max(1))
                    .ok()
                    .and_then(|i| slots.get_mut(i))
                else {
                    return;
                };
                if slot.period != period {
                    slot.period = period;
                    slot.stats = Stats::default();
                    slot.hist.clear();
                }
                slot.stats.add(&one);
                slot.hist.add(bin);
            }
        }
    }

    /// The counts of the calls in the window at `now_ms`.
    pub fn stats(&self, now_ms: u64) -> Stats {
        match &self.shape {
            Shape::Count { stats, .. } => *stats,
            Shape::Time { .. } => {
                let mut total = Stats::default();
                for slot in self.live_slots(now_ms) {
                    total.add(&slot.stats);
                }
                total
            }
        }
    }

    /// The `q` quantile (e.g. 0.95) of the latencies in the window at `now_ms`, `None` when it
    /// is empty. Accuracy: see the module doc.
    pub fn quantile(&self, now_ms: u64, q: f64) -> Option<Duration> {
        match &self.shape {
            Shape::Count { stats, hist, .. } => quantile_of(std::iter::once(hist), stats.calls, q),
            Shape::Time { .. } => {
                let total = self.stats(now_ms).calls;
                quantile_of(self.live_slots(now_ms).map(|s| &s.hist), total, q)
            }
        }
    }

    /// Forgets every call (the breaker starts each state with a fresh window).
    pub fn clear(&mut self) {
        match &mut self.shape {
            Shape::Count {
                ring,
                next,
                stats,
                hist,
                ..
            } => {
                ring.clear();
                *next = 0;
                *stats = Stats::default();
                hist.clear();
            }
            Shape::Time { slots, .. } => {
                for slot in slots {
                    slot.stats = Stats::default();
                    slot.hist.clear();
                }
            }
        }
    }

    /// The slots of a time-based window that are inside it at `now_ms` (none for a count one).
    fn live_slots(&self, now_ms: u64) -> impl Iterator<Item = &Slot> + Clone {
        let (slots, current) = match &self.shape {
            Shape::Time {
                width_ms,
                slots,
                latest_ms,
            } => (slots.as_slice(), now_ms.max(*latest_ms) / *width_ms),
            Shape::Count { .. } => (&[][..], 0),
        };
        let n = slots.len() as u64;
        slots
            .iter()
            .filter(move |s| current.saturating_sub(s.period) < n && s.period <= current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ms: u64) -> Call {
        Call {
            failed: false,
            slow: false,
            latency: Duration::from_millis(ms),
        }
    }

    fn failed(ms: u64) -> Call {
        Call {
            failed: true,
            ..ok(ms)
        }
    }

    #[test]
    fn a_count_window_keeps_only_the_last_n_calls() {
        let mut w = Window::new(WindowSpec::Count { calls: 4 });
        assert_eq!(w.stats(0), Stats::default());
        for _ in 0..4 {
            w.record(0, failed(1));
        }
        assert_eq!(w.stats(0).failure_rate(), 1.0);
        // Two successes push the two oldest failures out.
        w.record(0, ok(1));
        w.record(0, ok(1));
        let s = w.stats(1_000_000);
        assert_eq!((s.calls, s.failures), (4, 2));
        assert_eq!(s.failure_rate(), 0.5);
        // A full turn more: only successes left, whatever the time.
        for _ in 0..4 {
            w.record(5, ok(1));
        }
        assert_eq!(
            w.stats(u64::MAX),
            Stats {
                calls: 4,
                failures: 0,
                slow: 0
            }
        );
    }

    #[test]
    fn a_time_window_rolls_over_and_its_slots_expire() {
        // 10 s in 10 slots of 1 s.
        let mut w = Window::new(WindowSpec::Time {
            span: Duration::from_secs(10),
            buckets: 10,
        });
        w.record(0, failed(1)); // slot of period 0
        w.record(500, ok(1)); // same slot
        w.record(9_999, ok(1)); // period 9: all three inside
        assert_eq!(w.stats(9_999).calls, 3);
        // At 10 s period 0 has left the window; period 9 is still in it.
        let s = w.stats(10_000);
        assert_eq!((s.calls, s.failures), (1, 0));
        // Recording at 10.5 s reuses period 0's slot for period 10 and clears it first.
        w.record(10_500, failed(1));
        let s = w.stats(10_500);
        assert_eq!((s.calls, s.failures), (2, 1));
        // Long silence: everything expires without a record.
        assert_eq!(w.stats(30_000), Stats::default());
        assert_eq!(w.quantile(30_000, 0.95), None);
        // A clock that steps back does not resurrect anything.
        assert_eq!(w.stats(0).calls, 2);
    }

    #[test]
    fn a_time_window_holds_any_call_rate_in_the_same_memory() {
        let mut w = Window::new(WindowSpec::Time {
            span: Duration::from_secs(1),
            buckets: 4,
        });
        for i in 0..1_000_000u64 {
            w.record(i / 1000, ok(i % 7));
        }
        let s = w.stats(999);
        assert_eq!(s.calls, 1_000_000);
        match &w.shape {
            Shape::Time { slots, .. } => assert_eq!(slots.len(), 4),
            Shape::Count { .. } => panic!("not a time window"),
        }
    }

    #[test]
    fn p95_is_the_bucket_upper_edge_within_an_eighth_of_the_truth() {
        let mut w = Window::new(WindowSpec::Count { calls: 1000 });
        // 1..=100 ms, each ten times: the true p95 (nearest rank) is 95 ms.
        for ms in 1..=100 {
            for _ in 0..10 {
                w.record(0, ok(ms));
            }
        }
        let p95 = w.quantile(0, 0.95).map(|d| d.as_micros()).unwrap_or(0);
        assert!((95_000..=95_000 * 9 / 8).contains(&p95), "{p95}");
        // Exact below 16 µs.
        let mut w = Window::new(WindowSpec::Count { calls: 10 });
        w.record(
            0,
            Call {
                failed: false,
                slow: false,
                latency: Duration::from_micros(7),
            },
        );
        assert_eq!(w.quantile(0, 0.95), Some(Duration::from_micros(7)));
    }

    #[test]
    fn every_latency_lands_in_a_bin_whose_upper_edge_bounds_it_within_an_eighth() {
        let mut us = 0u64;
        while us < (1u64 << 33) {
            let bin = Histogram::bin(us);
            assert!(bin < BINS);
            let upper = Histogram::upper(bin);
            if us < (1u64 << 32) {
                assert!(upper >= us, "{us} -> {upper}");
                assert!(upper - us <= us / 8, "{us} -> {upper}");
            }
            us = us.saturating_mul(17) / 16 + 1;
        }
        assert_eq!(Histogram::bin(u64::MAX), BINS - 1);
    }

    #[test]
    fn clear_forgets_everything() {
        for spec in [
            WindowSpec::Count { calls: 3 },
            WindowSpec::Time {
                span: Duration::from_secs(3),
                buckets: 3,
            },
        ] {
            let mut w = Window::new(spec);
            w.record(10, failed(3));
            w.clear();
            assert_eq!(w.stats(10), Stats::default(), "{spec:?}");
            assert_eq!(w.quantile(10, 0.5), None, "{spec:?}");
        }
    }

    #[test]
    fn sizes_out_of_range_are_invalid() {
        assert_eq!(WindowSpec::default().validate(), Ok(()));
        let bad = [
            WindowSpec::Count { calls: 0 },
            WindowSpec::Count {
                calls: MAX_COUNT + 1,
            },
            WindowSpec::Time {
                span: Duration::from_millis(5),
                buckets: 10,
            },
            WindowSpec::Time {
                span: Duration::from_secs(60),
                buckets: 0,
            },
        ];
        for spec in bad {
            assert!(spec.validate().is_err(), "{spec:?}");
        }
        let e = WindowSpec::Count { calls: 0 }.validate();
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("window.calls must be 1 to 10000".to_string())
        );
    }

    proptest::proptest! {
        /// Against a naive model that keeps every call: the same counts and a p95 within the
        /// documented accuracy, for any sequence of calls at non-decreasing times.
        #[test]
        fn agrees_with_a_model_that_keeps_every_call(
            calls in proptest::collection::vec((0u64..400, proptest::bool::ANY, proptest::bool::ANY, 0u64..5_000_000), 0..300),
            count in 1u32..40,
            buckets in 1u32..8,
        ) {
            let span_ms = 1000u64;
            let mut by_count = Window::new(WindowSpec::Count { calls: count });
            let mut by_time = Window::new(WindowSpec::Time { span: Duration::from_millis(span_ms), buckets });
            let width = span_ms / u64::from(buckets);
            let mut all: Vec<(u64, Call)> = Vec::new();
            let mut now = 0u64;
            for (step, failed, slow, us) in calls {
                now += step;
                let call = Call { failed, slow, latency: Duration::from_micros(us) };
                by_count.record(now, call);
                by_time.record(now, call);
                all.push((now, call));
                for (w, kept) in [
                    (&by_count, all.iter().rev().take(count as usize).collect::<Vec<_>>()),
                    // Inside the time window: calls whose slot is one of the last `buckets`.
                    (&by_time, all.iter().filter(|(t, _)| now / width - t / width < u64::from(buckets)).collect()),
                ] {
                    let s = w.stats(now);
                    proptest::prop_assert_eq!(s.calls, kept.len() as u64);
                    proptest::prop_assert_eq!(s.failures, kept.iter().filter(|(_, c)| c.failed).count() as u64);
                    proptest::prop_assert_eq!(s.slow, kept.iter().filter(|(_, c)| c.slow).count() as u64);
                    let mut lat: Vec<u64> = kept.iter().map(|(_, c)| c.latency.as_micros() as u64).collect();
                    lat.sort_unstable();
                    let truth = lat.get(((lat.len() as f64 * 0.95).ceil() as usize).max(1) - 1).copied();
                    let got = w.quantile(now, 0.95).map(|d| d.as_micros() as u64);
                    match (truth, got) {
                        (None, None) => {}
                        (Some(t), Some(g)) => proptest::prop_assert!(g >= t && g - t <= t / 8, "p95 {g} vs {t}"),
                        other => proptest::prop_assert!(false, "{other:?}"),
                    }
                }
            }
        }
    }
}
