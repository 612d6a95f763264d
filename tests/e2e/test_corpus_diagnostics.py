"""Valid CUDA opens with no error-level diagnostics; a file that does not parse gets an Error at the right line.

The server's own diagnostic functions (server/diagnostics.py, as published on open) run over every .cu/.cuh of
the shared corpus (`../shared/corpus`: CUDA samples and Rodinia, all valid code) and over small cases written
here; the stdio test in test_broken_input.py covers what the editor sees.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types

from ksearch_server import diagnostics, documents
from ksearch_server.index import WorkspaceIndex

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("KSEARCH_CORPUS", REPO.parent / "shared" / "corpus"))


class _Tasks:
    def find(self, *a):
        return type("Info", (), {"has_task": True})()


class _Server:
    tasks = _Tasks()


def errors_of(path: Path) -> list[str]:
    entry, _ = WorkspaceIndex().update_from_disk(str(path))
    if entry is None:
        return []
    return [f"{path.name}:{d.range.start.line + 1}: {d.message}" for d in diagnostics.file_diagnostics(_Server(), entry)
            if d.severity == types.DiagnosticSeverity.Error]


VALID = {
    "align_struct.cu": """
typedef struct __align__(8) SumMax { float sum; float max; } SumMax;
struct __align__(16) Quad { float a, b, c, d; };
__global__ void reduce(const float* x, SumMax* out, int n) {
    SumMax s = {0.f, -1e30f};
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s.sum += x[i]; s.max = fmaxf(s.max, x[i]); }
    out[blockIdx.x] = s;
}
""",
    "streaming_store.cu": """
__global__ void copy_cs(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) __stcs(&out[i], __ldcs(&in[i]));
}
""",
    "preprocessor_branches.cu": """
#define USE_FAST 1
__global__ void k(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if USE_FAST
    if (i < n) {
#else
    if (i < n && x != 0) {
#endif
        y[i] = x[i] * 2.0f;
    }
}
void usage() {
    printf("k [options]\\n\\
  -n  size (a string continued over lines: ( [ {\\n");
}
""",
    "launch.cu": """
#include <cstdio>
__global__ void fill(int* a) { a[threadIdx.x] = threadIdx.x; }
int main() {
    int* d; cudaMalloc(&d, 32 * sizeof(int));
    fill<<<1, 32, 0, 0>>>(d);
    cudaDeviceSynchronize();
    return 0;
}
""",
}

BROKEN = {
    "missing_paren.cu": ("""
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n { x[i] *= 2.0f; }
}
""", 4),
    "missing_brace.cu": ("""
__global__ void scale(float* x, int n) {
    int i = threadIdx.x;
    if (i < n) { x[i] *= 2.0f;
}
""", 2),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_cuda_has_no_error(tmp_path: Path, name: str):
    f = tmp_path / name
    f.write_text(VALID[name])
    assert errors_of(f) == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_cuda_is_an_error_at_its_line_and_disables_jobs(tmp_path: Path, name: str):
    text, line = BROKEN[name]
    f = tmp_path / name
    f.write_text(text)
    errs = errors_of(f)
    assert errs and errs[0].startswith(f"{name}:{line}:"), errs
    entry, _ = WorkspaceIndex().update_from_disk(str(f))
    assert documents.parse_errors(entry).startswith(f"line {line}:")


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS} (set KSEARCH_CORPUS)")
def test_corpus_opens_without_error_level_diagnostics():
    files = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".cu", ".cuh") and p.is_file())
    assert len(files) > 20
    errors = [e for f in files for e in errors_of(f)]
    assert errors == [], f"{len(errors)} error(s) on valid code, e.g.:\n" + "\n".join(errors[:20])
