//! How a transactional pool is created ([`TxOptions`]) and how its
//! transactions make their writes failure-atomic ([`Strategy`]).

/// How a transaction makes its writes failure-atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Log the old bytes of each location before its first write, with a
    /// fence each, write in place; roll back after a crash (PMDK).
    Undo,
    /// Buffer writes in DRAM (reads see them), persist them as one redo
    /// record, then apply in place; replay after a crash (Mnemosyne).
    Redo,
    /// Log the transaction's inputs (v_log) and the old values of the
    /// locations it reads before overwriting (clobbered inputs), write in
    /// place; after a crash restore the inputs and re-execute [P1 §3.2].
    Clobber,
    /// Write in place, flush and fence at commit, log nothing: the
    /// benchmarks' baseline. Not failure-atomic.
    NoLog,
}

impl Strategy {
    /// The three failure-atomic strategies.
    pub const LOGGED: [Strategy; 3] = [Strategy::Undo, Strategy::Redo, Strategy::Clobber];
    /// Every strategy, the failure-atomic ones first.
    pub const ALL: [Strategy; 4] = [
        Strategy::Undo,
        Strategy::Redo,
        Strategy::Clobber,
        Strategy::NoLog,
    ];

    /// Lower-case name (`undo`, `redo`, `clobber`, `nolog`), as the CLI
    /// and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Undo => "undo",
            Strategy::Redo => "redo",
            Strategy::Clobber => "clobber",
            Strategy::NoLog => "nolog",
        }
    }

    /// The strategy whose [`Strategy::name`] is `s`; `None` otherwise.
    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.name() == s)
    }

    pub(crate) fn code(self) -> u16 {
        match self {
            Strategy::Undo => 1,
            Strategy::Redo => 2,
            Strategy::Clobber => 3,
            Strategy::NoLog => 4,
        }
    }

    pub(crate) fn from_code(c: u16) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.code() == c)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to create a transactional pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxOptions {
    /// Strategy recorded as the pool's default (each open may override it).
    pub strategy: Strategy,
    /// Log slots: threads that can run transactions at once (1..=64).
    pub slots: u16,
    /// Bytes of each of a slot's two log areas: the largest transaction's
    /// log (v_log and records) must fit in one.
    pub area_bytes: u32,
    /// Fixed nonce (reproducible images); random when `None`.
    pub nonce: Option<u64>,
}

impl TxOptions {
    /// Options with `strategy` as the default, 8 slots and 256 KiB log
    /// areas, and a random nonce.
    pub fn new(strategy: Strategy) -> TxOptions {
        TxOptions {
            strategy,
            slots: 8,
            area_bytes: 256 << 10,
            nonce: None,
        }
    }
    /// Sets [`TxOptions::slots`] (checked at create: 1..=64).
    pub fn slots(mut self, n: u16) -> TxOptions {
        self.slots = n;
        self
    }
    /// Sets [`TxOptions::area_bytes`] (checked at create: a multiple of
    /// 64, at least 1024).
    pub fn area_bytes(mut self, n: u32) -> TxOptions {
        self.area_bytes = n;
        self
    }
    /// Fixes the nonce, for byte-identical images across runs.
    pub fn nonce(mut self, n: u64) -> TxOptions {
        self.nonce = Some(n);
        self
    }
}
