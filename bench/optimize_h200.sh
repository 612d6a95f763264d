#!/usr/bin/env bash
# On the H200: issue 14's side-by-side runs.   carry .whl .whl2 .device; then: bash bench/optimize_h200.sh PHASE
#   A: `ksearch optimize` on softmax, layernorm, decode, scan (24 evaluations each, GPU time) + the README command
#   C: three families (52 s each), the README command and three corpus kernels, in one call
#   B: bench/families.py's sweep on the same four families (the reference figures) + optimize on corpus kernels
#   D: corpus kernels only (PICK names them; BUDGET evaluations, MAXS seconds each)
#   E: families.py's sweep and `ksearch optimize` on the same four families, side by side in one call
#   F: the README command, then corpus kernels (PICK), in one call
#   G: E, one corpus kernel and the README command, shortened to fit one call
# Corpus files travel in .corpus14/ (copies from ../shared/corpus, ignored by git; list: bench/optimize_corpus_kernels.txt):
#   S=../shared/corpus/cuda-samples; mkdir -p .corpus14/cuda-samples && cp -r $S/Common $S/LICENSE .corpus14/cuda-samples/
#   for d in 0_Introduction/matrixMul 2_Concepts_and_Techniques/scalarProd 0_Introduction/simpleOccupancy; do
#     mkdir -p .corpus14/cuda-samples/Samples/$d && cp $S/Samples/$d/* .corpus14/cuda-samples/Samples/$d/; done
# Every run's store is exported with `ksearch show --json`; bench/optimize_summary.py makes the table.
set -uo pipefail
phase=${1:-A}
final=${OUT:-/tmp/out}; out=/tmp/opt$phase; mkdir -p "$out" "$final"
pack() { tar czf "$final/.opt$phase.tmp" -C "$out" --exclude='*.db' . 2>/dev/null && mv -f "$final/.opt$phase.tmp" "$final/opt$phase.tgz"; }
trap pack EXIT   # also after every run: a command killed at its time limit still returns what finished
source .device/device-env.sh .whl > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl2/*.whl >> "$out/setup.log" 2>&1
export KSEARCH_SANDBOX=${KSEARCH_SANDBOX:-unshare}
show() {  # store -> json of its newest run
  local id; id=$(python3 -m ksearch_engine.cli runs --store "$1" --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print((d[0] if isinstance(d,list) else d["runs"][0])["id"])' 2>/dev/null)
  # small enough to come back from the device: no sources, no task (captured inputs travel inside it)
  python3 -m ksearch_engine.cli show --store "$1" "$id" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["candidates"] = [{k: v for k, v in c.items() if k not in ("source", "target_text")} for c in d.get("candidates", [])]
d["run"] = {k: v for k, v in d.get("run", {}).items() if k not in ("config", "log_tail")}
d.pop("tree", None); d.pop("events", None)
json.dump(d, sys.stdout)' > "$2"
}
opt() {  # name timeout target [args...]
  local name=$1 lim=$2; shift 2
  ( time timeout "$lim" python3 -m ksearch_engine.cli optimize "$@" --store "/tmp/$name.db" ) > "$out/opt_$name.log" 2>&1
  echo "== $name"; tail -3 "$out/opt_$name.log"
  show "/tmp/$name.db" "$out/show_$name.json"
  python3 bench/optimize_summary.py "$out" > "$final/summary.md" 2>&1
  pack
}
ahead_check() {  # compile ahead is new: if a run's evaluations mostly failed, the rest of the call runs without it
  [ -n "${KSEARCH_COMPILE_AHEAD:-}" ] && return
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["candidates"]; ok=sum((x.get("result") or {}).get("status")=="passed" for x in c); sys.exit(0 if c and ok*2>=len(c) else 1)' "$out/show_$1.json" \
    || { echo "compile ahead off after $1"; export KSEARCH_COMPILE_AHEAD=0; }
}
if [ "$phase" = A ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  for fam in ${FAMS:-softmax layernorm decode scan}; do opt "$fam" ${LIM:-95} "$fam" --budget 24 --max-seconds ${MAXS:-80}; done
  [ -n "${README_CMD:-1}" ] && opt readme 120 examples/mamba/selective_scan.cu --budget 12
elif [ "$phase" = C ]; then   # one call: three families, the README command, three corpus kernels
  for fam in softmax layernorm decode; do opt "$fam" 62 "$fam" --budget 24 --max-seconds 52; done
  opt readme 100 examples/mamba/selective_scan.cu --budget 12
  head -3 bench/optimize_corpus_kernels.txt | while read -r f k; do
    opt "corpus_$k" 48 "$f" --kernel "$k" --budget 12 --max-seconds 38
  done
elif [ "$phase" = E ]; then   # issue 14's must-show, one call: families.py's sweep, then the search on the same GPU
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  timeout "${FLIM:-170}" python3 bench/families.py --families softmax,layernorm,decode,scan --budget-s "${FB:-150}" \
      --out "$out/families_issue14.json" > "$out/families.log" 2>&1; tail -8 "$out/families.log"; pack
  for fam in ${FAMS:-softmax layernorm decode scan}; do
    opt "$fam" "${LIM:-88}" "$fam" --budget 24 --max-seconds "${MAXS:-80}"; ahead_check "$fam"
  done
elif [ "$phase" = G ]; then   # everything issue 14 must show, shortened to fit one call of 600 s
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  timeout "${FLIM:-110}" python3 bench/families.py --families softmax,layernorm,decode,scan --budget-s "${FB:-80}" \
      --out "$out/families_issue14.json" > "$out/families.log" 2>&1; tail -8 "$out/families.log"; pack
  for fam in softmax layernorm decode scan; do opt "$fam" "${LIM:-55}" "$fam" --budget 24 --max-seconds "${MAXS:-48}"; ahead_check "$fam"; done
  for k in ${PICK:-scalarProdGPU}; do
    f=$(awk -v k="$k" '$2 == k {print $1}' bench/optimize_corpus_kernels.txt)
    opt "corpus_$k" "${CLIM:-75}" "$f" --kernel "$k" --budget 12 --max-seconds "${CMAXS:-65}"
  done
  opt readme "${RLIM:-115}" examples/mamba/selective_scan.cu --budget 12
elif [ "$phase" = F ]; then   # the README command, then corpus kernels (PICK), one call
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  opt readme "${RLIM:-150}" examples/mamba/selective_scan.cu --budget 12
  for k in ${PICK:-square vectorAdd scalarProdGPU}; do
    f=$(awk -v k="$k" '$2 == k {print $1}' bench/optimize_corpus_kernels.txt)
    [ -f "$f" ] || { echo "missing $k ($f)"; continue; }
    opt "corpus_$k" "${LIM:-100}" "$f" --kernel "$k" --budget "${BUDGET:-12}" --max-seconds "${MAXS:-90}"
  done
elif [ "$phase" = D ]; then   # corpus kernels only, more evaluations each: PICK="square vectorAdd" chooses them
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
  for k in ${PICK:-square vectorAdd scalarProdGPU}; do   # in PICK's order
    f=$(awk -v k="$k" '$2 == k {print $1}' bench/optimize_corpus_kernels.txt)
    [ -f "$f" ] || { echo "missing $k ($f)"; continue; }
    opt "corpus_$k" "${LIM:-115}" "$f" --kernel "$k" --budget "${BUDGET:-8}" --max-seconds "${MAXS:-100}"
  done
else
  timeout 330 python3 bench/families.py --families softmax,layernorm,decode,scan --budget-s 300 \
      --out "$out/families_issue14.json" > "$out/families.log" 2>&1; tail -25 "$out/families.log"
  while read -r f k; do
    [ -f "$f" ] || { echo "missing $f"; continue; }
    opt "corpus_$k" 75 "$f" --kernel "$k" --budget 12 --max-seconds 60
  done < bench/optimize_corpus_kernels.txt
fi
