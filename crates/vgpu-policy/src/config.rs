//! Configuration from the environment (HAMi-core compatible variable names).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `CUDA_DISABLE_CONTROL` | `true`/`1`/`yes`/`on` disables vgpu entirely (case-insensitive); `false`/`0`/`no`/`off`/empty keeps it on |
//! | `LIBCUDA_LOG_LEVEL` | HAMi-core's meanings: 0 errors only; 1 and 2 (the default) errors and warnings; 3 adds info; 4 debug; 5 trace (the compute controller's every timing sample and every look's decision) |
//! | `CUDA_DEVICE_MEMORY_LIMIT` | memory limit for every device, a size (see [`crate::size`]) |
//! | `CUDA_DEVICE_MEMORY_LIMIT_<i>` | memory limit for CUDA ordinal `i` (0..=63), overrides the one above |
//! | `CUDA_DEVICE_SM_LIMIT` | compute limit for every device, percent 0..=100 |
//! | `CUDA_DEVICE_SM_LIMIT_<i>` | compute limit for CUDA ordinal `i`, overrides the one above |
//! | `CUDA_DEVICE_MEMORY_SHARED_CACHE` | path of the cross-process shared region |
//! | `GPU_CORE_UTILIZATION_POLICY` | HAMi's switch for the SM limit: default, force, disable |
//! | `VGPU_SM_WORK_CONSERVING` | opt-in work-conserving compute limit |
//! | `VGPU_MEASURE_GPU_TIME` | opt-in GPU-time measurement without a compute limit |
//! | `VGPU_HOLD_BRACKETS` | `false` times sampled launches with their stream unheld and holds a process kept off the GPU at its gate (default `true`: streams held on a pinned host word) |
//! | `VGPU_OBSERVE` | observe only: account memory and GPU time in the region, set no limit from the environment |
//! | `VGPU_NODE_DIR` | node-wide directory of the per-GPU turn tokens |
//! | `VGPU_CONTEXT_SIZE` | what a CUDA context is expected to take on this node's GPUs, a size (default 512 MiB); charged before a context is created, and when its measurement cannot be trusted |
//! | `CUDA_VISIBLE_DEVICES` | the process's devices, for mapping NVML devices to CUDA ordinals |
//! | `CUDA_TASK_PRIORITY` | HAMi's task priority, an integer (0 high, 1 low; the plan clamps it to 0..=1) |
//! | `RECORD_KERNEL_INTERVAL` | seconds between refreshes of HAMi's `last_kernel_time` (default 1) |
//! | `CUDA_OVERSUBSCRIBE` | HAMi-core's host-memory spill switch: read and validated; vgpu never oversubscribes |
//! | `ACTIVE_OOM_KILLER` | HAMi-core's over-limit killer switch: read and validated; vgpu refuses instead |
//! | `POD_NAMESPACE`, `POD_NAME`, `CONTAINER_NAME` | the container's Kubernetes identity, where the pod spec sets them from the downward API: recorded in the region by the process that creates it, for the monitor's labels (see [`crate::plan::PodIdentity`]) |
//!
//! This is stage 1 of vgpu's configuration: the raw, validated reading of every variable vgpu
//! uses, and the only place that reads the environment. Stage 2, [`crate::plan::Plan`], turns
//! it into the decisions everything else is handed.
//!
//! A limit of `0` means "no limit". For a per-index variable it means "no limit on that
//! device", whatever the all-devices value (as the README says). An empty value is the same as
//! an unset variable. Variables this module does not know are ignored.

use std::fmt;
use std::path::PathBuf;

use crate::size::parse_size;

/// The forms a size variable accepts, quoted in error messages.
pub const ACCEPTED_SIZE_FORMS: &str =
    "a byte count or a number with a binary suffix k, m, g, t (e.g. 4g, 4096m, 4Gi, 4294967296)";
/// The forms `CUDA_DISABLE_CONTROL` accepts.
pub const ACCEPTED_BOOL_FORMS: &str =
    "true, 1, yes, on (disable) or false, 0, no, off (keep enabled)";
