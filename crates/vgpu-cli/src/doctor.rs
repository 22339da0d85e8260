//! `vgpu doctor`: checks that the driver and NVML are found, that libvgpu.so loads, and that
//! enforcement really works here: a child process under a small limit must see the limit in
//! `cuMemGetInfo` and NVML, be refused past it, and (with a compute limit) be slowed down.
//!
//! Each check prints `PASS|FAIL|WARN|SKIP <check>: <detail>`, and on FAIL a `  hint:` line. The
//! exit status is 0 iff no check failed (a WARN does not fail). The child is `vgpu doctor
//! --child` under `LD_PRELOAD`; it prints the same lines, which the parent re-prints with hints.
//!
//! A setting of this environment that turns enforcement off (`CUDA_DISABLE_CONTROL`,
//! `VGPU_OBSERVE`) is one FAIL naming it, and the child runs without it, so that the checks
//! still say whether the library itself works; `GPU_CORE_UTILIZATION_POLICY=disable` (the SM
//! limit off by HAMi's switch) is a WARN. The child first asks the preloaded library for its
//! version (`vgpu_version`): a library without it is not vgpu's (HAMi-core's has the same
//! name), one FAIL rather than every check failing.

use std::ffi::{CStr, CString, c_char, c_uint, c_void};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Args;
use libloading::Library;
use serde::Serialize;
use vgpu_policy::config::{Config, CorePolicy};
use vgpu_policy::limiter::head_start;
use vgpu_policy::size::{format_size, parse_size};
use vgpu_sys::cuda::{
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule,
    CUresult, CUstream,
};
use vgpu_sys::nvml::{NVML_SUCCESS, nvmlDevice_t, nvmlMemory_t, nvmlReturn_t};

use crate::error::{Error, Result};
use crate::inherited::Inherited;
use crate::shared::libpath::{LIB_ENV, find_lib, preload_value};
use crate::shared::output::write_stdout;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Path of libvgpu.so (default: as `vgpu run` finds it).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// Memory limit the child runs under (must leave room for a CUDA context).
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = parse_mem)]
    memory: u64,
    /// Compute limit to check, percent 1..=99 (default: $CUDA_DEVICE_SM_LIMIT if set).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(1..=99))]
    sm: Option<u8>,
    /// Print the checks as JSON: `{"active": bool, "checks": [{"verdict": "pass"|"fail"|"warn"|"skip",
    /// "check", "detail", "hint"}]}`.
    #[arg(long)]
    json: bool,
    /// Internal: run the checks that need libvgpu.so preloaded.
    #[arg(long, hide = true)]
    child: bool,
}

fn parse_mem(s: &str) -> Result<u64, String> {
    match parse_size(s) {
        Ok(0) => Err("the limit must not be 0".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Pass,
    Fail,
    /// Works, but not as asked (a measured share off by more than 5 points, the SM limit off by
    /// policy, another version): does not fail the run.
    Warn,
    Skip,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Warn => "WARN",
            Verdict::Skip => "SKIP",
        }
    }

    fn parse(word: &str) -> Option<Verdict> {
        [Verdict::Pass, Verdict::Fail, Verdict::Warn, Verdict::Skip]
            .into_iter()
            .find(|v| v.word() == word)
    }
}

/// One check's outcome.
#[derive(Debug, Serialize)]
struct Check {
    verdict: Verdict,
    check: String,
    detail: String,
    hint: Option<String>,
}

/// The checks so far: printed as they come (text), or kept for one JSON document.
struct Report {
    failed: bool,
    json: bool,
    checks: Vec<Check>,
}

impl Report {
    fn new(json: bool) -> Report {
        Report {
            failed: false,
            json,
            checks: Vec::new(),
        }
    }

