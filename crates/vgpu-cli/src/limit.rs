//! `vgpu limit`: changes a running container's limits in its region, for every process at once.
//! Lowering a memory limit below current use revokes nothing: allocations are refused until use
//! falls below it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::shared::limits::{MemLimit, SmLimit, parse_mem_limit, parse_sm_limit};
use crate::shared::locate::{device_index, open_region};
use crate::shared::output::{size_or_none, write_stdout};

#[derive(Debug, Args)]
#[command(
    after_help = "Devices: I is the index `vgpu status` prints (region order) or a UUID.\n\
    Sizes: a byte count or a number with a binary suffix k, m, g, t; 0 or `none` removes the limit.\n\
    SM limits: a percentage 1 to 99; 0, 100 or none removes the limit.\n\
    Limits set here stay in force while a process of the container is attached: a process that \
    starts later with other limits in its environment keeps the region's and reports the conflict.\n\
    The limits the container was started with (its environment) are a ceiling: they can be lowered \
    and restored here, not raised or removed; raising them needs the node side (recreate the \
    container with higher limits)."
)]
pub struct LimitArgs {
    // The doc comments are clap's help text, where `<uid>` is plain text, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// Region file (default: $CUDA_DEVICE_MEMORY_SHARED_CACHE, else /tmp/vgpu-<uid>/region,
    /// else this user's only `vgpu run` region).
    #[arg(long, value_name = "PATH")]
    region: Option<PathBuf>,
    /// Memory limit for every device (a size, or none).
    #[arg(long, value_name = "SIZE", value_parser = parse_mem_limit, allow_hyphen_values = true)]
    memory: Option<MemLimit>,
    /// Memory limit for one device (repeatable), e.g. --memory-device 1=2g.
    #[arg(long = "memory-device", value_name = "I=SIZE", value_parser = parse_dev_limit, allow_hyphen_values = true)]
    memory_device: Vec<(String, MemLimit)>,
    /// SM (compute) limit for every device: a percentage 1 to 99; 0, 100 or none: no limit.
    #[arg(long, value_name = "PCT", value_parser = parse_sm_limit, allow_hyphen_values = true)]
    sm: Option<SmLimit>,
    /// SM limit for one device (repeatable), e.g. --sm-device 0=50.
    #[arg(long = "sm-device", value_name = "I=PCT", value_parser = parse_dev_sm, allow_hyphen_values = true)]
    sm_device: Vec<(String, SmLimit)>,
    /// Print the changes as JSON: `[{index, uuid, limit: "memory"|"sm", old, new, used}]`
    /// (bytes or percent; null: none).
    #[arg(long)]
    json: bool,
}

fn split(s: &str) -> std::result::Result<(String, &str), String> {
    let (dev, v) = s
        .split_once('=')
        .ok_or_else(|| "expected I=VALUE: a device index or UUID, then a value".to_owned())?;
    Ok((dev.trim().to_owned(), v))
}

fn parse_dev_limit(s: &str) -> std::result::Result<(String, MemLimit), String> {
    let (d, v) = split(s)?;
    Ok((d, parse_mem_limit(v)?))
}

fn parse_dev_sm(s: &str) -> std::result::Result<(String, SmLimit), String> {
    let (d, v) = split(s)?;
    Ok((d, parse_sm_limit(v)?))
}

/// One change, for `--json`.
#[derive(Debug, Serialize)]
struct Change {
    index: usize,
    uuid: String,
    limit: &'static str,
    old: Option<u64>,
    new: Option<u64>,
    /// Memory in use on the device, bytes.
    used: u64,
}

pub fn main(args: LimitArgs) -> Result<ExitCode> {
    run(args).map(|()| ExitCode::SUCCESS)
}

