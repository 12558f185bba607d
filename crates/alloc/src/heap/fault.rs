//! Planted protocol bugs of the heap and the lock heap (see [`Fault`]).

/// Planted protocol bugs, to show the crash checks catch them. Public only
/// with the `checks` feature; production heaps always run [`Fault::None`].
// Without the checks nothing sets a fault: `LocalMarkers` is only matched.
#[cfg_attr(not(any(test, feature = "checks")), allow(dead_code))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The real protocols.
    #[default]
    None,
    /// Publish flushes its lane record but does not fence before applying.
    NoLogFence,
    /// Publish never writes the marker of a completed record.
    NoMarker,
    /// Recovery does not replay committed records.
    NoReplay,
    /// Publishes make durable only the pending markers their own thread
    /// wrote: the guarantee before markers were flushed across threads (a
    /// marker durable only at its own thread's next fence).
    LocalMarkers,
    /// The writer flushes its marker at once (no fence), and publishes of
    /// other threads count on their own fence to complete that flush
    /// instead of flushing the marker themselves: the protocol before
    /// markers were flushed across threads. Sound only if a fence completed
    /// every thread's flushes, so only per-thread fences catch it.
    UnfencedMarkers,
    /// A growth stores the new page count without flushing it: the new
    /// pages are handed out while a crash may still forget they exist.
    UnpersistedGrowth,
}
