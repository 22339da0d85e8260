//! Simulator configuration, read from the environment once.
//!
//! * `VGPU_SIM_DEVICES`: physical GPUs (default 2, at most [`MAX_DEVICES`]).
//! * `VGPU_SIM_MEM`: bytes per GPU, plain or with a binary `k`/`m`/`g`/`t` suffix (default 16g).
//! * `VGPU_SIM_CTX_RESERVE`: bytes a context takes on its device (default 317718528).
//! * `VGPU_SIM_STATE`: path of the shared counter file (see [`crate::shared`]).
//! * `VGPU_SIM_KERNEL_US`: µs per wave of a kernel whose name is not `spin_<N>us` (default 10).
//! * `VGPU_SIM_LAUNCH_NS`: host busy-spin per kernel launch, in ns (default 0).
//! * `VGPU_SIM_NO_DEVICE_MEMPOOL`: non-empty: `cuDeviceGetMemPool` fails (`CUDA_ERROR_NOT_SUPPORTED`),
//!   as on a driver that cannot report a device's pool; the pools themselves still work.
//! * `VGPU_SIM_LAUNCH_LATENCY_NS`: from a launch to the earliest start of its kernel on the GPU,
//!   in ns (default 0).
//! * `VGPU_SIM_SWITCH_NS`: GPU time of a context switch between processes sharing a simulated
//!   GPU (`VGPU_SIM_STATE`), in ns (default 0).
//! * `VGPU_SIM_EVENT_NS`: GPU time of recording a timing event (one created without
//!   `CU_EVENT_DISABLE_TIMING`), in ns, spent in its stream's order (default 0; 2-4 µs on an H200).
//! * `VGPU_SIM_RESTART_NS`: GPU time a kernel queued right behind a timing event of its stream
//!   loses before it starts (the event is written first), in ns (default 0; ~1.4 µs on an H200).
//! * `VGPU_SIM_TIMESLICE_US`: 0 or unset: one FIFO of kernels across all processes; > 0: the GPU
//!   time-slices between processes in slices of this many µs (see [`crate::slicer`]).
//! * `VGPU_SIM_CTX_CREATE_US`: µs a context creation takes after its memory is taken (default 0;
//!   a real driver takes 100+ ms, during which the memory is already in use).
//! * `VGPU_SIM_LAUNCH_SYNCS`: non-empty: every kernel launch first waits for all the context's
//!   work, as a driver does when a launch loads its module (CUDA's lazy loading).
//! * `VGPU_SIM_EVENT_FAILS_AFTER_MS`: recording a timing event fails (`CUDA_ERROR_OUT_OF_MEMORY`)
//!   once this many ms have passed since the process's simulator started, as a driver that
//!   refuses a tool's events from some point on (unset: never).
//! * `CUDA_VISIBLE_DEVICES`: which physical GPUs this process sees, in which order.

/// Most physical GPUs the simulator models.
pub const MAX_DEVICES: usize = 16;
/// Default physical GPU count.
pub const DEFAULT_DEVICES: usize = 2;
/// Default memory per GPU: 16 GiB.
pub const DEFAULT_MEM: u64 = 16 << 30;
/// Default per-context reservation: 303 MiB, deliberately not a round number of granules.
pub const DEFAULT_CTX_RESERVE: u64 = 317_718_528;
/// Default per-wave kernel duration in µs.
pub const DEFAULT_KERNEL_US: u64 = 10;
/// SMs of every simulated GPU (one block per SM per wave).
pub const SM_COUNT: u64 = 132;
/// Marketing name of every simulated GPU.
pub const DEVICE_NAME: &str = "NVIDIA H200 (simulated)";

