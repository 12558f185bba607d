//! The discrete-event model: cores, caches, the memory controller with its
//! read queue, write sub-queues, persistence credits and commit logic, and
//! the media's banks.
//!
//! # Events and determinism
//!
//! Events sit in one priority queue ordered by `(cycle, sequence number)`;
//! the sequence number is the order in which they were scheduled, so ties
//! resolve the same way on every run and the model has no other source of
//! order (no hash maps are iterated, programs come from seeded
//! generators). A core runs ahead of the global clock only through
//! `Compute` ops; every op that touches memory is executed at the global
//! time, so the memory controller sees requests in time order.
//!
//! # Cores (P4 Table II)
//!
//! Instructions retire at `retire_width` per cycle. A load occupies a
//! reorder-buffer slot until its data is back: a core may run at most
//! `rob` instructions past its oldest incomplete load (cache hits complete
//! after their level's hit time, misses when the media returns the line).
//! Writes that leave the core (a `clwb` of a dirty line, a non-temporal
//! store, a dirty victim of the L3) wait in a write buffer of
//! `write_buffer` entries, in order, until the memory controller accepts
//! them; a full buffer stalls the core, and a fence waits for it to empty.
//!
//! # Memory controller (P4 §III)
//!
//! - A read queue (`read_queue` entries); reads have priority over writes.
//! - `sub_queues` write sub-queues of `queue_entries` each, with up to
//!   `ranges_per_queue` address-range registers, plus a default queue for
//!   writes outside every range. Each task's range is bound at start to
//!   the sub-queue with the fewest ranges (`PersistenceMalloc`'s
//!   lowest-utilisation policy); when every register is taken the task
//!   stays on the default queue. The structure is the same in every mode,
//!   so modes differ only in what a commit does.
//! - A queue entry is one media block (P0's 256 bytes on the Optane-like
//!   profile, a line on PCM): a line whose block already waits in the
//!   line's queue joins that entry instead of taking one (write
//!   combining), even when the queue is full. A partial block waits up to
//!   the profile's `combine_ns` after its first line for the rest. A
//!   write leaves its queue
//!   when its bank is free (first ready entry of each queue, queues taken
//!   round-robin) and writes every line it gathered in one block write.
//! - **Credits** (fine-grained mode): each queue has `queue_entries`
//!   credits. Issuing a write to the media takes one; the memory
//!   controller learns of completions only through a credit-synchronisation
//!   read, which it sends when a credit reaches 0 (P4's simulated policy)
//!   and which answers `max − writes still at the media`. At 0 credits the
//!   queue issues nothing until a sync answers with more.
//! - **Commit confirmation**: once the committing queue (global: every
//!   queue) is empty, the controller sends one sync read; the NVM
//!   controller answers it when the credit is back at its maximum (every
//!   write of the queue done at the media), or after one read latency if
//!   it already is. Global mode thereby costs exactly one sync per commit
//!   period, as P4 models it (§IV-B).
//! - Invariants checked in debug builds and by the tests: a queue never
//!   holds more than `queue_entries` writes; credits never exceed the
//!   maximum; no write is accepted into a queue whose commit flag is set
//!   (global: into any queue during a commit period); a commit completes
//!   only when its queue (global: every queue) is empty and none of its
//!   writes is still at the media.
//!
//! # Media
//!
//! `banks` independent banks split over `channels`; block `b` (line `l`'s
//! block is `l / block_lines`) lives in bank `b mod banks` (mixed with the
//! core's number, so tasks do not all start on bank 0). An access holds
//! its bank for the profile's busy time and its channel's data bus for
//! `bus_ns` per line it moves, and completes after the profile's latency. A credit-sync read occupies a channel's bus but no bank, and
//! takes one read latency.

use crate::SimError;
use crate::cache::{Hierarchy, Level};
use crate::config::{CacheGeometry, Config, Mode};
use crate::program::{CORE_SHIFT, Op, Program};
use crate::stats::Stats;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// How long a run lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Every core replays its program in a loop for this many cycles (P4
    /// runs both modes for the same number of cycles and compares IPC).
    Cycles(u64),
    /// Every core runs its program once; the run ends when the last core is
    /// done and the last write has reached the media.
    ToCompletion,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Wake(usize),
    BankFree(usize),
    ReadDone {
        core: usize,
        id: u64,
    },
    /// A block write of `lines` lines completes (`partial`: fewer lines
    /// than a block).
    WriteDone {
        queue: usize,
        lines: u32,
        partial: bool,
    },
    /// A credit sync of `queue` answers.
    CreditSync {
        queue: usize,
    },
    /// The commit-confirming sync of `queue` (global: `usize::MAX`) reaches
    /// the NVM controller.
    CommitSync {
        queue: usize,
    },
    /// Writes reach the controller (it re-examines the write buffers).
    Arrive,
}

