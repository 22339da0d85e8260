//! The pure-Rust model of the simulated GPUs: devices, contexts, allocations, pools, VMM,
//! arrays, graphs, modules. No FFI here: handles are plain `u64`s, results are `CUresult`s.
//!
//! Device-wide usage lives in a slice of `AtomicU64` (one per physical GPU) that may be shared
//! between processes (see [`crate::shared`]); everything else is per process. A process that
//! dies without freeing leaves its bytes charged in the shared counters: unlike the real
//! driver, the simulator does not reclaim a dead process's memory.
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use vgpu_sys::cuda::*;

use crate::config::{Config, MAX_DEVICES, SM_COUNT};
use crate::timeline::{DevTimeline, now_ns};

/// Result of a model operation.
pub type R<T> = Result<T, CUresult>;

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

/// Bytes an array of the given shape takes: each row (`width × channels × element`) rounded
/// up to 512, times `max(height,1) × max(depth,1)`, the whole rounded up to 64 KiB.
pub fn array_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: CUarray_format,
    channels: u32,
) -> R<u64> {
    let elem = array_format_bytes(format).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if !matches!(channels, 1 | 2 | 4) || width == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let row = width
        .checked_mul(elem * u64::from(channels))
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let total = round_up(row, PITCH_ALIGN)
        .checked_mul(height.max(1))
        .and_then(|x| x.checked_mul(depth.max(1)))
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(round_up(total, ARRAY_ALIGN))
}

/// Bytes of a mipmapped array: the sum of [`array_bytes`] over its levels, each non-zero
/// dimension halved per level (minimum 1).
pub fn mipmap_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: CUarray_format,
    channels: u32,
    levels: u32,
) -> R<u64> {
    if levels == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let half = |d: u64| if d == 0 { 0 } else { (d / 2).max(1) };
    let (mut w, mut h, mut d) = (width, height, depth);
    let mut sum = 0u64;
    for _ in 0..levels {
        sum = sum
            .checked_add(array_bytes(w, h, d, format, channels)?)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        (w, h, d) = (half(w), half(h), half(d));
    }
    Ok(sum)
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

/// A context.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub ordinal: usize,
    pub primary: bool,
    /// Retain count of a primary context (unused otherwise).
    pub refcount: u32,
    /// Whether the context exists (charged); a released primary context keeps its handle.
    pub active: bool,
    /// Latest `last_end` of the context's destroyed streams (their work still completes).
    pub retired: u64,
}

/// A stream's place on the timeline.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tl {
    /// When the stream's last queued work completes.
    pub last_end: u64,
    /// The graph being captured into, if capturing.
    pub capture: Option<u64>,
    /// The capture was invalidated (by a context-wide sync): its end returns no graph.
    pub capture_invalidated: bool,
}

/// A stream.
#[derive(Clone, Debug)]
pub struct Stream {
    pub ctx: u64,
    pub ordinal: usize,
    pub flags: u32,
    pub priority: i32,
    pub tl: Tl,
}

/// Which stream an operation targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SKey {
    /// A created stream.
    Explicit(u64),
    /// The legacy NULL stream of a context.
    Legacy(u64),
    /// The per-thread default stream of (context, thread).
    PerThread(u64, u64),
}

/// A stream-ordered memory pool.
#[derive(Clone, Debug, Default)]
pub struct Pool {
    pub ordinal: usize,
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
    pub release_threshold: u64,
    pub is_default: bool,
    pub destroyed: bool,
    pub reuse: [i32; 3],
}

/// A device's graph memory pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct GraphPool {
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
}

/// Physical memory of `cuMemCreate`.
#[derive(Clone, Debug)]
pub struct PhysMem {
    pub ordinal: usize,
    pub size: u64,
    pub released: bool,
    pub maps: u32,
}

/// One `cuMemMap` mapping.
#[derive(Clone, Copy, Debug)]
pub struct Mapping {
    pub size: u64,
    pub handle: u64,
}

/// An array or mipmapped array.
#[derive(Clone, Copy, Debug)]
pub struct ArrayObj {
    pub ordinal: usize,
    pub bytes: u64,
    pub ctx: u64,
    pub mipmapped: bool,
}

/// A graph node's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Alloc {
        ordinal: usize,
        size: u64,
        dptr: u64,
    },
    Free {
        dptr: u64,
    },
    /// A kernel taking `dur` ns of device time.
    Kernel {
        dur: u64,
    },
}

/// A graph: its nodes in insertion order.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<(u64, NodeKind)>,
}

/// An event: completes at `time` (never recorded: `None`, complete).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub ordinal: Option<usize>,
    pub flags: u32,
    pub time: Option<u64>,
}

/// The whole per-process model.
pub struct Model {
    pub cfg: Config,
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
    /// The calling thread (set by the caller before each operation).
    pub thread: u64,
}

impl Model {
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
            thread: 0,
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

    // ----- contexts --------------------------------------------------------------------------

