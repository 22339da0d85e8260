//! An operator's view against the simulated driver (issue 14): metrics a cluster can use, an
//! HTTP endpoint no client can stall, `top` and `status` in pipes, a CLI without traps.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vgpu_tests::{Probe, probe};

const POD_UID: &str = "0f8c2c8e-8c0e-4a5b-9d1e-2f3a4b5c6d7e";

/// A fresh directory laid out as HAMi's `/usr/local/vgpu` on a node (the exporter watches its
/// `containers`).
fn node_dir(name: &str) -> PathBuf {
    let d = sim_dir()
        .parent()
        .unwrap()
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("containers").join(format!("{POD_UID}_trainer"))).unwrap();
    d
}

fn hami_region(dir: &Path) -> PathBuf {
    dir.join("containers")
        .join(format!("{POD_UID}_trainer"))
        .join("vgpu.cache")
}

fn metrics_once(args: &[&str]) -> (bool, String, String) {
    run(vgpu()
        .args(["metrics", "--once"])
        .args(args)
        .env("LD_LIBRARY_PATH", sim_dir()))
}

fn find_promtool() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

fn promtool_check(promtool: &Path, exposition: &str) {
    promtool_check_allowing(promtool, exposition, &[]);
}

/// `promtool check metrics`, passing also when its only complaints (lint findings, exit status
/// 3) are lines that contain one of `allowed`.
fn promtool_check_allowing(promtool: &Path, exposition: &str, allowed: &[&str]) {
    let mut c = vgpu_tests::dies_with_parent(&mut Command::new(promtool))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let only_allowed = out.status.code() == Some(3)
        && said
            .lines()
            .filter(|l| !l.trim().is_empty())
            .all(|l| allowed.iter().any(|a| l.contains(a)));
    assert!(
        out.status.success() || only_allowed,
        "promtool check metrics: {}\n{}{}\n{exposition}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_every_exposition() {
    let Some(promtool) = find_promtool() else {
        eprintln!(
            "SKIP promtool_accepts_every_exposition: promtool is not installed \
             (Debian package `prometheus`, binary /usr/bin/promtool)"
        );
        return;
    };
    let dir = node_dir("promtool");
    let (h, _) = Holder::start(
        Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "40")
            .region(&hami_region(&dir)),
        &["init", "ctx", "alloc:100m", "kernels:spin_1000us:1:5:0"],
    );
    // A second, finished container: a stale region.
    Probe::new()
        .limit("1g")
        .region(&dir.join("containers").join("other.cache"))
        .ops(&["init", "ctx", "alloc:50m"])
        .run()
        .success();
    let ctrs = dir.join("containers").display().to_string();
    for names in ["vgpu", "hami"] {
        let (ok, out, err) = metrics_once(&["--names", names, "--dir", &ctrs]);
        assert!(ok, "{err}");
        assert!(out.contains("container=\"trainer\""), "{out}");
        assert!(out.contains("other.cache"), "{out}");
        promtool_check(&promtool, &out);
    }
    // The legacy names are camelCase (HAMi's and Volcano's own): that lint finding only.
    let (ok, out, err) = metrics_once(&["--names", "legacy", "--dir", &ctrs]);
    assert!(ok, "{err}");
    assert!(out.contains("ctrname=\"trainer\""), "{out}");
    promtool_check_allowing(
        &promtool,
        &out,
        &["should be written in 'snake_case' not 'camelCase'"],
    );
    // Over HTTP with no Accept header: the text format, which promtool reads.
    let (server, addr) = serve(&["--dir", &ctrs]);
    let _server = Killed(server);
    let (head, body) = http_get(&addr, "/metrics");
    assert!(head.contains("version=0.0.4"), "{head}");
    promtool_check(&promtool, &body);
    drop(h);
    let _ = std::fs::remove_dir_all(&dir);
}

fn samples_of(out: &str) -> Samples {
    let om = if out.ends_with("# EOF\n") {
        out.to_owned()
    } else {
        panic!("expected OpenMetrics: {out}")
    };
    parse_openmetrics(&om).0
}

