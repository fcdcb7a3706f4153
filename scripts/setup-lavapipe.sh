#!/usr/bin/env bash
# Installs Mesa's software Vulkan driver (lavapipe) and the Vulkan loader, so
# that KynML's wgpu backend runs, and is tested, on machines without a GPU.
# Does nothing when a Vulkan CPU driver is already installed.
set -euo pipefail

if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ldconfig -p | grep -q 'libvulkan.so.1'; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup-lavapipe: no apt-get here; install Mesa's lavapipe Vulkan driver with your package manager" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup-lavapipe: installing mesa-vulkan-drivers and libvulkan1 (software Vulkan for the wgpu tests)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
