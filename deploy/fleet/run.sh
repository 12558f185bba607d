#!/usr/bin/env bash
# Start the fleet of deploy/fleet/nutcracker.yml: three `ferrite serve`
# instances on 127.0.0.1:11311-11313, each with its own pool file under
# DIR, and nutcracker on 127.0.0.1:22121 in front of them. Runs until
# interrupted (or until nutcracker exits), then stops all of them.
#
#   deploy/fleet/run.sh DIR
#
# Environment: FERRITE (the ferrite binary, default `ferrite` on PATH),
# NUTCRACKER (default `nutcracker`, Debian: /usr/sbin/nutcracker),
# FERRITE_MEMORY (per instance, default 256M), FERRITE_STORE (store of new
# pools, default engine-inp). Logs go to DIR/*.log.
#
# An instance that dies (try kill -9 on one: its pid is in
# DIR/ferrite-N.pid) is started again on the same pool and port; it comes
# back with every key it had acknowledged, and nutcracker routes to it
# again.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR  (pools and logs go to DIR)" >&2
    exit 2
fi
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
ferrite=${FERRITE:-ferrite}
nutcracker=${NUTCRACKER:-$(command -v nutcracker || echo /usr/sbin/nutcracker)}
memory=${FERRITE_MEMORY:-256M}
store=${FERRITE_STORE:-engine-inp}
mkdir -p "$dir"

pids=()
cleanup() {
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The servers: the yml's addresses, in order.
ports=($(sed -n 's/^ *- 127\.0\.0\.1:\([0-9]*\):.*/\1/p' "$here/nutcracker.yml"))
n=${#ports[@]}
start() { # start instance $1 (1-based) and record its pid
    local i=$1
    "$ferrite" serve --pool "$dir/ferrite-$i.pool" --listen "127.0.0.1:${ports[$((i - 1))]}" \
        --memory "$memory" --store "$store" --threads 2 >> "$dir/ferrite-$i.log" 2>&1 &
    pids[$((i - 1))]=$!
    echo $! > "$dir/ferrite-$i.pid"
}
for i in $(seq 1 "$n"); do
    : > "$dir/ferrite-$i.log"
    start "$i"
done
# Wait (at most 30 s each) until every server listens: nutcracker
# preconnects.
for i in $(seq 1 "$n"); do
    for _ in $(seq 1 300); do
        grep -q 'listening on' "$dir/ferrite-$i.log" 2>/dev/null && break
        if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
            echo "ferrite-$i did not start:" >&2
            cat "$dir/ferrite-$i.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    head -n 1 "$dir/ferrite-$i.log"
done

"$nutcracker" -c "$here/nutcracker.yml" -o "$dir/nutcracker.log" \
    -s 22222 -a 127.0.0.1 -p "$dir/nutcracker.pid" &
npid=$!
pids+=("$npid")
echo "nutcracker: listening on 127.0.0.1:22121 (stats on 127.0.0.1:22222; log $dir/nutcracker.log)"

# Supervise: restart a server that died, stop when nutcracker does.
while kill -0 "$npid" 2>/dev/null; do
    for i in $(seq 1 "$n"); do
        if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
            wait "${pids[$((i - 1))]}" 2>/dev/null || true
            echo "ferrite-$i exited; starting it again on $dir/ferrite-$i.pool"
            start "$i"
        fi
    done
    sleep 0.5
done
echo "nutcracker exited" >&2
exit 1
