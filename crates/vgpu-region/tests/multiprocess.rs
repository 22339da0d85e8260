//! Multi-process tests: racing charges, a kill storm, fork.
//!
//! Children are this test binary re-executed with `VGPU_REGION_TEST_ROLE` set: the `child` test
//! then plays that role instead of returning at once. Children talk to the parent through lines
//! starting with `@@` on stdout; closing their stdin ends them.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpu_policy::ledger::Ledger;
use vgpu_region::{DeviceInit, Location, Region};

const ROLE: &str = "VGPU_REGION_TEST_ROLE";
const PATH: &str = "VGPU_REGION_TEST_PATH";
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const UUID: &str = "GPU-00000000-test";
/// The longest a child waits for its parent's next step before it gives up.
const CHILD_WAIT: Duration = Duration::from_secs(120);

fn devices(limit: u64) -> [DeviceInit; 1] {
    [DeviceInit {
        uuid: UUID.into(),
        limit: Some(limit),
        sm_limit: None,
    }]
}

/// A child in `role`; it dies with the test (and within `vgpu_tests::CHILD_LIMIT_S`).
fn spawn(role: &str, path: &Path) -> Child {
    vgpu_tests::dies_with_parent(&mut Command::new(std::env::current_exe().unwrap()))
        .args(["--exact", "child", "--nocapture", "--test-threads=1", "-q"])
        .env(ROLE, role)
        .env(PATH, path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Next `@@` line of a child (without the marker), or `None` at end of output.
fn next_line(out: &mut BufReader<ChildStdout>) -> Option<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(rest) = line.trim_end().strip_prefix("@@ ") {
            return Some(rest.to_owned());
        }
    }
}

fn say(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "@@ {s}");
    let _ = o.flush();
}

fn wait_stdin_eof() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn attach(path: &Path, limit: u64) -> (Arc<Region>, vgpu_region::RegionLedger) {
    let (r, _) = Region::open_or_create(&Location::private(path), &devices(limit)).unwrap();
    let r = Arc::new(r);
    let l = r.ledger(&[UUID.to_owned()]);
    (r, l)
}

#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let path = PathBuf::from(std::env::var_os(PATH).unwrap());
    match role.as_str() {
        "race" => race_child(&path),
        "storm" => storm_child(&path),
        "fork" => fork_child(&path),
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

fn race_child(path: &Path) {
    let (_r, l) = attach(path, GIB);
    say("ready");
    let go = path.with_file_name("go");
    // Bounded: a parent that never says go (it failed, or was killed) ends the child.
    let deadline = Instant::now() + CHILD_WAIT;
    while !go.exists() {
        assert!(Instant::now() < deadline, "no go from the parent");
        std::thread::yield_now();
    }
    let granted = l.try_charge(0, 100 * MIB).is_ok();
    say(if granted { "granted" } else { "denied" });
    wait_stdin_eof();
}

#[test]
fn sixteen_processes_racing_for_100_mib_under_1_gib_get_exactly_10() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("region");
        let (parent, pl) = attach(&path, GIB);
        let mut kids: Vec<Child> = (0..16).map(|_| spawn("race", &path)).collect();
        let mut outs: Vec<_> = kids
            .iter_mut()
            .map(|k| BufReader::new(k.stdout.take().unwrap()))
            .collect();
        for o in &mut outs {
            assert_eq!(next_line(o).as_deref(), Some("ready"));
        }
        std::fs::write(path.with_file_name("go"), b"").unwrap();
        let mut granted = 0;
        for o in &mut outs {
            match next_line(o).as_deref() {
                Some("granted") => granted += 1,
                Some("denied") => {}
                other => panic!("child said {other:?}"),
            }
        }
        assert_eq!(granted, 10, "round {round}");
        assert_eq!(pl.used(0), 10 * 100 * MIB);
        assert_eq!(parent.snapshot().processes.len(), 17);
        // Half end cleanly (their slot is given back on drop), half are killed (reaped).
        for (i, k) in kids.iter_mut().enumerate() {
            if i % 2 == 0 {
                k.kill().unwrap();
                k.wait().unwrap();
            } else {
                drop(k.stdin.take());
                assert!(k.wait().unwrap().success());
            }
        }
        assert_eq!(parent.reap_dead(), 8);
        assert_eq!(pl.used(0), 0);
        assert_eq!(parent.snapshot().processes.len(), 1);
    }
}

const STORM_LIMIT: u64 = 256 * MIB;

fn storm_child(path: &Path) {
    let (_r, l) = attach(path, STORM_LIMIT);
    let stop = path.with_file_name("stop");
    let mut rng = Rng::new(u64::from(std::process::id()) << 20 ^ 0x9e37_79b9);
    let mut held: Vec<u64> = Vec::new();
    let mut i = 0u64;
    let deadline = Instant::now() + CHILD_WAIT;
    loop {
        i += 1;
        if i.is_multiple_of(64) && (stop.exists() || Instant::now() > deadline) {
            break;
        }
        if held.is_empty() || rng.below(100) < 55 {
            let n = (1 + rng.below(32)) * MIB - rng.below(2) * 4096;
            if l.try_charge(0, n).is_ok() {
                held.push(n);
            }
        } else {
            let k = usize::try_from(rng.below(held.len() as u64)).unwrap();
            let n = held.swap_remove(k);
            l.release(0, n);
        }
    }
    say(&format!("held {}", held.iter().sum::<u64>()));
    wait_stdin_eof();
}

