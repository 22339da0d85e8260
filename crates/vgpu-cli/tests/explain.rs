//! A tool that explains what it did (issue 26 items 9-12), against the simulated driver:
//! refusals recorded in the region and shown by `status`, `top` and the exporter; observing
//! without limiting; `doctor` naming what turns enforcement off and the library's version;
//! who holds each GPU's node token; `top`'s history, wide terminals and signals; the
//! exporter's log of what it watches.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use vgpu_tests::{Probe, probe};

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The newest refusal's time in a `top --once --json` document.
fn t_ms(j: &serde_json::Value) -> f64 {
    j["regions"][0]["refusals"][0]["time_ms"].as_f64().unwrap()
}

/// Item 9: a refused allocation is recorded in the region with what was asked, what the
/// container used of which limit, what the refused process held, which process holds the
/// most of the budget, and when; `status` (text and JSON) and `top --json` show it.
#[test]
fn a_refused_allocation_is_in_status_with_who_holds_the_budget() {
    let region = fresh_region();
    let (holder, _) = Holder::start(
        Probe::new().limit("2g").region(&region),
        &["init", "ctx", "alloc:1200m"],
    );
    let before = now_ms();
    let (refused, lines) = Holder::start(
        Probe::new().limit("2g").region(&region),
        &["init", "ctx", "alloc:400m"],
    );
    assert!(
        lines.iter().any(|l| l.starts_with("ERR alloc")),
        "{lines:?}"
    );
    let after = now_ms();
    let j = status_json(&region);
    let log = j["refusals"].as_array().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(log.len(), 1, "{j}");
    let r = &log[0];
    assert_eq!(r["index"], 0, "{r}");
    assert_eq!(r["uuid"], j["devices"][0]["uuid"], "{r}");
    assert_eq!(r["pid"], refused.pid(), "{r}");
    assert_eq!(r["requested"], 400 * MIB, "{r}");
    assert_eq!(r["used"], 2 * SIM_CTX + 1200 * MIB, "{r}");
    assert_eq!(r["limit"], 2 * GIB, "{r}");
    assert_eq!(r["own"], SIM_CTX, "{r}");
    assert_eq!(r["holder_pid"], holder.pid(), "{r}");
    assert_eq!(r["holder_used"], SIM_CTX + 1200 * MIB, "{r}");
    let t = r["time_ms"].as_u64().unwrap();
    assert!((before..=after).contains(&t), "{before} <= {t} <= {after}");
    assert_eq!(j["devices"][0]["denied"], 1, "{j}");

    let (ok, out, err) = run(vgpu().args(["status", "--region"]).arg(&region));
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.contains("400 MiB") && l.contains(&refused.pid().to_string()))
        .unwrap_or_else(|| panic!("no refusal line in\n{out}"));
    use vgpu_policy::size::format_size;
    for s in [
        format!(
            "pid {} ({})",
            holder.pid(),
            format_size(SIM_CTX + 1200 * MIB)
        ),
        format_size(2 * SIM_CTX + 1200 * MIB),
        "2 GiB".to_owned(),
    ] {
        assert!(line.contains(&s), "{s} in {line}\n{out}");
    }
    let (ok, out, err) = run(vgpu()
        .args(["top", "--once", "--json", "--interval", "20", "--region"])
        .arg(&region)
        .env("LD_LIBRARY_PATH", sim_dir()));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["regions"][0]["refusals"][0]["pid"], refused.pid(), "{j}");

    // The exporter: the newest refusal per device, and the library each container runs.
    let (ok, out, err) = run(vgpu()
        .args(["metrics", "--once", "--format", "openmetrics", "--region"])
        .arg(&region));
    assert!(ok, "{err}");
    let (samples, _) = parse_openmetrics(&out);
    let find = |name: &str| {
        samples
            .iter()
            .find(|((n, _), _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in\n{out}"))
    };
    let ((_, l), v) = find("vgpu_last_refusal_requested_bytes");
    assert_eq!(*v, (400 * MIB) as f64);
    assert_eq!(l["pid"], refused.pid().to_string(), "{l:?}");
    assert_eq!(l["holder_pid"], holder.pid().to_string(), "{l:?}");
    assert_eq!(l["device"], "0", "{l:?}");
    let ((_, _), t) = find("vgpu_last_refusal_timestamp_seconds");
    assert!((*t * 1e3 - t_ms(&j)).abs() < 1.0, "{t}");
    let libs: Vec<_> = samples
        .keys()
        .filter(|(n, l)| {
            n == "vgpu_build_info" && l.get("component").map(String::as_str) == Some("library")
        })
        .collect();
    assert_eq!(libs.len(), 1, "{out}");
    assert_eq!(libs[0].1["version"], env!("CARGO_PKG_VERSION"));
    assert!(libs[0].1.contains_key("region"), "{libs:?}");
    drop(refused);
    drop(holder);
    let _ = std::fs::remove_file(&region);
}

/// Item 9: at the default log level a process prints its first refusal only; at
/// `LIBCUDA_LOG_LEVEL=4` every refusal is one line. Each is in the region's log either way.
#[test]
fn every_refusal_is_logged_at_debug_level_and_recorded() {
    let ops = ["init", "ctx", "alloc:600m", "alloc:600m", "alloc:600m"];
    for (level, lines) in [(None, 1), (Some("4"), 2)] {
        let region = fresh_region();
        let mut p = Probe::new().limit("1g").region(&region).ops(&ops);
        if let Some(l) = level {
            p = p.env("LIBCUDA_LOG_LEVEL", l);
        }
        let r = p.run();
        assert_eq!(r.nth("alloc", 1)[0], "ERR", "{}", r.stdout);
        assert_eq!(r.nth("alloc", 2)[0], "ERR", "{}", r.stdout);
        let n = r.stderr.matches("out of memory on device 0").count();
        assert_eq!(n, lines, "level {level:?}:\n{}", r.stderr);
        let j = status_json(&region);
        assert_eq!(
            j["refusals"].as_array().map(Vec::len),
            Some(2),
            "level {level:?}: {j}"
        );
        let _ = std::fs::remove_file(&region);
    }
}

/// Item 10: `VGPU_OBSERVE=1` accounts without limiting: past the (HAMi-injected) memory limit
/// nothing is refused, the program sees the whole GPU, the region shows the memory and the
/// GPU time, and launches are not throttled under an SM limit.
#[test]
fn observing_accounts_memory_and_gpu_time_but_limits_nothing() {
    let region = fresh_region();
    let kernels = "kernels:spin_1000us:1:300:0";
    let t0 = Instant::now();
    let (h, lines) = Holder::start(
        Probe::new()
            .limit("1g")
            .env("CUDA_DEVICE_SM_LIMIT", "20")
            .env("VGPU_OBSERVE", "1")
            .region(&region),
        &["init", "ctx", "alloc:2g", "meminfo", kernels],
    );
    let took = t0.elapsed();
    assert!(lines.iter().any(|l| l.starts_with("OK alloc")), "{lines:?}");
    // 300 ms of kernels at 20 % would take 1.5 s; observed, they run at full speed.
    assert!(took < Duration::from_millis(1200), "{took:?} {lines:?}");
    let meminfo = lines.iter().find(|l| l.starts_with("OK meminfo")).unwrap();
    assert!(
        meminfo.contains(&format!("total={}", 16 * GIB)),
        "{meminfo}"
    );
    let j = status_json(&region);
    let d = &j["devices"][0];
    assert_eq!(d["limit"], serde_json::Value::Null, "{j}");
    assert_eq!(d["sm_limit"], serde_json::Value::Null, "{j}");
    assert_eq!(d["used"], SIM_CTX + 2 * GIB, "{j}");
    assert_eq!(d["denied"], 0, "{j}");
    // The window still open is reported at the next one or at exit; what is closed counts.
    let p = &j["processes"][0];
    assert_eq!(p["pid"], h.pid(), "{j}");
    assert_eq!(p["observing"], true, "{j}");
    assert!(
        p["library"].as_str().is_some_and(|l| l.starts_with("0.")),
        "{j}"
    );
    // The last launches are reported at the controller's next look (the program idles in
    // `hold`), and launches charged at the mean before their kernel was priced are corrected
    // when the price comes (later still on a loaded machine): wait for both.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut j = status_json(&region);
    while (j["devices"][0]["launches"].as_u64() < Some(300)
        || j["devices"][0]["gpu_ns"].as_u64() < Some(285_000_000))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        j = status_json(&region);
    }
    let gpu_ns = j["devices"][0]["gpu_ns"].as_u64().unwrap();
    assert!(gpu_ns >= 285_000_000, "{j}");
    assert_eq!(j["devices"][0]["launches"], 300, "{j}");
    assert_eq!(j["devices"][0]["throttled_ns"], 0, "{j}");
    drop(h);
    let _ = std::fs::remove_file(&region);
}

