//! The portable build (`make dist`): `dist/libvgpu.so` and `dist/vgpu` must load on glibc 2.17
//! and enforce like the cargo build.
//!
//! Without `dist/` at the workspace root the tests that need it print a `skip:` line and pass;
//! `make check-dist` builds it first. The version parser is tested on its own and on the cargo
//! build, so the check cannot pass by reading nothing.
use std::path::{Path, PathBuf};
use std::process::Command;

use vgpu_tests::*;

/// The oldest glibc the dist build supports (the oldest Rust supports).
const MAX_GLIBC: &str = "2.17";

/// `dist/` at the workspace root, if it holds both artifacts.
fn dist_root() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist");
    if d.join("libvgpu.so").exists() && d.join("vgpu").exists() {
        Some(d)
    } else {
        println!(
            "skip: {} has no libvgpu.so and vgpu (run `make dist`)",
            d.display()
        );
        None
    }
}

/// The dist artifacts of the architecture these tests run on (`dist/` for x86-64,
/// `dist/aarch64/` for aarch64), if built.
fn dist_dir() -> Option<PathBuf> {
    let root = dist_root()?;
    let d = if cfg!(target_arch = "aarch64") {
        root.join("aarch64")
    } else {
        root
    };
    if d.join("libvgpu.so").exists() && d.join("vgpu").exists() {
        Some(d)
    } else {
        println!("skip: {} not built (make dist-aarch64)", d.display());
        None
    }
}

/// A glibc version as numbers: "2.2.5" → [2, 2, 5], ordered as glibc orders them.
fn version(v: &str) -> Vec<u32> {
    v.split('.')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("bad version {v:?}")))
        .collect()
}

/// `symbol@GLIBC_x.y` words of `readelf --dyn-syms -W`, as (symbol, version).
fn versioned_symbols(readelf_dyn_syms: &str) -> Vec<(String, String)> {
    readelf_dyn_syms
        .split_whitespace()
        .filter_map(|w| {
            let (sym, ver) = w.split_once("@GLIBC_")?;
            let ver = ver.trim_start_matches('@');
            ver.starts_with(|c: char| c.is_ascii_digit())
                .then(|| (sym.to_string(), ver.to_string()))
        })
        .collect()
}

/// `Name: GLIBC_x.y` entries of `readelf -V -W` (every version the loader will demand).
fn needed_versions(readelf_v: &str) -> Vec<String> {
    readelf_v
        .lines()
        .filter_map(|l| {
            let rest = l.split("Name: GLIBC_").nth(1)?;
            Some(rest.split_whitespace().next()?.to_string())
        })
        .collect()
}

