#!/usr/bin/env bash
# Runs every client compatibility suite against the weir binary in $WEIR_BIN (or against Apache
# Kafka with WEIR_TEST_BROKER=kafka). Every suite runs even if an earlier one fails; the exit
# code says whether all passed.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=()
for suite in python java go; do
  echo "=== compat: $suite"
  if ! bash "$HERE/$suite/run.sh"; then
    failed+=("$suite")
  fi
done
if ((${#failed[@]})); then
  echo "compat suites failed: ${failed[*]}"
  exit 1
fi
echo "compat suites passed: python java go"
