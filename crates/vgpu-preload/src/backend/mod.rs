//! The only place that talks to the dynamic loader and holds raw symbol addresses.
//!
//! Everything above this module works with typed function pointers ([`real::RealFn`]) and
//! safe Rust; every `unsafe` operation on loader handles and symbol addresses lives here.
pub mod dl;
pub mod real;
pub mod trampoline;