fn readelf(args: &[&str], file: &Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(file)
        .output()
        .expect("run readelf (binutils)");
    assert!(out.status.success(), "readelf {args:?} {}", file.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every glibc-versioned symbol of `file` and the versions above `max`, printed.
fn too_new(file: &Path, max: &str) -> (Vec<(String, String)>, Vec<String>) {
    let syms = versioned_symbols(&readelf(&["--dyn-syms", "-W"], file));
    let mut versions: Vec<String> = syms.iter().map(|(_, v)| v.clone()).collect();
    versions.extend(needed_versions(&readelf(&["-V", "-W"], file)));
    versions.sort_by_key(|v| version(v));
    versions.dedup();
    println!("{}: glibc {}", file.display(), versions.join(" "));
    let over = versions
        .into_iter()
        .filter(|v| version(v) > version(max))
        .collect();
    (syms, over)
}

#[test]
fn glibc_versions_are_ordered_numerically() {
    assert!(version("2.2.5") < version("2.17"));
    assert!(version("2.17") < version("2.34"));
    assert!(version("2.3.4") < version("2.12"));
    let line = "  42: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND dlvsym@GLIBC_2.34 (3)\n\
                  43: 0000000000000000     0 FUNC    WEAK   DEFAULT  UND __cxa_finalize@GLIBC_2.2.5 (4)\n\
                  44: 0000000000012340    10 FUNC    GLOBAL DEFAULT   12 cuInit";
    assert_eq!(
        versioned_symbols(line),
        [
            ("dlvsym".to_string(), "2.34".to_string()),
            ("__cxa_finalize".to_string(), "2.2.5".to_string())
        ]
    );
    let v = "  0x0010:   Name: GLIBC_2.17  Flags: none  Version: 5\n  0x0020:   Name: GLIBC_2.34  Flags: none  Version: 3";
    assert_eq!(needed_versions(v), ["2.17", "2.34"]);
}

#[test]
fn the_check_reads_the_cargo_builds_symbols() {
    // The library under test has versioned imports (dlvsym at least): an empty list would mean
    // the parser reads nothing and the dist check below could not fail.
    let (syms, _) = too_new(&libvgpu(), "999.0");
    assert!(
        syms.iter().any(|(s, _)| s == "dlvsym"),
        "no dlvsym@GLIBC_* in {syms:?}"
    );
}

#[test]
fn dist_artifacts_need_at_most_glibc_2_17() {
    let Some(dist) = dist_root() else { return };
    let mut files = vec![dist.join("libvgpu.so"), dist.join("vgpu")];
    for f in ["aarch64/libvgpu.so", "aarch64/vgpu"] {
        if dist.join(f).exists() {
            files.push(dist.join(f));
        }
    }
    for f in files {
        let (syms, over) = too_new(&f, MAX_GLIBC);
        assert!(
            !syms.is_empty(),
            "{}: no versioned symbols read",
            f.display()
        );
        let offending: Vec<_> = syms.iter().filter(|(_, v)| over.contains(v)).collect();
        assert!(
            over.is_empty(),
            "{} needs glibc {over:?} > {MAX_GLIBC}: {offending:?}",
            f.display()
        );
    }
}

#[test]
fn dist_library_enforces_the_limit_through_every_entry() {
    let Some(dist) = dist_dir() else { return };
    let lib = dist.join("libvgpu.so").canonicalize().unwrap();
    for via in ["link", "dlsym", "gpa:3010:0", "cudart"] {
        let out = Probe::new()
            .limit("1g")
            .via(via)
            .ops(&["init", "ctx", "alloc:512m", "alloc:512m", "meminfo"])
            .command()
            .env("LD_PRELOAD", &lib)
            .output()
            .expect("spawn probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{via}: {stdout}\n{stderr}");
        let lines: Vec<Vec<&str>> = stdout
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let allocs: Vec<&Vec<&str>> = lines.iter().filter(|w| w[1] == "alloc").collect();
        // The context takes SIM_CTX of the 1 GiB: the first 512 MiB fits, the second does not.
        assert_eq!(allocs[0][0], "OK", "{via}: {stdout}");
        assert_eq!(allocs[1][..3], ["ERR", "alloc", "2"], "{via}: {stdout}");
        let total = lines
            .iter()
            .find(|w| w[1] == "meminfo")
            .and_then(|w| w.iter().find_map(|x| x.strip_prefix("total=")))
            .unwrap_or_else(|| panic!("{via}: no meminfo total in {stdout}"));
        assert_eq!(total, GIB.to_string(), "{via}: {stdout}");
    }
}

#[test]
fn dist_vgpu_doctor_passes_with_the_dist_library() {
    let Some(dist) = dist_dir() else { return };
    if !runner().is_empty() {
        // doctor re-executes itself with the library preloaded; under a user-mode emulator
        // without binfmt_misc that child cannot start.
        println!("skip: doctor is not run through VGPU_TEST_RUNNER");
        return;
    }
    let mut c = Command::new(dist.join("vgpu"));
    dies_with_parent(&mut c);
    for (k, _) in std::env::vars() {
        if k.starts_with("CUDA_") || k.starts_with("VGPU_") || k == "LD_PRELOAD" {
            c.env_remove(k);
        }
    }
    let out = c
        .arg("doctor")
        .arg("--lib")
        .arg(dist.join("libvgpu.so"))
        .env("LD_LIBRARY_PATH", sim_dir())
        .env("VGPU_SIM_MEM", "16g")
        .output()
        .expect("run dist/vgpu");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for check in ["PASS library", "PASS preload", "PASS allocation limit"] {
        assert!(stdout.contains(check), "{check} missing:\n{stdout}");
    }
}
