//! Graphs: nodes (memory and kernels), instantiation, launch, and the per-device graph pool.
use vgpu_sys::cuda::*;

use super::{Alloc, AllocKind, GRANULE, Model, R, round_up};

/// A device's graph memory pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct GraphPool {
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
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
    /// A child graph (the node's own copy, a graph of the model): run in place. With CUDA
    /// 13's moved ownership a child may hold memory nodes; the model allows them always.
    Child {
        graph: u64,
    },
    /// A conditional node (`cuGraphAddNode`, `CU_GRAPH_NODE_TYPE_CONDITIONAL`) with one body
    /// graph, which CUDA lets hold no memory nodes. The model keeps no condition values: the
    /// body never runs.
    Conditional {
        body: u64,
    },
}

/// How deep child graphs nest before instantiation refuses (the driver's own limit is not
/// documented).
const CHILD_DEPTH: usize = 8;

/// A graph: its nodes in insertion order.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<(u64, NodeKind)>,
    /// A conditional node's body: no memory nodes may be added to it.
    pub body: bool,
    /// Each conditional node's array of body graphs (the driver's own memory, whose address
    /// `cuGraphAddNode` hands the caller), by node.
    pub bodies: Vec<(u64, Box<[u64]>)>,
}

impl Model {
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
        self.no_body(g)?;
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
        self.no_body(g)?;
        if dptr == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let node = self.handle();
        if let Some(graph) = self.graphs.get_mut(&g) {
            graph.nodes.push((node, NodeKind::Free { dptr }));
        }
        Ok(node)
    }

    /// Refuses a memory node in graph `g` if it is a conditional node's body.
    fn no_body(&self, g: u64) -> R<()> {
        match self.graphs.get(&g) {
            Some(graph) if graph.body => Err(CUDA_ERROR_INVALID_VALUE),
            _ => Ok(()),
        }
    }

    /// `cuGraphAddChildGraphNode`: a node running a copy of `child`.
    pub fn graph_add_child(&mut self, g: u64, deps: &[u64], child: u64) -> R<u64> {
        self.graph_add_child_owned(g, deps, child, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
    }

    /// `cuGraphAddNode` with a child graph: a copy of `child`, or `child` itself when its
    /// ownership moves to the parent (it is then no graph of its own to destroy).
    pub fn graph_add_child_owned(
        &mut self,
        g: u64,
        deps: &[u64],
        child: u64,
        ownership: u32,
    ) -> R<u64> {
        self.graph_check_deps(g, deps)?;
        if child == g || !self.graphs.contains_key(&child) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let graph = match ownership {
            CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE => {
                let copy = self.graphs.get(&child).cloned().unwrap_or_default();
                let graph = self.handle();
                self.graphs.insert(graph, copy);
                graph
            }
            CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE => child,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        let node = self.handle();
        if let Some(parent) = self.graphs.get_mut(&g) {
            parent.nodes.push((node, NodeKind::Child { graph }));
        }
        Ok(node)
    }

    /// `cuGraphConditionalHandleCreate`: a handle for graph `g`'s conditional nodes.
    pub fn graph_conditional_handle(&mut self, g: u64) -> R<u64> {
        self.graph_check_deps(g, &[])?;
        Ok(self.handle())
    }

    /// `cuGraphAddNode` with a conditional node of `kind` and `size` bodies (the model has one
    /// body: `IF` and `WHILE` with `size` 1): returns the node and the address of its array of
    /// body graphs, which stays valid as long as the parent graph.
    pub fn graph_add_conditional(
        &mut self,
        g: u64,
        deps: &[u64],
        kind: u32,
        size: u32,
    ) -> R<(u64, *mut u64)> {
        self.graph_check_deps(g, deps)?;
        if !matches!(kind, CU_GRAPH_COND_TYPE_IF | CU_GRAPH_COND_TYPE_WHILE) || size != 1 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let body = self.handle();
        self.graphs.insert(
            body,
            Graph {
                body: true,
                ..Graph::default()
            },
        );
        let node = self.handle();
        let parent = self.graphs.get_mut(&g).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        parent.nodes.push((node, NodeKind::Conditional { body }));
        let mut array: Box<[u64]> = Box::new([body]);
        let at = array.as_mut_ptr();
        parent.bodies.push((node, array));
        Ok((node, at))
    }

    /// `cuGraphChildGraphNodeGetGraph`: the child node's graph.
    pub fn graph_child(&self, n: u64) -> R<u64> {
        match self.graph_node(n)? {
            NodeKind::Child { graph } => Ok(graph),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// Graph `g`'s nodes with its child graphs' in their place, into `out`.
    fn flatten(&self, g: u64, depth: usize, out: &mut Vec<NodeKind>) -> R<()> {
        if depth > CHILD_DEPTH {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let graph = self.graphs.get(&g).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        for (_, k) in &graph.nodes {
            match *k {
                NodeKind::Child { graph } => self.flatten(graph, depth + 1, out)?,
                NodeKind::Conditional { .. } => {}
                k => out.push(k),
            }
        }
        Ok(())
    }

    /// `cuGraphGetNodes`: the graph's nodes, in insertion order.
    pub fn graph_nodes(&self, g: u64) -> R<Vec<u64>> {
        let graph = self.graphs.get(&g).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        Ok(graph.nodes.iter().map(|(n, _)| *n).collect())
    }

    /// What node `n` (of any graph) does (`cuGraphNodeGetType`, `cu*NodeGetParams`).
    pub fn graph_node(&self, n: u64) -> R<NodeKind> {
        self.graphs
            .values()
            .flat_map(|g| g.nodes.iter())
            .find(|(h, _)| *h == n)
            .map(|(_, k)| *k)
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// `cuGraphInstantiate*`: an executable snapshot of the graph.
    pub fn graph_instantiate(&mut self, g: u64) -> R<u64> {
        let mut nodes = Vec::new();
        self.flatten(g, 0, &mut nodes)?;
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

    /// What `nodes` allocate on each device; each device's graph pool grows (in 2 MiB steps,
    /// all devices or none) until that fits in what it reserves and does not use.
    fn graph_reserve(&mut self, nodes: &[NodeKind]) -> R<Vec<u64>> {
        let n = self.device_count();
        let mut need = vec![0u64; n];
        for k in nodes {
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
        for (o, &bytes) in grow.iter().enumerate() {
            let g = &mut self.graph_pools[o];
            g.reserved += bytes;
            g.reserved_high = g.reserved_high.max(g.reserved);
        }
        Ok(need)
    }

    /// `cuGraphUpload`: the graph pools grow to hold what the graph's alloc nodes allocate
    /// (nothing is allocated, nothing runs).
    pub fn graph_upload(&mut self, ctx: Option<u64>, exec: u64, stream: u64) -> R<()> {
        let nodes = self
            .execs
            .get(&exec)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?
            .clone();
        let (key, _) = self.skey(ctx, stream)?;
        self.end_wait(key);
        self.graph_reserve(&nodes).map(|_| ())
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
        self.end_wait(key);
        let need = self.graph_reserve(&nodes)?;
        for (o, &bytes) in need.iter().enumerate() {
            let g = &mut self.graph_pools[o];
            g.used += bytes;
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
        self.run_kernels(key, so, &durs)
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
}
