#!/usr/bin/env bash
# On the H200 (first call of a lease): a GPU-timed evaluation check, the README's main command, and
# `ksearch optimize` on four families by GPU time.   carry .whl .whl2 .device; then: bash bench/device_runA.sh
set -uo pipefail
final=${OUT:-/tmp/out}; out=/tmp/runA; mkdir -p "$out" "$final"
trap 'tar czf "$final/runA.tgz" -C "$out" . 2>/dev/null' EXIT
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >> "$out/setup.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 - <<'PY' 2>&1 | tee -a "$out/gpu.txt"
import ksearch_engine.gputime as g
print("cupti available:", g.GpuTimer.available())
try:
    g.GpuTimer(prefer="cupti")
except Exception as e:
    print("why not:", e)
PY
( time timeout 60 python3 -m ksearch_engine.cli optimize softmax --budget 2 --max-seconds 40 --store /tmp/s0.db ) > "$out/eval_check.log" 2>&1
tail -6 "$out/eval_check.log"
if ! grep -q "passed" "$out/eval_check.log"; then
  echo "default sandbox failed: KSEARCH_SANDBOX=unshare from here on" | tee -a "$out/eval_check.log"
  export KSEARCH_SANDBOX=unshare
fi
( time timeout 120 python3 -m ksearch_engine.cli optimize examples/mamba/selective_scan.cu --budget 12 --store /tmp/s1.db ) > "$out/readme_cmd.log" 2>&1
echo "== README command"; tail -8 "$out/readme_cmd.log"
for fam in softmax layernorm decode scan; do
  timeout 75 python3 -m ksearch_engine.cli optimize $fam --budget 24 --max-seconds 60 --store /tmp/f_$fam.db > "$out/opt_$fam.log" 2>&1
  echo "== $fam"; tail -4 "$out/opt_$fam.log"
  python3 -m ksearch_engine.cli show --store /tmp/f_$fam.db "$(python3 -m ksearch_engine.cli runs --store /tmp/f_$fam.db --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print((d[0] if isinstance(d,list) else d["runs"][0])["id"])' 2>/dev/null)" --json > "$out/show_$fam.json" 2>/dev/null
done
