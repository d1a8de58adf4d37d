//! `leasehold`: the demo and the benchmark. See the crate's README.

use std::process::ExitCode;

use clap::Parser;
use leasehold_cli::args::{Cli, Command};
use leasehold_cli::{bench, bench_redis, commands_demo, demo};

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Demo(args) => match demo::run(&args.options()) {
            Ok(report) => {
                println!("{report}");
                if report.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => fail(&error),
        },
        Command::Commands(args) => match commands_demo::run(&args.options()) {
            Ok(report) => {
                println!("{report}");
                if report.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => fail(&error),
        },
        Command::Bench(args) => match bench::run(&args.options()) {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        },
        Command::BenchRedis(args) => match bench_redis::run(&args.options()) {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(error) => fail(&error),
        },
    }
}

fn fail(error: &leasehold_cli::CliError) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(2)
}