/// The forms of an on/off switch other than `CUDA_DISABLE_CONTROL`.
pub const ACCEPTED_SWITCH_FORMS: &str = "true, 1, yes, on or false, 0, no, off";
/// The forms `LIBCUDA_LOG_LEVEL` accepts.
pub const ACCEPTED_LOG_LEVELS: &str =
    "0 (errors), 1 or 2 (errors and warnings), 3 (info), 4 (debug) or 5 (trace)";
/// The forms `RECORD_KERNEL_INTERVAL` accepts.
pub const ACCEPTED_INTERVALS: &str =
    "a whole number of seconds (e.g. 1; 0 refreshes at every launch)";
/// The forms an SM limit accepts.
pub const ACCEPTED_PERCENT_FORMS: &str = "a whole percentage 1 to 100 (0 means no limit)";
/// The forms of a per-device variable name.
pub const ACCEPTED_INDEX_FORMS: &str = "a device ordinal 0 to 63 after the underscore, without leading zeros (e.g. CUDA_DEVICE_MEMORY_LIMIT_1)";

/// Highest CUDA ordinal a per-index variable may name.
pub const MAX_DEVICE_INDEX: u32 = 63;
/// Log level used when `LIBCUDA_LOG_LEVEL` is unset.
pub const DEFAULT_LOG_LEVEL: u8 = 2;
/// The highest `LIBCUDA_LOG_LEVEL` (trace: every timing sample).
pub const MAX_LOG_LEVEL: u8 = 5;
/// `RECORD_KERNEL_INTERVAL` when unset (HAMi-core's default), seconds.
pub const DEFAULT_RECORD_KERNEL_INTERVAL_S: u32 = 1;

/// Variable names.
pub mod vars {
    /// Disables vgpu when true.
    pub const DISABLE_CONTROL: &str = "CUDA_DISABLE_CONTROL";
    /// Log verbosity.
    pub const LOG_LEVEL: &str = "LIBCUDA_LOG_LEVEL";
    /// All-devices memory limit; with `_<i>` appended, the limit of one device.
    pub const MEMORY_LIMIT: &str = "CUDA_DEVICE_MEMORY_LIMIT";
    /// All-devices SM limit; with `_<i>` appended, the limit of one device.
    pub const SM_LIMIT: &str = "CUDA_DEVICE_SM_LIMIT";
    /// Shared region path.
    pub const SHARED_CACHE: &str = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
    /// HAMi's compute-limit policy: default, force or disable.
    pub const CORE_POLICY: &str = "GPU_CORE_UTILIZATION_POLICY";
    /// Opt-in work-conserving compute limit.
    pub const WORK_CONSERVING: &str = "VGPU_SM_WORK_CONSERVING";
    /// Opt-in GPU-time measurement without a compute limit.
    pub const MEASURE_GPU_TIME: &str = "VGPU_MEASURE_GPU_TIME";
    /// Whether a sampled launch's stream is held while its timing events are recorded.
    pub const HOLD_BRACKETS: &str = "VGPU_HOLD_BRACKETS";
    /// Observe only: account without limiting.
    pub const OBSERVE: &str = "VGPU_OBSERVE";
    /// Node-wide directory of the per-GPU turn tokens.
    pub const NODE_DIR: &str = "VGPU_NODE_DIR";
    /// The expected size of a context.
    pub const CONTEXT_SIZE: &str = "VGPU_CONTEXT_SIZE";
    /// The process's devices, as the driver reads them.
    pub const VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
    /// HAMi's task priority.
    pub const TASK_PRIORITY: &str = "CUDA_TASK_PRIORITY";
    /// Seconds between refreshes of HAMi's `last_kernel_time`.
    pub const RECORD_KERNEL_INTERVAL: &str = "RECORD_KERNEL_INTERVAL";
    /// HAMi-core's switch to let allocations past the limit spill to host memory.
    pub const OVERSUBSCRIBE: &str = "CUDA_OVERSUBSCRIBE";
    /// HAMi-core's switch to kill the container's processes when it is over its limit.
    pub const ACTIVE_OOM_KILLER: &str = "ACTIVE_OOM_KILLER";
    /// The pod's namespace (downward API, `metadata.namespace`).
    pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
    /// The pod's name (downward API, `metadata.name`).
    pub const POD_NAME: &str = "POD_NAME";
    /// The container's name (set by the pod spec).
    pub const CONTAINER_NAME: &str = "CONTAINER_NAME";
}

