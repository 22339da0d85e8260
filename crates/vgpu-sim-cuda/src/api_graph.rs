//! Entry points: graphs and graph memory, modules, kernel launches.
use core::ffi::{c_char, c_uint, c_void};

use vgpu_sys::cuda::*;

use crate::cu;
use crate::sim::{self, current, get, h, nonnull, ptr, put, with};
use crate::state::R;
use crate::state::graphs::NodeKind;
use crate::timeline::spin_for;

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
    fn cuGraphAddChildGraphNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        child: CUgraph,
    ) {
        nonnull(node)?;
        // SAFETY: `deps` holds `n` nodes per cuda.h.
        let d = unsafe { deps_of(deps, n) }?;
        let nd = with(|m| m.graph_add_child(h(graph), &d, h(child)))?;
        // SAFETY: `node` is the caller's non-null out-pointer.
        unsafe { put(node, ptr(nd)) }
    }
}

cu! {
    fn cuGraphConditionalHandleCreate(
        handle: *mut CUgraphConditionalHandle,
        graph: CUgraph,
        _ctx: CUcontext,
        _default: c_uint,
        _flags: c_uint,
    ) {
        nonnull(handle)?;
        // The model keeps no condition values: a handle is only a number.
        let made = with(|m| m.graph_conditional_handle(h(graph)))?;
        // SAFETY: `handle` is the caller's non-null out-pointer.
        unsafe { put(handle, made) }
    }
}

cu! {
    fn cuGraphAddNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *mut CUgraphNodeParams,
    ) {
        nonnull(node)?;
        // SAFETY: `params` is the caller's in/out struct (null is rejected by `get`).
        let p = unsafe { get(params.cast_const()) }?;
        // SAFETY: `deps` holds `n` nodes per cuda.h.
        let d = unsafe { deps_of(deps, n) }?;
        let union = p.params.as_ptr();
        let nd = match p.type_ {
            CU_GRAPH_NODE_TYPE_GRAPH => {
                // SAFETY: the union's child-graph member, the one `type_` names: plain data
                // within the 232 bytes read above.
                let c = unsafe { union.cast::<CUDA_CHILD_GRAPH_NODE_PARAMS>().read_unaligned() };
                with(|m| m.graph_add_child_owned(h(graph), &d, h(c.graph), c.ownership))?
            }
            CU_GRAPH_NODE_TYPE_CONDITIONAL => {
                // SAFETY: the union's conditional member, as above.
                let c = unsafe { union.cast::<CUDA_CONDITIONAL_NODE_PARAMS>().read_unaligned() };
                let (nd, bodies) =
                    with(|m| m.graph_add_conditional(h(graph), &d, c.type_, c.size))?;
                // The driver hands back its own array of the node's bodies.
                // SAFETY: `params` is the caller's non-null struct; the member's field is
                // written in place, unaligned as read.
                unsafe {
                    let at = (&raw mut (*params).params)
                        .cast::<CUDA_CONDITIONAL_NODE_PARAMS>()
                        .cast::<u8>()
                        .add(core::mem::offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, phGraph_out))
                        .cast::<*mut CUgraph>();
                    at.write_unaligned(bodies.cast::<CUgraph>());
                }
                nd
            }
            // The model builds other nodes through their own calls only.
            _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
        };
        // SAFETY: `node` is the caller's non-null out-pointer.
        unsafe { put(node, ptr(nd)) }
    }
}

