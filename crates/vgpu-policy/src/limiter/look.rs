//! One look of the limiter ([`Limiter::look`]), phase by phase:
//! 1. [`Limiter::observe`]: learn from the marks, charge the launches admitted since the last
//!    look, and see how its queue ran meanwhile;
//! 2. [`Around::of`]: what the peers' slots say;
//! 3. [`Limiter::stand`]: where the process stands (its container's virtual time, light or
//!    heavy, the queue depth it may keep, whether a peer holds it back);
//! 4. [`Limiter::turn`]: the node token (want it, keep it, drain and hand it on);
//! 5. [`Limiter::exclusive`]: whether it asks the others off the GPU for a clean sample;
//! 6. [`Limiter::admit`]: how many launches the gate admits, and why not more;
//! 7. [`Limiter::sample`], [`Limiter::calibrate`]: which launch to time, and whether to run
//!    the restart probe and an overhead bracket;
//! 8. [`Limiter::next_look`]: when to look again.
//!
//! Each phase reads what the earlier ones found (`Seen`, `Around`, `Standing`, the token);
//! the state they keep is the `Limiter`'s.
use super::*;

/// A peer that takes part in the GPU's sharing now: it launched lately, synchronises, wants
/// the token or holds it.
fn live(p: &Peer) -> bool {
    p.state.active || p.state.syncing || p.state.want.is_some() || p.holder
}

/// Each peer's wish for the token as the token's order compares it, in the peers' order: its
/// key if it is due at `now`, raised to the waiters' floor (`token::key_floor`); `None` for a
/// peer that does not want it or is not due yet.
fn due_wants(peers: &[Peer], now: u64) -> impl Iterator<Item = Option<u64>> + '_ {
    let floor = crate::token::key_floor(peers.iter().filter_map(|p| p.state.want), now);
    peers
        .iter()
        .map(move |p| p.state.want.filter(|k| *k <= now).map(|k| k.max(floor)))
}

/// What a look learned of its own process's work since the last look.
struct Seen {
    /// The look's time (never before the last look's).
    now: u64,
    /// Since the last look.
    dt: u64,
    /// GPU ns to charge: the launches admitted since the last look, and what earlier ones
    /// turned out to cost above their charge.
    charge: u64,
    /// GPU ns to take back ([`Decision::refund`]).
    refund: u64,
    /// Its queue, as estimated, ran dry since the last look.
    dry: bool,
    /// How long the GPU ran none of its work since the last look, as far as it can tell.
    idle_for: u64,
    /// The time since the last look was its own (its queue empty then, no launch waiting,
    /// nothing admitted since): a launch that waits now came at its end.
    own: bool,
    /// A synchronisation began since the last look (it waits in one now, and did not then).
    sync_began: bool,
    /// It admitted work since the last look (charged now or deferred, [`UNSURE_AHEAD`]).
    admitted: bool,
}

/// What a look reads of its peers' slots.
struct Around {
    /// A peer is live ([`live`]).
    active: bool,
    /// A live peer is heavy.
    heavy: bool,
    /// A live peer is light.
    light: bool,
    /// A light peer waits in a synchronisation.
    light_syncing: bool,
    /// A light peer's next synchronisation is due soon ([`SlotState::soon`]).
    light_soon: bool,
    /// A live peer of high priority (never for a high-priority process itself).
    high_active: bool,
    /// A high-priority peer waits in a synchronisation (the same).
    high_syncing: bool,
    /// A high-priority peer's next synchronisation is due soon (the same).
    high_soon: bool,
    /// A peer asks the others off the GPU for a clean sample (the same).
    exclusive: bool,
    /// A peer wants the token.
    wanted: bool,
    /// A peer holds the token.
    holder: bool,
    /// A peer may have work queued on the GPU.
    queued: bool,
    /// A live heavy peer of another container.
    stranger_heavy: bool,
}

impl Around {
    /// `beats` (one per peer, in order, [`Limiter::watch_beats`]): since when, on this
    /// process's clock, each peer's heartbeat has stood as it is; a peer's requests that hold
    /// the others back count only while it moved within [`HOLD_STILL`] of `now`.
    fn of(peers: &[Peer], priority: Priority, beats: &[Watched], now: u64) -> Self {
        let any = |f: &dyn Fn(&Peer) -> bool| peers.iter().any(f);
        let moving = |b: &Watched| b.still_for(now) <= ns(HOLD_STILL);
        let held_by =
            |f: &dyn Fn(&Peer) -> bool| peers.iter().zip(beats).any(|(p, b)| moving(b) && f(p));
        let high = priority == Priority::High;
        Around {
            active: any(&live),
            heavy: any(&|p| p.state.heavy && live(p)),
            light: any(&|p| !p.state.heavy && live(p)),
            light_syncing: held_by(&|p| p.state.syncing && !p.state.heavy),
            light_soon: held_by(&|p| p.state.soon && !p.state.heavy),
            high_active: !high && any(&|p| p.state.high && live(p)),
            high_syncing: !high && held_by(&|p| p.state.high && p.state.syncing),
            high_soon: !high && held_by(&|p| p.state.high && p.state.soon),
            exclusive: !high && held_by(&|p| p.state.exclusive),
            wanted: any(&|p| p.state.want.is_some()),
            holder: any(&|p| p.holder),
            queued: any(&|p| {
                p.state.launched || p.state.syncing || p.state.active && !p.state.heavy
            }),
            stranger_heavy: any(&|p| !p.kin && p.state.heavy && live(p)),
        }
    }
}

/// Where the process stands at a look.
struct Standing {
    /// The share in force (1..=100).
    percent: u8,
    /// Measuring only (100 %).
    measuring: bool,
    /// Of low priority.
    low: bool,
    /// Owes nothing now ([`Decision::unthrottled`]).
    unthrottled: bool,
    /// The container's virtual time after this look's charge.
    vt: u64,
    /// Where its bank counts back from ([`Decision::bank_at`]).
    bank_at: Option<u64>,
    /// It launched lately or a launch waits at the gate.
    launching: bool,
    /// How much of its admitted work is still to run, as estimated (ns).
    queued: u64,
    /// How long its queue has been dry while it launched (`None`: it is not).
    dry_for: Option<u64>,
    /// Dry for [`STARVING`]: a host-bound phase.
    starving: bool,
    /// Heavy (see the module's documentation).
    heavy: bool,
    /// The queue it may keep.
    depth: Duration,
    /// A peer's synchronisation, a high-priority peer or an exclusive sample keeps it off the
    /// GPU.
    peer_hold: bool,
    /// What a peer's synchronisation does to it ([`Stats::held_peer_sync_ns`]).
    peer_sync: PeerSync,
    /// Not held for it, where it would have been, past [`PEER_HOLD_MAX`]
    /// ([`Stats::peer_hold_cut_ns`]).
    cut: bool,
    /// It is kept off the GPU by holding its queue there ([`Decision::hold_queue`]).
    hold_queue: bool,
    /// Its token key: when its container has credit.
    key: u64,
    /// It must have the token to admit.
    contended: bool,
}