/// Item 10: `vgpu run --observe` leaves a region that shows what the command used, with no
/// limit; a plain unlimited run passes straight through.
#[test]
fn vgpu_run_observe_leaves_a_region_without_limits() {
    let region = fresh_region();
    let mut c = vgpu();
    c.args(["run", "--observe", "--lib"])
        .arg(libvgpu())
        .arg("--region")
        .arg(&region)
        .arg("--")
        .arg(probe())
        .args(["init", "ctx", "alloc:700m", "hold"])
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g");
    let (h, _) = Holder::spawn(c);
    let j = status_json(&region);
    assert_eq!(j["devices"][0]["used"], SIM_CTX + 700 * MIB, "{j}");
    assert_eq!(j["devices"][0]["limit"], serde_json::Value::Null, "{j}");
    assert_eq!(j["processes"][0]["pid"], h.pid(), "{j}");
    drop(h);
    let _ = std::fs::remove_file(&region);
}

fn doctor(env: &[(&str, &str)]) -> (bool, String) {
    let mut c = vgpu();
    c.args(["doctor", "--lib"])
        .arg(libvgpu())
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g");
    for (k, v) in env {
        c.env(k, v);
    }
    let (ok, out, err) = run(&mut c);
    (ok, format!("{out}{err}"))
}

