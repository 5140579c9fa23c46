#!/usr/bin/env bash
# Cluster GET of two builds side by side, beside a single node, in rounds that alternate, so the
# ratios of one run are comparable on a shared, noisy machine: a 4-node loopback cluster (4 x 4
# drives, sets of 4, c=8) served by the build under test ($BIN_DIR/quarry) and by a base build
# ($BASE_BIN, e.g. a copy of target/release/quarry kept from before a change), and a single node
# (4 drives) of the build under test as the reference. Prints MiB/s per cell and the ratios.
#
#   BASE_BIN=/tmp/quarry-before scripts/bench-ab.sh [OUT_DIR]
#
# Environment: BIN_DIR (default target/release, also for quarry-bench), DATA (default
# ./data/bench-ab), DURATION (default 10s), SIZES (default "1MiB 64MiB"), ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASE_BIN:?set BASE_BIN to the quarry binary to compare against}"
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-ab}
DURATION=${DURATION:-10s}
SIZES=${SIZES:-"1MiB 64MiB"}
ROUNDS=${ROUNDS:-3}
OUT=${1:-$DATA/results}
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA" "$OUT" "$DATA/base-bin"
DATA=$(cd "$DATA" && pwd)
BENCH=$BIN_DIR/quarry-bench
TEST_BIN_DIR=$BIN_DIR
cp "$BASE_BIN" "$DATA/base-bin/quarry"

source scripts/lib/bench-servers.sh

cell() { # label hosts size
    local objs=400
    [ "$3" = 64MiB ] && objs=24
    "$BENCH" get --host "$2" --access-key "$QUARRY_ROOT_USER" --secret-key "$QUARRY_ROOT_PASSWORD" \
        --obj.size "$3" --concurrent 8 --duration "$DURATION" --objects "$objs" --json \
        >"$OUT/$1-$3.json"
    python3 -c "import json; d=json.load(open('$OUT/$1-$3.json')); print('$1 $3', round(d['mib_per_sec'], 1), 'errors', d['errors'])"
}

for r in $(seq 1 "$ROUNDS"); do
    BIN_DIR=$TEST_BIN_DIR
    start_single 9300
    for s in $SIZES; do cell "single-r$r" 127.0.0.1:9300 "$s"; done
    stop_all
    for v in base test; do
        if [ $v = base ]; then BIN_DIR=$DATA/base-bin; else BIN_DIR=$TEST_BIN_DIR; fi
        start_cluster 9300
        h=$(IFS=,; echo "${hosts[*]}")
        for s in $SIZES; do cell "$v-r$r" "$h" "$s"; done
        stop_all
    done
done

python3 - "$OUT" "$ROUNDS" $SIZES <<'PY'
import json, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
v = lambda label, r, s: json.load(open(f"{out}/{label}-r{r}-{s}.json"))["mib_per_sec"]
for s in sizes:
    rows = [(v("base", r, s) / v("single", r, s), v("test", r, s) / v("single", r, s),
             v("test", r, s) / v("base", r, s)) for r in range(1, rounds + 1)]
    for r, (b, t, tb) in enumerate(rows, 1):
        print(f"{s} round {r}: base/single {b:.2f}  test/single {t:.2f}  test/base {tb:.2f}")
    print(f"{s} median test/base {statistics.median(x[2] for x in rows):.2f}")
PY
