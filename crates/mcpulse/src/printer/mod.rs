//! Printers: the same report for people (`human`), machines (`json`) and code-scanning
//! dashboards (`sarif`).

pub mod human;
pub mod json;
pub mod sarif;
