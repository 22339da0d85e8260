//! Entry points: graphs and graph memory, modules, kernel launches.
use core::ffi::{c_char, c_uint, c_void};

use vgpu_sys::cuda::*;

use crate::cu;
use crate::sim::{current, get, h, nonnull, ptr, put, with};
use crate::state::R;

// ----- graphs ------------------------------------------------------------------------------

cu! {
    fn cuGraphCreate(graph: *mut CUgraph, flags: c_uint) {
        nonnull(graph)?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let g = with(|m| Ok(m.graph_create()))?;
        // SAFETY: `graph` is the caller's non-null out-pointer.
        unsafe { put(graph, ptr(g)) }
    }
}

cu! {
    fn cuGraphDestroy(graph: CUgraph) {
        with(|m| m.graph_destroy(h(graph)))
    }
}

/// Reads a dependency array.
///
/// # Safety
/// `deps` must be null or valid for `n` reads.
unsafe fn deps_of(deps: *const CUgraphNode, n: usize) -> R<Vec<u64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    nonnull(deps)?;
    // SAFETY: non-null and valid for `n` elements per the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(deps, n) };
    Ok(s.iter().map(|&d| h(d)).collect())
}

cu! {
    fn cuGraphAddMemAllocNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
    ) {
        nonnull(node)?;
        // SAFETY: `params` is the caller's in/out struct (null is rejected by `get`).
        let p = unsafe { get(params.cast_const()) }?;
        // SAFETY: `deps` holds `n` nodes per cuda.h.
        let d = unsafe { deps_of(deps, n) }?;
        let (nd, dptr) =
            with(|m| m.graph_add_alloc(h(graph), &d, p.poolProps.location, p.bytesize as u64))?;
        // SAFETY: `params` and `node` are the caller's non-null pointers.
        unsafe {
            (*params).dptr = dptr;
            put(node, ptr(nd))
        }
    }
}

cu! {
    fn cuGraphAddMemFreeNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        dptr: CUdeviceptr,
    ) {
        nonnull(node)?;
        // SAFETY: `deps` holds `n` nodes per cuda.h.
        let d = unsafe { deps_of(deps, n) }?;
        let nd = with(|m| m.graph_add_free(h(graph), &d, dptr))?;
        // SAFETY: `node` is the caller's non-null out-pointer.
        unsafe { put(node, ptr(nd)) }
    }
}

fn instantiate(exec: *mut CUgraphExec, graph: CUgraph) -> R<()> {
    nonnull(exec)?;
    let e = with(|m| m.graph_instantiate(h(graph)))?;
    // SAFETY: `exec` is the caller's non-null out-pointer.
    unsafe { put(exec, ptr(e)) }
}

cu! {
    fn cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) {
        let _ = flags;
        instantiate(exec, graph)
    }
}

/// The `_v2`/v1 form: clears the error node and log on success.
///
/// # Safety
/// `err_node` null or writable; `log` null or valid for `len` bytes.
unsafe fn instantiate_logged(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    len: usize,
) -> R<()> {
    instantiate(exec, graph)?;
    // SAFETY: per this function's contract.
    unsafe {
        if !err_node.is_null() {
            put(err_node, std::ptr::null_mut())?;
        }
        if !log.is_null() && len > 0 {
            log.write(0);
        }
    }
    Ok(())
}

cu! {
    fn cuGraphInstantiate(
        exec: *mut CUgraphExec,
        graph: CUgraph,
        err_node: *mut CUgraphNode,
        log: *mut c_char,
        len: usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { instantiate_logged(exec, graph, err_node, log, len) }
    }
}

cu! {
    fn cuGraphInstantiate_v2(
        exec: *mut CUgraphExec,
        graph: CUgraph,
        err_node: *mut CUgraphNode,
        log: *mut c_char,
        len: usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { instantiate_logged(exec, graph, err_node, log, len) }
    }
}

cu! {
    fn cuGraphExecDestroy(exec: CUgraphExec) {
        with(|m| m.graph_exec_destroy(h(exec)))
    }
}

cu! {
    fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_launch(current(), h(exec), h(stream)))
    }
}