impl Limiter {
    /// One look: learn, charge, decide.
    pub fn look(&mut self, l: &Look<'_>) -> Decision {
        let seen = self.observe(l);
        self.rhythm.saw(l.syncs, seen.now);
        let w = self.rhythm.waits_of(l.waited);
        let add = |(n, t): (u64, u64), (dn, dt): (u64, u64)| (n + dn, t.saturating_add(dt));
        self.stats.foretold_waits = add(self.stats.foretold_waits, w.foretold);
        self.stats.other_waits = add(self.stats.other_waits, w.other);
        self.watch_beats(l.peers, seen.now);
        let around = Around::of(l.peers, self.priority, &self.beats, seen.now);
        let mut st = self.stand(l, &seen, &around);
        let (token, yielding) = self.turn(l, &seen, &around, &st);
        // A heavy process that needs the token and has not got it admits nothing.
        let token_hold = match token {
            Token::Want(_) | Token::Wait(_) | Token::Free => st.contended,
            Token::Hold => yielding,
        };
        self.count_peer_sync(seen.dt, st.peer_sync, st.cut);
        let (exclusive, settling) = self.exclusive(l, seen.now, &around, &st, token_hold);
        if settling {
            st.peer_hold = true;
        }
        let (launches, probing) = self.admit(l, seen.now, &st, token_hold);
        let (budget, sample) = self.sample(l, seen.now, launches, probing, exclusive, settling);
        let (probe, overhead) = self.calibrate(seen.now);
        let next = self.next_look(l, seen.now, &around, &st, token_hold, exclusive);
        self.next_at = next;

        let now = seen.now;
        let active = now.saturating_sub(self.last_launch) < ns(ACTIVE) && self.priced > 0;
        // A light process beside others says when its next synchronisation is due.
        let soon =
            !l.syncing && !st.heavy && around.active && self.rhythm.due_within(ns(SYNC_LEAD), now);
        self.wanted = matches!(token, Token::Want(_) | Token::Wait(_));
        // (Only where it may take a free token: the line is read from the peers, a list made.)
        self.grace = if matches!(token, Token::Want(_)) {
            self.grace_beside(l.peers, now)
        } else {
            ns(crate::token::HANDOFF_GRACE)
        };
        self.queue_held = if st.hold_queue {
            self.queue_held.or(Some((self.gpu_done, 0)))
        } else {
            None
        };
        Decision {
            hold_queue: st.hold_queue,
            charge: seen.charge,
            refund: seen.refund,
            bank_at: st.bank_at,
            budget,
            slot: SlotState {
                want: match token {
                    Token::Want(k) | Token::Wait(k) => Some(k),
                    _ => None,
                },
                heavy: st.heavy,
                syncing: l.syncing,
                soon,
                active,
                high: self.priority == Priority::High,
                exclusive,
                launched: (seen.charge > 0 || seen.admitted)
                    && !l.drained
                    && !token_hold
                    && !st.hold_queue,
            },
            token,
            sample,
            overhead,
            probe,
            drain: yielding,
            next,
            held: self.held,
            open: st.measuring && !st.low,
            unthrottled: st.unthrottled,
        }
    }

    /// Counts the time since the last look (`dt`) to what a peer's synchronisation did to it
    /// then ([`Stats::held_peer_sync_ns`] and those after it), and notes what it does now.
    fn count_peer_sync(&mut self, dt: u64, now: PeerSync, cut: bool) {
        let held_far = self.held_far();
        let s = &mut self.stats;
        let add = |c: &mut u64| *c = c.saturating_add(dt);
        match self.peer_sync {
            PeerSync::None => {}
            PeerSync::Syncing => add(&mut s.held_peer_sync_ns),
            PeerSync::Announced => add(&mut s.held_announced_ns),
            PeerSync::Behind => add(&mut s.announced_behind_ns),
            PeerSync::Far => {
                add(&mut s.announced_behind_ns);
                add(&mut s.announced_far_ns);
                if held_far {
                    add(&mut s.held_far_ns);
                }
            }
        }
        if self.was_cut {
            add(&mut s.peer_hold_cut_ns);
        }
        self.peer_sync = now;
        self.was_cut = cut;
    }

    /// The last decision held it for a peer's synchronisation, on the GPU or at its gate (as
    /// `stand`'s `holds` decided: its queue held, or a begun or announced one at the gate).
    fn held_for_peer(&self) -> bool {
        self.queue_held.is_some()
            || matches!(self.peer_sync, PeerSync::Syncing | PeerSync::Announced)
    }

    /// The last decision held its queue for a light peer's announcement while it was far
    /// behind its share (on its allowance, [`FAR_HOLD_PART`]).
    fn held_far(&self) -> bool {
        self.peer_sync == PeerSync::Far && self.queue_held.is_some()
    }

