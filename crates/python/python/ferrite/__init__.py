"""ferrite: the Ferrite crash-consistent persistent-memory key-value store.

    import ferrite

    with ferrite.Store("/dev/shm/fruit.pool", engine="cow") as store:
        store[b"apple"] = b"red"          # durable when it returns
        with store.batch() as b:          # all or nothing
            b[b"kiwi"] = b"green"
            del b[b"plum"]
        for key, value in store.items(start=b"a", end=b"l"):
            print(key, value)
    print(ferrite.check("/dev/shm/fruit.pool").clean)

Keys and values are bytes (keys 1 to 1024 bytes, values up to 1 MiB,
ordered bytewise). Calls that touch the pool release the GIL.
"""

from dataclasses import dataclass
from os import PathLike
from typing import List, Union

from ._ferrite import Batch as Batch
from ._ferrite import Iterator as Iterator
from ._ferrite import Snapshot as Snapshot
from ._ferrite import Store as Store
from ._ferrite import __version__ as __version__
from ._ferrite import _check
from .errors import AllocatorError as AllocatorError
from .errors import BatchTooLargeError as BatchTooLargeError
from .errors import BusyError as BusyError
from .errors import CorruptError as CorruptError
from .errors import FerriteError as FerriteError
from .errors import FerriteIOError as FerriteIOError
from .errors import InvalidArgumentError as InvalidArgumentError
from .errors import KeySizeError as KeySizeError
from .errors import NotAStoreError as NotAStoreError
from .errors import StoreClosedError as StoreClosedError
from .errors import StoreFullError as StoreFullError
from .errors import ValueSizeError as ValueSizeError

__all__ = [
    "Store",
    "Batch",
    "Snapshot",
    "Iterator",
    "check",
    "CheckResult",
    "Finding",
    "__version__",
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


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a pool."""

    component: str
    """'pool', 'engine' or 'heap'."""
    kind: str
    """Stable short name of the kind of problem ('engine-recovery', 'heap-leak', ...)."""
    message: str


@dataclass(frozen=True)
class CheckResult:
    """What ferrite.check found."""

    holds: str
    """What the pool holds ('cow engine on the ferrite allocator: 3 keys, ...')."""
    keys: int
    findings: List[Finding]
    report: str
    """One 'component: kind: message' line per finding, then a summary line."""

    @property
    def clean(self) -> bool:
        return not self.findings


def check(path: Union[str, "PathLike[str]"]) -> CheckResult:
    """The deep check of the pool file at path (`ferrite pool check --deep`
    on a store): the superblock, whether recovery would act (a store not
    closed cleanly), a walk of every node and checksum, and the allocator's
    blocks against the walk. Reads the file, never writes it. A file that is
    not a pool is a finding; one that cannot be read raises FerriteIOError."""
    holds, keys, findings, report = _check(path)
    return CheckResult(holds, keys, [Finding(*f) for f in findings], report)
