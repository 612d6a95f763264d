#!/usr/bin/env bash
# On the H200, first call: the ports against nvcc, the README's main command, and a GPU-timed evaluation check.
#   carry .whl .whl2 .device .portgpu; then: bash bench/device_run1.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >> "$out/setup.log" 2>&1
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib /usr/local/cuda/extras/CUPTI/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import ksearch_engine.gputime as g; print('cupti available:', g.GpuTimer.available())" 2>&1 | tee -a "$out/gpu.txt"
# 1. a GPU-timed evaluation of one family candidate (the sandbox and CUPTI under MLX's CUDA backend)
( time timeout 120 python3 -m ksearch_engine.cli optimize softmax --budget 3 --max-seconds 60 --store /tmp/s0.db ) > "$out/eval_check.log" 2>&1
tail -15 "$out/eval_check.log"
if ! grep -q "passed" "$out/eval_check.log"; then
  echo "default sandbox failed: retrying with KSEARCH_SANDBOX=unshare" | tee -a "$out/eval_check.log"
  export KSEARCH_SANDBOX=unshare
  ( time timeout 90 python3 -m ksearch_engine.cli optimize softmax --budget 3 --max-seconds 45 --store /tmp/s0b.db ) >> "$out/eval_check.log" 2>&1
  tail -8 "$out/eval_check.log"
fi
# 2. the CUDA-backend ports of the verified corpus kernels against the nvcc-compiled originals
timeout 200 python3 bench/ports_vs_nvcc.py run .portgpu --json "$out/ports_vs_nvcc.json" > "$out/ports_vs_nvcc.log" 2>&1
tail -4 "$out/ports_vs_nvcc.log"
# 3. the README's main command, timed
( time timeout 170 python3 -m ksearch_engine.cli optimize examples/mamba/selective_scan.cu --budget 12 --store /tmp/s1.db ) > "$out/readme_cmd.log" 2>&1
tail -25 "$out/readme_cmd.log"
