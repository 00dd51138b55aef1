#!/usr/bin/env bash
# Runs every client compatibility suite against the weir binary in $WEIR_BIN (or against Apache
# Kafka with WEIR_TEST_BROKER=kafka). Every suite runs even if an earlier one fails; the exit
# code says whether all passed.
#
# With WEIR_COMPAT_CLUSTER=1 (default 0), each suite then runs again against a three-broker Weir
# cluster (WEIR_COMPAT_TARGET=cluster: a private PostgreSQL, s3s-fs and three `weir serve`);
# tests that need a broker process of their own skip there.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=${WEIR_COMPAT_CLUSTER:-0}
failed=()
passed=()
for suite in python java go; do
  echo "=== compat: $suite"
  if WEIR_COMPAT_TARGET=broker bash "$HERE/$suite/run.sh"; then
    passed+=("$suite")
  else
    failed+=("$suite")
  fi
done
if [[ $CLUSTER == 1 ]]; then
  if [[ ${WEIR_TEST_BROKER:-weir} != weir ]]; then
    echo "run-all.sh: WEIR_COMPAT_CLUSTER=1 runs Weir clusters; it needs WEIR_TEST_BROKER=weir" >&2
    exit 2
  fi
  for suite in python java go; do
    echo "=== compat: $suite (three-broker cluster)"
    if WEIR_COMPAT_TARGET=cluster bash "$HERE/$suite/run.sh"; then
      passed+=("$suite-cluster")
    else
      failed+=("$suite-cluster")
    fi
  done
fi
if ((${#failed[@]})); then
  echo "compat suites failed: ${failed[*]}"
  exit 1
fi
echo "compat suites passed: ${passed[*]}"