/// Item 11: `doctor` names the setting that turns enforcement off rather than failing the
/// memory checks one by one, and still proves the library works without it.
#[test]
fn doctor_names_the_setting_that_turns_enforcement_off() {
    let (ok, out) = doctor(&[("CUDA_DISABLE_CONTROL", "true")]);
    assert!(!ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL") && l.contains("CUDA_DISABLE_CONTROL"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("true"), "{line}");
    assert!(out.contains("unset CUDA_DISABLE_CONTROL"), "{out}");
    // The library itself is checked without it: its checks pass.
    for check in ["PASS allocation limit", "PASS cuMemGetInfo"] {
        assert!(out.contains(check), "{check}\n{out}");
    }
    assert_eq!(out.matches("FAIL").count(), 1, "{out}");

    let (ok, out) = doctor(&[("VGPU_OBSERVE", "1")]);
    assert!(!ok, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("VGPU_OBSERVE")),
        "{out}"
    );

    let (ok, out) = doctor(&[
        ("GPU_CORE_UTILIZATION_POLICY", "disable"),
        ("CUDA_DEVICE_SM_LIMIT", "30"),
    ]);
    assert!(ok, "the memory limit holds: {out}");
    assert!(
        out.lines().any(|l| l.starts_with("WARN")
            && l.contains("GPU_CORE_UTILIZATION_POLICY=disable")
            && l.contains("SM limit")),
        "{out}"
    );
}

