//! The message printed when an allocation is refused.

use crate::ledger::Denied;
use crate::size::format_size;

/// Formats the single stderr line printed at the first denial: what was asked, the limit,
/// what is in use, the device, and who holds what is in use: `own` is what this process holds
/// of the device (`None`: unknown, e.g. a budget of its own). With it the hint points at the
/// real cause: the container's shared budget, full with other processes' memory (how much they
/// hold is named), or this process alone. Control characters in `device` are escaped so the
/// message stays on one line. Has no trailing newline.
pub fn message(device: &str, d: &Denied, own: Option<u64>) -> String {
    let available = d.limit.saturating_sub(d.used);
    let cause = match own.map(|own| (own.min(d.used), d.used.saturating_sub(own))) {
        None => "set a larger CUDA_DEVICE_MEMORY_LIMIT or free memory".to_owned(),
        Some((own, 0)) => format!(
            "this process alone holds it ({}): free memory in this process or set a larger \
             CUDA_DEVICE_MEMORY_LIMIT",
            format_size(own)
        ),
        Some((own, others)) if others >= own => format!(
            "the container's shared budget is what is full: other processes of the container \
             hold {} of it, this process {}; free memory in those processes or set a larger \
             CUDA_DEVICE_MEMORY_LIMIT (the limit is the container's, not each process's)",
            format_size(others),
            format_size(own)
        ),
        Some((own, others)) => format!(
            "this process holds {} of it, other processes of the container {}; free memory \
             or set a larger CUDA_DEVICE_MEMORY_LIMIT",
            format_size(own),
            format_size(others)
        ),
    };
    format!(
        "vgpu: out of memory on {}: requested {} ({} bytes) but {} of the {} limit is in use, {} available; {cause}",
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

    const D: Denied = Denied {
        requested: 3 << 29,
        used: 3 << 30,
        limit: 4 << 30,
    };

    #[test]
    fn names_everything_on_one_line() {
        let m = message("GPU 0 (NVIDIA H200)", &D, None);
        assert_eq!(
            m,
            "vgpu: out of memory on GPU 0 (NVIDIA H200): requested 1.50 GiB (1610612736 bytes) \
             but 3 GiB of the 4 GiB limit is in use, 1 GiB available; \
             set a larger CUDA_DEVICE_MEMORY_LIMIT or free memory"
        );
        let m = message("evil\ndevice", &D, Some(1 << 30));
        assert!(!m.contains('\n'));
    }

    #[test]
    fn over_limit_shows_nothing_available() {
        let d = Denied {
            requested: 1,
            used: 5 << 30,
            limit: 4 << 30,
        };
        assert!(message("GPU 1", &d, None).contains("0 B available"));
    }

    #[test]
    fn the_hint_names_who_holds_the_budget() {
        // This process holds all of it.
        let m = message("GPU 0", &D, Some(3 << 30));
        assert!(m.contains("this process alone holds it (3 GiB)"), "{m}");
        assert!(!m.contains("other processes"), "{m}");
        // Other processes of the container hold most of it: the shared budget is full.
        let m = message("GPU 0", &D, Some(1 << 30));
        assert!(
            m.contains("the container's shared budget is what is full: other processes of the container hold 2 GiB of it, this process 1 GiB"),
            "{m}"
        );
        // This process holds most, others some.
        let m = message("GPU 0", &D, Some(2 << 30));
        assert!(
            m.contains("this process holds 2 GiB of it, other processes of the container 1 GiB"),
            "{m}"
        );
        // A figure above the total (a racing release) is capped, never negative.
        let m = message("GPU 0", &D, Some(5 << 30));
        assert!(m.contains("this process alone holds it (3 GiB)"), "{m}");
    }
}
