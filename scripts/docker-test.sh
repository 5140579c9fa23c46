#!/usr/bin/env bash
# The Docker test (a stage of scripts/test): builds the runtime image of docker/Dockerfile from
# the binaries the test already built (target/debug/quarry and quarry-bench; nothing is compiled
# here) on a base image made locally from Debian's packages (scripts/docker-base.sh; no image
# registry is used), starts the 4-node compose cluster (docker/docker-compose.yml with the
# host-network override docker/docker-compose.test.yml: every node on 127.0.0.1, no bridge), and
# checks, with boto3 from .venv:
#   - every node logs that it serves over TCP (`--rdma auto`, no RDMA device in the container),
#     and every container turns healthy;
#   - PUT/GET of 0 B, 1 MiB + 1 and a 20 MiB multipart object through two different nodes,
#     byte-exact;
#   - `docker kill` of one node: reads of the earlier objects and new writes through two other
#     nodes go on;
#   - `docker start` of it again: it turns healthy, the writers' heal queues drain, and the
#     objects written while it was down are on its drives (their metadata and shard files); then,
#     with the two writer nodes killed, those objects read back byte-exact through the healed node
#     and the fourth, so its shards are whole.
# Every wait is bounded; containers and volumes are removed on exit (the compose project never
# makes a network: host mode). A dockerd this script started is stopped again.
#
# Skips (exit 0, one "docker-test: SKIPPED: ..." line) when no container engine can run here:
# no docker CLI, no dockerd, a dockerd that does not start, no compose, or containers that cannot
# start; also without a .venv with boto3 (scripts/test makes it unless QUARRY_SKIP_PYTHON=1).
#
# Environment: QUARRY_BIN_DIR (default target/debug) where quarry and quarry-bench are,
# QUARRY_DOCKER_TIMEOUT (default 180) seconds for each wait, QUARRY_DOCKER_SKIP_FILE a file that
# gets the reason when the test skips (scripts/test reports it as SKIP).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN_DIR=${QUARRY_BIN_DIR:-$TARGET/debug}
PY=$ROOT/.venv/bin/python
TIMEOUT=${QUARRY_DOCKER_TIMEOUT:-180}
STATE=$TARGET/docker
RUN_ID="$$"
PROJECT="quarry-test-$RUN_ID"
IMAGE="quarry:test-$RUN_ID"
WORK="$STATE/run-$RUN_ID"
BUCKET=docker-test

