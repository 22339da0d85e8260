//! The node token at scale and under faults (issue 23 target 5), with real processes and the
//! real library on the simulated GPU: many compute-limited containers on one GPU all get
//! turns, four on a GPU oversubscribed twice share it evenly, a waiter killed with SIGKILL leaves
//! nothing behind, and waiting costs little CPU.
//!
//! The token's own rules (clocks, slots, the layout) are unit-tested in `vgpu-region`
//! (`node.rs`) and `vgpu-policy` (`slots.rs`, and the loom model `tests/loom_slots.rs`).
use std::time::Duration;
use vgpu_tests::*;

/// The tests of this file run one at a time: each starts dozens of processes.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A node directory of its own (and a simulated GPU timeline shared by the processes of one
/// test: `VGPU_SIM_STATE`).
fn node(name: &str) -> String {
    fresh_node_dir("token", name)
}

/// A process of a container of its own at `percent` on the node `dir`'s simulated GPU (a
/// small context reservation, so that dozens of contexts fit on it).
fn proc_at(percent: u32, dir: &str) -> Probe {
    Probe::new()
        .env("CUDA_DEVICE_SM_LIMIT", &percent.to_string())
        .env("VGPU_NODE_DIR", dir)
        .env("VGPU_SIM_STATE", &format!("{dir}/sim.state"))
        .env("VGPU_SIM_CTX_RESERVE", "16m")
}

/// `CLOCK_MONOTONIC` now plus `d`, as the probe's `at:NS` op reads it (a start shared by
/// every process of a test, whatever their start-up took).
fn at(d: Duration) -> String {
    format!(
        "at:{}",
        vgpu_region::sys::monotonic_ns() + d.as_nanos() as u64
    )
}

/// The GPU's node file (`<dir>/<uuid>.sched`), once a process made it.
fn node_file(dir: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "sched"))
}

/// The node file's version-1 waiter count word (offset 32).
fn legacy_waiters(dir: &str) -> u64 {
    node_file(dir)
        .and_then(|p| std::fs::read(p).ok())
        .filter(|b| b.len() >= 40)
        .map_or(0, |b| u64::from_ne_bytes(b[32..40].try_into().unwrap()))
}

/// CPU time (user + system, all threads) a live child has used so far, from
/// `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    // The fields after the command name (in parentheses, which may hold spaces): state is
    // field 3, utime 14, stime 15.
    ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// Per thread name of a live child: (CPU time, wake-ups) so far, from
/// `/proc/<pid>/task/*/{stat,status}` (how the CPU time splits between the controller, the
/// launching thread and the rest).
fn per_thread(pid: u32) -> std::collections::BTreeMap<String, (Duration, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.filter_map(Result::ok) {
        let dir = t.path();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let name = stat
            .split_once('(')
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map_or("?", |(n, _)| n)
            .to_string();
        let switches: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        let cpu = ticks(&stat);
        let e = out.entry(name).or_insert((Duration::ZERO, 0));
        e.0 += cpu;
        e.1 += switches;
    }
    out
}

/// utime + stime of a `/proc/.../stat` line.
fn ticks(stat: &str) -> Duration {
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf takes and returns plain integers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let t = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_nanos(t * 1_000_000_000 / hz)
}

/// Waits for every child and returns each one's `key` of its last `OK op` line.
fn results(mut kids: Children, op: &str, key: &str) -> Vec<u64> {
    std::mem::take(&mut kids.0)
        .into_iter()
        .map(|c| result(c, op, key))
        .collect()
}

#[test]
fn sixty_four_limited_containers_on_one_gpu_all_progress() {
    let _serial = serial(&SERIAL);
    // Target 5a. 64 containers at 10 % each, all busy with 1 ms kernels from one common start:
    // the GPU is oversubscribed (640 %), and each should get about 1/64 of it. Before, the
    // node file had 32 waiter slots and a process without one took the token only when no
    // slotted waiter was eligible, which with 32 busy ones never happens: the 33rd and later
    // got (almost) nothing; with the third-generation controller's first build, a container
    // that had never run counted its virtual time from AHEAD before each look (never written)
    // while the others had fallen a whole bank behind, and 54 of 64 got nothing.
    let done = busy_containers("sixty-four", 64, 10, Duration::from_secs(4), 5000);
    // About 5 000 kernels of 1 ms fit in 5 s; handoffs on a loaded 2-core machine cost some.
    // Each container progresses (a tenth of the mean at least), and nearly all get about an
    // equal part. Not all: in a crowd most brackets span the others' turns, and a price one
    // of them raised cuts a container's turns to a kernel each until a lower sample comes
    // (1.2-1.6 s without a completed synchronisation, now and then, under `taskset -c 0`), and
    // on CI one container once did 16 kernels where the mean was 67.8.
    assert_total_and_none_under(&done, 1500, 0.1);
    assert_at_most_under(&done, 0.5, 2);
}

