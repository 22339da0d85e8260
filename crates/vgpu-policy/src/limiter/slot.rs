//! What a process publishes in its node slot ([`SlotState`], one word) and what it reads of
//! its peers' ([`Peer`]).

/// What a process publishes in its node slot, and reads of its peers'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotState {
    /// It wants the node token, with this key (its container's virtual time).
    pub want: Option<u64>,
    /// It is heavy (held back lately by its share or its queue).
    pub heavy: bool,
    /// A thread of it waits in a synchronisation (for a light process: it needs its queued
    /// work done now).
    pub syncing: bool,
    /// It launched lately ([`super::ACTIVE`]).
    pub active: bool,
    /// Its priority is high.
    pub high: bool,
    /// It times a kernel and asks the others to keep off the GPU meanwhile (its kernels'
    /// prices were only ever measured beside another process's work).
    pub exclusive: bool,
    /// It admitted launches since its previous look and has not drained them since (its work
    /// may be on the GPU now: a timing event of another process that spans this is shared).
    /// A heavy waiter's slot says no: it drained before its last turn ended, and it admits
    /// nothing until its next (else the holder's marks are shared until the waiter looks
    /// again, up to `HELD_WAIT` later).
    pub launched: bool,
    /// A light process that synchronises at a steady pace expects its next synchronisation
    /// within [`super::SYNC_LEAD`]: a heavy neighbour ahead of its share keeps off the GPU.
    /// (Published only without a want: the lowest key bit, cleared.)
    pub soon: bool,
}

const WANT: u64 = 1;
const HEAVY: u64 = 2;
const SYNCING: u64 = 4;
const ACTIVE_BIT: u64 = 8;
const HIGH: u64 = 16;
const EXCLUSIVE: u64 = 32;
const LAUNCHED: u64 = 64;
const FLAGS: u64 = 127;
/// Set in every published word, so that a published state is never 0 (0: nothing published).
const PUBLISHED: u64 = 128;
pub(super) const KEY_SHIFT: u32 = 8;
/// [`SlotState::soon`]: the lowest key bit, cleared in a word without [`WANT`] (whose key bits
/// are otherwise all set; a reader of key words still finds it last and never due).
const SOON: u64 = 1 << KEY_SHIFT;

impl SlotState {
    /// The one word a slot publishes atomically: the flags in the low bits, the key (64 ns
    /// resolution) above them.
    pub fn word(&self) -> u64 {
        let mut w = PUBLISHED;
        match self.want {
            Some(k) => w |= WANT | ((k >> KEY_SHIFT) << KEY_SHIFT),
            // Not waiting: the key bits at their most, so that a reader of key words
            // (`token::next_in_line`, an older library) puts it last and never due.
            None => {
                w |= !((1u64 << KEY_SHIFT) - 1);
                if self.soon {
                    w &= !SOON;
                }
            }
        }
        for (on, bit) in [
            (self.heavy, HEAVY),
            (self.syncing, SYNCING),
            (self.active, ACTIVE_BIT),
            (self.high, HIGH),
            (self.exclusive, EXCLUSIVE),
            (self.launched, LAUNCHED),
        ] {
            if on {
                w |= bit;
            }
        }
        w
    }

    /// The state a published word says (`None`: nothing published).
    pub fn parse(w: u64) -> Option<Self> {
        if w & PUBLISHED == 0 {
            return None;
        }
        Some(SlotState {
            want: (w & WANT != 0).then_some((w >> KEY_SHIFT) << KEY_SHIFT),
            heavy: w & HEAVY != 0,
            syncing: w & SYNCING != 0,
            active: w & ACTIVE_BIT != 0,
            high: w & HIGH != 0,
            exclusive: w & EXCLUSIVE != 0,
            launched: w & LAUNCHED != 0,
            soon: w & WANT == 0 && w & SOON == 0,
        })
        .filter(|_| w & !FLAGS & !PUBLISHED & ((1 << KEY_SHIFT) - 1) == 0)
    }
}

/// Another process on this GPU, as its node slot shows it (the driver leaves out slots whose
/// heartbeat is stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its token id.
    pub id: u64,
    /// What it publishes.
    pub state: SlotState,
    /// When it last took the token (ties in key order go to the least recently served).
    pub served: u64,
    /// Its slot's heartbeat.
    pub beat: u64,
    /// Whether it holds the token now.
    pub holder: bool,
    /// Whether it is a process of this one's container (the driver tells: the token ids of a
    /// container's processes carry one tag).
    pub kin: bool,
}