#[test]
fn kill_storm_leaves_the_budget_exact() {
    const KILLS: usize = 1000;
    const LIVE: usize = 6;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let (parent, pl) = attach(&path, STORM_LIMIT);
    let mut rng = Rng::new(0x5eed);
    let mut kids: Vec<Child> = (0..LIVE).map(|_| spawn("storm", &path)).collect();
    for kill in 0..KILLS {
        std::thread::sleep(Duration::from_micros(500 + rng.below(4000)));
        let k = usize::try_from(rng.below(LIVE as u64)).unwrap();
        let mut victim = std::mem::replace(&mut kids[k], spawn("storm", &path));
        victim.kill().unwrap();
        victim.wait().unwrap();
        let used = pl.used(0);
        assert!(used <= STORM_LIMIT, "over the limit: {used}");
        if kill.is_multiple_of(8) {
            parent.reap_dead();
        }
    }
    let storm = started.elapsed();
    std::fs::write(path.with_file_name("stop"), b"").unwrap();
    let mut held = 0u64;
    let mut outs = Vec::new();
    for k in &mut kids {
        let mut o = BufReader::new(k.stdout.take().unwrap());
        let line = next_line(&mut o).expect("survivor report");
        held += line.strip_prefix("held ").unwrap().parse::<u64>().unwrap();
        outs.push(o);
    }
    while parent.reap_dead() > 0 {}
    let snap = parent.snapshot();
    assert_eq!(snap.processes.len(), LIVE + 1, "{:?}", snap.processes);
    assert_eq!(
        pl.used(0),
        held,
        "Σ used must equal what the survivors hold"
    );
    assert_eq!(snap.devices[0].used, held);
    // Each freed slot bumped its generation (state word >> 8): count the victims that had
    // attached when killed.
    let bytes = std::fs::read(&path).unwrap();
    let procs = std::mem::offset_of!(vgpu_region::layout::Layout, procs);
    let freed: u64 = (0..1024)
        .map(|i| {
            let o = procs + i * size_of::<vgpu_region::layout::Proc>();
            u64::from(u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) >> 8)
        })
        .sum();
    eprintln!("kill storm: {freed} of {KILLS} victims had a slot when killed");
    assert!(
        freed >= KILLS as u64 / 2,
        "too few kills hit attached processes: {freed}"
    );
    for k in &mut kids {
        drop(k.stdin.take());
        assert!(k.wait().unwrap().success());
    }
    assert_eq!(parent.reap_dead(), 0, "survivors gave their slots back");
    assert_eq!(pl.used(0), 0);
    assert_eq!(parent.snapshot().processes.len(), 1);
    eprintln!(
        "kill storm: {KILLS} kills in {storm:?}, total {:?}, survivors held {held} bytes",
        started.elapsed()
    );
}

fn fork_child(path: &Path) {
    let (r, l) = attach(path, GIB);
    l.try_charge(0, 100 * MIB).unwrap();
    let parent_slot = r.slot().unwrap();
    // SAFETY: fork is called from this process's test thread; the child only uses the region
    // (atomics, open, fcntl), prints and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        r.on_fork_child();
        let no_slot = r.slot().is_none();
        let reaped = r.reap_dead();
        let charged = l.try_charge(0, 50 * MIB).is_ok();
        let slot = r.slot();
        let procs = r.snapshot().processes.len();
        say(&format!(
            "child no_slot={no_slot} reaped={reaped} charged={charged} new_slot={} procs={procs} used={}",
            slot.is_some_and(|s| s != parent_slot),
            l.used(0) / MIB
        ));
        // SAFETY: _exit ends the child at once, skipping destructors (as a crash would).
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let reaped = r.reap_dead();
    say(&format!(
        "parent reaped={reaped} slot_kept={} used={}",
        r.slot() == Some(parent_slot),
        l.used(0) / MIB
    ));
    wait_stdin_eof();
}

#[test]
fn fork_child_takes_its_own_slot_and_is_reaped_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let (watcher, wl) = attach(&path, GIB);
    let mut k = spawn("fork", &path);
    let mut out = BufReader::new(k.stdout.take().unwrap());
    assert_eq!(
        next_line(&mut out).as_deref(),
        Some("child no_slot=true reaped=0 charged=true new_slot=true procs=3 used=150")
    );
    assert_eq!(
        next_line(&mut out).as_deref(),
        Some("parent reaped=1 slot_kept=true used=100")
    );
    assert_eq!(watcher.reap_dead(), 0, "the parent is alive");
    assert_eq!(wl.used(0), 100 * MIB);
    k.kill().unwrap();
    k.wait().unwrap();
    assert_eq!(watcher.reap_dead(), 1);
    assert_eq!(wl.used(0), 0);
}
