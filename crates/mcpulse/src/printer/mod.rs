//! Printers: the same report for people (`human`) and machines (`json`).

pub mod human;
pub mod json;