    /// Phase 1: learns from the marks, prices and charges the new launches, and sees how its
    /// queue ran since the last look.
    fn observe(&mut self, l: &Look<'_>) -> Seen {
        let now = l.now.max(self.looked);
        // A stretch of its own: at the last look its queue was seen empty and no launch
        // waited, and nothing was admitted since (host work, a service between requests). Its
        // queue ran dry throughout, whatever the marks read now say (read at a look, not when
        // the GPU reached them: a request loop's last request, read after its host work,
        // moved the estimate to the look and seemed to have kept the GPU busy through it).
        let own = self.seen_empty && !self.waited && l.launched <= self.priced;
        (self.seen_empty, self.waited) = (l.drained || l.empty, l.held);
        self.learn(l.marks, now, l.percent >= 100);
        if l.drained || l.empty {
            // Its queue was seen empty: nothing admitted before is still to run.
            self.gpu_done = self.gpu_done.min(now);
        }
        // How late its looks come (a controller starved of CPU), where it held a launch for
        // its queue to drain, or beside others at any timed look (`Held::Peer` sleeps on the
        // node file): the latest lately. A look that came early (a launch at the gate woke it)
        // says nothing, nor one after a drain (it waited for the GPU, not a CPU). Beside
        // others, its timed looks are often: a holder whose looks each admitted a launch or
        // two never saw its queue's room used up (so it never held for the queue), its
        // program waited at the gate from one late look to the next, and the GPU idled 19 ms
        // of every 20 (the model's 1 ms kernels at 30/70, controllers every 20 ms: 74 % of the
        // GPU together, now 94). Alone, its looks come every `ALONE_POLL` and a late one is
        // counted where it held for its queue only (each look on time would fade the
        // lateness seen, and a deeper queue let in new expensive kernels on a cheap guess).
        // Beside peers, idle ones too: counted only beside live ones, the pair of 11 ms loops
        // at 50/50 whose controllers run every 20 ms kept 72.8 % of the GPU, not 87.8.
        let timed = self.held == Held::Queue
            || (!l.peers.is_empty() && matches!(self.held, Held::No | Held::Credit));
        if timed && !l.drained && now >= self.next_at {
            self.late = (now - self.next_at)
                .saturating_sub(ns(LATE_NOISE))
                .max(self.late - self.late / 8)
                .min(ns(MAX_LATE));
        }
        let dt = now.saturating_sub(self.looked);
        let (work, new, unsure) = self.price_new(l.launched, l.keys, l.units, now);
        let deferred = self.defer_past_unsure_ahead(l, now, work, new, unsure);
        self.settle_stale(now);
        if let Some((before, backlog)) = self.queue_held.as_mut() {
            // Held on the GPU: what it admitted since waits behind the hold, which stands
            // until a look lifts it, and runs after what came before it.
            *backlog = backlog.saturating_add(work);
            self.gpu_done = (*before).max(now).saturating_add(*backlog);
        }
        self.learn_unpriced();
        // The GPU its own since the last look: its queue not held there (a synchronisation
        // would wait for the hold, not for work), and no peer live now, or it holds the token
        // and every live peer is heavy (waiting for its turn, its queue drained at the
        // hand-over; a light one runs beside the holder).
        let own_now = self.queue_held.is_none()
            && l.peers
                .iter()
                .filter(|p| live(p))
                .all(|p| l.holding && p.state.heavy && !p.holder);
        self.own_since = if own_now {
            Some(self.own_since.unwrap_or(now))
        } else {
            None
        };
        // (Measuring only, nothing is charged after the fact from them.)
        self.charge_waits(l.waited, self.own_since.filter(|_| l.percent < 100));
        self.stats.corrected_ns = self.stats.corrected_ns.saturating_add(self.correction);
        let charge = (work - deferred).saturating_add(std::mem::take(&mut self.correction));
        let refund = std::mem::take(&mut self.refund);
        self.stats.refunded_ns = self.stats.refunded_ns.saturating_add(refund);
        // Its queue, as estimated, held each launch at its first price: what settled
        // launches turned out not to cost may not be there (never before now: launches long
        // done are no queue).
        let unqueued = std::mem::take(&mut self.unqueued);
        if unqueued > 0 {
            self.gpu_done = self
                .gpu_done
                .saturating_sub(unqueued)
                .max(now.min(self.gpu_done));
        }
        // Its queue, as estimated, ran dry since the last look (the work admitted did not
        // cover the time), for this long.
        let dry = self.gpu_done < now;
        // The GPU ran none of its work for this long, as far as it can tell: the estimate ran
        // dry, and it was not waiting in a synchronisation meanwhile (a process that waits for
        // its work, delayed behind another's, wants the GPU: the estimate cannot see that).
        let sync_began = l.syncing && self.sync_since.is_none();
        let synced = if l.syncing {
            let since = *self.sync_since.get_or_insert(now);
            now.saturating_sub(since.max(self.looked))
        } else {
            self.sync_since = None;
            0
        };
        let idle_for = if own {
            dt
        } else {
            now.saturating_sub(self.gpu_done).min(dt)
        }
        .saturating_sub(synced);
        self.charged = self.charged.saturating_add(charge);
        self.looked = now;
        Seen {
            now,
            dt,
            charge,
            refund,
            dry,
            idle_for,
            own,
            sync_began,
            admitted: work > 0,
        }
    }

    /// Defers what this look's `new` launches were charged, `work` in all, at prices that rest
    /// on one shared sample (`unsure` of it) past what runs its container's virtual time
    /// [`UNSURE_AHEAD`] past now (from where its bank would start it, at the most); returns
    /// it (ns, at most `work`). Under a limit only: measuring, nothing waits for its credit.
    fn defer_past_unsure_ahead(
        &mut self,
        l: &Look<'_>,
        now: u64,
        work: u64,
        new: u64,
        unsure: f64,
    ) -> u64 {
        // (Unthrottled, it owes nothing: its virtual time is kept at now whatever it is
        // charged, and a deferred charge would land as a debt later.)
        let heavy_peer = l.peers.iter().any(|p| p.state.heavy && live(p));
        if unsure <= 0.0 || l.percent >= 100 || owes_nothing(l, heavy_peer) {
            return 0;
        }
        let room = now
            .saturating_add(ns(UNSURE_AHEAD))
            .saturating_sub(start(l.vt, now))
            .saturating_mul(u64::from(l.percent.max(1)))
            / 100;
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let (sure, unsure_ns) = (
            work.saturating_sub(unsure as u64)
                .saturating_add(self.correction),
            unsure as u64,
        );
        let cut = unsure_ns
            .saturating_sub(room.saturating_sub(sure))
            .min(work);
        self.stats.deferred_ns = self.stats.deferred_ns.saturating_add(cut);
        if cut > 0 {
            #[allow(clippy::cast_precision_loss)]
            self.defer_unsure(new, cut as f64, now);
        }
        cut
    }

