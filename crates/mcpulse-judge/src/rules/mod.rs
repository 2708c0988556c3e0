//! The rule registry: every finding, security finding and drift change mcpulse can report is a
//! typed rule with a stable code, a weight (a [`Severity`], a security [`Level`] or a drift
//! [`Class`]), a title and an explanation (ruff's model). A finding carries its rule, so the
//! weight it is reported with is the rule's, not whatever a call site passed.
//!
//! This module owns the rules and the pages generated from them (`docs/findings.md`,
//! `docs/checks.md`, `docs/drift.md`); it does not own the checks that emit findings (`report`,
//! `security`, `drift`). Codes are never reused or renamed: alerts, dashboards and CI scripts key
//! on them. In JSON a rule is its code string, so reports keep their shape.

use serde::{Deserialize, Serialize};

pub mod docs;
pub mod drift;
pub mod health;
pub mod security;

pub use docs::findings_doc;
pub use drift::{Class, DriftRule};
/// The health rules (`rules::ALL`, as before the registry took in the other families).
pub use health::{ALL, Layer, Rule};
pub use security::{Level, SecRule};

/// A rule family: an enum of rules with codes, one weight each, a title and an explanation;
/// the code is its JSON form, and an unknown code does not deserialize (it never silently
/// becomes another rule or another weight).
#[macro_export]
#[doc(hidden)]
macro_rules! rule_family {
    (
        $(#[$meta:meta])*
        $name:ident, $weight:ident;
        $( $variant:ident = $code:literal, $w:ident, $title:literal, $why:literal; )*
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $variant, )* }

        /// All rules of the family, in documentation order.
        pub const ALL: &[$name] = &[ $( $name::$variant, )* ];

        impl $name {
            /// The stable code.
            pub fn code(self) -> &'static str { match self { $( $name::$variant => $code, )* } }
            /// The same as [`Self::code`], for call sites that compare codes as text.
            pub fn as_str(self) -> &'static str { self.code() }
            /// The documented weight of a finding of this rule.
            pub fn weight(self) -> $weight { match self { $( $name::$variant => $weight::$w, )* } }
            /// What the rule checks, in one line.
            pub fn title(self) -> &'static str { match self { $( $name::$variant => $title, )* } }
            /// Why it matters and what to do.
            pub fn why(self) -> &'static str { match self { $( $name::$variant => $why, )* } }
            /// The rule with this code.
            pub fn from_code(code: &str) -> Option<$name> {
                ALL.iter().copied().find(|r| r.code() == code)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.code())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool { self.code() == other }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool { self.code() == *other }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.code())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let code = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::from_code(&code).ok_or_else(|| {
                    serde::de::Error::custom(format_args!(
                        concat!("unknown ", stringify!($name), " code {:?}"),
                        code
                    ))
                })
            }
        }
    };
}

/// Any rule of the registry, for what spans the families (the docs, code uniqueness, the
/// examples test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyRule {
    Health(Rule),
    Security(SecRule),
    Drift(DriftRule),
}

impl AnyRule {
    /// Every rule: health, then security, then drift, each in documentation order.
    pub fn all() -> impl Iterator<Item = AnyRule> {
        health::ALL
            .iter()
            .map(|r| AnyRule::Health(*r))
            .chain(security::ALL.iter().map(|r| AnyRule::Security(*r)))
            .chain(drift::ALL.iter().map(|r| AnyRule::Drift(*r)))
    }

    pub fn code(self) -> &'static str {
        match self {
            AnyRule::Health(r) => r.code(),
            AnyRule::Security(r) => r.code(),
            AnyRule::Drift(r) => r.code(),
        }
    }

    /// The family's name: `health`, `security` or `drift`.
    pub fn family(self) -> &'static str {
        match self {
            AnyRule::Health(_) => "health",
            AnyRule::Security(_) => "security",
            AnyRule::Drift(_) => "drift",
        }
    }

    /// The documented weight, as the docs spell it.
    pub fn weight(self) -> &'static str {
        match self {
            AnyRule::Health(r) => r.severity().as_str(),
            AnyRule::Security(r) => r.level().as_str(),
            AnyRule::Drift(r) => r.class().as_str(),
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            AnyRule::Health(r) => r.title(),
            AnyRule::Security(r) => r.title(),
            AnyRule::Drift(r) => r.title(),
        }
    }

    pub fn why(self) -> &'static str {
        match self {
            AnyRule::Health(r) => r.why(),
            AnyRule::Security(r) => r.why(),
            AnyRule::Drift(r) => r.why(),
        }
    }
}

/// How bad a finding is. The verdict is the worst severity found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    /// Makes the server `degraded`.
    Warning,
    /// Makes the server `down`.
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Healthy,
    Degraded,
    Down,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Healthy => "healthy",
            Status::Degraded => "degraded",
            Status::Down => "down",
        }
    }

    /// The monitoring-plugin exit code: 0 healthy, 1 degraded, 2 down.
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Healthy => 0,
            Status::Degraded => 1,
            Status::Down => 2,
        }
    }

    pub fn from_findings(findings: &[Finding]) -> Status {
        match findings.iter().map(|f| f.severity).max() {
            Some(Severity::Critical) => Status::Down,
            Some(Severity::Warning) => Status::Degraded,
            _ => Status::Healthy,
        }
    }
}

/// One reason in a verdict. Its severity is its rule's ([`Rule::finding`] is the only way one
/// is made in the judge); both are kept in the report for whoever reads the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule, serialized as its code.
    pub code: Rule,
    pub severity: Severity,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_kebab_across_the_registry() {
        let mut codes: Vec<&str> = AnyRule::all().map(AnyRule::code).collect();
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), n, "a code is used twice");
        for c in codes {
            assert!(
                c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-'),
                "{c}"
            );
        }
    }

    #[test]
    fn codes_round_trip_through_json() {
        for r in AnyRule::all() {
            let json = format!("{:?}", r.code());
            let back = match r {
                AnyRule::Health(_) => serde_json::from_str::<Rule>(&json).map(AnyRule::Health),
                AnyRule::Security(_) => {
                    serde_json::from_str::<SecRule>(&json).map(AnyRule::Security)
                }
                AnyRule::Drift(_) => serde_json::from_str::<DriftRule>(&json).map(AnyRule::Drift),
            };
            assert_eq!(back.ok(), Some(r));
        }
        assert!(serde_json::from_str::<Rule>("\"no-such-rule\"").is_err());
    }

    #[test]
    fn status_is_worst_severity() {
        assert_eq!(Status::from_findings(&[]), Status::Healthy);
        let f = vec![Rule::DualEra.finding("x"), Rule::SlowHandshake.finding("y")];
        assert_eq!(Status::from_findings(&f), Status::Degraded);
        let f = vec![Rule::Timeout.finding("x"), Rule::SlowHandshake.finding("y")];
        assert_eq!(Status::from_findings(&f), Status::Down);
    }
}
