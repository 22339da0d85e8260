//! Modules, functions and kernel launches: kernel durations, the launch onto the device
//! timeline, and this process's kernel accounting.
use vgpu_sys::cuda::*;

use super::{Model, R, SKey};
use crate::config::SM_COUNT;
use crate::timeline::now_ns;

impl Model {
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
    pub(super) fn check_kernel(&self, f: u64, grid: [u32; 3], block: [u32; 3]) -> R<()> {
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

    /// Device time of launching `f` over `grid`: its per-wave time × ⌈blocks / 132⌉.
    pub(super) fn kernel_ns(&self, f: u64, grid: [u32; 3]) -> u64 {
        let blocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let wave = self.function_wave.get(&f).copied().unwrap_or(0);
        blocks.div_ceil(SM_COUNT).saturating_mul(wave)
    }

    /// Runs kernels of `durs` ns one after another on stream `k` of ordinal `o`.
    pub(super) fn run_kernels(&mut self, k: SKey, o: usize, durs: &[u64]) {
        if durs.is_empty() {
            return;
        }
        let earliest = now_ns().saturating_add(self.cfg.launch_latency_ns);
        self.launched[self.phys_of(o)] += durs.len() as u64;
        self.run_work(k, o, earliest, durs);
    }

    /// Runs GPU work of `durs` ns (kernels, or a timing event's cost) one after another on
    /// stream `k` of ordinal `o`, none starting before `earliest` or the stream's tail.
    /// Returns when the last piece completes.
    pub(super) fn run_work(&mut self, k: SKey, o: usize, earliest: u64, durs: &[u64]) -> u64 {
        let p = self.phys_of(o);
        let mut t = earliest.max(self.tail(k));
        // This process, for the context-switch cost (the pid at launch time, so that a forked
        // child is another context, as on the driver).
        let owner = std::process::id();
        for &d in durs {
            let (start, end) = self.timelines[p].schedule_as(owner, self.cfg.switch_ns, t, d);
            if end > start {
                self.proc_runs[p].push_back((start, end));
            }
            t = end;
        }
        if let Some(tl) = self.tl_mut(k) {
            tl.last_end = tl.last_end.max(t);
        }
        t
    }

    /// GPU ns this process's work (kernels and timing events) executed on physical GPU `p` by
    /// now (partly run kernels count partly).
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
}

/// N of a kernel named `spin_<N>us`.
pub fn spin_us(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"spin_")?.strip_suffix(b"us")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(digits).ok()?.parse().ok()
}
