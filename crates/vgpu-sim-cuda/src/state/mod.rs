//! The pure-Rust model of the simulated GPUs: devices, contexts, allocations, pools, VMM,
//! arrays, graphs, modules. No FFI here: handles are plain `u64`s, results are `CUresult`s.
//!
//! Device-wide usage lives in a slice of `AtomicU64` (one per physical GPU) that may be shared
//! between processes (see [`crate::shared`]); everything else is per process. A process that
//! dies without freeing leaves its bytes charged in the shared counters: unlike the real
//! driver, the simulator does not reclaim a dead process's memory.
//!
//! This module holds the [`Model`] itself (its handles, device charging and address ranges);
//! each API family's operations live in a submodule: [`contexts`], [`memory`] (plain,
//! pitched and managed), [`streams`], [`events`], [`kernels`] (modules and launches),
//! [`capture`], [`pools`] (stream-ordered), [`vmm`], [`arrays`], [`graphs`] and [`waits`]
//! (pinned host memory and stream waits on it).
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use vgpu_sys::cuda::*;

use crate::config::{Config, MAX_DEVICES};
use crate::slicer::Slicing;
use crate::timeline::DevTimeline;
use slicing::TsLocal;

pub mod arrays;
pub mod capture;
pub mod contexts;
pub mod events;
pub mod graphs;
pub mod kernels;
pub mod memory;
pub mod pools;
pub mod slicing;
pub mod streams;
#[cfg(test)]
mod tests;
pub mod vmm;
pub mod waits;

pub use arrays::{ArrayObj, array_bytes, mipmap_bytes};
pub use contexts::Ctx;
pub use events::Event;
pub use graphs::{Graph, GraphPool, NodeKind};
pub use kernels::{KernelTimes, spin_us};
pub use pools::Pool;
pub use streams::{Due, SKey, Stream, Tail, Tl};
pub use vmm::{Mapping, PhysMem};

/// Result of a model operation.
pub type R<T> = Result<T, CUresult>;

/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` (cuda.h; not in `vgpu_sys`).
pub const LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
/// `CUDA_ERROR_LAUNCH_TIMEOUT` (cuda.h; not in `vgpu_sys`).
pub const LAUNCH_TIMEOUT: CUresult = 702;

/// Allocation granularity of pools, graph memory and VMM: 2 MiB.
pub const GRANULE: u64 = 2 << 20;
/// Row pitch alignment of pitched allocations and arrays.
pub const PITCH_ALIGN: u64 = 512;
/// Whole-array size alignment.
pub const ARRAY_ALIGN: u64 = 64 << 10;
/// First fake device address handed out above 4 GiB.
const HIGH_BASE: u64 = 0x7000_0000_0000;
/// First fake address of the 32-bit (`_v1`) range.
const LOW_BASE: u64 = 0x0010_0000;
/// End (exclusive) of the 32-bit range.
const LOW_END: u64 = 1 << 32;
/// Alignment of every device address.
const ADDR_ALIGN: u64 = 256;
/// First opaque handle value (stays clear of `CU_STREAM_LEGACY`/`CU_STREAM_PER_THREAD`).
const HANDLE_BASE: u64 = 0x5100_0000;
/// `CU_STREAM_LEGACY`.
pub const STREAM_LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`.
pub const STREAM_PER_THREAD: u64 = 2;

/// Rounds `x` up to a multiple of `to`, saturating.
pub fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to).saturating_mul(to)
}

/// What an allocation is and where its bytes go back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAlloc*`/`cuMemAllocPitch*`/`cuMemAllocManaged`: charged directly, owned by a context.
    Plain { ctx: u64, low: bool },
    /// Stream-ordered allocation from a memory pool.
    Pool { pool: u64 },
    /// Allocation of a graph alloc node, from the device's graph pool.
    Graph,
}

/// One live device allocation.
#[derive(Clone, Copy, Debug)]
pub struct Alloc {
    pub size: u64,
    pub ordinal: usize,
    pub kind: AllocKind,
}

