//! `mcpulse snapshot`: a baseline of a server's contract.

use crate::cli::SnapshotArgs;
use crate::printer::count;
use crate::settings;
use anyhow::Result;
use mcpulse_judge::{Policy, contract, judge};
use mcpulse_wire::text;
use std::io::Write;

pub fn run(args: SnapshotArgs) -> Result<u8> {
    let (target, plan) = settings::target_and_plan(&args.target)?;
    let transcript = settings::run_probe(&target, &plan)?;
    let Some(mut c) = contract::from_transcript(&transcript) else {
        // No contract: say why, with the probe's own findings.
        let mut report = judge(&transcript, &Policy::default());
        report.hide(&plan.secrets);
        let mut msg = format!(
            "mcpulse: no baseline written: could not take the contract of {} ({})",
            text::message(&report.target),
            report.status.as_str()
        );
        for f in report
            .findings
            .iter()
            .filter(|f| f.severity != mcpulse_judge::Severity::Info)
        {
            msg.push_str(&format!(
                "\n  {} {}: {}",
                f.severity.as_str(),
                f.code,
                text::message(&f.message)
            ));
        }
        anstream::eprintln!("{msg}");
        // The probe's own exit code (2 down, 1 degraded: up, but gated or a list failing), and
        // never 0: no baseline was written.
        return Ok(report.status.exit_code().max(1));
    };
    // A server may echo what it was given (a header's token, a secret argument) into a
    // description or its instructions: the baseline, meant to be committed, holds it hidden, as
    // `probe --baseline` compares it.
    c.hide(&plan.secrets);
    let text = c.to_lock();
    match &args.output {
        Some(path) => {
            super::probe::write_atomic(path, &text)?;
            anstream::eprintln!(
                "mcpulse: wrote {} ({}, {}, {}, {}; {})",
                path.display(),
                count(c.tools.len(), "tool"),
                count(c.prompts.len(), "prompt"),
                count(c.resources.len(), "resource"),
                count(c.resource_templates.len(), "resource template"),
                c.digest
            );
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(0)
}
