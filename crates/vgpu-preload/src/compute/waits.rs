//! The program's synchronisations, for the limiter (`vgpu_policy::limiter::Look::waited`): how
//! long each outermost one waited, and the launches admitted when it began. A synchronisation
//! waits for work admitted before it: where it waited longer than that work was charged, the
//! work cost more, a measure that needs no mark and no look on time (a controller starved of
//! CPU reads its marks late, and the synchronisation's own thread took these times).
//!
//! Written by the synchronisation hooks (not the launch path): two clock reads a
//! synchronisation, and a lock taken only with `try_lock` on either side, held for a copy. A
//! record that finds the lock taken is dropped (the limiter then charges nothing from it); one
//! that finds the log full is added to its last record (their waits summed: the sum still
//! waited for the launches up to the later one).
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vgpu_policy::limiter::Waited;
use vgpu_region::sys::monotonic_ns as now_ns;

/// Records kept between two looks.
const LOG: usize = 16;

struct Log {
    waits: [Waited; LOG],
    len: usize,
}

/// One gate's synchronisations.
pub struct Waits {
    /// When the outermost synchronisation in progress began (ns), and the launches admitted
    /// then.
    from: AtomicU64,
    after: AtomicU64,
    log: Mutex<Log>,
}

impl Waits {
    pub const fn new() -> Self {
        Waits {
            from: AtomicU64::new(0),
            after: AtomicU64::new(0),
            log: Mutex::new(Log {
                waits: [Waited {
                    after: 0,
                    from: 0,
                    ns: 0,
                }; LOG],
                len: 0,
            }),
        }
    }

    /// A synchronisation began with `launches` admitted; `outermost`: no other thread of the
    /// process was inside one.
    #[inline]
    pub fn begin(&self, outermost: bool, launches: u64) {
        if outermost {
            self.after.store(launches, Ordering::Relaxed);
            self.from.store(now_ns(), Ordering::Release);
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
        let w = Waited {
            after: self.after.load(Ordering::Relaxed),
            from,
            ns: now_ns().saturating_sub(from),
        };
        let Ok(mut log) = self.log.try_lock() else {
            return;
        };
        if log.len < LOG {
            let i = log.len;
            log.waits[i] = w;
            log.len += 1;
        } else {
            let last = &mut log.waits[LOG - 1];
            last.after = last.after.max(w.after);
            last.ns = last.ns.saturating_add(w.ns);
        }
    }

    /// The records since the last take, oldest first, into `out` (cleared first; left empty
    /// where the lock is taken: they wait for the next look).
    pub fn take(&self, out: &mut Vec<Waited>) {
        out.clear();
        if let Ok(mut log) = self.log.try_lock() {
            let n = log.len;
            out.extend_from_slice(&log.waits[..n]);
            log.len = 0;
        }
    }

    /// In a forked child: the parent's records are not its own.
    pub fn after_fork(&self) {
        if let Ok(mut log) = self.log.try_lock() {
            log.len = 0;
        }
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
        assert_eq!(out[0].after, 5);
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
    }

    #[test]
    fn a_taken_lock_drops_a_record_and_never_waits() {
        let w = Waits::new();
        let guard = w.log.try_lock().unwrap();
        w.begin(true, 1);
        w.end(true, true);
        drop(guard);
        let mut out = Vec::new();
        w.take(&mut out);
        assert!(out.is_empty());
    }
}
