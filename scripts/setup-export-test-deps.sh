#!/usr/bin/env bash
# Installs the Python packages that the cross-checks of the model exporters
# need: `onnx` (its checker) and `onnxruntime` for scripts/check_onnx.py,
# `safetensors` and `numpy` for scripts/check_safetensors_export.py. Installs
# only the ones that are not importable yet; does nothing when all are.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null; then
    echo "setup-export-test-deps: $PYTHON not found; install Python 3 first" >&2
    exit 1
fi
# pip package name:import name
PACKAGES=(numpy:numpy onnx:onnx onnxruntime:onnxruntime safetensors:safetensors)
missing=()
for entry in "${PACKAGES[@]}"; do
    if ! "$PYTHON" -c "import ${entry#*:}" >/dev/null 2>&1; then
        missing+=("${entry%%:*}")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
echo "setup-export-test-deps: installing ${missing[*]} with pip" >&2
if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check "${missing[@]}"; then
    echo "setup-export-test-deps: 'pip install ${missing[*]}' failed; install them by hand (e.g. in a virtualenv) and retry" >&2
    exit 1
fi
for entry in "${PACKAGES[@]}"; do
    if ! "$PYTHON" -c "import ${entry#*:}" >/dev/null 2>&1; then
        echo "setup-export-test-deps: ${entry%%:*} installed but '$PYTHON -c \"import ${entry#*:}\"' still fails" >&2
        exit 1
    fi
done
