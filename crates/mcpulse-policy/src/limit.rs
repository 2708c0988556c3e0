//! A concurrency limit with a bounded queue that has its own timeout (resilience4j's bulkhead,
//! tower's `ConcurrencyLimit` with a queue in front), as a pure admission state machine.
//!
//! A request asks [`Limiter::acquire`]: it runs **now** (a slot is free and nobody is queued
//! ahead of it), waits in the **queue** until a deadline (`queue_timeout` from now), or is
//! **rejected** with a retry-after (the queue is full, or there is no queue). Queued requests are
//! served first in, first out: a newcomer never overtakes them, even when a slot is free and the
//! queue has not been drained yet.
//!
//! What happens next is told by [`Limiter::next_wake`], one waiter at a time: the head of the
//! queue was given a freed slot ([`Wake::Admitted`]), or its deadline passed
//! ([`Wake::TimedOut`]). The limiter, not a timer race, decides which: so no queued request
//! waits past its deadline, and none is both timed out and admitted. [`Limiter::release`] frees a
//! slot; [`Limiter::cancel`] takes a waiter out of the queue (its client went away).
//!
//! Memory: the queue is a ring allocated when the limiter is made, `queue` entries of 16 bytes
//! (at most [`MAX_QUEUE`]), so nothing allocates per request. Time is milliseconds on the
//! caller's monotonic clock; a time earlier than one already seen is taken as the latest (queue
//! deadlines stay in queue order, which is what lets only the head be checked).
//!
//! ## The I/O side (not here: it needs tokio, and this crate is pure)
//!
//! The gateway wraps a `Limiter` in a `std::sync::Mutex` together with a map from [`Ticket`] to
//! a `tokio::sync::oneshot::Sender<Wake>` (bounded by the queue). The wrapper's only job is to
//! carry [`Wake`]s to their waiters:
//! - `acquire`: lock; `Admit::Now` → return a guard; `Admit::Queued` → insert a oneshot, unlock,
//!   then `select!` on the oneshot and `sleep_until(deadline)`; when the sleep wins, lock and
//!   **drain** (below): the drain sends this waiter its own `TimedOut` (or, if a slot came at the
//!   same instant, `Admitted`), and the waiter acts on what the oneshot holds; `Admit::Rejected`
//!   → HTTP 503 with `Retry-After` (or a JSON-RPC error inside a stream).
//! - the guard's `Drop`: lock, `release()`, drain.
//! - a waiter dropped while queued (client gone): lock, `cancel(ticket)`; if it was not queued
//!   any more, it was just admitted: `release()` and drain.
//! - drain: `while let Some(wake) = limiter.next_wake(now)`, send `wake` to its oneshot (a send
//!   to a dropped receiver of an `Admitted` releases the slot again).
//!
//! The mutex is held only for these few steps, never across an await.

use crate::window::{Invalid, millis, require};
use std::collections::VecDeque;
use std::time::Duration;

/// The longest queue (a larger setting is cut to it): 10 000 entries, 160 KB.
pub const MAX_QUEUE: u32 = 10_000;

/// The settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitPolicy {
    /// At most this many requests run at once (at least 1).
    pub max_concurrent: u32,
    /// At most this many wait for a slot; 0: no queue, reject at once.
    pub queue: u32,
    /// How long a request may wait in the queue; zero: no queue.
    pub queue_timeout: Duration,
}

impl Default for LimitPolicy {
    /// 25 at once (resilience4j's bulkhead), 100 queued for at most 5 s.
    fn default() -> LimitPolicy {
        LimitPolicy {
            max_concurrent: 25,
            queue: 100,
            queue_timeout: Duration::from_secs(5),
        }
    }
}

impl LimitPolicy {
    /// Whether every setting is in range (see [`Invalid`]).
    pub fn validate(&self) -> Result<(), Invalid> {
        require(
            self.max_concurrent >= 1,
            "max_concurrent",
            "must be at least 1",
        )?;
        require(self.queue <= MAX_QUEUE, "queue", "must be at most 10000")
    }
}

/// A queued request's number (unique within its limiter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// The answer to [`Limiter::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Run now (the caller holds a slot until [`Limiter::release`]).
    Now,
    /// Wait for [`Wake`] about `ticket`, which comes by `deadline_ms` at the latest.
    Queued { ticket: Ticket, deadline_ms: u64 },
    /// Saturated: try again after `retry_after`: the queue timeout rounded up to whole seconds
    /// (by then every request queued now has been served or timed out; whole seconds because
    /// that is what `Retry-After` carries), or 1 s when there is no queue.
    Rejected { retry_after: Duration },
}

