"""The ferrite package: the dict-like Store, batches, snapshots, checks,
typed errors and the GIL."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import ferrite
from ferrite import errors


def open_store(pooldir, engine, name="s.pool", **kw):
    return ferrite.Store(os.path.join(pooldir, name), engine=engine, size=16 << 20, **kw)


def test_dict_interface(pooldir, engine):
    with open_store(pooldir, engine) as s:
        assert s.engine == engine and not s.closed
        s[b"apple"] = b"red"
        s.put(b"banana", b"yellow")
        s[b"empty"] = b""
        assert s[b"apple"] == b"red" and s[b"empty"] == b""
        assert s.get(b"cherry") is None and s.get(b"cherry", b"none") == b"none"
        assert b"apple" in s and b"cherry" not in s
        assert len(s) == 3
        with pytest.raises(KeyError):
            s[b"cherry"]
        del s[b"empty"]
        with pytest.raises(KeyError):
            del s[b"empty"]
        assert s.delete(b"nothing") is False
        s[b"apple"] = b"green"  # replace
        assert list(s) == [b"apple", b"banana"]
        assert dict(s.items()) == {b"apple": b"green", b"banana": b"yellow"}
        assert list(s.values()) == [b"green", b"yellow"]
    assert s.closed


def test_ranges(pooldir, engine):
    with open_store(pooldir, engine) as s:
        for i in range(100):
            s[b"k%03d" % i] = b"v%d" % i
        s[b"other"] = b"x"
        assert [k for k, _ in s.items(start=b"k010", end=b"k013")] == [b"k010", b"k011", b"k012"]
        assert list(s.keys(start=b"k097")) == [b"k097", b"k098", b"k099", b"other"]
        assert list(s.keys(end=b"k002")) == [b"k000", b"k001"]
        assert list(s.keys(end=b"k003", reverse=True)) == [b"k002", b"k001", b"k000"]
        assert list(s.items(reverse=True))[0] == (b"other", b"x")
        assert len(list(s.keys(prefix=b"k0"))) == 100
        assert list(s.keys(prefix=b"k05", reverse=True))[0] == b"k059"
        with pytest.raises(ValueError):
            s.items(start=b"a", prefix=b"k")
        # Iteration over more than one chunk, in order.
        keys = list(s)
        assert keys == sorted(keys) and len(keys) == 101


def test_reopen_keeps_everything(pooldir, engine):
    with open_store(pooldir, engine) as s:
        for i in range(500):
            s[b"key%d" % i] = bytes([i % 256]) * (i % 300)
    with ferrite.Store(os.path.join(pooldir, "s.pool"), create=False) as s:
        assert s.engine == engine
        assert len(s) == 500
        assert all(s[b"key%d" % i] == bytes([i % 256]) * (i % 300) for i in range(500))


def test_batch_commits_all_or_nothing(pooldir, engine):
    with open_store(pooldir, engine) as s:
        s[b"plum"] = b"purple"
        with s.batch() as b:
            b[b"kiwi"] = b"green"
            b.put(b"fig", b"brown")
            del b[b"plum"]
            del b[b"never-there"]  # nothing; never KeyError in a batch
            # The batch reads its own writes over the store...
            assert b[b"kiwi"] == b"green" and b.get(b"plum") is None and b"plum" not in b
            # ...and the store does not see them before the commit.
            assert b"kiwi" not in s and s[b"plum"] == b"purple"
            assert len(b) == 4
        assert s[b"kiwi"] == b"green" and s[b"fig"] == b"brown" and b"plum" not in s

        # An exception in the block drops every write.
        with pytest.raises(RuntimeError):
            with s.batch() as b:
                b[b"lost"] = b"1"
                del b[b"kiwi"]
                raise RuntimeError("abandon")
        assert b"lost" not in s and s[b"kiwi"] == b"green"

        # Explicit commit / abort; a finished batch refuses more writes.
        b = s.batch()
        b[b"x"] = b"1"
        b.abort()
        assert b"x" not in s
        with pytest.raises(errors.InvalidArgumentError):
            b[b"x"] = b"2"
        b = s.batch()
        b[b"x"] = b"3"
        b.commit()
        assert s[b"x"] == b"3"
        with pytest.raises(errors.InvalidArgumentError):
            b.commit()

        # A bad key fails at the line that adds it, not at the commit.
        with s.batch() as b:
            b[b"ok"] = b"1"
            with pytest.raises(errors.KeySizeError):
                b[b""] = b"2"
            with pytest.raises(errors.ValueSizeError):
                b[b"big"] = b"v" * ((1 << 20) + 1)
        assert s[b"ok"] == b"1" and b"big" not in s


def test_snapshot_is_a_consistent_view(pooldir, engine):
    with open_store(pooldir, engine) as s:
        for i in range(10):
            s[b"k%d" % i] = b"old"
        with s.snapshot() as snap:
            if engine == "cow":
                # CoW's writers go on while a snapshot is open.
                s[b"k0"] = b"new"
                s[b"k99"] = b"new"
                del s[b"k1"]
            else:
                # InP's and LSM's writers would wait for the snapshot:
                # refused, with a typed error, instead of hanging.
                with pytest.raises(errors.BusyError):
                    s[b"k0"] = b"new"
                with pytest.raises(errors.BusyError):
                    with s.batch() as b:
                        b[b"k0"] = b"new"
            assert snap[b"k0"] == b"old" and snap[b"k1"] == b"old" and b"k99" not in snap
            assert len(snap) == 10
            assert list(snap.keys(end=b"k2")) == [b"k0", b"k1"]
            assert snap.get(b"zz", b"d") == b"d"
            with pytest.raises(KeyError):
                snap[b"zz"]
        with pytest.raises(errors.StoreClosedError):
            snap[b"k0"]
        # Closed: writes go through again.
        s[b"k0"] = b"newer"
        assert s[b"k0"] == b"newer"


def test_bad_input_raises_typed_errors(pooldir):
    path = os.path.join(pooldir, "bad.pool")
    s = ferrite.Store(path, size=16 << 20)
    for bad in (lambda: s.__setitem__("str key", b"v"),
                lambda: s.__setitem__(b"k", "str value"),
                lambda: s["str key"],
                lambda: s.get(1),
                lambda: s.items(start="a")):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(errors.KeySizeError) as e:
        s[b""] = b"v"
    assert isinstance(e.value, ValueError) and isinstance(e.value, errors.FerriteError)
    with pytest.raises(errors.KeySizeError, match="1025"):
        s[b"k" * 1025] = b"v"
    with pytest.raises(errors.ValueSizeError):
        s[b"k"] = b"v" * ((1 << 20) + 1)
    s[b"k"] = b"v" * (1 << 20)  # the largest value is fine
    assert len(s[b"k"]) == 1 << 20
    # The same pool twice in one process: busy, not a hang or a crash.
    with pytest.raises(errors.BusyError):
        ferrite.Store(path)
    s.close()
    s.close()  # idempotent
    for op in (lambda: s[b"k"], lambda: s.__setitem__(b"k", b"v"), lambda: len(s),
               lambda: list(s), lambda: s.batch().commit(), lambda: s.snapshot(),
               lambda: b"k" in s, lambda: s.delete(b"k")):
        with pytest.raises(errors.StoreClosedError):
            op()
    # Wrong engine, unknown engine and options, a missing pool.
    with pytest.raises(errors.InvalidArgumentError):
        ferrite.Store(path, engine="cow")  # it is an inp store (the default)
    with pytest.raises(errors.InvalidArgumentError):
        ferrite.Store(os.path.join(pooldir, "x.pool"), engine="btree")
    with pytest.raises(errors.InvalidArgumentError):
        ferrite.Store(os.path.join(pooldir, "x.pool"), engine="cow,size=1")
    with pytest.raises(errors.InvalidArgumentError):
        ferrite.Store(os.path.join(pooldir, "x.pool"), sessions=0)
    with pytest.raises(errors.FerriteIOError) as e:
        ferrite.Store(os.path.join(pooldir, "missing.pool"), create=False)
    assert isinstance(e.value, OSError)
    assert not os.path.exists(os.path.join(pooldir, "x.pool"))


def test_non_pool_and_corrupt_files(pooldir):
    junk = os.path.join(pooldir, "junk")
    with open(junk, "wb") as f:
        f.write(b"hello, world\n" * 10000)
    with pytest.raises(errors.NotAStoreError):
        ferrite.Store(junk)
    c = ferrite.check(junk)
    assert not c.clean and c.findings[0].kind == "pool-header"
    with pytest.raises(errors.FerriteIOError):
        ferrite.check(os.path.join(pooldir, "missing"))

    path = os.path.join(pooldir, "c.pool")
    with ferrite.Store(path, engine="cow", size=16 << 20) as s:
        s[b"a"] = b"1"
    c = ferrite.check(path)
    assert c.clean and c.keys == 1 and "cow engine" in c.holds, c.report
    # Flip a bit of the store's superblock checksum (data area at 4096,
    # checksum at byte 60 of the superblock).
    with open(path, "r+b") as f:
        f.seek(4096 + 60)
        b = f.read(1)
        f.seek(4096 + 60)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(errors.CorruptError):
        ferrite.Store(path)
    c = ferrite.check(path)
    assert [f.kind for f in c.findings] == ["engine-superblock"], c.report
    assert "checksum" in c.report


def test_threads_share_a_store(pooldir, engine):
    with open_store(pooldir, engine) as s:
        def work(t):
            for i in range(200):
                s[b"t%d-%03d" % (t, i)] = b"%d" % i
                assert s[b"t%d-%03d" % (t, i)] == b"%d" % i

        ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(s) == 800


def test_gil_is_released_during_io(pooldir):
    """Another Python thread runs while a call is inside the store: with
    the GIL held it could not run at all during the call."""
    path = os.path.join(pooldir, "gil.pool")
    with ferrite.Store(path, engine="cow", size=64 << 20) as s:
        with s.batch() as b:
            for i in range(2000):
                b[b"%06d" % i] = b"x" * 1000
    done = threading.Event()
    ticks = [0]

    def spin():
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    during = []
    for _ in range(3):
        before = ticks[0]
        ferrite.check(path)  # reads and walks the 64 MiB pool, GIL released
        during.append(ticks[0] - before)
    done.set()
    t.join()
    assert max(during) > 0, during


WRITER = r"""
import sys, ferrite
s = ferrite.Store(sys.argv[1], engine=sys.argv[2], size=16 << 20)
i = int(sys.argv[3])
while True:
    if i % 7 == 0:
        with s.batch() as b:
            b[b"key-%06d" % i] = b"v%d" % i
            b[b"twin-%06d" % i] = b"v%d" % i
    else:
        s[b"key-%06d" % i] = b"v%d" % i
    print(i, flush=True)
    i += 1
