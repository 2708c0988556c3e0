//! The client sessions open through an HTTP upstream, for `mcpulse_gateway_active_sessions`.
//! Sessions are the upstream's own (`Mcp-Session-Id` passes untouched); the relay only watches
//! them go by: a session opens when an `initialize` reply carries an id not seen before, and
//! closes when a `DELETE` for it is answered 2xx, or when the upstream answers 404 for it (it
//! expired the session). A session the upstream drops silently, and the client never uses
//! again, is forgotten after [`IDLE_EXPIRY`] without a request. At most [`MAX_SESSIONS`] are
//! tracked (ids are kept as keyed hashes: 8 bytes each, never the id itself); past that, new
//! ones are not counted. Time is an argument, so the rules are tested without waiting.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;
use tokio::time::Instant;

/// The most sessions tracked.
pub const MAX_SESSIONS: usize = 10_000;
/// A session without a request for this long is taken as gone.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(3600);
/// How often idle sessions are swept (on a request, never by a timer of its own).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What happened to the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    pub opened: usize,
    pub closed: usize,
}

#[derive(Debug)]
pub struct Sessions {
    last_seen: HashMap<u64, Instant>,
    keys: RandomState,
    last_sweep: Option<Instant>,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            last_seen: HashMap::new(),
            keys: RandomState::new(),
            last_sweep: None,
        }
    }
}

/// One exchange as the session count sees it.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// The request was `initialize`.
    pub initialize: bool,
    /// The request was an HTTP `DELETE`.
    pub delete: bool,
    /// The request's `Mcp-Session-Id`.
    pub sent: Option<&'a [u8]>,
    /// The answer's HTTP status.
    pub status: u16,
    /// The answer's `Mcp-Session-Id`.
    pub answered: Option<&'a [u8]>,
}

impl Sessions {
    /// Folds one exchange in, at `now`.
    pub fn observe(&mut self, x: Exchange<'_>, now: Instant) -> Change {
        let mut change = self.sweep(now);
        let ok = (200..300).contains(&x.status);
        if let Some(sent) = x.sent {
            let key = self.keys.hash_one(sent);
            let gone = (x.delete && ok) || x.status == 404;
            if gone {
                if self.last_seen.remove(&key).is_some() {
                    change.closed += 1;
                }
            } else if let Some(seen) = self.last_seen.get_mut(&key) {
                *seen = now;
            }
        }
        if x.initialize
            && ok
            && let Some(id) = x.answered
        {
            let key = self.keys.hash_one(id);
            if let Some(seen) = self.last_seen.get_mut(&key) {
                *seen = now;
            } else if self.last_seen.len() < MAX_SESSIONS {
                self.last_seen.insert(key, now);
                change.opened += 1;
            }
        }
        change
    }

    /// Forgets sessions idle past [`IDLE_EXPIRY`], at most once per [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Instant) -> Change {
        if self
            .last_sweep
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return Change::default();
        }
        self.last_sweep = Some(now);
        let before = self.last_seen.len();
        self.last_seen
            .retain(|_, seen| now.saturating_duration_since(*seen) < IDLE_EXPIRY);
        Change {
            opened: 0,
            closed: before - self.last_seen.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(id: &[u8]) -> Exchange<'_> {
        Exchange {
            initialize: true,
            delete: false,
            sent: None,
            status: 200,
            answered: Some(id),
        }
    }

    fn with(id: &[u8], delete: bool, status: u16) -> Exchange<'_> {
        Exchange {
            initialize: false,
            delete,
            sent: Some(id),
            status,
            answered: None,
        }
    }

    #[test]
    fn sessions_open_on_initialize_and_close_on_delete_404_or_idleness() {
        let mut s = Sessions::default();
        let t = Instant::now();
        let opened = Change {
            opened: 1,
            closed: 0,
        };
        let closed = Change {
            opened: 0,
            closed: 1,
        };
        assert_eq!(s.observe(init(b"a"), t), opened);
        assert_eq!(s.observe(init(b"a"), t), Change::default(), "seen already");
        assert_eq!(s.observe(init(b"b"), t), opened);
        assert_eq!(s.observe(init(b"c"), t), opened);
        // A failed DELETE closes nothing; a 2xx one does, once.
        assert_eq!(s.observe(with(b"a", true, 405), t), Change::default());
        assert_eq!(s.observe(with(b"a", true, 200), t), closed);
        assert_eq!(s.observe(with(b"a", true, 200), t), Change::default());
        // The upstream expired it.
        assert_eq!(s.observe(with(b"b", false, 404), t), closed);
        // Idle: c, last seen at t, is gone an hour later; d, used meanwhile, is not.
        let later = t + Duration::from_secs(1800);
        assert_eq!(s.observe(init(b"d"), later), opened);
        let much_later = t + IDLE_EXPIRY + Duration::from_secs(1);
        assert_eq!(s.observe(with(b"d", false, 200), much_later), closed);
        assert_eq!(s.last_seen.len(), 1);
        // No id, no session (a stateless server).
        let stateless = Exchange {
            answered: None,
            ..init(b"")
        };
        assert_eq!(s.observe(stateless, much_later), Change::default());
    }

    #[test]
    fn the_set_is_bounded() {
        let mut s = Sessions::default();
        let t = Instant::now();
        for i in 0..(MAX_SESSIONS + 10) {
            s.observe(init(i.to_string().as_bytes()), t);
        }
        assert_eq!(s.last_seen.len(), MAX_SESSIONS);
    }
}
