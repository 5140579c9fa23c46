#!/usr/bin/env bash
# Side-by-side throughput of a single node (4 drives, 2+2) and a 4-node loopback cluster
# (4 x 4 drives, sets of 4) with quarry-bench, in one run so the ratios are comparable on a
# shared machine. Release binaries: `cargo build --release -p quarry -p quarry-bench` first.
# (scripts/bench-endpoints.sh runs the same matrix against stores that are already running.)
#
#   scripts/bench.sh [OUT_DIR]
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench), DURATION
# (default 10s), SIZES (default "4KiB 1MiB 64MiB"), CONC (default "8 32"), MODES (default
# "put get").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench}
DURATION=${DURATION:-10s}
SIZES=${SIZES:-"4KiB 1MiB 64MiB"}
CONC=${CONC:-"8 32"}
MODES=${MODES:-"put get"}
OUT=${1:-$DATA/results}
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA" "$OUT"
DATA=$(cd "$DATA" && pwd)

source scripts/lib/bench-servers.sh

run_matrix() { # label host...
    local label=$1
    shift
    local hosts
    hosts=$(IFS=,; echo "$*")
    for size in $SIZES; do
        for c in $CONC; do
            for mode in $MODES; do
                local objs=()
                # Bound the prepared objects of GETs of large objects (memory and disk).
                if [ "$mode" = get ]; then
                    case $size in 64MiB) objs=(--objects 24) ;; 1MiB) objs=(--objects 400) ;; *) objs=(--objects 2000) ;; esac
                fi
                echo "== $label $mode $size c=$c"
                "$BIN_DIR/quarry-bench" "$mode" --host "$hosts" --access-key "$QUARRY_ROOT_USER" \
                    --secret-key "$QUARRY_ROOT_PASSWORD" --obj.size "$size" --concurrent "$c" \
                    --duration "$DURATION" "${objs[@]}" --json >"$OUT/$label-$mode-$size-c$c.json" ||
                    echo "   (failed: see $OUT/$label-$mode-$size-c$c.json)"
            done
        done
    done
}

# Single node.
start_single 9300
run_matrix single 127.0.0.1:9300
stop_all

# 4-node cluster, requests spread over the nodes.
start_cluster 9300
run_matrix cluster "${hosts[@]}"
stop_all

echo "results in $OUT; compare with: $BIN_DIR/quarry-bench compare $OUT/single-get-1MiB-c8.json $OUT/cluster-get-1MiB-c8.json"
