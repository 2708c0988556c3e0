//! Pure judgement: a [`Transcript`] in, a [`Report`] (facts) with its verdict out.
//!
//! Nothing here does I/O or reads a clock: the same transcript always gives the same report, so
//! every failure class is a fixture file and stored evidence can be judged again after a rule
//! changes. Each finding comes from a [`Rule`] with a stable code, a severity and a
//! documentation text (`docs/findings.md` is generated from [`rules::ALL`]).

pub mod contract;
pub mod drift;
pub(crate) mod evidence;
pub mod replies;
pub mod report;
pub mod rules;
pub mod security;

pub use mcpulse_wire::transcript::Transcript;
pub use report::{Policy, Report, judge};
pub use rules::{AnyRule, Finding, Rule, Severity, Status};
