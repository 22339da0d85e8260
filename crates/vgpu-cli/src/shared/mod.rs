//! What several subcommands use. No module here imports a subcommand module (`run`, `limit`,
//! `status`, `top`, `metrics`, `doctor`), and they import each other in one direction only:
//!
//! * [`output`]: stdout that survives a closed pipe, text tables, number and time formats;
//! * [`limits`]: the memory and SM limit values every command's flags accept;
//! * [`libpath`]: where libvgpu.so is and the `LD_PRELOAD` value naming it (`run`, `doctor`);
//! * [`locate`]: where a region is (the default region, `vgpu run`'s, a path's sharing);
//! * [`regions`] (uses `locate`): the regions a monitor command watches and whose they are;
//! * [`report`] (uses `output`, `regions`): a snapshot as text tables and as `--json`, and the
//!   GPU shares between two snapshots (`status`, `top`, `metrics`).

pub mod libpath;
pub mod limits;
pub mod locate;
pub mod output;
pub mod regions;
pub mod report;
