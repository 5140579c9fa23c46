#!/usr/bin/env bash
# The bench matrix of scripts/bench.sh against S3 endpoints that are already running (Quarry,
# MinIO, RustFS, Garage, AWS...): each target in turn, in rounds (A B C, A B C, ...) so that a
# shared machine's noise lands on all of them, then a table of each cell's median over the rounds
# and its ratio to the first target. Nothing is started or stopped here.
#
#   TARGETS="quarry=http://127.0.0.1:9000@AK:SK rustfs=http://127.0.0.1:9100@AK2:SK2" \
#       scripts/bench-endpoints.sh [OUT_DIR]
#
# Each target is NAME=URL@ACCESS_KEY:SECRET_KEY; an https:// URL turns on --tls (CACERT=FILE
# checks the server against that CA, INSECURE=1 accepts any certificate). Every target must accept
# bucket creation (BUCKET, default quarry-bench) and the objects are removed after each cell.
# Environment: BIN_DIR (quarry-bench's directory, default target/release), DURATION (default
# 10s), SIZES (default "4KiB 1MiB 64MiB"), CONC (default "8"), MODES (default "put get"),
# ROUNDS (default 2), REGION (default us-east-1).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
DURATION=${DURATION:-10s}
SIZES=${SIZES:-"4KiB 1MiB 64MiB"}
CONC=${CONC:-8}
MODES=${MODES:-"put get"}
ROUNDS=${ROUNDS:-2}
REGION=${REGION:-us-east-1}
BUCKET=${BUCKET:-quarry-bench}
OUT=${1:-target/bench-endpoints/$(date -u +%Y%m%dT%H%M%SZ)}

if [ -z "${TARGETS:-}" ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
if [ ! -x "$BIN_DIR/quarry-bench" ]; then
    echo "error: no quarry-bench in $BIN_DIR (cargo build --release -p quarry-bench)" >&2
    exit 2
fi
names=()
declare -A url ak sk
for t in $TARGETS; do
    name=${t%%=*}
    rest=${t#*=}
    creds=${rest##*@}
    if [ "$name" = "$t" ] || [ "$creds" = "$rest" ] || [ "${creds#*:}" = "$creds" ]; then
        echo "error: target '$t' is not NAME=URL@ACCESS_KEY:SECRET_KEY" >&2
        exit 2
    fi
    case $name in *[!A-Za-z0-9_-]* | "")
        echo "error: target name '$name' must be letters, digits, '-' or '_'" >&2
        exit 2
        ;;
    esac
    names+=("$name")
    url[$name]=${rest%@*}
    ak[$name]=${creds%%:*}
    sk[$name]=${creds#*:}
    case ${url[$name]} in http://* | https://*) ;; *)
        echo "error: target '$name': the URL must start with http:// or https://" >&2
        exit 2
        ;;
    esac
done
mkdir -p "$OUT"

run_cell() { # NAME MODE SIZE C ROUND
    local name=$1 mode=$2 size=$3 c=$4 round=$5 u=${url[$1]} args=()
    case $u in https://*) args+=(--tls) ;; esac
    [ -n "${CACERT:-}" ] && args+=(--cacert "$CACERT")
    [ "${INSECURE:-0}" = 1 ] && args+=(--insecure)
    if [ "$mode" = get ]; then
        case $size in 64MiB) args+=(--objects 24) ;; 1MiB) args+=(--objects 400) ;; *) args+=(--objects 2000) ;; esac
    fi
    local host=${u#*://}
    host=${host%%/*}
    echo "== round $round $name $mode $size c=$c"
    QUARRY_BENCH_SECRET_KEY=${sk[$name]} "$BIN_DIR/quarry-bench" "$mode" --host "$host" \
        --access-key "${ak[$name]}" --region "$REGION" --bucket "$BUCKET" --obj.size "$size" \
        --concurrent "$c" --duration "$DURATION" "${args[@]}" --json \
        >"$OUT/$name-$mode-$size-c$c-r$round.json" 2>"$OUT/$name-$mode-$size-c$c-r$round.err" ||
        echo "   (failed: see $OUT/$name-$mode-$size-c$c-r$round.err)"
}

for round in $(seq 1 "$ROUNDS"); do
    for size in $SIZES; do
        for c in $CONC; do
            for mode in $MODES; do
                for name in "${names[@]}"; do run_cell "$name" "$mode" "$size" "$c" "$round"; done
            done
        done
    done
done

python3 - "$OUT" "${names[*]}" "$SIZES" "$CONC" "$MODES" "$ROUNDS" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
out, names, sizes, concs, modes, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), \
    sys.argv[4].split(), sys.argv[5].split(), int(sys.argv[6])
def figure(path):
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        return None
    if r.get("errors", 0) or r.get("verify_errors", 0) or not r.get("total_ops"):
        return None
    # Small objects in operations a second, the rest in MiB/s.
    small = r["obj_size"] <= 64 * 1024
    return (r["ops_per_sec"] if small else r["mib_per_sec"], "op/s" if small else "MiB/s")
print("| cell | " + " | ".join(names) + " | " + " | ".join(f"{n}/{names[0]}" for n in names[1:]) + " |")
print("|---" * (1 + 2 * len(names) - 1) + "|")
for size in sizes:
    for c in concs:
        for mode in modes:
            meds, unit = [], "?"
            for n in names:
                got = [f for f in (figure(f"{out}/{n}-{mode}-{size}-c{c}-r{r}.json")
                                   for r in range(1, rounds + 1)) if f is not None]
                meds.append(statistics.median(v for v, _ in got) if got else None)
                unit = got[0][1] if got else unit
            cells = [f"{m:,.0f}" if m is not None else "failed" for m in meds]
            ratios = [f"{m / meds[0]:.2f}" if m is not None and meds[0] else "-" for m in meds[1:]]
            print(f"| {mode.upper()} {size} c={c} ({unit}) | " + " | ".join(cells + ratios) + " |")
print(f"\nmedian of {rounds} round(s); every report: {out}/")
PY
