//! Where the node token files live (`vgpu_region::node` is the token itself): containers on one
//! node take turns on each GPU through `<node dir>/<gpu uuid>.sched`. The directory comes from
//! the plan (`vgpu_policy::plan::Plan::node_dir`).
use std::path::Path;
use vgpu_region::node::NodeToken;

/// Opens the token of the GPU `uuid`; `None` (with one warning) if it cannot be used, in which
/// case the container keeps its limit without coordinating with other containers.
pub fn open_token(dir: &Path, uuid: &str) -> Option<NodeToken> {
    if !dir.is_dir() {
        // A node-wide directory shared by every user: world-writable with the sticky bit.
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new().mode(0o1777).create(dir);
    }
    let path = dir.join(format!("{uuid}.sched"));
    NodeToken::open(&path)
        .inspect_err(|e| {
            crate::log::warn(format_args!(
                "cannot use {} ({e}); this container's compute limit is kept without coordinating with other containers",
                path.display()
            ))
        })
        .ok()
}
