#!/usr/bin/env bash
# A 4-node Quarry cluster with QUARRY_RDMA=on inside the Soft-RoCE VM: runs the integration test
# rdma::vm_cluster_reads_shards_over_verbs (tests/s3/rdma.rs) there, with the quarry binary built
# on the host. Fails if the test fails or stays ignored, the VM times out, or no test ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The build of scripts/test (a no-op after it): `--bins` or `-p quarry` would resolve features
# differently and compile the workspace again.
cargo build --workspace --all-targets
export QUARRY_BIN=$PWD/target/debug/quarry
export QUARRY_VM_TEST_TARGET=s3
export QUARRY_VM_TEST_PACKAGE=quarry-integration
export QUARRY_VM_GUEST_NAME=cluster-verbs-tests
export QUARRY_VM_GUEST_ENV="QUARRY_RDMA=on QUARRY_RDMA_POOL_BYTES=64MiB QUARRY_BIN=$QUARRY_BIN"
exec scripts/vm/verbs-tests.sh rdma::vm_cluster "$@"
