//! Process state, initialised lazily from whichever hook runs first.
//!
//! Two phases, each a lock-free state machine:
//! 1. [`mode`]: the configuration from the environment. Cheap and driver-free, so any hook
//!    (even `dlsym` before `main`) can ask it. Racing threads parse the same environment and
//!    agree on the result.
//! 2. [`runtime`]: the device table, ledger and registries. Built once the driver is
//!    initialised (it needs `cuDeviceGetCount` / `cuDeviceGetUuid`), normally right after the
//!    real `cuInit` succeeds.
use crate::hooks::real;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use vgpu_policy::config::Config;
use vgpu_policy::ledger::{Denied, Ledger, LocalLedger, Slot};
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
static CONFIG: OnceLock<Config> = OnceLock::new();

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

/// The parsed configuration, once [`mode`] has read it successfully.
pub fn config() -> Option<&'static Config> {
    mode();
    CONFIG.get()
}

#[cold]
fn init_mode() -> Mode {
    let vars = std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    });
    let m = match Config::from_vars(vars) {
        Err(e) => {
            crate::log::fatal(format_args!("{e}; CUDA initialisation will fail"));
            Mode::Broken
        }
        Ok(cfg) => {
            crate::log::set_level(cfg.log_level);
            let m = if cfg.disabled {
                Mode::Disabled
            } else if cfg.any_limit() {
                Mode::Enforce
            } else {
                Mode::PassThrough
            };
            let _ = CONFIG.set(cfg);
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
        Ok(_) => m,
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
    pub devices: Vec<Device>,
    /// The container-wide budget (the shared region), or a per-process one if the region could
    /// not be used: see [`Runtime::ledger`].
    budget: Budget,
    /// Live allocations vgpu charged, by device pointer / handle.
    pub registry: Registry,
    /// Memory held by pools (stream-ordered and graph), charged by what they reserve.
    pub pools: crate::hooks::pools::PoolCharges,
    /// Contexts created with `cuCtxCreate*`, and what each was charged.
    pub contexts: crate::hooks::context::ContextCharges,
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
    let cfg = CONFIG.get()?;
    let count_fn = real::cuDeviceGetCount.get()?;
    let mut count: i32 = 0;
    // SAFETY: real cuDeviceGetCount with a valid out-pointer.
    if unsafe { count_fn(&mut count) } != CUDA_SUCCESS {
        return None;
    }
    let mut devices = Vec::with_capacity(count.max(0) as usize);
    let mut limits = Vec::with_capacity(devices.capacity());
    for ordinal in 0..count.max(0) {
        let uuid = device_uuid(ordinal).unwrap_or_default();
        let limit = cfg.memory_limit_for(ordinal as u32);
        crate::log::info(format_args!(
            "device {ordinal} {uuid}: memory limit {}",
            limit.map_or_else(|| "none".to_string(), vgpu_policy::size::format_size)
        ));
        limits.push(limit);
        devices.push(Device {
            ordinal,
            uuid,
            primary_retains: AtomicU32::new(0),
            primary_charge: AtomicU64::new(0),
        });
    }
    let budget = open_budget(&devices, &limits, &gates_percent(cfg, devices.len()));
    // The compute limit in force: the region's (it wins over the environment, like memory).
    let gates: Vec<Option<crate::compute::Gate>> = (0..devices.len())
        .map(|slot| {
            let sm = match &budget {
                Budget::Shared(l) => l.sm_limit(slot),
                Budget::Local(_) => cfg.sm_limit_for(slot as u32),
            }
            .filter(|&p| p < 100 && cfg.core_policy != vgpu_policy::config::CorePolicy::Disable);
            if let Some(p) = sm {
                crate::log::info(format_args!("device {slot}: compute limit {p} %"));
            }
            match sm {
                Some(p) => Some(crate::compute::Gate::new(p, cfg.measure_gpu_time)),
                // Opt-in: measure GPU time without limiting (and accept live limits later).
                None if cfg.measure_gpu_time => Some(crate::compute::Gate::new(100, true)),
                None => None,
            }
        })
        .collect();
    let rt = Runtime {
        budget,
        compute_limited: gates.iter().any(Option::is_some),
        gates,
        devices,
        registry: Registry::new(),
        pools: Default::default(),
        contexts: Default::default(),
        denial_reported: AtomicBool::new(false),
    };
    // A racing thread may have built one first; keep the first.
    if RUNTIME.set(rt).is_ok() {
        after_build();
    }
    RUNTIME.get()
}

fn gates_percent(cfg: &Config, n: usize) -> Vec<Option<u8>> {
    (0..n)
        .map(|i| cfg.sm_limit_for(i as u32).filter(|&p| p < 100))
        .collect()
}

/// Attaches to the container's shared region; falls back to a per-process budget (with one
/// error line) if the region cannot be used, so limits still hold in this process.
fn open_budget(devices: &[Device], limits: &[Option<u64>], sm: &[Option<u8>]) -> Budget {
    let init: Vec<vgpu_region::DeviceInit> = devices
        .iter()
        .zip(limits)
        .zip(sm)
        .map(|((d, &limit), &sm_limit)| vgpu_region::DeviceInit {
            uuid: d.uuid.clone(),
            limit,
            sm_limit,
        })
        .collect();
    let loc = vgpu_region::Location::new(config().and_then(|c| c.shared_region_path.clone()));
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
            crate::log::error(format_args!(
                "{e}; limits are enforced for this process alone, not shared with the container"
            ));
            Budget::Local(LocalLedger::new(limits))
        }
    }
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
                        g.report_at_exit(slot);
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

