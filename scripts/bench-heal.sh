#!/usr/bin/env bash
# How long a heal takes on a 4-node loopback cluster (4 x 4 drives, sets of 4: 2+2, every set
# across the four nodes): once over healthy objects (every chunk read and checked), once after
# node 4's drives lost every object of the bucket (one shard per object rebuilt, decoded from the
# others, and written back over the network), then a last pass that must find nothing to do.
# Release binaries: `cargo build --release -p quarry -p quarry-bench` first. Compare two builds
# by running it with each BIN_DIR in turn on the same machine (report ratios: machines are noisy).
#
#   scripts/bench-heal.sh
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench-heal), OBJECTS
# (default 64), SIZE (default 4MiB), BASE_PORT (default 9320).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-heal}
OBJECTS=${OBJECTS:-64}
SIZE=${SIZE:-4MiB}
BASE_PORT=${BASE_PORT:-9320}
BUCKET=bench-heal
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA"
DATA=$(cd "$DATA" && pwd)

source scripts/lib/bench-servers.sh

now_ms() { date +%s%3N; }

start_cluster "$BASE_PORT"
endpoint=http://127.0.0.1:$((BASE_PORT + 1))

echo "== writing $OBJECTS objects of $SIZE"
"$BIN_DIR/quarry-bench" put --host "$(IFS=,; echo "${hosts[*]}")" --bucket "$BUCKET" \
    --access-key "$QUARRY_ROOT_USER" --secret-key "$QUARRY_ROOT_PASSWORD" \
    --obj.size "$SIZE" --objects "$OBJECTS" --concurrent 8 --duration 10m --noclear >/dev/null

heal() { # LABEL
    local t0 t1
    t0=$(now_ms)
    "$BIN_DIR/quarry" admin heal --wait --endpoint "$endpoint" "$BUCKET" >"$DATA/heal-$1.txt" 2>&1 || {
        echo "heal ($1) failed:" >&2
        cat "$DATA/heal-$1.txt" >&2
        return 1
    }
    t1=$(now_ms)
    echo "HEAL $1: $((t1 - t0)) ms ($(grep -m 1 "^Heal of bucket" "$DATA/heal-$1.txt"); $(grep -m 1 "^Verified" "$DATA/heal-$1.txt"))"
}

heal healthy
# Node 4 loses the bucket's objects on all its drives (the drives and the bucket stay).
for d in "$DATA"/cluster/node4/d*; do
    find "$d/$BUCKET" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
done
heal rebuild
heal after
