//! `mcpulse diff`: two baselines, every change classified; a CI gate.

use crate::cli::DiffArgs;
use crate::printer;
use anyhow::Result;
use mcpulse_judge::drift;

pub fn run(args: DiffArgs) -> Result<u8> {
    let old = super::probe::read_baseline(&args.old)?;
    let new = super::probe::read_baseline(&args.new)?;
    let d = drift::diff(&old, &new);
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
