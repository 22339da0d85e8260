//! Raw, `#[repr(C)]` CUDA driver API and NVML types, as the C headers lay them out.
//!
//! This crate declares types and constants only: it links nothing and calls nothing. Result
//! codes are plain integers, never Rust enums, because a driver may return a code this crate
//! does not list and an unknown enum discriminant would be undefined behaviour.
#![no_std]
#![allow(non_camel_case_types, non_snake_case, clippy::upper_case_acronyms)]

pub mod cuda;
pub mod nvml;
