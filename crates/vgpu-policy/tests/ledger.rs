use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use proptest::prelude::*;
use vgpu_policy::ledger::{Denied, Ledger, LocalLedger};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn sixteen_threads_race_for_one_gib() {
    for _round in 0..50 {
        let ledger = Arc::new(LocalLedger::new(&[Some(GIB)]));
        let granted = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(16));
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let (ledger, granted, barrier) = (ledger.clone(), granted.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    if ledger.try_charge(0, 100 * MIB).is_ok() {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(granted.load(Ordering::Relaxed), 10);
        assert_eq!(ledger.used(0), 1000 * MIB);
    }
}

#[test]
fn concurrent_charge_release_balances() {
    let ledger = Arc::new(LocalLedger::new(&[Some(64 * MIB), None]));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let ledger = ledger.clone();
            thread::spawn(move || {
                for i in 0..20_000u64 {
                    let bytes = 1 + (i * 7919 + t) % MIB;
                    if ledger.try_charge(0, bytes).is_ok() {
                        assert!(ledger.used(0) <= 64 * MIB);
                        ledger.release(0, bytes);
                    }
                    ledger.force_charge(1, bytes);
                    ledger.release(1, bytes);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ledger.used(0), 0);
    assert_eq!(ledger.used(1), 0);
}

#[derive(Clone, Debug)]
enum Op {
    Charge(usize, u64),
    Force(usize, u64),
    Release(usize, u64),
    SetLimit(usize, Option<u64>),
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=1024,
        0u64..=4 * GIB,
        Just(u64::MAX),
        u64::MAX - 1024..=u64::MAX
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let device = 0usize..4; // device 3 does not exist
    prop_oneof![
        4 => (device.clone(), amount()).prop_map(|(s, b)| Op::Charge(s, b)),
        1 => (device.clone(), amount()).prop_map(|(s, b)| Op::Force(s, b)),
        3 => (device.clone(), amount()).prop_map(|(s, b)| Op::Release(s, b)),
        1 => (device, proptest::option::of(amount())).prop_map(|(s, l)| Op::SetLimit(s, l)),
    ]
}

/// Plain reference model: used and limit per device, u64::MAX limit = none.
#[derive(Debug)]
struct Model {
    used: Vec<u64>,
    limit: Vec<u64>,
}

impl Model {
    fn charge(&mut self, s: usize, b: u64) -> Result<(), Denied> {
        let Some(used) = self.used.get_mut(s) else {
            return Ok(());
        };
        let limit = self.limit[s];
        if b == 0 {
            return Ok(());
        }
        let sum = u128::from(*used) + u128::from(b);
        if limit == u64::MAX {
            *used = used.saturating_add(b);
            Ok(())
        } else if sum <= u128::from(limit) {
            *used += b;
            Ok(())
        } else {
            Err(Denied::over_limit(b, *used, limit))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn matches_reference_model(
        limits in proptest::collection::vec(proptest::option::of(amount()), 3),
        ops in proptest::collection::vec(op(), 0..64),
    ) {
        let ledger = LocalLedger::new(&limits);
        let mut model = Model {
            used: vec![0; 3],
            limit: limits.iter().map(|l| l.unwrap_or(u64::MAX)).collect(),
        };
        for op in ops {
            match op {
                Op::Charge(s, b) => prop_assert_eq!(ledger.try_charge(s, b), model.charge(s, b)),
                Op::Force(s, b) => {
                    ledger.force_charge(s, b);
                    if let Some(u) = model.used.get_mut(s) { *u = u.saturating_add(b) }
                }
                Op::Release(s, b) => {
                    ledger.release(s, b);
                    if let Some(u) = model.used.get_mut(s) { *u = u.saturating_sub(b) }
                }
                Op::SetLimit(s, l) => {
                    ledger.set_limit(s, l);
                    if let Some(m) = model.limit.get_mut(s) { *m = l.unwrap_or(u64::MAX) }
                }
            }
            for s in 0..4 {
                prop_assert_eq!(ledger.used(s), model.used.get(s).copied().unwrap_or(0));
                let want = model.limit.get(s).copied().filter(|&l| l != u64::MAX);
                prop_assert_eq!(ledger.limit(s), want);
            }
        }
    }
}
