use std::sync::Arc;
use std::thread;

use vgpu_policy::registry::{AllocKind, Record, Registry};

const KINDS: [AllocKind; 8] = [
    AllocKind::Plain,
    AllocKind::Pitch,
    AllocKind::Managed,
    AllocKind::Async,
    AllocKind::Vmm,
    AllocKind::Array,
    AllocKind::MipmappedArray,
    AllocKind::Graph,
];

#[test]
fn concurrent_insert_remove() {
    let reg = Arc::new(Registry::new());
    let threads = 8u64;
    let per_thread = 5_000u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let reg = reg.clone();
            thread::spawn(move || {
                for i in 0..per_thread {
                    // 2 MiB-aligned "device pointers", disjoint per thread.
                    let key = 0x7f00_0000_0000 + ((t * per_thread + i) << 21);
                    let rec = Record {
                        device: usize::try_from(t % 4).unwrap(),
                        bytes: i + 1,
                        kind: KINDS[usize::try_from(i % 8).unwrap()],
                        ctx: 0,
                    };
                    assert_eq!(reg.insert(key, rec), None);
                    assert_eq!(reg.get(key), Some(rec));
                    // Remove every other one right away.
                    if i % 2 == 0 {
                        assert_eq!(reg.remove(key), Some(rec));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(reg.len() as u64, threads * per_thread / 2);
    let sums = reg.bytes_by_device(4);
    // Each thread keeps odd i: bytes i+1 for i = 1, 3, ..., per_thread-1.
    let per_thread_sum: u64 = (0..per_thread).filter(|i| i % 2 == 1).map(|i| i + 1).sum();
    assert_eq!(sums, vec![2 * per_thread_sum; 4]);

    // Now remove everything concurrently, each thread its own keys.
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let reg = reg.clone();
            thread::spawn(move || {
                let mut removed = 0u64;
                for i in 0..per_thread {
                    let key = 0x7f00_0000_0000 + ((t * per_thread + i) << 21);
                    removed += u64::from(reg.remove(key).is_some());
                }
                removed
            })
        })
        .collect();
    let removed: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(removed, threads * per_thread / 2);
    assert!(reg.is_empty());
}

#[test]
fn contended_same_keys() {
    // All threads fight over the same 64 keys; each successful remove pairs with one insert.
    let reg = Arc::new(Registry::new());
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let reg = reg.clone();
            thread::spawn(move || {
                let (mut inserted, mut removed) = (0i64, 0i64);
                for i in 0..10_000u64 {
                    let key = (i * 31 + t) % 64;
                    if i % 2 == 0 {
                        let rec = Record {
                            device: 0,
                            bytes: key,
                            kind: AllocKind::Plain,
                            ctx: 0,
                        };
                        if reg.insert(key, rec).is_none() {
                            inserted += 1;
                        }
                    } else if reg.remove(key).is_some() {
                        removed += 1;
                    }
                }
                (inserted, removed)
            })
        })
        .collect();
    let (ins, rem) = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    assert_eq!(i64::try_from(reg.len()).unwrap(), ins - rem);
    let mut all = 0;
    reg.for_each(|k, r| {
        assert_eq!(r.bytes, k);
        all += 1;
    });
    assert_eq!(all as i64, ins - rem);
}

#[test]
fn drain_device_during_inserts_loses_nothing() {
    let reg = Arc::new(Registry::new());
    let writer = {
        let reg = reg.clone();
        thread::spawn(move || {
            for key in 0..20_000u64 {
                reg.insert(
                    key,
                    Record {
                        device: (key % 2) as usize,
                        bytes: 1,
                        kind: AllocKind::Vmm,
                        ctx: 0,
                    },
                );
            }
        })
    };
    let mut drained = 0usize;
    while !writer.is_finished() {
        drained += reg.drain_device(1).len();
    }
    writer.join().unwrap();
    drained += reg.drain_device(1).len();
    assert_eq!(drained, 10_000);
    assert_eq!(reg.len(), 10_000);
    assert_eq!(reg.bytes_by_device(2), vec![10_000, 0]);
}
