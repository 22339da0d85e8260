//! Stage 2 of the configuration: the resolved [`Plan`], decided once from a [`Config`] and
//! handed to everything below (runtime, compute gate, node tokens, NVML views), which never
//! re-derive its rules:
//!
//! * an SM limit of 0 or 100 is no limit: a limit is an [`SmShare`], which holds 1..=99 only;
//! * `GPU_CORE_UTILIZATION_POLICY=disable` means no SM share anywhere, live limits included;
//! * the container's shared region wins over this process's environment
//!   ([`Plan::sm_share_in_force`]);
//! * per-device limits (`_<i>`, `0` = no limit on that device) index the *container's* device
//!   list, the devices as NVML enumerates them (NVML ignores `CUDA_VISIBLE_DEVICES`; it is the
//!   order in which HAMi's device plugin allocates devices and injects the limits), not the
//!   program's CUDA ordinals: each process maps its ordinals to UUIDs, and each UUID to its
//!   container index ([`Plan::container_index`]), so every process of a container gets the
//!   same limit for one physical GPU whatever its `CUDA_VISIBLE_DEVICES` order; limits are
//!   keyed by UUID from then on;
//! * a task priority (`CUDA_TASK_PRIORITY`, HAMi's webhook injects it) is clamped to HAMi's
//!   0..=1 and makes the process take part in HAMi's monitor protocol: vgpu is active, and every
//!   device gets a compute gate (at 100 % where there is no SM limit) so that launches are
//!   marked for the monitor and its block is obeyed ([`Plan::gate`]);
//! * `VGPU_OBSERVE` (observe only) makes vgpu active without setting a limit: the
//!   environment's limits are not taken ([`Plan::device`] has none; one warning says so),
//!   memory is charged on every device and GPU time measured, so the region shows what the
//!   container uses. A limit already in force in the container's region (another process's, or
//!   `vgpu limit`) still holds: observing never lifts a limit, or a process could escape one by
//!   setting the variable itself;
//! * HAMi-core variables vgpu reads but gives another meaning are turned into one line each at
//!   start ([`Plan::notices`]).
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Config, CorePolicy};

/// HAMi's node-wide lock directory, used for the node tokens when it exists.
pub const HAMI_NODE_DIR: &str = "/tmp/vgpulock";
/// vgpu's own node directory otherwise.
pub const DEFAULT_NODE_DIR: &str = "/tmp/vgpu-node";
/// What a context is expected to take without `VGPU_CONTEXT_SIZE`: the order of a data-centre
/// GPU's context (523.6 MiB on the H200, docs/GPU-RESULTS.md; 303 MiB on the simulator).
pub const DEFAULT_CONTEXT_SIZE: u64 = 512 << 20;

/// A compute share that limits: 1 to 99 percent of the device (0 and 100 are no limit, and
/// cannot be held).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SmShare(u8);

impl SmShare {
    /// The share for `percent`, `None` for 0 or 100 and above (no limit).
    pub const fn new(percent: u8) -> Option<SmShare> {
        if percent >= 1 && percent <= 99 {
            Some(SmShare(percent))
        } else {
            None
        }
    }

    /// The share in percent, 1..=99.
    pub const fn percent(self) -> u8 {
        self.0
    }

    /// The percent a gate runs at for an optional share: 100 for none.
    pub fn percent_or_full(share: Option<SmShare>) -> u8 {
        share.map_or(100, SmShare::percent)
    }
}

/// What vgpu does in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// `CUDA_DISABLE_CONTROL`: every hook forwards untouched.
    Disabled,
    /// Nothing to limit or measure: every hook forwards untouched.
    PassThrough,
    /// Limits (or measuring) in force.
    Enforce,
}

/// The limits of one device, from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DevicePlan {
    /// Memory limit in bytes (`None`: no limit).
    pub memory_limit: Option<u64>,
    /// Compute share (`None`: no limit, or the `disable` policy).
    pub sm_share: Option<SmShare>,
}

