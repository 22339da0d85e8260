//! Contexts: created and primary, their charge and their teardown.
use vgpu_sys::cuda::*;

use super::{Alloc, AllocKind, ArrayObj, Model, R, SKey, Tail};

/// A context.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub ordinal: usize,
    pub primary: bool,
    /// Retain count of a primary context (unused otherwise).
    pub refcount: u32,
    /// Whether the context exists (charged); a released primary context keeps its handle.
    pub active: bool,
    /// When the context's destroyed streams' work completes (it still runs).
    pub retired: Tail,
}

impl Model {
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
                retired: Tail::default(),
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

    /// Frees everything owned by context `h` (not the context reservation itself): its
    /// memory, arrays, streams, events, modules and pinned host memory (unmapped: a later
    /// access faults, as on the real driver). The handles of its objects are remembered as
    /// dead ([`Model::live`]).
    fn ctx_teardown(&mut self, h: u64) {
        let streams: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.ctx == h)
            .map(|(&k, _)| k)
            .collect();
        let events: Vec<u64> = self
            .events
            .iter()
            .filter(|(_, e)| e.ctx == Some(h))
            .map(|(&k, _)| k)
            .collect();
        let modules: Vec<u64> = self
            .module_ctx
            .iter()
            .filter(|&(_, &c)| c == h)
            .map(|(&m, _)| m)
            .collect();
        for m in modules {
            let functions: Vec<u64> = self
                .function_module
                .iter()
                .filter(|&(_, &fm)| fm == m)
                .map(|(&f, _)| f)
                .collect();
            self.dead.extend(functions);
            let _ = self.module_unload(m);
            self.dead.insert(m);
        }
        for e in &events {
            self.events.remove(e);
        }
        self.dead.extend(streams);
        self.dead.extend(events);
        self.host.retain(|_, m| m.ctx != Some(h));
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
        // Waits of its streams go with them (a stream held on a word of its own context:
        // the work kept aside behind it is dropped, as the driver drops a destroyed stream's).
        let gone: Vec<SKey> = self
            .waits
            .keys()
            .copied()
            .filter(|k| match *k {
                SKey::Legacy(c) | SKey::PerThread(c, _) => c == h,
                SKey::Explicit(s) => !self.streams.contains_key(&s),
            })
            .collect();
        for k in gone {
            self.waits.remove(&k);
        }
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
                        retired: Tail::default(),
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
}