#[test]
fn four_containers_at_half_a_gpu_each_share_it_evenly() {
    let _serial = serial(&SERIAL);
    // Four containers at 50 % each, all busy with 1 ms kernels from one common start: the GPU
    // is oversubscribed twice, too few waiters for a crowd (token::CROWD), so they take turns
    // by exact keys and bank nothing while they do. Each should get about a quarter of it, a
    // start's prices learned beside the others' work notwithstanding (in a crowd such a price
    // sent a container behind the whole line for seconds). Here each did 0.96-1.04 of the mean
    // over 5 runs on a 2-core host.
    let done = busy_containers("four", 4, 50, Duration::from_secs(2), 4000);
    assert_total_and_none_under(&done, 1500, 0.8);
}

/// `n` containers at `percent` on a node of their own (`name`), each busy with 1 ms kernels
/// (synchronising every 4) for `ms` ms from one common start `start_in` from now: each one's
/// `OK busy` line (the kernels it ran, `n`, and when its first ones were done, `first_ns`).
fn busy_containers(name: &str, n: usize, percent: u32, start_in: Duration, ms: u64) -> Vec<String> {
    let dir = node(name);
    let start = at(start_in);
    let busy = format!("busy:spin_1000us:{ms}:4");
    let kids = Children(
        (0..n)
            .map(|_| spawn(proc_at(percent, &dir), &[&start, &busy]))
            .collect(),
    );
    std::mem::take(&mut { kids }.0)
        .into_iter()
        .map(|c| result_line(c, "busy"))
        .collect()
}

/// The kernels each container ran, from its `OK busy` line.
fn kernels(lines: &[String]) -> Vec<u64> {
    lines.iter().map(|l| field(l, "n")).collect()
}

/// The mean of `done`.
fn mean(done: &[u64]) -> f64 {
    done.iter().sum::<u64>() as f64 / done.len() as f64
}

/// The GPU ran at least `least_total` kernels of the containers' `lines` (their `OK busy`
/// lines), and none of them ran under `fraction` of the mean.
fn assert_total_and_none_under(lines: &[String], least_total: u64, fraction: f64) {
    let done = kernels(lines);
    let total: u64 = done.iter().sum();
    let mean = mean(&done);
    let mut sorted = done.clone();
    sorted.sort_unstable();
    let mut gaps: Vec<u64> = lines
        .iter()
        .map(|l| field(l, "gap_ns") / 1_000_000)
        .collect();
    gaps.sort_unstable();
    eprintln!(
        "kernels done by each of {} containers (sorted): {sorted:?}, mean {mean:.1}; the \
         longest waits between synchronisations, ms (sorted): {gaps:?}",
        done.len()
    );
    assert!(total >= least_total, "the GPU ran only {total} kernels");
    assert_few_under(lines, &done, fraction, 0);
}

/// At most `few` of the containers' `lines` ran under `fraction` of the mean.
fn assert_at_most_under(lines: &[String], fraction: f64, few: usize) {
    let done = kernels(lines);
    assert_few_under(lines, &done, fraction, few);
}

fn assert_few_under(lines: &[String], done: &[u64], fraction: f64, few: usize) {
    let mean = mean(done);
    // Their lines say when their first kernels were done and their longest wait for more.
    let short: Vec<&String> = (0..done.len())
        .filter(|&i| (done[i] as f64) < mean * fraction)
        .map(|i| &lines[i])
        .collect();
    assert!(
        short.len() <= few,
        "{} containers (at most {few}) got under {fraction} of the mean {mean:.1}: {short:?} \
         (all: {done:?})",
        short.len()
    );
}

