//! What the simulated medium ([`crate::sim`]) and the lockstep scheduler
//! ([`crate::lockstep`]) both need, kept apart so that neither imports the
//! other's types: the simulated thread an OS thread acts as, and the
//! unwind payload of an injected crash. The medium calls into lockstep at
//! its events; lockstep enters simulated threads and raises the crash.

use std::cell::Cell;

thread_local! {
    static SIM_THREAD: Cell<u32> = const { Cell::new(0) };
}

/// Makes this OS thread act as simulated thread `id` until the guard drops
/// (the previous id is restored). Flushes and fences are attributed to the
/// current simulated thread.
pub struct SimThread {
    prev: u32,
}

impl SimThread {
    pub fn enter(id: u32) -> SimThread {
        SimThread {
            prev: SIM_THREAD.with(|t| t.replace(id)),
        }
    }

    /// The simulated thread this OS thread currently acts as.
    pub fn current() -> u32 {
        SIM_THREAD.with(|t| t.get())
    }
}

impl Drop for SimThread {
    fn drop(&mut self) {
        SIM_THREAD.with(|t| t.set(self.prev));
    }
}

/// Payload of the unwind that ends a workload at its crash point.
pub struct Crashed;