/// The whole per-process model.
pub struct Model {
    pub cfg: Config,
    /// When this process's simulator started (`Config::event_fails_after_ms` counts from it).
    pub born_ns: u64,
    device_used: &'static [AtomicU64],
    /// Where the device-wide peak of `device_used` is kept, if anywhere.
    pub device_peak: Option<&'static [AtomicU64]>,
    process_used: [u64; MAX_DEVICES],
    next_handle: u64,
    next_high: u64,
    allocs: BTreeMap<u64, Alloc>,
    ctxs: HashMap<u64, Ctx>,
    primary: Vec<Option<u64>>,
    streams: HashMap<u64, Stream>,
    pools: HashMap<u64, Pool>,
    default_pool: Vec<u64>,
    current_pool: Vec<u64>,
    graph_pools: Vec<GraphPool>,
    phys: HashMap<u64, PhysMem>,
    reservations: BTreeMap<u64, u64>,
    mappings: BTreeMap<u64, Mapping>,
    arrays: HashMap<u64, ArrayObj>,
    graphs: HashMap<u64, Graph>,
    execs: HashMap<u64, Vec<NodeKind>>,
    modules: HashSet<u64>,
    functions: HashMap<(u64, Vec<u8>), u64>,
    function_module: HashMap<u64, u64>,
    /// Per-wave duration (ns) of each function.
    function_wave: HashMap<u64, u64>,
    events: HashMap<u64, Event>,
    /// Device timelines, by physical index (shared through `VGPU_SIM_STATE` if set).
    timelines: &'static [DevTimeline],
    /// Timelines of the legacy and per-thread streams.
    implicit: HashMap<SKey, Tl>,
    /// This process's kernels per physical GPU not yet fully executed: (start, end).
    proc_runs: Vec<VecDeque<(u64, u64)>>,
    /// This process's kernel ns per physical GPU of kernels fully executed.
    proc_done: [u64; MAX_DEVICES],
    /// Kernels this process executed (launched, not captured) per physical GPU.
    launched: [u64; MAX_DEVICES],
    /// (launch, start, end) of this process's most recent kernels per physical GPU.
    kernel_log: Vec<VecDeque<KernelTimes>>,
    /// Launch instants of this process's kernels per physical GPU not logged yet.
    kernel_launches: Vec<VecDeque<u64>>,
    /// Index of each log's first entry among the process's kernels on that GPU.
    kernel_log_base: [u64; MAX_DEVICES],
    /// Time-slicing between processes (`VGPU_SIM_TIMESLICE_US`), if on.
    pub slicing: Option<Slicing>,
    /// This process's side of time-slicing.
    ts: TsLocal,
    /// The calling thread (set by the caller before each operation).
    pub thread: u64,
    /// Threads' capture interaction modes (`cuThreadExchangeStreamCaptureMode`; `GLOBAL` if
    /// absent).
    capture_modes: HashMap<u64, CUstreamCaptureMode>,
    /// Pinned host memory (`cuMemHostAlloc`), by address.
    host: BTreeMap<u64, waits::HostMem>,
    /// Modules loaded in a context (`cuModuleLoad*`; a library belongs to none): unloaded
    /// with it.
    module_ctx: HashMap<u64, u64>,
    /// Handles of the objects a destroyed context took with it (streams, events, modules,
    /// functions): using one aborts the process, as the real driver may crash on it.
    dead: HashSet<u64>,
    /// Streams waiting for a word of it (`cuStreamWaitValue32`), with their work kept aside.
    waits: HashMap<SKey, waits::Wait>,
    /// While a satisfied wait's work is queued: when the GPU let it go (its kernels were
    /// submitted already: no launch latency).
    replay_at: Option<u64>,
}

impl Model {
    /// Aborts the process if `h` is the handle of an object a destroyed context took with it
    /// (`what` names its kind): the real driver's handles are pointers into its own memory,
    /// and it may crash on one (vgpu's compute controller did so on an H200 with cuda-python
    /// under an SM limit). A test then fails at the faulty call.
    pub(crate) fn live(&self, h: u64, what: &str) {
        if self.dead.contains(&h) {
            eprintln!(
                "vgpu-sim: a {what} ({h:#x}) of a destroyed context used (the driver may crash)"
            );
            std::process::abort();
        }
    }

