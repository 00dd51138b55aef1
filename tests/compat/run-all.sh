#!/usr/bin/env bash
# Runs every client compatibility suite against the weir binary in $WEIR_BIN (or against Apache
# Kafka with WEIR_TEST_BROKER=kafka). Every suite runs even if an earlier one fails; the exit
# code says whether all passed.
#
# Against Weir, each suite then runs again against a three-broker cluster
# (WEIR_COMPAT_TARGET=cluster: a private PostgreSQL, s3s-fs and three `weir serve`); tests that
# need a broker process of their own skip there. WEIR_COMPAT_CLUSTER=0 leaves the cluster runs out.
# Then (Weir only) the Go suite once more on a cluster without WAL files (the object WAL), and
# the chaos suite's short form on each WAL kind, tests/chaos/run.sh; WEIR_CHAOS=0 leaves it out.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=${WEIR_COMPAT_CLUSTER:-1}
failed=()
passed=()
for suite in python java go; do
  echo "=== compat: $suite ($(date -u +%H:%M:%S))"
  if WEIR_COMPAT_TARGET=broker bash "$HERE/$suite/run.sh"; then
    passed+=("$suite")
  else
    failed+=("$suite")
  fi
done
if [[ $CLUSTER == 1 && ${WEIR_TEST_BROKER:-weir} == weir ]]; then
  for suite in python java go; do
    echo "=== compat: $suite (three-broker cluster) ($(date -u +%H:%M:%S))"
    if WEIR_COMPAT_TARGET=cluster bash "$HERE/$suite/run.sh"; then
      passed+=("$suite-cluster")
    else
      failed+=("$suite-cluster")
    fi
  done
fi
# The object WAL on a cluster, with a second client ecosystem: the Go suite (franz-go) against
# three brokers without a WAL file (WEIR_WAL_KIND=object; objects on s3s-fs).
# WEIR_COMPAT_OBJECT_WAL=0 leaves it out.
if [[ $CLUSTER == 1 && ${WEIR_COMPAT_OBJECT_WAL:-1} == 1 && ${WEIR_TEST_BROKER:-weir} == weir ]]; then
  echo "=== compat: go (three-broker cluster, object WAL) ($(date -u +%H:%M:%S))"
  if WEIR_WAL_KIND=object WEIR_COMPAT_TARGET=cluster bash "$HERE/go/run.sh"; then
    passed+=("go-cluster-object-wal")
  else
    failed+=("go-cluster-object-wal")
  fi
fi
# The chaos suite's short form (tests/chaos: a fault of each kind on a three-broker cluster under
# idempotent load, then every acknowledged record read back). WEIR_CHAOS=0 leaves it out.
if [[ ${WEIR_CHAOS:-1} != 0 && ${WEIR_TEST_BROKER:-weir} == weir ]]; then
  echo "=== chaos (short) ($(date -u +%H:%M:%S))"
  if bash "$HERE/../chaos/run.sh" --mode short; then
    passed+=("chaos")
  else
    failed+=("chaos")
  fi
  echo "=== chaos (short, object WAL) ($(date -u +%H:%M:%S))"
  if bash "$HERE/../chaos/run.sh" --mode short --wal-kind object; then
    passed+=("chaos-object-wal")
  else
    failed+=("chaos-object-wal")
  fi
fi
if ((${#failed[@]})); then
  echo "compat suites failed: ${failed[*]}"
  exit 1
fi
echo "compat suites passed: ${passed[*]}"
