//! Where the node token files live (`vgpu_region::node` is the token itself): containers on one
//! node take turns on each GPU through `<node dir>/<gpu uuid>.sched`.
use std::path::PathBuf;
use vgpu_region::node::NodeToken;

/// The directory of the node files: `$VGPU_NODE_DIR`, else HAMi's node-wide `/tmp/vgpulock`
/// when it exists, else `/tmp/vgpu-node`.
pub fn node_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VGPU_NODE_DIR") {
        return PathBuf::from(d);
    }
    let hami = PathBuf::from("/tmp/vgpulock");
    if hami.is_dir() {
        return hami;
    }
    PathBuf::from("/tmp/vgpu-node")
}

/// Opens the token of the GPU `uuid`; `None` (with one warning) if it cannot be used, in which
/// case the container keeps its limit without coordinating with other containers.
pub fn open_token(uuid: &str) -> Option<NodeToken> {
    let dir = node_dir();
    if !dir.is_dir() {
        // A node-wide directory shared by every user: world-writable with the sticky bit.
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new().mode(0o1777).create(&dir);
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