/// Item 11: `doctor` checks that the library is vgpu's (its `vgpu_version` symbol) and prints
/// its version; another shared object named libvgpu.so is named as such.
#[test]
fn doctor_checks_and_prints_the_librarys_version() {
    let (ok, out) = doctor(&[]);
    assert!(ok, "{out}");
    // PASS when the library and this command come from one commit; WARN names both when
    // they do not (an incremental build may rebuild one and not the other).
    let line = out
        .lines()
        .find(|l| l.starts_with("PASS library version") || l.starts_with("WARN library version"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(env!("CARGO_PKG_VERSION")), "{line}");
    assert!(line.contains("commit"), "{line}");

    // Another shared object under the name (HAMi-core's library is also libvgpu.so).
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("libvgpu.so");
    let sim = std::fs::read_dir(sim_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("libvgpu_sim_nvml"))
        .or_else(|| Some(sim_dir().join("libnvidia-ml.so.1")))
        .unwrap();
    std::fs::copy(&sim, &other).unwrap();
    let mut c = vgpu();
    c.args(["doctor", "--lib"])
        .arg(&other)
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g");
    let (ok, o, e) = run(&mut c);
    let out = format!("{o}{e}");
    assert!(!ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL library version"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("not vgpu's libvgpu.so"), "{line}");
    assert!(
        !out.contains("FAIL cuMemGetInfo"),
        "one cause, not every check failing: {out}"
    );
}

/// Item 11: `doctor`'s compute check prints the share it measured against the one asked.
#[test]
fn doctor_prints_the_measured_compute_share() {
    // Never above the limit by more than the tolerance where the machine is quiet: the
    // container's head start is spent before the check measures (measured from the start, it
    // read 67-68 % at 50 % and warned on a healthy machine, every time). On a loaded machine
    // one run may warn above it too: a controller starved of CPU keeps a deeper queue
    // (`limiter::MAX_LATE`, up to 40 ms more); with CI, a model sweep and a reviewer's builds on
    // two cores it read 65.7 % (7b6da68). So a warning above it is run again, up to twice, and
    // one of the three must read within it: the head start read the same each time, load does
    // not. Unlimited, it reads about 100 % (FAIL).
    let mut shares = Vec::new();
    for _ in 0..3 {
        let (ok, out) = doctor(&[("CUDA_DEVICE_SM_LIMIT", "50")]);
        let line = out
            .lines()
            .find(|l| l.contains("compute limit"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains("measured share"), "{line}");
        assert!(line.contains("of 50%"), "{line}");
        // Within ±5 points it passes; outside it warns (a loaded machine may do either).
        assert!(
            line.starts_with("PASS") || line.starts_with("WARN"),
            "{line}\n{out}"
        );
        assert!(ok || !line.starts_with("PASS"), "{out}");
        let share: f64 = line
            .split("measured share ")
            .nth(1)
            .and_then(|r| r.split('%').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        shares.push(share);
        if share <= 55.0 {
            return;
        }
    }
    panic!("the measured share read {shares:?} % at 50 %, above 55 each time");
}

/// Item 12: the exporter says on stderr what it watches, what it found and what it skipped,
/// once at start and again when that changes (it looks at each scrape).
#[test]
fn the_exporter_logs_what_it_watches_found_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("a.cache");
    // A file of a region's size that is no region: skipped, with the reason.
    let bad = dir.path().join("b.cache");
    std::fs::File::create(&bad)
        .unwrap()
        .set_len(vgpu_region::layout::FILE_SIZE as u64)
        .unwrap();
    let (h, _) = Holder::start(
        Probe::new().limit("1g").region(&good),
        &["init", "ctx", "alloc:10m"],
    );
    let mut server = vgpu()
        .args(["metrics", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = server.stderr.take().unwrap();
    let server = Killed(server);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut lines: Vec<String> = Vec::new();
    let next = |lines: &mut Vec<String>| -> String {
        let l = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no more lines after {lines:#?}"));
        lines.push(l.clone());
        l
    };
    let serving = next(&mut lines);
    let addr = serving
        .rsplit(' ')
        .next()
        .and_then(|u| u.strip_prefix("http://"))
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{serving}"))
        .to_owned();
    let d = dir.path().display().to_string();
    let w = next(&mut lines);
    assert!(
        w.starts_with("vgpu metrics: watching directory ") && w.contains(&d),
        "{w}"
    );
    let f = next(&mut lines);
    assert_eq!(
        f,
        "vgpu metrics: found 1 region(s): 1 with a live process, 0 stale"
    );
    let s = next(&mut lines);
    assert!(
        s.starts_with("vgpu metrics: skipped 1: ") && s.contains("b.cache"),
        "{s}"
    );
    // Scrapes that change nothing print nothing.
    http_get(&addr, "/metrics");
    // A change: a second container appears, the first one's process ends.
    let third = dir.path().join("c.cache");
    let (h2, _) = Holder::start(
        Probe::new().limit("1g").region(&third),
        &["init", "ctx", "alloc:10m"],
    );
    drop(h);
    http_get(&addr, "/metrics");
    let f = next(&mut lines);
    assert_eq!(
        f, "vgpu metrics: found 2 region(s): 1 with a live process, 1 stale",
        "{lines:#?}"
    );
    drop(h2);
    drop(server);
}

/// The node directory of a test (fresh).
fn node_dir(name: &str) -> std::path::PathBuf {
    let d = sim_dir()
        .parent()
        .unwrap()
        .join(format!("node-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Item 11: `vgpu status --node` shows, for each GPU, who holds its node token and who waits.
#[test]
fn status_node_shows_who_holds_each_gpus_token_and_who_waits() {
    let node = node_dir("status");
    let n = node.display().to_string();
    let a = fresh_region();
    let b = fresh_region();
    // Two containers at 60 % each on one GPU, both busy: they take turns on the token, one
    // holding while the other waits.
    let busy = "kernels:spin_1000us:1:8000:0";
    let start = |region: &Path| {
        Probe::new()
            .env("CUDA_DEVICE_SM_LIMIT", "60")
            .env("VGPU_NODE_DIR", &n)
            .region(region)
            .ops(&["init", "ctx", busy])
            .command()
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let pa = Killed(start(&a));
    let pb = Killed(start(&b));
    let pids = [pa.0.id(), pb.0.id()];
    let named = |l: &str| pids.iter().any(|p| l.contains(&format!("pid {p} ")));
    let (mut held, mut waited) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && (held.is_empty() || waited.is_empty()) {
        let (ok, out, err) = run(vgpu().args(["status", "--node", &n]));
        assert!(ok, "{err}");
        for l in out.lines() {
            if l.trim_start().starts_with("holder: pid") && named(l) {
                held = l.to_owned();
            }
            if l.trim_start().starts_with("waiting: 1: pid") && named(l) {
                waited = l.to_owned();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!held.is_empty(), "never saw a holder named");
    assert!(!waited.is_empty(), "never saw a waiter named");
    // The holder line names the container's region; both processes have the token open.
    assert!(
        held.contains("region ") && held.contains(".cache"),
        "{held}"
    );
    let (ok, out, err) = run(vgpu().args(["status", "--node", &n, "--json"]));
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let g = &j["gpus"][0];
    assert!(g["uuid"].as_str().unwrap().starts_with("GPU-"), "{j}");
    let open: Vec<u64> = g["open_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["pid"].as_u64().unwrap())
        .collect();
    for p in pids {
        assert!(open.contains(&u64::from(p)), "{p} in {j}");
    }
    drop(pa);
    drop(pb);
    let _ = std::fs::remove_dir_all(&node);
}

/// Item 12: in a pipe, each refresh starts with a timestamp line.
#[test]
fn top_in_a_pipe_separates_refreshes_with_a_timestamp() {
    let region = fresh_region();
    let (h, _) = Holder::start(
        Probe::new().limit("1g").region(&region),
        &["init", "ctx", "alloc:10m"],
    );
    let mut c = vgpu()
        .args(["top", "--interval", "50", "--region"])
        .arg(&region)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let c = Killed(c);
    use std::io::BufRead;
    let stamps: Vec<String> = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.starts_with("--- "))
        .take(2)
        .collect();
    drop(c);
    assert_eq!(stamps.len(), 2, "{stamps:?}");
    for s in &stamps {
        // "--- 2025-01-31 12:00:00.123 UTC ---"
        assert!(s.ends_with(" UTC ---") && s.len() == 35, "{s:?}");
    }
    assert_ne!(stamps[0], stamps[1]);
    drop(h);
}

fn tmux_top(name: &str, cols: u16, rows: u16, region: &Path) -> (String, TmuxSession) {
    let session = format!("vgpu-{name}-{}", std::process::id());
    // After `top`: its exit status and the terminal's line discipline (raw mode would read
    // "-icanon -echo").
    let cmd = format!(
        "{} top --interval 100 --region {}; echo EXITED $?; \
         echo MODE $(stty -a | tr ' ;' '\\n\\n' | grep -E '^-?(icanon|echo)$' | tr '\\n' ' '); sleep 30",
        env!("CARGO_BIN_EXE_vgpu"),
        region.display()
    );
    let s = TmuxSession::start(&session, cols, rows, &cmd);
    (session, s)
}

/// The PID of the child of `parent` named `comm`, from /proc.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // pid (comm) state ppid ...
        let (head, rest) = stat.rsplit_once(") ")?;
        let name = head.split_once(" (")?.1;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && name == comm).then_some(pid)
    })
}

/// Item 12: on a wide terminal `top` draws each device's GPU-share history (a sparkline) and
/// the columns a narrow one drops; SIGTERM (and SIGHUP) restore the terminal before it exits.
#[test]
fn top_draws_history_on_a_wide_terminal_and_restores_it_on_sigterm() {
    if tmux(&["-V"]).is_none() {
        eprintln!("SKIP top_draws_history_on_a_wide_terminal_and_restores_it_on_sigterm: no tmux");
        return;
    }
    for signal in ["TERM", "HUP"] {
        let region = fresh_region();
        let node = node_dir(&format!("top-{signal}"));
        let child = Probe::new()
            .limit("2g")
            .env("CUDA_DEVICE_SM_LIMIT", "50")
            .env("VGPU_NODE_DIR", &node.display().to_string())
            .region(&region)
            .ops(&["init", "ctx", "alloc:100m", "kernels:spin_1000us:1:20000:0"])
            .command()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let child = Killed(child);
        let (session, _s) = tmux_top(&format!("wide-{signal}"), 200, 40, &region);
        // The sparkline's bars appear once shares were measured.
        let screen = pane_until(&session, |s| {
            s.contains("GPU% history") && s.chars().any(|c| "▂▃▄▅▆▇█".contains(c))
        });
        assert!(screen.contains("GPU% history"), "{screen}");
        assert!(
            screen.chars().any(|c| "▂▃▄▅▆▇█".contains(c)),
            "no bars:\n{screen}"
        );
        // Wide: every device column, the UUID included, is shown.
        for h in ["THROTTLED", "LAUNCHES", "UUID"] {
            assert!(screen.contains(h), "{h}\n{screen}");
        }
        let pane = tmux(&["display-message", "-p", "-t", &session, "#{pane_pid}"]).unwrap();
        let pane: u32 = pane.trim().parse().unwrap();
        let top = child_named(pane, "vgpu").unwrap_or_else(|| panic!("no vgpu under {pane}"));
        assert!(
            Command::new("kill")
                .args([format!("-{signal}"), top.to_string()])
                .status()
                .unwrap()
                .success()
        );
        let screen = pane_until(&session, |s| s.contains("MODE"));
        let code = if signal == "TERM" { 143 } else { 129 };
        assert!(screen.contains(&format!("EXITED {code}")), "{screen}");
        // Cooked mode with echo again, and off the alternate screen (the shell's lines show).
        assert!(screen.contains("MODE icanon echo"), "{screen}");
        drop(child);
        let _ = std::fs::remove_dir_all(&node);
    }
}

/// Item 13: `run --help` says `--memory-device` takes the container's NVML index (what the
/// code does: it sets `CUDA_DEVICE_MEMORY_LIMIT_<I>`, which the plan reads by NVML index), and
/// `--interval 0` says what the interval takes.
#[test]
fn run_help_names_the_nvml_index_and_interval_zero_is_explained() {
    let (ok, out, err) = run(vgpu().args(["run", "--help"]));
    assert!(ok, "{err}");
    let help: String = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("the container's device index as NVML numbers the GPUs"),
        "{out}"
    );
    assert!(help.contains("not the CUDA ordinal"), "{out}");
    let (ok, _, err) = run(vgpu().args(["top", "--once", "--interval", "0"]));
    assert!(!ok);
    assert!(
        err.contains("whole number of milliseconds, at least 10"),
        "{err}"
    );
    assert!(!err.contains("18446744073709551615"), "{err}");
}
