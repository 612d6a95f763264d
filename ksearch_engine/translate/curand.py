"""cuRAND's device API (curand_kernel.h, the XORWOW generator) in the ports.

A kernel that calls curand_init / curand / curand_uniform / curand_normal... on a `curandState` gets, in each port's
header, the generator as device functions of its own: the text of sim/ksim_curand.h (which the simulator's CUDA
runtime gives code that includes curand_kernel.h, so the original kernel draws from the same code) with its KSC_ words
replaced for the dialect:

* Metal: `uint`/`ulong`, the tables in `constant` memory, the functions that take a state templated over the
  pointer (a state is read through `thread` and `device` pointers alike); no double, so the `_double` forms compute
  in float and keep the state's 8-byte `boxmuller_extra_double` slot (layout unchanged) holding a float's bits.
* CUDA backend: `__device__` functions and tables, the `_double` forms in float as the rest of the port (`#define
  double float`), with the same 8-byte slot.

`LIBRARY_STRUCTS` gives the state's layout (layout.py, launch.py) to files that include curand_kernel.h: 48 bytes, as
nvcc lays it out (d, v[5], two flags, a float, an 8-byte double slot).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_HEADER = Path(__file__).resolve().parents[1] / "sim" / "ksim_curand.h"

STATE_TYPES = ("curandStateXORWOW", "curandStateXORWOW_t", "curandState_t", "curandState")
# the state's fields, as the ports see them (the double slot as 8 bytes of integer: same offsets and size)
_BODY = ("unsigned int d; unsigned int v[5]; int boxmuller_flag; int boxmuller_flag_double; float boxmuller_extra; "
         "unsigned long long boxmuller_extra_double;")
LIBRARY_STRUCTS = {name: _BODY for name in STATE_TYPES}

_USES = re.compile(r"\b(?:curand(?:_init|_uniform\w*|_normal\w*|_log_normal\w*)?|skipahead(?:_sequence)?|"
                   + "|".join(STATE_TYPES) + r")\b")


_OWN = re.compile(r"\b(?:struct|class)\s+(?:" + "|".join(STATE_TYPES) + r")\s*\{|\}\s*(?:"
                  + "|".join(STATE_TYPES) + r")\s*;")


def uses_curand(text: str) -> bool:
    """Whether `text` (kernel, helpers, preamble) names the device API's generator or its state (and does not
    define a state type of that name itself)."""
    return bool(_USES.search(text)) and not _OWN.search(text)


def _section(text: str, name: str) -> str:
    m = re.search(rf"// KSC-{name}-BEGIN\n(.*?)// KSC-{name}-END\n", text, re.S)
    assert m, name
    return m.group(1)


_COMMON = {"KSC_U32": None, "KSC_U64": None, "KSC_T": None, "KSC_TABLE": None, "KSC_F64": "float",
           "KSC_F2": "float2", "KSC_D2": "float2", "KSC_PUT64": "ksc_put64", "KSC_GET64": "ksc_get64"}
_METAL = dict(_COMMON, KSC_FN="inline", KSC_U32="uint", KSC_U64="ulong", KSC_T="thread", KSC_TABLE="constant",
              KSC_SLOT64="ulong", KSC_MAKE_F2="float2", KSC_MAKE_D2="float2", KSC_LOGF="log", KSC_SQRTF="sqrt",
              KSC_SINF="sin", KSC_COSF="cos", KSC_EXPF="exp", KSC_LOG64="log", KSC_SQRT64="sqrt", KSC_SIN64="sin",
              KSC_COS64="cos", KSC_EXP64="exp")
_CUDA = dict(_COMMON, KSC_FN="__device__ inline", KSC_U32="unsigned int", KSC_U64="unsigned long long", KSC_T="",
             KSC_TABLE="__device__ const", KSC_SP="", KSC_SLOT64="unsigned long long", KSC_MAKE_F2="make_float2",
             KSC_MAKE_D2="make_float2", KSC_LOGF="logf", KSC_SQRTF="sqrtf", KSC_SINF="sinf", KSC_COSF="cosf",
             KSC_EXPF="expf", KSC_LOG64="logf", KSC_SQRT64="sqrtf", KSC_SIN64="sinf", KSC_COS64="cosf",
             KSC_EXP64="expf")


def _subst(text: str, words: dict) -> str:
    text = re.sub(r"\b(KSC_\w+)\b", lambda m: words.get(m.group(1)) if words.get(m.group(1)) is not None
                  else m.group(1), text)
    return re.sub(r"[ \t]+\n", "\n", re.sub(r"\( +", "(", re.sub(r"(?<=\S)  +", " ", text)))


@lru_cache(maxsize=None)
def support(dialect: str) -> str:
    """The generator's text for a port's header (`metal` or `cuda`)."""
    text = _HEADER.read_text()
    types, common, state = (_section(text, n) for n in ("TYPES", "COMMON", "STATE"))
    if dialect == "metal":
        words = _METAL
        puts = ("inline ulong ksc_put64(float x) { return ulong(as_type<uint>(x)); }\n"
                "inline float ksc_get64(ulong x) { return as_type<float>(uint(x)); }\n")
        # one definition per function for states behind thread and device pointers alike
        state = re.sub(r"^KSC_FN ", "template <typename KSC_S> KSC_FN ", state, flags=re.M)
        state = state.replace("KSC_SP curandStateXORWOW* state", "KSC_S state")
        common = re.sub(r"(\d)ull\b", r"\1ul", common)
        state = re.sub(r"(\d)ull\b", r"\1ul", state)
    else:
        words = _CUDA
        puts = ("__device__ inline unsigned long long ksc_put64(float x) { return (unsigned long long)__float_as_uint(x); }\n"
                "__device__ inline float ksc_get64(unsigned long long x) { return __uint_as_float((unsigned int)x); }\n")
    head = (f"// ksearch: cuRAND's XORWOW generator (curand_kernel.h's device API), the algorithm the simulator's "
            f"original runs (sim/ksim_curand.h); the _double forms compute in float\n")
    return head + _subst(types, words) + puts + _subst(common + state, words)
