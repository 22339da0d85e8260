//! One-line messages on stderr, gated by `LIBCUDA_LOG_LEVEL` with HAMi-core's meanings: 0
//! errors only; 1 and 2 (the default) errors, warnings and messages; 3 adds info; 4 debug; 5
//! (vgpu's own) trace.
//!
//! Never used on a fast path: only at initialisation, at a denial, and on errors.
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// Current level; 2 (warnings) until the configuration is read.
static LEVEL: AtomicU8 = AtomicU8::new(2);

/// The debug level (`LIBCUDA_LOG_LEVEL=4`).
pub const DEBUG: u8 = 4;

/// The trace level (`LIBCUDA_LOG_LEVEL=5`): the compute controller's every timing sample and
/// every look's decision.
pub const TRACE: u8 = 5;

pub fn set_level(level: u8) {
    LEVEL.store(level, Ordering::Relaxed);
}

/// Whether messages of `level` are printed (to skip building one that would not be).
pub fn enabled(level: u8) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level
}

fn emit(level: u8, tag: &str, args: std::fmt::Arguments<'_>) {
    if LEVEL.load(Ordering::Relaxed) < level {
        return;
    }
    // Format into one buffer and write it with a single write(2) so lines from several
    // processes do not interleave. `try_lock`-free: stderr is unbuffered.
    let mut line = Vec::with_capacity(160);
    let _ = write!(line, "vgpu[{}]: {tag}", std::process::id());
    let msg = args.to_string();
    // Policy messages carry their own "vgpu: " prefix; the pid is added here instead.
    line.extend_from_slice(msg.strip_prefix("vgpu: ").unwrap_or(&msg).as_bytes());
    line.push(b'\n');
    let _ = std::io::stderr().write_all(&line);
}

/// An error the user must see. Printed at every level (HAMi-core's 0 is "errors only").
pub fn error(args: std::fmt::Arguments<'_>) {
    emit(0, "error: ", args)
}
/// A warning or message (first denial, a limit conflict): levels 1 and above.
pub fn warn(args: std::fmt::Arguments<'_>) {
    emit(1, "", args)
}
/// Informational (what was configured, measured context size).
pub fn info(args: std::fmt::Arguments<'_>) {
    emit(3, "", args)
}
/// Trace detail (the controller thread's samples; never a launching thread).
pub fn trace(args: std::fmt::Arguments<'_>) {
    emit(TRACE, "trace: ", args)
}
/// Debug detail.
pub fn debug(args: std::fmt::Arguments<'_>) {
    emit(DEBUG, "debug: ", args)
}

/// A message that is printed whatever the level: invalid configuration.
pub fn fatal(args: std::fmt::Arguments<'_>) {
    emit(0, "", args)
}