cu! {
    fn cuGraphChildGraphNodeGetGraph(node: CUgraphNode, graph: *mut CUgraph) {
        nonnull(graph)?;
        let g = with(|m| m.graph_child(h(node)))?;
        // SAFETY: `graph` is the caller's non-null out-pointer.
        unsafe { put(graph, ptr(g)) }
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

cu! {
    fn cuGraphGetNodes(graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize) {
        nonnull(count)?;
        let all = with(|m| m.graph_nodes(h(graph)))?;
        if nodes.is_null() {
            // SAFETY: `count` is the caller's non-null out-pointer.
            return unsafe { put(count, all.len()) };
        }
        // SAFETY: `count` is the caller's non-null in/out pointer.
        let room = unsafe { *count };
        for i in 0..room {
            // SAFETY: `nodes` holds `room` entries per cuda.h; past the graph's nodes, NULL.
            unsafe { put(nodes.add(i), all.get(i).map_or(std::ptr::null_mut(), |&n| ptr(n)))? };
        }
        // SAFETY: as above.
        unsafe { put(count, all.len().min(room)) }
    }
}

cu! {
    fn cuGraphNodeGetType(node: CUgraphNode, kind: *mut CUgraphNodeType) {
        nonnull(kind)?;
        let k = match with(|m| m.graph_node(h(node)))? {
            NodeKind::Alloc { .. } => CU_GRAPH_NODE_TYPE_MEM_ALLOC,
            NodeKind::Free { .. } => CU_GRAPH_NODE_TYPE_MEM_FREE,
            NodeKind::Kernel { .. } => CU_GRAPH_NODE_TYPE_KERNEL,
            NodeKind::Child { .. } => CU_GRAPH_NODE_TYPE_GRAPH,
            NodeKind::Conditional { .. } => CU_GRAPH_NODE_TYPE_CONDITIONAL,
        };
        // SAFETY: `kind` is the caller's non-null out-pointer.
        unsafe { put(kind, k) }
    }
}

cu! {
    fn cuGraphMemAllocNodeGetParams(node: CUgraphNode, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS) {
        nonnull(params)?;
        let NodeKind::Alloc { ordinal, size, dptr } = with(|m| m.graph_node(h(node)))? else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        let p = CUDA_MEM_ALLOC_NODE_PARAMS {
            poolProps: CUmemPoolProps {
                allocType: CU_MEM_ALLOCATION_TYPE_PINNED,
                handleTypes: 0,
                location: CUmemLocation {
                    type_: CU_MEM_LOCATION_TYPE_DEVICE,
                    id: i32::try_from(ordinal).map_err(|_| CUDA_ERROR_INVALID_VALUE)?,
                },
                win32SecurityAttributes: std::ptr::null_mut(),
                maxSize: 0,
                usage: 0,
                reserved: [0; 54],
            },
            accessDescs: std::ptr::null(),
            accessDescCount: 0,
            bytesize: usize::try_from(size).map_err(|_| CUDA_ERROR_INVALID_VALUE)?,
            dptr,
        };
        // SAFETY: `params` is the caller's non-null out-pointer.
        unsafe { put(params, p) }
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
    fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_upload(current(), h(exec), h(stream)))
    }
}

cu! {
    fn cuGraphUpload_ptsz(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_upload(current(), h(exec), sim::ptsz(stream)))
    }
}

cu! {
    fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_launch(current(), h(exec), h(stream)))
    }
}

cu! {
    fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) {
        with(|m| m.graph_launch(current(), h(exec), sim::ptsz(stream)))
    }
}

/// Adds a kernel node; `func` null: the `CUkernel` `kern` (the same handle here).
///
/// # Safety
/// `node` null or writable; `deps` null or valid for `n` reads.
#[allow(clippy::too_many_arguments)]
unsafe fn add_kernel_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    func: CUfunction,
    kern: CUkernel,
    grid: [u32; 3],
    block: [u32; 3],
) -> R<()> {
    nonnull(node)?;
    // SAFETY: per this function's contract.
    let d = unsafe { deps_of(deps, n) }?;
    let f = if func.is_null() { h(kern) } else { h(func) };
    let nd = with(|m| m.graph_add_kernel(h(graph), &d, f, grid, block))?;
    // SAFETY: `node` is the caller's non-null out-pointer.
    unsafe { put(node, ptr(nd)) }
}

cu! {
    fn cuGraphAddKernelNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *const CUDA_KERNEL_NODE_PARAMS_v1,
    ) {
        // SAFETY: `params` is the caller's struct (null is rejected by `get`).
        let p = unsafe { get(params) }?;
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe {
            add_kernel_node(
                node,
                graph,
                deps,
                n,
                p.func,
                std::ptr::null_mut(),
                [p.gridDimX, p.gridDimY, p.gridDimZ],
                [p.blockDimX, p.blockDimY, p.blockDimZ],
            )
        }
    }
}

cu! {
    fn cuGraphAddKernelNode_v2(
        node: *mut CUgraphNode,
        graph: CUgraph,
        deps: *const CUgraphNode,
        n: usize,
        params: *const CUDA_KERNEL_NODE_PARAMS_v2,
    ) {
        // SAFETY: `params` is the caller's struct (null is rejected by `get`).
        let p = unsafe { get(params) }?;
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe {
            add_kernel_node(
                node,
                graph,
                deps,
                n,
                p.func,
                p.kern,
                [p.gridDimX, p.gridDimY, p.gridDimZ],
                [p.blockDimX, p.blockDimY, p.blockDimZ],
            )
        }
    }
}

// ----- stream capture ----------------------------------------------------------------------

/// Begins capturing `stream` in `mode`.
fn begin_capture(stream: u64, mode: CUstreamCaptureMode) -> R<()> {
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    with(|m| m.capture_begin(current(), stream, mode))
}

