"""A captured launch that passes one allocation as two parameters (`swap_pairs<<<...>>>(d, d, n)`, in place): the
port gets a copy per parameter, so its read-only copy stays as it was while the capture's `after` of that parameter
is the allocation's new contents. The result is compared through the parameter the port writes (portcheck._aliased).
Kernel written here."""
from pathlib import Path

import numpy as np

from ksearch_engine.portcheck import check_captured
from ksearch_engine.sim.capture_models import ArgRecord, Capture, LaunchRecord
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel

SRC = """
__global__ void swap_pairs(unsigned int *dst, unsigned int *src, int n)
{
    int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 1 < n) {
        unsigned int a = src[i], b = src[i + 1];
        dst[i] = a > b ? b : a;
        dst[i + 1] = a > b ? a : b;
    }
}
"""


def test_an_in_place_launch_is_compared_through_the_parameter_the_port_writes(tmp_path: Path):
    n = 256
    before = np.random.default_rng(3).integers(0, 1000, n).astype(np.uint32)
    pairs = before.reshape(-1, 2)
    after = np.stack([pairs.min(1), pairs.max(1)], 1).reshape(-1)
    np.save(tmp_path / "before.npy", before)
    np.save(tmp_path / "after.npy", after)
    args = [ArgRecord(name=nm, ctype="unsigned int *", kind="buffer", buffer=1, dtype="uint32", elem_bytes=4,
                      nbytes=4 * n, before="before.npy", after="after.npy", written=True) for nm in ("dst", "src")]
    args.append(ArgRecord(name="n", ctype="int", kind="scalar", value=n))
    rec = LaunchRecord(index=0, kernel="swap_pairs", grid=(2, 1, 1), block=(64, 1, 1), args=args, line=3)
    cap = Capture(file="t.cu", dir=str(tmp_path), launches=[rec])
    parsed = find_kernels(SRC, "t.cu")
    k = parsed.kernel("swap_pairs")
    tr = translate_kernel(parsed, "swap_pairs", "t.cu")
    res = check_captured(tr.module_text, SRC, k, Path("t.cu"), cap, [rec])
    assert res.passed, res.reason
    assert any("same allocation" in n and "'src'" in n for n in res.notes), res.notes
