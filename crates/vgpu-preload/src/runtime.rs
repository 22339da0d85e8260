//! Process state, initialised lazily from whichever hook runs first.
//!
//! Two phases, each a lock-free state machine:
//! 1. [`mode`]: the resolved [`Plan`] (stage 2 of `vgpu_policy`'s configuration; stage 1 is the
//!    only reader of the environment). Cheap and driver-free, so any hook (even `dlsym` before
//!    `main`) can ask it. Racing threads read the same environment and agree on the result.
//! 2. [`runtime`]: the device table, ledger and registries. Built once the driver is
//!    initialised (it needs `cuDeviceGetCount` / `cuDeviceGetUuid`), normally right after the
//!    real `cuInit` succeeds.
use crate::accounting::Accounting;
use crate::driver::{Driver, REAL};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use vgpu_policy::config::Config;
use vgpu_policy::ledger::{Denied, DeviceIndex, Ledger, LocalLedger};
use vgpu_policy::plan::{Activity, NoticeLevel, Plan};
use vgpu_policy::registry::Registry;
use vgpu_sys::cuda::*;

/// What vgpu does in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Configuration not read yet.
    Unknown = 0,
    /// `CUDA_DISABLE_CONTROL=true`: every hook forwards untouched.
    Disabled = 1,
    /// No limit configured: every hook forwards untouched.
    PassThrough = 2,
    /// Limits are configured and enforced.
    Enforce = 3,
    /// The configuration is invalid: CUDA initialisation fails.
    Broken = 4,
    /// The environment sets no limit (or disables vgpu), and the container's region has not
    /// been looked at yet: once the driver is initialised, the process enforces the region's
    /// limits if the region is in use, else it becomes what its environment says
    /// ([`Plan::follows_live_region`]).
    Follow = 5,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Unknown as u8);
static PLAN: OnceLock<Plan> = OnceLock::new();

/// The process's mode; reads the environment on first use.
#[inline]
pub fn mode() -> Mode {
    match MODE.load(Ordering::Acquire) {
        1 => Mode::Disabled,
        2 => Mode::PassThrough,
        3 => Mode::Enforce,
        4 => Mode::Broken,
        5 => Mode::Follow,
        _ => init_mode(),
    }
}

/// True when limits are enforced (the only case in which hooks do more than forward).
#[inline]
pub fn enforcing() -> bool {
    mode() == Mode::Enforce
}

/// True when limits are enforced, or may be once the container's region has been looked at.
#[inline]
pub fn limits_may_apply() -> bool {
    matches!(mode(), Mode::Enforce | Mode::Follow)
}

fn mode_of(activity: Activity) -> Mode {
    match activity {
        Activity::Disabled => Mode::Disabled,
        Activity::Enforce => Mode::Enforce,
        Activity::PassThrough => Mode::PassThrough,
    }
}

/// The resolved plan, once [`mode`] has read the configuration successfully.
pub fn plan() -> Option<&'static Plan> {
    mode();
    PLAN.get()
}

#[cold]
fn init_mode() -> Mode {
    let m = match Config::from_env() {
        Err(e) => {
            crate::log::fatal(format_args!("{e}; CUDA initialisation will fail"));
            Mode::Broken
        }
        Ok(cfg) => {
            crate::log::set_level(cfg.log_level);
            let plan = Plan::resolve(&cfg);
            let m = if plan.follows_live_region() {
                Mode::Follow
            } else {
                mode_of(plan.activity)
            };
            let _ = PLAN.set(plan);
            m
        }
    };
    // Several threads may get here; they computed the same answer from the same environment,
    // and only the first prints (compare_exchange from Unknown).
    match MODE.compare_exchange(
        Mode::Unknown as u8,
        m as u8,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            if let Some(plan) = PLAN.get() {
                crate::log::info(format_args!("{plan}"));
            }
            m
        }
        Err(_) => mode(),
    }
}

/// One GPU as this process sees it.
pub struct Device {
    /// CUDA ordinal (after `CUDA_VISIBLE_DEVICES`); equal to the ledger index.
    pub ordinal: CUdevice,
    /// NVML-style UUID string, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// Primary-context retains seen through our hooks (on a device with a memory limit or a
    /// compute gate), and what its creation was charged.
    pub primary_retains: AtomicU32,
    pub primary_charge: AtomicU64,
    /// The primary context's handle, as the last retain returned it (0: not known).
    pub primary: AtomicU64,
}

