#!/usr/bin/env bash
# Installs the Python packages that the cross-checks against reference tools
# need: `tensorboard`, whose own event-file reader (scripts/read_tensorboard.py)
# verifies the files KynML writes. Does nothing when it is already importable.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null; then
    echo "setup-python-test-deps: $PYTHON not found; install Python 3 first" >&2
    exit 1
fi
if "$PYTHON" -c "import tensorboard" >/dev/null 2>&1; then
    exit 0
fi
echo "setup-python-test-deps: installing tensorboard with pip" >&2
if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check tensorboard; then
    echo "setup-python-test-deps: 'pip install tensorboard' failed; install it by hand (e.g. in a virtualenv) and retry" >&2
    exit 1
fi
if ! "$PYTHON" -c "import tensorboard" >/dev/null 2>&1; then
    echo "setup-python-test-deps: tensorboard installed but '$PYTHON -c \"import tensorboard\"' still fails" >&2
    exit 1
fi
