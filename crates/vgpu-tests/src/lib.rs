//! Test harness: builds the C probe, lays out the simulated driver under its real sonames, and
//! runs probe processes with or without `LD_PRELOAD=libvgpu.so`.
//!
//! The artifacts are found next to the running test executable (`target/<profile>/deps/`),
//! where `cargo test` puts the cdylibs this crate dev-depends on.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `target/<profile>/deps`, where cargo puts our cdylibs and the test executables.
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().expect("exe dir").to_path_buf()
}

fn work_dir() -> PathBuf {
    let d = deps_dir().parent().expect("profile dir").join("vgpu-tests");
    std::fs::create_dir_all(&d).expect("create work dir");
    d
}

/// `libvgpu.so`: `$VGPU_TEST_LIB` when set (e.g. `dist/libvgpu.so` from `make dist`), else the
/// one cargo built.
pub fn libvgpu() -> PathBuf {
    let p = std::env::var_os("VGPU_TEST_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| deps_dir().join("libvgpu.so"));
    assert!(p.exists(), "{} not built", p.display());
    p
}

/// `$VGPU_TEST_RUNNER` split into words (e.g. `qemu-aarch64-static -L /sysroot` when the tests
/// and the probe are built for another architecture), or empty.
pub fn runner() -> Vec<String> {
    std::env::var("VGPU_TEST_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// A command for `program`, a binary built for the tests' architecture: run through
/// [`runner`] when one is set.
pub fn target_command(program: &Path) -> Command {
    match runner().split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn replace_symlink(target: &Path, link: &Path) {
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).expect("symlink");
    std::fs::rename(&tmp, link).expect("rename symlink");
}

/// A directory holding the simulated driver and NVML under their real sonames.
pub fn sim_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = work_dir().join("sim");
        std::fs::create_dir_all(&dir).expect("sim dir");
        let cuda = deps_dir().join("libvgpu_sim_cuda.so");
        let nvml = deps_dir().join("libvgpu_sim_nvml.so");
        assert!(cuda.exists() && nvml.exists(), "simulated driver not built");
        for name in ["libcuda.so.1", "libcuda.so"] {
            replace_symlink(&cuda, &dir.join(name));
        }
        replace_symlink(&nvml, &dir.join("libnvidia-ml.so.1"));
        dir
    })
    .clone()
}

/// A directory like [`sim_dir`]'s whose driver lacks the exports `names`, as an older driver
/// does (`cuStreamGetDevice` came with CUDA 12.8): a copy of the simulated driver, `tag` in its
/// name, with each name renamed in its dynamic string table, so that `dlsym` finds none of them.
/// The new name keeps the length and the GNU hash (the first letter one up, the second 33 down:
/// `cu…` becomes `dT…`), so the symbol table's hash chains still lead to it and the driver's
/// own references to the function (its `cuGetProcAddress` table) still bind.
/// Panics unless each name was patched and `nm -D` no longer lists it.
pub fn sim_dir_without(tag: &str, names: &[&str]) -> PathBuf {
    let dir = work_dir().join(format!("sim-{tag}"));
    std::fs::create_dir_all(&dir).expect("sim dir");
    let mut lib = std::fs::read(deps_dir().join("libvgpu_sim_cuda.so")).expect("read the sim");
    // The dynamic string table's offset and size: `readelf -S -W`'s line for `.dynstr`.
    let out = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(deps_dir().join("libvgpu_sim_cuda.so"))
        .output()
        .expect("readelf (binutils) must be installed");
    let table = String::from_utf8_lossy(&out.stdout);
    // `  [ 6] .dynstr  STRTAB  <address> <offset> <size> ...`
    let fields: Vec<&str> = table
        .lines()
        .filter_map(|l| Some(l.split_once(']')?.1.split_whitespace().collect()))
        .find(|f: &Vec<&str>| f.first() == Some(&".dynstr"))
        .expect("a .dynstr section");
    let hex = |i: usize| usize::from_str_radix(fields[i], 16).expect("a hex field");
    let (off, size) = (hex(3), hex(4));
    let dynstr = &mut lib[off..off + size];
    for name in names {
        let needle = [&[0u8][..], name.as_bytes(), &[0u8]].concat();
        let at = dynstr
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .unwrap_or_else(|| panic!("{name} is not in the sim's .dynstr"));
        let gnu_hash = |b: &[u8]| {
            b.iter().fold(5381u32, |h, &c| {
                h.wrapping_mul(33).wrapping_add(u32::from(c))
            })
        };
        let was = gnu_hash(name.as_bytes());
        dynstr[at + 1] += 1;
        dynstr[at + 2] -= 33;
        assert_eq!(
            gnu_hash(&dynstr[at + 1..at + 1 + name.len()]),
            was,
            "{name}"
        );
    }
    let cuda = dir.join(format!("libvgpu_sim_cuda_{tag}.so"));
    let tmp = cuda.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &lib).expect("write the patched sim");
    std::fs::rename(&tmp, &cuda).expect("rename the patched sim");
    let nm = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(&cuda)
        .output()
        .expect("nm (binutils) must be installed");
    let listed = String::from_utf8_lossy(&nm.stdout);
    for name in names {
        assert!(
            !listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} still exported"
        );
    }
    for name in ["libcuda.so.1", "libcuda.so"] {
        replace_symlink(&cuda, &dir.join(name));
    }
    replace_symlink(
        &deps_dir().join("libvgpu_sim_nvml.so"),
        &dir.join("libnvidia-ml.so.1"),
    );
    dir
}

