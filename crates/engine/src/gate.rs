//! [`SessionGate`]: a store's limit on open sessions, shared by the engines.

use crate::{EngineError, Result};
use ferrite_alloc::{AllocThread, PAllocator};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts a store's open sessions against the superblock's limit (each
/// holds an allocator lane, of which the heap has only so many).
pub(crate) struct SessionGate {
    open: AtomicUsize,
    max: usize,
}

/// One open session's place; given back when dropped.
pub(crate) struct Ticket<'a>(&'a SessionGate);

impl SessionGate {
    pub(crate) fn new(max: usize) -> SessionGate {
        SessionGate {
            open: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes a place and attaches an allocator handle for the new session;
    /// on error nothing is held.
    pub(crate) fn enter<'a>(
        &'a self,
        alloc: &'a dyn PAllocator,
    ) -> Result<(Ticket<'a>, Box<dyn AllocThread + Send + 'a>)> {
        let mut n = self.open.load(Ordering::Acquire);
        loop {
            if n >= self.max {
                return Err(EngineError::TooManySessions { max: self.max });
            }
            match self
                .open
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        let ticket = Ticket(self);
        // On error the ticket drops and gives the place back.
        let th = alloc.thread()?;
        Ok((ticket, th))
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}