T0=$(date +%s)
say() { printf 'docker-test: [%3ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
skip() {
    printf 'docker-test: SKIPPED: %s\n' "$*"
    if [ -n "${QUARRY_DOCKER_SKIP_FILE:-}" ]; then printf '%s\n' "$*" >"$QUARRY_DOCKER_SKIP_FILE"; fi
    exit 0
}
fail() {
    printf 'docker-test: FAILED: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------------
# Clean-up on every exit
# ---------------------------------------------------------------------------------------------
compose() { "${COMPOSE[@]}" -p "$PROJECT" -f "$WORK/compose.yml" "$@"; }
declare -A CID=()
DOCKER=""
STARTED_DOCKERD=""
cleanup() {
    local rc=$?
    set +e
    if [ -f "$WORK/compose.yml" ]; then
        if [ "$rc" -ne 0 ]; then
            for n in 1 2 3 4; do
                [ -n "${CID[$n]:-}" ] || continue
                echo "---- node$n ($("$DOCKER" inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "${CID[$n]}" 2>/dev/null)), last log lines:" >&2
                "$DOCKER" logs --tail 25 "${CID[$n]}" 2>&1 | sed 's/^/    /' >&2
            done
        fi
        compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 ||
            echo "docker-test: warning: compose down failed for project $PROJECT" >&2
    fi
    [ -n "$DOCKER" ] && "$DOCKER" image rm -f "$IMAGE" >/dev/null 2>&1
    rm -rf "$WORK"
    if [ -n "$STARTED_DOCKERD" ]; then
        kill "$STARTED_DOCKERD" 2>/dev/null
        for _ in $(seq 1 40); do kill -0 "$STARTED_DOCKERD" 2>/dev/null || break; sleep 0.5; done
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# The engine: a docker CLI that builds with BuildKit, a running dockerd, compose
# ---------------------------------------------------------------------------------------------
# A CLI from 23.0 on builds with BuildKit only through the buildx plugin (without it, only with
# the legacy builder, which cannot skip the compiling stage); Debian's 20.10 CLI has BuildKit
# built in. Take the first docker on PATH that can.
declare -A seen=()
for c in $(type -ap docker); do
    real=$(readlink -f "$c")
    [ -n "${seen[$real]:-}" ] && continue
    seen[$real]=1
    if "$c" buildx version >/dev/null 2>&1; then
        DOCKER=$c
        break
    fi
    major=$("$c" --version 2>/dev/null | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
    if [ -n "$major" ] && [ "$major" -ge 20 ] && [ "$major" -lt 23 ]; then
        DOCKER=$c
        break
    fi
done
if [ -z "$DOCKER" ]; then
    if ! command -v docker >/dev/null 2>&1; then
        skip "no docker CLI (Debian: apt-get install docker.io docker-compose)"
    fi
    skip "no docker CLI here builds with BuildKit (install the buildx plugin, or Debian's docker.io)"
fi
export DOCKER_BUILDKIT=1

if ! "$DOCKER" info >/dev/null 2>&1; then
    DOCKERD=$(command -v dockerd || true)
    [ -n "$DOCKERD" ] || skip "no Docker engine: $DOCKER cannot reach one and dockerd is not installed"
    [ "$(id -u)" -eq 0 ] || skip "no Docker engine running, and starting dockerd needs root"
    mkdir -p "$STATE"
    say "starting dockerd (log: $STATE/dockerd.log)"
    # No default bridge and no iptables rules: the test's containers use the host's network.
    setsid "$DOCKERD" --bridge=none --iptables=false --ip6tables=false \
        >"$STATE/dockerd.log" 2>&1 </dev/null &
    STARTED_DOCKERD=$!
    for _ in $(seq 1 60); do
        "$DOCKER" info >/dev/null 2>&1 && break
        kill -0 "$STARTED_DOCKERD" 2>/dev/null || break
        sleep 0.5
    done
    if ! "$DOCKER" info >/dev/null 2>&1; then
        kill "$STARTED_DOCKERD" 2>/dev/null || true
        skip "dockerd does not start here: $(grep -m1 -E 'level=(fatal|error)' "$STATE/dockerd.log" || tail -n1 "$STATE/dockerd.log")"
    fi
fi

if "$DOCKER" compose version >/dev/null 2>&1; then
    COMPOSE=("$DOCKER" compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    skip "no Docker Compose (Debian: apt-get install docker-compose)"
fi

if ! { [ -x "$PY" ] && "$PY" -c 'import boto3' >/dev/null 2>&1; }; then
    skip "no .venv with boto3 (scripts/test makes it unless QUARRY_SKIP_PYTHON=1)"
fi
for b in quarry quarry-bench; do
    [ -x "$BIN_DIR/$b" ] || fail "$BIN_DIR/$b is missing: build the workspace first (cargo build --workspace --all-targets)"
done

# ---------------------------------------------------------------------------------------------
# The image
# ---------------------------------------------------------------------------------------------
say "engine: $("$DOCKER" version -f 'server {{.Server.Version}}, client {{.Client.Version}}' 2>/dev/null) ($DOCKER); compose: ${COMPOSE[*]}"
BASE=$(DOCKER=$DOCKER scripts/docker-base.sh) || fail "could not make the base image (scripts/docker-base.sh)"
say "base image $BASE"

mkdir -p "$WORK"
chmod 700 "$WORK"
if ! out=$("$DOCKER" run --rm --network none --entrypoint /bin/true "$BASE" 2>&1); then
    skip "containers cannot start here: $out"
fi

# The build context: the test's binaries (debug info stripped: 5x smaller, symbols kept) and
# the health check. Always the same directory (one run at a time builds from it), so that
# BuildKit keeps one copy of it in its cache rather than one per run.
CTX=$STATE/context
exec 8>"$STATE/context.lock"
flock -w "$TIMEOUT" 8 || fail "another run held $STATE/context.lock for ${TIMEOUT}s"
rm -rf "$CTX"
mkdir -p "$CTX/prebuilt" "$CTX/docker"
for b in quarry quarry-bench; do
    objcopy --strip-debug "$BIN_DIR/$b" "$CTX/prebuilt/$b" 2>/dev/null || cp "$BIN_DIR/$b" "$CTX/prebuilt/$b"
done
cp docker/healthcheck.sh "$CTX/docker/"
say "docker build --target runtime (BINARIES=prebuilt, RUNTIME_BASE=$BASE, no network) -> $IMAGE"
# DEBIAN_IMAGE too, so that no stage could name an image that would have to be pulled.
if ! "$DOCKER" build --network none --progress plain -f docker/Dockerfile --target runtime \
    --build-arg BINARIES=prebuilt --build-arg RUNTIME_BASE="$BASE" --build-arg DEBIAN_IMAGE="$BASE" \
    -t "$IMAGE" "$CTX" >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    fail "docker build failed"
fi
rm -rf "$CTX"
exec 8>&-

# The image runs as its non-root user and carries the verbs user space: libibverbs and the
# providers (rxe for Soft-RoCE, mlx5 for ConnectX); every library of quarry resolves.
# shellcheck disable=SC2016 # expanded in the container
check=$("$DOCKER" run --rm --network none --entrypoint /bin/sh "$IMAGE" -c '
    set -e
    echo "user $(id -un) $(id -u)"
    for f in /usr/lib/x86_64-linux-gnu/libibverbs.so.1 \
             /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so \
             /usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav*.so; do
        [ -e "$f" ] || { echo "missing $f"; exit 1; }
    done
    if ldd /usr/local/bin/quarry | grep "not found"; then exit 1; fi
    /usr/local/bin/quarry --version' 2>&1) || fail "the image's runtime check failed: $check"
case "$check" in
*"user quarry 10001"*) ;;
*) fail "the image does not run as user quarry (10001): $check" ;;
esac
say "image: $(echo "$check" | tr '\n' ' ')"

# ---------------------------------------------------------------------------------------------
# The cluster
# ---------------------------------------------------------------------------------------------
ports=$("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)
read -r P1 P2 P3 P4 <<<"$ports"
declare -A PORT=([1]=$P1 [2]=$P2 [3]=$P3 [4]=$P4)
url() { echo "http://127.0.0.1:${PORT[$1]}"; }
export QUARRY_IMAGE=$IMAGE QUARRY_TEST_PORT1=$P1 QUARRY_TEST_PORT2=$P2 QUARRY_TEST_PORT3=$P3 QUARRY_TEST_PORT4=$P4
export QUARRY_ROOT_USER=quarry-docker-test
QUARRY_ROOT_PASSWORD=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
export QUARRY_ROOT_PASSWORD
# /metrics needs a bearer token (or an explicit public choice): the nodes get this one.
QUARRY_METRICS_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
export QUARRY_METRICS_TOKEN

# The merged compose file, without `ports` (host networking publishes nothing; Compose 1.x refuses
# both together and cannot drop a list entry in an override). Where this host cannot grant an
# unlimited memlock (no CAP_SYS_RESOURCE, as in some sandboxes: runc then fails to start the
# container), the nodes get the host's own limit instead: with no RDMA device nothing is pinned.
# It holds the password: mode 600.
umask 077
"${COMPOSE[@]}" -p "$PROJECT" -f docker/docker-compose.yml -f docker/docker-compose.test.yml config \
    >"$WORK/merged.yml" || fail "docker/docker-compose.yml + docker-compose.test.yml do not merge"
"$PY" - "$WORK/merged.yml" "$WORK/compose.yml" <<'EOF' || fail "cannot rewrite the merged compose file"
import resource
import sys

import yaml

doc = yaml.safe_load(open(sys.argv[1]))
try:
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    memlock = None
except (ValueError, OSError):
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    print(f"docker-test: this host cannot raise memlock above {memlock} B: the nodes get that")
for name, s in doc["services"].items():
    if s.get("network_mode") != "host":
        sys.exit(f"{name}: network_mode is {s.get('network_mode')!r}, want host")
    if (s.get("ulimits") or {}).get("memlock") not in ({"soft": -1, "hard": -1}, -1):
        sys.exit(f"{name}: ulimits.memlock is {s.get('ulimits')!r}, want unlimited")
    if memlock is not None:
        s["ulimits"]["memlock"] = {"soft": memlock, "hard": memlock}
    s.pop("ports", None)
    s.pop("build", None)
doc.pop("networks", None)
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
EOF
umask 022

say "compose up: 4 nodes on 127.0.0.1:$P1,$P2,$P3,$P4 (project $PROJECT)"
compose up -d --no-build >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; fail "compose up failed"; }
for n in 1 2 3 4; do
    CID[$n]=$(compose ps -q "node$n")
    [ -n "${CID[$n]}" ] || fail "no container for node$n"
done
nets=$("$DOCKER" network ls --filter "label=com.docker.compose.project=$PROJECT" -q)
[ -z "$nets" ] || fail "compose made a network for the test ($nets); it must use the host's"

# wait_until WHAT CMD...: runs CMD until it succeeds, at most TIMEOUT seconds; a node container
# that exits meanwhile (but for those in DOWN) fails the wait at once.
wait_until() {
    local what=$1 deadline=$(($(date +%s) + TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        for n in 1 2 3 4; do
            case " ${DOWN:-} " in *" $n "*) continue ;; esac
            if [ "$("$DOCKER" inspect -f '{{.State.Running}}' "${CID[$n]}")" != true ]; then
                fail "node$n exited while waiting for $what"
            fi
        done
        [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${TIMEOUT}s waiting for $what"
        sleep 1
    done
}
healthy() { [ "$("$DOCKER" inspect -f '{{.State.Health.Status}}' "${CID[$1]}")" = healthy ]; }
ready() { curl -fsS --max-time 5 -o /dev/null "$(url "$1")/health/ready"; }
all() {
    local f=$1 n
    shift
    for n in "$@"; do "$f" "$n" || return 1; done
}
s3() { "$PY" scripts/docker-s3.py "$@" || fail "S3: docker-s3.py $*"; }

wait_until "every node ready (/health/ready)" all ready 1 2 3 4
wait_until "every container healthy" all healthy 1 2 3 4
say "cluster formed; all four containers healthy"
for n in 1 2 3 4; do
    line=$("$DOCKER" logs "${CID[$n]}" 2>&1 | grep -m1 -E 'RDMA: .*TCP' || true)
    [ -n "$line" ] || fail "node$n did not log its RDMA choice (want 'RDMA: ... TCP' with --rdma auto and no device)"
done
say "every node: ${line#*INFO }"

# ---------------------------------------------------------------------------------------------
# Traffic, a node killed, and its heal
# ---------------------------------------------------------------------------------------------
s3 mb "$(url 1)" "$BUCKET"
s3 put "$(url 1)" "$BUCKET" before
s3 get "$(url 2)" "$BUCKET" before
say "PUT through node1, GET through node2: byte-exact"

"$DOCKER" kill "${CID[3]}" >/dev/null
DOWN="3"
say "docker kill node3"
s3 get "$(url 2)" "$BUCKET" before
s3 get "$(url 4)" "$BUCKET" before
s3 put "$(url 1)" "$BUCKET" down1
s3 put "$(url 2)" "$BUCKET" down2
s3 get "$(url 4)" "$BUCKET" down1
s3 get "$(url 1)" "$BUCKET" down2
say "node3 down: reads through node2 and node4, writes through node1 and node2 go on"

"$DOCKER" start "${CID[3]}" >/dev/null
DOWN=""
say "docker start node3"
wait_until "node3 ready again" ready 3
wait_until "node3 healthy again" healthy 3

# The writers queued heals for node3's drives; they drain once it is back. heal_done N: node N's
# admin heal status (through `quarry admin` in its container) has an empty queue and retry list
# and sees all 16 drives online.
heal_done() {
    "$DOCKER" exec "${CID[$1]}" quarry admin heal-status --json --endpoint "$(url "$1")" |
        "$PY" -c '
import json, sys
s = json.load(sys.stdin)
online = sum(d["online"] for d in s["drives"])
sys.exit(0 if s["queue_len"] == 0 and s["retry_len"] == 0 and online == len(s["drives"]) == 16 else 1)'
}
# on_node3 SET: every object of SET has its metadata on exactly one of node3's drives (each set
# has one drive per node), and the two larger ones their shard files.
on_node3() {
    # shellcheck disable=SC2016 # expanded in the container
    "$DOCKER" exec "${CID[3]}" sh -c '
        for k in empty 1mib-plus-1 20mib-multipart; do
            m=$(ls /data[1-4]/n3/'"$BUCKET/$1"'/$k/quarry.meta 2>/dev/null | wc -l)
            [ "$m" -eq 1 ] || { echo "$k: metadata on $m drives"; exit 1; }
            [ "$k" = empty ] && continue
            d=$(dirname "$(ls /data[1-4]/n3/'"$BUCKET/$1"'/$k/quarry.meta)")
            [ -n "$(find "$d" -name "part.*" -size +0)" ] || { echo "$k: no shard file"; exit 1; }
        done'
}
wait_until "node1's and node2's heal queues to drain" all heal_done 1 2
wait_until "the objects written while node3 was down on node3's drives" all on_node3 down1 down2
for n in 1 2; do
    say "node$n heal status: $("$DOCKER" exec "${CID[$n]}" quarry admin heal-status --endpoint "$(url "$n")" | sed -n 's/^Since start: //p')"
done
for n in 1 2 3 4; do
    say "node$n metrics: $(curl -fsS --max-time 5 -H "Authorization: Bearer $QUARRY_METRICS_TOKEN" "$(url "$n")/metrics" | grep -E '^quarry_(healed_objects|heal_failed|heal_queued)_total' | tr '\n' ' ')"
done
say "the objects written while node3 was down are on its drives"

# Its shards are whole: with node1 and node2 gone, each 2+2 object is read from node3's and
# node4's shards alone.
"$DOCKER" kill "${CID[1]}" "${CID[2]}" >/dev/null
DOWN="1 2"
say "docker kill node1 node2"
s3 get "$(url 3)" "$BUCKET" down1
s3 get "$(url 4)" "$BUCKET" down2
s3 get "$(url 3)" "$BUCKET" before
say "node1 and node2 down: the healed objects read back byte-exact through node3 and node4"
healthy 3 || fail "node3 no longer reports healthy"
say "passed"
