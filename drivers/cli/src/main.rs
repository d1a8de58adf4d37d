//! `leasehold`: the demos. See the crate's README.

use std::fmt::Display;
use std::process::ExitCode;

use clap::Parser;
use leasehold_cli::args::{Cli, Command};
use leasehold_cli::{commands_demo, demo, CliError};

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo(args) => finish(demo::run(&args.options()), |r| r.passed()),
        Command::Commands(args) => finish(commands_demo::run(&args.options()), |r| r.passed()),
    }
}

/// Prints the report (exit 0, or 1 if it shows a failure) or the error (exit 2).
fn finish<R: Display>(result: Result<R, CliError>, passed: impl Fn(&R) -> bool) -> ExitCode {
    match result {
        Ok(report) => {
            println!("{report}");
            if passed(&report) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
