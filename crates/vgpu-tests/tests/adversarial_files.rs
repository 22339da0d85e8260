//! The threat model as code (issue 13): the shared files and what another process of the
//! container, or of the node, can do to them. Each test names its issue item; the region-level
//! cases are in `crates/vgpu-region/tests/adversarial.rs`, the CLI's in
//! `crates/vgpu-cli/tests/adversarial.rs`. docs/THREAT-MODEL.md says what is and is not stopped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vgpu_tests::*;

/// A child killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Item 7: with the region's creation lock held by someone else (`flock`, a process stopped
/// while attaching), new processes fail closed: CUDA init fails with one line naming the file,
/// instead of each getting a private budget (N x the limit).
#[test]
fn a_held_region_lock_fails_closed_not_open() {
    let region = fresh_region();
    Probe::new()
        .region(&region)
        .limit("1g")
        .ops(&["init", "ctx"])
        .run()
        .success();
    let _flock = Reaped(
        Command::new("flock")
            .arg("-x")
            .arg(&region)
            .args(["sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .expect("run flock"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("flock")
        .arg("-n")
        .arg(&region)
        .arg("true")
        .status()
        .unwrap()
        .success()
    {
        assert!(Instant::now() < deadline, "flock never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    let probes: Vec<_> = (0..2)
        .map(|_| {
            Probe::new()
                .region(&region)
                .limit("1g")
                .ops(&["init", "ctx", "alloc:700m"])
                .command()
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut granted = 0;
    for p in probes {
        let out = p.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        granted += stdout.lines().filter(|l| l.starts_with("OK alloc")).count();
        assert!(
            stdout.lines().any(|l| l.starts_with("ERR init")),
            "CUDA init succeeded without the container's budget:\n{stdout}{stderr}"
        );
        assert!(
            stderr.contains(&region.display().to_string()) && stderr.contains("budget"),
            "no line naming the region: {stderr}"
        );
    }
    assert_eq!(granted, 0, "processes got budgets of their own");
}

/// Item 10: once every process of a run has exited, the next run's environment sets the
/// limits (the region's kept limits only win while a process is attached).
#[test]
fn a_finished_runs_limits_do_not_bind_the_next_run() {
    let region = fresh_region();
    let first = Probe::new()
        .region(&region)
        .limit("1g")
        .ops(&["init", "ctx", "alloc:1500m"])
        .run();
    assert!(!first.ok("alloc"), "1 GiB limit: {:?}", first.lines());
    let second = Probe::new()
        .region(&region)
        .limit("4g")
        .ops(&["init", "ctx", "alloc:1500m"])
        .run();
    assert!(
        second.ok("alloc"),
        "the first run's 1 GiB still binds: {:?}\n{}",
        second.lines(),
        second.stderr
    );
}