/// The UUID of a CUDA device in NVML's string form.
pub fn device_uuid(ordinal: CUdevice) -> Option<String> {
    let mut raw = CUuuid::default();
    let r = if let Some(f) = real::cuDeviceGetUuid_v2.get() {
        // SAFETY: real cuDeviceGetUuid_v2 with a valid out-pointer.
        unsafe { f(&mut raw, ordinal) }
    } else {
        let f = real::cuDeviceGetUuid.get()?;
        // SAFETY: as above, older entry point with the same prototype.
        unsafe { f(&mut raw, ordinal) }
    };
    if r != CUDA_SUCCESS {
        return None;
    }
    Some(format_uuid(&raw))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML prints it.
pub fn format_uuid(u: &CUuuid) -> String {
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
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
            let f = real::cuCtxGetDevice.get()?;
            let mut dev: CUdevice = 0;
            // SAFETY: real cuCtxGetDevice with a valid out-pointer.
            if unsafe { f(&mut dev) } != CUDA_SUCCESS {
                return None;
            }
            dev
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
        let f = real::cuCtxGetDevice.get()?;
        let mut dev: CUdevice = 0;
        // SAFETY: real cuCtxGetDevice with a valid out-pointer.
        if unsafe { f(&mut dev) } != CUDA_SUCCESS {
            return None;
        }
        self.limited_slot(dev)
    }

    /// Charges `bytes` to `slot`; when that would pass the limit, first gives pools a chance to
    /// return memory they no longer hold, then retries once. On denial, reports the first one.
    pub fn charge(&self, slot: Slot, bytes: u64) -> Result<(), Denied> {
        child_housekeeping();
        match self.ledger().try_charge(slot, bytes) {
            Ok(()) => Ok(()),
            Err(d) => {
                // Pools may have released memory at a synchronisation: re-read them, and try
                // once more only if that gave something back (one refusal counts once).
                if self.pools.refresh_slot(self, slot) {
                    self.ledger()
                        .try_charge(slot, bytes)
                        .inspect_err(|d| self.report_denial(slot, d))
                } else {
                    self.report_denial(slot, &d);
                    Err(d)
                }
            }
        }
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