/// The simulator's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Physical GPU count.
    pub devices: usize,
    /// Memory of each GPU in bytes.
    pub mem: u64,
    /// Bytes each context charges to its device.
    pub ctx_reserve: u64,
    /// Physical index of each CUDA ordinal, in ordinal order.
    pub visible: Vec<usize>,
    /// Shared state file, if any.
    pub state_path: Option<String>,
    /// Per-wave duration (µs) of kernels not named `spin_<N>us`.
    pub kernel_us: u64,
    /// Host nanoseconds each launch busy-spins.
    pub launch_ns: u64,
    /// `cuDeviceGetMemPool` fails (`VGPU_SIM_NO_DEVICE_MEMPOOL`).
    pub no_device_mempool: bool,
    /// Nanoseconds from a launch to the earliest start of its kernel.
    pub launch_latency_ns: u64,
    /// GPU nanoseconds of a switch between processes' contexts.
    pub switch_ns: u64,
    /// µs a context creation sleeps after taking its memory (`VGPU_SIM_CTX_CREATE_US`).
    pub ctx_create_us: u64,
    /// GPU nanoseconds of recording a timing event (`VGPU_SIM_EVENT_NS`).
    pub event_ns: u64,
    /// GPU nanoseconds a kernel queued behind a timing event loses (`VGPU_SIM_RESTART_NS`).
    pub restart_ns: u64,
    /// Timeslice between processes in µs; 0: FIFO (`VGPU_SIM_TIMESLICE_US`).
    pub timeslice_us: u64,
    /// Each launch first waits for the context's work (`VGPU_SIM_LAUNCH_SYNCS`).
    pub launch_syncs: bool,
    /// Timing events fail to record this many ms after the start
    /// (`VGPU_SIM_EVENT_FAILS_AFTER_MS`).
    pub event_fails_after_ms: Option<u64>,
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Config {
        Config::from_vars(|k| std::env::var(k).ok())
    }

    /// Builds the configuration from a variable lookup (for tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Config {
        let devices = get("VGPU_SIM_DEVICES")
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_DEVICES)
            .min(MAX_DEVICES);
        let mem = get("VGPU_SIM_MEM")
            .and_then(|s| parse_size(&s))
            .unwrap_or(DEFAULT_MEM);
        let ctx_reserve = get("VGPU_SIM_CTX_RESERVE")
            .and_then(|s| parse_size(&s))
            .unwrap_or(DEFAULT_CTX_RESERVE);
        let visible = match get("CUDA_VISIBLE_DEVICES") {
            Some(s) => parse_visible(&s, devices),
            None => (0..devices).collect(),
        };
        let state_path = get("VGPU_SIM_STATE").filter(|s| !s.is_empty());
        let num = |k: &str, d: u64| {
            get(k)
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(d)
        };
        Config {
            devices,
            mem,
            ctx_reserve,
            visible,
            state_path,
            kernel_us: num("VGPU_SIM_KERNEL_US", DEFAULT_KERNEL_US),
            launch_ns: num("VGPU_SIM_LAUNCH_NS", 0),
            no_device_mempool: get("VGPU_SIM_NO_DEVICE_MEMPOOL").is_some_and(|s| !s.is_empty()),
            launch_latency_ns: num("VGPU_SIM_LAUNCH_LATENCY_NS", 0),
            switch_ns: num("VGPU_SIM_SWITCH_NS", 0),
            ctx_create_us: num("VGPU_SIM_CTX_CREATE_US", 0),
            event_ns: num("VGPU_SIM_EVENT_NS", 0),
            restart_ns: num("VGPU_SIM_RESTART_NS", 0),
            timeslice_us: num("VGPU_SIM_TIMESLICE_US", 0),
            launch_syncs: get("VGPU_SIM_LAUNCH_SYNCS").is_some_and(|s| !s.is_empty()),
            event_fails_after_ms: get("VGPU_SIM_EVENT_FAILS_AFTER_MS")
                .and_then(|s| s.trim().parse::<u64>().ok()),
        }
    }
}

/// Parses `123`, `4k`, `16m`, `16g`, `1t` (binary multiples, case-insensitive, optional `b`/`ib`).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let s = s
        .strip_suffix("ib")
        .or_else(|| s.strip_suffix('b'))
        .unwrap_or(&s);
    let (num, shift) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 10),
        'm' => (&s[..s.len() - 1], 20),
        'g' => (&s[..s.len() - 1], 30),
        't' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = num.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The 16 UUID bytes of physical GPU `p`.
