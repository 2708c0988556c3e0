//! Printers: the same report for people (`human`), machines (`json`) and code-scanning
//! dashboards (`sarif`).

pub mod human;
pub mod json;
pub mod sarif;

/// `1 tool`, `2 tools`, `0 prompts`: a count and its noun, singular for one.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
