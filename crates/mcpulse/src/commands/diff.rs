//! `mcpulse diff`: two baselines, every change classified; a CI gate.

use crate::cli::DiffArgs;
use crate::printer;
use anyhow::Result;
use mcpulse_judge::drift;

pub fn run(args: DiffArgs) -> Result<u8> {
    let (old, mut mismatches) = super::probe::read_baseline(&args.old, args.force)?;
    let (new, new_mismatches) = super::probe::read_baseline(&args.new, args.force)?;
    mismatches.extend(new_mismatches);
    let mut d = drift::diff(&old, &new);
    d.baseline_mismatches = mismatches;
    if args.json {
        printer::json::print(&d)?;
    } else {
        printer::human::print_drift(&d, super::probe::color_choice(args.color))?;
    }
    if args.accept {
        super::probe::write_atomic(&args.old, &new.to_lock())?;
        anstream::eprintln!(
            "mcpulse: accepted: {} now holds the contract of {}",
            args.old.display(),
            args.new.display()
        );
        return Ok(0);
    }
    Ok(d.exit_code())
}