pub fn uuid_bytes(p: usize) -> [u8; 16] {
    [
        0x5a,
        0x1e,
        0,
        0,
        0,
        0,
        0x40,
        0,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        (p & 0xff) as u8,
    ]
}

/// The NVML spelling of physical GPU `p`'s UUID: `GPU-5a1e0000-0000-4000-8000-0000000000NN`.
pub fn uuid_string(p: usize) -> String {
    let b = uuid_bytes(p);
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

/// Interprets `CUDA_VISIBLE_DEVICES` like the driver: a comma list of physical indices or
/// (prefixes of) UUIDs; the first invalid, ambiguous or repeated entry ends the list.
pub fn parse_visible(s: &str, devices: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for entry in s.split(',') {
        let entry = entry.trim();
        let found = if entry.starts_with("GPU-") {
            let matches: Vec<usize> = (0..devices)
                .filter(|&p| uuid_string(p).starts_with(entry))
                .collect();
            if matches.len() == 1 {
                Some(matches[0])
            } else {
                None
            }
        } else {
            entry.parse::<usize>().ok().filter(|&i| i < devices)
        };
        match found {
            Some(p) if !out.contains(&p) => out.push(p),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("16g"), Some(16 << 30));
        assert_eq!(parse_size("2MiB"), Some(2 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn uuids() {
        assert_eq!(uuid_string(0), "GPU-5a1e0000-0000-4000-8000-000000000000");
        assert_eq!(uuid_string(10), "GPU-5a1e0000-0000-4000-8000-00000000000a");
    }

    #[test]
    fn visible() {
        assert_eq!(parse_visible("1,0", 2), vec![1, 0]);
        assert_eq!(parse_visible("1,5,0", 2), vec![1]);
        assert_eq!(parse_visible("", 2), Vec::<usize>::new());
        assert_eq!(parse_visible("0,0,1", 2), vec![0]);
        assert_eq!(
            parse_visible("GPU-5a1e0000-0000-4000-8000-000000000001,0", 2),
            vec![1, 0]
        );
        // A prefix that matches several GPUs is ambiguous.
        assert_eq!(parse_visible("GPU-5a1e", 2), Vec::<usize>::new());
        assert_eq!(parse_visible("GPU-5a1e", 1), vec![0]);
    }

    #[test]
    fn from_vars() {
        let c = Config::from_vars(|k| match k {
            "VGPU_SIM_DEVICES" => Some("40".into()),
            "VGPU_SIM_MEM" => Some("1g".into()),
            _ => None,
        });
        assert_eq!(c.devices, MAX_DEVICES);
        assert_eq!(c.mem, 1 << 30);
        assert_eq!(c.ctx_reserve, DEFAULT_CTX_RESERVE);
        assert_eq!(c.visible.len(), MAX_DEVICES);
        assert_eq!((c.kernel_us, c.launch_ns), (DEFAULT_KERNEL_US, 0));
        assert_eq!((c.launch_latency_ns, c.switch_ns, c.event_ns), (0, 0, 0));
        assert_eq!(c.timeslice_us, 0);
        let c = Config::from_vars(|k| match k {
            "VGPU_SIM_KERNEL_US" => Some("7".into()),
            "VGPU_SIM_LAUNCH_NS" => Some("500".into()),
            "VGPU_SIM_LAUNCH_LATENCY_NS" => Some("4000".into()),
            "VGPU_SIM_SWITCH_NS" => Some(" 150000 ".into()),
            "VGPU_SIM_EVENT_NS" => Some("3000".into()),
            "VGPU_SIM_TIMESLICE_US" => Some("2000".into()),
            _ => None,
        });
        assert_eq!(c.timeslice_us, 2000);
        assert_eq!((c.kernel_us, c.launch_ns), (7, 500));
        assert_eq!((c.launch_latency_ns, c.switch_ns), (4000, 150_000));
        assert_eq!(c.event_ns, 3000);
    }
}