/// The forms `CUDA_TASK_PRIORITY` accepts.
pub const ACCEPTED_PRIORITIES: &str = "an integer (e.g. 0 or 1)";

/// The forms `GPU_CORE_UTILIZATION_POLICY` accepts.
pub const ACCEPTED_CORE_POLICIES: &str = "default, force or disable";

/// The parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// vgpu passes everything through untouched.
    pub disabled: bool,
    /// HAMi-core's levels: 0 errors, 1 and 2 errors and warnings, 3 info, 4 debug.
    pub log_level: u8,
    /// Memory limit for every device (`None`: no limit).
    pub memory_limit_all: Option<u64>,
    /// Per-ordinal memory limits, sorted by ordinal, each ordinal at most once; `None` is an
    /// explicit `0`: no limit on that device.
    pub memory_limit_by_index: Vec<(u32, Option<u64>)>,
    /// SM limit in percent (1..=100) for every device (`None`: no limit).
    pub sm_limit_all: Option<u8>,
    /// Per-ordinal SM limits, sorted by ordinal, each ordinal at most once; `None` is an
    /// explicit `0`: no limit on that device.
    pub sm_limit_by_index: Vec<(u32, Option<u8>)>,
    /// Path of the shared region, if configured.
    pub shared_region_path: Option<PathBuf>,
    /// Bad values of variables that bear on no limit (the log level, the core policy, the task
    /// priority, `ACTIVE_OOM_KILLER`, `CUDA_OVERSUBSCRIBE`, the kernel record interval):
    /// HAMi-core reads what it can of them and goes on, and so does vgpu, with their defaults
    /// and one warning each ([`crate::plan::Plan::notices`]). A bad limit is an error.
    pub ignored: Vec<ConfigError>,
    /// `GPU_CORE_UTILIZATION_POLICY`: HAMi's switch for the compute limit.
    pub core_policy: CorePolicy,
    /// `VGPU_SM_WORK_CONSERVING`: a container may exceed its share while no other tenant
    /// waits for the GPU.
    pub sm_work_conserving: bool,
    /// `VGPU_HOLD_BRACKETS`: a sampled launch's stream is held on a pinned host word while its
    /// timing events are recorded, and a process kept off the GPU for a peer's synchronisation
    /// has its streams wait on that word's neighbour (default on; off: timed unheld, the host's
    /// time in them on an idle stream, and held at the gate).
    pub hold_brackets: bool,
    /// `VGPU_MEASURE_GPU_TIME`: measure GPU time (for the monitor) on devices without a compute
    /// limit too. Opt-in: it puts the compute gate (a load and an add) on their launch path.
    pub measure_gpu_time: bool,
    /// `VGPU_OBSERVE`: account memory (every device) and GPU time in the region without
    /// setting the environment's limits.
    pub observe: bool,
    /// `VGPU_NODE_DIR`, if set and not empty.
    pub node_dir: Option<PathBuf>,
    /// `VGPU_CONTEXT_SIZE`, if set and not empty (0 is allowed: contexts expected to be free).
    pub context_size: Option<u64>,
    /// `CUDA_VISIBLE_DEVICES` as given (`None`: unset).
    pub visible_devices: Option<String>,
    /// `CUDA_TASK_PRIORITY`, if set and not empty.
    pub task_priority: Option<i32>,
    /// `RECORD_KERNEL_INTERVAL` in seconds, if set and not empty.
    pub record_kernel_interval_s: Option<u32>,
    /// `CUDA_OVERSUBSCRIBE` (HAMi-core: spill past the limit to host memory). Read so that a
    /// bad value is caught; vgpu does not oversubscribe.
    pub oversubscribe: bool,
    /// `ACTIVE_OOM_KILLER` (HAMi-core: kill the container's processes when it is over its
    /// limit), if set and not empty. Read so that a bad value is caught; vgpu refuses the
    /// allocation instead, so a container is never over its limit.
    pub active_oom_killer: Option<bool>,
    /// `POD_NAMESPACE`, if set and not empty (as given; the plan keeps it only if it is a
    /// Kubernetes name).
    pub pod_namespace: Option<String>,
    /// `POD_NAME`, if set and not empty (as given).
    pub pod_name: Option<String>,
    /// `CONTAINER_NAME`, if set and not empty (as given).
    pub container_name: Option<String>,
}

