#!/usr/bin/env bash
# Encrypted PUT and GET throughput beside plain, in one run on one node (4 drives, 2+2): for each
# size, quarry-bench put and get with plain objects, SSE-S3, SSE-KMS, and plain again (the two
# plain runs bracket the encrypted ones, so drift on a shared machine shows), then the ratio of
# each encrypted run's MiB/s to the plain runs' mean. The built-in key service has one key
# (bench-key) for SSE-S3 and SSE-KMS. Release binaries: `cargo build --release -p quarry -p
# quarry-bench` first.
#
#   scripts/bench-sse.sh [OUT_DIR]
#
# Environment: BIN_DIR (default target/release), DATA (default ./data/bench-sse), DURATION
# (default 8s), SIZES (default "1MiB 64MiB"), CONC (default 8), PORT (default 9370).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-sse}
DURATION=${DURATION:-8s}
SIZES=${SIZES:-"1MiB 64MiB"}
CONC=${CONC:-8}
PORT=${PORT:-9370}
OUT=${1:-$DATA/results}
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
mkdir -p "$DATA" "$OUT"
DATA=$(cd "$DATA" && pwd)
OUT=$(cd "$OUT" && pwd)

source scripts/lib/bench-servers.sh

QUARRY_KMS_SECRET_KEY=bench-key:$(head -c 32 /dev/urandom | base64)
export QUARRY_KMS_SECRET_KEY
start_single "$PORT"

runs=()
for size in $SIZES; do
    case $size in 64MiB) objs=24 ;; *) objs=400 ;; esac
    for mode in put get; do
        for sse in none s3 kms none2; do
            name=$mode-$size-$sse
            echo "== $name" >&2
            # GETs read objects prepared in a bucket of their own per run, written with the
            # run's encryption.
            "$BIN_DIR/quarry-bench" "$mode" --host "127.0.0.1:$PORT" --access-key "$QUARRY_ROOT_USER" \
                --secret-key "$QUARRY_ROOT_PASSWORD" --bucket "sse-$mode-$(echo "$size-$sse" | tr 'A-Z' 'a-z')" \
                --obj.size "$size" --concurrent "$CONC" --duration "$DURATION" --objects "$objs" \
                --sse "${sse%2}" --json >"$OUT/$name.json"
            runs+=("$OUT/$name.json")
        done
    done
done

python3 - "${runs[@]}" <<'PY'
import json, os, sys
rows = {}
for path in sys.argv[1:]:
    mode, size, sse = os.path.basename(path)[:-5].split("-")
    r = json.load(open(path))
    if r["errors"] or r.get("verify_errors"):
        sys.exit(f"{path}: {r['errors']} errors: {r.get('error_samples', [])[:3]}")
    op = next(o for o in r["operations"] if o["op"].upper() == mode.upper())
    rows[(mode, size, sse)] = op
print(f"{'run':<14} {'plain MiB/s':>12} {'SSE-S3 MiB/s':>13} {'SSE-KMS MiB/s':>14} {'S3/plain':>9} {'KMS/plain':>10}")
for (mode, size, sse), op in rows.items():
    if sse != "none":
        continue
    plain = (op["mib_per_sec"] + rows[(mode, size, "none2")]["mib_per_sec"]) / 2
    s3 = rows[(mode, size, "s3")]["mib_per_sec"]
    kms = rows[(mode, size, "kms")]["mib_per_sec"]
    print(f"{mode + ' ' + size:<14} {plain:>12.1f} {s3:>13.1f} {kms:>14.1f} {s3 / plain:>9.2f} {kms / plain:>10.2f}"
          f"   (plain runs {op['mib_per_sec']:.1f} and {rows[(mode, size, 'none2')]['mib_per_sec']:.1f})")
PY