fn run(args: LimitArgs) -> Result<()> {
    let json = args.json;
    if args.memory.is_none()
        && args.memory_device.is_empty()
        && args.sm.is_none()
        && args.sm_device.is_empty()
    {
        return Err(Error::Usage(
            "nothing to change: give --memory, --memory-device, --sm or --sm-device".into(),
        ));
    }
    let region = open_region(args.region.as_deref())?;
    let n = region.device_count();
    // Per device, the new values: global first, then per-device ones override.
    let mut mem: Vec<Option<Option<u64>>> = vec![args.memory.map(|m| m.0); n];
    let mut sm: Vec<Option<Option<u8>>> = vec![args.sm.map(|s| s.0); n];
    for (d, v) in &args.memory_device {
        mem[device_index(&region, d)?] = Some(v.0);
    }
    for (d, v) in &args.sm_device {
        sm[device_index(&region, d)?] = Some(v.0);
    }
    let snap = region.snapshot();
    // The platform's limits are a ceiling: check every change before making any.
    for (i, d) in snap.devices.iter().enumerate().take(n) {
        if let Some(new) = mem[i]
            && let Some(c) = region.ceiling_index(i)
            && new.is_none_or(|l| l > c)
        {
            return Err(Error::Usage(format!(
                "device {i} {}: memory limit {} is above the container's ceiling {} (the limit it was started with); \
                 lower or restore it, raising it needs the node side",
                d.uuid,
                size_or_none(new),
                size_or_none(Some(c))
            )));
        }
        if let Some(new) = sm[i]
            && let Some(c) = region.sm_ceiling_index(i)
            && new.is_none_or(|s| s > c)
        {
            return Err(Error::Usage(format!(
                "device {i} {}: SM limit {} is above the container's ceiling {c}% (the limit it was started with); \
                 lower or restore it, raising it needs the node side",
                d.uuid,
                new.map_or_else(|| "none".to_owned(), |v| format!("{v}%")),
            )));
        }
    }
    let mut changes = Vec::new();
    let mut text = String::new();
    for i in 0..n {
        let d = &snap.devices[i];
        if let Some(new) = mem[i] {
            region.set_limit(&d.uuid, new)?;
            let over = match new {
                Some(l) if d.used > l => format!(
                    " (in use: {}; nothing is revoked, allocations are refused until use falls below it)",
                    vgpu_policy::size::format_size(d.used)
                ),
                _ => String::new(),
            };
            text.push_str(&format!(
                "device {i} {}: memory limit {} -> {}{over}\n",
                d.uuid,
                size_or_none(d.limit),
                size_or_none(new)
            ));
            changes.push(Change {
                index: i,
                uuid: d.uuid.clone(),
                limit: "memory",
                old: d.limit,
                new,
                used: d.used,
            });
        }
        if let Some(new) = sm[i] {
            region.set_sm_limit(&d.uuid, new)?;
            let show = |v: Option<u8>| v.map_or_else(|| "none".to_owned(), |v| format!("{v}%"));
            text.push_str(&format!(
                "device {i} {}: SM limit {} -> {}\n",
                d.uuid,
                show(d.sm_limit),
                show(new)
            ));
            changes.push(Change {
                index: i,
                uuid: d.uuid.clone(),
                limit: "sm",
                old: d.sm_limit.map(u64::from),
                new: new.map(u64::from),
                used: d.used,
            });
        }
    }
    if json {
        let s = serde_json::to_string_pretty(&changes).map_err(|e| Error::io("JSON", e.into()))?;
        text = s + "\n";
    }
    write_stdout(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse_mem_limit("none"), Ok(MemLimit(None)));
        assert_eq!(parse_mem_limit("0"), Ok(MemLimit(None)));
        assert_eq!(parse_mem_limit("1g"), Ok(MemLimit(Some(1 << 30))));
        assert!(parse_mem_limit("lots").is_err());
        assert_eq!(parse_sm_limit("50"), Ok(SmLimit(Some(50))));
        assert_eq!(parse_sm_limit("100"), Ok(SmLimit(None)));
        assert_eq!(parse_sm_limit("none"), Ok(SmLimit(None)));
        assert!(parse_sm_limit("101").is_err());
        assert_eq!(
            parse_dev_limit("GPU-x=2g"),
            Ok(("GPU-x".into(), MemLimit(Some(2 << 30))))
        );
        assert_eq!(parse_dev_sm("1=0"), Ok(("1".into(), SmLimit(None))));
        assert!(parse_dev_sm("1").is_err());
    }
}
