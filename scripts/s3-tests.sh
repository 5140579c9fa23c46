#!/usr/bin/env bash
# The ceph/s3-tests conformance gate: runs the suite's `core` group (the everyday S3 API,
# ../shared/s3-tests/README.md) against one node on four drives and against a cluster of
# four node processes on 127.0.0.1, then checks the results against the committed lists.
# Three users: main (the root user), alt and tenant (IAM users allowed s3:* through a group),
# created through the IAM API before each run (`quarry admin user add`, `group add`,
# `policy create|attach`). The lists:
#
#   tests/s3-tests/expected-pass.txt   every test here must pass (the list only grows: a test
#                                      that drops out of it is a regression)
#   tests/s3-tests/known-failures.txt  the core tests that still fail, each with its reason
#   tests/s3-tests/expected-pass-features.txt
#                                      tests outside core (versioning, tagging, lock, policies,
#                                      SSE, ...) that must pass; only these are run from those
#                                      groups, after core, on both the single node and the cluster
#
# Fails when an expected test does not pass, or when a core test is in neither list (a new test
# in the suite, or a new failure nobody explained). A known failure that now passes is printed,
# to be moved to expected-pass.txt. An expected test that fails is run once more, alone, against
# the same server: one that then passes is printed as FLAKY with its first failure's message (a
# timing accident on a loaded machine), not counted as a regression; more than a handful of
# failures are not rerun. Every failure is printed with its message. Per-test results: target/s3tests-results/{single,cluster}/
# status.tsv (and junit.xml, pytest.log, the server logs).
#
#   scripts/s3-tests.sh [single|cluster|both]     (default both)
#   scripts/s3-tests.sh check                      only check the last results against the lists
#
# Environment:
#   QUARRY_BIN       the server binary (default target/debug/quarry; never built here)
#   S3TESTS_HOME     the pinned suite and its harness (default ../shared/s3-tests)
#   S3TESTS_FILTER   the run.sh group (default core; another group is run and counted, but only
#                    core is checked against the lists)
#   S3TESTS_JOBS     pytest-xdist workers per run (default 1: test_list_buckets_paginated counts
#                    every bucket; the single-node and cluster runs go side by side instead)
#   S3TESTS_TIMEOUT  seconds per test (default 180: a debug build on a loaded 2-core machine takes
#                    over 60 s for the largest multipart tests; a hung test still ends)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

MODE=${1:-both}
BIN=${QUARRY_BIN:-$ROOT/target/debug/quarry}
SUITE=${S3TESTS_HOME:-$ROOT/../shared/s3-tests}
FILTER=${S3TESTS_FILTER:-core}
export S3TESTS_JOBS=${S3TESTS_JOBS:-1}
export S3TESTS_TIMEOUT=${S3TESTS_TIMEOUT:-180}
export S3TESTS_VENV=${S3TESTS_VENV:-$ROOT/target/s3tests-venv}
RESULTS=$ROOT/target/s3tests-results
EXPECTED=$ROOT/tests/s3-tests/expected-pass.txt
KNOWN=$ROOT/tests/s3-tests/known-failures.txt
FEATURES=$ROOT/tests/s3-tests/expected-pass-features.txt
AK=s3testsroot
SK=s3tests-secret-key-0123456789
# The built-in key service with the key ids the SSE-KMS tests ask for (testkey-1, testkey-2: the
# harness's KMS_TEST_KEYS), and SSE-C over the plain-HTTP test port.
export QUARRY_KMS_SECRET_KEY=testkey-1:MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=,testkey-2:MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=
export QUARRY_SSE_C_ALLOW_HTTP=1
# The lifecycle tests count a "day" as the harness's lc_debug_interval (10 s) and expect rules
# applied within a few of them: the worker's debug day, and a pass every 2 s.
export QUARRY_LC_DEBUG_DAY_SECS=10
export QUARRY_LC_INTERVAL=2
# New buckets with ACLs on (ObjectWriter): the suite assumes RGW's semantics, where CreateBucket
# and PutObject take any canned ACL. Quarry's own default is AWS's, BucketOwnerEnforced (ACLs off).
export QUARRY_DEFAULT_OBJECT_OWNERSHIP=ObjectWriter

case "$MODE" in single | cluster | both | check) ;; *)
    echo "usage: $0 [single|cluster|both|check]" >&2
    exit 2
    ;;
esac
if [ "$MODE" != check ] && [ ! -x "$BIN" ]; then
    echo "error: no server binary at $BIN (build it first: cargo build -p quarry)" >&2
    exit 2
fi
if [ "$MODE" != check ] && [ ! -x "$SUITE/run.sh" ]; then
    echo "error: the s3-tests harness is not at $SUITE (set S3TESTS_HOME)" >&2
    exit 2
fi