/// What became of a queued request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// It holds a slot now (release it when done).
    Admitted(Ticket),
    /// Its queue deadline passed without a slot.
    TimedOut(Ticket),
}

/// Totals since the limiter was made, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitCounts {
    pub admitted: u64,
    pub queued: u64,
    pub rejected: u64,
    pub timed_out: u64,
}

/// One limit's state.
#[derive(Debug, Clone)]
pub struct Limiter {
    policy: LimitPolicy,
    in_flight: u32,
    /// Waiters and their deadlines (ms), in arrival order, so deadlines are non-decreasing.
    queue: VecDeque<(Ticket, u64)>,
    queue_cap: usize,
    next_ticket: u64,
    latest_ms: u64,
    counts: LimitCounts,
}

impl Limiter {
    pub fn new(policy: LimitPolicy) -> Limiter {
        let queue_cap = if policy.queue_timeout.is_zero() {
            0
        } else {
            usize::try_from(policy.queue.min(MAX_QUEUE)).unwrap_or(0)
        };
        Limiter {
            policy,
            in_flight: 0,
            queue: VecDeque::with_capacity(queue_cap),
            queue_cap,
            next_ticket: 0,
            latest_ms: 0,
            counts: LimitCounts::default(),
        }
    }

    pub fn policy(&self) -> &LimitPolicy {
        &self.policy
    }