#[test]
fn kubernetes_identity_and_hami_names() {
    let dir = node_dir("identity");
    let region = hami_region(&dir);
    let (h, _) = Holder::start(
        Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .region(&region),
        &["init", "ctx", "alloc:200m", "kernels:spin_1000us:1:5:0"],
    );
    let used = (SIM_CTX + 200 * MIB) as f64;
    // vgpu's names: container and pod UID from the directory name.
    let ctrs = dir.join("containers").display().to_string();
    let (ok, out, err) = metrics_once(&["--format", "openmetrics", "--dir", &ctrs]);
    assert!(ok, "{err}");
    let s = samples_of(&out);
    let ((_, l), v) = s
        .iter()
        .find(|((n, l), _)| n == "vgpu_memory_used_bytes" && l["device"] == "0")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(*v, used);
    assert_eq!(l["container"], "trainer");
    assert_eq!(l["pod_uid"], POD_UID);
    // Pod name and namespace are not in the path, and the creator had no downward-API
    // variables: absent, not made up.
    assert!(
        !l.contains_key("pod") && !l.contains_key("namespace"),
        "{l:?}"
    );

    // HAMi's names and labels.
    let (server, addr) = serve(&["--names", "hami", "--dir", &ctrs]);
    let _server = Killed(server);
    let om = "Accept: application/openmetrics-text;version=1.0.0\r\n";
    let (_, first) = http_get_with(&addr, "/metrics", om);
    let (_, second) = http_get_with(&addr, "/metrics", om);
    let s1 = samples_of(&first);
    let s2 = samples_of(&second);
    let get = |s: &Samples, name: &str| -> Option<(BTreeMap<String, String>, f64)> {
        s.iter()
            .find(|((n, l), _)| {
                n == name && l.get("vdevice_index").map(String::as_str) == Some("0")
            })
            .map(|((_, l), v)| (l.clone(), *v))
    };
    let (l, v) = get(&s2, "hami_vgpu_memory_used_bytes").unwrap_or_else(|| panic!("{second}"));
    assert_eq!(v, used);
    assert_eq!(l["container"], "trainer");
    assert!(l["device_uuid"].starts_with("GPU-"), "{l:?}");
    // HAMi's monitor registers its collector with zone="vGPU" on every sample.
    assert_eq!(l["zone"], "vGPU", "{l:?}");
    assert_eq!(
        get(&s2, "hami_container_device_memory_bytes").map(|s| s.1),
        Some(used),
        "{second}"
    );
    assert_eq!(
        get(&s2, "hami_vgpu_memory_limit_bytes").unwrap().1,
        (2 * GIB) as f64
    );
    // Context memory apart from buffer memory, as the region keeps it (the simulator's
    // context reserve, then the 200 MiB allocation).
    assert_eq!(
        get(&s2, "hami_vgpu_memory_context_bytes").unwrap().1,
        SIM_CTX as f64
    );
    assert_eq!(
        get(&s2, "hami_vgpu_memory_buffer_bytes").unwrap().1,
        (200 * MIB) as f64
    );
    assert_eq!(get(&s2, "hami_vgpu_memory_module_bytes").unwrap().1, 0.0);
    // A ratio needs two scrapes: absent on the first, a fraction on the second.
    assert!(get(&s1, "hami_container_device_utilization_ratio").is_none());
    let (_, ratio) =
        get(&s2, "hami_container_device_utilization_ratio").unwrap_or_else(|| panic!("{second}"));
    assert!((0.0..=100.0).contains(&ratio), "{ratio}");
    assert!(!second.contains("# TYPE vgpu_"), "{second}");

    // `top` titles the pane by the container, not the file name.
    let (ok, out, err) = run(vgpu().args(["top", "--once", "--interval", "20", "--dir", &ctrs]));
    assert!(ok, "{err}");
    assert!(out.contains("pod 0f8c2c8e/trainer"), "{out}");
    drop(h);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Scrapes `addr` (OpenMetrics) every `every` until `pick` finds a value in a scrape, at most
/// `within`; returns the values found, in order.
fn scrape_until(
    addr: &str,
    every: Duration,
    within: Duration,
    pick: impl Fn(&Samples) -> Option<f64>,
) -> Vec<f64> {
    let om = "Accept: application/openmetrics-text;version=1.0.0\r\n";
    let start = Instant::now();
    let mut found = Vec::new();
    while start.elapsed() < within {
        let (_, body) = http_get_with(addr, "/metrics", om);
        if let Some(v) = pick(&samples_of(&body)) {
            found.push(v);
            if found.len() >= 2 {
                break;
            }
        }
        std::thread::sleep(every);
    }
    found
}

/// Issue 26 item 3: `hami_container_device_utilization_ratio` is a percentage, 0 to 100, as
/// HAMi's monitor sends it (`float64(smUtil)`, the percent HAMi-core publishes): a container
/// running kernels under a 50 % SM limit reads tens, not a fraction below 1, so that existing
/// HAMi dashboards read the same numbers.
#[test]
fn hami_utilization_is_a_percentage_as_hamis_monitor_sends_it() {
    let dir = node_dir("hami-util");
    let region = hami_region(&dir);
    // About 2 s of GPU time (1 ms kernels, one wave each) at 50 %: about 4 s of wall time.
    let _busy = Killed(
        Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .region(&region)
            .ops(&["init", "ctx", "kernels:spin_1000us:1:2000:0"])
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ctrs = dir.join("containers").display().to_string();
    let (server, addr) = serve(&["--names", "hami", "--dir", &ctrs]);
    let _server = Killed(server);
    let busy = scrape_until(
        &addr,
        Duration::from_millis(500),
        Duration::from_secs(30),
        |s| {
            s.iter()
                .find(|((n, l), v)| {
                    n == "hami_container_device_utilization_ratio"
                        && l.get("vdevice_index").map(String::as_str) == Some("0")
                        && **v > 0.0
                })
                .map(|(_, v)| *v)
        },
    );
    assert!(!busy.is_empty(), "no utilisation sample while kernels ran");
    for u in &busy {
        assert!(
            (5.0..=100.0).contains(u),
            "utilisation {u} under a 50 % limit: not a percentage ({busy:?})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 26 item 4: `--names legacy` serves the names of Volcano's vGPU monitor and of HAMi's
/// monitor with `--legacy-metrics` (cmd/vGPUmonitor/metrics.go, cmd/vgpu-monitor/metrics.go),
/// with their labels `podnamespace`, `podname`, `ctrname`, `vdeviceid`, `deviceuuid` (the
/// first 40 bytes of the UUID) and their collector's `zone="vGPU"`; `--names hami,legacy`
/// serves both, as HAMi's monitor does with `--legacy-metrics`.
#[test]
fn legacy_names_as_volcanos_monitor_and_hamis_legacy_metrics() {
    let dir = node_dir("legacy");
    let region = hami_region(&dir);
    // 200 MiB held while about 2 s of kernels run at 50 %.
    let _busy = Killed(
        Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .env("POD_NAMESPACE", "ml-team")
            .env("POD_NAME", "trainer-0")
            .env("CONTAINER_NAME", "trainer")
            .region(&region)
            .ops(&["init", "ctx", "alloc:200m", "kernels:spin_1000us:1:2000:0"])
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let used = (SIM_CTX + 200 * MIB) as f64;
    let ctrs = dir.join("containers").display().to_string();
    let (server, addr) = serve(&["--names", "legacy", "--dir", &ctrs]);
    let _server = Killed(server);
    // Scrapes until the kernels show (utilisation and last kernel need two scrapes).
    let om = "Accept: application/openmetrics-text;version=1.0.0\r\n";
    let start = Instant::now();
    let dev0 = |s: &Samples, name: &str| -> Option<(BTreeMap<String, String>, f64)> {
        s.iter()
            .find(|((n, l), _)| n == name && l.get("vdeviceid").map(String::as_str) == Some("0"))
            .map(|((_, l), v)| (l.clone(), *v))
    };
    let (out, s) = loop {
        let (_, out) = http_get_with(&addr, "/metrics", om);
        let s = samples_of(&out);
        let busy = dev0(&s, "Device_utilization_desc_of_container").is_some_and(|(_, v)| v > 0.0);
        let held = dev0(&s, "vGPU_device_memory_usage_in_bytes").is_some_and(|(_, v)| v == used);
        if busy && held && dev0(&s, "Device_last_kernel_of_container").is_some() {
            break (out, s);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no scrape showed the running container:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let get = |name: &str| dev0(&s, name).unwrap_or_else(|| panic!("no {name}:\n{out}"));
    let (l, v) = get("vGPU_device_memory_usage_in_bytes");
    assert_eq!(v, used);
    assert_eq!(l["podnamespace"], "ml-team", "{l:?}");
    assert_eq!(l["podname"], "trainer-0", "{l:?}");
    assert_eq!(l["ctrname"], "trainer", "{l:?}");
    assert_eq!(l["pod_uid"], POD_UID, "{l:?}");
    assert_eq!(l["zone"], "vGPU", "{l:?}");
    assert!(
        l["deviceuuid"].starts_with("GPU-") && l["deviceuuid"].len() == 40,
        "{l:?}"
    );
    assert_eq!(get("vGPU_device_memory_limit_in_bytes").1, (2 * GIB) as f64);
    let (l, v) = get("Device_memory_desc_of_container");
    assert_eq!(v, used);
    assert_eq!(l["context"], SIM_CTX.to_string(), "{l:?}");
    assert_eq!(l["module"], "0", "{l:?}");
    assert_eq!(l["data"], (200 * MIB).to_string(), "{l:?}");
    assert_eq!(l["offset"], "0", "{l:?}");
    let util = get("Device_utilization_desc_of_container").1;
    assert!((5.0..=100.0).contains(&util), "{util}");
    assert!(get("Device_last_kernel_of_container").1 >= 0.0);
    assert!(!out.contains("# TYPE hami_"), "{out}");
    assert!(!out.contains("# TYPE vgpu_memory"), "{out}");
    // Both of HAMi's sets at once, as HAMi's monitor serves them with --legacy-metrics.
    let (ok, out, err) = metrics_once(&["--names", "hami,legacy", "--dir", &ctrs]);
    assert!(ok, "{err}");
    assert!(
        out.contains("# TYPE hami_vgpu_memory_used_bytes gauge")
            && out.contains("# TYPE vGPU_device_memory_usage_in_bytes gauge"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn finished_containers_are_stale_then_dropped() {
    let region = fresh_region();
    Probe::new()
        .limit("1g")
        .region(&region)
        .ops(&["init", "ctx", "alloc:100m"])
        .run()
        .success();
    let r = region.to_str().unwrap();
    let (ok, out, err) = metrics_once(&[
        "--format",
        "openmetrics",
        "--drop-after",
        "never",
        "--region",
        r,
    ]);
    assert!(ok, "{err}");
    let s = samples_of(&out);
    let stale = s
        .iter()
        .find(|((n, _), _)| n == "vgpu_region_stale")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(*stale.1, 1.0);
    let used = s
        .iter()
        .find(|((n, l), _)| n == "vgpu_memory_used_bytes" && l["device"] == "0")
        .unwrap();
    assert_eq!(*used.1, 0.0);
    // Past the grace period the region is no longer exported.
    let (ok, out, err) = metrics_once(&[
        "--format",
        "openmetrics",
        "--drop-after",
        "0s",
        "--region",
        r,
    ]);
    assert!(ok, "{err}");
    assert!(!out.contains(r), "{out}");
    assert!(out.contains("vgpu_build_info"), "{out}");
    // `top` marks it.
    let (ok, out, err) = run(vgpu()
        .args(["top", "--once", "--interval", "20", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    assert!(out.contains("[stale: no live process]"), "{out}");
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

#[test]
fn hostile_clients_do_not_stall_a_scrape_or_grow_the_exporter() {
    // Warm up (first scrape), then note the memory.
    let (h, _server, addr, pid) = exporter_of_a_holder();
    let rss0 = rss_kib(pid);

    // A POST declaring a 100 GB body, of which it sends a little and keeps the rest.
    let mut post = TcpStream::connect(&addr).unwrap();
    post.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n")
        .unwrap();
    let _ = post.write_all(&[b'x'; 32 << 10]);
    // A client that never finishes its head.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: 1\r\n")
        .unwrap();
    // A client sending endless headers, until the server closes on it.
    let flood_addr = addr.clone();
    let flood = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&flood_addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
        let line = format!("X-Flood: {}\r\n", "a".repeat(1000));
        let mut sent = 0usize;
        while sent < 256 << 20 {
            match s.write(line.as_bytes()) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        sent
    });
    // Meanwhile a scrape is answered at once (the old server drained the POST body first:
    // 11 s).
    let t0 = Instant::now();
    let (head, body) = http_get(&addr, "/metrics");
    let took = t0.elapsed();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("vgpu_memory_used_bytes"), "{body}");
    assert!(took < Duration::from_secs(2), "scrape took {took:?}");
    // The flood was cut off: the server read at most its header cap, so the client could only
    // fill the socket buffers.
    let sent = flood.join().unwrap();
    assert!(
        sent < 64 << 20,
        "the server kept reading headers: {sent} bytes"
    );
    // The POST was answered without its body being read.
    let mut answer = Vec::new();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = post.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 405"),
        "{answer}"
    );
    let rss1 = rss_kib(pid);
    assert!(
        rss1 < rss0 + (32 << 10),
        "exporter memory grew from {rss0} to {rss1} KiB"
    );
    drop(slow);
    drop(h);
}

#[test]
fn status_and_top_survive_a_closed_pipe() {
    let region = fresh_region();
    let (h, _) = Holder::start(
        Probe::new().limit("1g").region(&region),
        &["init", "ctx", "alloc:100m"],
    );
    for args in [
        &["status"][..],
        &["top", "--interval", "20"][..],
        &["top", "--once", "--interval", "20"][..],
    ] {
        // The reader is gone before vgpu writes (`vgpu status | head -0`).
        let mut c = vgpu()
            .args(args)
            .arg("--region")
            .arg(&region)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(c.stdout.take());
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
    drop(h);
}

#[test]
fn json_for_doctor_limit_and_top() {
    let region = fresh_region();
    let (h, _) = Holder::start(
        Probe::new().limit("2g").region(&region),
        &["init", "ctx", "alloc:100m"],
    );
    let (ok, out, err) = run(vgpu()
        .args([
            "limit",
            "--json",
            "--memory-device",
            "0=1g",
            "--sm",
            "none",
            "--region",
        ])
        .arg(&region));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let mem = j
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["limit"] == "memory")
        .unwrap();
    assert_eq!(mem["index"], 0);
    assert_eq!(mem["old"], 2 * GIB);
    assert_eq!(mem["new"], GIB);
    assert_eq!(mem["used"], SIM_CTX + 100 * MIB);

    let (ok, out, err) = run(vgpu()
        .args(["top", "--once", "--json", "--interval", "20", "--region"])
        .arg(&region)
        .env("LD_LIBRARY_PATH", sim_dir()));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let r = &j["regions"][0];
    assert_eq!(r["stale"], false);
    assert_eq!(r["devices"][0]["limit"], GIB);
    assert_eq!(r["processes"][0]["pid"], h.pid());
    assert!(r["gpu_percent"].is_array(), "{r}");
    // NVML's physical GPUs, with what is used outside vgpu.
    assert!(
        j["gpus"][0]["uuid"].as_str().unwrap().starts_with("GPU-"),
        "{j}"
    );
    assert!(j["gpus"][0].get("outside_vgpu").is_some(), "{j}");

    let (ok, out, err) = run(vgpu()
        .args(["doctor", "--json", "--lib"])
        .arg(libvgpu())
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g"));
    assert!(ok, "{out}\n{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(j["active"], true);
    let checks = j["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "allocation limit" && c["verdict"] == "pass"),
        "{j}"
    );
    drop(h);
}

#[test]
fn missing_inputs_fail_with_a_clear_message() {
    let missing = fresh_region();
    let (ok, _, err) = metrics_once(&["--region", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains(&*missing.display().to_string()), "{err}");
    for cmd in [
        &["status"][..],
        &["top", "--once"][..],
        &["metrics", "--once"][..],
    ] {
        let out = vgpu()
            .args(cmd)
            .args(["--dir", "/nonexistent/vgpu-dir"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("--dir /nonexistent/vgpu-dir"),
            "{cmd:?}: {err}"
        );
    }
    // A device the machine does not have (the simulator has 2 GPUs).
    let out = vgpu()
        .args(["run", "--lib"])
        .arg(libvgpu())
        .args(["--memory-device", "5=2g", "--", "true"])
        .env("LD_LIBRARY_PATH", sim_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--memory-device 5") && err.contains("2 GPU(s)"),
        "{err}"
    );
    let out = vgpu()
        .args(["run", "--lib"])
        .arg(libvgpu())
        .args(["--memory-device", "1=2g", "--", "true"])
        .env("LD_LIBRARY_PATH", sim_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_flags_are_strict() {
    let out = vgpu()
        .args(["run", "--memroy", "4g", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--memroy'"), "{err}");
    assert!(err.contains("'--memory'"), "{err}");
}

fn under_vgpu_run(region: Option<&Path>, ops: &[&str]) -> Command {
    let mut c = vgpu();
    c.args(["run", "--lib"])
        .arg(libvgpu())
        .args(["--memory", "1g"]);
    if let Some(r) = region {
        c.arg("--region").arg(r);
    }
    c.arg("--").arg(probe()).args(ops);
    c.env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g");
    c
}

#[test]
fn each_run_is_a_container_of_its_own_unless_it_joins_one() {
    let ops = ["init", "ctx", "alloc:600m", "hold"];
    // Two separate jobs: 903 MiB each under 1 GiB each.
    let (a, la) = Holder::spawn(under_vgpu_run(None, &ops));
    let (b, lb) = Holder::spawn(under_vgpu_run(None, &ops));
    assert!(la.iter().any(|l| l.starts_with("OK alloc")), "{la:?}");
    assert!(lb.iter().any(|l| l.starts_with("OK alloc")), "{lb:?}");
    // Each in its own region, named by its PID (exec keeps the vgpu run's PID).
    let dir = PathBuf::from(format!(
        "/tmp/vgpu-{}",
        std::fs::metadata("/proc/self")
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.uid()
            })
            .unwrap()
    ));
    for h in [&a, &b] {
        let r = dir.join(format!("run-{}.cache", h.pid()));
        let (ok, out, err) = run(vgpu().args(["status", "--json", "--region"]).arg(&r));
        assert!(ok, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(j["processes"].as_array().unwrap().len(), 1, "{j}");
        assert_eq!(j["processes"][0]["pid"], h.pid());
    }
    drop(a);
    drop(b);
    // Joined: one budget, the second job does not fit.
    let shared = fresh_region();
    let (c, lc) = Holder::spawn(under_vgpu_run(Some(&shared), &ops));
    let (d, ld) = Holder::spawn(under_vgpu_run(Some(&shared), &ops));
    assert!(lc.iter().any(|l| l.starts_with("OK alloc")), "{lc:?}");
    assert!(!ld.iter().any(|l| l.starts_with("OK alloc")), "{ld:?}");
    drop(c);
    drop(d);
}

#[test]
fn version_completions_and_man_page() {
    let (ok, out, _) = run(vgpu().arg("--version"));
    assert!(ok);
    assert!(
        out.starts_with(&format!("vgpu {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(out.contains(", built "), "{out}");
    let (ok, out, err) = run(vgpu().args(["completions", "bash"]));
    assert!(ok, "{err}");
    assert!(
        out.contains("_vgpu()") && out.contains("--memory-device"),
        "{out}"
    );
    let (ok, out, err) = run(vgpu().args(["man"]));
    assert!(ok, "{err}");
    assert!(out.contains(".TH vgpu"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(vgpu().args(["man", "--out"]).arg(dir.path()));
    assert!(ok, "{err}");
    for page in ["vgpu.1", "vgpu-run.1", "vgpu-metrics.1"] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
}

#[test]
fn a_probe_run_from_a_long_path_is_found_by_pid() {
    // The region keeps 63 bytes of the command line: from a long checkout path, the program's
    // name is cut off. status and top must still list the process (by PID), and the command
    // shown is what the region holds.
    let long = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("long-{}", std::process::id()))
        .join("a-directory-name-long-enough-to-push-the-program-name-past-64-bytes");
    std::fs::create_dir_all(&long).unwrap();
    let link = long.join("probe");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(probe(), &link).unwrap();
    assert!(link.as_os_str().len() > 64);
    let region = fresh_region();
    let base = Probe::new()
        .limit("1g")
        .region(&region)
        .ops(&["init", "ctx", "alloc:100m", "hold"])
        .command();
    let mut c = Command::new(&link);
    vgpu_tests::dies_with_parent(&mut c);
    c.args(base.get_args());
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let (h, _) = Holder::spawn(c);
    let (ok, out, err) = run(vgpu().args(["status", "--json", "--region"]).arg(&region));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &j["processes"][0];
    assert_eq!(p["pid"], h.pid());
    let cmd = p["command"].as_str().unwrap();
    assert_eq!(cmd.as_bytes(), &link.as_os_str().as_encoded_bytes()[..63]);
    let (ok, out, err) = run(vgpu()
        .args(["top", "--once", "--interval", "20", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&*h.pid().to_string()))
        .unwrap_or_else(|| panic!("no line for {} in\n{out}", h.pid()));
    assert!(line.contains("403 MiB"), "{line}");
    drop(h);
    let _ = std::fs::remove_dir_all(long.parent().unwrap());
}

#[test]
fn a_pid_inside_the_title_is_not_the_process_row() {
    // As in the failure CI once saw: a PID's digits (here 1062) inside the region path's random
    // number, in the title line above the table.
    let title = "┌ /tmp/ci/target/debug/vgpu-tests/regions/639-20-1796106207974971756.cach┐";
    assert!(!process_row(title, 1062));
    assert!(!process_row("│ 0   GPU-a   30%   903 MiB / 2 GiB", 903));
    assert!(process_row("│ 1062  vgpu-tests  0  12%  903 MiB", 1062));
}

#[test]
fn top_on_an_80_by_24_terminal_and_ctrl_c() {
    if tmux(&["-V"]).is_none() {
        eprintln!("SKIP top_on_an_80_by_24_terminal_and_ctrl_c: tmux is not installed");
        return;
    }
    let region = fresh_region();
    let (h, _) = Holder::start(
        Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "30")
            .region(&region),
        &["init", "ctx", "alloc:600m"],
    );
    let session = format!("vgpu-top-{}", std::process::id());
    let cmd = format!(
        "{} top --interval 100 --region {}; echo EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_vgpu"),
        region.display()
    );
    let _s = TmuxSession::start(&session, 80, 24, &cmd);
    let pid = h.pid();
    let screen = pane_until(&session, |s| s.lines().any(|l| process_row(l, pid)));
    // The device row with its share, SM limit, use and limit; the process row with its
    // full PID and memory with units.
    assert!(
        screen.contains("GPU%") && screen.contains("USED"),
        "{screen}"
    );
    let dev = screen
        .lines()
        .find(|l| l.contains("903 MiB") && l.contains("2 GiB"))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(dev.contains("30%"), "{dev}");
    let row = screen
        .lines()
        .find(|l| process_row(l, pid))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(row.contains("903 MiB"), "{row}");
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    tmux(&["send-keys", "-t", &session, "C-c"]).unwrap();
    let screen = pane_until(&session, |s| s.contains("EXITED"));
    assert!(screen.contains("EXITED 0"), "{screen}");
    drop(h);
}

/// Issue 14: the out-of-memory hint points at the real cause: the container's shared budget
/// held by other processes (named, with how much they hold), or this process alone.
#[test]
fn the_oom_hint_says_who_holds_the_containers_budget() {
    use vgpu_policy::size::format_size;
    // One process alone.
    let r = Probe::new()
        .limit("1g")
        .ops(&["init", "ctx", "alloc:400m", "alloc:600m"])
        .run();
    assert!(r.ok("alloc"), "{}", r.stdout);
    assert_eq!(r.nth("alloc", 1)[0], "ERR", "{}", r.stdout);
    let hint = format!(
        "this process alone holds it ({})",
        format_size(SIM_CTX + 400 * MIB)
    );
    assert!(r.stderr.contains(&hint), "{}", r.stderr);
    assert!(!r.stderr.contains("other processes"), "{}", r.stderr);

    // Two processes sharing the container's region: the other one holds most of it.
    let region = fresh_region();
    let (holder, _) = Holder::start(
        Probe::new().limit("2g").region(&region),
        &["init", "ctx", "alloc:1200m"],
    );
    let r = Probe::new()
        .limit("2g")
        .region(&region)
        .ops(&["init", "ctx", "alloc:400m"])
        .run();
    assert_eq!(r.line("alloc")[0], "ERR", "{}", r.stdout);
    let hint = format!(
        "the container's shared budget is what is full: other processes of the container hold {} of it, this process {}",
        format_size(SIM_CTX + 1200 * MIB),
        format_size(SIM_CTX)
    );
    assert!(r.stderr.contains(&hint), "{}", r.stderr);
    drop(holder);
    let _ = std::fs::remove_file(&region);
}

/// Issue 14: a container whose processes have the downward-API variables (`POD_NAMESPACE`,
/// `POD_NAME`, `CONTAINER_NAME`) is labelled with them: the region's creator records them, and
/// `metrics` (both namings), `status` and `top` read them from the region; the path's pod UID
/// and container stay the identity (issue 26 item 7: a record that contradicts the path is
/// dropped, see tests/tenants.rs).
#[test]
fn downward_api_identity_labels_the_containers_series() {
    let dir = node_dir("downward");
    let region = hami_region(&dir);
    let (h, _) = Holder::start(
        Probe::new()
            .limit("1g")
            .region(&region)
            .env("POD_NAMESPACE", "ml-team")
            .env("POD_NAME", "trainer-7d9f8b6c4-x2x9q")
            .env("CONTAINER_NAME", "trainer"),
        &["init", "ctx", "alloc:100m"],
    );
    let ctrs = dir.join("containers").display().to_string();
    for names in ["vgpu", "hami"] {
        let (ok, out, err) =
            metrics_once(&["--format", "openmetrics", "--names", names, "--dir", &ctrs]);
        assert!(ok, "{err}");
        let s = samples_of(&out);
        let used = if names == "vgpu" {
            "vgpu_memory_used_bytes"
        } else {
            "hami_vgpu_memory_used_bytes"
        };
        let ((_, l), _) = s
            .iter()
            .find(|((n, _), _)| n == used)
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(l["namespace"], "ml-team", "{l:?}");
        assert_eq!(l["pod"], "trainer-7d9f8b6c4-x2x9q", "{l:?}");
        assert_eq!(l["container"], "trainer", "{l:?}");
        assert_eq!(l["pod_uid"], POD_UID, "{l:?}");
    }
    let r = region.display().to_string();
    let (ok, out, err) = run(vgpu().args(["status", "--region", &r]));
    assert!(ok, "{err}");
    assert!(
        out.contains("namespace ml-team, pod trainer-7d9f8b6c4-x2x9q, container trainer"),
        "{out}"
    );
    let (ok, out, err) = run(vgpu().args(["status", "--region", &r, "--json"]));
    assert!(ok, "{err}");
    assert!(
        out.contains("\"pod\": \"trainer-7d9f8b6c4-x2x9q\""),
        "{out}"
    );
    let (ok, out, err) = run(vgpu().args(["top", "--once", "--interval", "20", "--dir", &ctrs]));
    assert!(ok, "{err}");
    assert!(
        out.contains("ml-team/trainer-7d9f8b6c4-x2x9q/trainer"),
        "{out}"
    );
    drop(h);
    let _ = std::fs::remove_dir_all(&dir);
}
