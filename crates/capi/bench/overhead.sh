#!/usr/bin/env bash
# C get/put overhead over the Rust API, same machine, same run:
# 1. c/bench.c (a C program on libferrite.so) and examples/overhead.rs
#    (the Rust API) do the same N durable puts and N gets; REPS interleaved
#    repetitions; medians, spreads and their ratio.
# 2. examples/overhead.rs interleaved: in one process, blocks through the C
#    ABI and through the Rust API alternate (less exposed to the load of a
#    shared machine); REPS runs.
#   crates/capi/bench/overhead.sh [N] [REPS] [OPTIONS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-100000}
REPS=${2:-5}
OPTS=${3:-engine=cow,size=256M}
cargo build --release -q -p ferrite-capi --lib --example overhead
export PKG_CONFIG_PATH=$PWD/target/release/pkgconfig
work=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 crates/capi/c/bench.c $(pkg-config --cflags --libs ferrite) -o "$work/bench_c"
for r in $(seq "$REPS"); do
    "$work/bench_c" "$work/c.pool" "$N" "$OPTS"
    target/release/examples/overhead "$work/r.pool" "$N" "$OPTS" rust
done | tee "$work/out"
python3 - "$work/out" "$OPTS" "$N" <<'PY'
import re, statistics, sys
rows = {"c": {"put": [], "get": []}, "rust": {"put": [], "get": []}}
for line in open(sys.argv[1]):
    who, rest = line.split(" ", 1)
    for op, v in re.findall(r"(put|get)_ns=([0-9.]+)", rest):
        rows[who][op].append(float(v))
print(f"options {sys.argv[2]}, {sys.argv[3]} ops per phase, {len(rows['c']['put'])} interleaved reps")
for op in ("put", "get"):
    c, r = statistics.median(rows["c"][op]), statistics.median(rows["rust"][op])
    spread = lambda xs: (max(xs) - min(xs)) / statistics.median(xs) * 100
    print(f"{op}: C median {c:.1f} ns (spread {spread(rows['c'][op]):.1f}%), Rust median {r:.1f} ns "
          f"(spread {spread(rows['rust'][op]):.1f}%), C/Rust = {c / r:.3f} ({(c / r - 1) * 100:+.1f}%)")
PY
for r in $(seq "$REPS"); do
    target/release/examples/overhead "$work/i.pool" "$N" "$OPTS" interleaved
done