/// Compiles `c/<source>` with `args` into `out` in the work directory (through a temporary
/// name, so that concurrent test binaries never run a half-written file).
fn compile_c(source: &str, out: &str, args: &[String]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(source);
    let dest = work_dir().join(out);
    let tmp = work_dir().join(format!("{out}.tmp{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args(["-O1", "-Wall", "-Wextra", "-o"])
        .arg(&tmp)
        .arg(src)
        .args(args)
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling {source} failed");
    std::fs::rename(&tmp, &dest).expect("rename the compiled file");
    dest
}

/// The C probe (`c/probe.c`), compiled once per test binary and linked to the simulator.
pub fn probe() -> PathBuf {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let args = [format!("-L{}", sim_dir().display())]
                .into_iter()
                .chain(["-lcuda", "-ldl", "-lpthread"].map(String::from))
                .collect::<Vec<_>>();
            compile_c("probe.c", "probe", &args)
        })
        .clone()
}

/// `c/nothreads.c` as a shared library, compiled once per test binary: preloaded before
/// `libvgpu.so`, no thread can be created in the process.
pub fn nothreads() -> PathBuf {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        compile_c(
            "nothreads.c",
            "libnothreads.so",
            &["-shared".into(), "-fPIC".into()],
        )
    })
    .clone()
}

/// Seconds a process a test starts may live: past them the kernel ends it (`SIGALRM`, whose
/// default action ends a process; the alarm is kept across `exec`), so that no test waits on a
/// child for ever, however the child hangs.
pub const CHILD_LIMIT_S: u32 = 300;

/// Makes the process `cmd` starts die with the test that starts it: `SIGKILL` when the thread
/// that spawned it ends (`PR_SET_PDEATHSIG`: the test's thread returns or panics, or the test
/// binary is killed), at once if the test was already gone when it started, and after
/// [`CHILD_LIMIT_S`] in any case. Every child of the harness gets it (a timed-out `cargo test`
/// once left children spinning for 80 minutes).
pub fn dies_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (prctl, getppid, alarm, _exit) on plain integers.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            libc::alarm(CHILD_LIMIT_S);
            Ok(())
        })
    }
}

/// A directory of this test process's own, `<root>/<prefix><pid>`, made on first use and
/// removed when the process exits (an `atexit` handler: the harness returns from `main` or
/// calls `exit`); those of test processes that were killed go when the next one makes its own.
/// Each region is a 3 MiB file whose blocks are allocated and a run of the workspace's tests
/// makes about 2,000: kept, they once filled the disk CI shares.
struct OwnDir {
    path: OnceLock<PathBuf>,
    root: fn() -> PathBuf,
    prefix: &'static str,
}

