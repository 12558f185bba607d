//! LSM engine (placeholder: being built).

use crate::store::EngineCtx;
use crate::{Engine, EngineError, EngineRecovery, Result, StoreOptions};

/// Tuning knobs of this engine.
#[derive(Clone, Debug, Default)]
pub struct Options {}

impl Options {
    /// Small sizes for the crash checks.
    pub fn for_checks() -> Options {
        Options::default()
    }
}

/// Planted bugs of this engine (checks only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {}

impl Fault {
    pub const ALL: &'static [Fault] = &[];
}

pub(crate) fn fixed_area_bytes(_opts: &StoreOptions) -> usize {
    0
}

pub(crate) fn create(_ctx: EngineCtx, _opts: &StoreOptions) -> Result<Box<dyn Engine>> {
    Err(EngineError::BadOption(
        "engine 'lsm' is not built yet".into(),
    ))
}

pub(crate) fn open(
    _ctx: EngineCtx,
    _opts: &StoreOptions,
) -> Result<(Box<dyn Engine>, EngineRecovery)> {
    Err(EngineError::BadOption(
        "engine 'lsm' is not built yet".into(),
    ))
}
