"""Python round trip, ferrite vs py-lmdb, same machine, same run.

Each operation is durable when it returns in both: ferrite's store[k] = v
(durable on return), and py-lmdb's put in its own write transaction with
sync=True (the default: the commit fsyncs). A round trip is store[k] = v
then store[k]; also put-only and get-only. REPS interleaved repetitions
(ferrite, lmdb, ferrite, ...), medians, ratio ferrite/lmdb in ops/s (> 1:
ferrite faster).

    python crates/python/bench/roundtrip.py [N] [REPS] [ENGINE]
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

import lmdb

import ferrite

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
ENGINE = sys.argv[3] if len(sys.argv) > 3 else "cow"
BASE = "/dev/shm" if os.path.isdir("/dev/shm") else None
KEYS = [b"%016x" % ((i * 0x9E3779B97F4A7C15) >> 8 & (2**64 - 1)) for i in range(N)]
VAL = b"v" * 100


def run_ferrite(d):
    s = ferrite.Store(os.path.join(d, "f.pool"), engine=ENGINE, size=256 << 20)
    t0 = time.perf_counter()
    for k in KEYS:
        s[k] = VAL
        assert s[k] == VAL
    t1 = time.perf_counter()
    for k in KEYS:
        s[k] = VAL
    t2 = time.perf_counter()
    for k in KEYS:
        s[k]
    t3 = time.perf_counter()
    s.close()
    return t1 - t0, t2 - t1, t3 - t2


def run_lmdb(d):
    env = lmdb.open(os.path.join(d, "l.mdb"), map_size=1 << 30, sync=True, metasync=True)
    t0 = time.perf_counter()
    for k in KEYS:
        with env.begin(write=True) as txn:
            txn.put(k, VAL)
        with env.begin() as txn:
            assert txn.get(k) == VAL
    t1 = time.perf_counter()
    for k in KEYS:
        with env.begin(write=True) as txn:
            txn.put(k, VAL)
    t2 = time.perf_counter()
    for k in KEYS:
        with env.begin() as txn:
            txn.get(k)
    t3 = time.perf_counter()
    env.close()
    return t1 - t0, t2 - t1, t3 - t2


def main():
    res = {"ferrite": [], "lmdb": []}
    for r in range(REPS):
        order = [("ferrite", run_ferrite), ("lmdb", run_lmdb)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            d = tempfile.mkdtemp(dir=BASE, prefix="rt-")
            try:
                res[name].append(fn(d))
            finally:
                shutil.rmtree(d)
    print(f"{N} keys, {REPS} interleaved reps, ferrite engine {ENGINE}, lmdb {lmdb.version()} (py-lmdb {lmdb.__version__}), dir {BASE or tempfile.gettempdir()}")
    for i, what in enumerate(["round trip (put + get)", "put", "get"]):
        f = [N / x[i] for x in res["ferrite"]]
        l = [N / x[i] for x in res["lmdb"]]
        mf, ml = statistics.median(f), statistics.median(l)
        print(f"{what}: ferrite {mf:,.0f} ops/s (min {min(f):,.0f}, max {max(f):,.0f}); "
              f"lmdb {ml:,.0f} ops/s (min {min(l):,.0f}, max {max(l):,.0f}); ferrite/lmdb = {mf / ml:.2f}x")


if __name__ == "__main__":
    main()
