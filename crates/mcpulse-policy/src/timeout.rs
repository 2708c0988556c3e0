//! Request deadlines: `--request-timeout` for every client request, `--tool-timeout TOOL=DUR`
//! for one tool's `tools/call`. Both are off by default: the client's own timeouts stand, and
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

#[cfg(test)]
mod tests {
    use super::*;

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
