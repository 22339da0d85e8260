//! `vgpu`: run programs under vgpu's per-GPU limits, change the limits of a running container,
//! monitor it (`status`, `top`, `metrics`) and check that enforcement works (`doctor`).
//!
//! Each subcommand lives in its own module; `main` only parses and dispatches.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod doctor;
mod error;
mod http;
mod inherited;
mod limit;
mod metrics;
mod nvml;
mod run;
mod shared;
mod status;
mod tokens;
mod top;

/// `vgpu --version`: the crate version, the git commit and the build date (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VGPU_COMMIT"),
    ", built ",
    env!("VGPU_BUILD_DATE"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "vgpu",
    version = VERSION,
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
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of vgpu and its subcommands to stdout, or write one page per
    /// command (vgpu.1, vgpu-run.1, ...) into --out DIR.
    Man {
        /// Directory to write the pages into.
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
}

fn completions(shell: clap_complete::Shell) -> error::Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "vgpu", &mut out);
    shared::output::write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn man(out: Option<std::path::PathBuf>) -> error::Result<ExitCode> {
    let cmd = Cli::command();
    match out {
        Some(dir) => clap_mangen::generate_to(cmd, &dir).map_err(|e| {
            error::Error::io(format!("writing man pages into {}", dir.display()), e)
        })?,
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| error::Error::io("rendering the man page", e))?;
            shared::output::write_stdout(&buf)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = inherited::Inherited::capture();
    let (name, result) = match cli.command {
        Command::Run(args) => ("run", run::main(args, &env)),
        Command::Limit(args) => ("limit", limit::main(args)),
        Command::Status(args) => ("status", status::main(args)),
        Command::Top(args) => ("top", top::main(args)),
        Command::Metrics(args) => ("metrics", metrics::main(args)),
        Command::Doctor(args) => ("doctor", doctor::main(args, &env)),
        Command::Completions { shell } => ("completions", completions(shell)),
        Command::Man { out } => ("man", man(out)),
    };
    match result {
        Ok(code) => code,
        Err(error::Error::Closed) => ExitCode::SUCCESS,
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

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
