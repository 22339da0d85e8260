//! `vgpu`: run programs under vgpu's per-GPU limits.
//!
//! Each subcommand lives in its own module; `main` only parses and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod run;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run::main(args),
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