    /// Phase 3: its container's virtual time, whether it is heavy, the queue it may keep,
    /// whether a peer keeps it off the GPU, and its turns' bookkeeping.
    fn stand(&mut self, l: &Look<'_>, seen: &Seen, around: &Around) -> Standing {
        let Seen {
            now,
            dt,
            charge,
            refund,
            ..
        } = *seen;
        let percent = l.percent.clamp(1, 100);
        let measuring = percent >= 100;
        // Work-conserving, it owes nothing while nobody else on the GPU uses its share: no
        // process there is heavy (a light one, a service under its share, keeps its latency by
        // the queue depth and its synchronisations, not by this one's share; before, only an
        // empty GPU unthrottled it, and a training loop beside a decode service that used 7 %
        // of the GPU got no more than its own 50 %, run 69).
        let unthrottled = owes_nothing(l, around.heavy);
        let bank_at = self.bank_at(l.peers, now);
        let mut vt = charge_vt_banked(l.vt, bank_at, now, (charge, refund), percent);
        if unthrottled {
            // Owing nothing: a neighbour that comes finds no debt to repay.
            vt = vt.min(now);
        }
        let low = self.priority == Priority::Low;
        let launching = l.held || now.saturating_sub(self.last_launch) < ns(IDLE);
        let queued = self.gpu_done.saturating_sub(now);
        // Starving: launching, not waiting for the GPU (no launch held, no synchronisation),
        // and its queue running dry between looks, for a while (a host-bound phase, not the
        // moment between two long kernels).
        if !l.held && !l.syncing && launching && seen.dry {
            self.starving_since.get_or_insert(now);
        } else if let Some(t) = self.starving_since.take() {
            self.dry_last = [self.dry_last[1], now.saturating_sub(t)];
        }
        let dry_for = self.starving_since.map(|t| now.saturating_sub(t));
        let starving = dry_for.is_some_and(|d| d >= ns(STARVING));
        // Whether a host-bound stretch followed each of its last two synchronisations (a
        // holder keeps its turn through a synchronisation only where none did).
        if seen.sync_began {
            self.sync_starved = [self.sync_starved[1], self.starved_since_sync];
            self.starved_since_sync = false;
        }
        self.starved_since_sync |= starving;
        let bound = self.watch_busy(l, seen);

        // Heavy: its container has used about its share lately (its virtual time is within
        // LIGHT_LAG of now), or it is GPU-bound (a container squeezed below its share by the
        // time-slicer is both behind and bound: it takes turns, which it wins). A light one (a
        // host-bound stream, a service between requests) runs beside the others whatever its
        // queue does under the GPU's time-slicer.
        // A heavy process waiting for its turn stays heavy (its virtual time falls behind only
        // because it waits; run beside the holder, its kernels would thrash with the holder's).
        let waiting_turn = self.heavy && l.held && self.held == Held::Peer;
        let heavy = !measuring && (vt.saturating_add(ns(LIGHT_LAG)) > now || bound || waiting_turn);
        self.heavy = heavy;
        self.unlimited = measuring;
        // The depth of queue allowed now: a heavy process beside a light one keeps a short one
        // (a light peer's synchronisation waits for it), beside heavy ones only a turn's; a
        // light one's bursts are its own. Looks that come late deepen each but a low-priority
        // one's (alone or in turns twice as much as they are late, beside a light peer as much:
        // with controllers every 2 ms on the model, training beside the decode service at 50/50
        // got 22–28 % of its alone rate on the 0.5 ms queue, 50 % on this, while the service's
        // p99 went from 201 to 212 ms; plain co-location's is 240).
        let depth = if low && around.high_active {
            LOW_DEPTH
        } else if around.active && heavy && around.light {
            SHARED_DEPTH + Duration::from_nanos(self.late)
        } else if around.active && heavy {
            TURN_DEPTH + self.late_depth()
        } else {
            ALONE_DEPTH + self.late_depth()
        };
        // A light peer's synchronisation holds a heavy process; one due soon holds it only
        // while it is ahead of its share (it would wait for its credit anyway: the GPU it
        // leaves is no loss to it; behind, the model's ResNet step beside the decode service at
        // 30/70 fell from 71 to 56 % of its alone rate). A high-priority peer's synchronisation
        // holds a low-priority process, due soon as well as begun, whatever its share.
        // Hungry: light, yet its queue keeps the GPU busy (a trainer its own host work keeps
        // under its share), not waiting itself and not of high priority: held for a light
        // peer's synchronisations as a heavy one far behind its share is (`HUNGRY_BUSY`).
        let hungry = !measuring
            && !heavy
            && !l.syncing
            && self.priority != Priority::High
            && self.busy >= HUNGRY_BUSY;
        let wanted_sync =
            if (low && around.high_syncing) || ((heavy || hungry) && around.light_syncing) {
                PeerSync::Syncing
            } else if (low && around.high_soon) || (heavy && around.light_soon && vt > now) {
                PeerSync::Announced
            } else if heavy && around.light_soon && vt.saturating_add(ns(LIGHT_LAG)) > now {
                PeerSync::Behind
            } else if (heavy || hungry) && around.light_soon {
                PeerSync::Far
            } else {
                PeerSync::None
            };
        // Held for a light peer's synchronisation, a heavy process is held on the GPU where
        // the driver can ([`Decision::hold_queue`]): its streams wait there and its host goes on
        // queueing (blocked at the gate instead, a trainer whose host keeps pace with its GPU
        // loses its host's time too: the model's ResNet step beside the H200's decode service
        // at 30/70 fell to 0.58 of its alone rate where holds from the announcement on blocked
        // it, `behinddrain.patch`). While the peer synchronises, and from its announcement on
        // ahead of its share or a little behind it (its container within LIGHT_LAG of its share:
        // it has used about its share lately); one further behind (heavy because the GPU keeps
        // it bound, or its own host work keeps it from its share) for an eighth of the time at
        // most ([`FAR_HOLD_PART`]). (Timed from when its queue, as estimated, would run out by
        // the time the synchronisation is due, `timedhold.patch`, the decode service answered
        // at p50 1.41x its alone p50 against 1.12x, run 122: the estimate runs ahead of the
        // GPU.) A low-priority process likewise for a high-priority peer's.
        // Its allowance: filled at 1 / FAR_HOLD_PART of the time, spent while so held since the
        // last look (into debt: a look comes when it comes; at most a burst's).
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let burst = signed(ns(FAR_HOLD_BURST));
        let spent = if self.held_far() { signed(dt) } else { 0 };
        self.far_hold_credit = self
            .far_hold_credit
            .saturating_add(signed(dt / FAR_HOLD_PART))
            .saturating_sub(spent)
            .clamp(-burst, burst);
        // What the peer's synchronisation wants of it: its queue held, or else its gate.
        let queue = l.queue_hold
            && !around.exclusive
            && (heavy || low || hungry)
            && match wanted_sync {
                PeerSync::Syncing | PeerSync::Announced | PeerSync::Behind => true,
                PeerSync::Far => self.far_hold_credit > 0,
                PeerSync::None => false,
            };
        let gate = !queue && matches!(wanted_sync, PeerSync::Syncing | PeerSync::Announced);
        // Held [`PEER_HOLD_MAX`] in all since a look last found nothing to hold it for, it is
        // held no more until one does. The time after a look that held it counts; looks that
        // want a hold but make none (a far-behind one out of allowance, one behind its share
        // whose queue the driver cannot hold) pause the count, neither end nor restart it.
        if self.held_for_peer() {
            self.peer_held_ns = self.peer_held_ns.saturating_add(dt);
        }
        if wanted_sync == PeerSync::None {
            self.peer_held_ns = 0;
            self.peer_hold_cut = false;
        } else if self.peer_held_ns >= ns(PEER_HOLD_MAX) {
            self.peer_hold_cut = true;
        }
        let (peer_sync, hold_queue, gate_hold) = if self.peer_hold_cut {
            (PeerSync::None, false, false)
        } else {
            (wanted_sync, queue, gate)
        };
        // Not held that it would have been ([`Stats::peer_hold_cut_ns`]).
        let cut = self.peer_hold_cut && (queue || gate);
        let peer_hold = gate_hold || around.exclusive;

        // The node token, between heavy processes whose queues are full: a heavy process
        // whose GPU has run dry (host work between its kernels, an optimizer's small ops)
        // needs no turn, and one holding the token gives it up.
        if l.holding && !self.holding {
            // It took the token since the last look: its turn begins.
            self.turn_since = now;
            self.turn_dry = None;
            self.holding = true;
        }
        if l.holding {
            // Its turn's dry time: where its queue, as estimated, ran out before this look
            // (its own gaps: host work, a synchronisation's return), from its first launch in
            // the turn on (not the hand-over before it). Not while its last look held it for
            // its credit: that wait is its limit's, not GPU it kept from anyone. (Charged
            // them, a 30 % training container, holding the token while its neighbour ran an
            // optimizer's small ops beside it without wanting it, got 19.6 % of its alone
            // rate on the model; now 30.9.)
            if let Some(d) = self.turn_dry.as_mut() {
                if self.held != Held::Credit {
                    *d = d.saturating_add(now.saturating_sub(self.gpu_done).min(dt));
                }
            } else if charge > 0 || seen.admitted {
                self.turn_dry = Some(0);
            }
        }
        // A heavy process with work to launch always wants the token (so that its peers see it
        // waiting); it must have it to admit only while another heavy process is about.
        let contended = heavy && around.heavy && !measuring && !starving;
        // Taking turns, it banks nothing from its next look on, until it has been idle for
        // BANK or no heavy peer is left: not in a host-bound stretch between its turns (banked
        // there, the 70 % container of the model's CNN pair with 250 µs switches, more often
        // behind, lost more: 65.8 % of its alone rate, now 66.7), nor while it waits in a
        // synchronisation or its threads wait for a CPU (light for a moment, or 20 ms without a
        // launch on a loaded host, and banked from the line's end, one of 64 simulated
        // containers at 10 % lost its place again and again: 4–16 kernels in 5 s where the mean
        // was 68).
        let idle = !l.held && !l.syncing && now.saturating_sub(self.last_launch) >= ns(BANK);
        if heavy && around.heavy && !measuring {
            self.in_turns = true;
        } else if !around.heavy || idle || measuring {
            self.in_turns = false;
        }
        Standing {
            percent,
            measuring,
            low,
            unthrottled,
            vt,
            bank_at,
            launching,
            queued,
            dry_for,
            starving,
            heavy,
            depth,
            peer_hold,
            peer_sync,
            cut,
            hold_queue,
            key: credit_at(vt),
            contended,
        }
    }