const GLOBAL: usize = usize::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    No,
    Load,
    ReadQueue,
    WriteBuffer,
    Fence,
    Commit,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CommitPhase {
    None,
    /// Waiting for the write buffer to empty (the implicit fence).
    Fencing,
    /// Handed to the memory controller.
    Waiting,
    /// The memory controller said it is durable.
    Done,
}

#[derive(Debug)]
struct Core<'a> {
    /// Borrowed from the program: tasks replaying one trace share it.
    ops: &'a [Op],
    pc: usize,
    /// The op the task began at ([`Task::start`]).
    start: usize,
    /// The task went past the end of its ops and began again at 0.
    wrapped: bool,
    looping: bool,
    base: u64,
    queue: usize,
    time: u64,
    carry: u64,
    instr: u64,
    partial: u32,
    /// Loads in flight: (instruction index, id, completion cycle if known).
    loads: VecDeque<(u64, u64, Option<u64>)>,
    next_load: u64,
    /// Writes on their way to the controller: (line, cycle it arrives there).
    pending: VecDeque<(u64, u64)>,
    /// When the controller's acknowledgment of the last accepted write is
    /// back at the core (a fence waits for it).
    acked_at: u64,
    block: Block,
    blocked_since: u64,
    wake_scheduled: bool,
    commit: CommitPhase,
    commit_start: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Confirm {
    None,
    /// Sent; the answer is due at the NVM controller.
    Sent,
    /// Reached the NVM controller while writes were still at the media: it
    /// answers when the last one completes.
    Held,
}

/// One write-queue entry: a media block and the lines of it gathered so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    bank: usize,
    block: u64,
    /// Bit `i`: line `i` of the block (blocks hold at most 64 lines).
    lines: u64,
    /// Before this cycle a partial block is not issued: the rest of it may
    /// still come ([`crate::NvmProfile::combine_ns`]).
    hold_until: u64,
}

#[derive(Debug)]
struct Mc {
    /// Reads waiting: (bank, core, load id).
    read_q: VecDeque<(usize, usize, u64)>,
    /// Write queues: `sub_queues` sub-queues then the default queue.
    queues: Vec<VecDeque<Entry>>,
    /// Address-range registers: (first line, end line, queue).
    ranges: Vec<(u64, u64, usize)>,
    inflight: Vec<u32>,
    credit: Vec<u32>,
    credit_sync: Vec<bool>,
    flag: Vec<bool>,
    owner: Vec<Option<usize>>,
    waiters: Vec<VecDeque<usize>>,
    confirm: Vec<Confirm>,
    /// Global mode: the cores whose commits the running period covers.
    period: Option<Vec<usize>>,
    /// Global mode without merging: commits waiting for their own period.
    global_waiters: VecDeque<usize>,
    global_confirm: Confirm,
    bank_free: Vec<u64>,
    bus_free: Vec<u64>,
    rr: usize,
}

/// Cycle counts derived once from the configuration.
#[derive(Clone, Copy, Debug)]
struct Timing {
    read: u64,
    read_busy: u64,
    write: u64,
    write_busy: u64,
    bus: u64,
    path: u64,
    combine: u64,
}

/// What one core runs: a program, begun at op `start` (an op boundary).
/// With [`Run::Cycles`] the core loops over the program from there; with
/// [`Run::ToCompletion`] it runs every op once, from `start` to the end
/// and then from 0 to `start` — the same as running the program rotated
/// left by `start`, without a copy of it (16 tasks of one long recorded
/// trace share its ops).
#[derive(Clone, Copy, Debug)]
pub struct Task<'a> {
    pub program: &'a Program,
    pub start: usize,
}

impl<'a> Task<'a> {
    /// `cores` tasks of `program`, task `c` begun at op
    /// `c × len / cores`, so they do not move in lockstep.
    pub fn staggered(program: &'a Program, cores: usize) -> Vec<Task<'a>> {
        (0..cores)
            .map(|c| Task {
                program,
                start: c * program.ops.len() / cores.max(1),
            })
            .collect()
    }
}

/// One simulation: build it with [`Sim::new`], run it with [`Sim::run`].
pub struct Sim<'a> {
    cfg: Config,
    t: Timing,
    run: Run,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    cores: Vec<Core<'a>>,
    caches: Hierarchy,
    mc: Mc,
    stats: Stats,
    wb: Vec<u64>,
}

