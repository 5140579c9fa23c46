# Sourced by the scripts/bench*.sh scripts: start Quarry servers for a benchmark,
# wait until they are ready, and stop them all when the script exits. Needs BIN_DIR and DATA
# (an absolute path) set by the caller.

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT

wait_ready() { # HOST:PORT
    for _ in $(seq 1 200); do
        curl -fsS "http://$1/health/ready" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server $1 not ready" >&2
    return 1
}

# start_single PORT: one node on 127.0.0.1:PORT, four drives under $DATA/single (emptied first
# unless KEEP_DATA=1), its log in $DATA/single.log; the caller's environment (exported) reaches
# the server.
start_single() {
    [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$DATA/single"
    QUARRY_CONSOLE_ADDRESS=off "$BIN_DIR/quarry" server --address "127.0.0.1:$1" "$DATA"/single/d{1..4} \
        >"$DATA/single.log" 2>&1 &
    pids+=($!)
    wait_ready "127.0.0.1:$1"
}

# start_cluster BASE_PORT: four nodes on 127.0.0.1:BASE_PORT+1..+4, four drives each under
# $DATA/cluster/nodeN (emptied first unless KEEP_DATA=1), erasure sets of 4 (each across the four
# nodes); logs in $DATA/nodeN.log. Sets `hosts` to the nodes' HOST:PORT.
start_cluster() {
    local base=$1 n args=()
    [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$DATA/cluster"
    for n in 1 2 3 4; do args+=("http://127.0.0.1:$((base + n))$DATA/cluster/node$n/d{1...4}"); done
    for n in 1 2 3 4; do
        QUARRY_CONSOLE_ADDRESS=off \
            "$BIN_DIR/quarry" server --address "127.0.0.1:$((base + n))" --set-size 4 "${args[@]}" \
            >"$DATA/node$n.log" 2>&1 &
        pids+=($!)
    done
    hosts=()
    for n in 1 2 3 4; do
        wait_ready "127.0.0.1:$((base + n))"
        hosts+=("127.0.0.1:$((base + n))")
    done
}
