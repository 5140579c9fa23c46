#!/usr/bin/env bash
# Starts a 4-node x 4-drive Quarry cluster on this machine for trying it out: nodes on
# 127.0.0.1:9001..9004 (web consoles on 127.0.0.1:9101..9104), drives under ./data/cluster/nodeN/d1..d4, erasure sets of 4 drives
# (2 data + 2 parity), each set spanning the four nodes. Logs go to ./data/cluster/nodeN.log.
#
#   scripts/cluster.sh start     build (debug) if needed, start the nodes, wait until ready
#   scripts/cluster.sh stop      stop them (SIGTERM)
#   scripts/cluster.sh status    which nodes run
#
# Environment: QUARRY_BIN (default target/debug/quarry), QUARRY_ROOT_USER / QUARRY_ROOT_PASSWORD
# (default quarryadmin / quarryadmin-secret), NODES (default 4), BASE_PORT (default 9000),
# DATA (default ./data/cluster).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-4}
BASE_PORT=${BASE_PORT:-9000}
DATA=${DATA:-./data/cluster}
BIN=${QUARRY_BIN:-target/debug/quarry}
export QUARRY_ROOT_USER=${QUARRY_ROOT_USER:-quarryadmin}
export QUARRY_ROOT_PASSWORD=${QUARRY_ROOT_PASSWORD:-quarryadmin-secret}

drives() {
    local args=()
    for n in $(seq 1 "$NODES"); do
        args+=("http://127.0.0.1:$((BASE_PORT + n))${DATA_ABS}/node$n/d{1...4}")
    done
    echo "${args[@]}"
}

case "${1:-start}" in
start)
    if [ ! -x "$BIN" ]; then
        cargo build -p quarry
    fi
    mkdir -p "$DATA"
    DATA_ABS=$(cd "$DATA" && pwd)
    for n in $(seq 1 "$NODES"); do
        # shellcheck disable=SC2046
        "$BIN" server --address "127.0.0.1:$((BASE_PORT + n))" --set-size 4 $(drives) \
            --console-address "127.0.0.1:$((BASE_PORT + 100 + n))" \
            >"$DATA/node$n.log" 2>&1 &
        echo $! >"$DATA/node$n.pid"
    done
    for n in $(seq 1 "$NODES"); do
        port=$((BASE_PORT + n))
        for _ in $(seq 1 120); do
            if curl -fsS "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1; then
                break
            fi
            if ! kill -0 "$(cat "$DATA/node$n.pid")" 2>/dev/null; then
                echo "node $n exited; its log:" >&2
                cat "$DATA/node$n.log" >&2
                exit 1
            fi
            sleep 0.5
        done
        echo "node $n ready: http://127.0.0.1:$port"
    done
    echo "credentials: $QUARRY_ROOT_USER / $QUARRY_ROOT_PASSWORD"
    ;;
stop)
    for n in $(seq 1 "$NODES"); do
        [ -f "$DATA/node$n.pid" ] && kill "$(cat "$DATA/node$n.pid")" 2>/dev/null || true
        rm -f "$DATA/node$n.pid"
    done
    ;;
status)
    for n in $(seq 1 "$NODES"); do
        if [ -f "$DATA/node$n.pid" ] && kill -0 "$(cat "$DATA/node$n.pid")" 2>/dev/null; then
            echo "node $n: running (pid $(cat "$DATA/node$n.pid"))"
        else
            echo "node $n: stopped"
        fi
    done
    ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
