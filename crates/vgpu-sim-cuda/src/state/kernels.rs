//! Modules, functions and kernel launches: kernel durations, the launch onto the device
//! timeline, and this process's kernel accounting.
use vgpu_sys::cuda::*;

use super::{Model, R, SKey, Tail};
use crate::config::{MAX_DEVICES, SM_COUNT};
use crate::slicer::{EVENT, KERNEL};
use crate::timeline::now_ns;

impl Model {
    /// `cuModuleLoad*`.
    pub fn module_load(&mut self, ctx: Option<u64>) -> R<u64> {
        self.ctx_ordinal(ctx)?;
        let m = self.library_load();
        if let Some(c) = ctx {
            self.module_ctx.insert(m, c);
        }
        Ok(m)
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
        self.live(h, "module");
        self.module_ctx.remove(&h);
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
        self.live(m, "module");
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
    pub(super) fn check_kernel(&self, f: u64, grid: [u32; 3], block: [u32; 3]) -> R<()> {
        self.live(f, "function");
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
        if self.defer(k, super::waits::Deferred::Kernel(f, grid, block)) {
            return Ok(());
        }
        let dur = self.kernel_ns(f, grid);
        self.run_kernels(k, o, &[dur])
    }

    /// Device time of launching `f` over `grid`: its per-wave time × ⌈blocks / 132⌉.
    pub(super) fn kernel_ns(&self, f: u64, grid: [u32; 3]) -> u64 {
        let blocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let wave = self.function_wave.get(&f).copied().unwrap_or(0);
        blocks.div_ceil(SM_COUNT).saturating_mul(wave)
    }

    /// Runs kernels of `durs` ns one after another on stream `k` of ordinal `o`.
    pub(super) fn run_kernels(&mut self, k: SKey, o: usize, durs: &[u64]) -> R<()> {
        if durs.is_empty() {
            return Ok(());
        }
        let (p, now) = (self.phys_of(o), self.op_now());
        if self.slicing.is_none() {
            // (Time-slicing notes each kernel's launch when it is queued.)
            self.kernel_launches[p].extend(durs.iter().map(|_| now));
        }
        let latency = if self.replay_at.is_some() {
            0
        } else {
            self.cfg.launch_latency_ns
        };
        // Queued right behind a timing event (it completes after the kernel could start), the
        // first kernel waits for the event to be written: GPU time nobody's kernel uses.
        let event_at = self.tl_mut(k).and_then(|tl| tl.after_event.take());
        if self.cfg.restart_ns > 0 && event_at.is_some_and(|t| t >= now.saturating_add(latency)) {
            self.run_work(k, o, now, latency, &[self.cfg.restart_ns], EVENT)?;
        }
        self.run_work(k, o, now, latency, durs, KERNEL)?;
        self.launched[p] += durs.len() as u64;
        Ok(())
    }

    /// Runs GPU work of `durs` ns and `kind` ([`KERNEL`]s, or a timing event's cost), asked
    /// for at host instant `at`, one after another on stream `k` of ordinal `o`, none starting
    /// before `at + latency` or the stream's tail. Returns when the last piece completes.
    pub(super) fn run_work(
        &mut self,
        k: SKey,
        o: usize,
        at: u64,
        latency: u64,
        durs: &[u64],
        kind: u64,
    ) -> R<Tail> {
        let p = self.phys_of(o);
        self.ts_tidy();
        let floor = self.tail(k).at;
        let done = if self.slicing.is_some() {
            self.ts_enqueue(p, at, latency, floor, durs, kind)?
        } else {
            self.fifo_schedule(p, at.saturating_add(latency).max(floor), durs, kind)
        };
        if let Some(tl) = self.tl_mut(k) {
            tl.tail = tl.tail.max(done);
        }
        Ok(done)
    }

    /// FIFO mode: schedules the work on the device timeline at once.
    fn fifo_schedule(&mut self, p: usize, earliest: u64, durs: &[u64], kind: u64) -> Tail {
        // This process, for the context-switch cost (the pid at launch time, so that a forked
        // child is another context, as on the driver).
        let owner = std::process::id();
        let mut t = earliest;
        for &d in durs {
            let (start, end) = self.timelines[p].schedule_as(owner, self.cfg.switch_ns, t, d);
            if end > start {
                self.proc_runs[p].push_back((start, end));
            }
            if kind == KERNEL {
                self.log_kernel(p, start, end);
            }
            t = end;
        }
        Tail::at(t)
    }

    /// Remembers start and end of this process's next kernel on physical GPU `p` (the last
    /// [`KERNEL_LOG`] of them).
    pub(super) fn log_kernel(&mut self, p: usize, start: u64, end: u64) {
        let launch = self.kernel_launches[p].pop_front().unwrap_or(start);
        let log = &mut self.kernel_log[p];
        if log.len() >= KERNEL_LOG {
            log.pop_front();
            self.kernel_log_base[p] += 1;
        }
        log.push_back(KernelTimes { launch, start, end });
    }

    /// This process's `i`-th kernel (from 0, in launch order) on physical GPU `p`:
    /// `Some(Some(times))` once it completed, `Some(None)` while it has not, `None` if there is
    /// no such kernel (or it is older than the last [`KERNEL_LOG`]).
    pub fn kernel_times(&mut self, p: usize, i: u64) -> Option<Option<KernelTimes>> {
        if p >= MAX_DEVICES {
            return None;
        }
        if self.slicing.is_some() {
            self.ts_sync(p);
        }
        if i >= self.launched[p] || i < self.kernel_log_base[p] {
            return None;
        }
        let now = now_ns();
        Some(
            self.kernel_log[p]
                .get((i - self.kernel_log_base[p]) as usize)
                .copied()
                .filter(|t| t.end <= now),
        )
    }

    /// GPU ns this process's work (kernels and timing events) executed on physical GPU `p` by
    /// now (partly run kernels count partly).
    pub fn process_kernel_ns(&mut self, p: usize) -> u64 {
        if self.slicing.is_some() {
            return self.ts_busy(p);
        }
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
}

/// Where a kernel was on the timeline (`CLOCK_MONOTONIC` ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelTimes {
    /// When it was launched (before `VGPU_SIM_LAUNCH_LATENCY_NS`).
    pub launch: u64,
    /// When it first ran.
    pub start: u64,
    /// When it completed.
    pub end: u64,
}

/// Kernels whose times [`Model::kernel_times`] remembers, per GPU.
pub const KERNEL_LOG: usize = 4096;

/// N of a kernel named `spin_<N>us`.
pub fn spin_us(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"spin_")?.strip_suffix(b"us")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(digits).ok()?.parse().ok()
}
