//! Where the node token files live (`vgpu_region::node` is the token itself): containers on one
//! node take turns on each GPU through `<node dir>/<gpu uuid>.sched`. The directory comes from
//! the plan (`vgpu_policy::plan::Plan::node_dir`).
use std::path::Path;
use vgpu_region::node::NodeToken;

/// Opens the token of the GPU `uuid` for a process of the container tagged `container` (`None`:
/// a container of its own); `None` (with one warning) if it cannot be used, in which case the
/// container keeps its limit without coordinating with other containers.
pub fn open_token(dir: &Path, uuid: &str, container: Option<u32>) -> Option<NodeToken> {
    let path = dir.join(format!("{uuid}.sched"));
    // A node-wide directory shared by every user: world-writable with the sticky bit, set
    // explicitly (not through the umask); a symlink planted at its name is refused.
    let opened = vgpu_region::sys::open_dir_nofollow(dir, 0o1777, true).and_then(|d| {
        let path = vgpu_region::sys::fd_path(&d, &format!("{uuid}.sched"), dir);
        match container {
            Some(tag) => NodeToken::open_for(&path, tag),
            None => NodeToken::open(&path),
        }
    });
    opened
        .inspect_err(|e| {
            crate::log::warn(format_args!(
                "cannot use {} ({e}); this container's compute limit is kept without coordinating with other containers",
                path.display()
            ))
        })
        .ok()
}