    fn line(&mut self, v: Verdict, check: &str, detail: &str) {
        let word = v.word();
        let hint = (v == Verdict::Fail).then(|| hint(check, detail));
        self.failed |= v == Verdict::Fail;
        if !self.json {
            println!("{word} {check}: {detail}");
            if let Some(h) = &hint {
                println!("  hint: {h}");
            }
        }
        self.checks.push(Check {
            verdict: v,
            check: check.to_owned(),
            detail: detail.to_owned(),
            hint,
        });
    }
}

fn hint(check: &str, detail: &str) -> String {
    match check {
        "configuration" if detail.contains(DISABLE_CONTROL) => format!(
            "unset {DISABLE_CONTROL} (or set it to false) in the workload's environment; HAMi \
             users set it to work around a broken stack: see docs/CLI.md for what to report"
        ),
        "configuration" if detail.contains(OBSERVE) => format!(
            "unset {OBSERVE} (or set it to false) to enforce the limits; with it vgpu only \
             accounts (see vgpu status)"
        ),
        "library version" => "install vgpu's libvgpu.so (make dist, or the release archive) \
             and pass it with --lib; HAMi-core's library has the same file name"
            .into(),
        "driver" => "install the NVIDIA driver, or add the directory of libcuda.so.1 to \
                     LD_LIBRARY_PATH (in a container: run it with the NVIDIA container runtime, \
                     e.g. --gpus or the nvidia RuntimeClass)"
            .into(),
        "nvml" => "libnvidia-ml.so.1 ships with the driver: make it visible as for libcuda.so.1 \
                   (NVIDIA_DRIVER_CAPABILITIES must include utility)"
            .into(),
        "library" => format!(
            "install libvgpu.so next to the vgpu binary (or in ../lib), pass --lib PATH or set \
             {LIB_ENV}"
        ),
        "preload" => "the loader did not map the library: check that the path holds no space \
                      or colon, that it is a shared object for this architecture, and that no \
                      security policy strips LD_PRELOAD"
            .into(),
        "context" => "the driver found no usable GPU: check nvidia-smi, CUDA_VISIBLE_DEVICES, \
                      and that --memory leaves room for a CUDA context"
            .into(),
        "cuMemGetInfo" | "nvml memory" | "allocation limit" => "the preloaded library does not \
             enforce the limit: is --lib really libvgpu.so, and does the program reach the driver \
             through it (statically linked CUDA runtimes bypass LD_PRELOAD)?"
            .into(),
        "compute limit" => "launches are not slowed by the SM limit: check that the kernels go \
                            through the driver API seen by libvgpu.so (CUDA_DEVICE_SM_LIMIT)"
            .into(),
        _ => "run `vgpu doctor` again with RUST_LOG or see the output above".into(),
    }
}

const DISABLE_CONTROL: &str = vgpu_policy::config::vars::DISABLE_CONTROL;
const OBSERVE: &str = vgpu_policy::config::vars::OBSERVE;
const CORE_POLICY: &str = vgpu_policy::config::vars::CORE_POLICY;

/// The configuration check: a setting of this environment that turns enforcement off, named
/// with its value. Returns the variables the child must run without.
fn configuration(r: &mut Report, inherited: &Inherited) -> Vec<&'static str> {
    let value = |k: &str| {
        inherited
            .get(k)
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            r.line(Verdict::Fail, "configuration", &e.to_string());
            return Vec::new();
        }
    };
    let mut off = Vec::new();
    if cfg.disabled {
        r.line(
            Verdict::Fail,
            "configuration",
            &format!(
                "{DISABLE_CONTROL}={} turns vgpu off in this environment: every CUDA and NVML \
                 call passes straight through and no limit is enforced (the checks below run \
                 without it)",
                value(DISABLE_CONTROL)
            ),
        );
        off.push(DISABLE_CONTROL);
    }
    if cfg.observe {
        r.line(
            Verdict::Fail,
            "configuration",
            &format!(
                "{OBSERVE}={} makes vgpu observe only in this environment: memory and GPU time \
                 are accounted, no limit of this environment is enforced (the checks below run \
                 without it)",
                value(OBSERVE)
            ),
        );
        off.push(OBSERVE);
    }
    if cfg.core_policy == CorePolicy::Disable {
        r.line(
            Verdict::Warn,
            "configuration",
            &format!(
                "{CORE_POLICY}={}: the SM limit (CUDA_DEVICE_SM_LIMIT, vgpu limit --sm) is not \
                 enforced here, by HAMi's switch; memory limits are",
                value(CORE_POLICY)
            ),
        );
    }
    if off.is_empty() && cfg.core_policy != CorePolicy::Disable {
        r.line(
            Verdict::Pass,
            "configuration",
            "nothing in this environment turns enforcement off",
        );
    }
    off
}

