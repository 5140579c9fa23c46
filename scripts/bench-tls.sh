#!/usr/bin/env bash
# What HTTPS costs the S3 path: one single node (4 drives, 2+2) over plain HTTP and one over
# HTTPS (a certificate from `quarry admin cert generate`), the same quarry-bench runs against
# each, alternating, in one run so the ratios are comparable on a shared machine. Release
# binaries: `cargo build --release -p quarry -p quarry-bench` first.
#
#   scripts/bench-tls.sh [OUT_DIR]
#
# The HTTPS runs are `quarry-bench --tls` with the test CA as the client's trusted roots
# (SSL_CERT_FILE), so both sides use the SDK's same HTTP client, TLS being the only difference.
#
# Environment: BIN_DIR (default target/release), BENCH_BIN (default $BIN_DIR/quarry-bench), DATA (default ./data/bench-tls), DURATION
# (default 8s), SIZES (default "1MiB 64MiB"), CONC (default 8), MODES (default "put get"),
# ROUNDS (default 2). Prints ops/s and MiB/s of each run and the HTTPS/HTTP ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DATA=${DATA:-./data/bench-tls}
DURATION=${DURATION:-8s}
SIZES=${SIZES:-"1MiB 64MiB"}
CONC=${CONC:-8}
MODES=${MODES:-"put get"}
ROUNDS=${ROUNDS:-2}
BENCH_BIN=${BENCH_BIN:-$BIN_DIR/quarry-bench}
OUT=${1:-$DATA/results}
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
rm -rf "$DATA/http" "$DATA/https" "$DATA/certs" "$DATA/ca"
mkdir -p "$DATA" "$OUT"
DATA=$(cd "$DATA" && pwd)
OUT=$(cd "$OUT" && pwd)

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop_all EXIT
wait_ready() { # URL CURL_ARGS...
    local url=$1
    shift
    for _ in $(seq 1 200); do
        curl -fsS "$@" "$url/health/ready" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server $url not ready" >&2
    return 1
}

"$BIN_DIR/quarry" admin cert generate --out "$DATA/certs" --ca-dir "$DATA/ca" 127.0.0.1 >/dev/null
HOME="$DATA" QUARRY_CONSOLE_ADDRESS=off "$BIN_DIR/quarry" server --address 127.0.0.1:9410 "$DATA"/http/d{1..4} \
    >"$DATA/http.log" 2>&1 &
pids+=($!)
HOME="$DATA" QUARRY_CERTS_DIR="$DATA/certs" QUARRY_CONSOLE_ADDRESS=off "$BIN_DIR/quarry" server --address 127.0.0.1:9411 \
    "$DATA"/https/d{1..4} >"$DATA/https.log" 2>&1 &
pids+=($!)
wait_ready http://127.0.0.1:9410
wait_ready https://127.0.0.1:9411 --cacert "$DATA/ca/ca.crt"

bench() { # LABEL MODE SIZE ROUND ARGS...
    local label=$1 mode=$2 size=$3 round=$4
    shift 4
    local objs=()
    if [ "$mode" = get ]; then
        case $size in 64MiB) objs=(--objects 24) ;; *) objs=(--objects 400) ;; esac
    fi
    "$BENCH_BIN" "$mode" --access-key "$QUARRY_ROOT_USER" \
        --secret-key "$QUARRY_ROOT_PASSWORD" --obj.size "$size" --concurrent "$CONC" \
        --duration "$DURATION" "${objs[@]}" --json "$@" >"$OUT/$label-$mode-$size-$round.json"
}
rate() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%.1f %.1f %d' % (r['ops_per_sec'], r['mib_per_sec'], r['errors']))" "$1"; }

printf '%-5s %-6s %-5s %-14s %-14s %s\n' mode size round "http ops MiB/s" "https ops MiB/s" "https/http"
for size in $SIZES; do
    for mode in $MODES; do
        for round in $(seq 1 "$ROUNDS"); do
            bench http "$mode" "$size" "$round" --host 127.0.0.1:9410
            SSL_CERT_FILE="$DATA/ca/ca.crt" bench https "$mode" "$size" "$round" --host 127.0.0.1:9411 --tls
            read -r ho hm he < <(rate "$OUT/http-$mode-$size-$round.json")
            read -r so sm se < <(rate "$OUT/https-$mode-$size-$round.json")
            printf '%-5s %-6s %-5s %-14s %-14s %s (errors %s/%s)\n' "$mode" "$size" "$round" \
                "$ho $hm" "$so $sm" "$(python3 -c "print(f'{$sm/$hm:.3f}' if $hm else 'n/a')")" "$he" "$se"
        done
    done
done
