#!/usr/bin/env bash
# Foreground GET latency beside a heal, in one run, on a 4-node loopback cluster (4 x 4 drives,
# sets of 4: 2+2 across the nodes). For each heal pace (unpaced, then each of PACES as
# --heal-bytes-rate): a GET load of small objects (quarry-bench get) runs idle, then while node 4's
# drives keep losing every object of a bucket and `quarry admin heal --wait` rebuilds them (wiped
# and healed again and again for the whole GET run), then idle again. Prints p50 and p99 of each
# phase, the ratio of the heal phase's p99 to the idle ones' mean, and how fast the heals went.
# Release binaries: `cargo build --release -p quarry -p quarry-bench` first.
#
#   scripts/bench-heal-latency.sh
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench-heal-latency), OBJECTS
# (healed objects, default 64), SIZE (their size, default 4MiB), GET_SIZE (default 64KiB),
# CONCURRENT (GETs in flight, default 4), SECS (seconds a phase, default 10), PACES (default
# "64MiB"), BASE_PORT (default 9340).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-heal-latency}
OBJECTS=${OBJECTS:-64}
SIZE=${SIZE:-4MiB}
GET_SIZE=${GET_SIZE:-64KiB}
CONCURRENT=${CONCURRENT:-4}
SECS=${SECS:-10}
PACES=${PACES:-64MiB}
BASE_PORT=${BASE_PORT:-9340}
BUCKET=bench-heal
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)

source scripts/lib/bench-servers.sh

bench() { # quarry-bench MODE [flags]: against every node, with the root keys
    local mode=$1
    shift
    "$BIN_DIR/quarry-bench" "$mode" --host "$(IFS=,; echo "${hosts[*]}")" \
        --access-key "$QUARRY_ROOT_USER" --secret-key "$QUARRY_ROOT_PASSWORD" "$@"
}

get_phase() { # OUT.json: the foreground GET load for SECS seconds
    bench get --bucket foreground --obj.size "$GET_SIZE" --objects 200 --concurrent "$CONCURRENT" \
        --duration "${SECS}s" --json >"$1"
}

# Wipes node 4's copy of the bucket's objects and heals them, again and again, until $1 exists;
# writes how many heals ended and how many objects and bytes they rewrote to $2.
heal_loop() {
    local stop=$1 out=$2 n=0 t0 t1
    t0=$(date +%s%3N)
    while [ ! -e "$stop" ]; do
        for d in "$DATA"/cluster/node4/d*; do
            find "$d/$BUCKET" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
        done
        "$BIN_DIR/quarry" admin heal --wait --endpoint "$endpoint" "$BUCKET" >"$DATA/heal-last.txt" 2>&1 || {
            echo "heal failed:" >&2
            cat "$DATA/heal-last.txt" >&2
            return 1
        }
        n=$((n + 1))
    done
    t1=$(date +%s%3N)
    echo "$n $((t1 - t0))" >"$out"
}

report() { # LABEL IDLE1.json HEAL.json IDLE2.json HEALS.txt
    python3 - "$@" "$OBJECTS" "$SIZE" <<'PY'
import json, sys
label, a, h, b, heals, objects, size = sys.argv[1:]
def lat(path):
    r = json.load(open(path))
    op = next(o for o in r["operations"] if o["op"].upper() == "GET")
    if r["errors"] or r["verify_errors"]:
        sys.exit(f"{path}: {r['errors']} errors, {r['verify_errors']} verify errors: {r['error_samples'][:3]}")
    return op["latency_ms"], op["ops_per_sec"]
(ia, ra), (hh, rh), (ib, rb) = lat(a), lat(h), lat(b)
n, ms = map(int, open(heals).read().split())
idle_p99 = (ia["p99"] + ib["p99"]) / 2
print(f"{label}: GET p50/p99 ms idle {ia['p50']:.2f}/{ia['p99']:.2f}, during heals "
      f"{hh['p50']:.2f}/{hh['p99']:.2f}, idle again {ib['p50']:.2f}/{ib['p99']:.2f}; "
      f"p99 during/idle {hh['p99'] / idle_p99:.2f}x; GET/s {ra:.0f} | {rh:.0f} | {rb:.0f}; "
      f"{n} heals of {objects} x {size} in {ms / 1000:.1f}s ({n * int(objects) / (ms / 1000):.1f} objects/s)")
PY
}

endpoint=
for pace in 0 $PACES; do
    export QUARRY_HEAL_BYTES_RATE=$pace
    start_cluster "$BASE_PORT"
    endpoint=http://127.0.0.1:$((BASE_PORT + 1))
    bench put --bucket "$BUCKET" --obj.size "$SIZE" --objects "$OBJECTS" --concurrent 8 \
        --duration 10m --noclear >/dev/null
    get_phase "$DATA/idle1.json"
    rm -f "$DATA/stop"
    heal_loop "$DATA/stop" "$DATA/heals.txt" &
    loop=$!
    get_phase "$DATA/heal.json"
    touch "$DATA/stop"
    wait "$loop"
    get_phase "$DATA/idle2.json"
    label="heal unpaced"
    [ "$pace" = 0 ] || label="heal at --heal-bytes-rate $pace"
    report "$label" "$DATA/idle1.json" "$DATA/heal.json" "$DATA/idle2.json" "$DATA/heals.txt"
    stop_all
done