cu! {
    fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_launch(current(), h(exec), h(stream)))
    }
}

cu! {
    fn cuDeviceGraphMemTrim(dev: CUdevice) {
        with(|m| m.graph_mem_trim(dev))
    }
}

cu! {
    fn cuDeviceGetGraphMemAttribute(dev: CUdevice, attr: CUgraphMem_attribute, value: *mut c_void) {
        nonnull(value)?;
        let g = with(|m| m.graph_pool(dev))?;
        let v = match attr {
            CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT => g.used,
            CU_GRAPH_MEM_ATTR_USED_MEM_HIGH => g.used_high,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT => g.reserved,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH => g.reserved_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: `value` points to a cuuint64_t per cuda.h.
        unsafe { put(value.cast::<u64>(), v) }
    }
}

cu! {
    fn cuDeviceSetGraphMemAttribute(dev: CUdevice, attr: CUgraphMem_attribute, value: *mut c_void) {
        // SAFETY: `value` points to a cuuint64_t per cuda.h.
        let v = unsafe { get(value.cast::<u64>().cast_const()) }?;
        with(|m| m.graph_mem_reset_high(dev, attr, v))
    }
}

// ----- modules -----------------------------------------------------------------------------

cu! {
    fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
        nonnull(module)?;
        nonnull(image)?;
        let md = with(|m| m.module_load(current()))?;
        // SAFETY: `module` is the caller's non-null out-pointer.
        unsafe { put(module, ptr(md)) }
    }
}

cu! {
    fn cuModuleUnload(module: CUmodule) {
        with(|m| m.module_unload(h(module)))
    }
}

cu! {
    fn cuModuleGetFunction(func: *mut CUfunction, module: CUmodule, name: *const c_char) {
        nonnull(func)?;
        // SAFETY: `name` is null or a NUL-terminated string per cuda.h.
        let name = unsafe { cstr_bytes(name) }.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let f = with(|m| m.module_function(h(module), name))?;
        // SAFETY: `func` is the caller's non-null out-pointer.
        unsafe { put(func, ptr(f)) }
    }
}

// ----- launches ----------------------------------------------------------------------------

fn launch(f: CUfunction, grid: [u32; 3], block: [u32; 3], stream: CUstream) -> R<()> {
    with(|m| m.launch(current(), h(f), grid, block, h(stream)))
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchKernel(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_mem: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let _ = (shared_mem, params, extra);
        launch(f, [gx, gy, gz], [bx, by, bz], stream)
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchKernel_ptsz(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_mem: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let _ = (shared_mem, params, extra);
        launch(f, [gx, gy, gz], [bx, by, bz], stream)
    }
}

/// Validates a `cuLaunchKernelEx` configuration.
///
/// # Safety
/// `config` must be null or valid for reads, its `attrs` valid for `numAttrs` entries.
unsafe fn launch_ex(config: *const CUlaunchConfig, f: CUfunction) -> R<()> {
    // SAFETY: per this function's contract.
    let c = unsafe { get(config) }?;
    if c.numAttrs > 0 {
        nonnull(c.attrs)?;
    }
    launch(
        f,
        [c.gridDimX, c.gridDimY, c.gridDimZ],
        [c.blockDimX, c.blockDimY, c.blockDimZ],
        c.hStream,
    )
}

cu! {
    fn cuLaunchKernelEx(
        config: *const CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let _ = (params, extra);
        // SAFETY: `config` is the caller's struct per cuda.h.
        unsafe { launch_ex(config, f) }
    }
}

cu! {
    fn cuLaunchKernelEx_ptsz(
        config: *const CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let _ = (params, extra);
        // SAFETY: `config` is the caller's struct per cuda.h.
        unsafe { launch_ex(config, f) }
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchCooperativeKernel(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_mem: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
    ) {
        let _ = (shared_mem, params);
        launch(f, [gx, gy, gz], [bx, by, bz], stream)
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchCooperativeKernel_ptsz(
        f: CUfunction,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_mem: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
    ) {
        let _ = (shared_mem, params);
        launch(f, [gx, gy, gz], [bx, by, bz], stream)
    }
}
