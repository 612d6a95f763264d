"""Port to MLX on real public CUDA code (a vendored slice of Rodinia and cuda-samples under tests/corpus/): the
kernels that port and verify today keep doing so, and every other kernel gets a one-line reason, never a
traceback. The whole collections are measured by bench/port_corpus.py (docs/port_corpus.md); with
KSEARCH_FULL_CORPUS=1 and ../shared/corpus present, test_full_corpus runs it here too (tens of minutes)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ksearch_engine.portfile import port_file

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
COMMON = CORPUS / "cuda-samples" / "Common"

# file -> kernels verified today, and how their workload was found
VERIFIED = {
    "cuda-samples/vectorAdd/vectorAdd.cu": {"vectorAdd": "captured"},
    "cuda-samples/histogram/histogram64.cu": {"histogram64Kernel": None, "mergeHistogram64Kernel": None},
    "rodinia/gaussian/gaussian.cu": {"Fan1": None, "Fan2": None},
    "rodinia/pathfinder/pathfinder.cu": {"dynproc_kernel": None},
    "rodinia/srad_v2/srad_kernel.cu": {"srad_cuda_2": None},
    "rodinia/nw/needle_kernel.cu": {},
}


@pytest.mark.parametrize("rel", sorted(VERIFIED))
def test_real_kernels_port_and_verify(rel):
    rep = port_file(CORPUS / rel, include_dirs=[str(COMMON)], write=False, capture_timeout=120)
    assert rep.error is None, rep.error
    got = {k.kernel: k for k in rep.kernels}
    for name, workload in VERIFIED[rel].items():
        v = got[name]
        assert v.status == "verified", (name, v.reason)
        assert set(v.dialects.values()) == {"passed"}
        if workload:
            assert v.workload == workload
    for v in rep.kernels:
        if v.status != "verified":
            assert v.reason and "\n" not in v.reason.strip() and "Traceback" not in v.reason, (v.kernel, v.reason)
    assert "Traceback" not in rep.text()


@pytest.mark.skipif(not os.environ.get("KSEARCH_FULL_CORPUS"), reason="the full corpus takes tens of minutes: "
                    "set KSEARCH_FULL_CORPUS=1 (and keep ../shared/corpus) to run it")
def test_full_corpus_has_a_reason_for_every_kernel(tmp_path):
    import subprocess
    import sys

    shared = Path(__file__).resolve().parents[3] / "shared" / "corpus"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not here")
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "port_corpus.py"),
                        str(shared), "--json", str(out)], capture_output=True, text=True, timeout=7200)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    for d in json.loads(out.read_text()):
        for k in d["kernels"]:
            assert k["status"] == "verified" or (k.get("reason") and "Traceback" not in k["reason"]), (d["file"], k)