/// The SM limit (percent, 1..=99) this environment gives device 0, read by the one
/// configuration reader; `None` without one, with HAMi's policy switch off, or when the
/// environment is invalid (the child reports that).
fn env_sm_limit(cfg: Option<&Config>) -> Option<u8> {
    cfg?.sm_limit_for(0).filter(|v| (1..100).contains(v))
}

pub fn main(args: DoctorArgs, inherited: &Inherited) -> Result<ExitCode> {
    if args.child {
        return Ok(child(&args));
    }
    let mut r = Report::new(args.json);
    // SAFETY: loading the driver runs its initialisers, which is what any CUDA program does.
    match unsafe { Library::new("libcuda.so.1") } {
        Ok(_) => r.line(Verdict::Pass, "driver", "libcuda.so.1 loaded"),
        Err(e) => r.line(Verdict::Fail, "driver", &format!("libcuda.so.1: {e}")),
    }
    // SAFETY: as above, for NVML.
    match unsafe { Library::new("libnvidia-ml.so.1") } {
        Ok(_) => r.line(Verdict::Pass, "nvml", "libnvidia-ml.so.1 loaded"),
        Err(e) => r.line(Verdict::Fail, "nvml", &format!("libnvidia-ml.so.1: {e}")),
    }
    let lib = match find_lib(
        args.lib.as_deref(),
        inherited.get(LIB_ENV).map(ToOwned::to_owned),
        std::env::current_exe(),
    ) {
        Ok(lib) => match elf_check(&lib) {
            Ok(()) => {
                r.line(Verdict::Pass, "library", &lib.display().to_string());
                Some(lib)
            }
            Err(e) => {
                r.line(Verdict::Fail, "library", &format!("{}: {e}", lib.display()));
                None
            }
        },
        Err(e) => {
            r.line(Verdict::Fail, "library", &e.to_string());
            None
        }
    };
    let off = configuration(&mut r, inherited);
    let sm = args
        .sm
        .or_else(|| env_sm_limit(Config::from_env().ok().as_ref()));
    match lib {
        Some(lib) => run_child(&mut r, &lib, args.memory, sm, inherited, &off),
        None => r.line(
            Verdict::Skip,
            "enforcement",
            "needs libvgpu.so (see the failure above)",
        ),
    }
    if r.json {
        #[derive(Serialize)]
        struct Doc<'a> {
            active: bool,
            checks: &'a [Check],
        }
        let doc = Doc {
            active: !r.failed,
            checks: &r.checks,
        };
        let s = serde_json::to_string_pretty(&doc).map_err(|e| Error::io("JSON", e.into()))?;
        write_stdout(format!("{s}\n").as_bytes())?;
    } else if r.failed {
        write_stdout(b"vgpu doctor: enforcement is NOT active here\n")?;
    } else {
        write_stdout(b"vgpu doctor: enforcement is active\n")?;
    }
    Ok(if r.failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn elf_check(lib: &Path) -> Result<(), String> {
    let mut f = std::fs::File::open(lib).map_err(|e| e.to_string())?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).map_err(|e| e.to_string())?;
    if &magic != b"\x7fELF" {
        return Err("not an ELF shared object".into());
    }
    Ok(())
}

