//! Request deadlines: `--request-timeout` for every client request, `--tool-timeout TOOL=DUR`
//! for one tool's `tools/call`; and [`Deadline`], one request's deadline that progress may push
//! back (the gateway's `progress_extends`). Both are off by default: the client's own timeouts stand, and
//! the supervisor only adds one when asked (a long-running tool is not a hung one).

use std::time::Duration;

/// The configured timeouts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// For every client request (`--request-timeout`).
    pub request: Option<Duration>,
    /// For `tools/call` of one tool, by its name (`--tool-timeout`); overrides `request`.
    pub tools: Vec<(String, Duration)>,
}

impl Timeouts {
    /// How long a client request with this `method` (and, for `tools/call`, this tool) may
    /// run; `None` when it may run for ever.
    pub fn limit(&self, method: &str, tool: Option<&str>) -> Option<Duration> {
        if method == "tools/call"
            && let Some(tool) = tool
            && let Some((_, d)) = self.tools.iter().rev().find(|(name, _)| name == tool)
        {
            return Some(*d);
        }
        self.request
    }

    /// The deadline (ms on the caller's clock) of a request sent at `now_ms`.
    pub fn deadline(&self, method: &str, tool: Option<&str>, now_ms: u64) -> Option<u64> {
        self.limit(method, tool)
            .map(|d| now_ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }

    /// Whether any timeout is set (when none is, the relay need not track deadlines).
    pub fn any(&self) -> bool {
        self.request.is_some() || !self.tools.is_empty()
    }
}

/// One request's deadline, which progress may push back (the gateway's `progress_extends`):
/// each progress restarts the timeout from then, never past `max` from the start, never
/// earlier than it already was. Times are milliseconds on the caller's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    after_ms: u64,
    at_ms: u64,
    /// The latest it may be pushed to; `None`: progress does not extend it.
    max_at_ms: Option<u64>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Deadline {
    /// A request started at `now_ms` with timeout `after`; `max`: how far from the start
    /// progress may push it (a `max` shorter than `after` is taken as `after`).
    pub fn new(now_ms: u64, after: Duration, max: Option<Duration>) -> Deadline {
        let at_ms = now_ms.saturating_add(ms(after));
        Deadline {
            after_ms: ms(after),
            at_ms,
            max_at_ms: max.map(|m| now_ms.saturating_add(ms(m)).max(at_ms)),
        }
    }

    /// When it expires.
    pub fn at_ms(&self) -> u64 {
        self.at_ms
    }

    /// Whether progress may push it back.
    pub fn extends(&self) -> bool {
        self.max_at_ms.is_some()
    }

    /// Progress was reported at `now_ms`.
    pub fn progressed(&mut self, now_ms: u64) {
        if let Some(max) = self.max_at_ms {
            self.at_ms = now_ms
                .saturating_add(self.after_ms)
                .min(max)
                .max(self.at_ms);
        }
    }

    /// Whether it has passed at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.at_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_pushes_a_deadline_back_up_to_its_maximum_only() {
        let s = Duration::from_secs(1);
        let mut d = Deadline::new(1000, s, Some(Duration::from_secs(3)));
        assert_eq!(d.at_ms(), 2000);
        d.progressed(1500);
        assert_eq!(d.at_ms(), 2500);
        d.progressed(1200); // an old report moves nothing back
        assert_eq!(d.at_ms(), 2500);
        d.progressed(3800);
        assert_eq!(d.at_ms(), 4000, "capped at the start plus the maximum");
        assert!(!d.expired(3999) && d.expired(4000));
        let mut fixed = Deadline::new(0, s, None);
        fixed.progressed(900);
        assert_eq!(
            fixed.at_ms(),
            1000,
            "without a maximum progress extends nothing"
        );
        assert!(!fixed.extends());
        assert_eq!(
            Deadline::new(0, s, Some(Duration::ZERO)).max_at_ms,
            Some(1000)
        );
    }

    #[test]
    fn off_by_default() {
        let t = Timeouts::default();
        assert!(!t.any());
        assert_eq!(t.deadline("tools/call", Some("x"), 5), None);
        assert_eq!(t.deadline("resources/read", None, 5), None);
    }

    #[test]
    fn a_tool_timeout_overrides_the_global_one_for_that_tool_only() {
        let t = Timeouts {
            request: Some(Duration::from_secs(10)),
            tools: vec![
                ("slow".into(), Duration::from_secs(60)),
                ("fast".into(), Duration::from_millis(500)),
            ],
        };
        assert_eq!(t.deadline("tools/call", Some("slow"), 1000), Some(61_000));
        assert_eq!(t.deadline("tools/call", Some("fast"), 1000), Some(1_500));
        assert_eq!(t.deadline("tools/call", Some("other"), 1000), Some(11_000));
        // Only tools/call is matched by tool name.
        assert_eq!(t.deadline("prompts/get", Some("slow"), 1000), Some(11_000));
        assert_eq!(t.deadline("tools/list", None, 0), Some(10_000));
    }

    #[test]
    fn a_tool_timeout_alone_leaves_other_requests_unbounded() {
        let t = Timeouts {
            request: None,
            tools: vec![("slow".into(), Duration::from_secs(1))],
        };
        assert!(t.any());
        assert_eq!(t.deadline("tools/call", Some("slow"), 0), Some(1000));
        assert_eq!(t.deadline("tools/call", Some("other"), 0), None);
        assert_eq!(
            t.deadline("tools/call", Some("slow"), u64::MAX),
            Some(u64::MAX)
        );
    }
}
