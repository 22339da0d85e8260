//! Runs the built `vgpu` binary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VGPU: &str = env!("CARGO_BIN_EXE_vgpu");

/// A file that exists, to stand in for libvgpu.so (ld.so warns that it cannot preload it and
/// carries on, which is all `env` needs).
struct FakeLib {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn fake_lib() -> FakeLib {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libvgpu.so");
    std::fs::write(&path, b"").unwrap();
    let path = path.canonicalize().unwrap();
    FakeLib { _dir: dir, path }
}

fn vgpu(args: &[&str]) -> Command {
    let mut cmd = Command::new(VGPU);
    vgpu_tests::dies_with_parent(&mut cmd);
    cmd.args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("VGPU_LIB")
        .env_remove("CUDA_DEVICE_MEMORY_LIMIT")
        .env_remove("CUDA_DEVICE_SM_LIMIT");
    cmd
}

fn env_of(out: &Output) -> HashMap<String, String> {
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn sets_limits_and_preload() {
    let lib = fake_lib();
    let lib_s = lib.path.to_str().unwrap();
    let out = vgpu(&[
        "run",
        "--memory",
        "4g",
        "--memory-device",
        "1=2GiB",
        "--memory-device",
        "3=512m",
        "--sm",
        "50",
        "--lib",
        lib_s,
        "--",
        "env",
    ])
    .output()
    .unwrap();
    let env = env_of(&out);
    assert_eq!(env["CUDA_DEVICE_MEMORY_LIMIT"], "4294967296");
    assert_eq!(env["CUDA_DEVICE_MEMORY_LIMIT_1"], "2147483648");
    assert_eq!(env["CUDA_DEVICE_MEMORY_LIMIT_3"], "536870912");
    assert_eq!(env["CUDA_DEVICE_SM_LIMIT"], "50");
    assert_eq!(env["LD_PRELOAD"], lib_s);
}

#[test]
fn only_given_limits_are_set() {
    let lib = fake_lib();
    let out = vgpu(&["run", "--lib", lib.path.to_str().unwrap(), "--", "env"])
        .output()
        .unwrap();
    let env = env_of(&out);
    assert!(!env.contains_key("CUDA_DEVICE_MEMORY_LIMIT"));
    assert!(!env.contains_key("CUDA_DEVICE_SM_LIMIT"));
    assert_eq!(env["LD_PRELOAD"], lib.path.to_str().unwrap());
}

#[test]
fn prepends_to_existing_preload() {
    let lib = fake_lib();
    let lib_s = lib.path.to_str().unwrap();
    let out = vgpu(&["run", "--memory", "1024m", "--lib", lib_s, "--", "env"])
        .env("LD_PRELOAD", "/nonexistent/a.so /nonexistent/b.so")
        .output()
        .unwrap();
    let env = env_of(&out);
    assert_eq!(
        env["LD_PRELOAD"],
        format!("{lib_s}:/nonexistent/a.so:/nonexistent/b.so")
    );
    assert_eq!(env["CUDA_DEVICE_MEMORY_LIMIT"], "1073741824");
}

#[test]
fn passes_arguments_through() {
    let lib = fake_lib();
    let out = vgpu(&[
        "run",
        "--lib",
        lib.path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "printf '%s|' \"$@\"",
        "sh",
        "--memory",
        "-x",
        "a b",
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--memory|-x|a b|");
}

#[test]
fn uses_vgpu_lib_variable() {
    let lib = fake_lib();
    let out = vgpu(&["run", "--", "env"])
        .env("VGPU_LIB", &lib.path)
        .output()
        .unwrap();
    assert_eq!(env_of(&out)["LD_PRELOAD"], lib.path.to_str().unwrap());
}

/// Puts the binary in a fresh directory so the search next to the executable is predictable.
///
/// A hard link, not a copy: a copy is written through a descriptor, and a test running
/// concurrently that forks while that descriptor is open holds it in its child until that
/// child execs, so exec'ing the copy then fails with ETXTBSY ("Text file busy"; 3 of 30
/// runs). A link opens nothing for writing. The directory is under the target directory, on
/// the binary's filesystem.
fn isolated_vgpu() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = dir.path().join("vgpu");
    std::fs::hard_link(VGPU, &exe).unwrap();
    (dir, exe)
}

fn run_isolated(exe: &Path) -> Output {
    vgpu_tests::dies_with_parent(&mut Command::new(exe))
        .args(["run", "--memory", "1g", "--", "env"])
        .env_remove("VGPU_LIB")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

#[test]
fn finds_lib_next_to_executable_or_fails_clearly() {
    let (dir, exe) = isolated_vgpu();
    let out = run_isolated(&exe);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot find libvgpu.so"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());

    std::fs::create_dir(dir.path().join("deps")).unwrap();
    let in_deps = dir.path().join("deps/libvgpu.so");
    std::fs::write(&in_deps, b"").unwrap();
    let env = env_of(&run_isolated(&exe));
    assert_eq!(
        env["LD_PRELOAD"],
        in_deps.canonicalize().unwrap().to_str().unwrap()
    );

    let beside = dir.path().join("libvgpu.so");
    std::fs::write(&beside, b"").unwrap();
    let env = env_of(&run_isolated(&exe));
    assert_eq!(
        env["LD_PRELOAD"],
        beside.canonicalize().unwrap().to_str().unwrap()
    );
}

#[test]
fn missing_lib_flag_is_an_error() {
    let out = vgpu(&["run", "--lib", "/nonexistent/libvgpu.so", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--lib /nonexistent/libvgpu.so"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_size_names_the_flag() {
    let lib = fake_lib();
    let lib_s = lib.path.to_str().unwrap();
    for (flag, value) in [
        ("--memory", "12zz"),
        ("--memory", "1.5g"),
        ("--memory", "-5g"),
        ("--memory", "16777216t"),
        ("--memory-device", "1=12zz"),
        ("--memory-device", "x=1g"),
        ("--memory-device", "64=1g"),
        ("--memory-device", "4g"),
        ("--sm", "101"),
        ("--sm", "half"),
    ] {
        let out = vgpu(&["run", flag, value, "--lib", lib_s, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = stderr(&out);
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(err.contains(value), "{flag} {value}: {err}");
    }
    let out = vgpu(&["run", "--memory", "12zz", "--lib", lib_s, "--", "true"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("binary suffix k, m, g, t"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn duplicate_device_is_an_error() {
    let lib = fake_lib();
    let out = vgpu(&[
        "run",
        "--memory-device",
        "1=1g",
        "--memory-device",
        "1=2g",
        "--lib",
        lib.path.to_str().unwrap(),
        "--",
        "true",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("twice for device 1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_inherited_variable_is_reported() {
    let lib = fake_lib();
    let out = vgpu(&["run", "--lib", lib.path.to_str().unwrap(), "--", "true"])
        .env("CUDA_DEVICE_MEMORY_LIMIT_x", "4g")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("vgpu: CUDA_DEVICE_MEMORY_LIMIT_x=\"4g\""),
        "{}",
        stderr(&out)
    );
    // A flag overrides a bad inherited value of the same variable.
    let out = vgpu(&[
        "run",
        "--memory",
        "2g",
        "--lib",
        lib.path.to_str().unwrap(),
        "--",
        "env",
    ])
    .env("CUDA_DEVICE_MEMORY_LIMIT", "garbage")
    .output()
    .unwrap();
    assert_eq!(env_of(&out)["CUDA_DEVICE_MEMORY_LIMIT"], "2147483648");
}

#[test]
fn missing_command_fails_with_127() {
    let lib = fake_lib();
    let out = vgpu(&[
        "run",
        "--lib",
        lib.path.to_str().unwrap(),
        "--",
        "vgpu-test-no-such-command",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("cannot run vgpu-test-no-such-command"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn command_is_required() {
    let lib = fake_lib();
    let out = vgpu(&["run", "--lib", lib.path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("CMD"), "{}", stderr(&out));
}

#[test]
fn exit_status_is_the_commands() {
    let lib = fake_lib();
    let out = vgpu(&[
        "run",
        "--lib",
        lib.path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 7",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn a_region_path_that_is_not_utf8_reaches_the_command_as_given() {
    // Issue 24 item 7: it reached the command with U+FFFD in place of the byte, so two such
    // paths named one file.
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let lib = fake_lib();
    let mut region = std::env::temp_dir().into_os_string().into_vec();
    region.extend_from_slice(b"/vgpu-region-\xfe.cache");
    let region = std::ffi::OsString::from_vec(region);
    let out = vgpu(&["run", "--lib", lib.path.to_str().unwrap()])
        .arg("--region")
        .arg(&region)
        .args(["--", "printenv", "CUDA_DEVICE_MEMORY_SHARED_CACHE"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.strip_suffix(b"\n"), Some(region.as_bytes()));
}