    /// Notes when each peer's heartbeat last changed, on this process's clock (never by the
    /// beat's value: another process's clock may run far ahead or behind), one per peer, in
    /// order. The driver lists the peers in slot order, so each is looked up at its own index
    /// first; no allocation once the buffers have grown to the peers' number. (The node file's
    /// holder check judges the token's holder by the same [`Watched`].)
    fn watch_beats(&mut self, peers: &[Peer], now: u64) {
        std::mem::swap(&mut self.beats, &mut self.beats_before);
        self.beats.clear();
        for (i, p) in peers.iter().enumerate() {
            let before = &self.beats_before;
            let seen = before
                .get(i)
                .filter(|b| b.id == p.id)
                .or_else(|| before.iter().find(|b| b.id == p.id));
            self.beats
                .push(Watched::seen(seen.copied(), p.id, p.beat, now));
        }
    }

    /// How far a waiter's container must be behind this one's for it to give its turn up:
    /// [`turn_vt`], and `TURN_PER_LATE` times its lateness more; beside a crowd of waiters
    /// ([`crate::token::CROWD`], counted as the token's order counts it: itself among them if
    /// it waits) that lateness part only up to [`BANK`]: their keys all stand at the floor,
    /// `BANK + AHEAD` before now, and a longer turn never finds one behind. (The model's 64
    /// containers at 10 % whose controllers look every 20 ms: a holder held to its share kept
    /// the token until its turn's wall time ran out, 220 ms, running 2 ms of kernels every
    /// 20 ms, and the GPU was 18 % busy.)
    fn turn_vt(&self, l: &Look<'_>, percent: u8) -> u64 {
        let base = turn_vt(percent);
        let turn = base.saturating_add(self.late.saturating_mul(TURN_PER_LATE));
        let wants = l.peers.iter().filter_map(|p| p.state.want);
        if crate::token::crowd(wants.chain(self.wanted.then_some(l.now)), l.now) {
            turn.min(ns(BANK).max(base))
        } else {
            turn
        }
    }

    /// The first in line's grace at `now` beside `peers` ([`Limiter::handoff_grace`]):
    /// `token::HANDOFF_GRACE`, and [`MAX_LATE`] more while the first in line's heartbeat moves
    /// (it looked within [`HELD_WAIT`] and `MAX_LATE`). Not this process's own lateness: where
    /// only some containers are starved of CPU (a quota), a punctual waiter would take a
    /// starved winner's turns after the plain grace. A first in line that died or hangs gets
    /// the plain grace once its heartbeat stood still that long.
    fn grace_beside(&self, peers: &[Peer], now: u64) -> u64 {
        let plain = ns(crate::token::HANDOFF_GRACE);
        let first = next_in_line(peers, now)[0];
        let moving = first
            .and_then(|id| peers.iter().position(|p| p.id == id))
            .and_then(|i| self.beats.get(i))
            .is_some_and(|b| b.still_for(now) <= ns(HELD_WAIT).saturating_add(ns(MAX_LATE)));
        if moving {
            plain.saturating_add(ns(MAX_LATE))
        } else {
            plain
        }
    }