/// How a device's compute gate starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatePlan {
    /// The share in force (`None`: measuring only, at 100 %).
    pub share: Option<SmShare>,
    /// Whether the gate measures GPU time at 100 % as well.
    pub measuring: bool,
}

/// The container's Kubernetes identity, from the downward-API variables `POD_NAMESPACE`,
/// `POD_NAME` and `CONTAINER_NAME` where the pod spec sets them. The process that creates the
/// container's region records it there, so that the monitor (`vgpu metrics/top/status`) labels
/// the container's series with it. A value that is not a Kubernetes name (letters, digits,
/// `-`, `.`, `_`; at most [`PodIdentity::MAX_NAME`] bytes for the pod, [`PodIdentity::MAX_LABEL`]
/// for the others) is left out rather than recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIdentity {
    /// The pod's namespace.
    pub namespace: Option<String>,
    /// The pod's name.
    pub pod: Option<String>,
    /// The container's name.
    pub container: Option<String>,
}

impl PodIdentity {
    /// Longest namespace or container name (a DNS label).
    pub const MAX_LABEL: usize = 63;
    /// Longest pod name (a DNS subdomain).
    pub const MAX_NAME: usize = 253;

    /// The identity of these values, each kept only if it is a Kubernetes name.
    pub fn new(namespace: Option<&str>, pod: Option<&str>, container: Option<&str>) -> Self {
        let keep = |v: Option<&str>, max: usize| v.filter(|v| is_name(v, max)).map(str::to_owned);
        PodIdentity {
            namespace: keep(namespace, Self::MAX_LABEL),
            pod: keep(pod, Self::MAX_NAME),
            container: keep(container, Self::MAX_LABEL),
        }
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.namespace.is_none() && self.pod.is_none() && self.container.is_none()
    }
}

/// A Kubernetes object name, leniently: 1..=`max` bytes of ASCII letters, digits, `-`, `.`,
/// `_` (nothing a label value or a terminal could be confused by).
fn is_name(v: &str, max: usize) -> bool {
    !v.is_empty()
        && v.len() <= max
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
}

/// How loud a [`Notice`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeLevel {
    /// Printed at `LIBCUDA_LOG_LEVEL` 1 and above.
    Warning,
    /// Printed at `LIBCUDA_LOG_LEVEL` 3 and above.
    Info,
}

/// One line the runtime prints once at start about how a variable was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Its level.
    pub level: NoticeLevel,
    /// The line (without the `vgpu:` prefix).
    pub text: String,
}

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What vgpu does in this process.
    pub activity: Activity,
    /// HAMi-core's levels: 0 errors, 1 and 2 errors and warnings, 3 info, 4 debug.
    pub log_level: u8,
    /// The core policy (already applied to every share this plan gives out).
    pub core_policy: CorePolicy,
    /// `CUDA_DEVICE_MEMORY_SHARED_CACHE`: the shared region's path, if given.
    pub shared_cache: Option<PathBuf>,
    /// The node directory of the turn tokens.
    pub node_dir: PathBuf,
    /// Measure GPU time on devices without a compute limit too.
    pub measuring: bool,
    /// Observe only (`VGPU_OBSERVE`): no limit from the environment, memory accounted on every
    /// device, GPU time measured.
    pub observe: bool,
    /// A container may run past its share while no other waits.
    pub work_conserving: bool,
    /// Sampled launches' streams are held while their timing events are recorded.
    pub hold_brackets: bool,
    /// `CUDA_VISIBLE_DEVICES` as given.
    pub visible_devices: Option<String>,
    /// HAMi's task priority as the region publishes it (`CUDA_TASK_PRIORITY` clamped to 0..=1:
    /// 0 high, 1 low); `None`: not set (the region keeps HAMi-core's default, 1).
    pub task_priority: Option<i32>,
    /// What a context is expected to take (charged before it is created, and when its
    /// measurement cannot be trusted).
    pub context_size: u64,
    /// How often the launch path refreshes HAMi's `last_kernel_time` (`RECORD_KERNEL_INTERVAL`,
    /// default 1 s).
    pub record_kernel_interval: Duration,
    /// The container's Kubernetes identity, recorded in the region at its creation.
    pub pod: PodIdentity,
    config: Config,
}

