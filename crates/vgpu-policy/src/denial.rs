//! The message printed when an allocation is refused.

use crate::ledger::Denied;
use crate::size::format_size;

/// Formats the single stderr line printed at the first denial: what was asked, the limit,
/// what is in use, and the device. Control characters in `device` are escaped so the message
/// stays on one line. Has no trailing newline.
pub fn message(device: &str, d: &Denied) -> String {
    let available = d.limit.saturating_sub(d.used);
    format!(
        "vgpu: out of memory on {}: requested {} ({} bytes) but {} of the {} limit is in use, {} available; \
         set a larger CUDA_DEVICE_MEMORY_LIMIT or free memory",
        device.escape_debug(),
        format_size(d.requested),
        d.requested,
        format_size(d.used),
        format_size(d.limit),
        format_size(available),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_everything_on_one_line() {
        let d = Denied {
            requested: 3 << 29,
            used: 3 << 30,
            limit: 4 << 30,
        };
        let m = message("GPU 0 (NVIDIA H200)", &d);
        assert_eq!(
            m,
            "vgpu: out of memory on GPU 0 (NVIDIA H200): requested 1.50 GiB (1610612736 bytes) \
             but 3 GiB of the 4 GiB limit is in use, 1 GiB available; \
             set a larger CUDA_DEVICE_MEMORY_LIMIT or free memory"
        );
        let m = message("evil\ndevice", &d);
        assert!(!m.contains('\n'));
    }

    #[test]
    fn over_limit_shows_nothing_available() {
        let d = Denied {
            requested: 1,
            used: 5 << 30,
            limit: 4 << 30,
        };
        assert!(message("GPU 1", &d).contains("0 B available"));
    }
}