/// Where the memory budget lives.
enum Budget {
    /// The container's shared region (the normal case).
    Shared(vgpu_region::RegionLedger),
    /// This process alone, when the region could not be used.
    Local(LocalLedger),
}

/// Everything a limiting process keeps.
pub struct Runtime {
    /// The resolved configuration.
    pub plan: &'static Plan,
    pub devices: Vec<Device>,
    /// The container-wide budget (the shared region), or a per-process one if the region could
    /// not be used: see [`Runtime::ledger`].
    budget: Budget,
    /// The same budget, charging as context memory (published to HAMi as `contextSize`): see
    /// [`Runtime::context_ledger`]. `None` without a region.
    context_budget: Option<ContextLedger>,
    /// The same budget once the process has left it at exit (see [`at_exit`]). `None` without
    /// a region.
    departed: Option<Departed>,
    /// Live allocations vgpu charged, by device pointer / handle.
    pub registry: Registry,
    /// The driver's references to the VMM handles in `registry` (their memory outlives a
    /// release while they are mapped).
    pub vmm: std::sync::Mutex<vgpu_policy::vmm::Handles>,
    /// What pools (stream-ordered and graph) and contexts are charged.
    pub accounting: Accounting,
    /// The compute gate of each device (`None`: no compute limit on it).
    pub gates: Vec<Option<crate::compute::Gate>>,
    /// Whether any device has a compute limit.
    pub compute_limited: bool,
    denial_reported: AtomicBool,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime, built on first use once the driver is initialised; `None` when not enforcing
/// or when the driver cannot yet enumerate devices (callers then forward untouched).
#[inline]
pub fn runtime() -> Option<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return Some(rt);
    }
    match mode() {
        Mode::Enforce => build_runtime(Join::Create),
        Mode::Follow => follow_region(),
        _ => None,
    }
}

/// How the runtime joins the container's region.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Join {
    /// Open it, creating it if absent (the environment sets limits).
    Create,
    /// Only if some process uses it ([`Mode::Follow`]).
    IfLive,
}

/// Decides a [`Mode::Follow`] process's mode, once the driver can name its devices: the
/// runtime over the container's region if the region is in use (the mode becomes `Enforce`),
/// else the environment's mode and no runtime.
#[cold]
fn follow_region() -> Option<&'static Runtime> {
    static DECIDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = DECIDING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = RUNTIME.get() {
        return Some(rt);
    }
    if mode() != Mode::Follow {
        return None;
    }
    let plan = PLAN.get()?;
    // Before cuInit the devices cannot be named: decide later.
    REAL.device_count()?;
    let rt = build_runtime(Join::IfLive);
    let m = mode_of(plan.activity_beside(rt.is_some()));
    MODE.store(m as u8, Ordering::Release);
    rt
}

