//! The published formula, from the findings to a score and a grade (the module above says it in
//! words; `docs/checks.md` is generated from the same constants).

use super::{Level, SecRule, SecurityFinding};
use crate::rules::security::GRADES;

/// The published formula: each rule once at its worst, penalties summed off 100, any critical
/// is an F.
pub fn grade(findings: &[SecurityFinding]) -> (u32, String) {
    let mut worst: Vec<(SecRule, Level)> = Vec::new();
    for f in findings {
        match worst.iter_mut().find(|(c, _)| *c == f.code) {
            Some(w) => w.1 = w.1.max(f.severity),
            None => worst.push((f.code, f.severity)),
        }
    }
    let penalty: u32 = worst.iter().map(|(_, l)| l.penalty()).sum();
    let score = 100u32.saturating_sub(penalty);
    let grade = if worst.iter().any(|(_, l)| *l == Level::Critical) {
        "F"
    } else {
        GRADES
            .iter()
            .find(|(_, min)| score >= *min)
            .map(|(g, _)| *g)
            .unwrap_or("F")
    };
    (score, grade.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula() {
        let f = |code: &str, severity| SecurityFinding {
            code: match code {
                "a" => SecRule::TlsExpiring,
                "b" => SecRule::SessionIdWeak,
                _ => SecRule::ErrorLeak,
            },
            severity,
            message: String::new(),
            evidence: Vec::new(),
        };
        assert_eq!(grade(&[]), (100, "A".into()));
        assert_eq!(
            grade(&[f("a", Level::Low), f("a", Level::Low)]),
            (95, "A".into())
        );
        assert_eq!(grade(&[f("a", Level::Medium)]), (85, "B".into()));
        assert_eq!(grade(&[f("a", Level::High)]), (70, "C".into()));
        assert_eq!(
            grade(&[f("a", Level::High), f("b", Level::Medium)]),
            (55, "D".into())
        );
        assert_eq!(
            grade(&[
                f("a", Level::High),
                f("b", Level::High),
                f("c", Level::High)
            ]),
            (10, "F".into())
        );
        assert_eq!(grade(&[f("a", Level::Critical)]).1, "F");
    }
}
