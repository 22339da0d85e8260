//! The harness itself (issue 24 item 9): a child a test starts dies with the test.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vgpu_tests::*;

const ROLE: &str = "VGPU_HARNESS_TEST_ROLE";

/// Whether `pid` is still running (neither gone nor a zombie waiting for its reaper).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

#[test]
fn a_probe_dies_with_the_test_that_started_it() {
    // A test process (this binary, re-executed as `parent`) starts a probe that would sleep a
    // minute, and is killed: the probe must go too (before: it lived on, as six `multiprocess`
    // children once did for 80 minutes after a timed-out run).
    let mut parent = Reaped(
        dies_with_parent(&mut Command::new(std::env::current_exe().unwrap()))
            .args(["--exact", "parent", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, "parent")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(parent.0.stdout.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the parent ended");
        if let Some(p) = line.trim().strip_prefix("probe pid ") {
            break p.parse::<u32>().unwrap();
        }
    };
    assert!(running(pid));
    parent.0.kill().unwrap();
    parent.0.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(pid) {
        assert!(Instant::now() < deadline, "probe {pid} outlived its test");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `parent` of `a_probe_dies_with_the_test_that_started_it` (a no-op otherwise).
#[test]
fn parent() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let mut child = Reaped(spawn(Probe::new().limit("1g"), &["sleep:60000"]));
    // Once it is sleeping (it would die of SIGPIPE writing a line after we are gone).
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("OK ctx") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the probe ended");
    }
    println!("probe pid {}", child.0.id());
    std::thread::sleep(Duration::from_secs(60));
}
