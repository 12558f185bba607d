"""The exceptions of ferrite: every error is a FerriteError, and those
about a bad argument are also ValueErrors (a str where bytes belong is the
usual TypeError)."""


class FerriteError(Exception):
    """Base class of every error the store raises."""


class InvalidArgumentError(FerriteError, ValueError):
    """An option or argument the store refuses (an unknown engine, a store
    of another engine, a finished batch)."""


class StoreClosedError(FerriteError, ValueError):
    """The store (or snapshot) was closed."""


class KeySizeError(FerriteError, ValueError):
    """A key is empty or longer than 1024 bytes."""


class ValueSizeError(FerriteError, ValueError):
    """A value is longer than 1 MiB."""


class BatchTooLargeError(FerriteError, ValueError):
    """A batch is larger than the engine commits at once; nothing was applied."""


class StoreFullError(FerriteError):
    """The pool is full (its size is fixed when it is created)."""


class FerriteIOError(FerriteError, OSError):
    """The pool file could not be created, opened, read, mapped or closed."""


class NotAStoreError(FerriteError):
    """The file is not a Ferrite pool, or the pool holds no store."""


class CorruptError(FerriteError):
    """A checksum or structure check failed; ferrite.check(path) lists the findings."""


class BusyError(FerriteError):
    """The pool is open elsewhere, every session is taken, or a snapshot
    that would make this write wait for it is open."""


class AllocatorError(FerriteError):
    """The store's allocator refused an operation or its heap."""


__all__ = [
    "FerriteError",
    "InvalidArgumentError",
    "StoreClosedError",
    "KeySizeError",
    "ValueSizeError",
    "BatchTooLargeError",
    "StoreFullError",
    "FerriteIOError",
    "NotAStoreError",
    "CorruptError",
    "BusyError",
    "AllocatorError",
]