    /// Whether a live waiter (its heartbeat moving: [`HOLD_STILL`]) is due and its container a
    /// whole turn behind this one's (`st.key`): as holder, this process would hand the token
    /// to it at once.
    fn waiter_a_turn_behind(&self, l: &Look<'_>, st: &Standing, now: u64) -> bool {
        let turn = self.turn_vt(l, st.percent);
        due_wants(l.peers, now).zip(&self.beats).any(|(k, b)| {
            b.still_for(now) <= ns(HOLD_STILL) && k.is_some_and(|k| k.saturating_add(turn) < st.key)
        })
    }

    /// How much deeper a queue it keeps alone or taking turns because its looks come late:
    /// twice as late as they come (the queue must last from one late look to the next, and a
    /// hold mark read late seems to have been reached only then), so at most twice
    /// [`MAX_LATE`].
    fn late_depth(&self) -> Duration {
        Duration::from_nanos(self.late.saturating_mul(2))
    }

    /// Whether it is GPU-bound: its queue (as estimated: as if it had the GPU alone) has kept
    /// the GPU busy lately, it has more work than the GPU runs of it. A host-bound stream's
    /// queue runs dry between its kernels, a service's between its requests. Held back by
    /// another process, it shows neither (the average stands still), unless the time since its
    /// last look was its own ([`Seen::own`]: a service's host work between requests, which
    /// nothing looks at until a launch wakes a controller held for a peer; left out as a
    /// wait, a request loop that started out bound stayed so beside a trainer and never
    /// announced its synchronisations, on the simulator about once in 100 runs).
    fn watch_busy(&mut self, l: &Look<'_>, seen: &Seen) -> bool {
        let Seen {
            dt, idle_for, own, ..
        } = *seen;
        if dt > 0 && (own || !(l.held && matches!(self.held, Held::Peer | Held::Blocked))) {
            self.observed = self.observed.saturating_add(dt);
            #[allow(clippy::cast_precision_loss)]
            let (busy, w) = (
                (1.0 - idle_for as f64 / dt as f64).clamp(0.0, 1.0),
                (dt as f64 / self.observed.min(ns(BUSY_TAU)) as f64).min(1.0),
            );
            self.busy += (busy - self.busy) * w;
        }
        if self.busy >= BOUND_BUSY {
            self.bound = true;
        } else if self.busy < UNBOUND_BUSY {
            self.bound = false;
        }
        self.bound
    }

    /// Where its container's bank counts back from at `now` beside `peers`
    /// ([`Decision::bank_at`]): nowhere while it takes turns (its waits are no idleness); else
    /// from now, or from the GPU's virtual time, the latest among the processes waiting for the
    /// token, where that is behind (from the least, a newcomer to 64 containers at 10 % came
    /// first in line for a burst and then waited 2 s, H200 run 88). From now in a crowd
    /// ([`crate::token::CROWD`]), counted as the token's order counts it: every waiter, itself
    /// among them if it waits.
    fn bank_at(&self, peers: &[Peer], now: u64) -> Option<u64> {
        let wants = || peers.iter().filter_map(|p| p.state.want);
        if crate::token::crowd(wants().chain(self.wanted.then_some(now)), now) {
            Some(now)
        } else {
            (!self.in_turns).then(|| {
                wants()
                    .max()
                    .map_or(now, |k| k.saturating_add(ns(AHEAD)).min(now))
            })
        }
    }

    /// Phase 4: the node token, and whether it drains its queue before handing it on. Ends a
    /// turn's bookkeeping when it gives the token up.
    fn turn(&mut self, l: &Look<'_>, seen: &Seen, around: &Around, st: &Standing) -> (Token, bool) {
        let now = seen.now;
        let key = st.key;
        // Blocked by HAMi's monitor, it can use no turn: it neither wants the token nor keeps
        // it (a blocked holder never charged, and so never behind a waiter, held the token
        // while the monitor waited to see the other container launch).
        let demand = st.launching && !l.blocked;
        // A holder with nothing more for its turn (it stopped launching, or turned light, or
        // is blocked).
        let done = !st.heavy || !demand;
        let mut yielding = false;
        let token = if st.measuring
            || (!l.holding && (done || st.starving))
            || (l.holding && done && !around.wanted)
        {
            Token::Free
        } else if l.holding && !around.heavy && !done {
            Token::Hold
        } else if l.holding {
            // The waiters' keys as the token's order compares them (`token::order`).
            let eligible = || due_wants(l.peers, now).flatten();
            // A waiter whose container is a turn behind this one's, or one as far along after
            // a whole turn (the processes of one container share one virtual time).
            let slow = self.late.saturating_mul(TURN_PER_LATE);
            let long_turn = now.saturating_sub(self.turn_since) >= ns(TURN).saturating_add(slow);
            let turn = self.turn_vt(l, st.percent);
            let behind =
                eligible().any(|k| k.saturating_add(turn) < key || (long_turn && k <= key));
            let waiting = eligible().next().is_some();
            // Owed the GPU (every waiter's container is further along than its own), a holder
            // keeps its turn through a short host-bound stretch: handed on, the waiter's
            // queue must drain before the turn comes back (the model's ResNet pair with
            // 250 µs switches: the 70 % container 64.4 % of alone, now 67.1). Only where one
            // of its last two such stretches was short: through a long one (an optimizer's
            // small ops) the GPU would idle for nothing.
            let first = eligible().all(|k| key < k);
            let owed = first
                && self
                    .dry_last
                    .iter()
                    .min()
                    .is_some_and(|d| *d < ns(OWED_STARVING));
            let starving =
                st.starving && (!owed || st.dry_for.is_some_and(|d| d >= ns(OWED_STARVING)));
            // So too through a synchronisation (it launches again when it returns), where
            // neither of its last two was followed by a host-bound stretch: handed on at each,
            // a loop synchronising every 1.3 ms paid a hand-over every time (on the model, two
            // at 30/70: the 70 % one 58.4 % of its alone rate, now 66.8; a ResNet step at 30 %
            // beside it 23.2 / 61.2, now 29.7 / 68.8; `--example pairs`, 33 pairs below target
            // 2's bar, now 18). After a step's synchronisation comes its optimizer's small ops,
            // through which the GPU would idle for the waiter.
            let syncing_on = l.syncing && first && !self.sync_starved.contains(&true);
            let no_credit = credit_at(st.vt) > now && !st.unthrottled;
            // Out of credit, it gives the token up to anyone who wants it (the next turn goes
            // by key when credit comes back, not to whoever holds it then).
            // Turned light, it hands the token on too, its queue drained first: the next
            // holder's kernels would otherwise share the GPU's time-slicer with the rest of
            // its queue. Stopped launching (a synchronisation, a pause), it hands it on only
            // to a waiter that is due: released for nobody, the token stayed free and its
            // next launch waited at the gate for its own controller to take it back (a loop
            // synchronising after each 1 ms kernel, at 50 % beside 20 ms kernels, got 46.7 %
            // of its alone rate on the model, 45.0 % on the H200, run 80).
            if self.yield_since.is_some()
                || !st.heavy
                || behind
                || (around.wanted && no_credit)
                || (waiting && ((!demand && !syncing_on) || starving))
            {
                // Handing the GPU on: first its queue drains (the driver synchronises with
                // the context; no new work meanwhile), so that the next holder runs alone.
                // A controller whose looks come late hands on while some of its queue is
                // still there ([`YIELD_PER_LATE`]).
                let since = *self.yield_since.get_or_insert(now);
                if !l.drained
                    && st.queued
                        > ns(YIELD_EMPTY).saturating_add(self.late.saturating_mul(YIELD_PER_LATE))
                    && now.saturating_sub(since) < ns(YIELD_MAX)
                {
                    yielding = true;
                    Token::Hold
                } else {
                    Token::Free
                }
            } else {
                Token::Hold
            }
        } else if self.waiter_a_turn_behind(l, st, now) {
            // It would hand the token on at once to a waiter a whole turn behind it (the
            // holder's test, above): it leaves the token to that waiter and only publishes its
            // own want ([`Token::Wait`]). Taken after the winner's grace (a starved waiter's
            // late look), it was released in the same breath, and a waiter that looked in
            // between saw it held (the model's CNN pair at 30/70, controllers every 20 ms: the
            // GPU idled 40 ms at a time; the pairs at 30/70 every 5 ms kept 88.1–95.5 % of the
            // GPU, now 90.9–96.8).
            Token::Wait(key)
        } else {
            Token::Want(key)
        };
        if !yielding {
            self.yield_since = None;
        }
        if l.holding && token != Token::Hold {
            // Its turn ends. Where another container's process waited through it, the GPU was
            // this one's alone: it is charged its turn's gaps too (run beside it, the other's
            // work would have filled them). Exclusive turns charged only their kernels gave
            // 11 ms kernels beside 50 µs kernels (which sync every 4) the same work each, and
            // the 50 µs loop, whose GPU idles 7.8 % of the time alone, 50.9–51.7 % of its alone
            // rate to the 11 ms loop's 47.1–47.5 on the model (100–250 µs switches). Not the
            // hand-over before its first launch (charging that broke two processes of one
            // container and 64 limited processes); not between processes of one container (its
            // share is its processes' together).
            let dry = self.turn_dry.take().unwrap_or(0);
            if around.stranger_heavy {
                self.correction = self.correction.saturating_add(dry);
            }
        }
        self.holding = l.holding && token == Token::Hold;
        (token, yielding)
    }

