"""The type hints (_ferrite.pyi, py.typed) type-check correct use under
mypy --strict and catch wrong use (str where bytes belong)."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

GOOD = """
import ferrite
from pathlib import Path
from typing import Optional

with ferrite.Store("/dev/shm/typing.pool", engine="cow", size=8 << 20) as s:
    s[b"a"] = b"b"
    v: bytes = s[b"a"]
    o: Optional[bytes] = s.get(b"a")
    d: bytes = s.get(b"zz", b"default")
    p: Path = s.path
    n: int = len(s)
    for k, val in s.items(start=b"a", end=b"z", reverse=True):
        both: bytes = k + val
    with s.batch() as b:
        b[b"k"] = b"v"
        del b[b"a"]
    with s.snapshot() as snap:
        w: Optional[bytes] = snap.get(b"k")
r = ferrite.check("/dev/shm/typing.pool")
clean: bool = r.clean
kinds = [f.kind for f in r.findings]
try:
    pass
except ferrite.KeySizeError as e:
    msg: str = str(e)
"""

BAD = """
import ferrite
with ferrite.Store("/dev/shm/typing.pool") as s:
    s["a"] = b"b"
    x: str = s[b"a"]
"""


def mypy(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(textwrap.dedent(text))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(f)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / ".mypy_cache")},
    )


def test_correct_use_type_checks(tmp_path):
    r = mypy(tmp_path, "good.py", GOOD)
    assert r.returncode == 0, r.stdout + r.stderr


def test_wrong_use_is_caught(tmp_path):
    r = mypy(tmp_path, "bad.py", BAD)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad.py:4" in r.stdout and "bad.py:5" in r.stdout, r.stdout
