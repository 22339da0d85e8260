//! `vgpu status`, `limit`, `metrics`, `top` and `doctor` against probe processes under
//! LD_PRELOAD=libvgpu.so and the simulated driver (the vgpu-tests harness).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::*;
use vgpu_tests::Probe;

#[test]
fn status_json_matches_what_processes_hold() {
    let region = fresh_region();
    let p = || Probe::new().limit("2g").region(&region);
    let (a, la) = Holder::start(p(), &["init", "ctx", "alloc:600m"]);
    assert!(la.iter().any(|l| l.starts_with("OK alloc")), "{la:?}");
    let (b, _) = Holder::start(p(), &["init", "ctx", "alloc:100m", "free", "alloc:50m"]);
    let j = status_json(&region);
    assert_eq!(j["region"], region.display().to_string());
    let dev = &j["devices"][0];
    assert_eq!(dev["index"], 0);
    assert!(dev["uuid"].as_str().unwrap().starts_with("GPU-"), "{dev}");
    assert_eq!(dev["limit"], 2 * GIB);
    assert_eq!(dev["sm_limit"], serde_json::Value::Null);
    let used = 2 * SIM_CTX + 650 * MIB;
    assert_eq!(dev["used"], used);
    assert_eq!(dev["free"], 2 * GIB - used);
    assert!(dev["peak"].as_u64().unwrap() >= used, "{dev}");
    assert_eq!(dev["denied"], 0);
    let procs = j["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{j}");
    let find = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} not in {j}"))
    };
    let pa = find(a.pid());
    assert_eq!(pa["devices"][0]["used"], SIM_CTX + 600 * MIB);
    assert_eq!(pa["devices"][0]["peak"], SIM_CTX + 600 * MIB);
    assert_eq!(
        pa["command"],
        probe_command(&["init", "ctx", "alloc:600m", "hold"]),
        "{pa}"
    );
    assert!(pa["start_time"].as_u64().unwrap() > 1_600_000_000);
    for k in ["slot", "devices"] {
        assert!(pa.get(k).is_some(), "{k} missing in {pa}");
    }
    let pb = find(b.pid());
    assert_eq!(pb["devices"][0]["used"], SIM_CTX + 50 * MIB);
    // A context is charged its expected size (512 MiB) before the driver creates it.
    assert_eq!(
        pb["devices"][0]["peak"],
        (SIM_CTX + 100 * MIB).max(512 * MIB)
    );
    for k in [
        "gpu_ns",
        "throttled_ns",
        "denied",
        "launches",
        "uuid",
        "index",
    ] {
        assert!(pb["devices"][0].get(k).is_some(), "{k} missing in {pb}");
    }

    // The text form lists both, with the device index.
    let (ok, out, _) = run(vgpu().args(["status", "--region"]).arg(&region));
    assert!(ok);
    for pid in [a.pid(), b.pid()] {
        assert!(
            out.lines().any(|l| process_row(l, pid)),
            "no row for {pid}:\n{out}"
        );
    }
    assert!(out.contains("2 GiB"), "{out}");
    drop(a);
    drop(b);
}

