//! A simulated CUDA driver (`libcuda.so.1`) for vgpu's tests: fake devices, contexts and
//! device memory with exact accounting, exported with the real `cuda.h` ABI.
//!
//! See [`config`] for the environment variables, [`state`] for the model, [`timeline`] for
//! the kernel timeline, [`slicer`] for time-slicing between processes, [`shared`] for the cross-process state file and [`introspect`] for
//! the `vgpuSim*` test hooks.
#![allow(non_snake_case)]

pub mod api_device;
pub mod api_graph;
pub mod api_memory;
pub mod config;
pub mod introspect;
pub mod procaddr;
pub mod shared;
pub mod sim;
pub mod slicer;
pub mod state;
pub mod timeline;