#[test]
fn a_waiter_killed_with_sigkill_leaves_nothing_behind() {
    let _serial = serial(&SERIAL);
    // Target 5b. A work-conserving container at 25 % runs at about full speed while nobody
    // else waits. A second container waits for the token and is killed with SIGKILL while it
    // waits: the version-1 waiter count word it raised stays raised (nobody can lower it for
    // a dead process). Before, the library trusted that word: every later window of the lone
    // container counted as contended and it ran at its 25 %, about 4× slower, for good.
    let dir = node("killed");
    let t0 = Duration::from_secs(2);
    let lone = proc_at(25, &dir).env("VGPU_SM_WORK_CONSERVING", "true");
    // Phase 1 (with the neighbour) from t0 for 3 s; phase 2 (alone, measured) from t0 + 4.5 s.
    let a = spawn(
        lone,
        &[
            &at(t0),
            "busy:spin_1000us:3000:4",
            &at(t0 + Duration::from_millis(4500)),
            "busy:spin_1000us:2000:4",
        ],
    );
    let mut kids = Children(vec![a]);
    std::thread::sleep(t0);
    // One waiter, killed once it waits (an older library counted itself in the version-1 word
    // by then; the third-generation controller takes the token by the limiter's rule and never
    // does, so the kill may leave nothing raised at all: the survivor must run at its pace
    // either way).
    let mut b = spawn(proc_at(25, &dir), &["busy:spin_1000us:5000:4"]);
    let since = std::time::Instant::now();
    while legacy_waiters(&dir) == 0 && since.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = b.kill();
    let _ = b.wait();
    let got = kids.0.pop().map_or(0, |a| result(a, "busy", "n"));
    // 1 ms kernels over 2 s, alone and work-conserving: ~100 % (the simulator on a loaded
    // 2-core machine loses some); paced at 25 % it would be ~25 %.
    let pct = got as f64 / 2000.0 * 100.0;
    eprintln!("the lone work-conserving container after the kill: {pct:.1} % of the GPU");
    assert!(
        pct >= 55.0,
        "after a waiter was killed, the lone work-conserving container got {pct:.1} % of the GPU"
    );
}

#[test]
fn a_process_that_exits_leaves_no_peer_behind() {
    let _serial = serial(&SERIAL);
    // A limited process runs its kernels and exits. Its node slot goes with it: before, its
    // last state (active, launched) stood there, live to the others, until its heartbeat went
    // stale half a second later, and a process starting meanwhile took its own first samples
    // as shared (its first launches then went uncharged).
    let dir = node("exits");
    let a = spawn(
        proc_at(25, &dir),
        &["init", "ctx", "kernels:spin_1000us:1:50:0"],
    );
    assert_eq!(result(a, "kernels", "n"), 50);
    let file = node_file(&dir).expect("the node file");
    let me = vgpu_region::node::NodeToken::open(&file).expect("open the node file");
    let mut peers = Vec::new();
    me.peers_into(vgpu_region::sys::monotonic_ns(), &mut peers);
    assert!(peers.is_empty(), "{peers:?}");
}

#[test]
fn a_killed_process_s_forked_child_does_not_keep_its_token() {
    let _serial = serial(&SERIAL);
    // A limited process forks a worker that does no CUDA (a DataLoader's shape) and is killed
    // while it runs kernels. Its token must be free once it is dead: before, the worker's copy
    // of the token's lock descriptor kept the dead process's locks, so every other container
    // on the GPU found the token held by it (and waited out the stale grace at each turn).
    let dir = node("forked");
    let a = spawn(
        proc_at(50, &dir),
        &[
            "init",
            "ctx",
            "kernels:spin_1000us:1:50:0",
            "forkhold:20000",
            "kernels:spin_1000us:1:400:0",
            "kill",
        ],
    );
    let out = a.wait_with_output().expect("wait for the killed process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let child: i32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("OK forkhold child="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no forked child in\n{stdout}"));
    // The worker lives on (20 s; a forked child does not inherit the probe's parent-death
    // signal) and is killed with this test.
    struct Kill(i32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: kill(2) takes plain integers and touches no memory of ours.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let _worker = Kill(child);
    let file = node_file(&dir).expect("the node file");
    let st = vgpu_region::node::peek(&file).expect("peek the node file");
    assert!(
        !st.holder_locked,
        "the dead process's token is still locked while its worker lives: {st:?}"
    );
}

