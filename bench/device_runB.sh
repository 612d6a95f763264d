#!/usr/bin/env bash
# On the H200: the CUDA-backend ports against nvcc's originals (issue 13), optionally after the GPU-time check.
#   here:  python bench/port_corpus.py DIRS --gpu-out .portgpu --nvcc-include CUDA_SAMPLES/Common
#          python bench/ports_vs_nvcc.py trim .portgpu --mb 24        (what fits beside MLX's wheels)
#          tar cJf .portgpu/p.tar.xz -C PACKAGE_DIR .   (xz: the ports' text and the launches shrink ~3x)
#   carry .whl .whl3 (tree-sitter wheels only) .device .portgpu; then: bash bench/device_runB.sh
#   GPU_TIME=1 also runs bench/gpu_time_check.py first (it needs .whl2's cupti-python: carry .whl2 as WHL2)
set -uo pipefail
final=${OUT:-/tmp/out}; out=/tmp/runB; mkdir -p "$out" "$final"
trap 'tar czf "$final/runB.tgz" -C "$out" . 2>/dev/null' EXIT
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${WHL2:-.whl3}"/*.whl >> "$out/setup.log" 2>&1
[ -f .portgpu/p.tar.xz ] && tar xJf .portgpu/p.tar.xz -C .portgpu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
[ -n "${GPU_TIME:-}" ] && timeout 90 python3 bench/gpu_time_check.py 2>&1 | tee "$out/gpu_time_check.log"
timeout "${LIMIT:-480}" python3 bench/ports_vs_nvcc.py run .portgpu --jobs "${JOBS:-12}" --json "$out/ports_vs_nvcc.json" \
  > "$out/ports_vs_nvcc.log" 2>&1
cp "$out/ports_vs_nvcc.json" "$final/" 2>/dev/null
tail -60 "$out/ports_vs_nvcc.log"
