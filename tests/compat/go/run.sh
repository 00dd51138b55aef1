#!/usr/bin/env bash
# Compatibility tests with franz-go (github.com/twmb/franz-go: kgo and kadm).
#
#   tests/compat/go/run.sh                        # against Weir: needs WEIR_BIN=/path/to/weir
#   WEIR_TEST_BROKER=kafka tests/compat/go/run.sh # against Apache Kafka (tools/kafka/kafka.sh)
#   WEIR_COMPAT_TARGET=cluster tests/compat/go/run.sh
#       the shared target is a three-broker Weir cluster (PostgreSQL + s3s-fs + 3 brokers,
#       cluster_test.go); TestBrokerRestart and TestTransactSessionBrokerRestart skip,
#       TestClusterHarness runs.
# The TestSecurity* tests (security_test.go: SCRAM users, SASL_SSL, mTLS) start Weir brokers of
# their own with WEIR_SECURITY_* listeners and skip against Apache Kafka and a cluster; so do
# the TestAcl* tests (acl_test.go: CreateAcls/DescribeAcls/DeleteAcls with kadm, enforcement
# with WEIR_SECURITY_AUTHORIZER=acl over SASL_PLAINTEXT).
#
# Extra arguments go to `go test`, e.g. -run TestBrokerRestart or -v.
# The tests share one broker (TestBrokerRestart and TestTransactSessionBrokerRestart have their
# own), on free loopback ports in a temp dir.
set -euo pipefail

if [[ -n ${WEIR_BIN:-} && ${WEIR_BIN} != /* ]]; then
  WEIR_BIN="$(pwd)/${WEIR_BIN}"
  export WEIR_BIN
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$(cd ../../.. && pwd)

case "${WEIR_TEST_BROKER:-weir}" in
  kafka) bash "$ROOT/tools/kafka/kafka.sh" install ;;
  weir)
    [[ -n ${WEIR_BIN:-} ]] || { echo "run.sh: set WEIR_BIN to the weir binary (or WEIR_TEST_BROKER=kafka)" >&2; exit 2; }
    [[ -x $WEIR_BIN ]] || { echo "run.sh: WEIR_BIN=$WEIR_BIN is not an executable" >&2; exit 2; }
    ;;
  *) echo "run.sh: WEIR_TEST_BROKER must be weir or kafka" >&2; exit 2 ;;
esac

go mod download
go test -p 1 -count=1 -timeout 9m -v "$@" ./...