    /// Phase 5: a clean sample. A heavy process whose prices only shared samples set (a
    /// neighbour's time is in them) asks the others to keep off the GPU, waits for their queues
    /// to drain, and times its next launch (at most every EXCLUSIVE_EVERY once it has one; a
    /// sample that was shared after all is tried again after EXCLUSIVE_RETRY).
    /// A request is given up after EXCLUSIVE_MAX, and stands only while it can run: one that
    /// must wait for the token (or for HAMi's monitor) would hold everyone else off the GPU,
    /// the holder too, and its sample could not come until the request timed out (with a dozen
    /// busy neighbours, one of them asked at all times: the GPU idled and a newcomer never ran
    /// a kernel). Either way it asks again after EXCLUSIVE_RETRY.
    /// Returns whether it asks, and whether it still lets the others' queues drain (`settling`:
    /// it admits nothing meanwhile).
    fn exclusive(
        &mut self,
        l: &Look<'_>,
        now: u64,
        around: &Around,
        st: &Standing,
        token_hold: bool,
    ) -> (bool, bool) {
        if let Some(t) = self.exclusive_since
            && (now.saturating_sub(t) > ns(EXCLUSIVE_MAX)
                || (!l.held && now.saturating_sub(self.last_launch.max(t)) > ns(IDLE))
                || token_hold
                || l.blocked
                || st.measuring)
        {
            self.exclusive_since = None;
            // Again after EXCLUSIVE_RETRY, unless it launched nothing meanwhile: an idle process
            // may ask (its next launch is then timed alone), but one that stays idle held the
            // others off the GPU for EXCLUSIVE_MAX of every EXCLUSIVE_MAX + EXCLUSIVE_RETRY
            // (an idle holder at 50 %, its one price shared, asked for 60 ms of every 160, and
            // `vgpu doctor`'s 25 % check beside it measured 14 %); it asks again a second on.
            self.last_exclusive = Some(if self.last_launch < t {
                now
            } else {
                now.saturating_sub(ns(EXCLUSIVE_EVERY)) + ns(EXCLUSIVE_RETRY)
            });
        }
        let can_run = !l.blocked && !token_hold && !st.peer_hold && !st.measuring;
        if self.exclusive_since.is_none()
            && around.active
            && can_run
            && st.launching
            && !around.exclusive
            && credit(st.vt, now, st.percent) > 0
            && self.dirty * 4 > self.recent
            && self
                .last_exclusive
                .is_none_or(|t| now >= t.saturating_add(ns(EXCLUSIVE_EVERY)))
        {
            self.exclusive_since = Some(now);
            self.sample_pending = None;
        }
        if self.recent > 4096 {
            self.recent /= 2;
            self.dirty /= 2;
        }
        // It waits for the others' queues to drain only if someone may have work queued (a
        // holder that took the token from a drained holder times its next launch at once).
        let settling = around.queued
            && self
                .exclusive_since
                .is_some_and(|t| now.saturating_sub(t) < ns(EXCLUSIVE_SETTLE));
        (self.exclusive_since.is_some(), settling)
    }

