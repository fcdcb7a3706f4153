#!/usr/bin/env bash
# The whole test suite, as a new user and CI run it.
#
# It builds in the same optimised profile as `cargo run --release`, so one
# build of Burn serves the CLI, the tests and the benches. Set
# CARGO_TARGET_DIR to share that build between clones (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-lavapipe.sh
# TensorBoard's own event reader checks our event files independently.
scripts/setup-python-test-deps.sh
# onnxruntime and numpy check the ONNX and safetensors exports independently.
scripts/setup-export-test-deps.sh
# Mesa prints a spurious "XDG_RUNTIME_DIR is invalid" on headless hosts.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
cargo test --release --workspace --no-fail-fast "$@"
