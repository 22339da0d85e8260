//! What the region's integration tests share: sizes and a device description.
#![allow(dead_code)] // each test binary uses its own part

use vgpu_region::DeviceInit;

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// A device with memory limit `limit` and no SM limit.
pub fn dev(uuid: &str, limit: Option<u64>) -> DeviceInit {
    DeviceInit {
        uuid: uuid.into(),
        limit,
        sm_limit: None,
    }
}

/// Runs this test binary again, as the test `test` alone, with `var` set to `path` (the test
/// plays a child's role when it finds `var`), and asserts it ended well. The child dies with
/// the test.
pub fn run_child(test: &str, var: &str, path: &std::path::Path) {
    let st = vgpu_tests::dies_with_parent(&mut std::process::Command::new(
        std::env::current_exe().unwrap(),
    ))
    .args(["--exact", test, "--nocapture", "--test-threads=1", "-q"])
    .env(var, path)
    .status()
    .unwrap();
    assert!(st.success(), "{test}: {st:?}");
}