    /// Phase 6: how many more launches the gate admits, and why not more ([`Limiter::held`]).
    /// Returns them, and whether it is still probing (nothing priced yet).
    fn admit(&mut self, l: &Look<'_>, now: u64, st: &Standing, token_hold: bool) -> (u64, bool) {
        let queued = st.queued.max(self.unreached_queue(l.unreached, now));
        self.paced = queued;
        let pace_room = ns(st.depth).saturating_sub(queued);
        // Held back by its share, a process goes on once a chunk is due (CREDIT_STEP of its
        // virtual time), not a launch at a time.
        let credit_room = if st.measuring || st.unthrottled {
            u64::MAX
        } else {
            let c = credit(st.vt, now, st.percent);
            let chunk = ns(CREDIT_STEP) * u64::from(st.percent) / 100;
            if self.held == Held::Credit && c < chunk {
                0
            } else {
                c
            }
        };
        let (room, held) = if l.blocked {
            (0, Held::Blocked)
        } else if token_hold || st.peer_hold {
            (0, Held::Peer)
        } else if st.measuring && !st.low {
            // Measuring only: nothing holds it back (but a low-priority process keeps its
            // queue as short as a limited one's, limit or not: a high-priority process that
            // comes finds no deep queue before it).
            (u64::MAX, Held::No)
        } else if credit_room == 0 {
            (0, Held::Credit)
        } else if pace_room == 0 {
            (0, Held::Queue)
        } else {
            (credit_room.min(pace_room), Held::No)
        };
        self.held = held;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let mut launches = if room == 0 {
            0
        } else if room == u64::MAX {
            MAX_ROOM
        } else {
            #[allow(clippy::cast_precision_loss)]
            let n = (room as f64 / self.recent_price().max(1.0)).ceil();
            (n.clamp(1.0, MAX_ROOM as f64)) as u64
        };
        // Nothing priced yet: each launch is charged FIRST_PRICE, a guess that may be a
        // hundredth of what its kernel costs. At most PROBE launches pass before a sample
        // prices them (and one more with each new request, if a sample is lost).
        let probing = self.prices.is_empty() && room > 0 && room < u64::MAX;
        if probing {
            launches = launches.min(PROBE.saturating_sub(l.launched));
        }
        (launches, probing)
    }

    /// Phase 7: sampling. It times a launch on its own while kernels go unpriced, and now and
    /// then; in an exclusive request, once the others have had time to stop. Returns the
    /// gate's budget and the launch to time.
    fn sample(
        &mut self,
        l: &Look<'_>,
        now: u64,
        mut launches: u64,
        probing: bool,
        exclusive: bool,
        settling: bool,
    ) -> (u64, Option<u64>) {
        let since = now.saturating_sub(self.last_sample);
        let want_sample = match self.exclusive_since {
            Some(_) => !settling,
            None if probing => !self.asked || since >= ns(SAMPLE_REFRESH),
            None => {
                since >= ns(SAMPLE_EVERY)
                    && (self.unknown > 0 || since >= ns(SAMPLE_REFRESH))
                    && l.launched > 0
            }
        };
        // Which launch: one of the next few, drawn pseudo-randomly, so that the samples fall
        // on every kernel of a step and not always on the one after a pause.
        // A request stands until its launch has come (or a long while: the program stopped).
        if let Some((at, since)) = self.sample_pending
            && (l.launched > at || now.saturating_sub(since) > ns(SAMPLE_REFRESH))
        {
            self.sample_pending = None;
        }
        // Before the first price, one more launch for a sample, but only once the last sample
        // came back or was lost: a new process beside an active one asks for an exclusive
        // sample at every look, and admitting a launch for each (every 25 µs, charged the
        // first guess) let 1 ms kernels run unlimited until the first bracket returned behind
        // them (389 launches in 10 ms; the simulator's doctor check at 83-97 % of a 50 % limit).
        if self
            .sample_out
            .is_some_and(|t| now.saturating_sub(t) > ns(SAMPLE_REFRESH))
        {
            self.sample_out = None;
        }
        if probing
            && launches == 0
            && want_sample
            && self.sample_pending.is_none()
            && self.sample_out.is_none()
        {
            launches = 1;
        }
        let budget = l.launched.saturating_add(launches);
        let sample = (want_sample && launches > 0 && self.sample_pending.is_none()).then(|| {
            self.seed ^= self.seed << 13;
            self.seed ^= self.seed >> 7;
            self.seed ^= self.seed << 17;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let span = if exclusive {
                1
            } else {
                (self.per_look.ceil() as u64).clamp(1, 64).min(launches)
            };
            l.launched + self.seed % span
        });
        if let Some(at) = sample {
            self.sample_out = Some(now);
            self.asked = true;
            self.last_sample = now;
            self.unknown = 0;
            self.sample_pending = Some((at, now));
        }
        (budget, sample)
    }

    /// Phase 7 too: whether to run the restart probe (often until the restart is believed,
    /// then every [`PROBE_EVERY`]) and an overhead bracket (once a second).
    fn calibrate(&mut self, now: u64) -> (bool, bool) {
        let probe = now >= self.probe_at;
        if probe {
            let every = if self.calibration.restart_believed() {
                PROBE_EVERY
            } else {
                PROBE_SOON
            };
            self.probe_at = now.saturating_add(ns(every));
        }
        let overhead = now.saturating_sub(self.last_overhead) >= ns(Duration::from_secs(1));
        if overhead {
            self.last_overhead = now;
        }
        (probe, overhead)
    }

    /// Phase 8: when to look again. Waiting for its turn, it is woken by the release: it looks
    /// again only now and then (many waiters cost little); running beside others, it looks
    /// often (a light peer's synchronisation, a waiter owed the GPU).
    fn next_look(
        &self,
        l: &Look<'_>,
        now: u64,
        around: &Around,
        st: &Standing,
        token_hold: bool,
        exclusive: bool,
    ) -> u64 {
        let poll = if token_hold && !st.peer_hold && !l.holding {
            if around.holder {
                ns(HELD_WAIT)
            } else {
                ns(WAIT_POLL)
            }
        } else if around.active || exclusive {
            ns(SHARED_POLL)
        } else {
            ns(ALONE_POLL)
        };
        let mut next = now.saturating_add(poll);
        match self.held {
            Held::Credit => {
                next = next.min(credit_at(st.vt).saturating_add(ns(CREDIT_STEP)));
            }
            Held::Queue => {
                // While the queue still holds half its depth, and as much as its looks have
                // come late lately.
                let ahead = (ns(st.depth) / 2).max(self.late);
                next = next.min(now.saturating_add(self.paced).saturating_sub(ahead));
            }
            Held::Blocked => next = now.saturating_add(ns(Duration::from_millis(10))),
            _ => {}
        }
        next.max(now.saturating_add(1))
    }
}

/// Whether a process owes nothing at this look (`Decision::unthrottled`): HAMi's monitor says
/// it is alone, or it is work-conserving and no live peer is heavy (`heavy_peer`).
fn owes_nothing(l: &Look<'_>, heavy_peer: bool) -> bool {
    l.monitor_alone || (l.work_conserving && !heavy_peer)
}
