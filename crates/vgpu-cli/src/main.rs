//! `vgpu`: run programs under vgpu's per-GPU limits, change the limits of a running container,
//! monitor it (`status`, `top`, `metrics`) and check that enforcement works (`doctor`).
//!
//! Each subcommand lives in its own module; `main` only parses and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod common;
mod doctor;
mod error;
mod limit;
mod metrics;
mod run;
mod status;
mod top;

#[derive(Debug, Parser)]
#[command(
    name = "vgpu",
    version,
    about = "Run CUDA programs under per-GPU memory and compute limits"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command with libvgpu.so preloaded and the given limits set.
    Run(run::RunArgs),
    /// Change a running container's limits (memory, SM) for all its processes at once.
    Limit(limit::LimitArgs),
    /// Show per device the limits, use and counters, and per process its use.
    Status(status::StatusArgs),
    /// Live view of one or more regions (full screen on a terminal, text otherwise).
    Top(top::TopArgs),
    /// Serve the regions' accounting in the OpenMetrics text format.
    Metrics(metrics::MetricsArgs),
    /// Check that the driver, NVML and libvgpu.so are found and that the limits are enforced.
    Doctor(doctor::DoctorArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (name, result) = match cli.command {
        Command::Run(args) => ("run", run::main(args)),
        Command::Limit(args) => ("limit", limit::main(args)),
        Command::Status(args) => ("status", status::main(args)),
        Command::Top(args) => ("top", top::main(args)),
        Command::Metrics(args) => ("metrics", metrics::main(args)),
        Command::Doctor(args) => ("doctor", doctor::main(args)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            match &e {
                // The configuration reader's one line already names vgpu and the variable.
                error::Error::Config(c) => eprintln!("{c}"),
                e => eprintln!("vgpu {name}: {e}"),
            }
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
