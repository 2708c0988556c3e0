//! The session-id check: ids too guessable (short, narrow alphabet, related to each other).

use super::{Ctx, SecRule, evidence};
use mcpulse_wire::transcript::{Exchange, Step, TransportKind};

pub(super) fn session_rules(c: &mut Ctx<'_>) {
    let tr = c.tr;
    // The ids the server issued: an answer to a request that carried one (a check that rode
    // the probe's session) only repeats it.
    let ids: Vec<(&Exchange, &str)> = tr
        .exchanges
        .iter()
        .filter(|e| {
            e.transport == TransportKind::StreamableHttp
                && matches!(
                    e.step,
                    Step::Initialize | Step::DualEraCheck | Step::OriginCheck | Step::HostCheck
                )
                && !e
                    .request
                    .headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        })
        .filter_map(|e| e.header("mcp-session-id").map(|s| (e, s)))
        .collect();
    for (ex, id) in &ids {
        if let Some(problem) = weak_session_id(id) {
            c.add(
                SecRule::SessionIdWeak,
                format!("Mcp-Session-Id {:?} {problem}", clip(id)),
                vec![evidence(ex)],
            );
            return;
        }
    }
    if let [(e1, a), (e2, b), ..] = ids.as_slice()
        && (a == b || common_prefix(a, b) * 4 >= a.len() * 3)
    {
        c.add(
            SecRule::SessionIdWeak,
            format!(
                "two sessions got related ids ({:?} and {:?})",
                clip(a),
                clip(b)
            ),
            vec![evidence(e1), evidence(e2)],
        );
    }
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Why a session id is weak, if it is: not visible ASCII, or under 64 bits of estimated
/// entropy (length × log2 of the alphabet it draws from).
pub fn weak_session_id(id: &str) -> Option<String> {
    if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Some("is not visible ASCII (0x21–0x7E), as the spec requires".into());
    }
    let core: String = id.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let alphabet = if core.chars().all(|c| c.is_ascii_digit()) {
        10.0
    } else if core.chars().all(|c| c.is_ascii_hexdigit()) {
        16.0
    } else if core
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        || core
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        36.0
    } else {
        62.0
    };
    let distinct = {
        let mut v: Vec<char> = core.chars().collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    let bits = core.len() as f64 * f64::log2(alphabet);
    if bits < 64.0 {
        return Some(format!(
            "carries about {bits:.0} bits of entropy; at least 64 (128 recommended) are needed"
        ));
    }
    if distinct < 6 {
        return Some(format!("uses only {distinct} distinct characters"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        assert!(weak_session_id("1").is_some());
        assert!(weak_session_id("12345678").is_some());
        assert!(weak_session_id("sess-aaaa-aaaa-aaaa-aaaa").is_some());
        assert!(weak_session_id("has space").is_some());
        assert!(weak_session_id("550e8400-e29b-41d4-a716-446655440000").is_none());
        assert!(weak_session_id("9f8c2b1e4d7a6f3b0c5e8d2a1b4c7f9e").is_none());
    }
}