#[test]
fn limit_lowers_a_running_containers_limit() {
    let region = fresh_region();
    let p = || Probe::new().limit("2g").region(&region);
    let (a, _) = Holder::start(p(), &["init", "ctx", "alloc:600m"]);
    // 903 MiB in use; lower the limit to 1000 MiB: 97 MiB left.
    let (ok, out, err) = run(vgpu()
        .args(["limit", "--memory", "1000m", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    assert!(out.contains("memory limit 2 GiB -> 1000 MiB"), "{out}");
    let r = p()
        .ops(&["init", "ctx", "meminfo", "alloc:64m"])
        .run()
        .success();
    // The new process's context (303 MiB) does not fit: refused, or granted nothing more.
    let lines = r.stdout.clone();
    assert!(
        lines.contains("ERR ctx") || lines.contains("ERR alloc"),
        "allocations must be refused over the new limit: {lines}"
    );
    // Lower below use: nothing revoked, allocations refused; a smaller one fits after raising.
    let (ok, out, _) = run(vgpu()
        .args(["limit", "--memory-device", "0=800m", "--region"])
        .arg(&region));
    assert!(ok);
    assert!(out.contains("nothing is revoked"), "{out}");
    let j = status_json(&region);
    assert_eq!(j["devices"][0]["limit"], 800 * MIB);
    assert_eq!(j["devices"][0]["used"], SIM_CTX + 600 * MIB);
    let uuid = j["devices"][0]["uuid"].as_str().unwrap().to_owned();
    let (ok, _, err) = run(vgpu()
        .args(["limit", "--memory-device"])
        .arg(format!("{uuid}=1300m"))
        .args(["--sm", "40", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    let r = p()
        .env("VGPU_SIM_CTX_RESERVE", "0")
        .env("VGPU_CONTEXT_SIZE", "0")
        .ops(&["init", "ctx", "alloc:500m", "alloc:64m"])
        .run()
        .success();
    assert!(
        !r.ok("alloc"),
        "500 MiB must not fit in 397 MiB: {}",
        r.stdout
    );
    assert!(r.nth("alloc", 1)[0] == "OK", "64 MiB fits: {}", r.stdout);
    let j = status_json(&region);
    assert_eq!(j["devices"][0]["sm_limit"], 40);
    assert!(j["devices"][0]["denied"].as_u64().unwrap() >= 1, "{j}");
    // Removing the memory limit is above the container's ceiling (its 2 GiB at start, issue
    // 13 item 11): refused; restoring it, and removing the SM limit (none at start), are not.
    let (ok, _, err) = run(vgpu()
        .args(["limit", "--memory", "none", "--region"])
        .arg(&region));
    assert!(!ok && err.contains("ceiling"), "{err}");
    let (ok, out, _) = run(vgpu()
        .args(["limit", "--memory", "2g", "--sm", "0", "--region"])
        .arg(&region));
    assert!(ok);
    assert!(out.contains("-> none"), "{out}");
    let j = status_json(&region);
    assert_eq!(j["devices"][0]["limit"], 2 * GIB);
    assert_eq!(j["devices"][0]["sm_limit"], serde_json::Value::Null);
    // Errors: unknown device, nothing to do.
    let (ok, _, err) = run(vgpu()
        .args(["limit", "--memory-device", "7=1g", "--region"])
        .arg(&region));
    assert!(!ok && err.contains("device 7"), "{err}");
    let (ok, _, _) = run(vgpu().args(["limit", "--region"]).arg(&region));
    assert!(!ok);
    drop(a);
}

#[test]
fn metrics_once_parses_as_openmetrics_and_matches_the_holders() {
    let dir = sim_dir()
        .parent()
        .unwrap()
        .join(format!("metrics-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ctr-b")).unwrap();
    let ra = dir.join("ctr-a.cache");
    let rb = dir.join("ctr-b").join("region.cache");
    std::fs::write(dir.join("not-a-region"), b"hello").unwrap();
    let ops_a = ["init", "ctx", "alloc:600m", "alloc:5g"];
    let (a, _) = Holder::start(Probe::new().limit("2g").region(&ra), &ops_a);
    let (a2, _) = Holder::start(
        Probe::new().limit("2g").region(&ra),
        &["init", "ctx", "alloc:100m"],
    );
    let (b, _) = Holder::start(
        Probe::new()
            .limit("1g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .region(&rb),
        &["init", "ctx", "kernels:spin_1000us:1:20:0"],
    );
    let (ok, out, err) = run(vgpu()
        .args(["metrics", "--once", "--format", "openmetrics", "--dir"])
        .arg(&dir)
        .env("LD_LIBRARY_PATH", sim_dir()));
    assert!(ok, "{err}");
    let (samples, types) = parse_openmetrics(&out);
    for (name, kind) in [
        ("vgpu_memory_limit_bytes", "gauge"),
        ("vgpu_memory_used_bytes", "gauge"),
        ("vgpu_memory_peak_bytes", "gauge"),
        ("vgpu_gpu_time_seconds", "counter"),
        ("vgpu_throttled_seconds", "counter"),
        ("vgpu_sm_limit_percent", "gauge"),
        ("vgpu_alloc_denied", "counter"),
        ("vgpu_kernel_launches", "counter"),
        ("vgpu_process_memory_used_bytes", "gauge"),
        ("vgpu_process_memory_peak_bytes", "gauge"),
        ("vgpu_process_gpu_time_seconds", "counter"),
        ("vgpu_process_throttled_seconds", "counter"),
        ("vgpu_process_alloc_denied", "counter"),
        ("vgpu_process_kernel_launches", "counter"),
        ("vgpu_build_info", "gauge"),
        ("vgpu_region_last_update_timestamp_seconds", "gauge"),
        ("vgpu_region_stale", "gauge"),
    ] {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name}: {out}"
        );
    }
    // Every HELP says whose figure it is.
    for l in out.lines().filter(|l| l.starts_with("# HELP vgpu_")) {
        let name = l.split(' ').nth(2).unwrap();
        let whose = if name.starts_with("vgpu_process_") {
            "Process: "
        } else if name == "vgpu_build_info" {
            "exporter"
        } else {
            "Container: "
        };
        assert!(l.contains(whose), "{l}");
    }
    let series =
        |name: &str, region: &Path, pid: Option<u32>| -> Vec<(BTreeMap<String, String>, f64)> {
            samples
                .iter()
                .filter(|((n, l), _)| {
                    n == name
                        && l.get("region").map(String::as_str)
                            == Some(&*region.display().to_string())
                        && l.get("pid").map(String::as_str) == pid.map(|p| p.to_string()).as_deref()
                        // Device 0 (the probes use it; region-wide families have none).
                        && l.get("device").is_none_or(|d| d == "0")
                })
                .map(|((_, l), v)| (l.clone(), *v))
                .collect()
        };
    let get = |name: &str, region: &Path, pid: Option<u32>| -> f64 {
        let s = series(name, region, pid);
        assert_eq!(
            s.len(),
            1,
            "{name} {} {pid:?}: {s:?}\n{out}",
            region.display()
        );
        s[0].1
    };
    // Labels: the device's region index, its UUID and NVML index as dcgm-exporter names them.
    let (l, _) = &series("vgpu_memory_used_bytes", &ra, None)[0];
    assert_eq!(l["device"], "0", "{l:?}");
    assert!(l["UUID"].starts_with("GPU-"), "{l:?}");
    assert_eq!(l["gpu"], "0", "{l:?}");
    let held_a = (SIM_CTX + 600 * MIB) as f64;
    let held_a2 = (SIM_CTX + 100 * MIB) as f64;
    assert_eq!(get("vgpu_memory_limit_bytes", &ra, None), (2 * GIB) as f64);
    assert_eq!(get("vgpu_memory_used_bytes", &ra, None), held_a + held_a2);
    assert_eq!(
        get("vgpu_process_memory_used_bytes", &ra, Some(a.pid())),
        held_a
    );
    assert_eq!(
        get("vgpu_process_memory_used_bytes", &ra, Some(a2.pid())),
        held_a2
    );
    assert_eq!(
        get("vgpu_process_memory_peak_bytes", &ra, Some(a.pid())),
        held_a
    );
    // No double counting: a sum over one family is the container's use, not twice it.
    let sum: f64 = samples
        .iter()
        .filter(|((n, l), _)| {
            n == "vgpu_memory_used_bytes" && l.get("region") == Some(&ra.display().to_string())
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(sum, held_a + held_a2);
    assert!(
        !samples
            .keys()
            .any(|(n, l)| n.starts_with("vgpu_memory") && l.contains_key("pid")),
        "container families carry no pid"
    );
    // The 5 GiB allocation was refused (the ledger counts each refused charge).
    let denied = get("vgpu_alloc_denied_total", &ra, None);
    assert!(denied >= 1.0, "{denied}");
    assert_eq!(
        get("vgpu_process_alloc_denied_total", &ra, Some(a.pid())),
        denied
    );
    assert_eq!(get("vgpu_memory_limit_bytes", &rb, None), GIB as f64);
    assert_eq!(get("vgpu_sm_limit_percent", &rb, None), 50.0);
    assert_eq!(
        get("vgpu_process_memory_used_bytes", &rb, Some(b.pid())),
        SIM_CTX as f64
    );
    // GPU time: measured under the SM limit (20 kernels), absent (not 0) where
    // nothing measures it.
    // (The compute limiter reports per window while the process runs, and the snapshot reads
    // the container's totals and the process's counters one after the other: the values
    // themselves race with the workload, their presence does not.)
    let gpu_b = get("vgpu_gpu_time_seconds_total", &rb, None);
    let launches = get("vgpu_kernel_launches_total", &rb, None);
    assert!(
        gpu_b >= 0.0 && (0.0..=20.0).contains(&launches),
        "{gpu_b} {launches}"
    );
    // The process's own series: present, and within what the process can have done (it
    // launches 20 kernels; its GPU time is a finite, non-negative number of seconds).
    let p_launches = get("vgpu_process_kernel_launches_total", &rb, Some(b.pid()));
    let p_gpu = get("vgpu_process_gpu_time_seconds_total", &rb, Some(b.pid()));
    assert!(
        (0.0..=20.0).contains(&p_launches) && p_gpu.is_finite() && p_gpu >= 0.0,
        "process series: launches {p_launches}, GPU time {p_gpu}"
    );
    assert!(get("vgpu_throttled_seconds_total", &rb, None) >= 0.0);
    for name in [
        "vgpu_gpu_time_seconds_total",
        "vgpu_throttled_seconds_total",
        "vgpu_kernel_launches_total",
    ] {
        assert!(series(name, &ra, None).is_empty(), "{name} for ra\n{out}");
        assert!(series(name, &ra, Some(a.pid())).is_empty());
    }
    // No SM limit on ra: no series.
    assert!(series("vgpu_sm_limit_percent", &ra, None).is_empty());
    // Live regions are not stale; their last update is now.
    assert_eq!(get("vgpu_region_stale", &ra, None), 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    let upd = get("vgpu_region_last_update_timestamp_seconds", &rb, None);
    assert!((now - upd).abs() < 120.0, "{upd} vs {now}");
    let info = |component: &str| -> Vec<_> {
        samples
            .iter()
            .filter(|((n, l), _)| {
                n == "vgpu_build_info" && l.get("component").map(String::as_str) == Some(component)
            })
            .collect()
    };
    let exporter = info("exporter");
    assert_eq!(exporter.len(), 1);
    let ((_, l), v) = exporter[0];
    assert_eq!(*v, 1.0);
    assert_eq!(l["version"], env!("CARGO_PKG_VERSION"));
    assert!(!l["commit"].is_empty());
    // Each container's library (one version here), with the container's labels.
    let libs = info("library");
    assert_eq!(libs.len(), 2, "{libs:?}");
    assert!(libs.iter().all(|((_, l), _)| l.contains_key("region")));
    let regions: BTreeSet<&String> = samples
        .keys()
        .filter_map(|(_, l)| l.get("region"))
        .collect();
    assert_eq!(regions.len(), 2, "{regions:?}");

    // Over HTTP: OpenMetrics when the Accept header asks for it (as Prometheus does), the
    // classic text format otherwise.
    let (server, addr) = serve(&["--region", ra.to_str().unwrap()]);
    let _server = Killed(server);
    let (head, body) = http_get_with(
        &addr,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    let (samples, _) = parse_openmetrics(&body);
    assert!(
        samples
            .keys()
            .any(|(n, l)| n == "vgpu_process_memory_used_bytes"
                && l.get("pid") == Some(&a.pid().to_string()))
    );
    let (head, body) = http_get(&addr, "/metrics");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(!body.contains("# EOF"), "{body}");
    assert!(
        body.contains("# TYPE vgpu_gpu_time_seconds_total counter")
            || body.contains("# TYPE vgpu_alloc_denied_total counter"),
        "{body}"
    );
    drop(a);
    drop(a2);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_once_text_shows_the_holders() {
    let region = fresh_region();
    let (a, _) = Holder::start(
        Probe::new().limit("2g").region(&region),
        &["init", "ctx", "alloc:600m"],
    );
    let (ok, out, err) = run(vgpu()
        .args(["top", "--once", "--interval", "50", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&*a.pid().to_string()))
        .unwrap_or_else(|| panic!("no line for pid {} in\n{out}", a.pid()));
    assert!(line.contains("903 MiB"), "{line}");
    assert!(
        line.ends_with(&probe_command(&["init", "ctx", "alloc:600m", "hold"])),
        "{line}"
    );
    assert!(out.contains("GPU%"), "{out}");
    let dev = out.lines().find(|l| l.starts_with("0 ")).unwrap();
    assert!(dev.contains("2 GiB") && dev.contains("903 MiB"), "{dev}");
    drop(a);
}

fn doctor() -> Command {
    let mut c = vgpu();
    c.arg("doctor")
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g");
    c
}

#[test]
fn doctor_passes_against_the_simulator() {
    let (ok, out, err) = run(doctor().arg("--lib").arg(libvgpu()));
    assert!(ok, "doctor failed:\n{out}\n{err}");
    for check in [
        "PASS driver",
        "PASS nvml",
        "PASS library",
        "PASS preload",
        "PASS context",
        "PASS cuMemGetInfo",
        "PASS nvml memory",
        "PASS allocation limit",
        "SKIP compute limit",
    ] {
        assert!(out.contains(check), "{check} missing:\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");
    // With a compute limit, launches are checked too.
    let (ok, out, err) = run(doctor()
        .arg("--lib")
        .arg(libvgpu())
        .env("CUDA_DEVICE_SM_LIMIT", "25"));
    assert!(ok, "doctor failed:\n{out}\n{err}");
    assert!(out.contains("PASS compute limit"), "{out}");
    // A limit switched off by HAMi's policy switch is not a failure, and is said so.
    let (ok, out, err) = run(doctor()
        .arg("--lib")
        .arg(libvgpu())
        .env("CUDA_DEVICE_SM_LIMIT", "25")
        .env("GPU_CORE_UTILIZATION_POLICY", "disable"));
    assert!(ok, "doctor failed:\n{out}\n{err}");
    assert!(
        out.contains("SKIP compute limit: GPU_CORE_UTILIZATION_POLICY=disable"),
        "{out}"
    );
}

#[test]
fn doctor_fails_with_a_hint_on_a_wrong_library() {
    let not_vgpu = sim_dir().join("libnvidia-ml.so.1");
    let (ok, out, _) = run(doctor().arg("--lib").arg(&not_vgpu));
    assert!(!ok, "{out}");
    // Not vgpu's library: one FAIL for that (its vgpu_version is missing), not one per check.
    let fail = out
        .lines()
        .position(|l| l.starts_with("FAIL library version"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(!out.contains("FAIL cuMemGetInfo"), "{out}");
    assert!(
        out.lines().nth(fail + 1).unwrap().starts_with("  hint: "),
        "{out}"
    );
    assert!(out.contains("enforcement is NOT active"), "{out}");
    // No library at all.
    let (ok, out, _) = run(doctor().arg("--lib").arg("/nonexistent/libvgpu.so"));
    assert!(!ok);
    assert!(out.contains("FAIL library"), "{out}");
    assert!(out.contains("hint: install libvgpu.so"), "{out}");
    // No driver.
    let (ok, out, _) = run(vgpu()
        .arg("doctor")
        .arg("--lib")
        .arg(libvgpu())
        .env("LD_LIBRARY_PATH", "/nonexistent"));
    if !Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        assert!(!ok);
        assert!(out.contains("FAIL driver"), "{out}");
    }
}

#[test]
fn status_of_a_container_whose_last_process_was_killed_shows_nothing_in_use() {
    // No vgpu process is left to reap the dead one: the monitor clears it itself.
    let region = fresh_region();
    let mut child = Probe::new()
        .limit("2g")
        .region(&region)
        .ops(&["init", "ctx", "alloc:600m", "hold"])
        .command()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut l = String::new();
        use std::io::BufRead;
        if out.read_line(&mut l).unwrap() == 0 || l.starts_with("OK hold") {
            break;
        }
    }
    assert_eq!(
        status_json(&region)["devices"][0]["used"],
        SIM_CTX + 600 * MIB
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let j = status_json(&region);
    assert_eq!(j["devices"][0]["used"], 0, "{j}");
    assert_eq!(j["processes"].as_array().unwrap().len(), 0, "{j}");
}