/// `GPU_CORE_UTILIZATION_POLICY` as HAMi defines it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CorePolicy {
    /// `default`: enforce the SM limit, except while HAMi's node monitor says the container is
    /// alone on its GPU (`utilization_switch` 0 in the region), as HAMi-core does. Without the
    /// monitor the switch stays 1 and the limit holds.
    #[default]
    Default,
    /// `force`: enforce the SM limit.
    Force,
    /// `disable`: ignore the SM limit.
    Disable,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            log_level: DEFAULT_LOG_LEVEL,
            memory_limit_all: None,
            memory_limit_by_index: Vec::new(),
            sm_limit_all: None,
            sm_limit_by_index: Vec::new(),
            shared_region_path: None,
            ignored: Vec::new(),
            core_policy: CorePolicy::Default,
            sm_work_conserving: false,
            hold_brackets: true,
            measure_gpu_time: false,
            observe: false,
            node_dir: None,
            context_size: None,
            visible_devices: None,
            task_priority: None,
            record_kernel_interval_s: None,
            oversubscribe: false,
            active_oom_killer: None,
            pod_namespace: None,
            pod_name: None,
            container_name: None,
        }
    }
}

/// A variable with a value vgpu cannot use. [`Display`](fmt::Display) is one line naming the
/// variable, the bad value and the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The variable's name.
    pub variable: String,
    /// Its value as given.
    pub value: String,
    /// The accepted forms (one of the `ACCEPTED_*` constants).
    pub accepted: &'static str,
    /// What is wrong, e.g. "is not a valid size".
    pub problem: &'static str,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // escape_debug keeps the message on one line whatever the value contains.
        write!(
            f,
            "vgpu: {}=\"{}\" {}; use {}",
            self.variable.escape_debug(),
            self.value.escape_debug(),
            self.problem,
            self.accepted
        )
    }
}

impl std::error::Error for ConfigError {}

fn error(
    variable: &str,
    value: &str,
    problem: &'static str,
    accepted: &'static str,
) -> ConfigError {
    ConfigError {
        variable: variable.to_owned(),
        value: value.to_owned(),
        accepted,
        problem,
    }
}

