//! Which allocation was charged to which device, and for how much.
//!
//! [`Registry`] maps a `u64` key (device pointer, VMM handle, array handle...) to a [`Record`].
//! It is split into [`SHARDS`] shards, each a `Mutex<HashMap>` pre-sized so that inserts rarely
//! allocate; an operation locks one shard at a time and nothing else. A poisoned shard is
//! recovered (its map is always in a consistent state between operations).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::ledger::DeviceIndex;

/// What kind of allocation a record is (the preload decides how to release it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocKind {
    /// `cuMemAlloc` / `cudaMalloc`.
    Plain,
    /// `cuMemAllocPitch` / `cudaMallocPitch`.
    Pitch,
    /// `cuMemAllocManaged` / `cudaMallocManaged`.
    Managed,
    /// Stream-ordered `cuMemAllocAsync` / pool allocations.
    Async,
    /// Virtual memory management (`cuMemCreate`) handle.
    Vmm,
    /// CUDA array.
    Array,
    /// Mipmapped CUDA array.
    MipmappedArray,
    /// Memory owned by a graph (memory nodes).
    Graph,
}

/// One tracked allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The device it was charged to (ledger index).
    pub device: DeviceIndex,
    /// Bytes charged.
    pub bytes: u64,
    /// Kind of allocation.
    pub kind: AllocKind,
    /// The context it was allocated in, when that is not the device's primary context (0: the
    /// primary, or any context while the process had created none on the device).
    pub ctx: u64,
}

/// Number of shards (a power of two).
pub const SHARDS: usize = 64;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();
/// Default entries reserved per shard by [`Registry::new`].
pub const DEFAULT_CAPACITY_PER_SHARD: usize = 64;

/// 2^64 / golden ratio: multiplicative (Fibonacci) hashing constant.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Cheap hasher for `u64` keys (murmur3's 64-bit finalizer), so that aligned pointers with many
/// zero low bits still spread over all buckets.
#[derive(Clone, Copy, Debug, Default)]
pub struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(GOLDEN);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(GOLDEN) ^ n;
    }
}

type Shard = HashMap<u64, Record, BuildHasherDefault<U64Hasher>>;

/// Concurrent map from a `u64` key to its [`Record`]. See the [module docs](self).
#[derive(Debug)]
pub struct Registry {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry with room for [`DEFAULT_CAPACITY_PER_SHARD`] records per shard.
    pub fn new() -> Self {
        Self::with_capacity_per_shard(DEFAULT_CAPACITY_PER_SHARD)
    }

