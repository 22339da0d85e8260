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
use vgpu_policy::ledger::{Denied, Ledger, LocalLedger, Slot};
use vgpu_policy::plan::{Activity, Plan};
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
        _ => init_mode(),
    }
}

/// True when limits are enforced (the only case in which hooks do more than forward).
#[inline]
pub fn enforcing() -> bool {
    mode() == Mode::Enforce
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
            let m = match plan.activity {
                Activity::Disabled => Mode::Disabled,
                Activity::Enforce => Mode::Enforce,
                Activity::PassThrough => Mode::PassThrough,
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
    /// CUDA ordinal (after `CUDA_VISIBLE_DEVICES`); equal to the ledger slot.
    pub ordinal: CUdevice,
    /// NVML-style UUID string, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// Primary-context retains seen through our hooks, and what its creation was charged.
    pub primary_retains: AtomicU32,
    pub primary_charge: AtomicU64,
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
    /// Live allocations vgpu charged, by device pointer / handle.
    pub registry: Registry,
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
    if !enforcing() {
        return None;
    }
    build_runtime()
}

#[cold]
fn build_runtime() -> Option<&'static Runtime> {
    let plan = PLAN.get()?;
    let count = REAL.device_count()?;
    let mut devices = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut wanted = Vec::with_capacity(devices.capacity());
    for ordinal in 0..count.max(0) {
        let uuid = REAL.device_uuid(ordinal).unwrap_or_default();
        // The environment's limits for this process's ordinal, keyed by UUID from here on.
        let dp = plan.device(ordinal.unsigned_abs());
        crate::log::info(format_args!(
            "device {ordinal} {uuid}: memory limit {}",
            dp.memory_limit
                .map_or_else(|| "none".to_string(), vgpu_policy::size::format_size)
        ));
        wanted.push(dp);
        devices.push(Device {
            ordinal,
            uuid,
            primary_retains: AtomicU32::new(0),
            primary_charge: AtomicU64::new(0),
        });
    }
    let budget = open_budget(&devices, &wanted);
    // The compute share in force: the region's when there is one (it wins over the
    // environment, like memory), else the environment's; the plan applies the policy.
    let gates: Vec<Option<crate::compute::Gate>> = (0..devices.len())
        .map(|slot| {
            let region = match &budget {
                Budget::Shared(l) => Some(l.sm_limit(slot)),
                Budget::Local(_) => None,
            };
            let share = plan.sm_share_in_force(u32::try_from(slot).unwrap_or(u32::MAX), region);
            if let Some(s) = share {
                crate::log::info(format_args!("device {slot}: compute limit {s}"));
            }
            plan.gate(share).map(crate::compute::Gate::new)
        })
        .collect();
    let rt = Runtime {
        plan,
        budget,
        compute_limited: gates.iter().any(Option::is_some),
        gates,
        devices,
        registry: Registry::new(),
        accounting: Accounting::default(),
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
fn open_budget(devices: &[Device], wanted: &[vgpu_policy::plan::DevicePlan]) -> Budget {
    let init: Vec<vgpu_region::DeviceInit> = devices
        .iter()
        .zip(wanted)
        .map(|(d, w)| vgpu_region::DeviceInit {
            uuid: d.uuid.clone(),
            limit: w.memory_limit,
            sm_limit: w.sm_share.map(vgpu_policy::plan::SmShare::percent),
        })
        .collect();
    let limits: Vec<Option<u64>> = wanted.iter().map(|w| w.memory_limit).collect();
    let loc = vgpu_region::Location::new(plan().and_then(|p| p.shared_cache.clone()));
    let mut opened = vgpu_region::Region::open_or_create(&loc, &init);
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
            opened = vgpu_region::Region::open_or_create(&loc, &init);
        }
    }
    match opened {
        Ok((region, conflicts)) => {
            for c in conflicts {
                crate::log::warn(format_args!("{c}"));
            }
            let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
            Budget::Shared(Arc::new(region).ledger(&uuids))
        }
        Err(e) => {
            // Fail closed: a budget of our own would be N x the limit across the container's
            // processes. CUDA initialisation fails and every allocation is refused.
            BUDGET_REFUSED.store(true, Ordering::Release);
            crate::log::fatal(format_args!(
                "vgpu: the container's memory budget cannot be used ({e}); CUDA initialisation fails and every allocation is refused"
            ));
            Budget::Local(LocalLedger::new(&vec![Some(0); limits.len()]))
        }
    }
}

