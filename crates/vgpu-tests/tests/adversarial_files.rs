//! The threat model as code (issue 13): the shared files and what another process of the
//! container, or of the node, can do to them. Each test names its issue item; the region-level
//! cases are in `crates/vgpu-region/tests/adversarial.rs`, the CLI's in
//! `crates/vgpu-cli/tests/adversarial.rs`. docs/THREAT-MODEL.md says what is and is not stopped.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vgpu_tests::*;

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
        dies_with_parent(&mut Command::new("flock"))
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

/// `cmd` run with the umask `mask` (through `sh`: the test process's own umask is left alone).
fn with_umask(cmd: &Command, mask: &str) -> Command {
    let mut c = Command::new("sh");
    dies_with_parent(&mut c)
        .arg("-c")
        .arg(format!("umask {mask}; exec \"$0\" \"$@\""))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

fn compute_limited(node_dir: &std::path::Path) -> Probe {
    Probe::new()
        .env("CUDA_DEVICE_SM_LIMIT", "50")
        .env("VGPU_NODE_DIR", &node_dir.display().to_string())
        .ops(&["init", "ctx", "kernels:spin_1000us:1:20:0"])
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = own_temp_dir().join(format!("adv-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Item 13: the node directory is created 1777 whatever the umask (1755 let only its creator's
/// containers coordinate).
#[test]
fn the_node_directory_is_world_writable_and_sticky_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch("umask");
    let node = root.join("node");
    let out = with_umask(&compute_limited(&node).command(), "022")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mode = std::fs::metadata(&node).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777, "node directory mode {mode:o}");
    assert!(
        std::fs::read_dir(&node).unwrap().count() > 0,
        "no token file"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Item 13: a symlink planted at the node directory's name is not followed: no 0666 token file
/// appears where it points (as root, anywhere on the node).
#[test]
fn a_planted_node_directory_symlink_is_not_followed() {
    let root = scratch("symlink");
    let target = root.join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    let node = root.join("node");
    std::os::unix::fs::symlink(&target, &node).unwrap();
    let out = compute_limited(&node).command().output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let planted: Vec<_> = std::fs::read_dir(&target).unwrap().flatten().collect();
    assert!(
        planted.is_empty(),
        "files created through the symlink: {planted:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symlink"), "no warning: {err}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Item 4: a process whose region is truncated under it (it holds memory) survives, and says
/// so once: one error line naming the file (from its housekeeping round or its first refused
/// allocation, whichever comes first), however long it runs on.
#[test]
fn a_region_truncated_under_a_running_process_is_reported_once() {
    use std::io::{BufRead, BufReader};
    let region = fresh_region();
    let log = region.with_extension("stderr");
    let mut child = Reaped(
        Probe::new()
            .region(&region)
            .limit("1g")
            .ops(&["init", "ctx", "alloc:100m", "hold", "alloc:1m", "hold"])
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    // Held open: the probe's `hold` ends at end of input.
    let stdin = child.0.stdin.take().unwrap();
    let mut line = String::new();
    let read_until = |out: &mut BufReader<_>, line: &mut String, prefix: &str| loop {
        line.clear();
        assert!(
            out.read_line(line).unwrap() > 0,
            "probe ended before {prefix}"
        );
        if line.starts_with(prefix) {
            return;
        }
    };
    read_until(&mut out, &mut line, "OK hold");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&region)
        .unwrap()
        .set_len(0)
        .unwrap();
    let name = region.display().to_string();
    let reported = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .filter(|l| l.contains("error") && l.contains(&name) && l.contains("truncated"))
            .count()
    };
    // SIGTERM ends the probe's `hold` (it handles it); its next charge is refused, and the
    // line comes then if its housekeeping round (once a minute) has not printed it already.
    vgpu_tests::terminate(child.0.id());
    read_until(&mut out, &mut line, "ERR alloc");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reported(&log) == 0 {
        assert!(
            Instant::now() < deadline,
            "no line: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A while later, and after the refusal: still one line.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the process died: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(
        reported(&log),
        1,
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    drop(stdin);
    drop(child);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&region);
}