cu! {
    fn cuStreamBeginCapture(stream: CUstream) {
        begin_capture(h(stream), CU_STREAM_CAPTURE_MODE_GLOBAL)
    }
}

cu! {
    fn cuStreamBeginCapture_ptsz(stream: CUstream) {
        begin_capture(sim::ptsz(stream), CU_STREAM_CAPTURE_MODE_GLOBAL)
    }
}

cu! {
    fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode) {
        begin_capture(h(stream), mode)
    }
}

cu! {
    fn cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: CUstreamCaptureMode) {
        begin_capture(sim::ptsz(stream), mode)
    }
}

fn end_capture(stream: u64, graph: *mut CUgraph) -> R<()> {
    nonnull(graph)?;
    let g = with(|m| m.capture_end(current(), stream))?;
    // SAFETY: `graph` is the caller's non-null out-pointer.
    unsafe { put(graph, ptr(g)) }
}

cu! {
    fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) {
        end_capture(h(stream), graph)
    }
}

cu! {
    fn cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut CUgraph) {
        end_capture(sim::ptsz(stream), graph)
    }
}

/// Writes the capture status (and, where asked, id and graph) of `stream`; the dependency
/// set is reported empty.
///
/// # Safety
/// Every pointer null or writable.
unsafe fn capture_info(
    stream: u64,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    num: *mut usize,
) -> R<()> {
    nonnull(status)?;
    let g = with(|m| m.capture_graph(current(), stream))?;
    let st = if g.is_some() {
        CU_STREAM_CAPTURE_STATUS_ACTIVE
    } else {
        CU_STREAM_CAPTURE_STATUS_NONE
    };
    // SAFETY: per this function's contract; null optional outputs are skipped.
    unsafe {
        put(status, st)?;
        if let Some(g) = g {
            if !id.is_null() {
                put(id, g)?;
            }
            if !graph.is_null() {
                put(graph, ptr(g))?;
            }
            if !deps.is_null() {
                put(deps, std::ptr::null())?;
            }
            if !edges.is_null() {
                put(edges, std::ptr::null())?;
            }
            if !num.is_null() {
                put(num, 0)?;
            }
        }
    }
    Ok(())
}

cu! {
    fn cuThreadExchangeStreamCaptureMode(mode: *mut CUstreamCaptureMode) {
        // SAFETY: the caller's in/out pointer, as cuda.h documents it (`get` checks it).
        let want = unsafe { get(mode) }?;
        let was = with(|m| m.exchange_capture_mode(want))?;
        // SAFETY: as above.
        unsafe { put(mode, was) }
    }
}

cu! {
    fn cuStreamIsCapturing(stream: CUstream, status: *mut CUstreamCaptureStatus) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(h(stream), status, null(), null(), null(), null(), null()) }
    }
}

cu! {
    fn cuStreamIsCapturing_ptsz(stream: CUstream, status: *mut CUstreamCaptureStatus) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(sim::ptsz(stream), status, null(), null(), null(), null(), null()) }
    }
}

cu! {
    fn cuStreamGetCaptureInfo(stream: CUstream, status: *mut CUstreamCaptureStatus, id: *mut u64) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(h(stream), status, id, null(), null(), null(), null()) }
    }
}

cu! {
    fn cuStreamGetCaptureInfo_ptsz(
        stream: CUstream,
        status: *mut CUstreamCaptureStatus,
        id: *mut u64,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(sim::ptsz(stream), status, id, null(), null(), null(), null()) }
    }
}

cu! {
    fn cuStreamGetCaptureInfo_v2(
        stream: CUstream,
        status: *mut CUstreamCaptureStatus,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const CUgraphNode,
        num: *mut usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(h(stream), status, id, graph, deps, null(), num) }
    }
}

cu! {
    fn cuStreamGetCaptureInfo_v2_ptsz(
        stream: CUstream,
        status: *mut CUstreamCaptureStatus,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const CUgraphNode,
        num: *mut usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(sim::ptsz(stream), status, id, graph, deps, null(), num) }
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuStreamGetCaptureInfo_v3(
        stream: CUstream,
        status: *mut CUstreamCaptureStatus,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const CUgraphNode,
        edges: *mut *const CUgraphEdgeData,
        num: *mut usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(h(stream), status, id, graph, deps, edges, num) }
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuStreamGetCaptureInfo_v3_ptsz(
        stream: CUstream,
        status: *mut CUstreamCaptureStatus,
        id: *mut u64,
        graph: *mut CUgraph,
        deps: *mut *const CUgraphNode,
        edges: *mut *const CUgraphEdgeData,
        num: *mut usize,
    ) {
        // SAFETY: the caller's pointers, as cuda.h documents them.
        unsafe { capture_info(sim::ptsz(stream), status, id, graph, deps, edges, num) }
    }
}

