#!/usr/bin/env bash
# The chaos suite (tests/chaos/chaos.py) on a three-broker Weir cluster: installs the Python
# clients it uses (tests/compat/python/requirements.txt), then runs it. Arguments go to
# chaos.py (default: the short form, one fault of each kind). Exit code = chaos.py's.
#
#   WEIR_BIN=/path/to/weir tests/chaos/run.sh                   # short (make test runs this)
#   WEIR_BIN=/path/to/weir tests/chaos/run.sh --mode long       # make chaos
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
if [[ -z ${WEIR_BIN:-} ]]; then
  echo "run.sh: set WEIR_BIN to the weir binary" >&2
  exit 2
fi
if ! "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore -r "$HERE/../compat/python/requirements.txt"; then
  echo "run.sh: pip install of tests/compat/python/requirements.txt failed" >&2
  exit 2
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$PYTHON" "$HERE/chaos.py" "$@"