    /// Requests holding a slot.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn counts(&self) -> LimitCounts {
        self.counts
    }

    /// The earliest queue deadline, for the caller's timer.
    pub fn next_deadline(&self) -> Option<u64> {
        self.queue.front().map(|(_, deadline)| *deadline)
    }

    /// A request arrived at `now_ms`.
    pub fn acquire(&mut self, now_ms: u64) -> Admit {
        let now_ms = self.see(now_ms);
        if self.queue.is_empty() && self.in_flight < self.policy.max_concurrent.max(1) {
            self.in_flight += 1;
            self.counts.admitted = self.counts.admitted.saturating_add(1);
            return Admit::Now;
        }
        if self.queue.len() < self.queue_cap {
            let ticket = Ticket(self.next_ticket);
            self.next_ticket = self.next_ticket.wrapping_add(1);
            let wait = millis(self.policy.queue_timeout);
            let deadline_ms = now_ms.saturating_add(wait);
            self.queue.push_back((ticket, deadline_ms));
            self.counts.queued = self.counts.queued.saturating_add(1);
            return Admit::Queued {
                ticket,
                deadline_ms,
            };
        }
        self.counts.rejected = self.counts.rejected.saturating_add(1);
        let timeout = self.policy.queue_timeout;
        let secs = if self.queue_cap == 0 {
            1
        } else {
            timeout
                .as_secs()
                .saturating_add(u64::from(timeout.subsec_nanos() > 0))
                .max(1)
        };
        Admit::Rejected {
            retry_after: Duration::from_secs(secs),
        }
    }

    /// A request that held a slot finished (call [`Limiter::next_wake`] after it).
    pub fn release(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// What happened to the head of the queue at `now_ms`, if anything: call it until `None`
    /// after every release and when [`Limiter::next_deadline`] passes. A waiter whose deadline
    /// is `now_ms` or earlier is timed out, never admitted.
    pub fn next_wake(&mut self, now_ms: u64) -> Option<Wake> {
        let now_ms = self.see(now_ms);
        let (ticket, deadline) = *self.queue.front()?;
        if deadline <= now_ms {
            self.queue.pop_front();
            self.counts.timed_out = self.counts.timed_out.saturating_add(1);
            return Some(Wake::TimedOut(ticket));
        }
        if self.in_flight < self.policy.max_concurrent.max(1) {
            self.queue.pop_front();
            self.in_flight += 1;
            self.counts.admitted = self.counts.admitted.saturating_add(1);
            return Some(Wake::Admitted(ticket));
        }
        None
    }

    /// Takes `ticket` out of the queue; false when it was not there (already admitted or timed
    /// out by [`Limiter::next_wake`]).
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        match self.queue.iter().position(|(t, _)| *t == ticket) {
            Some(i) => self.queue.remove(i).is_some(),
            None => false,
        }
    }

    fn see(&mut self, now_ms: u64) -> u64 {
        self.latest_ms = self.latest_ms.max(now_ms);
        self.latest_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> LimitPolicy {
        LimitPolicy {
            max_concurrent: 2,
            queue: 2,
            queue_timeout: Duration::from_millis(1500),
        }
    }

    fn queued(a: Admit) -> Ticket {
        match a {
            Admit::Queued { ticket, .. } => ticket,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn admits_up_to_the_limit_then_queues_then_rejects() {
        let mut l = Limiter::new(policy());
        assert_eq!(l.acquire(0), Admit::Now);
        assert_eq!(l.acquire(0), Admit::Now);
        assert_eq!(
            l.acquire(10),
            Admit::Queued {
                ticket: Ticket(0),
                deadline_ms: 1510
            }
        );
        queued(l.acquire(20));
        // 1.5 s rounds up to 2 s of Retry-After.
        assert_eq!(
            l.acquire(30),
            Admit::Rejected {
                retry_after: Duration::from_secs(2)
            }
        );
        assert_eq!((l.in_flight(), l.queued()), (2, 2));
        assert_eq!(l.next_wake(30), None);
    }

    #[test]
    fn a_release_hands_the_slot_to_the_head_of_the_queue() {
        let mut l = Limiter::new(policy());
        l.acquire(0);
        l.acquire(0);
        let a = queued(l.acquire(1));
        let b = queued(l.acquire(2));
        l.release();
        // A newcomer does not overtake the queue, though a slot is free.
        assert!(matches!(l.acquire(3), Admit::Rejected { .. }));
        assert_eq!(l.next_wake(4), Some(Wake::Admitted(a)));
        assert_eq!(l.next_wake(4), None);
        l.release();
        assert_eq!(l.next_wake(5), Some(Wake::Admitted(b)));
        assert_eq!(l.in_flight(), 2);
        assert_eq!(
            l.counts(),
            LimitCounts {
                admitted: 4,
                queued: 2,
                rejected: 1,
                timed_out: 0
            }
        );
    }

    #[test]
    fn no_waiter_is_admitted_at_or_after_its_deadline() {
        let mut l = Limiter::new(policy());
        l.acquire(0);
        l.acquire(0);
        let a = queued(l.acquire(0)); // deadline 1500
        let b = queued(l.acquire(100)); // deadline 1600
        assert_eq!(l.next_deadline(), Some(1500));
        assert_eq!(l.next_wake(1499), None);
        // A slot frees exactly at a's deadline: a has timed out, b gets the slot.
        l.release();
        assert_eq!(l.next_wake(1500), Some(Wake::TimedOut(a)));
        assert_eq!(l.next_wake(1500), Some(Wake::Admitted(b)));
        assert_eq!(l.next_wake(1500), None);
        assert_eq!(l.counts().timed_out, 1);
    }

    #[test]
    fn cancel_takes_a_waiter_out_of_the_queue_once() {
        let mut l = Limiter::new(policy());
        l.acquire(0);
        l.acquire(0);
        let a = queued(l.acquire(0));
        let b = queued(l.acquire(0));
        assert!(l.cancel(a));
        assert!(!l.cancel(a));
        l.release();
        assert_eq!(l.next_wake(1), Some(Wake::Admitted(b)));
        assert!(!l.cancel(b), "admitted already");
    }

    #[test]
    fn a_zero_queue_or_timeout_rejects_at_once() {
        for p in [
            LimitPolicy {
                queue: 0,
                ..policy()
            },
            LimitPolicy {
                queue_timeout: Duration::ZERO,
                ..policy()
            },
        ] {
            let mut l = Limiter::new(p);
            l.acquire(0);
            l.acquire(0);
            assert_eq!(
                l.acquire(0),
                Admit::Rejected {
                    retry_after: Duration::from_secs(1)
                },
                "{p:?}"
            );
        }
    }

    #[test]
    fn the_defaults_are_valid_and_a_zero_limit_is_not() {
        assert_eq!(LimitPolicy::default().validate(), Ok(()));
        let e = LimitPolicy {
            max_concurrent: 0,
            ..policy()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("max_concurrent"));
        let e = LimitPolicy {
            queue: MAX_QUEUE + 1,
            ..policy()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("queue"));
    }

    #[test]
    fn a_flood_at_ten_times_the_limit_answers_everyone_within_the_queue_timeout() {
        // 10 slots, 20 queued for 1 s; 100 requests arrive every 10 ms and each runs 1.5 s.
        let p = LimitPolicy {
            max_concurrent: 10,
            queue: 20,
            queue_timeout: Duration::from_secs(1),
        };
        let mut l = Limiter::new(p);
        let mut running: Vec<u64> = Vec::new(); // end times
        let mut waiting: Vec<(Ticket, u64)> = Vec::new(); // ticket, arrival
        let (mut done, mut rejected, mut timed_out) = (0u32, 0u32, 0u32);
        let mut arrivals = 0u32;
        for now in (0..13_000u64).step_by(5) {
            running.retain(|end| {
                let finished = *end <= now;
                if finished {
                    l.release();
                    done += 1;
                }
                !finished
            });
            while let Some(w) = l.next_wake(now) {
                let (ticket, arrived) = match w {
                    Wake::Admitted(t) | Wake::TimedOut(t) => {
                        let i = waiting.iter().position(|(x, _)| *x == t);
                        waiting.remove(i.unwrap_or_else(|| panic!("unknown {t:?}")))
                    }
                };
                assert!(now - arrived <= 1000, "{ticket:?} waited {}", now - arrived);
                match w {
                    Wake::Admitted(_) => running.push(now + 1500),
                    Wake::TimedOut(_) => timed_out += 1,
                }
            }
            if now % 10 == 0 && arrivals < 1000 {
                arrivals += 1;
                match l.acquire(now) {
                    Admit::Now => running.push(now + 1500),
                    Admit::Queued { ticket, .. } => waiting.push((ticket, now)),
                    Admit::Rejected { .. } => rejected += 1,
                }
            }
            assert!(l.in_flight() <= 10 && l.queued() <= 20);
        }
        // Every request got an answer: served, rejected at the door, or timed out in the queue.
        assert!(waiting.is_empty() && running.is_empty());
        assert_eq!(done + rejected + timed_out, 1000);
        assert!(
            done > 0 && rejected > 0 && timed_out > 0,
            "{done} {rejected} {timed_out}"
        );
    }

    proptest::proptest! {
        /// Any mix of arrivals, finishes, cancels and time steps: the limit and the queue
        /// bound hold, waiters leave in arrival order, none is admitted at or past its deadline
        /// nor timed out before it, none waits while a slot is free, and every one is answered
        /// exactly once.
        #[test]
        fn every_waiter_is_answered_once_in_order_and_on_time(
            steps in proptest::collection::vec((0u8..4, 0u64..700), 0..300),
            max in 1u32..4,
            queue in 0u32..5,
        ) {
            let p = LimitPolicy { max_concurrent: max, queue, queue_timeout: Duration::from_millis(1000) };
            let mut l = Limiter::new(p);
            let mut now = 0u64;
            let mut running = 0u32;
            let mut waiting: Vec<(Ticket, u64)> = Vec::new();
            let mut last_woken: Option<Ticket> = None;
            for (action, arg) in steps.into_iter().chain(std::iter::once((3, 5_000))) {
                match action {
                    0 => match l.acquire(now) {
                        Admit::Now => running += 1,
                        Admit::Queued { ticket, deadline_ms } => waiting.push((ticket, deadline_ms)),
                        Admit::Rejected { retry_after } => proptest::prop_assert!(retry_after >= Duration::from_secs(1)),
                    },
                    1 if running > 0 => {
                        running -= 1;
                        l.release();
                    }
                    2 if !waiting.is_empty() => {
                        let i = usize::try_from(arg).unwrap_or(0) % waiting.len();
                        let (ticket, _) = waiting.remove(i);
                        proptest::prop_assert!(l.cancel(ticket));
                    }
                    _ => now += arg,
                }
                while let Some(wake) = l.next_wake(now) {
                    let (Wake::Admitted(t) | Wake::TimedOut(t)) = wake;
                    let i = waiting.iter().position(|(x, _)| *x == t);
                    proptest::prop_assert!(i.is_some(), "{t:?} answered twice or never queued");
                    let (_, deadline) = waiting.remove(i.unwrap_or(0));
                    proptest::prop_assert!(last_woken < Some(t), "out of order");
                    last_woken = Some(t);
                    match wake {
                        Wake::Admitted(_) => {
                            proptest::prop_assert!(now < deadline);
                            running += 1;
                        }
                        Wake::TimedOut(_) => proptest::prop_assert!(now >= deadline),
                    }
                }
                proptest::prop_assert_eq!(l.in_flight(), running);
                proptest::prop_assert!(running <= max);
                proptest::prop_assert_eq!(l.queued(), waiting.len());
                proptest::prop_assert!(waiting.len() <= queue as usize);
                proptest::prop_assert!(waiting.is_empty() || running == max, "a slot is free while a request waits");
            }
            proptest::prop_assert!(waiting.is_empty(), "after 5 s every waiter was answered");
        }
    }
}