impl Plan {
    /// Resolves `cfg`. The node directory defaults to HAMi's `/tmp/vgpulock` when that is a
    /// directory, else `/tmp/vgpu-node`.
    pub fn resolve(cfg: &Config) -> Plan {
        Plan::resolve_with(cfg, Path::new(HAMI_NODE_DIR).is_dir())
    }

    /// [`Plan::resolve`] with the existence of HAMi's node directory given.
    pub fn resolve_with(cfg: &Config, hami_node_dir: bool) -> Plan {
        let activity = if cfg.disabled {
            Activity::Disabled
        } else if cfg.any_limit() || cfg.task_priority.is_some() || cfg.observe {
            Activity::Enforce
        } else {
            Activity::PassThrough
        };
        let node_dir = cfg.node_dir.clone().unwrap_or_else(|| {
            PathBuf::from(if hami_node_dir {
                HAMI_NODE_DIR
            } else {
                DEFAULT_NODE_DIR
            })
        });
        Plan {
            activity,
            log_level: cfg.log_level,
            core_policy: cfg.core_policy,
            shared_cache: cfg.shared_region_path.clone(),
            node_dir,
            measuring: cfg.measure_gpu_time || cfg.observe,
            observe: cfg.observe,
            work_conserving: cfg.sm_work_conserving,
            hold_brackets: cfg.hold_brackets,
            visible_devices: cfg.visible_devices.clone(),
            context_size: cfg.context_size.unwrap_or(DEFAULT_CONTEXT_SIZE),
            task_priority: cfg.task_priority.map(|p| p.clamp(0, 1)),
            record_kernel_interval: Duration::from_secs(u64::from(
                cfg.record_kernel_interval_s
                    .unwrap_or(crate::config::DEFAULT_RECORD_KERNEL_INTERVAL_S),
            )),
            pod: PodIdentity::new(
                cfg.pod_namespace.as_deref(),
                cfg.pod_name.as_deref(),
                cfg.container_name.as_deref(),
            ),
            config: cfg.clone(),
        }
    }

    /// Whether this process must look at the container's region before it knows what it does:
    /// its environment sets no limit (or disables vgpu). A region some process of the
    /// container uses binds every process of the container, whatever its environment says (the
    /// region wins, as for live limits): beside a live region such a process enforces the
    /// region's limits ([`Plan::activity_beside`]); a region nobody uses binds nobody.
    pub fn follows_live_region(&self) -> bool {
        self.activity != Activity::Enforce
    }

    /// What this process does once it has looked at the container's region: `Enforce` beside a
    /// live region (`live`), else what its environment says.
    pub fn activity_beside(&self, live: bool) -> Activity {
        if live {
            Activity::Enforce
        } else {
            self.activity
        }
    }

    /// The environment's limits for the device with container index `index` (its NVML index;
    /// see [`Plan::container_index`]); none when observing.
    pub fn device(&self, index: u32) -> DevicePlan {
        if self.observe {
            return DevicePlan::default();
        }
        DevicePlan {
            memory_limit: self.config.memory_limit_for(index),
            sm_share: self.share(self.config.sm_limit_for(index)),
        }
    }

    /// The container index (what `_<i>` variables number) of this process's CUDA ordinal
    /// `ordinal`: its NVML index `nvml_index` when NVML could name it. Without NVML, the
    /// `CUDA_VISIBLE_DEVICES` entry of that ordinal when it is an index, else the ordinal.
    pub fn container_index(&self, ordinal: u32, nvml_index: Option<u32>) -> u32 {
        if let Some(i) = nvml_index {
            return i;
        }
        self.visible_devices
            .as_deref()
            .and_then(|list| list.split(',').map(str::trim).nth(ordinal as usize))
            .and_then(|e| e.parse::<u32>().ok())
            .unwrap_or(ordinal)
    }

    /// The share a percent stands for under this plan's policy (`None`: no limit).
    pub fn share(&self, percent: Option<u8>) -> Option<SmShare> {
        if self.core_policy == CorePolicy::Disable {
            return None;
        }
        SmShare::new(percent?)
    }

