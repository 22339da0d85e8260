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
