#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, one at a time,
# in one process (no -jobs): fuzz/run.sh [SECONDS] [TARGET...]. Needs cargo-fuzz; builds the
# targets first (RUSTC_BOOTSTRAP=1 lets the stable toolchain do it). New
# inputs go to fuzz/corpus-run/<target>/ (not committed); the committed seeds
# in fuzz/corpus/<target>/ are read, not written. Crashes land in
# fuzz/artifacts/<target>/ and make the script exit 1. Prints one line per
# target: executions, executions per second, new coverage.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(pool_header protocol log page_store cells fp_leaves heap tx_ds bytemap ptm engine_inp engine_cow engine_lsm)
fi
# FUZZ_SEED=N fixes libFuzzer's seed (CI: the same inputs every run, so a
# bounded run does not fail by chance on a bug found first by a long one);
# unset, every run explores afresh.
# FUZZ_RUNS=N also stops each target after N inputs: with a fixed seed, a
# faster machine then runs exactly the inputs a slower one ran a prefix of.
seed_arg=()
if [ -n "${FUZZ_SEED:-}" ]; then
    seed_arg+=(-seed="$FUZZ_SEED")
fi
if [ -n "${FUZZ_RUNS:-}" ]; then
    seed_arg+=(-runs="$FUZZ_RUNS")
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O || exit 2
status=0
total=0
for t in "${targets[@]}"; do
    mkdir -p "corpus-run/$t" "artifacts/$t"
    log=$(mktemp)
    cargo fuzz run -O "$t" "corpus-run/$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=4096 -print_final_stats=1 "${seed_arg[@]}" >"$log" 2>&1
    rc=$?
    execs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    execs=${execs:-0}
    total=$((total + execs))
    echo "fuzz $t: ${execs} executions in at most ${secs} s, ${cov:-cov: ?}, exit $rc"
    if [ $rc -ne 0 ]; then
        status=1
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -8
    fi
    rm -f "$log"
done
echo "fuzz: ${total} executions in all"
exit $status