impl Config {
    /// Builds the config from (name, value) pairs: the process environment, or a test table.
    /// When a name appears twice the later value wins, as in an environment.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut cfg = Config::default();
        // Per-index values by ordinal: None = unset or empty (the all value applies),
        // Some(None) = 0 (no limit on that device).
        let mut mem_by_index: [Option<Option<u64>>; MAX_DEVICE_INDEX as usize + 1] =
            [None; MAX_DEVICE_INDEX as usize + 1];
        let mut sm_by_index: [Option<Option<u8>>; MAX_DEVICE_INDEX as usize + 1] =
            [None; MAX_DEVICE_INDEX as usize + 1];
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), value.as_ref());
            match name {
                vars::DISABLE_CONTROL => cfg.disabled = parse_bool(name, value)?,
                vars::LOG_LEVEL => {
                    cfg.log_level = lenient(&mut cfg.ignored, parse_log_level(name, value))
                        .unwrap_or(DEFAULT_LOG_LEVEL);
                }
                vars::MEMORY_LIMIT => cfg.memory_limit_all = parse_memory(name, value)?,
                vars::SM_LIMIT => cfg.sm_limit_all = parse_sm(name, value)?,
                vars::CORE_POLICY => {
                    cfg.core_policy = match value.trim_ascii().to_ascii_lowercase().as_str() {
                        "" | "default" => CorePolicy::Default,
                        "force" => CorePolicy::Force,
                        "disable" => CorePolicy::Disable,
                        // HAMi-core takes anything else for the default (the limit holds).
                        _ => {
                            cfg.ignored.push(error(
                                name,
                                value,
                                "is not a known policy",
                                ACCEPTED_CORE_POLICIES,
                            ));
                            CorePolicy::Default
                        }
                    }
                }
                vars::WORK_CONSERVING => cfg.sm_work_conserving = parse_bool(name, value)?,
                vars::MEASURE_GPU_TIME => cfg.measure_gpu_time = parse_bool(name, value)?,
                vars::HOLD_BRACKETS => {
                    cfg.hold_brackets = value.is_empty() || parse_bool(name, value)?;
                }
                vars::OBSERVE => cfg.observe = parse_switch(name, value)?,
                vars::SHARED_CACHE => {
                    cfg.shared_region_path = (!value.is_empty()).then(|| PathBuf::from(value));
                }
                vars::NODE_DIR => {
                    cfg.node_dir = (!value.is_empty()).then(|| PathBuf::from(value));
                }
                vars::CONTEXT_SIZE => {
                    cfg.context_size = if value.trim_ascii().is_empty() {
                        None
                    } else {
                        Some(parse_size(value).map_err(|_| {
                            error(name, value, "is not a valid size", ACCEPTED_SIZE_FORMS)
                        })?)
                    };
                }
                vars::VISIBLE_DEVICES => cfg.visible_devices = Some(value.to_owned()),
                vars::TASK_PRIORITY => {
                    let v = value.trim_ascii();
                    cfg.task_priority = if v.is_empty() {
                        None
                    } else {
                        lenient(
                            &mut cfg.ignored,
                            v.parse::<i32>().map_err(|_| {
                                error(name, value, "is not a valid priority", ACCEPTED_PRIORITIES)
                            }),
                        )
                    };
                }
                vars::RECORD_KERNEL_INTERVAL => {
                    cfg.record_kernel_interval_s =
                        lenient(&mut cfg.ignored, parse_seconds(name, value)).flatten();
                }
                vars::OVERSUBSCRIBE => {
                    cfg.oversubscribe =
                        lenient(&mut cfg.ignored, parse_switch(name, value)).unwrap_or(false);
                }
                vars::ACTIVE_OOM_KILLER => {
                    cfg.active_oom_killer = if value.trim_ascii().is_empty() {
                        None
                    } else {
                        lenient(&mut cfg.ignored, parse_switch(name, value))
                    };
                }
                vars::POD_NAMESPACE => cfg.pod_namespace = non_empty(value),
                vars::POD_NAME => cfg.pod_name = non_empty(value),
                vars::CONTAINER_NAME => cfg.container_name = non_empty(value),
                _ => {
                    if let Some(suffix) = per_index_suffix(name, vars::MEMORY_LIMIT) {
                        let index = parse_index(name, value, suffix)?;
                        mem_by_index[index as usize] = if value.trim_ascii().is_empty() {
                            None
                        } else {
                            Some(parse_memory(name, value)?)
                        };
                    } else if let Some(suffix) = per_index_suffix(name, vars::SM_LIMIT) {
                        let index = parse_index(name, value, suffix)?;
                        sm_by_index[index as usize] = if value.trim_ascii().is_empty() {
                            None
                        } else {
                            Some(parse_sm(name, value)?)
                        };
                    }
                }
            }
        }
        cfg.memory_limit_by_index = (0..)
            .zip(mem_by_index)
            .filter_map(|(i, v)| Some((i, v?)))
            .collect();
        cfg.sm_limit_by_index = (0..)
            .zip(sm_by_index)
            .filter_map(|(i, v)| Some((i, v?)))
            .collect();
        Ok(cfg)
    }

    /// Builds the config from the process environment ([`Config::from_vars_os`]).
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars_os(std::env::vars_os())
    }

    /// Builds the config from (name, value) pairs of any bytes, as an environment holds them.
    /// The two path variables (`CUDA_DEVICE_MEMORY_SHARED_CACHE`, `VGPU_NODE_DIR`) are kept as
    /// the bytes given (a path need not be UTF-8, and two paths that differ only in bytes that
    /// are not must name two files); any other value that is not UTF-8 is read with its bad
    /// bytes replaced (so a number is refused, naming the variable); names that are not
    /// UTF-8 are not vgpu's and are ignored.
    pub fn from_vars_os<I>(vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    {
        let mut paths: Vec<(String, std::ffi::OsString)> = Vec::new();
        let mut text: Vec<(String, String)> = Vec::new();
        for (k, v) in vars {
            let Ok(k) = k.into_string() else { continue };
            if k == vars::SHARED_CACHE || k == vars::NODE_DIR {
                paths.push((k, v));
            } else {
                let v = v
                    .into_string()
                    .unwrap_or_else(|v| v.to_string_lossy().into_owned());
                text.push((k, v));
            }
        }
        let mut cfg = Config::from_vars(text)?;
        for (k, v) in paths {
            let path = (!v.is_empty()).then(|| PathBuf::from(v));
            if k == vars::SHARED_CACHE {
                cfg.shared_region_path = path;
            } else {
                cfg.node_dir = path;
            }
        }
        Ok(cfg)
    }

    /// `CUDA_DEVICE_MEMORY_SHARED_CACHE` alone, read from the process environment: for tools
    /// (the CLI) that need the region's location whatever else the environment holds.
    pub fn shared_cache_from_env() -> Result<Option<PathBuf>, ConfigError> {
        let var = std::env::var_os(vars::SHARED_CACHE).map(|v| (vars::SHARED_CACHE.into(), v));
        Ok(Config::from_vars_os(var)?.shared_region_path)
    }

    /// Effective memory limit for CUDA ordinal `index`: the per-index variable (its `0`: no
    /// limit), else the all-devices one.
    pub fn memory_limit_for(&self, index: u32) -> Option<u64> {
        lookup(&self.memory_limit_by_index, index).unwrap_or(self.memory_limit_all)
    }

    /// Effective SM limit (percent) for CUDA ordinal `index`: the per-index variable (its `0`:
    /// no limit), else the all-devices one; none under the `disable` policy.
    pub fn sm_limit_for(&self, index: u32) -> Option<u8> {
        if self.core_policy == CorePolicy::Disable {
            return None;
        }
        lookup(&self.sm_limit_by_index, index).unwrap_or(self.sm_limit_all)
    }

    /// Whether vgpu has work in this process: a memory limit, an SM limit below 100 % (100 % is
    /// the whole device, which needs no throttling), or GPU-time measurement. Does not look at
    /// `disabled`.
    pub fn any_limit(&self) -> bool {
        let sm = self.core_policy != CorePolicy::Disable
            && (self.sm_limit_all.is_some_and(|p| p < 100)
                || self
                    .sm_limit_by_index
                    .iter()
                    .any(|&(_, p)| p.is_some_and(|p| p < 100)));
        self.memory_limit_all.is_some()
            || self.memory_limit_by_index.iter().any(|(_, l)| l.is_some())
            || sm
            || self.measure_gpu_time
    }
}

