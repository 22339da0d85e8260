//! The refusal log ([`layout::RefusalLog`]): the last refused charges of the container, written
//! lock-free by each refusing process and read by `vgpu status/top/metrics`.
//!
//! A refusal is rare and never on a granted charge's path, so the writer may scan the process
//! slots (to name who holds the most of the device) and read the clock. Readers trust nothing
//! they find: an entry counts only if its check word matches its fields (a torn write, two
//! writers lapping the ring onto one entry, or a neighbour's scribbles do not), its device is
//! one of the region's, and its PID is not 0; indices are bounded by the ring's size, never by
//! a value read from the file.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use super::Region;
use crate::layout::{self, REFUSALS, Refusal};
use crate::sys;

/// One refused charge, as the log recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalStatus {
    /// Its number in the container's log (1 for the first refusal ever recorded).
    pub seq: u64,
    /// Region device index.
    pub device: usize,
    /// When, Unix milliseconds.
    pub time_ms: u64,
    /// The refused process's PID (in its own namespace).
    pub pid: u32,
    /// Bytes it asked for.
    pub requested: u64,
    /// The device total in use at the refusal.
    pub used: u64,
    /// The limit in force.
    pub limit: u64,
    /// What the refused process held of the device.
    pub own: u64,
    /// The live process holding the most of the device, if any: its PID.
    pub holder_pid: Option<u32>,
    /// What that process held.
    pub holder_used: u64,
}

impl RefusalStatus {
    fn fields(&self) -> [u64; 8] {
        [
            self.time_ms,
            u64::from(self.pid) | (self.device as u64) << 32,
            self.requested,
            self.used,
            self.limit,
            self.own,
            self.holder_pid.map_or(0, u64::from),
            self.holder_used,
        ]
    }
}

/// An entry's fields in [`RefusalStatus::fields`]' order (what the check word covers).
fn words(e: &Refusal) -> [&AtomicU64; 8] {
    [
        &e.time_ms,
        &e.who,
        &e.requested,
        &e.used,
        &e.limit,
        &e.own,
        &e.holder_pid,
        &e.holder_used,
    ]
}

fn store(e: &Refusal, seq: u64, f: &[u64; 8]) {
    // Invalidate first: a reader that sees the fields change under it fails its check or sees
    // `seq` move.
    e.seq.store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    for (w, &v) in words(e).iter().zip(f) {
        w.store(v, Ordering::Relaxed);
    }
    e.check
        .store(layout::refusal_check(seq, f), Ordering::Relaxed);
    e.seq.store(seq, Ordering::Release);
}

/// Entry `e` if it is whole and names a device below `devices`.
fn load(e: &Refusal, devices: usize) -> Option<RefusalStatus> {
    let seq = e.seq.load(Ordering::Acquire);
    if seq == 0 {
        return None;
    }
    let f = words(e).map(|w| w.load(Ordering::Acquire));
    let check = e.check.load(Ordering::Acquire);
    if e.seq.load(Ordering::Acquire) != seq || layout::refusal_check(seq, &f) != check {
        return None;
    }
    let pid = u32::try_from(f[1] & u64::from(u32::MAX)).unwrap_or(0);
    let device = usize::try_from((f[1] >> 32) & 0xff).unwrap_or(usize::MAX);
    let holder_pid = u32::try_from(f[6]).ok().filter(|&p| p != 0);
    if pid == 0 || device >= devices || f[6] > u64::from(u32::MAX) || f[1] >> 40 != 0 {
        return None;
    }
    Some(RefusalStatus {
        seq,
        device,
        time_ms: f[0],
        pid,
        requested: f[2],
        used: f[3],
        limit: f[4],
        own: f[5],
        holder_pid,
        holder_used: f[7],
    })
}

