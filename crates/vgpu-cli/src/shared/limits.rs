//! The limit values every command's flags accept: a memory size or `none`, an SM percentage or
//! `none`.

use vgpu_policy::config::ACCEPTED_SIZE_FORMS;
use vgpu_policy::size::parse_size;

/// The SM range, stated once for every command.
pub const SM_FORMS: &str = "a percentage 1 to 99; 0, 100 or none: no limit";

/// A memory limit as a flag gives it (`None`: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemLimit(pub Option<u64>);

/// An SM limit as a flag gives it, percent 1..=99 (`None`: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLimit(pub Option<u8>);

/// A size, `0` or `none` (no limit): the form every memory-limit flag accepts.
pub fn parse_mem_limit(s: &str) -> std::result::Result<MemLimit, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(MemLimit(None));
    }
    match parse_size(s) {
        Ok(0) => Ok(MemLimit(None)),
        Ok(v) => Ok(MemLimit(Some(v))),
        Err(e) => Err(format!("{e}; use {ACCEPTED_SIZE_FORMS} or none")),
    }
}

/// [`SM_FORMS`]: the form every SM-limit flag accepts.
pub fn parse_sm_limit(s: &str) -> std::result::Result<SmLimit, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(SmLimit(None));
    }
    match s.trim().parse::<u8>() {
        Ok(0 | 100) => Ok(SmLimit(None)),
        Ok(v) if v < 100 => Ok(SmLimit(Some(v))),
        _ => Err(format!("{s:?} is not {SM_FORMS}")),
    }
}