/// Set when the shared budget could not be opened (see [`open_budget`]).
static BUDGET_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether limits are configured but no usable budget exists: `cuInit` then fails (and every
/// allocation is refused), never a per-process budget.
pub fn budget_refused() -> bool {
    BUDGET_REFUSED.load(Ordering::Acquire)
}

/// Once the runtime exists: the reaper thread and the fork handler.
fn after_build() {
    let Some(rt) = RUNTIME.get() else { return };
    if let Some(region) = rt.region() {
        spawn_reaper(Arc::clone(region));
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
            CHILD_NEEDS_REAPER.store(true, Ordering::Release);
        }
    }
    // SAFETY: registering a handler with no prepare/parent parts; `child` only does atomic
    // stores and descriptor bookkeeping (async-signal-safe enough for a forked child).
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
    if rt.gates.iter().any(Option::is_some) {
        extern "C" fn at_exit() {
            // The compute windows still open: their GPU time goes to the region now.
            // No CUDA call here: the runtime may already be tearing the driver down.
            if let Some(rt) = RUNTIME.get() {
                for (slot, g) in rt.gates.iter().enumerate() {
                    if let Some(g) = g {
                        g.report_at_exit(rt.region_ledger(), slot);
                    }
                }
            }
        }
        // SAFETY: `at_exit` takes no arguments, never unwinds (atomics and stores into the
        // region mapping, which stays mapped for the life of the process) and calls no CUDA.
        unsafe { libc::atexit(at_exit) };
    }
}

/// Set in a forked child: its reaper thread is started on its next charge.
static CHILD_NEEDS_REAPER: AtomicBool = AtomicBool::new(false);

/// Starts the reaper thread in a forked child that uses CUDA.
pub fn child_housekeeping() {
    // A plain load first: the allocation path must not write a shared cache line.
    if CHILD_NEEDS_REAPER.load(Ordering::Relaxed)
        && CHILD_NEEDS_REAPER.swap(false, Ordering::AcqRel)
        && let Some(region) = RUNTIME.get().and_then(|rt| rt.region())
    {
        spawn_reaper(Arc::clone(region));
    }
}

/// The background thread that returns dead processes' memory to the budget within a second of
/// their death (it reaps every 250 ms).
fn spawn_reaper(region: Arc<vgpu_region::Region>) {
    let _ = std::thread::Builder::new()
        .name("vgpu-reaper".into())
        .spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(250));
                region.reap_dead();
            }
        });
}

impl Runtime {
    /// The memory budget: the container's, or this process's own without a region.
    #[inline]
    pub fn ledger(&self) -> &dyn Ledger {
        match &self.budget {
            Budget::Shared(l) => l,
            Budget::Local(l) => l,
        }
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

    /// The ledger slot of a CUDA device, if that device is limited.
    #[inline]
    pub fn limited_slot(&self, dev: CUdevice) -> Option<Slot> {
        let slot = usize::try_from(dev).ok()?;
        if slot < self.devices.len() && self.ledger().limit(slot).is_some() {
            Some(slot)
        } else {
            None
        }
    }

    /// The compute gate of the current device, with its ordinal, if it has a compute limit.
    #[inline]
    pub fn gate_here(&'static self) -> Option<(CUdevice, &'static crate::compute::Gate)> {
        if !self.compute_limited {
            return None;
        }
        let dev = if self.gates.len() == 1 {
            0
        } else {
            REAL.current_device()?
        };
        let gate = self.gates.get(usize::try_from(dev).ok()?)?.as_ref()?;
        Some((dev, gate))
    }

    /// Whether any device has a memory limit now (limits change live, so this is read, not
    /// remembered).
    pub fn memory_limited(&self) -> bool {
        (0..self.devices.len()).any(|s| self.ledger().limit(s).is_some())
    }

    /// The limited slot of the current context's device.
    #[inline]
    pub fn current_slot(&self) -> Option<Slot> {
        self.limited_slot(REAL.current_device()?)
    }

    /// Charges `bytes` to `slot`; when that would pass the limit, first gives pools a chance to
    /// return memory they no longer hold, then retries once ([`Accounting::charge`]). On
    /// denial, reports the first one.
    pub fn charge(&self, slot: Slot, bytes: u64) -> Result<(), Denied> {
        child_housekeeping();
        self.accounting
            .charge(self.ledger(), &REAL, slot, bytes)
            .inspect_err(|d| self.report_denial(slot, d))
    }

    /// Prints the first denial of this process (one line).
    pub fn report_denial(&self, slot: Slot, d: &Denied) {
        if !self.denial_reported.swap(true, Ordering::Relaxed) {
            let dev = self
                .devices
                .get(slot)
                .map(|d| format!("device {} ({})", d.ordinal, d.uuid))
                .unwrap_or_default();
            crate::log::warn(format_args!("{}", vgpu_policy::denial::message(&dev, d)));
        }
    }
}
