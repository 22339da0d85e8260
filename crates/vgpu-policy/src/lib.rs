//! Policy layer of vgpu: everything the preload library decides, in plain safe Rust.
//!
//! * [`size`] parses and formats HAMi-compatible memory sizes.
//! * [`config`] turns the process environment into a [`config::Config`] (stage 1: raw, validated).
//! * [`plan`] resolves it once into the [`plan::Plan`] everything below is handed (stage 2).
//! * [`ledger`] keeps the per-device memory budget (lock-free on the hot path).
//! * [`registry`] remembers which allocation was charged to which device.
//! * [`view`] computes what memory queries report under a limit.
//! * [`limiter`] is the compute limit: one clock-free state machine per process and GPU
//!   (priced GPU work, the container's virtual time, turns and latency between containers);
//!   [`token`] has the node token's order rules.
//! * [`token`] decides who gets a GPU's node token next; [`slots`] is the node file's waiter
//!   slot protocol around it (generic over the atomics, for loom).
//! * [`holdwatch`] is the handshake between a thread that holds a stream for a timing sample
//!   and the watchdog that lifts a hold left standing (generic over the atomics, for loom).
//! * [`denial`] formats the message printed when an allocation is refused.
//! * [`vmm`] follows the driver's references to VMM handles: when their memory is really freed.
//!
//! Nothing here does FFI; the preload crate maps driver calls onto these pieces.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod denial;
pub mod exclusion;
pub mod holdwatch;
pub mod ledger;
pub mod limiter;
pub mod plan;
pub mod registry;
pub mod size;
pub mod slots;
pub mod token;
pub mod view;
pub mod vmm;
