//! The container-wide shared region of vgpu.
//!
//! One file, mapped by every vgpu process of a container, holds the per-device limits and what
//! each live process uses. Charges against it are exact across processes, lock-free, and
//! survive any process dying at any instant.
//!
//! # Where
//! [`Location::new`]: the container's shared file if the caller names one (the value of
//! `$CUDA_DEVICE_MEMORY_SHARED_CACHE` as `vgpu_policy::config` read it: HAMi sets it per
//! container; the file is created 0666 whatever the umask, for every user of the container),
//! else `/tmp/vgpu-<uid>/region` (directory 0700 created if missing, file 0600; both must be ours
//! and not writable by others). This crate reads no environment variable.
//!
//! # Layout
//! The first 2,008,953 bytes are HAMi-core's v1 region (magic 19920718, major 1, minor 2,
//! devices, limits, 1024 process slots with `used[dev].{context,data,total}`,
//! `deviceUtil[dev].sm`, `status`, `pid`), kept current as a *published view* for HAMi's and
//! Volcano's node monitors: after each charge or release a process copies its own usage into its
//! HAMi slot; reaping and detaching zero the slot; `procnum` is the highest live slot + 1. vgpu
//! never reads its figures back. One type, `region::hami::HamiMirror`, writes all of it.
//!
//! vgpu's own section follows at the next page ([`layout::VGPU_OFFSET`]): a header (magic,
//! layout version ([`layout::LAYOUT_VERSION`], 2 since the monitor counters), total size,
//! geometry, device count, FNV-1a checksum of those, reap counters), 16 device entries (UUID,
//! limit, SM limit, version word, high-water mark, retired counters) and 1024 process slots
//! (state, pid, start time, command line, per-device `used`, `pending`, `peak`, `denied`,
//! `gpu_ns`, `throttled_ns`, `launches`, and the library the process runs: version, commit,
//! observing, see [`Region::stamp_library`]). Before the section, in the gap after HAMi's
//! prefix, sit the container's identity and the log of the last refused charges
//! ([`layout::RefusalLog`], [`Region::refusals`]). Every map validates size, both magics, the
//! versions, the checksum and the geometry; a bad file is a [`RegionError`] naming the path and
//! the fault, never trusted.
//!
//! Creation is race-free: the creator holds an `flock` on the file while it allocates
//! (`posix_fallocate`, every block: a full filesystem can never SIGBUS a process later; a region
//! that cannot be allocated is an error) and fills it; others wait (up to 10 s) for that lock
//! before validating. A creator that died midway leaves an unflagged file, which the next opener
//! initialises again.
//!
//! HAMi-core's own file (HAMi's magic and major version, 2,008,952..=2,011,136 bytes: the node
//! switched from HAMi-core to vgpu while the container lived) is *adopted* under the same lock:
//! extended in place to [`layout::FILE_SIZE`] (never recreated: HAMi's monitor keeps its
//! mapping), its prefix kept, vgpu's section initialised, so every vgpu process of the container
//! shares one budget. HAMi slots held by HAMi-core processes still running are not claimed, and
//! are cleared once their PID is gone; their memory is not in vgpu's budget. The other way (a
//! HAMi-core process opening vgpu's file): it finds a valid v1 header whose creation lock is free
//! (`owner_pid` 0, a posted process-shared semaphore) and counts vgpu's published usage against
//! its own limit; vgpu does not count the HAMi-core process, and HAMi-core's slot compaction may
//! make the monitor count a vgpu process twice until the HAMi-core processes exit.
//!
//! # The container's identity
//! [`Region::open_or_create_as`] takes the container's Kubernetes identity ([`PodIdentity`]:
//! `POD_NAMESPACE`, `POD_NAME`, `CONTAINER_NAME` as `vgpu_policy::config` read them); the
//! first process of a run records it in [`layout::Identity`] (the last 512 bytes of the gap
//! before vgpu's section: no layout change), and [`Snapshot::identity`] reads it back (values
//! that are not Kubernetes names are left out) for the monitor's `namespace`, `pod` and
//! `container` labels.
//!
//! # Limits: who wins
//! The first process of a run (one that finds no process attached, under the creation lock,
//! after reaping the dead) sets the limits of the devices it sees from its environment, and
//! records them as the devices' **ceilings** (the platform's limits). A later process that sees a
//! new device adds it with its own limits. While any process is attached the **region's limits
//! win** for a device already present; [`Region::open_or_create`] returns the differences as
//! [`Conflict`]s so the caller can print one line each. So a finished run's limits never bind the
//! next run (HAMi-core's users must `rm` the file), and a live `vgpu limit` change holds for the
//! rest of the run. [`Region::set_limit`] / [`Region::set_sm_limit`] change a limit for everybody
//! at once, lowering or restoring it up to the ceiling, never above it
//! ([`ErrorKind::AboveCeiling`]); lowering it below current use revokes nothing but refuses
//! charges until usage falls below it.
//!
//! # Failing closed
//! Every shared mapping is guarded by [`fault`]: a file truncated under it reads as zeroes
//! instead of a SIGBUS, and the region is then [`Region::is_broken`], as it is when
//! [`Region::reap_dead`] finds that the path names another file (renamed, replaced): the ledger
//! then reports a limit of 0 and refuses every charge. Readers on read-only mounts use
//! [`Region::open_read_only`].
//!
//! # Budget protocol
//! See [`protocol`]: the device total is Σ `used` over the slots; a charge publishes `pending`,
//! and commits by a compare-exchange of the device's version word, which names the last committer
//! so that nobody commits before that commit is visible. Exact (16 racing 100 MiB charges under
//! 1 GiB: exactly 10 grants), no lock and no syscall, no livelock.
//!
//! # Accounting for the monitor
//! Per process and device, counters written only by their owner with relaxed atomics (no shared
//! lock, no compare-exchange loop on a shared word):
//! * `peak`: high-water mark of the process's `used`, raised by the ledger at each grant;
//! * `denied`: charges refused, counted by the ledger at each refusal; the refusal itself (what
//!   was asked, use and limit, what the process held, who holds the most, when) goes into the
//!   container's refusal log when the preload reports it ([`RegionLedger::record_refusal`]:
//!   one `fetch_add` and the entry's stores, never on a granted charge);
//! * `gpu_ns`, `throttled_ns`, `launches`: added by the preload's compute limiter through
//!   [`RegionLedger::add_compute`] (from its own measurement, also without a compute limit).
//!
//! Per device, `peak` is the container's high-water mark of Σ used, raised at a grant with one
//! `fetch_max` on a shared word, only when it is passed. When a slot is cleared (reaped or
//! detached) its `gpu_ns`, `throttled_ns`, `denied` and `launches` move into the device's
//! `retired_*` totals, so that [`Snapshot`] totals (live + retired) never go backwards; the move
//! is bracketed by the header's `reaps_begun`/`reaps_done` so that [`Region::snapshot`] rescans
//! rather than count a moving slot twice or not at all. Monitors read with
//! [`Region::open_existing`] + [`Region::snapshot`]: atomics only, no slot, no lock.
//!
//! The SM limit is changed live by [`Region::set_sm_limit`] and read with
//! [`Region::sm_limit_index`] (one relaxed load, for the compute limiter's per-window poll).
//!
//! # Crash safety
//! Each process owns a slot (claimed free → claiming → live) and, for its whole life, an
//! open-file-description lock (`F_OFD_SETLK`) on one byte of the region file at
//! `2^40 + slot` (past the data; no extra file in the directory, which HAMi's monitor requires).
//! The kernel drops it when the process dies, whatever the PID namespace. [`Region::reap_dead`]
//! (the preload calls it every 200–500 ms from a background thread; the ledger also calls it at
//! each refusal) try-locks the byte of every non-free slot: getting it proves the owner is gone;
//! the slot is then cleared (usage released, HAMi slot zeroed) and freed with a new generation
//! (so a stale reaper's compare-exchange cannot hit a reused slot). A reaper that dies midway
//! leaves the slot `reaping` and unlocked, and the next reaper finishes it.
//!
//! # fork and exec
//! OFD locks are shared with a forked child through the inherited descriptor, so the preload
//! calls [`Region::on_fork_child`] from a `pthread_atfork` child handler: the child closes the
//! inherited descriptor and forgets the parent's slot; its first charge reopens the file and
//! takes a slot of its own. Descriptors are `O_CLOEXEC`: exec starts clean.
//!
//! A program that closes every descriptor it did not open (some daemons do) drops its slot
//! lock, and the number may then name another file: each reap pass first checks that the
//! descriptor still names the region file (`st_dev`, `st_ino`); if not, the number is forgotten
//! (never used or closed again), the file reopened and the slot's lock retaken if the slot is
//! still ours. Until then another process may reap it as if dead (its usage is released).
//!
//! # HAMi's monitor
//! HAMi's node monitor writes `recent_kernel` (it decrements it; −1 blocks a lower-priority
//! container while a higher-priority one is active on the GPU, 0 unblocks) and
//! `utilization_switch`. At creation vgpu writes what HAMi-core does (`utilization_switch` 1,
//! `recent_kernel` 2, `priority` 1), and at each attach `last_kernel_time` = now. For the
//! preload: [`Region::mark_launch`] (atomics only; never overrides a block),
//! [`Region::launch_blocked`], [`Region::utilization_switch`], [`Region::note_kernel_time`],
//! [`Region::set_priority`], [`RegionLedger::publish_sm_util`] (with [`sm_util_percent`]),
//! [`RegionLedger::charge_context`] / [`RegionLedger::release_context`] (context memory,
//! published as `contextSize` apart from `data`, counted in the budget), and
//! [`Region::detach`] at exit (the whole HAMi slot zeroed, `status` 0).
//!
//! # API
//! ```no_run
//! use std::sync::Arc;
//! use vgpu_policy::ledger::Ledger;
//! use vgpu_region::{DeviceInit, Location, Region};
//!
//! let devices = [DeviceInit { uuid: "GPU-0".into(), limit: Some(1 << 30), sm_limit: None }];
//! let (region, conflicts) = Region::open_or_create(&Location::new(None), &devices)?;
//! for c in &conflicts {
//!     eprintln!("vgpu: {c}");
//! }
//! let region = Arc::new(region);
//! let ledger = region.ledger(&["GPU-0".to_owned()]);
//! assert!(ledger.try_charge(0, 100 << 20).is_ok());
//! ledger.release(0, 100 << 20);
//! ledger.add_compute(0, 2_000_000, 0, 1); // 2 ms of GPU time, not throttled, one launch
//! let _sm = region.sm_limit_index(0);
//! let _freed = region.reap_dead();
//! let status = region.snapshot();
//! assert_eq!(status.devices[0].gpu_ns, 2_000_000);
//! # Ok::<(), vgpu_region::RegionError>(())
//! ```
//!
//! # Tests
//! `cargo test -p vgpu-region` runs layout, validation, multi-process race, kill-storm and fork
//! tests. The protocol's model check: `RUSTFLAGS="--cfg loom" cargo test -p vgpu-region --release
//! --test loom` (two-thread models with 3 preemptions, three-thread ones with 1; ~2 s).
//! Cost on the development machine (release build, 8 attached processes; the ignored `cost`
//! test in `tests/region.rs`): `try_charge` 55–68 ns, `release` 15–16 ns; a refusal ≈ 3 µs
//! because it first runs a reap pass (syscalls).
//!
//! A process that ends without dropping its [`Region`] (the preload's is static) leaves its slot
//! to be reaped by the next [`Region::reap_dead`] of any other process; calling
//! [`Region::detach`] from an exit handler frees it at once.
//!
//! # Modules
//! * [`layout`]: the file's `#[repr(C)]` layout (HAMi-core's v1 prefix, vgpu's section);
//! * [`protocol`]: the lock-free charge/release protocol, generic for loom;
//! * `region/`: [`Region`], by concern: `file` (location, opening, creation, validation),
//!   `slots` (process slots, reaping, detach, fork), `budget` (limits, device totals, the
//!   protocol's view of a device), `counters` (high-water marks, refusals, compute counters,
//!   [`Snapshot`]), `hami` (`HamiMirror`, the only writer of HAMi's prefix);
//! * [`RegionLedger`]: the preload's `Ledger` over a region;
//! * [`node`]: the node-wide compute token of a GPU;
//! * [`fault`]: the SIGBUS guard of every shared mapping (a truncated file reads as zeroes);
//! * [`suspend`]: HAMi-core's suspend and resume signals (SIGUSR2, SIGUSR1), answered in the
//!   process's HAMi slot instead of ending it;
//! * [`sys`]: the system calls (locks, clocks, futexes, descriptor identity, allocation, signal
//!   actions), for this crate and the preload; `raw`: the one `unsafe` view of a shared
//!   mapping.

mod error;
pub mod fault;
pub mod layout;
mod ledger;
pub mod node;
pub mod protocol;
mod raw;
mod region;
pub mod suspend;
pub mod sys;

pub use error::{ErrorKind, RegionError};
pub use ledger::RegionLedger;
pub use region::{
    Conflict, DeviceInit, DeviceStatus, LimitKind, Location, PodIdentity, ProcessStatus,
    RefusalStatus, Region, SHARED_CACHE_ENV, Sharing, Snapshot, sm_util_percent,
};
