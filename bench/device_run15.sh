#!/usr/bin/env bash
# Issue 15 on the GPU machine, two calls of one lease (carry .whl .device; .whl holds mlx-lm 0.32.2 too):
#   bash bench/device_run15.sh A    # scan check, decode/paged headline sweep, mlx-lm Mamba-1 prefill (~300 s)
#   bash bench/device_run15.sh B    # bench/families.py, every family in one table (~550 s)
#   bash bench/device_run15.sh one  # when the lease has time for one call: families.py, then mlx-lm prefill (~580 s)
#   bash bench/device_run15.sh auto # the issue's card (an H200): `one`; any other card: `dec`
#   bash bench/device_run15.sh dec  # decode only: every decode/paged bench set checked on the small workloads over
#                                   # several calls (bench/decode_check.py), then families.py's decode and paged rows (~200 s)
# Everything lands in $OUT (the device tool's return folder).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
source .device/device-env.sh .whl > "$out/setup_$1.log" 2>&1 || { cat "$out/setup_$1.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu_$1.txt"
mode=$1
if [ "$mode" = auto ]; then grep -q H200 "$out/gpu_$1.txt" && mode=one || mode=dec; echo "mode: $mode"; fi
case "$mode" in
A)
  timeout 110 python3 bench/scan_check.py --sets sweep --out "$out/scan_check.json" > "$out/scan_check.log" 2>&1
  tail -15 "$out/scan_check.log"
  timeout 130 python3 bench/mamba_prefill.py --out "$out/mamba_prefill.json" > "$out/mamba_prefill.log" 2>&1
  tail -5 "$out/mamba_prefill.log"
  timeout 180 python3 bench/headline.py --only decode,paged --budget-s 150 --out "$out/headline_decode.json" > "$out/headline_decode.log" 2>&1
  tail -8 "$out/headline_decode.log" ;;
B)
  timeout 585 python3 bench/families.py --budget-s 530 --out "$out/families.json" > "$out/families.log" 2>&1
  tail -30 "$out/families.log" ;;
one)
  timeout 445 python3 bench/families.py --budget-s 415 --out "$out/families.json" > "$out/families.log" 2>&1
  tail -30 "$out/families.log"
  timeout 125 python3 bench/mamba_prefill.py --out "$out/mamba_prefill.json" > "$out/mamba_prefill.log" 2>&1
  tail -5 "$out/mamba_prefill.log" ;;
dec)
  timeout 150 python3 bench/decode_check.py > "$out/decode_check.log" 2>&1
  grep -v '^ ' "$out/decode_check.log" | tail -25
  timeout 330 python3 bench/families.py --families decode,paged_decode --budget-s 300 --out "$out/families_decode.json" > "$out/families_decode.log" 2>&1
  tail -30 "$out/families_decode.log" ;;
esac
