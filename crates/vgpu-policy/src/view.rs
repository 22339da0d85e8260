//! What memory queries report under a limit.
//!
//! All functions are pure integer arithmetic: no allocation, no panics.

/// What `cuMemGetInfo` shows: `total = min(limit, real_total)`,
/// `free = min(total - used (saturating), real_free)`. With no limit returns
/// `(real_free, real_total)` untouched. Returns `(free, total)`.
pub fn mem_info(limit: Option<u64>, used: u64, real_free: u64, real_total: u64) -> (u64, u64) {
    match limit {
        None => (real_free, real_total),
        Some(limit) => {
            let total = limit.min(real_total);
            (total.saturating_sub(used).min(real_free), total)
        }
    }
}

/// What `cuDeviceTotalMem` shows: `min(limit, physical_total)`.
pub fn total_mem(limit: Option<u64>, physical_total: u64) -> u64 {
    limit.map_or(physical_total, |l| l.min(physical_total))
}

/// NVML's view, `(total, used, free)`: with a limit, `total = min(limit, real_total)`,
/// `used` = vgpu's `used` capped at `total`, `free = total - used`. With no limit,
/// `(real_total, real_used, real_total - real_used)` (saturating).
pub fn nvml_memory(
    limit: Option<u64>,
    used: u64,
    real_total: u64,
    real_used: u64,
) -> (u64, u64, u64) {
    match limit {
        None => (real_total, real_used, real_total.saturating_sub(real_used)),
        Some(limit) => {
            let total = limit.min(real_total);
            let used = used.min(total);
            (total, used, total - used)
        }
    }
}

/// Bytes an array of this shape occupies at least:
/// `width * max(height, 1) * max(depth, 1) * channels * element_bytes`.
/// `None` on overflow, or for an unknown format (`channels` or `element_bytes` of 0).
pub fn array_bytes(
    width: u64,
    height: u64,
    depth: u64,
    channels: u32,
    element_bytes: u64,
) -> Option<u64> {
    if channels == 0 || element_bytes == 0 {
        return None;
    }
    width
        .checked_mul(height.max(1))?
        .checked_mul(depth.max(1))?
        .checked_mul(u64::from(channels))?
        .checked_mul(element_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn mem_info_cases() {
        // No limit: untouched.
        assert_eq!(
            mem_info(None, 5 * GIB, 70 * GIB, 80 * GIB),
            (70 * GIB, 80 * GIB)
        );
        // Limit below physical.
        assert_eq!(
            mem_info(Some(4 * GIB), GIB, 70 * GIB, 80 * GIB),
            (3 * GIB, 4 * GIB)
        );
        // Real free is the tighter bound.
        assert_eq!(
            mem_info(Some(4 * GIB), GIB, 2 * GIB, 80 * GIB),
            (2 * GIB, 4 * GIB)
        );
        // Over the limit: free saturates at 0.
        assert_eq!(
            mem_info(Some(4 * GIB), 5 * GIB, 70 * GIB, 80 * GIB),
            (0, 4 * GIB)
        );
        // Limit above physical: physical total.
        assert_eq!(
            mem_info(Some(100 * GIB), GIB, 70 * GIB, 80 * GIB),
            (70 * GIB, 80 * GIB)
        );
        assert_eq!(mem_info(Some(0), 0, 1, 1), (0, 0));
    }

    #[test]
    fn total_mem_cases() {
        assert_eq!(total_mem(None, 80 * GIB), 80 * GIB);
        assert_eq!(total_mem(Some(4 * GIB), 80 * GIB), 4 * GIB);
        assert_eq!(total_mem(Some(100 * GIB), 80 * GIB), 80 * GIB);
    }

    #[test]
    fn nvml_cases() {
        assert_eq!(
            nvml_memory(None, 0, 80 * GIB, 10 * GIB),
            (80 * GIB, 10 * GIB, 70 * GIB)
        );
        assert_eq!(nvml_memory(None, 0, GIB, 2 * GIB), (GIB, 2 * GIB, 0));
        assert_eq!(
            nvml_memory(Some(4 * GIB), GIB, 80 * GIB, 10 * GIB),
            (4 * GIB, GIB, 3 * GIB)
        );
        assert_eq!(
            nvml_memory(Some(4 * GIB), 9 * GIB, 80 * GIB, 10 * GIB),
            (4 * GIB, 4 * GIB, 0)
        );
        assert_eq!(
            nvml_memory(Some(100 * GIB), GIB, 80 * GIB, 10 * GIB),
            (80 * GIB, GIB, 79 * GIB)
        );
    }

    #[test]
    fn array_bytes_cases() {
        assert_eq!(array_bytes(1024, 0, 0, 1, 4), Some(4096));
        assert_eq!(array_bytes(1024, 768, 0, 4, 1), Some(1024 * 768 * 4));
        assert_eq!(array_bytes(64, 64, 64, 2, 2), Some(64 * 64 * 64 * 4));
        assert_eq!(array_bytes(0, 10, 10, 1, 1), Some(0));
        assert_eq!(array_bytes(10, 10, 10, 0, 1), None);
        assert_eq!(array_bytes(10, 10, 10, 1, 0), None);
        assert_eq!(array_bytes(u64::MAX, 2, 1, 1, 1), None);
        assert_eq!(array_bytes(1 << 32, 1 << 16, 1 << 16, 1, 1), None);
        assert_eq!(array_bytes(1 << 20, 1 << 20, 1 << 18, 4, 4), Some(1 << 62));
        assert_eq!(array_bytes(1 << 20, 1 << 20, 1 << 20, 4, 4), None);
    }
}
