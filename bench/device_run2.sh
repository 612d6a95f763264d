#!/usr/bin/env bash
# On the H200, second call: `ksearch optimize` on four families (GPU time) and on corpus kernels of no family.
#   carry .whl .whl2 .device .portgpu; then: bash bench/device_run2.sh [corpus targets: FILE:KERNEL ...]
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >> "$out/setup.log" 2>&1
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib /usr/local/cuda/extras/CUPTI/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
for fam in softmax layernorm decode scan; do
  timeout 100 python3 -m ksearch_engine.cli optimize $fam --budget 24 --max-seconds 80 --store /tmp/f.db > "$out/opt_$fam.log" 2>&1
  echo "== $fam"; grep -E "best|stopped|speedup|method|gpu-time|wall" "$out/opt_$fam.log" | tail -4
done
for t in "$@"; do
  f=${t%%:*}; k=${t##*:}
  timeout 90 python3 -m ksearch_engine.cli optimize "$f" --kernel "$k" --budget 10 --max-seconds 70 --store /tmp/c.db > "$out/corpus_$k.log" 2>&1
  echo "== $k"; tail -6 "$out/corpus_$k.log"
done