    /// The share in force on the device with container index `index`: the region's (live,
    /// `vgpu limit --sm` may change it) when the container has one (`region` is `Some(its
    /// value)`), else the environment's.
    pub fn sm_share_in_force(&self, index: u32, region: Option<Option<u8>>) -> Option<SmShare> {
        match region {
            Some(live) => self.share(live),
            None => self.device(index).sm_share,
        }
    }

    /// How a device's gate starts, `None` when the device needs no gate: one is needed for a
    /// share, for measuring, and for HAMi's monitor protocol when a task priority is set (the
    /// gate marks launches and obeys the monitor's block; at 100 % it never waits otherwise).
    pub fn gate(&self, share: Option<SmShare>) -> Option<GatePlan> {
        (share.is_some() || self.measuring || self.task_priority.is_some()).then_some(GatePlan {
            share,
            measuring: self.measuring,
        })
    }

    /// The CUDA ordinal, in this process, of the NVML device with index `index` and UUID
    /// `uuid` (NVML numbers every GPU of the container, ignoring `CUDA_VISIBLE_DEVICES`).
    /// `CUDA_VISIBLE_DEVICES` is read as the driver reads it: indices or UUID prefixes
    /// (`GPU-…`), and the first invalid or repeated entry ends the list. `None`: not visible.
    pub fn ordinal_of_nvml(&self, index: u32, uuid: &str) -> Option<u32> {
        let Some(list) = self.visible_devices.as_deref() else {
            return Some(index);
        };
        let mut seen: Vec<&str> = Vec::new();
        for (ordinal, entry) in (0u32..).zip(list.split(',').map(str::trim)) {
            let valid = entry.starts_with("GPU-")
                || (!entry.is_empty() && entry.bytes().all(|c| c.is_ascii_digit()));
            if !valid || seen.contains(&entry) {
                return None;
            }
            seen.push(entry);
            let hit = match entry.parse::<u32>() {
                Ok(i) => i == index,
                Err(_) => uuid.starts_with(entry),
            };
            if hit {
                return Some(ordinal);
            }
        }
        None
    }

    /// The lines to print once at start about variables taken otherwise than as given: bad
    /// values of variables that bear on no limit (ignored, as HAMi-core does), a task
    /// priority outside HAMi's 0..=1 (clamped: other values crash older HAMi and Volcano
    /// monitors), `CUDA_OVERSUBSCRIBE=true` and `ACTIVE_OOM_KILLER=true` (HAMi-core features
    /// vgpu does not have: the limit holds, and an allocation past it is refused).
    pub fn notices(&self) -> Vec<Notice> {
        let c = &self.config;
        let mut out = Vec::new();
        for e in &c.ignored {
            out.push(Notice {
                level: NoticeLevel::Warning,
                text: format!(
                    "{}=\"{}\" {}: ignored, as HAMi-core does (use {})",
                    e.variable.escape_debug(),
                    e.value.escape_debug(),
                    e.problem,
                    e.accepted
                ),
            });
        }
        let memory = c.memory_limit_all.is_some()
            || c.memory_limit_by_index.iter().any(|(_, l)| l.is_some());
        let sm = c.sm_limit_all.is_some() || c.sm_limit_by_index.iter().any(|(_, l)| l.is_some());
        if self.observe && (memory || sm) {
            let vars: Vec<&str> = [
                (memory, crate::config::vars::MEMORY_LIMIT),
                (sm, crate::config::vars::SM_LIMIT),
            ]
            .iter()
            .filter_map(|&(set, v)| set.then_some(v))
            .collect();
            out.push(Notice {
                level: NoticeLevel::Warning,
                text: format!(
                    "VGPU_OBSERVE is on: the limits of {} are not enforced; memory and GPU time \
                     are only accounted (a limit already in force in the container's region \
                     still holds)",
                    vars.join(" and ")
                ),
            });
        }
        if let (Some(given), Some(used)) = (c.task_priority, self.task_priority)
            && given != used
        {
            out.push(Notice {
                level: NoticeLevel::Warning,
                text: format!(
                    "CUDA_TASK_PRIORITY={given} is outside HAMi's 0 (high) and 1 (low); using {used}"
                ),
            });
        }
        if c.oversubscribe {
            out.push(Notice {
                level: NoticeLevel::Info,
                text: "CUDA_OVERSUBSCRIBE=true: vgpu does not spill device memory to the host; \
                       the memory limit holds and an allocation past it is refused"
                    .to_owned(),
            });
        }
        if c.active_oom_killer == Some(true) {
            out.push(Notice {
                level: NoticeLevel::Info,
                text: "ACTIVE_OOM_KILLER=true: vgpu kills no process; an allocation past the \
                       limit is refused, so the container never exceeds it"
                    .to_owned(),
            });
        }
        out
    }