    /// An empty registry with room for `per_shard` records in each of the [`SHARDS`] shards.
    pub fn with_capacity_per_shard(per_shard: usize) -> Self {
        Registry {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard::with_capacity_and_hasher(
                        per_shard,
                        Default::default(),
                    ))
                })
                .collect(),
        }
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard> {
        let index = (key.wrapping_mul(GOLDEN) >> (64 - SHARD_BITS)) as usize;
        lock(&self.shards[index])
    }

    /// Inserts or replaces the record for `key`; returns the replaced record.
    pub fn insert(&self, key: u64, rec: Record) -> Option<Record> {
        self.shard(key).insert(key, rec)
    }

    /// Removes and returns the record for `key`.
    pub fn remove(&self, key: u64) -> Option<Record> {
        self.shard(key).remove(&key)
    }

    /// The record for `key`.
    pub fn get(&self, key: u64) -> Option<Record> {
        self.shard(key).get(&key).copied()
    }

    /// Number of records (a snapshot: shards are counted one after another).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether there are no records (a snapshot, like [`len`](Registry::len)).
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).is_empty())
    }

    /// Sum of bytes per device for devices `0..devices` (records of other devices are left out),
    /// saturating. A snapshot taken shard by shard.
    pub fn bytes_by_device(&self, devices: usize) -> Vec<u64> {
        let mut sums = vec![0u64; devices];
        for shard in self.shards.iter() {
            for rec in lock(shard).values() {
                if let Some(sum) = sums.get_mut(rec.device) {
                    *sum = sum.saturating_add(rec.bytes);
                }
            }
        }
        sums
    }

    /// Removes every record of `device` and returns them with their keys (in no particular order).
    pub fn drain_device(&self, device: DeviceIndex) -> Vec<(u64, Record)> {
        self.drain_where(|rec| rec.device == device)
    }

    /// Removes every record `f` picks and returns them with their keys (in no particular order).
    pub fn drain_where(&self, f: impl Fn(&Record) -> bool) -> Vec<(u64, Record)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            lock(shard).retain(|&key, rec| {
                if f(rec) {
                    out.push((key, *rec));
                    false
                } else {
                    true
                }
            });
        }
        out
    }

    /// Calls `f` with every record (shard by shard, holding one shard's lock while `f` runs on
    /// its records: `f` must not call back into this registry).
    pub fn for_each(&self, mut f: impl FnMut(u64, &Record)) {
        for shard in self.shards.iter() {
            for (&key, rec) in lock(shard).iter() {
                f(key, rec);
            }
        }
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn rec(device: usize, bytes: u64) -> Record {
        Record {
            device,
            bytes,
            kind: AllocKind::Plain,
            ctx: 0,
        }
    }

    #[test]
    fn insert_get_remove() {
        let r = Registry::new();
        assert!(r.is_empty());
        assert_eq!(r.insert(0x7f00_0000_0000, rec(0, 10)), None);
        assert_eq!(r.get(0x7f00_0000_0000), Some(rec(0, 10)));
        assert_eq!(r.insert(0x7f00_0000_0000, rec(1, 20)), Some(rec(0, 10)));
        assert_eq!(r.len(), 1);
        assert_eq!(r.remove(0x7f00_0000_0000), Some(rec(1, 20)));
        assert_eq!(r.remove(0x7f00_0000_0000), None);
        assert_eq!(r.get(0x7f00_0000_0000), None);
        assert!(r.is_empty());
    }

    #[test]
    fn sums_and_drain() {
        let r = Registry::new();
        for i in 0..1000u64 {
            r.insert(i << 21, rec((i % 3) as usize, i));
        }
        let sums = r.bytes_by_device(2);
        let want0: u64 = (0..1000).filter(|i| i % 3 == 0).sum();
        let want1: u64 = (0..1000).filter(|i| i % 3 == 1).sum();
        assert_eq!(sums, vec![want0, want1]);
        let drained = r.drain_device(2);
        assert_eq!(drained.len(), 333);
        assert!(
            drained
                .iter()
                .all(|(k, rec)| rec.device == 2 && rec.bytes == k >> 21)
        );
        assert_eq!(r.len(), 667);
        assert_eq!(r.bytes_by_device(3)[2], 0);
        let mut seen = 0;
        r.for_each(|_, _| seen += 1);
        assert_eq!(seen, 667);
    }

    #[test]
    fn aligned_keys_spread_over_shards() {
        let r = Registry::new();
        for i in 0..(SHARDS as u64 * 16) {
            r.insert(i << 21, rec(0, 1));
        }
        let busiest = r.shards.iter().map(|s| lock(s).len()).max().unwrap();
        assert!(
            busiest <= 48,
            "busiest shard has {busiest} of {}",
            SHARDS * 16
        );
    }

    #[test]
    fn hasher_mixes_low_bits() {
        let b = BuildHasherDefault::<U64Hasher>::default();
        let h = |k: u64| b.hash_one(k);
        let low: std::collections::HashSet<u64> = (0..256u64).map(|i| h(i << 21) & 0xff).collect();
        assert!(low.len() > 128);
        let mut bytes = U64Hasher::default();
        bytes.write(b"abc");
        assert_ne!(bytes.finish(), U64Hasher::default().finish());
    }

    #[test]
    fn recovers_from_poison() {
        let r = std::sync::Arc::new(Registry::new());
        r.insert(5, rec(0, 1));
        let r2 = r.clone();
        let _ = std::thread::spawn(move || {
            r2.for_each(|_, _| panic!("poison the shard"));
        })
        .join();
        assert_eq!(r.get(5), Some(rec(0, 1)));
        assert_eq!(r.remove(5), Some(rec(0, 1)));
    }
}