/// The file in an [`OwnDir`] its process holds locked (`flock`) while it lives.
const ALIVE: &str = ".alive";

/// Region files ([`fresh_region`]): `target/<profile>/vgpu-tests/regions/<pid>/`.
static REGIONS: OwnDir = OwnDir {
    path: OnceLock::new(),
    root: || work_dir().join("regions"),
    prefix: "",
};

/// Node directories ([`fresh_node_dir`]): `<tmp>/vgpu-tests-<pid>/`.
static NODES: OwnDir = OwnDir {
    path: OnceLock::new(),
    root: std::env::temp_dir,
    prefix: "vgpu-tests-",
};

extern "C" fn remove_own_dirs() {
    for d in [&REGIONS, &NODES] {
        if let Some(p) = d.path.get() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Whether process `pid` is gone (`kill(pid, 0)` says `ESRCH`).
fn gone(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no signal is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

impl OwnDir {
    fn get(&self) -> &Path {
        self.path.get_or_init(|| {
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            AT_EXIT.call_once(|| {
                // SAFETY: registers a function of no arguments that reads set OnceLocks and
                // removes files; a failed registration (-1) only leaves the files behind.
                unsafe { libc::atexit(remove_own_dirs) };
            });
            let root = (self.root)();
            self.sweep(&root);
            let d = root.join(format!("{}{}", self.prefix, std::process::id()));
            std::fs::create_dir_all(&d).expect("create a test process's directory");
            // Held for the life of the process (the descriptor is never closed): the sweep
            // of another test process, in whatever PID namespace, sees the directory in use.
            let alive = std::fs::File::create(d.join(ALIVE)).expect("create the alive file");
            // SAFETY: flock on a descriptor we own; LOCK_EX on a new file cannot block long.
            unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&alive), libc::LOCK_EX) };
            std::mem::forget(alive);
            d
        })
    }

    /// Removes what killed test processes left in `root`: directories `<prefix><pid>` whose
    /// alive file, a minute old or more, nobody holds locked (its process is gone, whatever PID
    /// namespace it ran in);
    /// entries without one (an older layout: region files `<pid>-<n>-<nanos>.cache`) whose
    /// process is gone by its pid.
    fn sweep(&self, root: &Path) {
        let Ok(entries) = std::fs::read_dir(root) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(self.prefix)) else {
                continue;
            };
            let p = e.path();
            let dead = match std::fs::File::open(p.join(ALIVE)) {
                // Unlocked, and not just made (its maker locks it right after creating it).
                Ok(f) => {
                    let old = f
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > std::time::Duration::from_secs(60));
                    // SAFETY: flock on a descriptor we own, not blocking (LOCK_NB).
                    old && unsafe {
                        libc::flock(
                            std::os::fd::AsRawFd::as_raw_fd(&f),
                            libc::LOCK_EX | libc::LOCK_NB,
                        ) == 0
                    }
                }
                Err(_) => rest
                    .split('-')
                    .next()
                    .and_then(|pid| pid.parse().ok())
                    .is_some_and(|pid: libc::pid_t| pid > 0 && gone(pid)),
            };
            if dead {
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }
}

/// A path for a new region file (not created), in this test process's own directory, which
/// goes when the process exits (or, if it is killed, when the next test process starts).
pub fn fresh_region() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = REGIONS.get();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    dir.join(format!(
        "{}-{}.cache",
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    ))
}

/// One probe run.
#[derive(Clone, Debug)]
pub struct Probe {
    env: BTreeMap<String, String>,
    /// Variables whose value is not text (set after `env`).
    env_os: Vec<(String, std::ffi::OsString)>,
    preload: bool,
    args: Vec<String>,
}