#[cold]
fn build_runtime(join: Join) -> Option<&'static Runtime> {
    let plan = PLAN.get()?;
    let count = REAL.device_count()?;
    // One hold of NVML for every device's index (each lookup would initialise it otherwise).
    let nvml = REAL.hold_nvml();
    let mut devices = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut wanted = Vec::with_capacity(devices.capacity());
    let mut indices = Vec::with_capacity(devices.capacity());
    for ordinal in 0..count.max(0) {
        let uuid = REAL.device_uuid(ordinal).unwrap_or_default();
        // The environment's limits for this GPU's index in the container's device list (NVML's
        // numbering, whatever CUDA_VISIBLE_DEVICES says), keyed by UUID from here on.
        let index = plan.container_index(ordinal.unsigned_abs(), REAL.nvml_index_of_uuid(&uuid));
        let dp = plan.device(index);
        indices.push(index);
        crate::log::info(format_args!(
            "device {ordinal} {uuid} (container index {index}): memory limit {}",
            dp.memory_limit
                .map_or_else(|| "none".to_string(), vgpu_policy::size::format_size)
        ));
        wanted.push(dp);
        devices.push(Device {
            ordinal,
            uuid,
            primary_retains: AtomicU32::new(0),
            primary_charge: AtomicU64::new(0),
            primary: AtomicU64::new(0),
        });
    }
    // Per-index limits for devices the container does not have limit nothing: say so. The
    // container's devices are NVML's; without NVML, CUDA's when CUDA_VISIBLE_DEVICES hides none.
    let container_devices = REAL
        .nvml_device_count()
        .or_else(|| plan.visible_devices.is_none().then(|| count.unsigned_abs()));
    drop(nvml);
    if join == Join::Create
        && let Some(n) = container_devices
    {
        for notice in plan.limits_for_missing_devices(n) {
            crate::log::warn(format_args!("{}", notice.text));
        }
    }
    let budget = open_budget(&devices, &wanted, join)?;
    let (context_budget, departed) = match &budget {
        Budget::Shared(l) => {
            let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
            (
                Some(ContextLedger(l.region().ledger(&uuids))),
                Some(Departed::new(l.region().ledger(&uuids), uuids.len())),
            )
        }
        Budget::Local(_) => (None, None),
    };
    // The compute share in force: the region's when there is one (it wins over the
    // environment, like memory), else the environment's; the plan applies the policy.
    let gates: Vec<Option<crate::compute::Gate>> = (0..devices.len())
        .map(|device| {
            let region = match &budget {
                Budget::Shared(l) => Some(l.sm_limit(device)),
                Budget::Local(_) => None,
            };
            let share = plan.sm_share_in_force(indices[device], region);
            if let Some(s) = share {
                crate::log::info(format_args!("device {device}: compute limit {s}"));
            }
            plan.gate(share).map(crate::compute::Gate::new)
        })
        .collect();
    let rt = Runtime {
        plan,
        budget,
        context_budget,
        departed,
        compute_limited: gates.iter().any(Option::is_some),
        gates,
        devices,
        registry: Registry::new(),
        vmm: std::sync::Mutex::new(vgpu_policy::vmm::Handles::new()),
        accounting: Accounting::new(plan.context_size),
        denial_reported: AtomicBool::new(false),
    };
    // A racing thread may have built one first; keep the first.
    if RUNTIME.set(rt).is_ok() {
        after_build();
    }
    RUNTIME.get()
}

/// Attaches to the container's shared region. If it cannot be used (its creation lock held past
/// the wait, bad contents, no permission, ...) the process fails closed: one line naming the path
/// and the reason, `cuInit` fails and every allocation is refused ([`budget_refused`]).
///
/// With [`Join::IfLive`] (the environment sets no limit), only a region in use is joined:
/// `None` when there is none or nobody uses it (and when it cannot be read: one line, and the
/// process does what its environment says).
fn open_budget(
    devices: &[Device],
    wanted: &[vgpu_policy::plan::DevicePlan],
    join: Join,
) -> Option<Budget> {
    let init: Vec<vgpu_region::DeviceInit> = devices
        .iter()
        .zip(wanted)
        .map(|(d, w)| vgpu_region::DeviceInit {
            uuid: d.uuid.clone(),
            limit: w.memory_limit,
            sm_limit: w.sm_share.map(vgpu_policy::plan::SmShare::percent),
        })
        .collect();
    let loc = vgpu_region::Location::new(plan().and_then(|p| p.shared_cache.clone()));
    // The container's identity (downward API) goes into the region if we are the first
    // process of the run: the monitor labels the container's series with it.
    let pod = plan().map(|p| p.pod.clone()).unwrap_or_default();
    if join == Join::IfLive {
        return match vgpu_region::Region::open_if_live(&loc, &init, &pod) {
            Ok(None) => None,
            Ok(Some((region, conflicts))) => {
                let disabled = plan().is_some_and(|p| p.activity == Activity::Disabled);
                let line = format_args!(
                    "{}: the container's region is in use, so its limits apply to this process{}",
                    loc.path.display(),
                    if disabled {
                        " (CUDA_DISABLE_CONTROL ignored)"
                    } else {
                        ""
                    }
                );
                if disabled {
                    crate::log::warn(line);
                } else {
                    crate::log::info(line);
                }
                Some(attached(devices, region, conflicts))
            }
            Err(e) => {
                crate::log::warn(format_args!(
                    "{e}; cannot tell whether the container's region is in use: this process \
                     sets no limit of its own and runs without one"
                ));
                None
            }
        };
    }
    let mut opened = vgpu_region::Region::open_or_create_as(&loc, &init, &pod);
    if let Err(e) = &opened
        && loc.sharing == vgpu_region::Sharing::Private
        && matches!(
            e.kind,
            vgpu_region::ErrorKind::WrongSize { .. } | vgpu_region::ErrorKind::WrongVersion { .. }
        )
    {
        // The user's own default region, left by another vgpu version: set it aside and start
        // a new one. (A container's shared region, named by the environment, is never moved.)
        let aside = loc
            .path
            .with_extension(format!("stale-{}", std::process::id()));
        if std::fs::rename(&loc.path, &aside).is_ok() {
            crate::log::warn(format_args!(
                "{e}; moved it to {} and created a new one",
                aside.display()
            ));
            opened = vgpu_region::Region::open_or_create_as(&loc, &init, &pod);
        }
    }
    Some(match opened {
        Ok((region, conflicts)) => attached(devices, region, conflicts),
        Err(e) => {
            // Fail closed: a budget of our own would be N x the limit across the container's
            // processes. CUDA initialisation fails and every allocation is refused.
            BUDGET_REFUSED.store(true, Ordering::Release);
            crate::log::fatal(format_args!(
                "vgpu: the container's memory budget cannot be used ({e}); CUDA initialisation fails and every allocation is refused"
            ));
            Budget::Local(LocalLedger::new(&vec![Some(0); devices.len()]))
        }
    })
}

