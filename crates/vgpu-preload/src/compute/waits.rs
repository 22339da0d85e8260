//! The program's synchronisations, for the limiter (`vgpu_policy::limiter::Look::waited`): how
//! long each outermost one waited, and the launches admitted when it began. A synchronisation
//! waits for work admitted before it: where it waited longer than that work was charged, the
//! work cost more, a measure that needs no mark and no look on time (a controller starved of
//! CPU reads its marks late, and the synchronisation's own thread took these times).
//!
//! Written by the synchronisation hooks (not the launch path): two clock reads a
//! synchronisation, and a log claimed by a flag that neither side waits for (a record that
//! finds it claimed is dropped: the limiter then charges nothing from it; the controller takes
//! the log at its next look instead; a forked child's flag starts free). A record that finds
//! the log full is added to its last one (their waits summed: the sum still waited for the
//! launches up to the later one).
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use vgpu_policy::limiter::Waited;
use vgpu_region::sys::monotonic_ns as now_ns;

/// Records kept between two looks.
const LOG: usize = 16;

struct Record {
    after: AtomicU64,
    from: AtomicU64,
    ns: AtomicU64,
}

/// One gate's synchronisations.
pub struct Waits {
    /// When the outermost synchronisation in progress began (ns), and the launches admitted
    /// then (raised by any begun inside it).
    from: AtomicU64,
    after: AtomicU64,
    /// The log is claimed (by a hook that records, or the controller that takes it).
    claimed: AtomicBool,
    len: AtomicUsize,
    log: [Record; LOG],
}

impl Waits {
    pub const fn new() -> Self {
        Waits {
            from: AtomicU64::new(0),
            after: AtomicU64::new(0),
            claimed: AtomicBool::new(false),
            len: AtomicUsize::new(0),
            log: [const {
                Record {
                    after: AtomicU64::new(0),
                    from: AtomicU64::new(0),
                    ns: AtomicU64::new(0),
                }
            }; LOG],
        }
    }

    fn claim(&self) -> bool {
        self.claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    fn release(&self) {
        self.claimed.store(false, Ordering::Release);
    }

    /// A synchronisation began with `launches` admitted; `outermost`: no other thread of the
    /// process was inside one.
    #[inline]
    pub fn begin(&self, outermost: bool, launches: u64) {
        if outermost {
            self.after.store(launches, Ordering::Relaxed);
            self.from.store(now_ns(), Ordering::Release);
        } else {
            // The outermost one's record ends when the last returns: it may have waited for
            // these too.
            self.after.fetch_max(launches, Ordering::Relaxed);
        }
    }

    /// A synchronisation returned (`ok`: successfully); `outermost`: no other thread of the
    /// process is inside one now. (A thread that began one meanwhile may have moved the
    /// beginning later, and the launch count up: the wait is then counted shorter, over more
    /// launches, never the other way.)
    #[inline]
    pub fn end(&self, outermost: bool, ok: bool) {
        if !(outermost && ok) {
            return;
        }
        let from = self.from.load(Ordering::Acquire);
        let (after, ns) = (
            self.after.load(Ordering::Relaxed),
            now_ns().saturating_sub(from),
        );
        if !self.claim() {
            return;
        }
        let len = self.len.load(Ordering::Relaxed);
        if len < LOG {
            let r = &self.log[len];
            r.after.store(after, Ordering::Relaxed);
            r.from.store(from, Ordering::Relaxed);
            r.ns.store(ns, Ordering::Relaxed);
            self.len.store(len + 1, Ordering::Relaxed);
        } else {
            let r = &self.log[LOG - 1];
            r.after.fetch_max(after, Ordering::Relaxed);
            r.ns.fetch_add(ns, Ordering::Relaxed);
        }
        self.release();
    }

    /// The records since the last take, oldest first, into `out` (cleared first; left empty
    /// where the log is claimed: they wait for the next look).
    pub fn take(&self, out: &mut Vec<Waited>) {
        out.clear();
        if !self.claim() {
            return;
        }
        let len = self.len.load(Ordering::Relaxed).min(LOG);
        out.extend(self.log[..len].iter().map(|r| Waited {
            after: r.after.load(Ordering::Relaxed),
            from: r.from.load(Ordering::Relaxed),
            ns: r.ns.load(Ordering::Relaxed),
        }));
        self.len.store(0, Ordering::Relaxed);
        self.release();
    }

    /// In a forked child: the parent's records are not its own, and no thread of its holds the
    /// log.
    pub fn after_fork(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outermost_synchronisation_is_recorded_with_the_launches_before_it() {
        let w = Waits::new();
        w.begin(true, 5);
        w.begin(false, 9);
        w.end(false, true);
        w.end(true, true);
        w.begin(true, 12);
        w.end(true, false);
        let mut out = Vec::new();
        w.take(&mut out);
        assert_eq!(
            out.len(),
            1,
            "a failed one and an inner one are not records"
        );
        assert_eq!(out[0].after, 9, "the launches the inner one began after");
        w.take(&mut out);
        assert!(out.is_empty(), "taken once");
    }

    #[test]
    fn a_full_log_sums_the_last_record() {
        let w = Waits::new();
        for n in 0..LOG as u64 + 3 {
            w.begin(true, n);
            w.end(true, true);
        }
        let mut out = Vec::new();
        w.take(&mut out);
        assert_eq!(out.len(), LOG);
        assert_eq!(out[LOG - 1].after, LOG as u64 + 2, "the latest launches");
        assert_eq!(out[LOG - 2].after, LOG as u64 - 2);
    }

    #[test]
    fn a_claimed_log_drops_a_record_and_a_forked_child_finds_it_free() {
        let w = Waits::new();
        assert!(w.claim());
        w.begin(true, 1);
        w.end(true, true);
        let mut out = Vec::new();
        w.take(&mut out);
        assert!(out.is_empty(), "neither side waits for the claim");
        w.after_fork();
        w.begin(true, 2);
        w.end(true, true);
        w.take(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].after, 2);
    }
}
