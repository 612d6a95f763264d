#!/usr/bin/env bash
# The cluster merge that was tried and taken out (cluster_merge.diff), and the check of whether its kernels change
# what later kernels of the process compute; on the GPU machine (carry .whl .device):
#   bash bench/results/issue15_h100_dec5e/cluster_check.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
source .device/device-env.sh .whl > "$out/setup.log" 2>&1
echo "== clean tree"; timeout 120 python3 bench/decode_check.py --calls 2 > "$out/decode_check.log" 2>&1; grep -v '^ ' "$out/decode_check.log" | tail -25
git apply bench/results/issue15_h100_dec5e/cluster_merge.diff 2>/dev/null || patch -p1 < bench/results/issue15_h100_dec5e/cluster_merge.diff > /dev/null || { echo "patch failed"; exit 1; }
echo "== cluster, graphs on"; timeout 100 python3 bench/results/issue15_h100_dec5e/cluster_poison.py > "$out/poison.log" 2>&1; grep -v '^ ' "$out/poison.log" | tail -20
echo "== cluster, graphs off"; MLX_USE_CUDA_GRAPHS=0 timeout 100 python3 bench/results/issue15_h100_dec5e/cluster_poison.py > "$out/poison_nograph.log" 2>&1; grep -v '^ ' "$out/poison_nograph.log" | tail -20