/// The budget over a region just joined; each limit of the environment the region overrides
/// is one line.
fn attached(
    devices: &[Device],
    region: vgpu_region::Region,
    conflicts: Vec<vgpu_region::Conflict>,
) -> Budget {
    for c in conflicts {
        crate::log::warn(format_args!("{c}"));
    }
    region.stamp_library(crate::version::STAMP, plan().is_some_and(|p| p.observe));
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    Budget::Shared(Arc::new(region).ledger(&uuids))
}

/// Set when the shared budget could not be opened (see [`open_budget`]).
static BUDGET_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether limits are configured but no usable budget exists: `cuInit` then fails (and every
/// allocation is refused), never a per-process budget.
pub fn budget_refused() -> bool {
    BUDGET_REFUSED.load(Ordering::Acquire)
}

/// Once the runtime exists (attach): the start-up notices, HAMi's priority, the housekeeping
/// thread, the fork handler and the exit handler.
fn after_build() {
    let Some(rt) = RUNTIME.get() else { return };
    for n in rt.plan.notices() {
        match n.level {
            NoticeLevel::Warning => crate::log::warn(format_args!("{}", n.text)),
            NoticeLevel::Info => crate::log::info(format_args!("{}", n.text)),
        }
    }
    if let Some(region) = rt.region() {
        // HAMi's webhook injects CUDA_TASK_PRIORITY; unset, the region keeps what it has
        // (1, HAMi-core's default, in a new one).
        if let Some(p) = rt.plan.task_priority {
            region.set_priority(p);
        }
        spawn_housekeeping(rt);
    }
    extern "C" fn child() {
        // In the child of a fork: no background thread survived; take a slot of our own.
        if let Some(rt) = RUNTIME.get() {
            if let Some(region) = rt.region() {
                region.on_fork_child();
            }
            for g in rt.gates.iter().flatten() {
                g.after_fork();
            }
            crate::compute::after_fork();
            // A child forked by an exit handler of the parent has not left the region: it
            // takes a slot of its own on its first charge.
            EXITED.store(false, Ordering::SeqCst);
            CHILD_NEEDS_REAPER.store(true, Ordering::Release);
        }
    }
    // SAFETY: registering a handler with no prepare/parent parts; `child` only does atomic
    // stores and descriptor bookkeeping (async-signal-safe enough for a forked child).
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
    // SAFETY: `at_exit` takes no arguments, never unwinds (its body runs under `guard::ffi`:
    // atomics, stores into the region mapping, which stays mapped for the life of the process,
    // and `Region::detach`: atomics and one `fcntl`) and calls no CUDA.
    unsafe { libc::atexit(at_exit) };
}

/// Set by the exit handler: the process has left the region (the housekeeping thread stops
/// publishing).
static EXITED: AtomicBool = AtomicBool::new(false);

/// The exit handler (`atexit`, registered at attach, after the driver was initialised).
///
/// Ordering: handlers run in the reverse order of registration, so this one runs before the
/// CUDA runtime's own teardown (libcudart registers it when the program's modules are loaded,
/// before the first `cuInit`), and before the library destructors. In order:
/// 1. the compute windows still open are reported to this process's slot (GPU time, busy until
///    now);
/// 2. the process leaves the region (`Region::detach`): its slot is cleared, so its memory is
///    out of the container's budget and HAMi's `status`, `used[]` and `deviceUtil[]` of its slot
///    are zeroed (a finished job stops showing memory in HAMi's metrics);
/// 3. anything that runs later (the CUDA runtime's teardown, destructors, other threads) still
///    goes through the hooks, to the [`Departed`] ledger, which counts what the process still
///    holds (its slot's usage as it left, plus later grants, less later frees): a new allocation
///    is granted only if it fits beside that and the container's other processes, and is
///    recorded nowhere in the region (no slot is taken again: the process is about to be gone,
///    and its memory with it).
///
/// No CUDA call here: the runtime may already be tearing the driver down.
extern "C" fn at_exit() {
    // No panic may cross the C boundary (a vgpu bug here must not abort the program's exit).
    crate::guard::ffi("exit handler", (), leave_at_exit);
}

fn leave_at_exit() {
    let Some(rt) = RUNTIME.get() else { return };
    for (device, g) in rt.gates.iter().enumerate() {
        if let Some(g) = g {
            g.report_at_exit(rt.region_ledger(), device);
            g.leave_node();
        }
    }
    // The flag first, so that hooks from here on use the departed ledger; then what the slot
    // says the process holds is added to what that ledger granted meanwhile (a charge committed
    // to the slot before the flag is in the slot; until the detach the slot's part is counted
    // twice, a refusal at worst); then the detach.
    EXITED.store(true, Ordering::SeqCst);
    if let Some(d) = &rt.departed {
        d.remember();
    }
    if let Some(region) = rt.region() {
        region.detach();
    }
}

/// Set in a forked child: its housekeeping thread is started on its next charge.
static CHILD_NEEDS_REAPER: AtomicBool = AtomicBool::new(false);

/// Starts the housekeeping thread in a forked child that uses CUDA.
pub fn child_housekeeping() {
    // A plain load first: the allocation path must not write a shared cache line.
    if CHILD_NEEDS_REAPER.load(Ordering::Relaxed)
        && CHILD_NEEDS_REAPER.swap(false, Ordering::AcqRel)
        && let Some(rt) = RUNTIME.get()
    {
        spawn_housekeeping(rt);
    }
}

/// The background threads, never on a launch or allocation path.
///
/// `vgpu-reaper` runs the region's housekeeping ([`vgpu_region::Region::housekeep`]: one
/// process of the container is the reaper: every 250 ms to 2 s it returns dead processes'
/// memory to the budget and publishes every process's SM utilisation to HAMi's monitor; the
/// others check their own lock every 60 s) and prints one error line the first time it finds
/// the region broken ([`vgpu_region::Region::is_broken`]: truncated, renamed or replaced).
///
/// `vgpu-lease`, while this process is not the reaper, waits for the reaper lease in the
/// kernel ([`vgpu_region::Region::wait_for_lease`]: no CPU) and wakes `vgpu-reaper` when it has
/// it. So an idle process of a container wakes once a minute.
fn spawn_housekeeping(rt: &'static Runtime) {
    let Some(region) = rt.region().map(Arc::clone) else {
        return;
    };
    let watched = Arc::clone(&region);
    let Ok(reaper) = std::thread::Builder::new()
        .name("vgpu-reaper".into())
        .spawn(move || {
            let region = watched;
            let mut was_reaper = false;
            loop {
                let next = region.housekeep(vgpu_region::sys::monotonic_ns());
                // Cut off from the container's budget (the file truncated, renamed or
                // replaced): one line, the first time, naming the file; charges fail closed.
                report_broken(&region);
                // The lease was lost (our descriptor was closed, and another process took it):
                // wait for it again.
                let reaper = region.is_reaper();
                if was_reaper && !reaper {
                    spawn_lease_waiter(&region, std::thread::current());
                }
                was_reaper = reaper;
                std::thread::park_timeout(next);
            }
        })
    else {
        return;
    };
    spawn_lease_waiter(&region, reaper.thread().clone());
}

/// Set once the line saying this process is cut off from its region has been printed.
static BROKEN_REPORTED: AtomicBool = AtomicBool::new(false);

/// Prints, once per process, that the region is broken (truncated, renamed or replaced) and
/// this process cut off: from the housekeeping thread, or at the first allocation it refuses
/// for that reason, whichever comes first.
fn report_broken(region: &vgpu_region::Region) {
    if let Some(why) = region.broken_reason()
        && !BROKEN_REPORTED.swap(true, Ordering::AcqRel)
    {
        crate::log::error(format_args!(
            "{why}; this process is cut off from the container's memory budget: allocations \
             on limited devices are refused from now on"
        ));
    }
}

/// Starts `vgpu-lease`: it blocks until this process holds the reaper lease, then wakes
/// `reaper` (the housekeeping thread) to make the passes, and ends.
fn spawn_lease_waiter(region: &Arc<vgpu_region::Region>, reaper: std::thread::Thread) {
    let region = Arc::clone(region);
    let _ = std::thread::Builder::new()
        .name("vgpu-lease".into())
        .stack_size(64 << 10)
        .spawn(move || {
            if region.wait_for_lease() {
                reaper.unpark();
            }
        });
}

/// The container's budget for a process that has left it (after its exit handler). The
/// process's slot is gone, but the memory it held is not until the process is: [`Departed::own`]
/// keeps, per device, what the slot said it held when it left, plus what was granted since, less
/// what was freed since. A charge is granted if it fits beside the container's other processes
/// and that; nothing is written in the region (no slot is taken again), so a finished process
/// never shows up again in HAMi's metrics.
struct Departed {
    ledger: vgpu_region::RegionLedger,
    own: Vec<AtomicU64>,
}

impl Departed {
    fn new(ledger: vgpu_region::RegionLedger, devices: usize) -> Self {
        Departed {
            ledger,
            own: (0..devices).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds what this process's slot holds (before it is cleared) to what it was granted since
    /// the flag.
    fn remember(&self) {
        for (d, own) in self.own.iter().enumerate() {
            own.fetch_add(self.ledger.process_used(d), Ordering::SeqCst);
        }
    }

    fn own(&self, device: DeviceIndex) -> u64 {
        self.own.get(device).map_or(0, |o| o.load(Ordering::SeqCst))
    }
}

impl Ledger for Departed {
    fn limit(&self, device: DeviceIndex) -> Option<u64> {
        self.ledger.limit(device)
    }
    fn set_limit(&self, device: DeviceIndex, limit: Option<u64>) {
        self.ledger.set_limit(device, limit)
    }
    fn used(&self, device: DeviceIndex) -> u64 {
        self.ledger.used(device).saturating_add(self.own(device))
    }
    fn try_charge(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied> {
        let Some(limit) = self.ledger.limit(device) else {
            return Ok(());
        };
        let Some(own) = self.own.get(device) else {
            return Err(Denied::over_limit(bytes, self.ledger.used(device), limit));
        };
        let others = self.ledger.used(device);
        let mut held = own.load(Ordering::SeqCst);
        loop {
            let used = others.saturating_add(held);
            if used.saturating_add(bytes) > limit {
                return Err(Denied::over_limit(bytes, used, limit));
            }
            match own.compare_exchange(held, held + bytes, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(()),
                Err(now) => held = now,
            }
        }
    }
    fn force_charge(&self, device: DeviceIndex, bytes: u64) {
        if let Some(own) = self.own.get(device) {
            own.fetch_add(bytes, Ordering::SeqCst);
        }
    }
    fn release(&self, device: DeviceIndex, bytes: u64) {
        if let Some(own) = self.own.get(device) {
            let _ = own.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                Some(h.saturating_sub(bytes))
            });
        }
    }
}

/// A [`Ledger`] over the container's region that charges and releases as **context** memory:
/// counted in the budget like any charge, and published to HAMi's monitor as
/// `used[dev].contextSize` instead of `bufferSize`.
struct ContextLedger(vgpu_region::RegionLedger);

impl Ledger for ContextLedger {
    fn limit(&self, device: DeviceIndex) -> Option<u64> {
        self.0.limit(device)
    }
    fn set_limit(&self, device: DeviceIndex, limit: Option<u64>) {
        self.0.set_limit(device, limit)
    }
    fn used(&self, device: DeviceIndex) -> u64 {
        self.0.used(device)
    }
    fn try_charge(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied> {
        self.0.charge_context(device, bytes, true)
    }
    fn force_charge(&self, device: DeviceIndex, bytes: u64) {
        let _ = self.0.charge_context(device, bytes, false);
    }
    fn release(&self, device: DeviceIndex, bytes: u64) {
        self.0.release_context(device, bytes)
    }
}

impl Runtime {
    /// The memory budget: the container's, or this process's own without a region; after the
    /// exit handler, the container's as a departed process sees it (`Departed`).
    #[inline]
    pub fn ledger(&self) -> &dyn Ledger {
        if let Some(d) = self.departed_ledger() {
            return d;
        }
        match &self.budget {
            Budget::Shared(l) => l,
            Budget::Local(l) => l,
        }
    }

    /// The departed ledger once the exit handler ran (one relaxed load before it).
    #[inline]
    fn departed_ledger(&self) -> Option<&dyn Ledger> {
        if EXITED.load(Ordering::Relaxed) {
            self.departed.as_ref().map(|d| d as &dyn Ledger)
        } else {
            None
        }
    }

    /// The budget for context memory: the container's, charging as context (HAMi's
    /// `contextSize`), or this process's own without a region.
    #[inline]
    pub fn context_ledger(&self) -> &dyn Ledger {
        if let Some(d) = self.departed_ledger() {
            return d;
        }
        match &self.context_budget {
            Some(l) => l,
            None => self.ledger(),
        }
    }

    /// Charges `bytes` of context memory to `device` (as [`Runtime::charge`], through
    /// [`Runtime::context_ledger`]).
    pub fn charge_context(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied> {
        child_housekeeping();
        self.accounting
            .charge(self.context_ledger(), &REAL, device, bytes)
            .inspect_err(|d| self.report_denial(device, d))
    }

    /// The region's ledger (monitor counters, live SM limits, the compute schedule).
    pub fn region_ledger(&self) -> Option<&vgpu_region::RegionLedger> {
        match &self.budget {
            Budget::Shared(l) => Some(l),
            Budget::Local(_) => None,
        }
    }

    /// The container's shared region, when in use.
    pub fn region(&self) -> Option<&Arc<vgpu_region::Region>> {
        self.region_ledger().map(|l| l.region())
    }

    /// The ledger index of a CUDA device, if vgpu accounts its memory: it is limited, or the
    /// process observes (`VGPU_OBSERVE`: every device is accounted, limited or not).
    #[inline]
    pub fn limited_device(&self, dev: CUdevice) -> Option<DeviceIndex> {
        let device = usize::try_from(dev).ok()?;
        if device < self.devices.len()
            && (self.plan.observe || self.ledger().limit(device).is_some())
        {
            Some(device)
        } else {
            None
        }
    }

    /// Device `dev` (a CUDA ordinal), if the process has it.
    pub fn device(&self, dev: CUdevice) -> Option<&Device> {
        self.devices.get(usize::try_from(dev).ok()?)
    }

    /// The compute gate of device `dev`, if it has a compute limit.
    pub fn gate(&self, dev: CUdevice) -> Option<&crate::compute::Gate> {
        self.gates.get(usize::try_from(dev).ok()?)?.as_ref()
    }

    /// The compute gate of the current device, with its ordinal, if it has a compute limit.
    #[inline]
    pub fn gate_here(&'static self) -> Option<(CUdevice, &'static crate::compute::Gate)> {
        self.gate_for(None)
    }

    /// The compute gate that counts a wait for `stream`'s work (`None`: the current context's,
    /// or an event's), with its device's ordinal, if that device has a compute limit
    /// (`gate_among`).
    #[inline]
    pub fn gate_for(
        &'static self,
        stream: Option<CUstream>,
    ) -> Option<(CUdevice, &'static crate::compute::Gate)> {
        if !self.compute_limited {
            return None;
        }
        gate_among(&self.gates, &REAL, stream)
    }

    /// Whether any device's memory is accounted now: one has a memory limit (limits change
    /// live, so this is read, not remembered), or the process observes.
    pub fn memory_limited(&self) -> bool {
        self.plan.observe || (0..self.devices.len()).any(|s| self.ledger().limit(s).is_some())
    }

    /// Whether ledger device `device` (its CUDA ordinal) is accounted
    /// ([`Runtime::limited_device`]).
    pub fn is_limited(&self, device: DeviceIndex) -> bool {
        CUdevice::try_from(device)
            .ok()
            .and_then(|o| self.limited_device(o))
            .is_some()
    }

    /// The context an allocation on `device` made now belongs to, for its record: 0 (the
    /// primary) while this process created no context on the device (one load), else the
    /// calling thread's current context unless that is the device's primary (one
    /// `cuCtxGetCurrent`).
    pub fn record_ctx(&self, device: DeviceIndex) -> u64 {
        if !self.accounting.has_context_on(device) {
            return 0;
        }
        let Some(ctx) = REAL.current_context() else {
            return 0;
        };
        let ctx = ctx as u64;
        if ctx == self.devices[device].primary.load(Ordering::Acquire) {
            0
        } else {
            ctx
        }
    }

    /// The ledger index of the current context's device, if its memory is accounted (see
    /// [`Runtime::limited_device`]).
    #[inline]
    pub fn current_device(&self) -> Option<DeviceIndex> {
        self.limited_device(REAL.current_device()?)
    }

    /// Charges `bytes` to `device`; when that would pass the limit, first gives pools a chance to
    /// return memory they no longer hold, then retries once ([`Accounting::charge`]). On
    /// denial, reports the first one.
    pub fn charge(&self, device: DeviceIndex, bytes: u64) -> Result<(), Denied> {
        child_housekeeping();
        self.accounting
            .charge(self.ledger(), &REAL, device, bytes)
            .inspect_err(|d| self.report_denial(device, d))
    }

    /// A charge refused to the program: recorded in the container's refusal log (for `vgpu
    /// status/top/metrics`), and printed (a refusal because the region is broken prints the one
    /// line that says so instead, see `report_broken`): the first of this process at warning level, every
    /// later one at debug level (`LIBCUDA_LOG_LEVEL=4`), one line each. The refusal path only.
    pub fn report_denial(&self, device: DeviceIndex, d: &Denied) {
        if d.reason == vgpu_policy::ledger::DenyReason::CutOff
            && let Some(region) = self.region()
        {
            report_broken(region);
            return;
        }
        if let Some(l) = self.region_ledger()
            && !EXITED.load(Ordering::Acquire)
        {
            l.record_refusal(device, d);
        }
        let first = !self.denial_reported.swap(true, Ordering::Relaxed);
        if !first && !crate::log::enabled(crate::log::DEBUG) {
            return;
        }
        let dev = self
            .devices
            .get(device)
            .map(|d| format!("device {} ({})", d.ordinal, d.uuid))
            .unwrap_or_default();
        // What this process holds of the device, so that the hint can tell a full container
        // (other processes hold the budget) from this process alone.
        let own = self.region_ledger().map(|l| l.process_used(device));
        let line = vgpu_policy::denial::message(&dev, d, own);
        if first {
            crate::log::warn(format_args!("{line}"));
        } else {
            crate::log::debug(format_args!("{line}"));
        }
    }
}

/// The gate among `gates` (one per device, `None` where a device has no compute limit) that
/// counts a wait, with its device's ordinal. With one device, its gate, and no driver call.
/// Otherwise the device of `stream` as the driver says (`cuStreamGetDevice`: a program may wait
/// for a stream of another device than its current one), unless `stream` is `None` (a wait on
/// the current context, or on an event, whose device no driver call names) or one of the
/// current context's own streams (the NULL, legacy and per-thread handles: not asked); and the
/// current device's (`cuCtxGetDevice`) where the driver cannot say (before CUDA 12.8, or an
/// unknown stream). No allocation: it runs in the synchronisation and launch hooks.
#[inline]
pub(crate) fn gate_among<'g>(
    gates: &'g [Option<crate::compute::Gate>],
    driver: &impl Driver,
    stream: Option<CUstream>,
) -> Option<(CUdevice, &'g crate::compute::Gate)> {
    let dev = if gates.len() == 1 {
        0
    } else {
        match stream
            .filter(|&s| !of_current_context(s))
            .and_then(|s| driver.stream_device(s))
        {
            Some(dev) => dev,
            None => driver.current_device()?,
        }
    };
    let gate = gates.get(usize::try_from(dev).ok()?)?.as_ref()?;
    Some((dev, gate))
}

/// Whether `stream` is a handle of the current context's own streams: the NULL stream (the
/// legacy default stream, or the per-thread one in a `_ptsz` call), `CU_STREAM_LEGACY` or
/// `CU_STREAM_PER_THREAD`.
#[inline]
fn of_current_context(stream: CUstream) -> bool {
    let s = stream.addr();
    s == 0 || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD
}