/// `n` containers at `percent` with 1 ms kernels for 8 s from one common start: the cores their
/// processes used (all threads) over 3 s in the middle of the run, from 2 s after its start;
/// prints the split by thread.
fn cores_taking_turns(n: usize, percent: u32) -> f64 {
    let dir = node(&format!("cpu{n}"));
    let start = at(Duration::from_secs(if n > 8 { 4 } else { 1 }));
    let kids = Children(
        (0..n)
            .map(|_| spawn(proc_at(percent, &dir), &[&start, "busy:spin_1000us:8000:4"]))
            .collect(),
    );
    std::thread::sleep(Duration::from_secs(if n > 8 { 6 } else { 3 }));
    let t1 = std::time::Instant::now();
    let c1: Vec<Duration> = kids.0.iter().map(|c| cpu_time(c.id())).collect();
    let p1: Vec<_> = kids.0.iter().map(|c| per_thread(c.id())).collect();
    std::thread::sleep(Duration::from_secs(3));
    let c2: Vec<Duration> = kids.0.iter().map(|c| cpu_time(c.id())).collect();
    let p2: Vec<_> = kids.0.iter().map(|c| per_thread(c.id())).collect();
    let wall = t1.elapsed();
    let mut threads = std::collections::BTreeMap::<String, (f64, u64)>::new();
    for (a, b) in p1.iter().zip(&p2) {
        for (name, (cpu, sw)) in b {
            let (cpu0, sw0) = a.get(name).copied().unwrap_or_default();
            let e = threads.entry(name.clone()).or_default();
            e.0 += cpu.saturating_sub(cpu0).as_secs_f64() / wall.as_secs_f64();
            e.1 += sw.saturating_sub(sw0);
        }
    }
    let cores: f64 = c1
        .iter()
        .zip(&c2)
        .map(|(a, b)| b.saturating_sub(*a).as_secs_f64() / wall.as_secs_f64())
        .sum();
    let done: u64 = results(kids, "busy", "n").iter().sum();
    eprintln!(
        "{n} containers at {percent} % used {cores:.3} cores over {wall:.2?}; {done} kernels done"
    );
    for (name, (c, wakes)) in &threads {
        eprintln!(
            "  threads {name}: {c:.3} cores, {:.0} wake-ups/s",
            *wakes as f64 / wall.as_secs_f64()
        );
    }
    assert!(
        done as f64 >= 8000.0 * 0.4,
        "the GPU ran only {done} kernels in 8 s"
    );
    cores
}

#[test]
fn forty_waiters_cost_little_cpu() {
    let _serial = serial(&SERIAL);
    // Target 5d. 40 containers at 25 % with 1 ms kernels: one holds the token, 39 wait; then
    // 2 at 75 % (one waits). Both keep the GPU busy, so the holder's own work (its window's
    // looks, one holder at a time) is about the same in both: the difference is what 38 more
    // waiters cost. Before, a waiter whose holder had held the token past the grace looked
    // again every 50 µs: 40 containers used more than a core. A waiter now sleeps until a
    // release wakes it (the first two in line only) or HELD_POLL passes.
    // The pair's 30 ms turns (`TURN_VT`; 20 ms before) made the pair cheaper (0.18-0.19 cores
    // against 0.21-0.23, debug build, this 2-core machine) while the forty cost what they did
    // (0.36-0.43 against 0.40-0.41): their difference went from 0.12-0.15 to 0.11-0.21, and
    // one CI run read 0.251. The bar is what tells a sleeping waiter from a polling one (forty
    // polling waiters cost more than a core), with room for a loaded 2-core host.
    let forty = cores_taking_turns(40, 25);
    let two = cores_taking_turns(2, 75);
    eprintln!("38 more waiters cost {:.3} cores", forty - two);
    assert!(
        forty - two < 0.4 && forty < 0.7,
        "40 containers taking turns used {forty:.3} cores, 2 used {two:.3}"
    );
}
