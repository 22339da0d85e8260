//! The message printed when an allocation is refused.

use crate::ledger::{Denied, DenyReason};
use crate::size::format_size;

/// Formats the single stderr line printed at the first denial: why it was refused. Over the
/// limit (the usual case): what was asked, the limit,
/// what is in use, the device, and who holds what is in use: `own` is what this process holds
/// of the device (`None`: unknown, e.g. a budget of its own). With it the hint points at the
/// real cause: the container's shared budget, full with other processes' memory (how much they
/// hold is named), or this process alone. Control characters in `device` are escaped so the
/// message stays on one line. Has no trailing newline.
pub fn message(device: &str, d: &Denied, own: Option<u64>) -> String {
    let device = device.escape_debug();
    let requested = format!("{} ({} bytes)", format_size(d.requested), d.requested);
    match d.reason {
        DenyReason::OverLimit => {}
        DenyReason::NoProcessSlot => {
            return format!(
                "vgpu: allocation refused on {device}: requested {requested}, but this process \
                 has no place in the container's memory budget: every process slot of the \
                 container's region is taken (1,024 processes, HAMi's maximum, are attached); \
                 end some of the container's CUDA processes"
            );
        }
        DenyReason::Stalled => {
            return format!(
                "vgpu: allocation refused on {device}: requested {requested}, but another \
                 process's charge to the container's budget stayed unfinished past the wait's \
                 bound (a stopped process, or a corrupt region file), so the budget cannot be \
                 read exactly; the allocation is refused rather than run unlimited"
            );
        }
        DenyReason::CutOff => {
            return format!(
                "vgpu: allocation refused on {device}: requested {requested}, but this process \
                 is cut off from the container's memory budget (its region file was \
                 truncated, renamed or replaced); allocations on limited devices are refused"
            );
        }
    }
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
        "vgpu: out of memory on {device}: requested {requested} but {} of the {} limit is in use, {} available; {cause}",
        format_size(d.used),
        format_size(d.limit),
        format_size(available),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Denied = Denied::over_limit(3 << 29, 3 << 30, 4 << 30);

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
        let d = Denied::over_limit(1, 5 << 30, 4 << 30);
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

    #[test]
    fn a_refusal_that_is_not_the_limit_says_why_and_not_out_of_memory() {
        for (reason, says) in [
            (DenyReason::NoProcessSlot, "every process slot"),
            (DenyReason::Stalled, "stayed unfinished"),
            (DenyReason::CutOff, "cut off"),
        ] {
            let m = message("GPU 0", &D.because(reason), Some(1 << 30));
            assert!(m.contains(says), "{m}");
            assert!(m.contains("requested 1.50 GiB"), "{m}");
            assert!(!m.contains("out of memory"), "{m}");
            assert!(!m.contains("available"), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
    }
}
