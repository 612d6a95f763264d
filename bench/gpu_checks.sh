#!/usr/bin/env bash
# On the H200 device machine: the GPU tests (ports vs the original CUDA, families, sandbox limits under CUDA).
#   carry .whl (mlx + mlx-cuda + pydantic, from ../shared/tools/device-wheels.sh), .whl2 (tree-sitter, rich,
#   pyyaml, pytest), .device (device-env.sh); then:  bash bench/gpu_checks.sh
set -uo pipefail
source .device/device-env.sh .whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -m pytest -q -p no:cacheprovider -o addopts= tests/gpu "$@" 2>&1 | tee "$out/gpu_tests.log"
