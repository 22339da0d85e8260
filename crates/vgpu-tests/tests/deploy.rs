//! The deployment files in `deploy/` are valid: runs `scripts/validate-deploy.sh`, which
//! schema-validates the Kubernetes objects (Kubernetes' own schemas and the prometheus-operator
//! CRDs), checks that they agree with each other and mount the host read-only, runs
//! `promtool check rules` and the alert rules' unit tests (`promtool test rules`), and checks
//! that every Grafana query parses and names only metrics the exporter serves
//! (`deploy/exporter-metrics.txt`), each of them at least once. Its self-test breaks copies of
//! the files in known ways and fails unless every check notices.
//!
//! The script installs promtool (Debian's `prometheus`) and its Python packages (PyPI) when they
//! are missing. Where they cannot be installed (exit status 77: no root for apt-get, no registry)
//! the test fails under CI=true and is skipped, with the reason printed, elsewhere.
//!
//! `exporter_reads_regions_as_the_daemonset_mounts_them` runs `vgpu metrics` the way
//! `deploy/kubernetes/daemonset.yaml` does: as uid 65534, on a read-only bind mount of a
//! containers directory (`<podUID>_<container>/<file>.cache`, as HAMi lays it out).
//!
//! `dashboard_and_rules_run_on_a_live_prometheus` runs a simulated workload (one container holding
//! 1 GiB of its 4 GiB, one allocation refused), the exporter on loopback, and the validator's
//! `--live` stage: Debian's Prometheus scrapes the exporter every second with the alert rules
//! loaded, and every dashboard query and rule must run (those on memory, refusals, regions and
//! the build must return series).

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vgpu_tests::{GIB, Probe, Reaped, deps_dir, dies_with_parent};

/// The script's exit status when a tool it needs cannot be installed.
const UNAVAILABLE: i32 = 77;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Runs `scripts/validate-deploy.sh ARGS`; passes, skips (tools unavailable outside CI) or
/// panics.
fn validate_deploy(args: &[&str]) {
    let root = workspace_root();
    let out = dies_with_parent(&mut Command::new("bash"))
        .arg(root.join("scripts/validate-deploy.sh"))
        .args(args)
        .current_dir(&root)
        .output()
        .expect("run bash scripts/validate-deploy.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    match out.status.code() {
        Some(0) => {
            assert!(
                stdout.contains("validate-deploy: ") && stdout.contains(" passed, 0 failed"),
                "the validator exited 0 without its summary line"
            );
        }
        Some(UNAVAILABLE) if std::env::var("CI").as_deref() != Ok("true") => {
            println!(
                "SKIPPED deploy validation: the validators could not be installed (see above)"
            );
        }
        status => panic!("scripts/validate-deploy.sh failed (exit status {status:?}); see above"),
    }
}

#[test]
fn deploy_manifests_rules_and_dashboard_validate() {
    validate_deploy(&[]);
}

/// `target/<profile>/vgpu`: built by `cargo test --workspace` for vgpu-cli's own tests.
/// When it was not built: a SKIPPED line and `None`, or a failure under CI.
fn vgpu_binary() -> Option<PathBuf> {
    let p = deps_dir().parent().map(|d| d.join("vgpu"));
    match p {
        Some(p) if p.is_file() => Some(p),
        _ => {
            let why = "target/<profile>/vgpu was not built (run cargo test --workspace)";
            assert!(!in_ci(), "{why}");
            println!("SKIPPED: {why}");
            None
        }
    }
}

