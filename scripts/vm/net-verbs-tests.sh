#!/usr/bin/env bash
# Runs quarry-net's verbs data-plane test (crates/net/tests/verbs_dataplane.rs) inside the
# Soft-RoCE VM, the same way scripts/vm/verbs-tests.sh runs quarry-verbs' tests: built on the
# host, run in the guest with QUARRY_VERBS_TEST=1 and --include-ignored; fails if a test fails or
# stays ignored, the VM times out, or no test ran. Warm: VM boot plus about a minute of tests.
#
#   scripts/vm/net-verbs-tests.sh [TEST-FILTER...]
set -euo pipefail
cd "$(dirname "$0")/../.."
export QUARRY_VM_TEST_TARGET=verbs_dataplane
export QUARRY_VM_TEST_PACKAGE=quarry-net
export QUARRY_VM_GUEST_NAME=net-verbs-tests
exec scripts/vm/verbs-tests.sh "$@"
