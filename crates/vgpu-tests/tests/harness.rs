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

/// Runs this binary's `regions` test as a test process of its own; `hang` keeps it alive
/// after it printed its directories: that of its region files and its own temporary one.
fn regions_child(hang: bool) -> (Reaped, [std::path::PathBuf; 2]) {
    let mut c = Reaped(
        dies_with_parent(&mut Command::new(std::env::current_exe().unwrap()))
            .args([
                "--exact",
                "regions",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(ROLE, if hang { "regions-hang" } else { "regions" })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(c.0.stdout.take().unwrap());
    let mut line = String::new();
    let dirs = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
        if let Some(p) = line.trim().strip_prefix("dirs ") {
            let (a, b) = p.split_once(' ').unwrap();
            break [a.into(), b.into()];
        }
    };
    // Drain the rest, so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (c, dirs)
}

#[test]
fn a_test_process_leaves_no_region_file_behind() {
    // A test process that exits removes its region files and node directories (before: every
    // region stayed, 3 MiB of allocated blocks each, about 2,000 a run, until they filled the
    // disk CI runs on).
    let (mut c, dirs) = regions_child(false);
    assert!(c.0.wait().unwrap().success());
    for d in &dirs {
        assert!(!d.exists(), "{} left behind", d.display());
    }

    // One that is killed leaves them; the next test process to make its own removes them.
    let (mut killed, dirs) = regions_child(true);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    for d in &dirs {
        assert!(
            d.exists(),
            "a killed process cannot clean up {}",
            d.display()
        );
    }
    // A sweep leaves an alive file younger than a minute (its maker may not have locked it
    // yet): these are made older.
    let then = std::time::SystemTime::now() - Duration::from_secs(120);
    for d in &dirs {
        let alive = std::fs::File::options()
            .write(true)
            .open(d.join(".alive"))
            .unwrap();
        alive.set_modified(then).unwrap();
    }
    let (mut next, _) = regions_child(false);
    assert!(next.0.wait().unwrap().success());
    for d in &dirs {
        assert!(!d.exists(), "{} outlived its process", d.display());
    }
}

/// The child of `a_test_process_leaves_no_region_file_behind` (a no-op otherwise): makes a
/// region file with a probe under a limit and a node directory, prints the directories they are
/// in, and exits or hangs.
#[test]
fn regions() {
    let Some(role) = std::env::var_os(ROLE) else {
        return;
    };
    let region = fresh_region();
    let node = std::path::PathBuf::from(fresh_node_dir("harness", "regions"));
    Probe::new()
        .region(&region)
        .limit("1g")
        .env("VGPU_NODE_DIR", &node.display().to_string())
        .ops(&["init", "ctx", "alloc:1m"])
        .run()
        .success();
    assert!(region.exists(), "the probe made no region");
    let (r, n) = (region.parent().unwrap(), node.parent().unwrap());
    assert!(n.starts_with(std::env::temp_dir()) && n != std::env::temp_dir());
    println!("dirs {} {}", r.display(), n.display());
    if role == "regions-hang" {
        std::thread::sleep(Duration::from_secs(60));
    }
}