fn run_child(
    r: &mut Report,
    lib: &Path,
    memory: u64,
    sm: Option<u8>,
    inherited: &Inherited,
    without: &[&str],
) {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return r.line(Verdict::Fail, "enforcement", &format!("current_exe: {e}")),
    };
    let preload = match preload_value(lib, None) {
        Ok(p) => p,
        Err(e) => return r.line(Verdict::Fail, "preload", &e.to_string()),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let region =
        std::env::temp_dir().join(format!("vgpu-doctor-{}-{nanos}.cache", std::process::id()));
    let mut cmd = Command::new(exe);
    cmd.arg("doctor")
        .arg("--child")
        .arg("--lib")
        .arg(lib)
        .arg("--memory")
        .arg(memory.to_string());
    for k in inherited.names() {
        let k = k.to_string_lossy();
        if k.starts_with("CUDA_DEVICE_MEMORY_LIMIT") || k.starts_with("CUDA_DEVICE_SM_LIMIT") {
            cmd.env_remove(&*k);
        }
    }
    for k in without {
        cmd.env_remove(k);
    }
    cmd.env("LD_PRELOAD", preload)
        .env("CUDA_DEVICE_MEMORY_LIMIT", memory.to_string())
        .env("CUDA_DEVICE_MEMORY_SHARED_CACHE", &region)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(sm) = sm {
        cmd.env("CUDA_DEVICE_SM_LIMIT", sm.to_string());
    }
    let out = cmd.output();
    let _ = std::fs::remove_file(&region);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return r.line(
                Verdict::Fail,
                "enforcement",
                &format!("cannot run the child: {e}"),
            );
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut any = false;
    for l in stdout.lines() {
        let Some((word, rest)) = l.split_once(' ') else {
            continue;
        };
        let Some(v) = Verdict::parse(word) else {
            continue;
        };
        let (check, detail) = rest.split_once(": ").unwrap_or((rest, ""));
        r.line(v, check, detail);
        any = true;
    }
    if !out.status.success() || !any {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        r.line(
            Verdict::Fail,
            "child",
            &format!(
                "the test process ended with {}: {}",
                out.status,
                tail.join(" | ")
            ),
        );
    }
}

// ---- the child ------------------------------------------------------------------------------

/// The driver entry points the child calls, with `vgpu-sys`'s types.
struct Cuda {
    init: unsafe extern "C" fn(c_uint) -> CUresult,
    device_get: unsafe extern "C" fn(*mut CUdevice, i32) -> CUresult,
    retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
    set_current: unsafe extern "C" fn(CUcontext) -> CUresult,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult,
    alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult,
    free: unsafe extern "C" fn(CUdeviceptr) -> CUresult,
    _lib: Library,
}

fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: each caller names a driver function whose C signature matches `T`.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {e}"))
}

impl Cuda {
    fn load() -> Result<Cuda, String> {
        // SAFETY: loading the driver, as any CUDA program does; under LD_PRELOAD, the lookups
        // below go through libvgpu.so's dlsym (the path we check).
        let lib = unsafe { Library::new("libcuda.so.1") }.map_err(|e| e.to_string())?;
        Ok(Cuda {
            init: sym(&lib, "cuInit")?,
            device_get: sym(&lib, "cuDeviceGet")?,
            retain: sym(&lib, "cuDevicePrimaryCtxRetain")?,
            set_current: sym(&lib, "cuCtxSetCurrent")?,
            mem_get_info: sym(&lib, "cuMemGetInfo_v2")?,
            alloc: sym(&lib, "cuMemAlloc_v2")?,
            free: sym(&lib, "cuMemFree_v2")?,
            _lib: lib,
        })
    }
}