/// The result of a run: exit status and the probe's lines.
#[derive(Debug)]
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Probe {
    /// A probe under `LD_PRELOAD=libvgpu.so`, with a clean CUDA environment and a shared
    /// region of its own (a container of its own); [`Probe::region`] shares one. Its node
    /// directory is this test process's [`test_node_dir`], not the machine's default, which
    /// test processes running at once (and anyone else) would share.
    pub fn new() -> Self {
        let mut env = BTreeMap::new();
        env.insert(
            "CUDA_DEVICE_MEMORY_SHARED_CACHE".to_string(),
            fresh_region().display().to_string(),
        );
        env.insert(
            "VGPU_NODE_DIR".to_string(),
            test_node_dir().display().to_string(),
        );
        Probe {
            env,
            env_os: Vec::new(),
            preload: true,
            args: Vec::new(),
        }
    }
    /// Uses the region file `path` (processes given the same path form one container).
    pub fn region(self, path: &Path) -> Self {
        self.env(
            "CUDA_DEVICE_MEMORY_SHARED_CACHE",
            &path.display().to_string(),
        )
    }
    /// The same, without vgpu (the baseline).
    pub fn bare() -> Self {
        Probe {
            preload: false,
            ..Probe::new()
        }
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.insert(k.into(), v.into());
        self
    }
    /// A variable with any bytes as its value (a path that is not UTF-8).
    pub fn env_os(mut self, k: &str, v: impl Into<std::ffi::OsString>) -> Self {
        self.env.remove(k);
        self.env_os.push((k.into(), v.into()));
        self
    }
    pub fn limit(self, v: &str) -> Self {
        self.env("CUDA_DEVICE_MEMORY_LIMIT", v)
    }
    pub fn via(mut self, mode: &str) -> Self {
        self.args.push("--via".into());
        self.args.push(mode.into());
        self
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn ops(mut self, ops: &[&str]) -> Self {
        self.args.extend(ops.iter().map(|s| s.to_string()));
        self
    }
    /// The command, ready to spawn.
    pub fn command(&self) -> Command {
        let mut c = target_command(&probe());
        c.args(&self.args);
        for (k, _) in std::env::vars() {
            if k.starts_with("CUDA_")
                || k.starts_with("VGPU_")
                || k == "LD_PRELOAD"
                || k.starts_with("LIBCUDA")
                // The downward-API variables a test machine (itself a container) may have set:
                // a probe records them in its region.
                || matches!(k.as_str(), "POD_NAME" | "POD_NAMESPACE" | "CONTAINER_NAME")
            {
                c.env_remove(k);
            }
        }
        dies_with_parent(&mut c);
        c.env("LD_LIBRARY_PATH", sim_dir());
        c.env("VGPU_SIM_MEM", "16g");
        if self.preload {
            c.env("LD_PRELOAD", libvgpu());
        }
        c.envs(&self.env);
        c.envs(self.env_os.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null());
        c
    }
    pub fn run(&self) -> Run {
        let out: Output = self.command().output().expect("spawn probe");
        Run {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            // The probe's own diagnostics start with "probe:"; keep only what others print.
            stderr: String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| !l.starts_with("probe:"))
                .map(|l| format!("{l}\n"))
                .collect(),
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

impl Run {
    /// The lines the probe printed.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
    /// The first line for `op` (`OK op ...` or `ERR op ...`), split into words.
    pub fn line(&self, op: &str) -> Vec<&str> {
        self.nth(op, 0)
    }
    /// The n-th line for `op`.
    pub fn nth(&self, op: &str, n: usize) -> Vec<&str> {
        self.stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|w| w.len() >= 2 && w[1] == op)
            .nth(n)
            .unwrap_or_else(|| {
                panic!(
                    "no line {n} for {op} in:\n{}\nstderr:\n{}",
                    self.stdout, self.stderr
                )
            })
    }
    /// `key=value` from the first line for `op`, as a number.
    pub fn value(&self, op: &str, key: &str) -> u64 {
        self.nth_value(op, 0, key)
    }
    pub fn nth_value(&self, op: &str, n: usize, key: &str) -> u64 {
        let line = self.nth(op, n);
        let prefix = format!("{key}=");
        line.iter()
            .find_map(|w| w.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{key} in {line:?} is not a number"))
    }
    /// Whether the line for `op` says OK.
    pub fn ok(&self, op: &str) -> bool {
        self.line(op)[0] == "OK"
    }
    /// Asserts the probe ran to the end.
    pub fn success(self) -> Self {
        assert!(
            self.status.success(),
            "probe failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// The simulated context reservation (VGPU_SIM_CTX_RESERVE's default): 303 MiB.
pub const SIM_CTX: u64 = 303 * MIB;

/// Starts a probe that runs `ops` then holds until its stdin closes; returns once it printed its
/// `hold` line, with the lines printed so far (the caller closes stdin or kills the child).
pub fn holding(p: Probe, ops: &[&str]) -> (std::process::Child, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = spawn_holding(p, ops);
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).expect("read probe output") == 0 {
            break;
        }
        let done = l.starts_with("OK hold");
        lines.push(l.trim_end().to_string());
        if done {
            break;
        }
    }
    (child, lines)
}

/// Starts a probe that runs `ops` then holds until its stdin closes, stdin and stdout piped,
/// without waiting for it (several can then start at once; [`holding`] waits for one).
pub fn spawn_holding(p: Probe, ops: &[&str]) -> std::process::Child {
    let mut all: Vec<&str> = ops.to_vec();
    all.push("hold");
    p.ops(&all)
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn probe")
}

/// A child process killed and reaped when dropped, so a failing test leaves nothing running.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `p` and waits until it printed a line starting with `until`; its output is drained
/// from then on (it never blocks on a full pipe). Panics, killing it, if it ends first.
pub fn started(p: Probe, until: &str) -> Reaped {
    use std::io::{BufRead, BufReader};
    let mut child = Reaped(
        p.command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn probe"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("piped stdout"));
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).expect("read probe output") == 0 {
            panic!("probe ended before {until}: {seen}");
        }
        seen.push_str(&l);
        if l.starts_with(until) {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    child
}

/// Sends SIGTERM to `pid` (a child of the test), without needing a `kill` program on the
/// machine (minimal images and the bullseye chroot have none). Panics if it cannot be sent.
pub fn terminate(pid: u32) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(
        rc,
        0,
        "kill -TERM {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// Starts a probe that runs `init ctx` and then `ops`, stdout piped (read it with [`result`]).
pub fn spawn(p: Probe, ops: &[&str]) -> std::process::Child {
    p.ops(&["init", "ctx"])
        .ops(ops)
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn probe")
}

/// The value of `key` in the last `OK <op>` line of a finished child started by [`spawn`].
pub fn result(c: std::process::Child, op: &str, key: &str) -> u64 {
    field(&result_line(c, op), key)
}

/// The last `OK <op>` line of a finished child started by [`spawn`] (read its values with
/// [`field`]).
pub fn result_line(c: std::process::Child, op: &str) -> String {
    let out = c.wait_with_output().expect("wait for probe");
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{s}");
    s.lines()
        .rfind(|l| l.starts_with(&format!("OK {op} ")))
        .unwrap_or_else(|| panic!("no OK {op} in {s}"))
        .to_string()
}

/// The value of `key` (`key=VALUE`) in a probe's output line.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// A directory of this test process's own under the system's temporary directory,
/// `<tmp>/vgpu-tests-<pid>/`, removed with the process (for node directories and scratch
/// files).
pub fn own_temp_dir() -> PathBuf {
    NODES.get().to_path_buf()
}

/// The node directory of the probes this test process starts unless a test names another:
/// `<tmp>/vgpu-tests-<pid>/node`.
pub fn test_node_dir() -> PathBuf {
    let d = NODES.get().join("node");
    std::fs::create_dir_all(&d).expect("create the test process's node dir");
    d
}

/// A node directory of a test's own, emptied first: `<tmp>/vgpu-tests-<pid>/<tag>-<name>`,
/// removed with its test process.
pub fn fresh_node_dir(tag: &str, name: &str) -> String {
    let d = NODES.get().join(format!("{tag}-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create node dir");
    d.display().to_string()
}

/// Locks a test file's serialising mutex (its tests measure wall time, and running beside each
/// other on a 2-core machine would measure the CPU instead), also after a test that held it
/// failed.
pub fn serial(m: &'static std::sync::Mutex<()>) -> std::sync::MutexGuard<'static, ()> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Children that are killed and reaped when this is dropped (a failing assertion leaves none
/// running).
pub struct Children(pub Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