    /// Ordinal of a live context, or `CUDA_ERROR_INVALID_CONTEXT`.
    pub fn ctx_ordinal(&self, ctx: Option<u64>) -> R<usize> {
        ctx.and_then(|h| self.ctxs.get(&h))
            .filter(|c| c.active)
            .map(|c| c.ordinal)
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)
    }

    /// Whether `h` is a live context.
    pub fn ctx_valid(&self, h: u64) -> bool {
        self.ctxs.get(&h).is_some_and(|c| c.active)
    }

    /// `cuCtxCreate*`: a new context on `dev`, charged.
    pub fn ctx_create(&mut self, dev: i32) -> R<u64> {
        let o = self.ordinal(dev)?;
        self.charge(o, self.cfg.ctx_reserve)?;
        let h = self.handle();
        self.ctxs.insert(
            h,
            Ctx {
                ordinal: o,
                primary: false,
                refcount: 0,
                active: true,
                retired: 0,
            },
        );
        Ok(h)
    }

    /// `cuCtxDestroy*`: frees the context, its allocations, arrays and streams.
    pub fn ctx_destroy(&mut self, h: u64) -> R<()> {
        match self.ctxs.get(&h) {
            Some(c) if c.active && !c.primary => {}
            _ => return Err(CUDA_ERROR_INVALID_CONTEXT),
        }
        self.ctx_teardown(h);
        if let Some(c) = self.ctxs.remove(&h) {
            self.uncharge(c.ordinal, self.cfg.ctx_reserve);
        }
        Ok(())
    }

    /// Frees everything owned by context `h` (not the context reservation itself).
    fn ctx_teardown(&mut self, h: u64) {
        let owned: Vec<(u64, Alloc)> = self
            .allocs
            .iter()
            .filter(|(_, a)| matches!(a.kind, AllocKind::Plain { ctx, .. } if ctx == h))
            .map(|(&p, &a)| (p, a))
            .collect();
        for (p, a) in owned {
            self.allocs.remove(&p);
            self.uncharge(a.ordinal, a.size);
        }
        let arrays: Vec<(u64, ArrayObj)> = self
            .arrays
            .iter()
            .filter(|(_, a)| a.ctx == h)
            .map(|(&k, &a)| (k, a))
            .collect();
        for (k, a) in arrays {
            self.arrays.remove(&k);
            self.uncharge(a.ordinal, a.bytes);
        }
        self.streams.retain(|_, s| s.ctx != h);
        self.implicit.retain(|k, _| match *k {
            SKey::Legacy(c) | SKey::PerThread(c, _) => c != h,
            SKey::Explicit(_) => true,
        });
    }

    /// `cuDevicePrimaryCtxRetain`: the first retain creates (and charges) the context.
    pub fn primary_retain(&mut self, dev: i32) -> R<u64> {
        let o = self.ordinal(dev)?;
        let h = match self.primary[o] {
            Some(h) => h,
            None => {
                let h = self.handle();
                self.ctxs.insert(
                    h,
                    Ctx {
                        ordinal: o,
                        primary: true,
                        refcount: 0,
                        active: false,
                        retired: 0,
                    },
                );
                self.primary[o] = Some(h);
                h
            }
        };
        let active = self.ctxs.get(&h).is_some_and(|c| c.active);
        if !active {
            self.charge(o, self.cfg.ctx_reserve)?;
        }
        if let Some(c) = self.ctxs.get_mut(&h) {
            c.active = true;
            c.refcount += 1;
        }
        Ok(h)
    }

    /// `cuDevicePrimaryCtxRelease*`: the last release destroys the context (handle kept).
    pub fn primary_release(&mut self, dev: i32) -> R<()> {
        let o = self.ordinal(dev)?;
        let h = self.primary[o].ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let c = self.ctxs.get_mut(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !c.active || c.refcount == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        c.refcount -= 1;
        if c.refcount == 0 {
            c.active = false;
            self.ctx_teardown(h);
            self.uncharge(o, self.cfg.ctx_reserve);
        }
        Ok(())
    }

    /// `cuDevicePrimaryCtxReset*`: frees the primary context's allocations, arrays and
    /// streams; the context itself (and its retain count) stays.
    pub fn primary_reset(&mut self, dev: i32) -> R<()> {
        let o = self.ordinal(dev)?;
        if let Some(h) = self.primary[o] {
            self.ctx_teardown(h);
        }
        Ok(())
    }

    /// Primary context handle of `dev`, if created.
    pub fn primary_handle(&self, dev: i32) -> R<Option<u64>> {
        let o = self.ordinal(dev)?;
        Ok(self.primary[o])
    }

    // ----- plain memory ----------------------------------------------------------------------

    /// `cuMemGetInfo*`: (free, total) of the current context's device.
    pub fn mem_info(&self, ctx: Option<u64>) -> R<(u64, u64)> {
        let o = self.ctx_ordinal(ctx)?;
        let total = self.cfg.mem;
        Ok((
            total.saturating_sub(self.device_used(self.phys_of(o))),
            total,
        ))
    }

    /// `cuMemAlloc*`/`cuMemAllocManaged`: `size` bytes on the current device.
    pub fn mem_alloc(&mut self, ctx: Option<u64>, size: u64, low: bool) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = ctx.unwrap_or_default();
        let addr = if low {
            if size > u64::from(u32::MAX) {
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
            self.low_range(size)?
        } else {
            self.high_range(size, ADDR_ALIGN)?
        };
        self.charge(o, size)?;
        self.allocs.insert(
            addr,
            Alloc {
                size,
                ordinal: o,
                kind: AllocKind::Plain { ctx: h, low },
            },
        );
        Ok(addr)
    }

    /// `cuMemAllocPitch*`: pitch is `width` rounded up to 512; charges `pitch × height`.
    pub fn mem_alloc_pitch(
        &mut self,
        ctx: Option<u64>,
        width: u64,
        height: u64,
        elem: u64,
        low: bool,
    ) -> R<(u64, u64)> {
        self.ctx_ordinal(ctx)?;
        if width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let pitch = round_up(width, PITCH_ALIGN);
        let size = pitch.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let addr = self.mem_alloc(ctx, size, low)?;
        Ok((addr, pitch))
    }

    /// `cuMemFree*` (and the release half of `cuMemFreeAsync`): returns the allocation at
    /// exactly `ptr` to wherever it came from.
    pub fn mem_free(&mut self, ptr: u64) -> R<()> {
        let a = self.allocs.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        match a.kind {
            AllocKind::Plain { .. } => self.uncharge(a.ordinal, a.size),
            AllocKind::Pool { pool } => {
                if let Some(p) = self.pools.get_mut(&pool) {
                    p.used = p.used.saturating_sub(a.size);
                    if p.destroyed {
                        self.pool_shrink(pool, 0);
                    }
                }
            }
            AllocKind::Graph => {
                let g = &mut self.graph_pools[a.ordinal];
                g.used = g.used.saturating_sub(a.size);
            }
        }
        Ok(())
    }

    /// Is `ptr` a live allocation (of any kind) that a free accepts?
    pub fn alloc_at(&self, ptr: u64) -> Option<Alloc> {
        self.allocs.get(&ptr).copied()
    }

    /// `cuMemGetAddressRange*`: base and size of the allocation or mapping containing `ptr`.
    pub fn address_range(&self, ptr: u64) -> R<(u64, u64)> {
        if let Some((&base, a)) = self.allocs.range(..=ptr).next_back()
            && ptr < base.saturating_add(a.size)
        {
            return Ok((base, a.size));
        }
        if let Some((&base, m)) = self.mappings.range(..=ptr).next_back()
            && ptr < base.saturating_add(m.size)
        {
            return Ok((base, m.size));
        }
        Err(CUDA_ERROR_NOT_FOUND)
    }

    // ----- streams and events ----------------------------------------------------------------

    /// `cuStreamCreate*`: a stream of the current context.
    pub fn stream_create(&mut self, ctx: Option<u64>, flags: u32, priority: i32) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let h = self.handle();
        self.streams.insert(
            h,
            Stream {
                ctx: ctx.unwrap_or_default(),
                ordinal: o,
                flags,
                priority,
                tl: Tl::default(),
            },
        );
        Ok(h)
    }

    /// `cuStreamDestroy*`.
    pub fn stream_destroy(&mut self, h: u64) -> R<()> {
        let s = self.streams.remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(c) = self.ctxs.get_mut(&s.ctx) {
            c.retired = c.retired.max(s.tl.last_end);
        }
        Ok(())
    }

    /// Device ordinal of stream `h` (null, legacy and per-thread streams: the current
    /// context's device).
    pub fn stream_ordinal(&self, ctx: Option<u64>, h: u64) -> R<usize> {
        if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            return self.ctx_ordinal(ctx);
        }
        let s = self.streams.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if !self.ctx_valid(s.ctx) {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        Ok(s.ordinal)
    }

    /// `cuStreamSynchronize*`: completes the stream; pools of its device release memory
    /// above their release threshold.
    pub fn stream_sync(&mut self, ctx: Option<u64>, h: u64) -> R<()> {
        let o = self.stream_ordinal(ctx, h)?;
        self.device_sync(o);
        Ok(())
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_sync(&mut self, ctx: Option<u64>) -> R<()> {
        let o = self.ctx_ordinal(ctx)?;
        self.device_sync(o);
        Ok(())
    }

    /// Every pool of ordinal `o` shrinks to `max(used, release_threshold)`.
    pub fn device_sync(&mut self, o: usize) {
        let pools: Vec<(u64, u64)> = self
            .pools
            .iter()
            .filter(|(_, p)| p.ordinal == o)
            .map(|(&h, p)| (h, p.release_threshold))
            .collect();
        for (h, threshold) in pools {
            self.pool_shrink(h, threshold);
        }
    }

    /// `cuEventCreate`.
    pub fn event_create(&mut self, ctx: Option<u64>, flags: u32) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let h = self.handle();
        self.events.insert(
            h,
            Event {
                ordinal: Some(o),
                flags,
                time: None,
            },
        );
        Ok(h)
    }

    /// `cuEventDestroy*`.
    pub fn event_destroy(&mut self, h: u64) -> R<()> {
        self.events
            .remove(&h)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    }

    /// `cuEventRecord*`: the event completes when the stream's queued work does (now if
    /// idle). On a capturing stream: nothing (event record nodes are not modelled).
    pub fn event_record(&mut self, ctx: Option<u64>, h: u64, stream: u64) -> R<()> {
        let (k, o) = self.skey(ctx, stream)?;
        if !self.events.contains_key(&h) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        let t = now_ns().max(self.tail(k));
        if let Some(e) = self.events.get_mut(&h) {
            e.ordinal = Some(o);
            e.time = Some(t);
        }
        Ok(())
    }

    /// When event `h` completes (`None`: never recorded).
    pub fn event_time(&self, h: u64) -> R<Option<u64>> {
        Ok(self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?.time)
    }

    /// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the event's time.
    pub fn event_query(&self, h: u64) -> R<()> {
        match self.event_time(h)? {
            Some(t) if now_ns() < t => Err(CUDA_ERROR_NOT_READY),
            _ => Ok(()),
        }
    }

    /// `cuEventElapsedTime`: milliseconds from `start` to `end`.
    pub fn event_elapsed(&self, start: u64, end: u64) -> R<f32> {
        let a = *self.events.get(&start).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let b = *self.events.get(&end).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if (a.flags | b.flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (Some(ta), Some(tb)) = (a.time, b.time) else {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        };
        if now_ns() < ta.max(tb) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        Ok(((tb as f64 - ta as f64) / 1e6) as f32)
    }

    /// `cuEventSynchronize` (after waiting for the event's time): like a stream synchronize
    /// of the event's device.
    pub fn event_sync(&mut self, h: u64) -> R<()> {
        let e = *self.events.get(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(o) = e.ordinal {
            self.device_sync(o);
        }
        Ok(())
    }

    /// Whether `h` is a live event.
    pub fn event_valid(&self, h: u64) -> bool {
        self.events.contains_key(&h)
    }

    /// `cuStreamWaitEvent`: later work on the stream starts after the event completes.
    pub fn stream_wait_event(&mut self, ctx: Option<u64>, stream: u64, ev: u64) -> R<()> {
        let (k, _) = self.skey(ctx, stream)?;
        let t = self.event_time(ev)?;
        if self.tl(k).capture.is_some() {
            return Ok(());
        }
        if let (Some(t), Some(tl)) = (t, self.tl_mut(k)) {
            tl.last_end = tl.last_end.max(t);
        }
        Ok(())
    }

    // ----- the timeline ----------------------------------------------------------------------

    /// Resolves stream handle `h` (0 and `CU_STREAM_LEGACY`: the context's legacy stream;
    /// `CU_STREAM_PER_THREAD`: the calling thread's) to its key and device ordinal.
    pub fn skey(&self, ctx: Option<u64>, h: u64) -> R<(SKey, usize)> {
        match h {
            0 | STREAM_LEGACY => Ok((
                SKey::Legacy(ctx.unwrap_or_default()),
                self.ctx_ordinal(ctx)?,
            )),
            STREAM_PER_THREAD => Ok((
                SKey::PerThread(ctx.unwrap_or_default(), self.thread),
                self.ctx_ordinal(ctx)?,
            )),
            _ => Ok((SKey::Explicit(h), self.stream_ordinal(ctx, h)?)),
        }
    }

    /// The stream's own timeline state.
    pub fn tl(&self, k: SKey) -> Tl {
        match k {
            SKey::Explicit(h) => self.streams.get(&h).map(|s| s.tl),
            _ => self.implicit.get(&k).copied(),
        }
        .unwrap_or_default()
    }

    fn tl_mut(&mut self, k: SKey) -> Option<&mut Tl> {
        match k {
            SKey::Explicit(h) => self.streams.get_mut(&h).map(|s| &mut s.tl),
            _ => Some(self.implicit.entry(k).or_default()),
        }
    }

    /// Context of a stream key.
    fn key_ctx(&self, k: SKey) -> u64 {
        match k {
            SKey::Explicit(h) => self.streams.get(&h).map_or(0, |s| s.ctx),
            SKey::Legacy(c) | SKey::PerThread(c, _) => c,
        }
    }

    /// Whether work on `k` synchronizes with the legacy stream (everything but the legacy
    /// stream itself and `CU_STREAM_NON_BLOCKING` streams).
    fn blocking(&self, k: SKey) -> bool {
        match k {
            SKey::Explicit(h) => self
                .streams
                .get(&h)
                .is_some_and(|s| s.flags & CU_STREAM_NON_BLOCKING == 0),
            SKey::PerThread(..) => true,
            SKey::Legacy(_) => false,
        }
    }

    /// When work queued on `k` now could start, with legacy-stream semantics: the legacy
    /// stream waits for every blocking stream of its context, a blocking stream for the
    /// legacy stream.
    pub fn tail(&self, k: SKey) -> u64 {
        let own = self.tl(k).last_end;
        match k {
            SKey::Legacy(c) => {
                let explicit = self
                    .streams
                    .iter()
                    .filter(|(h, s)| s.ctx == c && self.blocking(SKey::Explicit(**h)))
                    .map(|(_, s)| s.tl.last_end);
                let per_thread = self
                    .implicit
                    .iter()
                    .filter(|(k, _)| matches!(k, SKey::PerThread(kc, _) if *kc == c))
                    .map(|(_, t)| t.last_end);
                explicit.chain(per_thread).fold(own, u64::max)
            }
            _ if self.blocking(k) => own.max(self.tl(SKey::Legacy(self.key_ctx(k))).last_end),
            _ => own,
        }
    }

    /// When everything queued on stream `h` completes (for `cuStreamSynchronize`). Fails on
    /// a capturing stream.
    pub fn stream_end(&self, ctx: Option<u64>, h: u64) -> R<u64> {
        let (k, _) = self.skey(ctx, h)?;
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        Ok(self.tail(k))
    }

    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is queued.
    pub fn stream_query(&self, ctx: Option<u64>, h: u64) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if now_ns() < self.tail(k) {
            return Err(CUDA_ERROR_NOT_READY);
        }
        Ok(())
    }

    /// When everything queued on any stream of the current context completes.
    pub fn ctx_end(&self, ctx: Option<u64>) -> R<u64> {
        self.ctx_ordinal(ctx)?;
        let c = ctx.unwrap_or_default();
        let explicit = self
            .streams
            .values()
            .filter(|s| s.ctx == c)
            .map(|s| s.tl.last_end);
        let implicit = self
            .implicit
            .iter()
            .filter(|(k, _)| self.key_ctx(**k) == c)
            .map(|(_, t)| t.last_end);
        let retired = self.ctxs.get(&c).map_or(0, |x| x.retired);
        Ok(explicit.chain(implicit).fold(retired, u64::max))
    }

    /// Device time of launching `f` over `grid`: its per-wave time × ⌈blocks / 132⌉.
    fn kernel_ns(&self, f: u64, grid: [u32; 3]) -> u64 {
        let blocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let wave = self.function_wave.get(&f).copied().unwrap_or(0);
        blocks.div_ceil(SM_COUNT).saturating_mul(wave)
    }

    /// Runs kernels of `durs` ns one after another on stream `k` of ordinal `o`.
    fn run_kernels(&mut self, k: SKey, o: usize, durs: &[u64]) {
        if durs.is_empty() {
            return;
        }
        let p = self.phys_of(o);
        let mut t = now_ns()
            .saturating_add(self.cfg.launch_latency_ns)
            .max(self.tail(k));
        // This process, for the context-switch cost (the pid at launch time, so that a forked
        // child is another context, as on the driver).
        let owner = std::process::id();
        for &d in durs {
            let (start, end) = self.timelines[p].schedule_as(owner, self.cfg.switch_ns, t, d);
            if end > start {
                self.proc_runs[p].push_back((start, end));
            }
            self.launched[p] += 1;
            t = end;
        }
        if let Some(tl) = self.tl_mut(k) {
            tl.last_end = tl.last_end.max(t);
        }
    }

    /// Kernel ns this process executed on physical GPU `p` by now (partly run kernels count
    /// partly).
    pub fn process_kernel_ns(&mut self, p: usize) -> u64 {
        let Some(runs) = self.proc_runs.get_mut(p) else {
            return 0;
        };
        let now = now_ns();
        while let Some(&(s, e)) = runs.front() {
            if e > now {
                break;
            }
            self.proc_done[p] += e - s;
            runs.pop_front();
        }
        let partial: u64 = runs
            .iter()
            .map(|&(s, e)| e.min(now).saturating_sub(s))
            .sum();
        self.proc_done[p] + partial
    }

    /// Kernels this process executed on physical GPU `p`.
    pub fn kernels_launched(&self, p: usize) -> u64 {
        self.launched.get(p).copied().unwrap_or(0)
    }

    // ----- stream capture --------------------------------------------------------------------

    /// `cuStreamBeginCapture*`: later work on the stream goes into a new graph.
    pub fn capture_begin(&mut self, ctx: Option<u64>, h: u64) -> R<()> {
        let (k, _) = self.skey(ctx, h)?;
        if matches!(k, SKey::Legacy(_)) {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if self.tl(k).capture.is_some() {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let g = self.graph_create();
        if let Some(tl) = self.tl_mut(k) {
            tl.capture = Some(g);
        }
        Ok(())
    }

    /// `cuStreamEndCapture*`: the captured graph, or `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
    /// (and no graph) if a context-wide sync invalidated the capture.
    pub fn capture_end(&mut self, ctx: Option<u64>, h: u64) -> R<u64> {
        let (k, _) = self.skey(ctx, h)?;
        let tl = self.tl_mut(k).ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        let g = tl.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if std::mem::take(&mut tl.capture_invalidated) {
            self.graph_destroy(g)?;
            return Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        Ok(g)
    }

    /// The start of `cuCtxSynchronize`. It waits for every stream of the context, and a
    /// capturing stream cannot be waited for: with a capture in progress in the context, the
    /// sync fails and invalidates every such capture. The calling thread's capture mode does
    /// not change that; measured on the H200 (docs/GPU-RESULTS.md run 7), a sync from a
    /// RELAXED-mode thread still invalidated PyTorch's GLOBAL-mode captures.
    pub fn ctx_sync_begin(&mut self, ctx: Option<u64>) -> R<()> {
        self.ctx_ordinal(ctx)?;
        let c = ctx.unwrap_or_default();
        let mut refused = false;
        for s in self.streams.values_mut().filter(|s| s.ctx == c) {
            if s.tl.capture.is_some() {
                s.tl.capture_invalidated = true;
                refused = true;
            }
        }
        let keys: Vec<SKey> = self.implicit.keys().copied().collect();
        for k in keys {
            if self.key_ctx(k) == c
                && let Some(tl) = self.implicit.get_mut(&k)
                && tl.capture.is_some()
            {
                tl.capture_invalidated = true;
                refused = true;
            }
        }
        if refused {
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        } else {
            Ok(())
        }
    }

    /// The graph stream `h` captures into, if any.
    pub fn capture_graph(&self, ctx: Option<u64>, h: u64) -> R<Option<u64>> {
        let (k, _) = self.skey(ctx, h)?;
        Ok(self.tl(k).capture)
    }

    // ----- memory pools ----------------------------------------------------------------------

    /// `cuDeviceGetDefaultMemPool`.
    pub fn default_pool(&self, dev: i32) -> R<u64> {
        Ok(self.default_pool[self.ordinal(dev)?])
    }

    /// `cuDeviceGetMemPool`.
    pub fn current_pool(&self, dev: i32) -> R<u64> {
        Ok(self.current_pool[self.ordinal(dev)?])
    }

    /// `cuDeviceSetMemPool`: `pool` must belong to `dev`.
    pub fn set_current_pool(&mut self, dev: i32, pool: u64) -> R<()> {
        let o = self.ordinal(dev)?;
        match self.pools.get(&pool) {
            Some(p) if !p.destroyed && p.ordinal == o => {
                self.current_pool[o] = pool;
                Ok(())
            }
            Some(_) => Err(CUDA_ERROR_INVALID_DEVICE),
            None => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// `cuMemPoolCreate` on `location` (must be a device).
    pub fn pool_create(&mut self, location: CUmemLocation) -> R<u64> {
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let o = self.ordinal(location.id)?;
        let h = self.handle();
        self.pools.insert(
            h,
            Pool {
                ordinal: o,
                reuse: [1, 1, 1],
                ..Pool::default()
            },
        );
        Ok(h)
    }

    fn live_pool(&self, h: u64) -> R<&Pool> {
        self.pools
            .get(&h)
            .filter(|p| !p.destroyed)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// Pool statistics (for tests and attributes).
    pub fn pool(&self, h: u64) -> Option<&Pool> {
        self.pools.get(&h)
    }

    /// `cuMemPoolDestroy`: unused memory goes back at once, the rest as it is freed. A
    /// device's current pool reverts to the default pool.
    pub fn pool_destroy(&mut self, h: u64) -> R<()> {
        let p = self.live_pool(h)?;
        if p.is_default {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let o = p.ordinal;
        if self.current_pool[o] == h {
            self.current_pool[o] = self.default_pool[o];
        }
        if let Some(p) = self.pools.get_mut(&h) {
            p.destroyed = true;
        }
        self.pool_shrink(h, 0);
        Ok(())
    }

    /// Shrinks pool `h`'s reservation to `max(used, keep)` rounded up to 2 MiB, if lower.
    fn pool_shrink(&mut self, h: u64, keep: u64) {
        let Some(p) = self.pools.get_mut(&h) else {
            return;
        };
        let target = round_up(p.used.max(keep), GRANULE);
        if target < p.reserved {
            let give = p.reserved - target;
            p.reserved = target;
            let (o, gone) = (p.ordinal, p.destroyed && p.used == 0);
            self.uncharge(o, give);
            if gone {
                self.pools.remove(&h);
            }
        } else if p.destroyed && p.used == 0 && p.reserved == 0 {
            self.pools.remove(&h);
        }
    }

    /// `cuMemPoolTrimTo`.
    pub fn pool_trim_to(&mut self, h: u64, keep: u64) -> R<()> {
        self.live_pool(h)?;
        self.pool_shrink(h, keep);
        Ok(())
    }

    /// `cuMemPoolGetAttribute`: the value as u64 (int attributes are widened).
    pub fn pool_get_attr(&self, h: u64, attr: CUmemPool_attribute) -> R<u64> {
        let p = self.live_pool(h)?;
        Ok(match attr {
            1..=3 => p.reuse[attr as usize - 1] as u64,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => p.reserved,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => p.reserved_high,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT => p.used,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH => p.used_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        })
    }

    /// `cuMemPoolSetAttribute`: the threshold, the reuse flags, or a reset of a high mark
    /// (value must be 0).
    pub fn pool_set_attr(&mut self, h: u64, attr: CUmemPool_attribute, value: u64) -> R<()> {
        self.live_pool(h)?;
        let Some(p) = self.pools.get_mut(&h) else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        match attr {
            1..=3 => p.reuse[attr as usize - 1] = i32::from(value != 0),
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold = value,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH if value == 0 => p.reserved_high = p.reserved,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH if value == 0 => p.used_high = p.used,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }

    /// `cuMemAllocAsync` (pool `None`: the stream device's current pool) and
    /// `cuMemAllocFromPoolAsync`.
    pub fn alloc_async(
        &mut self,
        ctx: Option<u64>,
        size: u64,
        pool: Option<u64>,
        stream: u64,
    ) -> R<u64> {
        let (k, so) = self.skey(ctx, stream)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(g) = self.tl(k).capture {
            // Captured: a graph mem-alloc node on the stream's device.
            let loc = CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: so as i32,
            };
            return self
                .graph_add_alloc(g, &[], loc, size)
                .map(|(_, dptr)| dptr);
        }
        let ph = match pool {
            Some(h) => h,
            None => self.current_pool[so],
        };
        let p = self.live_pool(ph)?;
        let (o, free) = (p.ordinal, p.reserved - p.used);
        let grow = if free >= size {
            0
        } else {
            round_up(size - free, GRANULE)
        };
        let addr = self.high_range(size, ADDR_ALIGN)?;
        self.charge(o, grow)?;
        if let Some(p) = self.pools.get_mut(&ph) {
            p.reserved += grow;
            p.used += size;
            p.reserved_high = p.reserved_high.max(p.reserved);
            p.used_high = p.used_high.max(p.used);
        }
        self.allocs.insert(
            addr,
            Alloc {
                size,
                ordinal: o,
                kind: AllocKind::Pool { pool: ph },
            },
        );
        Ok(addr)
    }

    /// `cuMemFreeAsync`.
    pub fn free_async(&mut self, ctx: Option<u64>, ptr: u64, stream: u64) -> R<()> {
        let (k, _) = self.skey(ctx, stream)?;
        if let Some(g) = self.tl(k).capture {
            // Captured: a graph mem-free node.
            return self.graph_add_free(g, &[], ptr).map(|_| ());
        }
        self.mem_free(ptr)
    }

    // ----- virtual memory management ---------------------------------------------------------

    /// `cuMemCreate`: `size` (a multiple of 2 MiB) bytes on `location`, charged at once.
    pub fn vmm_create(&mut self, size: u64, location: CUmemLocation) -> R<u64> {
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let o = self.ordinal(location.id)?;
        if size == 0 || !size.is_multiple_of(GRANULE) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.charge(o, size)?;
        let h = self.handle();
        self.phys.insert(
            h,
            PhysMem {
                ordinal: o,
                size,
                released: false,
                maps: 0,
            },
        );
        Ok(h)
    }

    /// The physical allocation behind a `cuMemCreate` handle.
    pub fn vmm_handle(&self, h: u64) -> R<&PhysMem> {
        self.phys
            .get(&h)
            .filter(|p| !p.released)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// Frees physical memory `h` if it is released and no longer mapped.
    fn vmm_maybe_free(&mut self, h: u64) {
        if let Some(p) = self.phys.get(&h)
            && p.released
            && p.maps == 0
        {
            let (o, size) = (p.ordinal, p.size);
            self.phys.remove(&h);
            self.uncharge(o, size);
        }
    }

    /// `cuMemRelease`.
    pub fn vmm_release(&mut self, h: u64) -> R<()> {
        self.vmm_handle(h)?;
        if let Some(p) = self.phys.get_mut(&h) {
            p.released = true;
        }
        self.vmm_maybe_free(h);
        Ok(())
    }

    /// `cuMemAddressReserve` (the address hint is ignored).
    pub fn vmm_reserve(&mut self, size: u64, align: u64) -> R<u64> {
        if size == 0 || !size.is_multiple_of(GRANULE) || (align != 0 && !align.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let start = self.high_range(size, align.max(GRANULE))?;
        self.reservations.insert(start, size);
        Ok(start)
    }

    /// `cuMemAddressFree`: `ptr`/`size` must name a whole reservation; mappings inside it are
    /// dropped.
    pub fn vmm_address_free(&mut self, ptr: u64, size: u64) -> R<()> {
        if self.reservations.get(&ptr) != Some(&size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.reservations.remove(&ptr);
        self.unmap_range(ptr, size);
        Ok(())
    }

    /// `cuMemMap`: maps `size` bytes of handle `h` (from `offset`) at `ptr`, inside a
    /// reservation and over no other mapping.
    pub fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, h: u64) -> R<()> {
        let p = self.vmm_handle(h)?;
        let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if size == 0
            || !size.is_multiple_of(GRANULE)
            || !ptr.is_multiple_of(GRANULE)
            || offset.checked_add(size).is_none_or(|e| e > p.size)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let inside = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&b, &s)| end <= b.saturating_add(s));
        if !inside {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = self
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&b, m)| b.saturating_add(m.size) > ptr);
        if overlaps {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.mappings.insert(ptr, Mapping { size, handle: h });
        if let Some(p) = self.phys.get_mut(&h) {
            p.maps += 1;
        }
        Ok(())
    }

    /// Drops every mapping that starts inside `[ptr, ptr + size)`; returns how many.
    fn unmap_range(&mut self, ptr: u64, size: u64) -> usize {
        let end = ptr.saturating_add(size);
        let hit: Vec<(u64, Mapping)> = self
            .mappings
            .range(ptr..end)
            .map(|(&b, &m)| (b, m))
            .collect();
        for (b, m) in &hit {
            self.mappings.remove(b);
            if let Some(p) = self.phys.get_mut(&m.handle) {
                p.maps = p.maps.saturating_sub(1);
            }
            self.vmm_maybe_free(m.handle);
        }
        hit.len()
    }

    /// `cuMemUnmap`.
    pub fn vmm_unmap(&mut self, ptr: u64, size: u64) -> R<()> {
        if size == 0 || self.unmap_range(ptr, size) == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }

    // ----- arrays ----------------------------------------------------------------------------

    /// `cuArrayCreate*`/`cuArray3DCreate*`/`cuMipmappedArrayCreate` (levels 0: a plain array).
    #[allow(clippy::too_many_arguments)]
    pub fn array_create(
        &mut self,
        ctx: Option<u64>,
        width: u64,
        height: u64,
        depth: u64,
        format: CUarray_format,
        channels: u32,
        levels: Option<u32>,
    ) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let bytes = match levels {
            None => array_bytes(width, height, depth, format, channels)?,
            Some(l) => mipmap_bytes(width, height, depth, format, channels, l)?,
        };
        self.charge(o, bytes)?;
        let h = self.handle();
        self.arrays.insert(
            h,
            ArrayObj {
                ordinal: o,
                bytes,
                ctx: ctx.unwrap_or_default(),
                mipmapped: levels.is_some(),
            },
        );
        Ok(h)
    }

    /// `cuArrayDestroy`/`cuMipmappedArrayDestroy`.
    pub fn array_destroy(&mut self, h: u64, mipmapped: bool) -> R<()> {
        match self.arrays.get(&h) {
            Some(a) if a.mipmapped == mipmapped => {
                let a = *a;
                self.arrays.remove(&h);
                self.uncharge(a.ordinal, a.bytes);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// `cu*ArrayGetMemoryRequirements`: the charged size of array `h` on `dev`.
    pub fn array_requirements(&self, h: u64, mipmapped: bool, dev: i32) -> R<u64> {
        let o = self.ordinal(dev)?;
        match self.arrays.get(&h) {
            Some(a) if a.mipmapped == mipmapped && a.ordinal == o => Ok(a.bytes),
            Some(a) if a.mipmapped == mipmapped => Err(CUDA_ERROR_INVALID_DEVICE),
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    // ----- graphs ----------------------------------------------------------------------------

    /// `cuGraphCreate`.
    pub fn graph_create(&mut self) -> u64 {
        let h = self.handle();
        self.graphs.insert(h, Graph::default());
        h
    }

    /// `cuGraphDestroy`.
    pub fn graph_destroy(&mut self, h: u64) -> R<()> {
        self.graphs
            .remove(&h)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// Checks that `deps` are nodes of graph `g`.
    pub fn graph_check_deps(&self, g: u64, deps: &[u64]) -> R<()> {
        let graph = self.graphs.get(&g).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if deps.iter().all(|d| graph.nodes.iter().any(|(n, _)| n == d)) {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }

    /// `cuGraphAddMemAllocNode`: returns (node, dptr); the address is fixed for the node.
    pub fn graph_add_alloc(
        &mut self,
        g: u64,
        deps: &[u64],
        location: CUmemLocation,
        size: u64,
    ) -> R<(u64, u64)> {
        self.graph_check_deps(g, deps)?;
        if location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let o = self.ordinal(location.id)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let dptr = self.high_range(round_up(size, GRANULE), GRANULE)?;
        let node = self.handle();
        if let Some(graph) = self.graphs.get_mut(&g) {
            graph.nodes.push((
                node,
                NodeKind::Alloc {
                    ordinal: o,
                    size,
                    dptr,
                },
            ));
        }
        Ok((node, dptr))
    }

    /// `cuGraphAddMemFreeNode`.
    pub fn graph_add_free(&mut self, g: u64, deps: &[u64], dptr: u64) -> R<u64> {
        self.graph_check_deps(g, deps)?;
        if dptr == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let node = self.handle();
        if let Some(graph) = self.graphs.get_mut(&g) {
            graph.nodes.push((node, NodeKind::Free { dptr }));
        }
        Ok(node)
    }

    /// `cuGraphInstantiate*`: an executable snapshot of the graph.
    pub fn graph_instantiate(&mut self, g: u64) -> R<u64> {
        let nodes: Vec<NodeKind> = self
            .graphs
            .get(&g)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?
            .nodes
            .iter()
            .map(|(_, k)| *k)
            .collect();
        let h = self.handle();
        self.execs.insert(h, nodes);
        Ok(h)
    }

    /// `cuGraphExecDestroy`.
    pub fn graph_exec_destroy(&mut self, h: u64) -> R<()> {
        self.execs
            .remove(&h)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// `cuGraphAddKernelNode*`: a kernel node of `f` over `grid`.
    pub fn graph_add_kernel(
        &mut self,
        g: u64,
        deps: &[u64],
        f: u64,
        grid: [u32; 3],
        block: [u32; 3],
    ) -> R<u64> {
        self.graph_check_deps(g, deps)?;
        self.check_kernel(f, grid, block)?;
        let dur = self.kernel_ns(f, grid);
        let node = self.handle();
        if let Some(graph) = self.graphs.get_mut(&g) {
            graph.nodes.push((node, NodeKind::Kernel { dur }));
        }
        Ok(node)
    }

    /// `cuGraphLaunch`: every alloc node allocates from its device's graph pool (growing the
    /// reservation in 2 MiB steps, all or nothing), then every free node frees; the kernel
    /// nodes run one after another on the stream's timeline.
    pub fn graph_launch(&mut self, ctx: Option<u64>, exec: u64, stream: u64) -> R<()> {
        let nodes = self
            .execs
            .get(&exec)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?
            .clone();
        let (key, so) = self.skey(ctx, stream)?;
        let n = self.device_count();
        let mut need = vec![0u64; n];
        for k in &nodes {
            if let NodeKind::Alloc {
                ordinal,
                size,
                dptr,
            } = *k
            {
                if self.allocs.contains_key(&dptr) {
                    // The previous launch's allocation is still outstanding.
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                need[ordinal] = need[ordinal].saturating_add(size);
            }
        }
        let mut grow = vec![0u64; n];
        for o in 0..n {
            let g = self.graph_pools[o];
            let free = g.reserved - g.used;
            if need[o] > free {
                grow[o] = round_up(need[o] - free, GRANULE);
            }
        }
        for o in 0..n {
            if let Err(e) = self.charge(o, grow[o]) {
                for (back, &bytes) in grow.iter().enumerate().take(o) {
                    self.uncharge(back, bytes);
                }
                return Err(e);
            }
        }
        for o in 0..n {
            let g = &mut self.graph_pools[o];
            g.reserved += grow[o];
            g.used += need[o];
            g.reserved_high = g.reserved_high.max(g.reserved);
            g.used_high = g.used_high.max(g.used);
        }
        for k in &nodes {
            if let NodeKind::Alloc {
                ordinal,
                size,
                dptr,
            } = *k
            {
                self.allocs.insert(
                    dptr,
                    Alloc {
                        size,
                        ordinal,
                        kind: AllocKind::Graph,
                    },
                );
            }
        }
        for k in &nodes {
            if let NodeKind::Free { dptr } = *k
                && self
                    .allocs
                    .get(&dptr)
                    .is_some_and(|a| a.kind == AllocKind::Graph)
            {
                let _ = self.mem_free(dptr);
            }
        }
        let durs: Vec<u64> = nodes
            .iter()
            .filter_map(|k| match *k {
                NodeKind::Kernel { dur } => Some(dur),
                _ => None,
            })
            .collect();
        self.run_kernels(key, so, &durs);
        Ok(())
    }

    /// Graph pool of `dev`.
    pub fn graph_pool(&self, dev: i32) -> R<GraphPool> {
        Ok(self.graph_pools[self.ordinal(dev)?])
    }

    /// `cuDeviceGraphMemTrim`: reserved shrinks to used (rounded up to 2 MiB).
    pub fn graph_mem_trim(&mut self, dev: i32) -> R<()> {
        let o = self.ordinal(dev)?;
        let g = &mut self.graph_pools[o];
        let target = round_up(g.used, GRANULE);
        if target < g.reserved {
            let give = g.reserved - target;
            g.reserved = target;
            self.uncharge(o, give);
        }
        Ok(())
    }

    /// `cuDeviceSetGraphMemAttribute`: only the high marks, reset with value 0.
    pub fn graph_mem_reset_high(
        &mut self,
        dev: i32,
        attr: CUgraphMem_attribute,
        value: u64,
    ) -> R<()> {
        let o = self.ordinal(dev)?;
        let g = &mut self.graph_pools[o];
        match attr {
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH if value == 0 => g.used_high = g.used,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH if value == 0 => g.reserved_high = g.reserved,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }

    // ----- modules and launches --------------------------------------------------------------

    /// `cuModuleLoad*`.
    pub fn module_load(&mut self, ctx: Option<u64>) -> R<u64> {
        self.ctx_ordinal(ctx)?;
        Ok(self.library_load())
    }

    /// `cuLibraryLoadData`: a module that needs no current context (libraries and modules
    /// share handles; kernels and functions too).
    pub fn library_load(&mut self) -> u64 {
        let h = self.handle();
        self.modules.insert(h);
        h
    }

    /// `cuKernelGetFunction`: the kernel's function (the same handle).
    pub fn kernel_function(&self, k: u64) -> R<u64> {
        if self.function_module.contains_key(&k) {
            Ok(k)
        } else {
            Err(CUDA_ERROR_INVALID_HANDLE)
        }
    }

    /// `cuModuleUnload`.
    pub fn module_unload(&mut self, h: u64) -> R<()> {
        if !self.modules.remove(&h) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        self.functions.retain(|(m, _), _| *m != h);
        self.function_module.retain(|_, m| *m != h);
        let live = &self.function_module;
        self.function_wave.retain(|f, _| live.contains_key(f));
        Ok(())
    }

    /// `cuModuleGetFunction`: one stable handle per (module, name).
    pub fn module_function(&mut self, m: u64, name: &[u8]) -> R<u64> {
        if !self.modules.contains(&m) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        if let Some(&f) = self.functions.get(&(m, name.to_vec())) {
            return Ok(f);
        }
        let f = self.handle();
        self.functions.insert((m, name.to_vec()), f);
        self.function_module.insert(f, m);
        let wave_us = spin_us(name).unwrap_or(self.cfg.kernel_us);
        self.function_wave.insert(f, wave_us.saturating_mul(1000));
        Ok(f)
    }

    /// Checks a kernel's function and dimensions.
    fn check_kernel(&self, f: u64, grid: [u32; 3], block: [u32; 3]) -> R<()> {
        if !self.function_module.contains_key(&f) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
        if grid.contains(&0) || block.contains(&0) || threads > 1024 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }

    /// A kernel launch: queued on the stream's timeline (asynchronous), or, on a capturing
    /// stream, a kernel node of the capture graph.
    pub fn launch(
        &mut self,
        ctx: Option<u64>,
        f: u64,
        grid: [u32; 3],
        block: [u32; 3],
        stream: u64,
    ) -> R<()> {
        self.ctx_ordinal(ctx)?;
        self.check_kernel(f, grid, block)?;
        let (k, o) = self.skey(ctx, stream)?;
        if let Some(g) = self.tl(k).capture {
            return self.graph_add_kernel(g, &[], f, grid, block).map(|_| ());
        }
        let dur = self.kernel_ns(f, grid);
        self.run_kernels(k, o, &[dur]);
        Ok(())
    }
}

/// N of a kernel named `spin_<N>us`.
pub fn spin_us(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"spin_")?.strip_suffix(b"us")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn model(devices: usize, mem: u64) -> Model {
        let counters: &'static [AtomicU64] =
            Box::leak((0..MAX_DEVICES).map(|_| AtomicU64::new(0)).collect());
        let timelines: &'static [DevTimeline] =
            Box::leak((0..MAX_DEVICES).map(|_| DevTimeline::new()).collect());
        let cfg = Config {
            devices,
            mem,
            ctx_reserve: 303 * MIB,
            visible: (0..devices).collect(),
            state_path: None,
            kernel_us: 10,
            launch_ns: 0,
            no_device_mempool: false,
            launch_latency_ns: 0,
            switch_ns: 0,
            ctx_create_us: 0,
        };
        Model::new(cfg, counters, timelines)
    }

    #[test]
    fn a_kernel_starts_no_earlier_than_the_launch_latency() {
        const MS: u64 = 1_000_000;
        let mut m = model(1, 1 << 30);
        m.cfg.launch_latency_ns = 50 * MS;
        let c = m.ctx_create(0).unwrap();
        let md = m.module_load(Some(c)).unwrap();
        let f = m.module_function(md, b"spin_1000us").unwrap();
        let t0 = now_ns();
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
        let end = m.stream_end(Some(c), 0).unwrap();
        let t1 = now_ns();
        assert!(
            end >= t0 + 51 * MS && end <= t1 + 51 * MS,
            "{t0} {end} {t1}"
        );
        // A second launch right behind queues after the first (the latency overlaps).
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], 0).unwrap();
        assert_eq!(m.stream_end(Some(c), 0), Ok(end + MS));
        // One process: no context switch.
        assert_eq!(m.timelines[0].switches(), (0, 0));
    }

    #[test]
    fn array_sizes() {
        // 100 × 1 channel × 4 bytes = 400 → 512 per row, × 10 rows = 5120 → 64 KiB.
        assert_eq!(array_bytes(100, 10, 0, CU_AD_FORMAT_FLOAT, 1), Ok(64 << 10));
        assert_eq!(
            array_bytes(1024, 1024, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4),
            Ok(4096 * 1024)
        );
        assert_eq!(
            array_bytes(10, 0, 0, 0x77, 1),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            array_bytes(10, 0, 0, CU_AD_FORMAT_FLOAT, 3),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        // Levels 1024² (4 MiB), 512² (1 MiB), 256² (256 KiB).
        assert_eq!(
            mipmap_bytes(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 3),
            Ok((4 << 20) + (1 << 20) + (256 << 10))
        );
    }

    #[test]
    fn contexts_and_plain_memory() {
        let mut m = model(2, 1 << 30);
        assert_eq!(
            m.mem_alloc(None, 10, false),
            Err(CUDA_ERROR_INVALID_CONTEXT)
        );
        let c = m.ctx_create(1).unwrap();
        assert_eq!(m.device_used(1), 303 * MIB);
        let a = m.mem_alloc(Some(c), 1000, false).unwrap();
        assert_eq!(a % 256, 0);
        assert_eq!(m.device_used(1), 303 * MIB + 1000);
        assert_eq!(m.address_range(a + 10), Ok((a, 1000)));
        assert_eq!(
            m.mem_alloc(Some(c), 0, false),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            m.mem_alloc(Some(c), 1 << 30, false),
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert_eq!(m.device_used(1), 303 * MIB + 1000);
        let low = m.mem_alloc(Some(c), 4096, true).unwrap();
        assert!(low < 1 << 32);
        let low2 = m.mem_alloc(Some(c), 4096, true).unwrap();
        assert!(low2 >= low + 4096);
        m.mem_free(a).unwrap();
        assert_eq!(m.mem_free(a), Err(CUDA_ERROR_INVALID_VALUE));
        m.ctx_destroy(c).unwrap();
        assert_eq!(m.device_used(1), 0);
        assert_eq!(m.process_used(1), 0);
    }

    #[test]
    fn primary_context() {
        let mut m = model(1, 1 << 30);
        let p1 = m.primary_retain(0).unwrap();
        let p2 = m.primary_retain(0).unwrap();
        assert_eq!(p1, p2);
        assert_eq!(m.device_used(0), 303 * MIB);
        m.mem_alloc(Some(p1), MIB, false).unwrap();
        m.primary_release(0).unwrap();
        assert_eq!(m.device_used(0), 303 * MIB + MIB);
        m.primary_release(0).unwrap();
        assert_eq!(m.device_used(0), 0);
        assert_eq!(m.primary_release(0), Err(CUDA_ERROR_INVALID_CONTEXT));
        assert_eq!(m.primary_retain(0), Ok(p1));
    }

    #[test]
    fn pools() {
        let mut m = model(1, 1 << 30);
        let c = m.ctx_create(0).unwrap();
        let base = m.device_used(0);
        let pool = m.current_pool(0).unwrap();
        let a = m.alloc_async(Some(c), 3 * MIB, None, 0).unwrap();
        assert_eq!(m.device_used(0) - base, 4 * MIB);
        let b = m.alloc_async(Some(c), MIB, None, 0).unwrap();
        assert_eq!(m.device_used(0) - base, 4 * MIB);
        m.free_async(Some(c), a, 0).unwrap();
        assert_eq!(m.pool(pool).unwrap().used, MIB);
        assert_eq!(m.device_used(0) - base, 4 * MIB);
        m.stream_sync(Some(c), 0).unwrap();
        assert_eq!(m.device_used(0) - base, 2 * MIB);
        m.pool_set_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 64 * MIB)
            .unwrap();
        let d = m.alloc_async(Some(c), 10 * MIB, None, 0).unwrap();
        m.mem_free(d).unwrap();
        m.ctx_sync(Some(c)).unwrap();
        assert_eq!(m.pool(pool).unwrap().reserved, 12 * MIB);
        m.pool_trim_to(pool, 0).unwrap();
        assert_eq!(m.pool(pool).unwrap().reserved, 2 * MIB);
        assert_eq!(
            m.pool_get_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH),
            Ok(11 * MIB)
        );
        m.mem_free(b).unwrap();
        m.pool_trim_to(pool, 0).unwrap();
        assert_eq!(m.device_used(0), base);
        // Out of memory changes nothing.
        assert_eq!(
            m.alloc_async(Some(c), 1 << 30, None, 0),
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert_eq!(m.pool(pool).unwrap().reserved, 0);
        // A created pool, destroyed with an allocation outstanding.
        let p2 = m
            .pool_create(CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: 0,
            })
            .unwrap();
        let e = m.alloc_async(Some(c), MIB, Some(p2), 0).unwrap();
        m.alloc_async(Some(c), MIB, Some(p2), 0).unwrap();
        m.pool_destroy(p2).unwrap();
        assert_eq!(m.device_used(0) - base, 2 * MIB);
        m.mem_free(e).unwrap();
        assert_eq!(m.device_used(0) - base, 2 * MIB);
        assert_eq!(
            m.pool_destroy(m.default_pool(0).unwrap()),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
    }

    #[test]
    fn vmm() {
        let mut m = model(1, 1 << 30);
        let loc = CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        };
        assert_eq!(m.vmm_create(MIB, loc), Err(CUDA_ERROR_INVALID_VALUE));
        let h = m.vmm_create(4 * MIB, loc).unwrap();
        assert_eq!(m.device_used(0), 4 * MIB);
        let va = m.vmm_reserve(8 * MIB, 0).unwrap();
        m.vmm_map(va, 4 * MIB, 0, h).unwrap();
        assert_eq!(m.vmm_map(va, 2 * MIB, 0, h), Err(CUDA_ERROR_INVALID_VALUE));
        m.vmm_map(va + 4 * MIB, 2 * MIB, 2 * MIB, h).unwrap();
        m.vmm_release(h).unwrap();
        assert_eq!(m.device_used(0), 4 * MIB);
        m.vmm_unmap(va, 4 * MIB).unwrap();
        assert_eq!(m.device_used(0), 4 * MIB);
        m.vmm_address_free(va, 8 * MIB).unwrap();
        assert_eq!(m.device_used(0), 0);
    }

    #[test]
    fn graphs() {
        let mut m = model(1, 1 << 30);
        let c = m.ctx_create(0).unwrap();
        let base = m.device_used(0);
        let loc = CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        };
        let g = m.graph_create();
        let (n1, p1) = m.graph_add_alloc(g, &[], loc, 3 * MIB).unwrap();
        let (_, p2) = m.graph_add_alloc(g, &[n1], loc, MIB).unwrap();
        m.graph_add_free(g, &[n1], p1).unwrap();
        let e = m.graph_instantiate(g).unwrap();
        m.graph_launch(Some(c), e, 0).unwrap();
        assert_eq!(m.device_used(0) - base, 4 * MIB);
        let gp = m.graph_pool(0).unwrap();
        assert_eq!(
            (gp.used, gp.reserved, gp.used_high),
            (MIB, 4 * MIB, 4 * MIB)
        );
        // p2 is still outstanding: relaunching fails.
        assert_eq!(m.graph_launch(Some(c), e, 0), Err(CUDA_ERROR_INVALID_VALUE));
        m.free_async(Some(c), p2, 0).unwrap();
        m.graph_launch(Some(c), e, 0).unwrap();
        assert_eq!(m.device_used(0) - base, 4 * MIB);
        m.mem_free(p2).unwrap();
        m.graph_mem_trim(0).unwrap();
        assert_eq!(m.device_used(0), base);
        // OOM: nothing happens.
        let g2 = m.graph_create();
        m.graph_add_alloc(g2, &[], loc, 1 << 30).unwrap();
        let e2 = m.graph_instantiate(g2).unwrap();
        assert_eq!(
            m.graph_launch(Some(c), e2, 0),
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        );
        assert_eq!(m.graph_pool(0).unwrap().reserved, 0);
    }

    #[test]
    fn kernel_names() {
        assert_eq!(spin_us(b"spin_50us"), Some(50));
        assert_eq!(spin_us(b"spin_0us"), Some(0));
        assert_eq!(spin_us(b"spin_us"), None);
        assert_eq!(spin_us(b"spin_5ms"), None);
        assert_eq!(spin_us(b"spin_-5us"), None);
        assert_eq!(spin_us(b"kern"), None);
    }

    #[test]
    fn timeline_streams() {
        const MS: u64 = 1_000_000;
        let mut m = model(1, 1 << 30);
        let c = m.ctx_create(0).unwrap();
        let md = m.module_load(Some(c)).unwrap();
        let f = m.module_function(md, b"spin_100000us").unwrap();
        let g = m.module_function(md, b"other").unwrap();
        assert_eq!(m.kernel_ns(f, [1, 1, 1]), 100 * MS);
        assert_eq!(m.kernel_ns(f, [133, 1, 1]), 200 * MS);
        assert_eq!(m.kernel_ns(g, [2, 2, 33]), 10_000);
        let blocking = m.stream_create(Some(c), 0, 0).unwrap();
        let nb = m.stream_create(Some(c), CU_STREAM_NON_BLOCKING, 0).unwrap();
        let t0 = now_ns();
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], blocking)
            .unwrap();
        let end1 = m.stream_end(Some(c), blocking).unwrap();
        assert!(end1 >= t0 + 100 * MS);
        // The legacy stream waits for the blocking stream, not the non-blocking one.
        assert_eq!(m.stream_end(Some(c), 0), Ok(end1));
        assert!(m.stream_end(Some(c), nb).unwrap() < end1);
        // Another stream queues behind on the device.
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], nb).unwrap();
        assert_eq!(m.stream_end(Some(c), nb), Ok(end1 + 100 * MS));
        assert_eq!(m.stream_query(Some(c), nb), Err(CUDA_ERROR_NOT_READY));
        // A capturing stream queues nothing.
        m.capture_begin(Some(c), blocking).unwrap();
        m.launch(Some(c), f, [1, 1, 1], [1, 1, 1], blocking)
            .unwrap();
        assert_eq!(m.kernels_launched(0), 2);
        let graph = m.capture_end(Some(c), blocking).unwrap();
        assert_eq!(m.graphs[&graph].nodes.len(), 1);
        // A context sync during a capture fails and invalidates it; after it, syncs work.
        assert_eq!(m.ctx_sync_begin(Some(c)), Ok(()));
        m.capture_begin(Some(c), blocking).unwrap();
        assert_eq!(
            m.ctx_sync_begin(Some(c)),
            Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        );
        assert_eq!(
            m.capture_end(Some(c), blocking),
            Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        );
        assert_eq!(m.ctx_sync_begin(Some(c)), Ok(()));
        m.capture_begin(Some(c), blocking).unwrap();
        assert!(
            m.capture_end(Some(c), blocking).is_ok(),
            "a new capture starts clean"
        );
        // Destroyed streams still count for the context.
        m.stream_destroy(nb).unwrap();
        assert_eq!(m.ctx_end(Some(c)), Ok(end1 + 100 * MS));
        assert!(m.process_kernel_ns(0) < 100 * MS);
    }

    #[test]
    fn arrays_and_teardown() {
        let mut m = model(1, 1 << 30);
        let c = m.ctx_create(0).unwrap();
        let base = m.device_used(0);
        let a = m
            .array_create(Some(c), 100, 10, 0, CU_AD_FORMAT_FLOAT, 1, None)
            .unwrap();
        assert_eq!(m.array_requirements(a, false, 0), Ok(64 << 10));
        assert_eq!(m.device_used(0) - base, 64 << 10);
        assert_eq!(m.array_destroy(a, true), Err(CUDA_ERROR_INVALID_HANDLE));
        m.array_create(Some(c), 100, 10, 0, CU_AD_FORMAT_FLOAT, 1, Some(2))
            .unwrap();
        m.ctx_destroy(c).unwrap();
        assert_eq!(m.device_used(0), 0);
    }
}