fn child(args: &DoctorArgs) -> ExitCode {
    let mut r = Report::new(false);
    let limit = args.memory;
    // 1. The library is mapped.
    let lib = args.lib.clone().unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    if maps.contains(&*lib.to_string_lossy()) {
        r.line(
            Verdict::Pass,
            "preload",
            &format!("{} is loaded in the test process", lib.display()),
        );
    } else {
        r.line(
            Verdict::Fail,
            "preload",
            &format!("{} is not mapped in the test process", lib.display()),
        );
        return ExitCode::SUCCESS;
    }
    // 2. It is vgpu's library, and which version.
    if !version_check(&mut r, &lib) {
        return ExitCode::SUCCESS;
    }
    // 3. A context on device 0.
    let cuda = match Cuda::load() {
        Ok(c) => c,
        Err(e) => {
            r.line(Verdict::Fail, "context", &format!("libcuda.so.1: {e}"));
            return ExitCode::SUCCESS;
        }
    };
    let mut dev: CUdevice = 0;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: driver calls with valid out-pointers, in the documented order.
    let rc = unsafe {
        let mut rc = (cuda.init)(0);
        if rc == CUDA_SUCCESS {
            rc = (cuda.device_get)(&mut dev, 0);
        }
        if rc == CUDA_SUCCESS {
            rc = (cuda.retain)(&mut ctx, dev);
        }
        if rc == CUDA_SUCCESS {
            rc = (cuda.set_current)(ctx);
        }
        rc
    };
    if rc != CUDA_SUCCESS {
        r.line(
            Verdict::Fail,
            "context",
            &format!(
                "cuInit/cuDevicePrimaryCtxRetain on device 0 failed: CUresult {rc} (limit {})",
                format_size(limit)
            ),
        );
        return ExitCode::SUCCESS;
    }
    r.line(Verdict::Pass, "context", "primary context on device 0");
    // 3. cuMemGetInfo reports the limit.
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers, a current context.
    let rc = unsafe { (cuda.mem_get_info)(&mut free, &mut total) };
    if rc == CUDA_SUCCESS && total as u64 == limit {
        r.line(
            Verdict::Pass,
            "cuMemGetInfo",
            &format!(
                "total {} = the limit, free {}",
                format_size(limit),
                format_size(free as u64)
            ),
        );
    } else {
        r.line(
            Verdict::Fail,
            "cuMemGetInfo",
            &format!(
                "CUresult {rc}, total {} but the limit is {}",
                format_size(total as u64),
                format_size(limit)
            ),
        );
    }
    // 4. NVML reports the limit.
    nvml_check(&mut r, limit);
    // 5. Allocations stop at the limit.
    alloc_check(&mut r, &cuda, limit);
    // 6. Launches are governed.
    compute_check(&mut r, &cuda);
    ExitCode::SUCCESS
}