impl<'a> Sim<'a> {
    /// A simulation of `programs`, one per core (at most 64 cores).
    pub fn new(cfg: Config, programs: &'a [Program], run: Run) -> Result<Sim<'a>, SimError> {
        let tasks: Vec<Task<'a>> = programs
            .iter()
            .map(|program| Task { program, start: 0 })
            .collect();
        Sim::with_tasks(cfg, &tasks, run)
    }

    /// A simulation of `tasks`, one per core (at most 64 cores).
    pub fn with_tasks(cfg: Config, tasks: &[Task<'a>], run: Run) -> Result<Sim<'a>, SimError> {
        cfg.validate()?;
        let n = tasks.len();
        if let Some(t) = tasks
            .iter()
            .find(|t| t.start > 0 && t.start >= t.program.ops.len())
        {
            return Err(SimError::Config(format!(
                "a task begins at op {} of {}",
                t.start,
                t.program.ops.len()
            )));
        }
        let programs: Vec<&'a Program> = tasks.iter().map(|t| t.program).collect();
        if n > 64 {
            return Err(SimError::Config(format!("{n} cores: at most 64")));
        }
        if let Some(p) = programs.iter().find(|p| p.footprint >= 1 << CORE_SHIFT) {
            return Err(SimError::Config(format!(
                "a program spans {} lines, more than one core's address space",
                p.footprint
            )));
        }
        let t = Timing {
            read: cfg.cycles(cfg.nvm.read_ns),
            read_busy: cfg.cycles(cfg.nvm.read_busy_ns),
            write: cfg.cycles(cfg.nvm.write_ns),
            write_busy: cfg.cycles(cfg.nvm.write_busy_ns),
            bus: cfg.cycles(cfg.bus_ns),
            path: cfg.cycles(cfg.mc_path_ns),
            combine: (cfg.nvm.combine_ns * cfg.ghz).ceil() as u64,
        };
        let nq = cfg.sub_queues + 1;
        let mut mc = Mc {
            read_q: VecDeque::new(),
            queues: vec![VecDeque::new(); nq],
            ranges: Vec::new(),
            inflight: vec![0; nq],
            credit: vec![cfg.queue_entries as u32; nq],
            credit_sync: vec![false; nq],
            flag: vec![false; nq],
            owner: vec![None; nq],
            waiters: vec![VecDeque::new(); nq],
            confirm: vec![Confirm::None; nq],
            period: None,
            global_waiters: VecDeque::new(),
            global_confirm: Confirm::None,
            bank_free: vec![0; cfg.banks],
            bus_free: vec![0; cfg.channels],
            rr: 0,
        };
        let mut bound = vec![0usize; cfg.sub_queues];
        let mut cores = Vec::with_capacity(n);
        for (c, (p, task)) in programs.iter().zip(tasks).enumerate() {
            let base = (c as u64) << CORE_SHIFT;
            // PersistenceMalloc: the least-utilised sub-queue with a free
            // range register (lowest index on ties), else the default queue.
            let q = (0..cfg.sub_queues)
                .filter(|&q| bound[q] < cfg.ranges_per_queue)
                .min_by_key(|&q| (bound[q], q));
            let queue = match q {
                Some(q) => {
                    bound[q] += 1;
                    mc.ranges.push((base, base + p.footprint.max(1), q));
                    q
                }
                None => cfg.sub_queues,
            };
            cores.push(Core {
                ops: &p.ops,
                pc: task.start,
                start: task.start,
                wrapped: false,
                looping: matches!(run, Run::Cycles(_)),
                base,
                queue,
                time: 0,
                carry: 0,
                instr: 0,
                partial: 0,
                loads: VecDeque::new(),
                next_load: 0,
                pending: VecDeque::new(),
                acked_at: 0,
                block: Block::No,
                blocked_since: 0,
                wake_scheduled: false,
                commit: CommitPhase::None,
                commit_start: 0,
            });
        }
        let l3 = CacheGeometry { ..cfg.l3_per_core };
        let caches = Hierarchy::new(n, cfg.l1, cfg.l2, l3);
        let stats = Stats {
            mode: cfg.mode,
            cores: n,
            cycles: 0,
            instructions: vec![0; n],
            commit_latencies: Vec::new(),
            sync_reads: 0,
            commit_syncs: 0,
            credit_syncs: 0,
            loads: 0,
            stores: 0,
            media_reads: 0,
            media_writes: 0,
            media_blocks: 0,
            media_partial_blocks: 0,
            last_write_done: 0,
            write_stall_cycles: 0,
            events: 0,
        };
        let mut sim = Sim {
            cfg,
            t,
            run,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            cores,
            caches,
            mc,
            stats,
            wb: Vec::new(),
        };
        for c in 0..n {
            sim.schedule(0, Ev::Wake(c));
            sim.cores[c].wake_scheduled = true;
        }
        Ok(sim)
    }

    /// The sub-queue core `core` commits on (the default queue's index,
    /// `sub_queues`, when it got no range register).
    pub fn queue_of_core(&self, core: usize) -> usize {
        self.cores[core].queue
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    fn budget(&self) -> u64 {
        match self.run {
            Run::Cycles(b) => b,
            Run::ToCompletion => u64::MAX,
        }
    }

    /// Runs to the end and returns the statistics.
    pub fn run(mut self) -> Stats {
        let budget = self.budget();
        while let Some(Reverse((at, _, ev))) = self.heap.pop() {
            if at > budget {
                break;
            }
            debug_assert!(at >= self.now, "time went backwards");
            self.now = at;
            self.stats.events += 1;
            match ev {
                Ev::Wake(c) => {
                    self.cores[c].wake_scheduled = false;
                    self.run_core(c);
                }
                Ev::BankFree(_) => {}
                Ev::ReadDone { core, id } => self.read_done(core, id),
                Ev::WriteDone {
                    queue,
                    lines,
                    partial,
                } => self.write_done(queue, lines, partial),
                Ev::CreditSync { queue } => self.credit_answer(queue),
                Ev::CommitSync { queue } => self.confirm_arrives(queue),
                Ev::Arrive => {}
            }
            self.settle();
            self.check_invariants();
        }
        self.stats.cycles = match self.run {
            Run::Cycles(b) => b,
            Run::ToCompletion => self.cores.iter().map(|c| c.time).max().unwrap_or(0),
        };
        for (i, c) in self.cores.iter().enumerate() {
            self.stats.instructions[i] = c.instr;
        }
        self.stats
    }

    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let max = self.cfg.queue_entries;
            for (q, queue) in self.mc.queues.iter().enumerate() {
                assert!(
                    queue.len() <= max,
                    "queue {q} holds {} > {max}",
                    queue.len()
                );
                assert!(self.mc.credit[q] as usize <= max, "credit above maximum");
                if self.cfg.mode == Mode::FineGrained {
                    // Credits bound what one queue has at the media.
                    assert!(
                        self.mc.inflight[q] as usize <= max,
                        "queue {q}: {} writes at the media with {max} credits",
                        self.mc.inflight[q]
                    );
                    assert_eq!(self.mc.flag[q], self.mc.owner[q].is_some());
                }
            }
            if self.cfg.mode == Mode::Global && self.mc.period.is_none() {
                assert!(self.mc.global_waiters.is_empty());
            }
        }
    }

    // ---- cores ------------------------------------------------------------

    fn block(&mut self, c: usize, why: Block) {
        let core = &mut self.cores[c];
        core.block = why;
        core.blocked_since = self.now;
    }

    /// Lets a blocked core re-examine its condition at the current cycle.
    fn wake(&mut self, c: usize) {
        let core = &mut self.cores[c];
        if core.block != Block::No && core.block != Block::Done && !core.wake_scheduled {
            core.wake_scheduled = true;
            let now = self.now;
            self.schedule(now, Ev::Wake(c));
        }
    }

    /// Wakes a core blocked on its commit when the controller's answer
    /// reaches it, one path latency from now.
    fn wake_later(&mut self, c: usize) {
        let core = &mut self.cores[c];
        if core.block == Block::Commit && !core.wake_scheduled {
            core.wake_scheduled = true;
            let at = self.now + self.t.path;
            self.schedule(at, Ev::Wake(c));
        }
    }

    fn retire(&mut self, c: usize, n: u64) {
        let w = self.cfg.retire_width;
        let core = &mut self.cores[c];
        core.instr += n;
        core.carry += n;
        core.time += core.carry / w;
        core.carry %= w;
    }

    /// Instructions the core may still issue past its oldest incomplete
    /// load, after retiring loads that are done by its local time. `None`
    /// means it must wait for a load whose completion is not known yet.
    fn rob_room(&mut self, c: usize) -> Option<u64> {
        let rob = self.cfg.rob;
        let core = &mut self.cores[c];
        loop {
            let Some(&(idx, _, done)) = core.loads.front() else {
                return Some(u64::MAX);
            };
            match done {
                Some(d) if d <= core.time => {
                    core.loads.pop_front();
                }
                _ => {
                    let room = (idx + rob).saturating_sub(core.instr);
                    if room > 0 {
                        return Some(room);
                    }
                    match done {
                        Some(d) => core.time = d,
                        None => return None,
                    }
                }
            }
        }
    }

    fn run_core(&mut self, c: usize) {
        let now = self.now;
        let budget = self.budget();
        {
            let core = &mut self.cores[c];
            if core.block == Block::Done {
                return;
            }
            if core.block != Block::No {
                if matches!(
                    core.block,
                    Block::WriteBuffer | Block::Fence | Block::Commit
                ) {
                    self.stats.write_stall_cycles += now - core.blocked_since;
                }
                core.block = Block::No;
            }
            core.time = core.time.max(now);
        }
        loop {
            if self.cores[c].time >= budget {
                self.cores[c].block = Block::Done;
                return;
            }
            let Some(room) = self.rob_room(c) else {
                self.block(c, Block::Load);
                return;
            };
            let core = &mut self.cores[c];
            if core.pc == core.ops.len() {
                // A looping task goes round again; one begun past op 0
                // runs the ops before its start once.
                if !core.ops.is_empty() && (core.looping || (core.start > 0 && !core.wrapped)) {
                    core.pc = 0;
                    core.wrapped = true;
                } else {
                    core.block = Block::Done;
                    return;
                }
            }
            if !core.looping && core.wrapped && core.pc == core.start {
                core.block = Block::Done;
                return;
            }
            let op = core.ops[core.pc];
            if let Op::Compute(n) = op {
                let rem = if core.partial > 0 { core.partial } else { n };
                let take = (rem as u64).min(room) as u32;
                core.partial = rem - take;
                if core.partial == 0 {
                    core.pc += 1;
                }
                self.retire(c, take as u64);
                continue;
            }
            // Everything else touches memory: run it at the global time.
            if core.time > now {
                core.wake_scheduled = true;
                let at = core.time;
                self.schedule(at, Ev::Wake(c));
                return;
            }
            if !self.exec_memory_op(c, op) {
                return;
            }
        }
    }

    /// Executes a memory op at the current cycle; false when the core blocked.
    fn exec_memory_op(&mut self, c: usize, op: Op) -> bool {
        let cap = self.cfg.write_buffer;
        let mode = self.cfg.mode;
        let base = self.cores[c].base;
        let writes = matches!(op, Op::Store(_) | Op::Flush(_) | Op::NtStore(_));
        if writes && self.cores[c].pending.len() >= cap {
            self.block(c, Block::WriteBuffer);
            return false;
        }
        let mut wb = std::mem::take(&mut self.wb);
        wb.clear();
        match op {
            // `run_core` retires compute ops itself; this arm only keeps
            // the match total.
            Op::Compute(n) => {
                self.retire(c, n as u64);
                self.cores[c].pc += 1;
            }
            Op::Load(l) => {
                if self.mc.read_q.len() >= self.cfg.read_queue {
                    self.wb = wb;
                    self.block(c, Block::ReadQueue);
                    return false;
                }
                let line = base + l;
                let level = self.caches.access(c, line, false, &mut wb);
                let core = &mut self.cores[c];
                let id = core.next_load;
                core.next_load += 1;
                let done = match level {
                    Level::L1 => Some(self.now + self.cfg.l1.hit_cycles),
                    Level::L2 => Some(self.now + self.cfg.l2.hit_cycles),
                    Level::L3 => Some(self.now + self.cfg.l3_per_core.hit_cycles),
                    Level::Memory => None,
                };
                core.loads.push_back((core.instr, id, done));
                if done.is_none() {
                    let b = self.bank_of(line);
                    self.mc.read_q.push_back((b, c, id));
                }
                self.stats.loads += 1;
                self.retire(c, 1);
                self.cores[c].pc += 1;
            }
            Op::Store(l) => {
                self.caches.access(c, base + l, true, &mut wb);
                self.stats.stores += 1;
                self.retire(c, 1);
                self.cores[c].pc += 1;
            }
            Op::Flush(l) => {
                if mode != Mode::Eadr && self.caches.writeback(c, base + l) {
                    wb.push(base + l);
                }
                self.retire(c, 1);
                self.cores[c].pc += 1;
            }
            Op::NtStore(l) => {
                self.caches.invalidate(c, base + l);
                wb.push(base + l);
                self.stats.stores += 1;
                self.retire(c, 1);
                self.cores[c].pc += 1;
            }
            Op::Fence => {
                if !self.fenced(c) {
                    self.wb = wb;
                    return false;
                }
                self.retire(c, 1);
                self.cores[c].pc += 1;
            }
            Op::Commit => {
                self.wb = wb;
                return self.commit_op(c);
            }
        }
        if !wb.is_empty() {
            let arrive = self.now + self.t.path;
            self.cores[c]
                .pending
                .extend(wb.drain(..).map(|l| (l, arrive)));
            // The controller looks at them when they arrive.
            self.schedule(arrive, Ev::Arrive);
        }
        self.wb = wb;
        true
    }

    /// True when every write of core `c` has been accepted and acknowledged
    /// (what `sfence` waits for); else blocks it on [`Block::Fence`], with a
    /// wake-up at the acknowledgment when only that is missing.
    fn fenced(&mut self, c: usize) -> bool {
        if !self.cores[c].pending.is_empty() {
            self.block(c, Block::Fence);
            return false;
        }
        let at = self.cores[c].acked_at;
        if at > self.now {
            self.block(c, Block::Fence);
            self.cores[c].wake_scheduled = true;
            self.schedule(at, Ev::Wake(c));
            return false;
        }
        true
    }

    fn commit_op(&mut self, c: usize) -> bool {
        let now = self.now;
        if self.cores[c].commit == CommitPhase::None {
            self.cores[c].commit = CommitPhase::Fencing;
            self.cores[c].commit_start = now;
        }
        if self.cores[c].commit == CommitPhase::Fencing {
            if !self.fenced(c) {
                return false;
            }
            match self.cfg.mode {
                Mode::Adr | Mode::Eadr => self.cores[c].commit = CommitPhase::Done,
                Mode::Global => {
                    self.cores[c].commit = CommitPhase::Waiting;
                    match &mut self.mc.period {
                        Some(joined) if self.cfg.merge_global_commits => joined.push(c),
                        Some(_) => self.mc.global_waiters.push_back(c),
                        None => {
                            self.mc.period = Some(vec![c]);
                            self.check_global();
                        }
                    }
                }
                Mode::FineGrained => {
                    self.cores[c].commit = CommitPhase::Waiting;
                    let q = self.cores[c].queue;
                    if self.mc.owner[q].is_some() {
                        self.mc.waiters[q].push_back(c);
                    } else {
                        self.start_fg(q, c);
                    }
                }
            }
        }
        if self.cores[c].commit == CommitPhase::Waiting {
            self.block(c, Block::Commit);
            return false;
        }
        // Done.
        let core = &mut self.cores[c];
        let lat = now - core.commit_start;
        core.commit = CommitPhase::None;
        self.stats.commit_latencies.push(lat);
        self.retire(c, 1);
        self.cores[c].pc += 1;
        true
    }

    // ---- memory controller -------------------------------------------------

    fn queue_for(&self, line: u64) -> usize {
        self.mc
            .ranges
            .iter()
            .find(|&&(s, e, _)| line >= s && line < e)
            .map(|&(_, _, q)| q)
            .unwrap_or(self.cfg.sub_queues)
    }

    fn closed(&self, q: usize) -> bool {
        match self.cfg.mode {
            Mode::Global => self.mc.period.is_some(),
            Mode::FineGrained => self.mc.flag[q],
            Mode::Adr | Mode::Eadr => false,
        }
    }

    /// After every event: hands buffered writes to the controller and starts
    /// media accesses until neither makes progress.
    fn settle(&mut self) {
        loop {
            let moved = self.accept_all();
            let issued = self.dispatch();
            if !moved && !issued {
                break;
            }
        }
    }

    /// Moves core `c`'s buffered writes into their queues, in order, while
    /// the head's queue has room and accepts writes; true if any moved.
    fn accept(&mut self, c: usize) -> bool {
        let mut moved = false;
        while let Some(&(line, arrives)) = self.cores[c].pending.front() {
            if arrives > self.now {
                break;
            }
            let q = self.queue_for(line);
            if self.closed(q) {
                break;
            }
            let bl = self.cfg.nvm.block_lines;
            let (block, bit) = (line / bl, 1u64 << (line % bl));
            // Write combining: the block's entry still waiting takes the
            // line (a one-line block never has another line to take).
            let joined = bl > 1
                && match self.mc.queues[q].iter_mut().find(|e| e.block == block) {
                    Some(e) => {
                        e.lines |= bit;
                        true
                    }
                    None => false,
                };
            if !joined {
                if self.mc.queues[q].len() >= self.cfg.queue_entries {
                    break;
                }
                let bank = self.bank_of(line);
                let hold_until = if bl > 1 {
                    let at = self.now + self.t.combine;
                    // The controller looks at the entry again then.
                    self.schedule(at, Ev::Arrive);
                    at
                } else {
                    0
                };
                self.mc.queues[q].push_back(Entry {
                    bank,
                    block,
                    lines: bit,
                    hold_until,
                });
            }
            self.cores[c].pending.pop_front();
            let ack = self.now + self.t.path;
            let core = &mut self.cores[c];
            core.acked_at = core.acked_at.max(ack);
            moved = true;
        }
        if moved {
            let core = &self.cores[c];
            let ready = match core.block {
                Block::WriteBuffer => core.pending.len() < self.cfg.write_buffer,
                Block::Fence => core.pending.is_empty(),
                _ => false,
            };
            if ready {
                self.wake(c);
            }
        }
        moved
    }

    /// [`accept`](Self::accept) for every core, starting one further each
    /// time so no core is always first.
    fn accept_all(&mut self) -> bool {
        let n = self.cores.len();
        if n == 0 {
            return false;
        }
        let start = self.mc.rr % n;
        self.mc.rr = self.mc.rr.wrapping_add(1);
        let mut moved = false;
        for k in 0..n {
            let c = (start + k) % n;
            if !self.cores[c].pending.is_empty() {
                moved |= self.accept(c);
            }
        }
        moved
    }

    /// The bank holding `line`'s media block.
    fn bank_of(&self, line: u64) -> usize {
        let block = line / self.cfg.nvm.block_lines;
        ((block ^ (line >> CORE_SHIFT)) % self.cfg.banks as u64) as usize
    }

    /// Reserves the channel's data bus for one line; returns the start.
    fn bus(&mut self, bank_or_queue: usize) -> u64 {
        self.bus_lines(bank_or_queue, 1)
    }

    /// Reserves the channel's data bus for `lines` lines back to back.
    fn bus_lines(&mut self, bank_or_queue: usize, lines: u64) -> u64 {
        let ch = bank_or_queue % self.cfg.channels;
        let start = self.now.max(self.mc.bus_free[ch]);
        self.mc.bus_free[ch] = start + self.t.bus * lines;
        start
    }

    /// Starts every access whose bank is free: reads first (oldest first),
    /// then writes, queues taken round-robin, first ready entry of each.
    /// True when a write left its queue (room for more).
    fn dispatch(&mut self) -> bool {
        let now = self.now;
        if self.mc.bank_free.iter().all(|&f| f > now) {
            // Nothing can start; but an emptied queue may still have a
            // commit to confirm.
            for q in 0..self.mc.queues.len() {
                if self.mc.queues[q].is_empty() {
                    self.queue_emptied(q);
                }
            }
            return false;
        }
        let mut i = 0;
        let mut freed_read = false;
        while i < self.mc.read_q.len() {
            let (b, core, id) = self.mc.read_q[i];
            if self.mc.bank_free[b] <= now {
                self.mc.read_q.remove(i);
                let start = self.bus(b);
                self.mc.bank_free[b] = start + self.t.read_busy;
                self.schedule(start + self.t.read_busy, Ev::BankFree(b));
                self.schedule(start + self.t.read, Ev::ReadDone { core, id });
                freed_read = true;
            } else {
                i += 1;
            }
        }
        if freed_read {
            for c in 0..self.cores.len() {
                if self.cores[c].block == Block::ReadQueue {
                    self.wake(c);
                }
            }
        }
        let nq = self.mc.queues.len();
        let credits = self.cfg.mode == Mode::FineGrained;
        let mut issued = false;
        for k in 0..nq {
            let q = (self.mc.rr + k) % nq;
            let mut j = 0;
            while j < self.mc.queues[q].len() {
                if credits && self.mc.credit[q] == 0 {
                    break;
                }
                let Entry {
                    bank: b,
                    lines,
                    hold_until,
                    ..
                } = self.mc.queues[q][j];
                let whole = lines.count_ones() as u64 == self.cfg.nvm.block_lines;
                if self.mc.bank_free[b] > now || (!whole && hold_until > now) {
                    j += 1;
                    continue;
                }
                self.mc.queues[q].remove(j);
                let n = lines.count_ones();
                let start = self.bus_lines(b, n as u64);
                self.mc.bank_free[b] = start + self.t.write_busy;
                self.schedule(start + self.t.write_busy, Ev::BankFree(b));
                self.schedule(
                    start + self.t.write,
                    Ev::WriteDone {
                        queue: q,
                        lines: n,
                        partial: (n as u64) < self.cfg.nvm.block_lines,
                    },
                );
                self.mc.inflight[q] += 1;
                issued = true;
                if credits {
                    self.mc.credit[q] -= 1;
                    if self.mc.credit[q] == 0 && !self.mc.credit_sync[q] {
                        self.send_credit_sync(q);
                    }
                }
            }
            if self.mc.queues[q].is_empty() {
                self.queue_emptied(q);
            }
        }
        issued
    }

    fn send_credit_sync(&mut self, q: usize) {
        self.mc.credit_sync[q] = true;
        self.stats.sync_reads += 1;
        self.stats.credit_syncs += 1;
        let start = self.bus(q);
        self.schedule(start + self.t.read, Ev::CreditSync { queue: q });
    }

    fn credit_answer(&mut self, q: usize) {
        self.mc.credit_sync[q] = false;
        self.mc.credit[q] = self.cfg.queue_entries as u32 - self.mc.inflight[q];
        if self.mc.credit[q] == 0 {
            // Every credit is still at the media: ask again.
            self.send_credit_sync(q);
        }
    }

    fn read_done(&mut self, c: usize, id: u64) {
        self.stats.media_reads += 1;
        let now = self.now;
        let core = &mut self.cores[c];
        if let Some(l) = core.loads.iter_mut().find(|l| l.1 == id) {
            l.2 = Some(now);
        }
        if core.block == Block::Load {
            self.wake(c);
        }
    }

    fn write_done(&mut self, q: usize, lines: u32, partial: bool) {
        self.stats.media_writes += lines as u64;
        self.stats.media_blocks += 1;
        self.stats.media_partial_blocks += partial as u64;
        self.stats.last_write_done = self.now;
        self.mc.inflight[q] -= 1;
        match self.cfg.mode {
            Mode::FineGrained
                if self.mc.inflight[q] == 0 && self.mc.confirm[q] == Confirm::Held =>
            {
                self.finish_fg(q)
            }
            Mode::Global
                if self.mc.global_confirm == Confirm::Held
                    && self.mc.inflight.iter().all(|&n| n == 0) =>
            {
                self.finish_global()
            }
            _ => {}
        }
    }

    fn queue_emptied(&mut self, q: usize) {
        match self.cfg.mode {
            Mode::FineGrained
                if self.mc.owner[q].is_some() && self.mc.confirm[q] == Confirm::None =>
            {
                self.send_confirm(q)
            }
            Mode::Global => self.check_global(),
            _ => {}
        }
    }

    fn send_confirm(&mut self, q: usize) {
        self.stats.sync_reads += 1;
        self.stats.commit_syncs += 1;
        let start = self.bus(if q == GLOBAL { 0 } else { q });
        self.schedule(start + self.t.read, Ev::CommitSync { queue: q });
        if q == GLOBAL {
            self.mc.global_confirm = Confirm::Sent;
        } else {
            self.mc.confirm[q] = Confirm::Sent;
        }
    }

    fn confirm_arrives(&mut self, q: usize) {
        if q == GLOBAL {
            if self.mc.inflight.iter().all(|&n| n == 0) {
                self.finish_global();
            } else {
                self.mc.global_confirm = Confirm::Held;
            }
        } else if self.mc.inflight[q] == 0 {
            self.finish_fg(q);
        } else {
            self.mc.confirm[q] = Confirm::Held;
        }
    }

    fn start_fg(&mut self, q: usize, c: usize) {
        self.mc.owner[q] = Some(c);
        self.mc.flag[q] = true;
        if self.mc.queues[q].is_empty() {
            self.send_confirm(q);
        }
    }

    fn finish_fg(&mut self, q: usize) {
        debug_assert!(self.mc.queues[q].is_empty() && self.mc.inflight[q] == 0);
        self.mc.confirm[q] = Confirm::None;
        // The answer carried the full credit.
        self.mc.credit[q] = self.cfg.queue_entries as u32;
        self.mc.flag[q] = false;
        if let Some(c) = self.mc.owner[q].take() {
            self.cores[c].commit = CommitPhase::Done;
            self.wake_later(c);
        }
        if let Some(next) = self.mc.waiters[q].pop_front() {
            self.start_fg(q, next);
        }
    }

    fn check_global(&mut self) {
        if self.mc.period.is_some()
            && self.mc.global_confirm == Confirm::None
            && self.mc.queues.iter().all(|q| q.is_empty())
        {
            self.send_confirm(GLOBAL);
        }
    }

    fn finish_global(&mut self) {
        debug_assert!(self.mc.queues.iter().all(|q| q.is_empty()));
        self.mc.global_confirm = Confirm::None;
        if let Some(joined) = self.mc.period.take() {
            for c in joined {
                self.cores[c].commit = CommitPhase::Done;
                self.wake_later(c);
            }
        }
        // The next PCOMMIT starts its own period at once: writes stay
        // blocked, and it drains and confirms again.
        if let Some(next) = self.mc.global_waiters.pop_front() {
            self.mc.period = Some(vec![next]);
            self.check_global();
        }
    }
}

/// Runs `programs` under `cfg` (a convenience over [`Sim::new`] + [`Sim::run`]).
pub fn simulate(cfg: &Config, programs: &[Program], run: Run) -> Result<Stats, SimError> {
    Ok(Sim::new(cfg.clone(), programs, run)?.run())
}

/// Runs `tasks` under `cfg` (a convenience over [`Sim::with_tasks`] +
/// [`Sim::run`]).
pub fn simulate_tasks(cfg: &Config, tasks: &[Task<'_>], run: Run) -> Result<Stats, SimError> {
    Ok(Sim::with_tasks(cfg.clone(), tasks, run)?.run())
}
