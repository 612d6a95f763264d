"""Does running a merge='cluster' kernel change what later kernels of the same process compute? (apply cluster.diff first)"""
import os, sys
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from decode_check import check
from families import SWEEPS
from ksearch_engine.families._gqa_async import CLUSTER_KNOBS
base = [s for s in SWEEPS["paged_decode"] if s[0] == "gqa_async"][:3]
print("before:", check("paged_decode", base, 2))
print("cluster:", check("paged_decode", [("gqa_async", k) for k in CLUSTER_KNOBS], 2))
print("after:", check("paged_decode", base, 2))
