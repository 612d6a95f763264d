"""cuRAND's device API (curand_kernel.h: curandState, curand_init, curand, curand_uniform, curand_normal): the
simulator runs the XORWOW generator (sim/ksim_curand.h) and both ports carry the same generator (translate/curand.py),
so kernels drawing from it verify, on a captured program and on a workload made up without one. The seeding, the
offset and the subsequence jump are checked against a reference written here from the generator's definition (the
jump by a polynomial over GF(2) found with Berlekamp-Massey). All sources are written here."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from ksearch_engine.portfile import port_file
from tests.sources import write

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

KERNELS = """
#include <curand_kernel.h>

__global__ void seed_states(curandState *states, unsigned long long seed, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) curand_init(seed, i, 3, &states[i]);
}

__global__ void walk(curandState *states, float *pos, int steps, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    curandState local = states[i];
    float x = pos[i];
    for (int s = 0; s < steps; s++) {
        x += curand_normal(&local) * 0.5f;
        if (curand_uniform(&local) < 0.25f) x = -x;
    }
    pos[i] = x + (float)(curand(&local) & 7u);
    states[i] = local;
}
"""

PROGRAM = KERNELS + """
int main()
{
    const int n = 256;
    curandState *d_states;
    float *d_pos;
    cudaMalloc(&d_states, n * sizeof(curandState));
    cudaMalloc(&d_pos, n * sizeof(float));
    cudaMemset(d_pos, 0, n * sizeof(float));
    seed_states<<<n / 64, 64>>>(d_states, 42ull, n);
    walk<<<n / 64, 64>>>(d_states, d_pos, 16, n);
    float h[n];
    cudaMemcpy(h, d_pos, sizeof(h), cudaMemcpyDeviceToHost);
    return 0;
}
"""

M32 = 0xFFFFFFFF


def _step(v):
    t = v[0] ^ (v[0] >> 2)
    return v[1:] + [(v[4] ^ ((v[4] << 4) & M32)) ^ (t ^ ((t << 1) & M32))]


def _charpoly() -> int:
    """The characteristic polynomial of xorwow's step, by Berlekamp-Massey on one output bit."""
    bits, v = [], [1, 2, 3, 4, 5]
    for _ in range(400):
        v = _step(v)
        bits.append(v[4] & 1)
    c, b, length, m = 1, 1, 0, 1
    for n, s in enumerate(bits):
        d = s
        for i in range(1, length + 1):
            d ^= ((c >> i) & 1) & bits[n - i]
        if d == 0:
            m += 1
        elif 2 * length <= n:
            c, b, length, m = c ^ (b << m), c, n + 1 - length, 1
        else:
            c, m = c ^ (b << m), m + 1
    assert length == 160
    return sum(1 << (length - i) for i in range(length + 1) if (c >> i) & 1)


def _jump(v, e, p):
    """v after e steps: (x^e mod p) evaluated at the step."""
    def mulmod(a, b):
        r = 0
        while b:
            if b & 1:
                r ^= a
            b >>= 1
            a <<= 1
            if (a >> 160) & 1:
                a ^= p
        return r
    r, base = 1, 2
    while e:
        if e & 1:
            r = mulmod(r, base)
        base, e = mulmod(base, base), e >> 1
    acc, s = [0] * 5, list(v)
    for i in range(160):
        if (r >> i) & 1:
            acc = [a ^ b for a, b in zip(acc, s)]
        s = _step(s)
    return acc


def _init(seed, seq, off, p):
    s0, s1 = (seed & M32) ^ 0xAAD26B49, (seed >> 32) ^ 0xF7DCEFDD
    t0, t1 = (1099087573 * s0) & M32, (2591861531 * s1) & M32
    v = [(123456789 + t0) & M32, 362436069 ^ t0, (521288629 + t1) & M32, 88675123 ^ t1, (5783321 + t0) & M32]
    return [(6615241 + t1 + t0 + 362437 * off) & M32] + _jump(v, off + (seq << 67), p)


@needs_gxx
def test_simulated_curand_init_seeds_offsets_and_jumps_subsequences_as_xorwow_defines():
    from ksearch_engine.sim.cuda_source import run_cuda_source

    src = """
    #include <curand_kernel.h>
    __global__ void init(curandState* st, unsigned* first, unsigned long long seed) {
      int i = threadIdx.x;
      curand_init(seed, i * 3, i, &st[i]);
      curandState c = st[i];
      first[i] = curand(&c);
    }
    """
    n = 4
    out = run_cuda_source(src, "init", grid=(1, 1, 1), block=(n, 1, 1),
                          args={"st": np.zeros(n * 48, np.uint8), "first": np.zeros(n, np.uint32),
                                "seed": 0x123456789AB})
    words = out["st"].view(np.uint32).reshape(n, 12)
    p = _charpoly()
    for i in range(n):
        want = _init(0x123456789AB, i * 3, i, p)
        assert list(words[i, :6]) == want, i
        assert list(words[i, 6:]) == [0] * 6   # Box-Muller flags and spares cleared
        d = (want[0] + 362437) & M32
        assert out["first"][i] == (_step(want[1:])[4] + d) & M32


@needs_gxx
def test_kernels_drawing_from_curand_states_verify_on_their_program(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "rng.cu", PROGRAM)
    r = port_file(src, write=False)
    by = {k.kernel: k for k in r.kernels}
    for name in ("seed_states", "walk"):
        assert by[name].status == "verified" and by[name].workload == "captured", (name, by[name].reason)


@needs_gxx
def test_kernels_drawing_from_curand_states_verify_without_a_program(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "rng_kernels.cu", KERNELS)
    r = port_file(src, write=False)
    by = {k.kernel: k for k in r.kernels}
    for name in ("seed_states", "walk"):
        assert by[name].status == "verified" and by[name].workload == "inferred", (name, by[name].reason)


@needs_gxx
def test_a_port_whose_generator_differs_does_not_verify(tmp_path, monkeypatch):
    """The check sees the numbers: a port stepping the Weyl counter differently fails."""
    from ksearch_engine.translate import curand

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    real = curand.support
    monkeypatch.setattr(curand, "support", lambda d: real(d).replace("362437u;", "362439u;"))
    src = write(tmp_path, "rng_kernels.cu", KERNELS)
    r = port_file(src, kernels=["walk"], write=False)
    assert r.kernels[0].status != "verified"
