"""Type hints of ferrite's native module."""

from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Iterator as _It, Optional, Tuple, Type, TypeVar, Union, overload, Literal

_T = TypeVar("_T")
_Path = Union[str, "PathLike[str]"]

__version__: str

class Iterator(_It[_T]):
    """A range of a store (read lazily, in chunks each consistent on its
    own) or of a snapshot (read when the range starts)."""
    def __iter__(self) -> "Iterator[_T]": ...
    def __next__(self) -> _T: ...

class Store:
    """An open store: a dict-like, durable mapping of bytes to bytes.

    Opens the pool file at path, creating it when missing (unless
    create=False; a create is atomic). engine: "inp", "cow" or "lsm"
    (created with it, expected at open; default: create inp, open any);
    domain: "adr", "eadr", "msync", ... (default: FERRITE_DOMAIN, else
    detected); size: a fixed size in bytes for a pool the call creates
    (without it the pool starts small and grows on demand, up to max_size,
    default 1 TiB); sessions: most concurrent writers (1..1000,
    default 8); allocator: "ferrite" or "lock". Opening runs recovery.

    Writes are durable when they return. A store may be shared by threads;
    calls that touch the pool release the GIL. Use it as a context manager
    (or call close()); afterwards every call raises StoreClosedError.
    """

    def __init__(
        self,
        path: _Path,
        *,
        engine: Optional[str] = None,
        domain: Optional[str] = None,
        size: Optional[int] = None,
        max_size: Optional[int] = None,
        sessions: Optional[int] = None,
        allocator: Optional[str] = None,
        create: bool = True,
    ) -> None: ...
    @property
    def path(self) -> Path: ...
    @property
    def engine(self) -> Literal["inp", "cow", "lsm"]: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Store": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def close(self) -> None:
        """Closes the store, everything durable. Idempotent."""
    def put(self, key: bytes, value: bytes) -> None: ...
    def __setitem__(self, key: bytes, value: bytes) -> None: ...
    @overload
    def get(self, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def __getitem__(self, key: bytes) -> bytes:
        """The value of key; KeyError when absent."""
    def __contains__(self, key: bytes) -> bool: ...
    def delete(self, key: bytes) -> bool:
        """Removes key; True when it was there."""
    def __delitem__(self, key: bytes) -> None:
        """Removes key; KeyError when absent."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]:
        """The keys, in order."""
    def items(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[Tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < end (None: unbounded), or
        the keys beginning with prefix; descending with reverse=True."""
    def keys(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[bytes]: ...
    def values(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[bytes]: ...
    def batch(self) -> "Batch":
        """A write batch: `with store.batch() as b:` commits every write in
        the block at once when it ends without an exception (all or
        nothing, even after a crash), and drops them when it raises."""
    def snapshot(self) -> "Snapshot":
        """A consistent read-only view. A cow store's writers go on while it
        is open; an inp or lsm store's writes raise BusyError until it is
        closed (they would wait for it), so keep it in a `with` block."""
    def sync(self) -> None:
        """Finishes background work (writes are durable already)."""

class Batch:
    """Pending writes of Store.batch(); reads see them over the store."""

    def __enter__(self) -> "Batch": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def __setitem__(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None:
        """Deletes key at commit (nothing when absent: never KeyError)."""
    def __delitem__(self, key: bytes) -> None: ...
    @overload
    def get(self, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def __getitem__(self, key: bytes) -> bytes: ...
    def __contains__(self, key: bytes) -> bool: ...
    def __len__(self) -> int:
        """Pending writes."""
    def commit(self) -> None:
        """Applies every pending write at once (durable when it returns)."""
    def abort(self) -> None:
        """Drops every pending write."""

class Snapshot:
    """A consistent read-only view of a store (Store.snapshot())."""

    def __enter__(self) -> "Snapshot": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def close(self) -> None: ...
    @overload
    def get(self, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def __getitem__(self, key: bytes) -> bytes: ...
    def __contains__(self, key: bytes) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def items(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[Tuple[bytes, bytes]]: ...
    def keys(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[bytes]: ...
    def values(
        self,
        start: Optional[bytes] = None,
        end: Optional[bytes] = None,
        reverse: bool = False,
        prefix: Optional[bytes] = None,
    ) -> Iterator[bytes]: ...

def _check(path: _Path) -> Tuple[str, int, list, str]: ...