impl Region {
    /// Records that this process (slot `me`, if it holds one) was refused `requested` bytes on
    /// region device `dev`, the device's total being `used` of `limit`: one `fetch_add` on the
    /// log's head, a scan of the process slots for the one holding the most of the device, a
    /// clock read and the entry's stores. Never called for a granted charge.
    pub(crate) fn note_refusal(
        &self,
        me: Option<usize>,
        dev: usize,
        requested: u64,
        used: u64,
        limit: u64,
    ) {
        if self.read_only || dev >= layout::MAX_DEVICES {
            return;
        }
        let l = self.layout();
        let hw = (l.header.high_water.load(Ordering::Acquire) as usize).min(layout::MAX_PROCS);
        let (mut holder_pid, mut holder_used) = (None, 0);
        for p in &l.procs[..hw] {
            if layout::state_of(p.state.load(Ordering::Acquire)) != layout::LIVE {
                continue;
            }
            let u = p.used[dev].load(Ordering::Relaxed);
            if u > holder_used {
                holder_used = u;
                holder_pid = Some(p.pid.load(Ordering::Relaxed)).filter(|&p| p != 0);
            }
        }
        let (pid, own) = match me.and_then(|i| l.procs.get(i)) {
            Some(p) => (
                p.pid.load(Ordering::Relaxed),
                p.used[dev].load(Ordering::Relaxed),
            ),
            None => (std::process::id(), 0),
        };
        let r = RefusalStatus {
            seq: 0,
            device: dev,
            time_ms: sys::realtime_ms(),
            pid,
            requested,
            used,
            limit,
            own,
            holder_pid,
            holder_used,
        };
        let log = &l.refusals;
        let ticket = log.head.fetch_add(1, Ordering::AcqRel);
        // `% REFUSALS` bounds the index whatever a neighbour wrote into `head`.
        let slot = usize::try_from(ticket % REFUSALS as u64).unwrap_or(0);
        store(
            &log.entries[slot],
            ticket.wrapping_add(1).max(1),
            &r.fields(),
        );
    }

    /// The refusals in the log, newest first (at most [`REFUSALS`]). Atomics only.
    pub fn refusals(&self) -> Vec<RefusalStatus> {
        let n = self.device_count();
        let mut out: Vec<RefusalStatus> = self
            .layout()
            .refusals
            .entries
            .iter()
            .filter_map(|e| load(e, n))
            .collect();
        out.sort_by_key(|r| std::cmp::Reverse(r.seq));
        out
    }

    /// Refusals ever recorded in the log (the head's value; older ones are overwritten).
    pub fn refusals_recorded(&self) -> u64 {
        self.layout().refusals.head.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::RefusalLog;

    fn log() -> Box<RefusalLog> {
        // All zeroes: an empty log.
        Box::new(RefusalLog {
            head: Default::default(),
            reserved: Default::default(),
            entries: std::array::from_fn(|_| Refusal {
                seq: Default::default(),
                time_ms: Default::default(),
                who: Default::default(),
                requested: Default::default(),
                used: Default::default(),
                limit: Default::default(),
                own: Default::default(),
                holder_pid: Default::default(),
                holder_used: Default::default(),
                check: Default::default(),
            }),
        })
    }

    fn sample(device: usize) -> RefusalStatus {
        RefusalStatus {
            seq: 7,
            device,
            time_ms: 1_700_000_000_123,
            pid: 4242,
            requested: 600 << 20,
            used: 1700 << 20,
            limit: 2 << 30,
            own: 303 << 20,
            holder_pid: Some(77),
            holder_used: 1400 << 20,
        }
    }

    #[test]
    fn an_entry_round_trips_and_any_changed_word_voids_it() {
        let l = log();
        let e = &l.entries[3];
        assert_eq!(load(e, 2), None, "an empty entry is no refusal");
        let r = sample(1);
        store(e, 7, &r.fields());
        assert_eq!(load(e, 2), Some(r.clone()));
        // A device the region does not have: left out.
        assert_eq!(load(e, 1), None);
        // A neighbour's scribble in any word (or a torn write) fails the check.
        for w in [&e.time_ms, &e.who, &e.requested, &e.holder_used, &e.check] {
            let v = w.load(Ordering::Relaxed);
            w.store(v ^ 1, Ordering::Relaxed);
            assert_eq!(load(e, 2), None);
            w.store(v, Ordering::Relaxed);
        }
        e.seq.store(8, Ordering::Relaxed);
        assert_eq!(load(e, 2), None);
    }

    #[test]
    fn a_forged_entry_with_a_valid_check_is_still_bounded() {
        let l = log();
        let e = &l.entries[0];
        // A device index past the region's, a PID of 0, bits above the device byte: refused.
        for who in [4242 | 200 << 32, 0, 4242 | 1 << 40] {
            let mut f = sample(0).fields();
            f[1] = who;
            store(e, 1, &f);
            assert_eq!(load(e, 16), None, "{who:#x}");
        }
    }
}