/// Whether this runs in CI (`CI=true`), where a skipped check is a failure.
fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `vgpu metrics --once --dir DIR` as uid/gid 65534, with `DIR` bind-mounted read-only over
/// itself (in a mount namespace of its own) when `read_only`. None when this machine cannot
/// make the namespace (not root).
fn scrape_as_daemonset(vgpu: &Path, dir: &Path, read_only: bool) -> Option<(bool, String, String)> {
    let d = dir.display();
    let v = vgpu.display();
    let mount = if read_only {
        format!("mount --bind -o ro '{d}' '{d}' && ")
    } else {
        String::new()
    };
    let script = format!(
        "{mount}exec setpriv --reuid 65534 --regid 65534 --clear-groups '{v}' metrics --once --dir '{d}'"
    );
    let probe = Command::new("unshare").args(["-m", "true"]).output().ok()?;
    if !probe.status.success() {
        return None;
    }
    let out = dies_with_parent(&mut Command::new("unshare"))
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A new directory `name` in the temporary directory, if every directory above it lets
/// anyone through (`o+x`).
fn reachable_by_anyone(name: &str) -> Option<PathBuf> {
    let base = std::env::temp_dir();
    let open = base
        .ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    open.then(|| base.join(name))
}

#[test]
fn exporter_reads_regions_as_the_daemonset_mounts_them() {
    let Some(vgpu) = vgpu_binary() else {
        return;
    };
    // A node's containers directory, as HAMi lays it out, with one container's region in it,
    // and a copy of the binary: both where uid 65534 can reach them. The checkout may lie under
    // a directory only its owner can enter (a home directory, `mktemp -d`), so not in target/.
    let Some(root) = reachable_by_anyone(&format!("vgpu-deploy-{}", std::process::id())) else {
        let why = "no temporary directory that uid 65534 can enter";
        assert!(!in_ci(), "{why}");
        println!("SKIPPED: {why}");
        return;
    };
    let ctr = root.join("containers/0f6e1a52-uid_train");
    std::fs::create_dir_all(&ctr).expect("containers dir");
    for d in [&root, &root.join("containers"), &ctr] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let copy = root.join("vgpu");
    std::fs::copy(&vgpu, &copy).expect("copy the vgpu binary");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let vgpu = copy;
    let region = ctr.join("5b0c.cache");
    Probe::new()
        .region(&region)
        .limit("4g")
        .ops(&["init", "ctx", "alloc:1g"])
        .run()
        .success();
    let dir = root.join("containers");
    let want = format!("vgpu_memory_limit_bytes{{region=\"{}\"", region.display());
    let limit = format!(" {}", 4 * GIB);

    let mut results = Vec::new();
    for read_only in [false, true] {
        let Some((ok, stdout, stderr)) = scrape_as_daemonset(&vgpu, &dir, read_only) else {
            assert!(!in_ci(), "unshare -m failed: cannot make a mount namespace");
            println!("SKIPPED: unshare -m failed (not root?)");
            return;
        };
        let found = stdout
            .lines()
            .any(|l| l.starts_with(&want) && l.ends_with(&limit));
        results.push((read_only, ok, found, stdout, stderr));
    }
    let _ = std::fs::remove_dir_all(&root);
    for (read_only, ok, found, stdout, stderr) in &results {
        assert!(
            *ok && *found,
            "vgpu metrics as uid 65534{}: exit ok {ok}, the region's 4 GiB limit {}\n\
             stdout:\n{stdout}\nstderr:\n{stderr}",
            if *read_only {
                " through a read-only mount"
            } else {
                ""
            },
            if *found { "found" } else { "NOT found" },
        );
    }
}

/// A probe holding its allocations in `region` until killed; waits for its `OK hold`.
fn holder(region: &Path, ops: &[&str]) -> (Reaped, Vec<String>) {
    let mut probe = Reaped(
        Probe::new()
            .region(region)
            .limit("4g")
            // One GPU: one series per container.
            .env("VGPU_SIM_DEVICES", "1")
            .ops(ops)
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn probe"),
    );
    let mut lines = BufReader::new(probe.0.stdout.take().expect("probe stdout")).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the probe ended early: {seen:?}"))
            .expect("read probe");
        if line.starts_with("OK hold") {
            return (probe, seen);
        }
        seen.push(line);
    }
}

/// Issue 26 item 2 too: two pods whose containers have the same name, at 39 % and 59 % of
/// their limits (a HAMi node without the downward-API variables: no namespace or pod labels),
/// must be two series at 0.39 and 0.59 in the dashboard's "Memory used / limit" (the old one
/// grouped by namespace/pod and gave one series at 0.979), and the pod that kube-state-metrics
/// knows (a stand-in serving `kube_pod_info`) must carry its names.
#[test]
fn dashboard_and_rules_run_on_a_live_prometheus() {
    let Some(vgpu) = vgpu_binary() else {
        return;
    };
    let root = deps_dir()
        .parent()
        .expect("profile dir")
        .join(format!("vgpu-tests/deploy-live-{}", std::process::id()));
    let (uid_a, uid_b) = (
        "7d41c0de-0000-4000-8000-00000000000a",
        "7d41c0de-0000-4000-8000-00000000000b",
    );
    let ctr_a = root.join(format!("containers/{uid_a}_train"));
    let ctr_b = root.join(format!("containers/{uid_b}_train"));
    for d in [&ctr_a, &ctr_b] {
        std::fs::create_dir_all(d).expect("containers dir");
    }
    // 303 MiB of context and 1,294 MiB: 39.0 % of 4 GiB; 303 + 2,114 MiB: 59.0 %, and 4 GiB
    // more refused.
    let (_a, _) = holder(
        &ctr_a.join("9e2f.cache"),
        &["init", "ctx", "alloc:1294m", "hold"],
    );
    let (_b, seen) = holder(
        &ctr_b.join("31aa.cache"),
        &["init", "ctx", "alloc:2114m", "alloc:4g", "hold"],
    );
    assert!(
        seen.iter().any(|l| l.starts_with("ERR alloc")),
        "the 4 GiB allocation was not refused: {seen:?}"
    );
    let kube = root.join("kube-state-metrics.txt");
    std::fs::write(
        &kube,
        format!(
            "# TYPE kube_pod_info gauge\nkube_pod_info{{namespace=\"ml\",pod=\"train-a\",uid=\"{uid_a}\",node=\"gpu-1\"}} 1\n"
        ),
    )
    .expect("kube_pod_info file");

    // The exporter, on a loopback port that was free a moment ago.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = root.join("containers");
    let _exporter = Reaped(
        dies_with_parent(&mut Command::new(&vgpu))
            .args(["metrics", "--listen", &addr, "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn vgpu metrics"),
    );
    let start = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "vgpu metrics did not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let kube = kube.display().to_string();
    validate_deploy(&[
        "--live",
        &addr,
        "--expect-memory-ratios",
        "0.39,0.59",
        "--kube-pod-info",
        &kube,
    ]);
    let _ = std::fs::remove_dir_all(&root);
}