/// `value` unless empty.
fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

fn lookup<T: Copy>(table: &[(u32, T)], index: u32) -> Option<T> {
    table
        .binary_search_by_key(&index, |&(i, _)| i)
        .ok()
        .map(|pos| table[pos].1)
}

/// `Some(suffix)` when `name` is `<base>_<suffix>`.
fn per_index_suffix<'a>(name: &'a str, base: &str) -> Option<&'a str> {
    name.strip_prefix(base)?.strip_prefix('_')
}

fn parse_index(name: &str, value: &str, suffix: &str) -> Result<u32, ConfigError> {
    let bad = || {
        error(
            name,
            value,
            "names no valid device index",
            ACCEPTED_INDEX_FORMS,
        )
    };
    let canonical = !suffix.is_empty()
        && suffix.bytes().all(|c| c.is_ascii_digit())
        && (suffix == "0" || !suffix.starts_with('0'));
    if !canonical {
        return Err(bad());
    }
    match suffix.parse::<u32>() {
        Ok(i) if i <= MAX_DEVICE_INDEX => Ok(i),
        _ => Err(bad()),
    }
}

/// A switch whose error message lists the plain forms (no "disable" wording).
/// The value of `r`, or, for a bad value of a variable that bears on no limit, `None` with the
/// error kept in `ignored` (HAMi-core reads what it can of such values and goes on).
fn lenient<T>(ignored: &mut Vec<ConfigError>, r: Result<T, ConfigError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            ignored.push(e);
            None
        }
    }
}

fn parse_switch(name: &str, value: &str) -> Result<bool, ConfigError> {
    parse_bool(name, value).map_err(|e| ConfigError {
        accepted: ACCEPTED_SWITCH_FORMS,
        ..e
    })
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    let v = value.trim_ascii();
    for yes in ["true", "1", "yes", "on"] {
        if v.eq_ignore_ascii_case(yes) {
            return Ok(true);
        }
    }
    for no in ["false", "0", "no", "off", ""] {
        if v.eq_ignore_ascii_case(no) {
            return Ok(false);
        }
    }
    Err(error(
        name,
        value,
        "is not a valid switch",
        ACCEPTED_BOOL_FORMS,
    ))
}

