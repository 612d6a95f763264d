"""CUB's block- and warp-level collectives through our stand-in, ksim_cub.h (written here from CUB's documented
behaviour: BlockReduce, WarpReduce, BlockScan and the Sum/Max/Min functors). The headers that reach it, and the names
of `cub::` it defines: a program or kernel naming another part of CUB (BlockRadixSort, DeviceReduce, ...) is told so in
one line naming the construct and its line (the capture's #error, the translator's issue), never a compiler's pages."""
from __future__ import annotations

import re

# cub/cub.cuh and the headers of the parts the stand-in has; any other cub/ header stays unsupported (host_headers)
HEADERS = ("cub/cub.cuh", "cub/block/block_reduce.cuh", "cub/block/block_scan.cuh", "cub/warp/warp_reduce.cuh",
           "cub/util_type.cuh", "cub/util_macro.cuh", "cub/config.cuh", "cub/thread/thread_operators.cuh",
           "cub/device/device_reduce.cuh", "cub/device/device_scan.cuh", "cub/device/device_radix_sort.cuh")
OTHER_HEADERS = re.compile(r"^cub/(?!(?:" + "|".join(re.escape(h[4:]) for h in HEADERS) + r")$)")
NAMES = frozenset({"BlockReduce", "WarpReduce", "BlockScan", "Sum", "Max", "Min", "BlockReduceAlgorithm",
                   "BlockScanAlgorithm", "BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY", "BLOCK_REDUCE_RAKING",
                   "BLOCK_REDUCE_WARP_REDUCTIONS", "BLOCK_SCAN_RAKING", "BLOCK_SCAN_RAKING_MEMOIZE",
                   "BLOCK_SCAN_WARP_SCANS",
                   # device-wide algorithms: host calls, run by the capture's runtime on the host
                   "DeviceReduce", "DeviceScan", "DeviceRadixSort"})
_USE = re.compile(r"\bcub\s*::\s*([A-Za-z_]\w*)")
STAND_IN = "ksim_cub.h"   # next to the simulator's other headers (build.HEADER's folder)


def stands_in(path: str) -> bool:
    """Whether an #include of `path` reaches the stand-in in the simulator's CUDA dialect and in the ports (every
    cub/ header: a part of CUB the stand-in lacks is named by unsupported_uses, not by a missing file)."""
    return path.startswith("cub/")


def includes_cub(text: str) -> bool:
    return re.search(r'^[ \t]*#[ \t]*include[ \t]*[<"]cub/', text, re.M) is not None


def unsupported_uses(text: str, line0: int = 1) -> list[tuple[str, int]]:
    """(`cub::Name`, 1-based line) of each part of CUB `text` names that the stand-in lacks (first use of each);
    `line0`: the line `text` starts at. Comments and strings are left out."""
    from .preprocess import mask_comments
    code = mask_comments(text)
    out: dict[str, int] = {}
    for m in _USE.finditer(code):
        if m.group(1) not in NAMES and f"cub::{m.group(1)}" not in out:
            out[f"cub::{m.group(1)}"] = line0 + code.count("\n", 0, m.start())
    return list(out.items())


def reason(name: str) -> str:
    return (f"{name} is not in ksearch's CUB stand-in (sim/ksim_cub.h: BlockReduce, WarpReduce, BlockScan, the "
            f"Sum/Max/Min functors, and on the capture's host DeviceReduce, DeviceScan and DeviceRadixSort)")