/// Asks the preloaded library at `lib` for its version (`vgpu_version`): PASS with it, WARN
/// when it is not this command's, FAIL without the symbol (not vgpu's library). Returns
/// whether the library is vgpu's.
fn version_check(r: &mut Report, lib: &Path) -> bool {
    // SAFETY: RTLD_NOLOAD only returns a handle to the library already mapped (preloaded):
    // nothing is loaded or initialised.
    let handle = unsafe {
        libloading::os::unix::Library::open(Some(lib), libc::RTLD_NOLOAD | libc::RTLD_LAZY)
    };
    let version = handle.ok().and_then(|h| {
        // SAFETY: vgpu's `vgpu_version` takes nothing and returns a static NUL-terminated
        // string; the lookup itself calls nothing.
        let f =
            unsafe { h.get::<unsafe extern "C" fn() -> *const c_char>(b"vgpu_version") }.ok()?;
        // SAFETY: the symbol is vgpu's (above): it returns a pointer to a static C string.
        let p = unsafe { f() };
        // SAFETY: non-null, NUL-terminated and static (vgpu_version's contract).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    });
    let Some(version) = version else {
        r.line(
            Verdict::Fail,
            "library version",
            &format!(
                "{} has no vgpu_version symbol: it is not vgpu's libvgpu.so (HAMi-core's library \
                 has the same name); the checks that need vgpu's library are skipped",
                lib.display()
            ),
        );
        return false;
    };
    let detail = format!("{} is vgpu {version}", lib.display());
    if version == crate::VERSION {
        r.line(Verdict::Pass, "library version", &detail);
    } else {
        r.line(
            Verdict::Warn,
            "library version",
            &format!("{detail}, this vgpu command is {}", crate::VERSION),
        );
    }
    true
}

fn nvml_check(r: &mut Report, limit: u64) {
    // SAFETY: loading NVML, as nvidia-smi does.
    let lib = match unsafe { Library::new("libnvidia-ml.so.1") } {
        Ok(l) => l,
        Err(e) => return r.line(Verdict::Fail, "nvml memory", &e.to_string()),
    };
    let f = || -> Result<nvmlMemory_t, String> {
        let init: unsafe extern "C" fn() -> nvmlReturn_t = sym(&lib, "nvmlInit_v2")?;
        let by_index: unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t =
            sym(&lib, "nvmlDeviceGetHandleByIndex_v2")?;
        let info: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t =
            sym(&lib, "nvmlDeviceGetMemoryInfo")?;
        let mut h: nvmlDevice_t = std::ptr::null_mut();
        let mut m = nvmlMemory_t {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: NVML calls with valid out-pointers.
        unsafe {
            let rc = init();
            if rc != NVML_SUCCESS {
                return Err(format!("nvmlInit_v2: {rc}"));
            }
            let rc = by_index(0, &mut h);
            if rc != NVML_SUCCESS {
                return Err(format!("nvmlDeviceGetHandleByIndex_v2(0): {rc}"));
            }
            let rc = info(h, &mut m);
            if rc != NVML_SUCCESS {
                return Err(format!("nvmlDeviceGetMemoryInfo: {rc}"));
            }
        }
        Ok(m)
    };
    match f() {
        Ok(m) if m.total == limit => r.line(
            Verdict::Pass,
            "nvml memory",
            &format!(
                "total {} = the limit, used {}",
                format_size(m.total),
                format_size(m.used)
            ),
        ),
        Ok(m) => r.line(
            Verdict::Fail,
            "nvml memory",
            &format!(
                "nvmlDeviceGetMemoryInfo total {} but the limit is {}",
                format_size(m.total),
                format_size(limit)
            ),
        ),
        Err(e) => r.line(Verdict::Fail, "nvml memory", &e),
    }
}

fn alloc_check(r: &mut Report, cuda: &Cuda, limit: u64) {
    let chunk = (limit / 16).max(1 << 20) as usize;
    let mut ptrs = Vec::new();
    let mut last = CUDA_SUCCESS;
    // Past the limit by far: a driver that does not refuse is caught without exhausting a real
    // GPU (at most twice the limit).
    for _ in 0..(2 * usize::try_from(limit).unwrap_or(usize::MAX) / chunk + 2) {
        let mut p: CUdeviceptr = 0;
        // SAFETY: a valid out-pointer, a current context.
        last = unsafe { (cuda.alloc)(&mut p, chunk) };
        if last != CUDA_SUCCESS {
            break;
        }
        ptrs.push(p);
    }
    let got = (ptrs.len() * chunk) as u64;
    for p in ptrs {
        // SAFETY: freeing what we allocated.
        unsafe { (cuda.free)(p) };
    }
    let (free_now, _) = {
        let (mut f, mut t) = (0usize, 0usize);
        // SAFETY: as above.
        unsafe { (cuda.mem_get_info)(&mut f, &mut t) };
        (f, t)
    };
    if last == CUDA_ERROR_OUT_OF_MEMORY && got <= limit {
        r.line(
            Verdict::Pass,
            "allocation limit",
            &format!(
                "refused with CUDA_ERROR_OUT_OF_MEMORY after {} in {}-chunks (limit {}); {} free after freeing",
                format_size(got),
                format_size(chunk as u64),
                format_size(limit),
                format_size(free_now as u64)
            ),
        );
    } else {
        r.line(
            Verdict::Fail,
            "allocation limit",
            &format!(
                "allocated {} under a limit of {} (last CUresult {last})",
                format_size(got),
                format_size(limit)
            ),
        );
    }
}

/// A kernel that spins for its `u64` parameter's nanoseconds of the GPU's global timer: PTX text,
/// so any driver JIT-compiles it for its GPU (no nvcc, no fat binary). Named as the simulated
/// driver's 1 ms spin kernel, so the same check runs on the simulator.
const SPIN_PTX: &str = "\
.version 6.0
.target sm_50
.address_size 64

.visible .entry spin_1000us(
    .param .u64 spin_ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [spin_ns];
    mov.u64 %rd2, %globaltimer;
$L_spin:
    mov.u64 %rd3, %globaltimer;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra $L_spin;
    ret;
}
";

/// Points the measured share may be off the limit and still PASS.
const SHARE_TOLERANCE: f64 = 5.0;

/// The compute check's verdict for a measured `share` (percent) under a limit of `sm`: FAIL
/// when launches are clearly not governed (the work took less than 60 % of the governed time),
/// PASS within ±[`SHARE_TOLERANCE`] points, WARN otherwise.
fn compute_verdict(share: f64, sm: u8) -> Verdict {
    let sm = f64::from(sm);
    if share > sm / 0.6 {
        Verdict::Fail
    } else if (share - sm).abs() <= SHARE_TOLERANCE {
        Verdict::Pass
    } else {
        Verdict::Warn
    }
}

/// Kernels of 1 ms the check runs before it measures: a new container has [`head_start`] of
/// its virtual time in hand (at `sm` % of the GPU) and earns its share meanwhile, so it runs
/// at the GPU's full speed for about `head_start × sm / (100 − sm)` (43 ms at 30 %, 100 ms at
/// 50 %, 300 ms at 75 %), and settles over about as long again. Measured from the start, the
/// check saw that as a share above the limit (35 % at 30 %, 68 % at 50 %) and warned on a
/// healthy machine. Twice that, at most 1,000 (the check stays under about 2 s); none above
/// 95 %, where the limit and the full speed are within the check's tolerance anyway.
fn head_start_kernels(sm: u8) -> u32 {
    if sm > 95 {
        return 0;
    }
    let head_ms = head_start().as_secs_f64() * 1e3;
    let sm = f64::from(sm);
    // At most 3,800 (95 %) before the cap: the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = (2.0 * head_ms * sm / (100.0 - sm)).ceil() as u32;
    n.min(1_000)
}

fn compute_check(r: &mut Report, cuda: &Cuda) {
    let cfg = Config::from_env().ok();
    if cfg.as_ref().map(|c| c.core_policy) == Some(CorePolicy::Disable) {
        return r.line(
            Verdict::Skip,
            "compute limit",
            "GPU_CORE_UTILIZATION_POLICY=disable: the SM limit is not enforced by choice",
        );
    }
    let Some(sm) = env_sm_limit(cfg.as_ref()) else {
        return r.line(Verdict::Skip, "compute limit", "no compute limit set");
    };
    type LoadData = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CUresult;
    type GetFunction = unsafe extern "C" fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult;
    type Launch = unsafe extern "C" fn(
        CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CUstream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CUresult;
    type Sync = unsafe extern "C" fn() -> CUresult;
    let syms = (|| -> Result<(LoadData, GetFunction, Launch, Sync), String> {
        Ok((
            sym(&cuda._lib, "cuModuleLoadData")?,
            sym(&cuda._lib, "cuModuleGetFunction")?,
            sym(&cuda._lib, "cuLaunchKernel")?,
            sym(&cuda._lib, "cuCtxSynchronize")?,
        ))
    })();
    let Ok((load, get, launch, sync)) = syms else {
        return r.line(
            Verdict::Fail,
            "compute limit",
            "the driver lacks cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel or cuCtxSynchronize",
        );
    };
    let image = CString::new(SPIN_PTX).expect("no NUL");
    let name = CString::new("spin_1000us").expect("no NUL");
    let mut module: CUmodule = std::ptr::null_mut();
    let mut func: CUfunction = std::ptr::null_mut();
    // SAFETY: driver calls with valid pointers; the image is NUL-terminated PTX text, which a
    // real driver JIT-compiles for its GPU (the simulated driver times kernels by name).
    let (lr, gr) = unsafe {
        let lr = load(&mut module, image.as_ptr().cast());
        let gr = if lr == CUDA_SUCCESS {
            get(&mut func, module, name.as_ptr())
        } else {
            lr
        };
        (lr, gr)
    };
    if lr != CUDA_SUCCESS || gr != CUDA_SUCCESS {
        return r.line(
            Verdict::Fail,
            "compute limit",
            &format!("could not load the 1 ms spin kernel (PTX): cuModuleLoadData {lr}, cuModuleGetFunction {gr}"),
        );
    }
    // The kernel's one parameter: how long it spins, in ns of the GPU's global timer.
    let mut spin_ns: u64 = 1_000_000;
    let mut params = [(&raw mut spin_ns).cast::<c_void>()];
    const COUNT: u32 = 200;
    // `n` kernels, then a synchronisation: the two results.
    let mut run = |n: u32| {
        let mut rc = CUDA_SUCCESS;
        for _ in 0..n {
            // SAFETY: the loaded function, on the NULL stream, with its one u64 parameter.
            rc = unsafe {
                launch(
                    func,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            if rc != CUDA_SUCCESS {
                break;
            }
        }
        // SAFETY: a current context.
        (rc, unsafe { sync() })
    };
    // First the container's head start, which runs at full speed (not part of the share measured).
    let warm = head_start_kernels(sm);
    let (mut rc, mut rs) = run(warm);
    let t0 = Instant::now();
    if rc == CUDA_SUCCESS && rs == CUDA_SUCCESS {
        (rc, rs) = run(COUNT);
    }
    let wall = t0.elapsed();
    if rc != CUDA_SUCCESS || rs != CUDA_SUCCESS {
        return r.line(
            Verdict::Fail,
            "compute limit",
            &format!("cuLaunchKernel {rc}, cuCtxSynchronize {rs}"),
        );
    }
    let busy_ms = f64::from(COUNT); // 1 ms each
    let expect_ms = busy_ms * 100.0 / f64::from(sm);
    let got_ms = wall.as_secs_f64() * 1e3;
    let share = 100.0 * busy_ms / got_ms.max(1e-3);
    let detail = format!(
        "measured share {share:.1}% of {sm}% ({COUNT} kernels of 1 ms took {got_ms:.0} ms after {warm} for the container's head start; unlimited: about {busy_ms:.0} ms, governed: about {expect_ms:.0} ms)"
    );
    r.line(compute_verdict(share, sm), "compute limit", &detail);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compute_check_first_spends_the_containers_head_start() {
        // A head start of 100 ms at 50 %: 100 ms of wall time at full speed, twice that.
        assert_eq!(
            head_start().as_millis(),
            100,
            "the figures below assume a head start of 100 ms"
        );
        assert_eq!(head_start_kernels(50), 200);
        assert_eq!(head_start_kernels(30), 86);
        assert_eq!(head_start_kernels(75), 600);
        assert_eq!(head_start_kernels(90), 1_000);
        assert_eq!(head_start_kernels(96), 0);
    }

    #[test]
    fn the_compute_check_passes_within_five_points_and_warns_outside() {
        assert_eq!(compute_verdict(30.0, 30), Verdict::Pass);
        assert_eq!(compute_verdict(34.9, 30), Verdict::Pass);
        assert_eq!(compute_verdict(25.0, 30), Verdict::Pass);
        assert_eq!(compute_verdict(24.0, 30), Verdict::Warn);
        assert_eq!(compute_verdict(36.0, 30), Verdict::Warn);
        // Not governed at all: the work ran at (nearly) full speed.
        assert_eq!(compute_verdict(95.0, 30), Verdict::Fail);
        assert_eq!(compute_verdict(51.0, 30), Verdict::Fail);
    }
}