fn parse_log_level(name: &str, value: &str) -> Result<u8, ConfigError> {
    let v = value.trim_ascii();
    if v.is_empty() {
        return Ok(DEFAULT_LOG_LEVEL);
    }
    match v.parse::<u8>() {
        Ok(l) if l <= MAX_LOG_LEVEL && v.bytes().all(|c| c.is_ascii_digit()) => Ok(l),
        _ => Err(error(
            name,
            value,
            "is not a valid log level",
            ACCEPTED_LOG_LEVELS,
        )),
    }
}

/// `None` for empty; whole seconds otherwise (as HAMi-core's `atoi`, without its silent 0 for
/// junk).
fn parse_seconds(name: &str, value: &str) -> Result<Option<u32>, ConfigError> {
    let v = value.trim_ascii();
    if v.is_empty() {
        return Ok(None);
    }
    if !v.bytes().all(|c| c.is_ascii_digit()) {
        return Err(error(
            name,
            value,
            "is not a valid interval",
            ACCEPTED_INTERVALS,
        ));
    }
    v.parse::<u32>()
        .map(Some)
        .map_err(|_| error(name, value, "is not a valid interval", ACCEPTED_INTERVALS))
}

/// `None` for empty or 0 (no limit).
fn parse_memory(name: &str, value: &str) -> Result<Option<u64>, ConfigError> {
    if value.trim_ascii().is_empty() {
        return Ok(None);
    }
    match parse_size(value) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(error(
            name,
            value,
            "is not a valid size",
            ACCEPTED_SIZE_FORMS,
        )),
    }
}

/// `None` for empty or 0 (no limit).
fn parse_sm(name: &str, value: &str) -> Result<Option<u8>, ConfigError> {
    let v = value.trim_ascii();
    if v.is_empty() {
        return Ok(None);
    }
    let bad = || {
        error(
            name,
            value,
            "is not a valid SM percentage",
            ACCEPTED_PERCENT_FORMS,
        )
    };
    if !v.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    match v.parse::<u8>() {
        Ok(0) => Ok(None),
        Ok(p) if p <= 100 => Ok(Some(p)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod core_policy_tests {
    use super::*;

    #[test]
    fn core_policy_and_work_conserving() {
        let c = Config::from_vars([
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("GPU_CORE_UTILIZATION_POLICY", "FORCE"),
        ])
        .unwrap();
        assert_eq!(c.core_policy, CorePolicy::Force);
        assert_eq!(c.sm_limit_for(0), Some(30));
        let c = Config::from_vars([
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("GPU_CORE_UTILIZATION_POLICY", "disable"),
        ])
        .unwrap();
        assert_eq!(c.sm_limit_for(0), None);
        assert!(!c.any_limit());
        // An unknown policy is the default, with a warning (HAMi-core's reading: the limit
        // holds).
        let c = Config::from_vars([
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("GPU_CORE_UTILIZATION_POLICY", "sometimes"),
        ])
        .unwrap();
        assert_eq!(c.core_policy, CorePolicy::Default);
        assert_eq!(c.sm_limit_for(0), Some(30));
        assert!(
            c.ignored[0]
                .to_string()
                .contains("default, force or disable")
        );
        let c = Config::from_vars([("VGPU_SM_WORK_CONSERVING", "1")]).unwrap();
        assert!(c.sm_work_conserving);
        assert!(
            Config::from_vars([] as [(&str, &str); 0])
                .unwrap()
                .hold_brackets
        );
        assert!(
            !Config::from_vars([("VGPU_HOLD_BRACKETS", "false")])
                .unwrap()
                .hold_brackets
        );
        assert!(
            Config::from_vars([("VGPU_HOLD_BRACKETS", "")])
                .unwrap()
                .hold_brackets
        );
        assert!(Config::from_vars([("VGPU_HOLD_BRACKETS", "later")]).is_err());
        assert!(Config::from_vars([("VGPU_SM_WORK_CONSERVING", "maybe")]).is_err());
    }
}
