#!/usr/bin/env bash
# S3 over RDMA beside plain HTTP, in the Soft-RoCE VM: a 4-node loopback cluster with
# QUARRY_RDMA=on; quarry-bench get and put against one node, each cell once over HTTP and once
# with --rdma (the client's registered buffer), in the same run. Soft-RoCE under QEMU's TCG
# emulates the NIC in software: read the ratios, not the figures (SOFTROCE.md).
#
#   scripts/vm/bench-rdma.sh
#
# Environment: BIN_DIR (default target/release, else target/debug), SIZES (default "1MiB 8MiB"),
# CONC (default 4), DURATION (default 10s), QUARRY_VM_TIMEOUT (default 1200).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${BIN_DIR:-}" ]; then
    BIN_DIR=$PWD/target/release
    [ -x "$BIN_DIR/quarry-bench" ] && [ -x "$BIN_DIR/quarry" ] || BIN_DIR=$PWD/target/debug
fi
export BIN_DIR
if [ "${QUARRY_VM:-}" != 1 ]; then
    for b in quarry quarry-bench; do
        [ -x "$BIN_DIR/$b" ] || { echo "no $BIN_DIR/$b: cargo build --release -p quarry -p quarry-bench" >&2; exit 1; }
    done
    exec env QUARRY_VM_TIMEOUT="${QUARRY_VM_TIMEOUT:-1200}" SIZES="${SIZES:-}" CONC="${CONC:-}" \
        DURATION="${DURATION:-}" scripts/vm/run.sh -- "$PWD/scripts/vm/bench-rdma.sh"
fi

SIZES=${SIZES:-"1MiB 8MiB"}
CONC=${CONC:-4}
DURATION=${DURATION:-10s}
DATA=/tmp/bench-rdma
mkdir -p "$DATA"
export QUARRY_ROOT_USER=benchadmin QUARRY_ROOT_PASSWORD=bench-secret-key-123
export QUARRY_RDMA=on QUARRY_RDMA_POOL_BYTES=64MiB
# Inside the VM only, on loopback: /metrics readable for the figures below.
export QUARRY_METRICS_PUBLIC=true
source scripts/lib/bench-servers.sh
start_cluster 9400
host=${hosts[0]}
echo "BIN_DIR=$BIN_DIR; cluster up on ${hosts[*]}; each cell $DURATION at c=$CONC against $host"

# MiB/s of a report; a run with errors is not a figure.
mbps() {
    python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
if r["errors"] or r["verify_errors"] or not r["total_ops"]:
    sys.exit("%s: %d errors, %d verify errors, %d ops: %s" % (sys.argv[1], r["errors"], r["verify_errors"], r["total_ops"], r["error_samples"][:3]))
print("%.1f" % r["mib_per_sec"])' "$1"
}
printf '%-6s %-5s %12s %12s %8s\n' op size "HTTP MiB/s" "RDMA MiB/s" ratio
for size in $SIZES; do
    for mode in put get; do
        for t in http rdma; do
            extra=()
            [ "$t" = rdma ] && extra=(--rdma)
            out=$DATA/$mode-$size-$t.json
            "$BIN_DIR/quarry-bench" "$mode" --host "$host" --access-key "$QUARRY_ROOT_USER" \
                --secret-key "$QUARRY_ROOT_PASSWORD" --obj.size "$size" --concurrent "$CONC" \
                --duration "$DURATION" --objects 16 --json "${extra[@]}" >"$out" 2>"$out.err" ||
                { echo "$mode $size $t failed:"; cat "$out.err"; exit 1; }
        done
        h=$(mbps "$DATA/$mode-$size-http.json")
        r=$(mbps "$DATA/$mode-$size-rdma.json")
        printf '%-6s %-5s %12s %12s %8s\n' "$mode" "$size" "$h" "$r" \
            "$(python3 -c "import sys; h,r=map(float,sys.argv[1:]); print('%.2fx' % (r/h) if h else '-')" "$h" "$r")"
    done
done
for n in 1; do
    curl -fsS "http://127.0.0.1:940$n/metrics" |
        grep -E '^quarry_s3_rdma_(get_requests|put_requests|sent_bytes|received_bytes|copied_bytes|errors)_total' |
        sed "s/^/node $n: /" || true
done
