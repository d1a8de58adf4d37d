//! `leasehold`: the demos. See the crate's README.

use std::fmt::Display;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use leasehold_cli::args::{Cli, Command};
use leasehold_cli::exporter::MetricsArgs;
use leasehold_cli::{commands_demo, dashboard, demo, ops, CliError};

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo(args) => run(&args.metrics, || demo::run(&args.options()), |r| r.passed()),
        Command::Commands(args) => match &args.op {
            Some(op) => operate(ops::run_commands(op), op.redis().json),
            None => run(
                &args.metrics,
                || commands_demo::run(&args.options()),
                |r| r.passed(),
            ),
        },
        Command::Inspect(args) => operate(ops::run_inspect(&args), args.redis.json),
        Command::Pending(args) => operate(ops::run_pending(&args), args.redis.json),
        Command::Dead(args) => operate(ops::run_dead(&args.command), args.command.redis().json),
        Command::Publish(args) => operate(ops::run_publish(&args), args.redis.json),
        Command::Dashboard(args) => match dashboard::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(2)
            }
        },
    }
}

/// Prints an operator command's report (exit 0, or 1 if it found a failure) or its error
/// (exit 2).
fn operate(result: Result<ops::Report, ops::OpsError>, json: bool) -> ExitCode {
    match result {
        Ok(report) => {
            println!("{}", report.render(json));
            if report.failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Serves metrics if asked, runs, then prints the report (exit 0, or 1 if it shows a
/// failure; metrics stay up for their linger) or the error (exit 2).
fn run<R: Display>(
    metrics: &MetricsArgs,
    demo: impl FnOnce() -> Result<R, CliError>,
    passed: impl Fn(&R) -> bool,
) -> ExitCode {
    match metrics.serve().and_then(|()| demo()) {
        Ok(report) => {
            println!("{report}");
            let _ = std::io::stdout().flush();
            metrics.linger();
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
