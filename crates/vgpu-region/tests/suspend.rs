//! `vgpu_region::suspend` in a process of its own (signal actions are process-wide): a handler
//! the program installed first is kept, and the default action is replaced by the answer.
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use vgpu_region::suspend;

static PROGRAMS: AtomicBool = AtomicBool::new(false);

extern "C" fn programs_handler(_: libc::c_int) {
    PROGRAMS.store(true, Ordering::SeqCst);
}

#[test]
fn the_programs_handler_is_kept_and_the_default_action_answered() {
    // SAFETY: installing an async-signal-safe handler (one atomic store) for SIGUSR1.
    let installed = unsafe {
        libc::signal(
            libc::SIGUSR1,
            programs_handler as *const () as libc::sighandler_t,
        )
    };
    assert_ne!(installed, libc::SIG_ERR);
    static WORD: AtomicI32 = AtomicI32::new(suspend::RUNNING);
    suspend::watch(&WORD);
    // SAFETY: raising a signal whose action is a handler, in this thread.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
    assert_eq!(WORD.load(Ordering::SeqCst), suspend::SUSPENDED);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
    assert!(
        PROGRAMS.load(Ordering::SeqCst),
        "the program's handler did not run"
    );
    assert_eq!(
        WORD.load(Ordering::SeqCst),
        suspend::SUSPENDED,
        "ours replaced it"
    );
    // Forgotten: the signal writes nowhere.
    suspend::unwatch(&WORD);
    WORD.store(0, Ordering::SeqCst);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
    assert_eq!(WORD.load(Ordering::SeqCst), 0);
}
