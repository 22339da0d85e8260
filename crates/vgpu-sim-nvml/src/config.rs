//! Configuration shared (by value, not by code) with the simulated driver.
use std::sync::OnceLock;

/// Most physical GPUs the simulator models.
pub const MAX_DEVICES: usize = 16;
/// Name of every simulated GPU.
pub const DEVICE_NAME: &str = "NVIDIA H200 (simulated)";
/// Driver version string.
pub const DRIVER_VERSION: &str = "580.00.00-sim";

/// Physical GPU count and memory per GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub devices: usize,
    pub mem: u64,
}

impl Config {
    /// Builds the configuration from a variable lookup.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Config {
        Config {
            devices: get("VGPU_SIM_DEVICES")
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(2)
                .min(MAX_DEVICES),
            mem: get("VGPU_SIM_MEM")
                .and_then(|s| parse_size(&s))
                .unwrap_or(16 << 30),
        }
    }
}

/// The configuration, read from the environment once.
pub fn config() -> Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    *CONFIG.get_or_init(|| Config::from_vars(|k| std::env::var(k).ok()))
}

/// Parses `123`, `4k`, `16m`, `16g`, `1t` (binary multiples, optional `b`/`ib`).
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

/// UUID string of physical GPU `p`.
pub fn uuid_string(p: usize) -> String {
    format!("GPU-5a1e0000-0000-4000-8000-0000000000{:02x}", p & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        assert_eq!(parse_size("16g"), Some(16 << 30));
        assert_eq!(uuid_string(1), "GPU-5a1e0000-0000-4000-8000-000000000001");
        let c = Config::from_vars(|k| (k == "VGPU_SIM_DEVICES").then(|| "3".into()));
        assert_eq!(
            c,
            Config {
                devices: 3,
                mem: 16 << 30
            }
        );
    }
}
