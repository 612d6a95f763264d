#!/usr/bin/env bash
# On the H200 device machine: install a trimmed Ray next to the carried MLX wheels, then run bench/scale.py --gpu.
#   The stock ray 2.60.0 wheel (79 MB) is over the device's 64 MiB carry limit. Build the carried folder once here:
#     mkdir -p .ray/deps && pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64 ray==2.60.0 -d /tmp/raywhl
#     unzip -q /tmp/raywhl/ray-*.whl -d /tmp/rayx && rm -rf /tmp/rayx/ray/{jars,rllib,data,serve,tune,train,llm}
#     find /tmp/rayx -name '*.map' -delete && tar cf - -C /tmp/rayx . | xz -9 > .ray/ray_min.tar.xz
#     pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .ray/deps \
#       click filelock jsonschema 'msgpack<2' protobuf requests pyyaml
#   (Java jars, RLlib, Data, Serve, Tune, Train and source maps are not used by ksearch's pool.)
#   carry .whl .device .ray; then:  bash bench/ray_device.sh [scale.py arguments]
set -uo pipefail
source .device/device-env.sh .whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .ray/deps/*.whl
tar xJf .ray/ray_min.tar.xz -C /tmp/site
python3 -c 'import ray; print("ray", ray.__version__)'
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 bench/scale.py --gpu --out "$out/scale_gpu.json" "$@" 2>&1 | tee "$out/scale_gpu.log"