DATA=$(mktemp -d "${TMPDIR:-/tmp}/quarry-s3tests.XXXXXX")
# Every server started here writes its pid to $DATA/pids, so an interrupted run stops them all.
cleanup() {
    if [ -f "$DATA/pids" ]; then
        while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$DATA/pids"
        sleep 0.5
    fi
    rm -rf "$DATA"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() {
    # wait_ready PORT PID LOG
    for _ in $(seq 1 120); do
        if curl -fsS "http://127.0.0.1:$1/health/ready" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$2" 2>/dev/null; then
            echo "error: the server on port $1 exited; its log ($3):" >&2
            tail -n 30 "$3" >&2
            return 1
        fi
        sleep 0.5
    done
    echo "error: the server on port $1 is not ready after 60 s" >&2
    return 1
}

# make_user PORT NAME: creates IAM user NAME with an access key through the server's IAM API
# (`quarry admin user add`, signed by the root user); prints "ACCESS_KEY SECRET_KEY".
make_user() {
    QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK \
        "$BIN" admin user add --endpoint "http://127.0.0.1:$1" --json "$2" |
        python3 -c 'import json, sys; k = json.load(sys.stdin)["accessKey"]; print(k["AccessKeyId"], k["SecretAccessKey"])'
}

# rerun_failed RUN_DIR PORT LIST: runs the tests of LIST that failed in RUN_DIR once more, alone,
# against the same server, into RUN_DIR-rerun (at most a few: more failures than that are no
# flake, and are not rerun). The checks report a test that then passes as FLAKY, not a regression.
rerun_failed() {
    local run=$1 port=$2 list=$3 again
    rm -rf "$run-rerun"
    again=$(python3 "$ROOT/scripts/s3-tests-check.py" rerun-list "$run" "$list")
    [ -n "$again" ] || return 0
    mkdir -p "$run-rerun"
    printf '%s\n' "$again" >"$run-rerun/tests.txt"
    echo "running again alone: $(echo "$again" | tr '\n' ' ')"
    OUT_DIR=$run-rerun S3TESTS_SELECT_EXACT_FILE=$run-rerun/tests.txt \
        PYTHONPATH=$ROOT/tests/s3-tests${PYTHONPATH:+:$PYTHONPATH} \
        "$SUITE/run.sh" "http://127.0.0.1:$port" "$AK" "$SK" full -p exact_select >"$run-rerun/summary.txt" 2>&1 || true
    tail -n 1 "$run-rerun/summary.txt"
}

# Runs the suite against http://127.0.0.1:PORT into $RESULTS/NAME; with the core filter, then the
# listed feature tests into $RESULTS/NAME-features.
run_suite() {
    local name=$1 port=$2 out=$RESULTS/$1 keys
    rm -rf "$out" "$out-features"
    mkdir -p "$out"
    # Three distinct identities: main is the root user; alt and tenant are IAM users named as
    # run.sh's configuration names them (user_id alt, tenant: the IAM tests put policies on the
    # alt user by that name), allowed every S3 action. Quarry has one account, so they are distinct users of it, not other
    # accounts: the suite cleans up with every client (alt and tenant list and delete all the
    # test buckets), and tests that expect alt to be refused a bucket it does not own stay
    # deselected.
    keys=$(make_user "$port" alt) || { echo "error: cannot create the alt user" >&2; return 1; }
    export ALT_ACCESS_KEY=${keys%% *} ALT_SECRET_KEY=${keys#* }
    keys=$(make_user "$port" tenant) || { echo "error: cannot create the tenant user" >&2; return 1; }
    export TENANT_ACCESS_KEY=${keys%% *} TENANT_SECRET_KEY=${keys#* }
    echo '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}' |
        QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK \
            "$BIN" admin policy create --endpoint "http://127.0.0.1:$port" s3tests-full - >/dev/null &&
        QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK \
            "$BIN" admin group add --endpoint "http://127.0.0.1:$port" s3tests alt tenant >/dev/null &&
        QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK \
            "$BIN" admin policy attach --endpoint "http://127.0.0.1:$port" s3tests-full --group s3tests >/dev/null ||
        { echo "error: cannot give the alt and tenant users their policy" >&2; return 1; }
    OUT_DIR=$out "$SUITE/run.sh" "http://127.0.0.1:$port" "$AK" "$SK" "$FILTER" | tee "$out/summary.txt"
    if [ ! -s "$out/status.tsv" ]; then
        echo "error: the $name run wrote no status.tsv (see $out/pytest.log)" >&2
        return 1
    fi
    [ "$FILTER" = core ] && rerun_failed "$out" "$port" "$EXPECTED"
    if [ "$FILTER" = core ] && grep -q '^[^#]' "$FEATURES"; then
        mkdir -p "$out-features"
        OUT_DIR=$out-features S3TESTS_SELECT_EXACT_FILE=$FEATURES \
            PYTHONPATH=$ROOT/tests/s3-tests${PYTHONPATH:+:$PYTHONPATH} \
            "$SUITE/run.sh" "http://127.0.0.1:$port" "$AK" "$SK" full -p exact_select \
            | tee "$out-features/summary.txt"
        if [ ! -s "$out-features/status.tsv" ]; then
            echo "error: the $name feature run wrote no status.tsv (see $out-features/pytest.log)" >&2
            return 1
        fi
        rerun_failed "$out-features" "$port" "$FEATURES"
    fi
}

run_single() {
    local port log=$RESULTS/single-server.log
    port=$(free_port)
    mkdir -p "$RESULTS"
    QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK QUARRY_CONSOLE_ADDRESS=off \
        "$BIN" server --address "127.0.0.1:$port" \
        --scan-interval 0 "$DATA/single/d1" "$DATA/single/d2" "$DATA/single/d3" "$DATA/single/d4" \
        >"$log" 2>&1 &
    local pid=$!
    echo "$pid" >>"$DATA/pids"
    wait_ready "$port" "$pid" "$log"
    run_suite single "$port"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    mv "$log" "$RESULTS/single/server.log"
}

run_cluster() {
    local n ports=() drives=() pids=()
    for n in 1 2 3 4; do ports+=("$(free_port)"); done
    # Four nodes of one drive each: one erasure set of 2 data + 2 parity spanning them all.
    for n in 1 2 3 4; do drives+=("http://127.0.0.1:${ports[$((n - 1))]}$DATA/cluster/node$n/d1"); done
    mkdir -p "$RESULTS"
    for n in 1 2 3 4; do
        QUARRY_ROOT_USER=$AK QUARRY_ROOT_PASSWORD=$SK \
            QUARRY_CLUSTER_SECRET=s3tests-cluster-secret-0123456789 QUARRY_CONSOLE_ADDRESS=off \
            "$BIN" server --address "127.0.0.1:${ports[$((n - 1))]}" --set-size 4 --scan-interval 0 \
            "${drives[@]}" >"$RESULTS/cluster-node$n.log" 2>&1 &
        pids+=("$!")
        echo "$!" >>"$DATA/pids"
    done
    for n in 1 2 3 4; do
        wait_ready "${ports[$((n - 1))]}" "${pids[$((n - 1))]}" "$RESULTS/cluster-node$n.log"
    done
    # Through node 1; the objects' shards live on all four.
    run_suite cluster "${ports[0]}"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for n in 1 2 3 4; do mv "$RESULTS/cluster-node$n.log" "$RESULTS/cluster/node$n.log"; done
}

# Checks NAME's core run (and its rerun) against the lists; prints what is wrong, with each
# failure's message. Returns 1 on a regression (scripts/s3-tests-check.py says how it judges).
check() {
    python3 "$ROOT/scripts/s3-tests-check.py" core "$1" "$RESULTS" "$EXPECTED" "$KNOWN"
}

# Checks NAME-features' run: every test in the features list must have run and passed.
check_features() {
    python3 "$ROOT/scripts/s3-tests-check.py" features "$1" "$RESULTS" "$FEATURES"
}

rc=0
t0=$(date +%s)
# The suite's venv, made once here: both runs would otherwise make it at the same time.
if [ "$MODE" != check ] && [ ! -x "$S3TESTS_VENV/bin/pytest" ]; then
    echo "making the s3-tests venv in $S3TESTS_VENV (PyPI: $SUITE/requirements.txt)"
    rm -rf "$S3TESTS_VENV"
    python3 -m venv "$S3TESTS_VENV"
    "$S3TESTS_VENV/bin/pip" install --disable-pip-version-check -q -r "$SUITE/requirements.txt"
fi
# Side by side: each run is one client waiting on its server most of the time.
jobs_=()
if [ "$MODE" = single ] || [ "$MODE" = both ]; then
    run_single >"$DATA/single.out" 2>&1 &
    jobs_+=("single:$!")
fi
if [ "$MODE" = cluster ] || [ "$MODE" = both ]; then
    run_cluster >"$DATA/cluster.out" 2>&1 &
    jobs_+=("cluster:$!")
fi
for j in "${jobs_[@]}"; do
    if ! wait "${j#*:}"; then
        echo "error: the ${j%%:*} run failed" >&2
        rc=1
    fi
    sed "s/^/[${j%%:*}] /" "$DATA/${j%%:*}.out"
done
if [ "$FILTER" = core ]; then
    for name in single cluster; do
        if [ "$MODE" = "$name" ] || [ "$MODE" = both ] || { [ "$MODE" = check ] && [ -s "$RESULTS/$name/status.tsv" ]; }; then
            check "$name" || rc=1
            if [ -s "$RESULTS/$name-features/status.tsv" ]; then
                check_features "$name" || rc=1
            fi
        fi
    done
fi
echo "s3-tests $FILTER ($MODE): $(($(date +%s) - t0)) s; results in $RESULTS/"
exit $rc
