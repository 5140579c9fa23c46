#!/usr/bin/env bash
# Builds quarry-verbs' test binaries on the host and runs them inside the Soft-RoCE VM
# (scripts/vm/run.sh) with QUARRY_VERBS_TEST=1, so the real verbs path runs over rxe0.
# Exits non-zero if any test fails or stays ignored, the VM times out, or no test ran.
#
#   scripts/vm/verbs-tests.sh [TEST-FILTER...]
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

# Which tests: quarry-verbs' by default; the other scripts of scripts/vm/ pick a package and a
# test target. The binaries always come from `cargo test --workspace --lib --tests`, never from -p
# or --test: any narrower selection resolves features differently (dev-dependencies are unified only
# across the selected targets) and scripts/test would compile the workspace a second time.
TEST_ARGS=(--workspace --lib --tests)
PACKAGE=${QUARRY_VM_TEST_PACKAGE:-quarry-verbs}
TEST_TARGET=${QUARRY_VM_TEST_TARGET:-}
GUEST_NAME=${QUARRY_VM_GUEST_NAME:-verbs-tests}
echo "==> cargo test ${TEST_ARGS[*]} --no-run"
# The test binaries, from cargo's JSON messages (one per test target).
mapfile -t BINS < <(cargo test "${TEST_ARGS[@]}" --no-run --message-format=json |
    python3 -c '
import json, sys
package, target = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    pid = m.get("package_id", "")
    # "path+file:///...#quarry-verbs@0.1.0" (cargo >= 1.77) or "quarry-verbs 0.1.0 (path+...)".
    mine = ("#" + package + "@") in pid or pid.startswith(package + " ")
    if target and m.get("target", {}).get("name") != target:
        continue
    if mine and m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])
' "$PACKAGE" "$TEST_TARGET")
if [ "${#BINS[@]}" -eq 0 ]; then
    echo "error: no test binary of $PACKAGE${TEST_TARGET:+ (target $TEST_TARGET)} built (run: cargo test ${TEST_ARGS[*]} --no-run)" >&2
    exit 1
fi

# One guest script runs every binary (ignored tests included: inside the VM they have their
# device) and fails if any test fails, any test is still ignored, or no test ran at all.
mkdir -p "$TARGET/vm"
GUEST=$TARGET/vm/$GUEST_NAME.guest.sh
{
    echo '#!/bin/bash'
    echo 'export QUARRY_VERBS_TEST=1 RUST_BACKTRACE=1'
    [ -z "${QUARRY_VM_GUEST_ENV:-}" ] || printf 'export %s\n' "$QUARRY_VM_GUEST_ENV"
    echo 'rc=0; passed=0'
    echo 'check() { # NAME LOG STATUS'
    echo '    [ "$3" -eq 0 ] || { echo "FAILED: $1 exited $3"; rc=1; }'
    echo '    grep -Eq "test result: .* [1-9][0-9]* ignored" "$2" && { echo "FAILED: $1 left tests ignored"; rc=1; }'
    echo '    n=$(grep -Eo "[0-9]+ passed" "$2" | awk "{s+=\$1} END {print s+0}"); passed=$((passed + n))'
    echo '}'
    for b in "${BINS[@]}"; do
        printf 'echo "==> %s"\n' "$(basename "$b")"
        printf '%q --include-ignored --test-threads 1 --nocapture' "$b"
        for f in "$@"; do printf ' %q' "$f"; done
        echo ' 2>&1 | tee /tmp/test.log'
        printf 'check %q /tmp/test.log "${PIPESTATUS[0]}"\n' "$(basename "$b")"
    done
    echo 'echo "verbs tests in the VM: $passed passed"'
    echo '[ "$passed" -gt 0 ] || { echo "FAILED: no test ran"; rc=1; }'
    echo 'exit $rc'
} >"$GUEST"
chmod +x "$GUEST"

exec "$ROOT/scripts/vm/run.sh" /bin/bash "$GUEST"
