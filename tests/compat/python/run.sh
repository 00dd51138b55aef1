#!/usr/bin/env bash
# Python client-compatibility suite: confluent-kafka (librdkafka) and kafka-python
# against a broker the tests start themselves.
#
#   WEIR_BIN=/path/to/weir tests/compat/python/run.sh        # against Weir (default)
#   WEIR_TEST_BROKER=kafka tests/compat/python/run.sh        # against Apache Kafka 4.1
#   WEIR_COMPAT_TARGET=cluster tests/compat/python/run.sh    # against a three-broker Weir cluster
#
# Extra arguments go to pytest (e.g. -k kill, -x). Exit code = pytest's.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore -r "$HERE/requirements.txt"; then
  echo "run.sh: pip install of $HERE/requirements.txt failed" >&2
  exit 2
fi
if [[ ${WEIR_TEST_BROKER:-weir} == kafka ]]; then
  bash "$HERE/../../../tools/kafka/kafka.sh" install || { echo "run.sh: kafka.sh install failed" >&2; exit 2; }
elif [[ -z ${WEIR_BIN:-} ]]; then
  echo "run.sh: set WEIR_BIN to the weir binary (or WEIR_TEST_BROKER=kafka)" >&2
  exit 2
fi

cd "$HERE"
export PYTHONDONTWRITEBYTECODE=1
"$PYTHON" -m pytest -p no:cacheprovider "$@"
rc=$?
# The cluster-link tests once more with an older Kafka as the source (test_link.py starts the
# reference, Apache Kafka 4.4, by default), on the single broker, when the whole suite runs.
if [[ $rc -eq 0 && $# -eq 0 && ${WEIR_TEST_BROKER:-weir} == weir && ${WEIR_COMPAT_TARGET:-} != cluster ]]; then
  echo "=== test_link.py with Apache Kafka ${WEIR_LINK_SOURCE_KAFKA:-4.1.2} as the source"
  WEIR_KAFKA_VERSION=${WEIR_LINK_SOURCE_KAFKA:-4.1.2} "$PYTHON" -m pytest -p no:cacheprovider test_link.py
  rc=$?
fi
exit $rc