/// A typed null out-pointer.
fn null<T>() -> *mut T {
    std::ptr::null_mut()
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
    fn cuModuleLoadDataEx(
        module: *mut CUmodule,
        image: *const c_void,
        num_options: c_uint,
        options: *mut CUjit_option,
        values: *mut *mut c_void,
    ) {
        let _ = (options, values, num_options);
        nonnull(module)?;
        nonnull(image)?;
        let md = with(|m| m.module_load(current()))?;
        // SAFETY: `module` is the caller's non-null out-pointer.
        unsafe { put(module, ptr(md)) }
    }
}

cu! {
    fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
        nonnull(module)?;
        nonnull(fname)?;
        let md = with(|m| m.module_load(current()))?;
        // SAFETY: `module` is the caller's non-null out-pointer.
        unsafe { put(module, ptr(md)) }
    }
}

cu! {
    #[allow(clippy::too_many_arguments)]
    fn cuLibraryLoadData(
        library: *mut CUlibrary,
        code: *const c_void,
        jit_options: *mut CUjit_option,
        jit_values: *mut *mut c_void,
        num_jit: c_uint,
        lib_options: *mut CUlibraryOption,
        lib_values: *mut *mut c_void,
        num_lib: c_uint,
    ) {
        let _ = (jit_options, jit_values, num_jit, lib_options, lib_values, num_lib);
        nonnull(library)?;
        nonnull(code)?;
        let l = with(|m| Ok(m.library_load()))?;
        // SAFETY: `library` is the caller's non-null out-pointer.
        unsafe { put(library, ptr(l)) }
    }
}

cu! {
    fn cuLibraryUnload(library: CUlibrary) {
        with(|m| m.module_unload(h(library)))
    }
}

cu! {
    fn cuLibraryGetKernel(kernel: *mut CUkernel, library: CUlibrary, name: *const c_char) {
        nonnull(kernel)?;
        // SAFETY: `name` is null or a NUL-terminated string per cuda.h.
        let name = unsafe { cstr_bytes(name) }.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let f = with(|m| m.module_function(h(library), name))?;
        // SAFETY: `kernel` is the caller's non-null out-pointer.
        unsafe { put(kernel, ptr(f)) }
    }
}

cu! {
    fn cuKernelGetFunction(func: *mut CUfunction, kernel: CUkernel) {
        nonnull(func)?;
        let f = with(|m| m.kernel_function(h(kernel)))?;
        // SAFETY: `func` is the caller's non-null out-pointer.
        unsafe { put(func, ptr(f)) }
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

/// Queues a kernel (after `VGPU_SIM_LAUNCH_NS` of host busy-spin); never waits for the GPU.
fn launch(f: CUfunction, grid: [u32; 3], block: [u32; 3], stream: u64) -> R<()> {
    spin_for(sim::config().launch_ns);
    if sim::config().launch_syncs {
        // As a launch that loads its module: the context's work first (a stream held on a
        // word keeps it waiting until the word is written).
        sim::wait(|m| m.ctx_due(current()))?;
    }
    with(|m| m.launch(current(), h(f), grid, block, stream))
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
        launch(f, [gx, gy, gz], [bx, by, bz], h(stream))
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
        launch(f, [gx, gy, gz], [bx, by, bz], sim::ptsz(stream))
    }
}

/// Validates a `cuLaunchKernelEx` configuration.
///
/// # Safety
/// `config` must be null or valid for reads, its `attrs` valid for `numAttrs` entries.
unsafe fn launch_ex(config: *const CUlaunchConfig, f: CUfunction, ptsz: bool) -> R<()> {
    // SAFETY: per this function's contract.
    let c = unsafe { get(config) }?;
    if c.numAttrs > 0 {
        nonnull(c.attrs)?;
    }
    launch(
        f,
        [c.gridDimX, c.gridDimY, c.gridDimZ],
        [c.blockDimX, c.blockDimY, c.blockDimZ],
        if ptsz {
            sim::ptsz(c.hStream)
        } else {
            h(c.hStream)
        },
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
        unsafe { launch_ex(config, f, false) }
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
        unsafe { launch_ex(config, f, true) }
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
        launch(f, [gx, gy, gz], [bx, by, bz], h(stream))
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
        launch(f, [gx, gy, gz], [bx, by, bz], sim::ptsz(stream))
    }
}
