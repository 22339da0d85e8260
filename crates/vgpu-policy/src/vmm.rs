//! When the memory of a VMM handle (`cuMemCreate`) is really freed.
//!
//! The driver counts references to a handle: `cuMemCreate` gives one, each
//! `cuMemRetainAllocationHandle` one more, each `cuMemMap` one for its mapping; `cuMemRelease`
//! takes one back, and so does `cuMemUnmap` for the mappings it removes (a `cuMemAddressFree`
//! over mappings is not taken as an unmapping: the driver documents no such thing, so their
//! charge stays rather than escape the limit). A handle exported
//! (`cuMemExportToShareableHandle`) may be imported and mapped where this process cannot see
//! it (another process, or a new handle value here): its charge stays until the process ends.
//! The physical memory goes when none is left. So a handle released while still mapped (NVIDIA's
//! VMM samples release right after mapping, and an exporter releases while an importer maps)
//! keeps its memory until the last unmapping, and its charge must stay until then.
//!
//! [`Handles`] follows that count for the handles vgpu charged; the preload feeds it each
//! successful call and releases a charge when it says the memory is gone. Plain data, no locks:
//! the preload keeps it behind a mutex (VMM calls are not a hot path).

use std::collections::{BTreeMap, HashMap};

/// The references the driver holds to one handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Refs {
    /// From `cuMemCreate` and `cuMemRetainAllocationHandle`, less `cuMemRelease`.
    handle: u32,
    /// Mappings of it.
    maps: u32,
    /// Whether it was exported (then its memory is never taken as gone).
    exported: bool,
}

/// The charged VMM handles and their mappings.
#[derive(Debug, Default)]
pub struct Handles {
    refs: HashMap<u64, Refs>,
    /// Mapping start → (end, handle).
    maps: BTreeMap<u64, (u64, u64)>,
}

impl Handles {
    /// No handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// `cuMemCreate` returned `h` (a value the driver may have used before: it starts afresh).
    pub fn created(&mut self, h: u64) {
        self.refs.insert(
            h,
            Refs {
                handle: 1,
                maps: 0,
                exported: false,
            },
        );
    }

    /// `cuMemRetainAllocationHandle` returned `h`.
    pub fn retained(&mut self, h: u64) {
        if let Some(r) = self.refs.get_mut(&h) {
            r.handle = r.handle.saturating_add(1);
        }
    }

    /// `cuMemExportToShareableHandle(.., h, ..)` succeeded: an importer may map the memory
    /// where this process cannot see it, so it is never taken as gone.
    pub fn exported(&mut self, h: u64) {
        if let Some(r) = self.refs.get_mut(&h) {
            r.exported = true;
        }
    }

    /// `cuMemRelease(h)` succeeded: whether `h`'s memory is freed now (true for a handle this
    /// does not know, whose record the caller releases as before).
    pub fn released(&mut self, h: u64) -> bool {
        let Some(r) = self.refs.get_mut(&h) else {
            return true;
        };
        r.handle = r.handle.saturating_sub(1);
        self.gone(h)
    }

    /// `cuMemMap(ptr, size, _, h)` succeeded.
    pub fn mapped(&mut self, ptr: u64, size: u64, h: u64) {
        let Some(r) = self.refs.get_mut(&h) else {
            return;
        };
        r.maps = r.maps.saturating_add(1);
        if let Some((_, old)) = self.maps.insert(ptr, (ptr.saturating_add(size), h)) {
            // The driver refuses to map over a mapping; should it have, the old one is gone.
            self.unref_map(old);
        }
    }

    /// `cuMemUnmap(ptr, size)` succeeded: the mappings that start in `[ptr, ptr + size)` are
    /// gone. Returns the handles whose memory is freed now.
    pub fn unmapped(&mut self, ptr: u64, size: u64) -> Vec<u64> {
        let end = ptr.saturating_add(size);
        let starts: Vec<u64> = self.maps.range(ptr..end).map(|(&s, _)| s).collect();
        let mut freed = Vec::new();
        for s in starts {
            if let Some((_, h)) = self.maps.remove(&s)
                && self.unref_map(h)
            {
                freed.push(h);
            }
        }
        freed
    }

    /// Drops one mapping reference of `h`; whether its memory is freed now.
    fn unref_map(&mut self, h: u64) -> bool {
        if let Some(r) = self.refs.get_mut(&h) {
            r.maps = r.maps.saturating_sub(1);
        }
        self.gone(h)
    }

    /// Whether `h` has no reference left (then it is forgotten).
    fn gone(&mut self, h: u64) -> bool {
        match self.refs.get(&h) {
            Some(r) if r.handle == 0 && r.maps == 0 && !r.exported => {
                self.refs.remove(&h);
                true
            }
            _ => false,
        }
    }

    /// Handles known (live or released but mapped).
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// Whether no handle is known.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB2: u64 = 2 << 20;

    #[test]
    fn a_handle_released_before_it_is_unmapped_is_freed_at_the_unmapping() {
        let mut v = Handles::new();
        v.created(7);
        v.mapped(0x1000_0000, MB2, 7);
        assert!(!v.released(7), "still mapped");
        assert_eq!(v.unmapped(0x1000_0000, MB2), vec![7]);
        assert!(v.is_empty());
    }

    #[test]
    fn a_handle_unmapped_then_released_is_freed_at_the_release() {
        let mut v = Handles::new();
        v.created(7);
        v.mapped(0x1000_0000, MB2, 7);
        assert_eq!(v.unmapped(0x1000_0000, MB2), Vec::<u64>::new());
        assert!(v.released(7));
        assert!(v.is_empty());
    }

    #[test]
    fn each_mapping_and_retain_holds_the_memory() {
        // NCCL's free: retain the handle from the pointer, release twice, unmap.
        let mut v = Handles::new();
        v.created(9);
        v.mapped(0x2000_0000, MB2, 9);
        v.mapped(0x3000_0000, MB2, 9);
        v.retained(9);
        assert!(!v.released(9));
        assert!(!v.released(9));
        assert_eq!(v.unmapped(0x2000_0000, MB2), Vec::<u64>::new());
        // Unmapping a range frees every mapping that starts in it.
        assert_eq!(v.unmapped(0x2000_0000, 0x2000_0000), vec![9]);
    }

    #[test]
    fn an_exported_handle_stays_charged() {
        // Exported, imported elsewhere (or under a new value here) and mapped there: this
        // process cannot see that mapping, so the memory is never taken as gone.
        let mut v = Handles::new();
        v.created(4);
        v.exported(4);
        v.mapped(0, MB2, 4);
        assert!(v.unmapped(0, MB2).is_empty());
        assert!(!v.released(4));
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn a_handle_it_does_not_know_is_released_as_before() {
        let mut v = Handles::new();
        assert!(v.released(3));
        v.mapped(0, MB2, 3);
        assert!(v.unmapped(0, MB2).is_empty());
    }

    #[test]
    fn a_reused_handle_value_starts_afresh() {
        let mut v = Handles::new();
        v.created(5);
        v.retained(5);
        v.created(5);
        assert!(v.released(5));
        assert!(v.is_empty());
    }
}
