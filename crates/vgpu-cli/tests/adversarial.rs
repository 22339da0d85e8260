//! The CLI's readers against a region another process truncates (issue 13, item 4): the node's
//! exporter, `vgpu top` and the workload itself must neither fault nor go silent.

// The shared helpers re-export constants this file does not use.
#![allow(unused_imports)]

mod common;

use std::time::Duration;

use common::*;
use vgpu_tests::Probe;

fn truncate(path: &std::path::Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// A running `vgpu metrics --listen` keeps serving after a watched region is truncated to 0
/// (before the fix: SIGBUS at the next scrape), reports the region, and the workload holding
/// the region survives and refuses further charges.
#[test]
fn a_truncated_region_kills_neither_the_exporter_nor_the_workload() {
    let region = fresh_region();
    let r = region.display().to_string();
    let (mut holder, _) = Holder::spawn(
        Probe::new()
            .region(&region)
            .limit("1g")
            .ops(&["init", "ctx", "alloc:100m", "hold", "alloc:1m", "hold"])
            .command(),
    );
    let (server, addr) = serve(&["--region", &r]);
    let mut server = Killed(server);
    let (_, body) = http_get(&addr, "/metrics");
    assert!(body.contains("vgpu_memory_limit_bytes"), "{body}");
    truncate(&region);
    // The workload's reaper touches the mapping every 200-500 ms.
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        holder.child.try_wait().unwrap().is_none(),
        "the workload died"
    );
    let (head, body) = http_get(&addr, "/metrics");
    assert!(server.0.try_wait().unwrap().is_none(), "the exporter died");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(!body.contains("vgpu_memory_limit_bytes{"), "{body}");
    assert!(server.0.try_wait().unwrap().is_none(), "the exporter died");
    assert!(
        holder.child.try_wait().unwrap().is_none(),
        "the workload died"
    );
    // SAFETY-free: a plain signal to our own child ends its `hold`.
    vgpu_tests::terminate(holder.pid());
    let lines = holder.until("OK hold");
    assert!(
        lines.iter().any(|l| l.starts_with("ERR alloc")),
        "a process cut off from its region charged: {lines:?}"
    );
    let _ = std::fs::remove_file(&region);
}

/// `vgpu top --once` and `vgpu status` on a region truncated after it was created: an error
/// naming the file, never a fault.
#[test]
fn top_and_status_report_a_truncated_region() {
    let region = fresh_region();
    let r = region.display().to_string();
    let (holder, _) = Holder::start(Probe::new().region(&region).limit("1g"), &["init", "ctx"]);
    truncate(&region);
    for args in [
        vec!["top", "--once", "--interval", "20", "--region", &r],
        vec!["status", "--region", &r],
    ] {
        let out = vgpu().args(&args).output().unwrap();
        assert!(
            out.status.code().is_some(),
            "vgpu {args:?} was killed by a signal: {:?}",
            out.status
        );
        assert!(!out.status.success(), "vgpu {args:?} reported nothing");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&r), "vgpu {args:?}: {err}");
    }
    drop(holder);
    let _ = std::fs::remove_file(&region);
}

/// Item 11: `vgpu limit` run by anyone in the container lowers and restores the limits the
/// container was started with, and refuses to raise or remove them.
#[test]
fn vgpu_limit_cannot_raise_the_containers_ceiling() {
    let region = fresh_region();
    let r = region.display().to_string();
    let (holder, _) = Holder::start(Probe::new().region(&region).limit("1g"), &["init", "ctx"]);
    for raise in [["--memory", "2g"], ["--memory", "none"]] {
        let (ok, out, err) = run(vgpu().args(["limit", "--region", &r]).args(raise));
        assert!(!ok, "vgpu limit {raise:?} raised the ceiling: {out}");
        assert!(err.contains("ceiling"), "{err}");
        // Sizes in words, not bytes.
        assert!(err.contains("1 GiB") && !err.contains("bytes"), "{err}");
    }
    let (ok, _, err) = run(vgpu().args(["limit", "--region", &r, "--memory", "512m"]));
    assert!(ok, "{err}");
    let (ok, _, err) = run(vgpu().args(["limit", "--region", &r, "--memory", "1g"]));
    assert!(ok, "{err}");
    let (ok, out, err) = run(vgpu().args(["status", "--region", &r, "--json"]));
    assert!(ok, "{err}");
    assert!(out.contains(&(1u64 << 30).to_string()), "{out}");
    drop(holder);
    let _ = std::fs::remove_file(&region);
}
