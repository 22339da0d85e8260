//! The share: virtual time, its bank and head start, charging kernels not gaps, the slot
//! words.
use super::*;

#[test]
fn virtual_time_banks_at_most_the_bank_and_charges_at_the_share() {
    // 1 ms of work at 50 % moves vt by 2 ms.
    assert_eq!(charge_vt(10 * MS, 10 * MS, MS, 50), 12 * MS);
    // A container idle for a second starts from BANK before now.
    assert_eq!(charge_vt(1, 1_000 * MS, MS, 50), 902 * MS);
    assert_eq!(credit(1, 1_000 * MS, 50), 75 * MS);
    // A new one from AHEAD back: less banked than an idle one.
    assert_eq!(charge_vt(0, 1_000 * MS, MS, 50), 952 * MS);
    assert_eq!(credit(0, 1_000 * MS, 50), 50 * MS);
    assert_eq!(credit(12 * MS, 10 * MS, 50), 24 * MS);
    assert_eq!(credit(80 * MS, 10 * MS, 50), 0);
}

#[test]
fn a_refund_takes_virtual_time_back_never_past_the_bank() {
    let now = 1_000 * MS;
    // 80 ms of work taken back at 10 % moves vt back by 800 ms.
    assert_eq!(
        charge_vt_banked(now + 900 * MS, Some(now), now, (0, 80 * MS), 10),
        now + 100 * MS
    );
    // With a charge in the same decision: both apply.
    assert_eq!(
        charge_vt_banked(now + 900 * MS, Some(now), now, (MS, 80 * MS), 10),
        now + 110 * MS
    );
    // Never further back than BANK before the bank's point (now, taking turns).
    for (bank_at, floor) in [
        (Some(now), now - 100 * MS),
        (Some(now - 50 * MS), now - 150 * MS),
        (None, now - 100 * MS),
    ] {
        assert_eq!(
            charge_vt_banked(now + 10 * MS, bank_at, now, (0, 1_000 * MS), 10),
            floor,
            "{bank_at:?}"
        );
    }
    // Behind that already (taking turns, or a container never charged): nothing moves.
    assert_eq!(
        charge_vt_banked(now - 500 * MS, None, now, (0, 80 * MS), 10),
        now - 500 * MS
    );
    assert_eq!(
        charge_vt_banked(0, Some(now), now, (0, 80 * MS), 10),
        charge_vt_banked(0, Some(now), now, (0, 0), 10) - 50 * MS
    );
}

#[test]
fn slot_words_round_trip() {
    let s = SlotState {
        want: Some(123 * MS),
        heavy: true,
        syncing: false,
        active: true,
        high: true,
        exclusive: false,
        launched: true,
        soon: false,
    };
    let p = SlotState::parse(s.word()).unwrap();
    assert_eq!(p.want.unwrap() >> KEY_SHIFT, (123 * MS) >> KEY_SHIFT);
    assert_eq!(
        (p.heavy, p.syncing, p.active, p.high),
        (true, false, true, true)
    );
    assert_eq!(SlotState::parse(0), None);
    assert_eq!(
        SlotState::parse(SlotState::default().word()),
        Some(SlotState::default())
    );
    // A synchronisation due soon, published without a want; a reader of key words still
    // finds such a slot never due.
    let soon = SlotState {
        soon: true,
        ..SlotState::default()
    };
    assert_eq!(SlotState::parse(soon.word()), Some(soon));
    assert!(soon.word() >> KEY_SHIFT > u64::MAX >> (KEY_SHIFT + 1));
    // A want's key bit is never read as one.
    let want = SlotState {
        want: Some(2 << KEY_SHIFT),
        ..SlotState::default()
    };
    assert!(!SlotState::parse(want.word()).unwrap().soon);
}

#[test]
fn a_light_process_is_charged_its_kernels_not_its_gaps() {
    // A launch every 10 µs of a 2 µs kernel, priced by brackets, under 25 %: it uses 20 %
    // of the GPU and is never held.
    let mut l = Limiter::new(Priority::Normal, 0);
    let mut vt = 0;
    let mut launched = 0;
    let mut budget = 0;
    let keys = [7u64; 100];
    let mut now = 0;
    let mut held_looks = 0;
    for i in 0..2_000u64 {
        now = i * MS;
        // The program launched up to 100 in the last ms, within its budget.
        let n = (launched + 100).min(budget.max(launched + 1));
        let new = n - launched;
        let marks = [Mark {
            kind: MarkKind::Bracket {
                at: launched,
                key: 7,
                elapsed: 2 * US,
                gap: 0,
            },
            shared: false,
        }];
        let mut lk = look(now, n, &keys[..usize::try_from(new).unwrap()], vt, 25);
        lk.marks = if i > 0 { &marks } else { &[] };
        let d = l.look(&lk);
        vt = charge_vt(vt, now, d.charge, 25);
        launched = n;
        budget = d.budget;
        if i > 10 && d.held != Held::No {
            held_looks += 1;
        }
    }
    assert_eq!(held_looks, 0);
    let used = l.charged() as f64 / now as f64;
    assert!((0.19..0.22).contains(&used), "charged {used}");
}

#[test]
fn a_gpu_bound_process_is_held_at_its_share() {
    // Kernels of 100 µs launched as fast as the gate allows: what it is admitted over a
    // second is its share's worth, once its price is learned.
    let mut l = Limiter::new(Priority::Normal, 0);
    let mut vt = 0;
    let mut launched = 0u64;
    let mut budget = 1;
    let keys = [9u64; 4096];
    for i in 0..4_000u64 {
        let now = i * 250 * US;
        let n = budget;
        let new = usize::try_from(n - launched).unwrap();
        let marks = [Mark {
            kind: MarkKind::Bracket {
                at: launched,
                key: 9,
                elapsed: 100 * US,
                gap: 0,
            },
            shared: false,
        }];
        let mut lk = look(now, n, &keys[..new.min(4096)], vt, 50);
        lk.held = true;
        lk.marks = &marks;
        let d = l.look(&lk);
        vt = charge_vt(vt, now, d.charge, 50);
        launched = n;
        budget = d.budget;
    }
    // 1 s of wall: 0.5 s of 100 µs kernels = 5000 launches (± the bank and one look).
    let per_s = launched as f64 / 1.0;
    assert!(
        (4_700.0..5_700.0).contains(&per_s),
        "{per_s} launches a second"
    );
}

/// A container never charged has `head_start()` of credit, whatever its share.
#[test]
fn a_new_container_has_its_head_start_in_hand() {
    let now = 1_000 * MS;
    for percent in [10u8, 50, 100] {
        assert_eq!(
            credit(0, now, percent),
            ns(head_start()) * u64::from(percent) / 100
        );
    }
}