    /// A model over `cfg`, with device-wide counters `device_used` and `timelines` (each at
    /// least `cfg.devices` long).
    pub fn new(
        cfg: Config,
        device_used: &'static [AtomicU64],
        timelines: &'static [DevTimeline],
    ) -> Model {
        let n = cfg.visible.len();
        let mut m = Model {
            cfg,
            born_ns: crate::timeline::now_ns(),
            device_used,
            device_peak: None,
            process_used: [0; MAX_DEVICES],
            next_handle: HANDLE_BASE,
            next_high: HIGH_BASE,
            allocs: BTreeMap::new(),
            ctxs: HashMap::new(),
            primary: vec![None; n],
            streams: HashMap::new(),
            pools: HashMap::new(),
            default_pool: Vec::with_capacity(n),
            current_pool: Vec::with_capacity(n),
            graph_pools: vec![GraphPool::default(); n],
            phys: HashMap::new(),
            reservations: BTreeMap::new(),
            mappings: BTreeMap::new(),
            arrays: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            modules: HashSet::new(),
            functions: HashMap::new(),
            function_module: HashMap::new(),
            function_wave: HashMap::new(),
            events: HashMap::new(),
            timelines,
            implicit: HashMap::new(),
            proc_runs: vec![VecDeque::new(); MAX_DEVICES],
            proc_done: [0; MAX_DEVICES],
            launched: [0; MAX_DEVICES],
            kernel_log: vec![VecDeque::new(); MAX_DEVICES],
            kernel_launches: vec![VecDeque::new(); MAX_DEVICES],
            kernel_log_base: [0; MAX_DEVICES],
            slicing: None,
            ts: TsLocal::default(),
            thread: 0,
            capture_modes: HashMap::new(),
            host: BTreeMap::new(),
            module_ctx: HashMap::new(),
            dead: HashSet::new(),
            waits: HashMap::new(),
            replay_at: None,
        };
        for ordinal in 0..n {
            let h = m.handle();
            m.pools.insert(
                h,
                Pool {
                    ordinal,
                    is_default: true,
                    reuse: [1, 1, 1],
                    ..Pool::default()
                },
            );
            m.default_pool.push(h);
            m.current_pool.push(h);
        }
        m
    }

    fn handle(&mut self) -> u64 {
        self.next_handle += 16;
        self.next_handle
    }

    // ----- devices and charging -------------------------------------------------------------

    /// Number of CUDA ordinals this process sees.
    pub fn device_count(&self) -> usize {
        self.cfg.visible.len()
    }

    /// The ordinal `dev` as an index, or `CUDA_ERROR_INVALID_DEVICE`.
    pub fn ordinal(&self, dev: i32) -> R<usize> {
        usize::try_from(dev)
            .ok()
            .filter(|&d| d < self.cfg.visible.len())
            .ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// Physical index of ordinal `o` (which must be valid).
    pub fn phys_of(&self, o: usize) -> usize {
        self.cfg.visible[o]
    }

    /// Device-wide bytes in use on physical GPU `p`.
    pub fn device_used(&self, p: usize) -> u64 {
        self.device_used
            .get(p)
            .map_or(0, |a| a.load(Ordering::SeqCst))
    }

    /// Bytes this process has charged to physical GPU `p`.
    pub fn process_used(&self, p: usize) -> u64 {
        self.process_used.get(p).copied().unwrap_or(0)
    }

    /// Charges `bytes` to ordinal `o`'s device, or fails with OOM changing nothing.
    fn charge(&mut self, o: usize, bytes: u64) -> R<()> {
        let p = self.phys_of(o);
        let total = self.cfg.mem;
        let counter = &self.device_used[p];
        let mut cur = counter.load(Ordering::SeqCst);
        loop {
            let next = match cur.checked_add(bytes) {
                Some(n) if n <= total => n,
                _ => return Err(CUDA_ERROR_OUT_OF_MEMORY),
            };
            match counter.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    if let Some(peak) = self.device_peak.and_then(|v| v.get(p)) {
                        peak.fetch_max(next, Ordering::SeqCst);
                    }
                    break;
                }
                Err(actual) => cur = actual,
            }
        }
        self.process_used[p] += bytes;
        Ok(())
    }

    /// Returns `bytes` to ordinal `o`'s device.
    fn uncharge(&mut self, o: usize, bytes: u64) {
        let p = self.phys_of(o);
        let counter = &self.device_used[p];
        let mut cur = counter.load(Ordering::SeqCst);
        loop {
            let next = cur.saturating_sub(bytes);
            match counter.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        self.process_used[p] = self.process_used[p].saturating_sub(bytes);
    }

    // ----- addresses -------------------------------------------------------------------------

    /// A fresh address range above 4 GiB, `align`-aligned (at least 256).
    fn high_range(&mut self, size: u64, align: u64) -> R<u64> {
        let align = align.max(if size >= GRANULE { GRANULE } else { ADDR_ALIGN });
        let start = round_up(self.next_high, align);
        let end = start
            .checked_add(round_up(size.max(1), ADDR_ALIGN))
            .and_then(|e| e.checked_add(ADDR_ALIGN))
            .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        self.next_high = end;
        Ok(start)
    }

    /// A free range below 4 GiB for a `_v1` allocation (first fit among live low allocations).
    fn low_range(&self, size: u64) -> R<u64> {
        let len = round_up(size, ADDR_ALIGN);
        let mut cand = LOW_BASE;
        for (&start, a) in self.allocs.range(LOW_BASE..LOW_END) {
            if start >= cand.saturating_add(len) {
                break;
            }
            cand = round_up(start + a.size, ADDR_ALIGN);
        }
        if cand.saturating_add(len) <= LOW_END {
            Ok(cand)
        } else {
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }
}
