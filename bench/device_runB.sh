#!/usr/bin/env bash
# On the H200 (second call): the GPU-time check, then the CUDA-backend ports against nvcc.
#   carry .whl .whl2 .device .portgpu; then: bash bench/device_runB.sh
set -uo pipefail
final=${OUT:-/tmp/out}; out=/tmp/runB; mkdir -p "$out" "$final"
trap 'tar czf "$final/runB.tgz" -C "$out" . 2>/dev/null' EXIT
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >> "$out/setup.log" 2>&1
timeout 90 python3 bench/gpu_time_check.py 2>&1 | tee "$out/gpu_time_check.log"
timeout 240 python3 bench/ports_vs_nvcc.py run .portgpu --json "$out/ports_vs_nvcc.json" > "$out/ports_vs_nvcc.log" 2>&1
tail -40 "$out/ports_vs_nvcc.log"