"""


def test_kill_9_loses_no_acknowledged_write(pooldir, engine):
    path = os.path.join(pooldir, "kill.pool")
    ferrite.Store(path, engine=engine, size=16 << 20).close()
    nxt, acked = 0, 0
    for round in range(3):
        p = subprocess.Popen([sys.executable, "-c", WRITER, path, engine, str(nxt)],
                             stdout=subprocess.PIPE, text=True)
        time.sleep(0.3 + 0.1 * round)
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        assert p.returncode == -signal.SIGKILL
        got = [int(l) for l in out.split()]
        with ferrite.Store(path) as s:
            for i in got:
                assert s[b"key-%06d" % i] == b"v%d" % i
                if i % 7 == 0:
                    assert s[b"twin-%06d" % i] == b"v%d" % i
        acked += len(got)
        if got:
            nxt = got[-1] + 1
    assert acked > 0
    assert ferrite.check(path).clean


def test_a_full_pool_raises_store_full(pooldir, engine):
    # The pool's size is fixed at create (growth is to come): 1 MiB here
    # (the LSM's memtable alone takes 5 MiB: a 1 MiB LSM store is refused).
    size = 16 << 20 if engine == "lsm" else 1 << 20
    with pytest.raises(errors.StoreFullError):
        ferrite.Store(os.path.join(pooldir, "tiny.pool"), engine="lsm", size=1 << 20)
    with ferrite.Store(os.path.join(pooldir, "full.pool"), engine=engine, size=size) as s:
        with pytest.raises(errors.StoreFullError):
            for i in range(200):
                s[b"k%d" % i] = b"x" * (1 << 18)
        assert i > 0 and s[b"k0"] == b"x" * (1 << 18)  # what fitted is there
        del s[b"k0"]  # the store goes on after the error
        s[b"small"] = b"1"