    /// One warning per per-index variable (`CUDA_DEVICE_MEMORY_LIMIT_<i>`,
    /// `CUDA_DEVICE_SM_LIMIT_<i>`) naming a device the container does not have (it has
    /// `devices`, indices `0..devices`): such a limit limits nothing, which would otherwise go
    /// unsaid (with no other limit the container runs unlimited).
    pub fn limits_for_missing_devices(&self, devices: u32) -> Vec<Notice> {
        use crate::config::vars;
        let c = &self.config;
        let have = match devices {
            0 => "no GPU".to_owned(),
            1 => "1 GPU (index 0)".to_owned(),
            n => format!("{n} GPUs (indices 0 to {})", n - 1),
        };
        let nothing_else = c.memory_limit_all.is_none()
            && c.sm_limit_all.is_none()
            && c.memory_limit_by_index
                .iter()
                .all(|&(i, l)| i >= devices || l.is_none())
            && c.sm_limit_by_index
                .iter()
                .all(|&(i, l)| i >= devices || l.is_none());
        let tail = if nothing_else {
            "; no device of this container is limited"
        } else {
            ""
        };
        let mem = c
            .memory_limit_by_index
            .iter()
            .filter(|&&(i, _)| i >= devices)
            .map(|&(i, l)| (vars::MEMORY_LIMIT, i, opt(l.map(crate::size::format_size))));
        let sm = c
            .sm_limit_by_index
            .iter()
            .filter(|&&(i, _)| i >= devices)
            .map(|&(i, l)| (vars::SM_LIMIT, i, opt(l.map(|p| format!("{p}%")))));
        mem.chain(sm)
            .map(|(var, i, value)| Notice {
                level: NoticeLevel::Warning,
                text: format!(
                    "{var}_{i} ({value}) names device {i}, but the container has {have}: it \
                     limits nothing{tail}"
                ),
            })
            .collect()
    }

    /// The stage-1 configuration this plan was resolved from.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

impl fmt::Display for SmShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} %", self.0)
    }
}

impl fmt::Display for Plan {
    /// One line: every decision of the plan.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "plan: {:?}; memory limit all {}",
            self.activity,
            opt(c.memory_limit_all.map(crate::size::format_size))
        )?;
        for &(i, l) in &c.memory_limit_by_index {
            write!(f, ", device {i} {}", opt(l.map(crate::size::format_size)))?;
        }
        write!(f, "; sm share all {}", opt(self.share(c.sm_limit_all)))?;
        for &(i, p) in &c.sm_limit_by_index {
            write!(f, ", device {i} {}", opt(self.share(p)))?;
        }
        write!(
            f,
            "; core policy {:?}; work-conserving {}; held brackets {}; measuring {}; observe {}; region {}; node dir {}; visible devices {}; task priority {}; context size {}; record kernel interval {} s",
            self.core_policy,
            self.work_conserving,
            self.hold_brackets,
            self.measuring,
            self.observe,
            self.shared_cache
                .as_deref()
                .map_or_else(|| "default".to_owned(), |p| p.display().to_string()),
            self.node_dir.display(),
            opt(self.visible_devices.as_deref()),
            opt(self.task_priority),
            crate::size::format_size(self.context_size),
            self.record_kernel_interval.as_secs(),
        )
    }
}
