"""A file's own definition of a CUDA vector type (for toolkits that lacked it) is not carried into the ports: both
ports' runtimes define the type, and carrying it would redefine it (Rodinia's cfd guards `struct double3` this way)."""
from __future__ import annotations

from ksearch_engine.portfile import port_file

GUARDED = """
#if CUDART_VERSION < 3000
struct float3
{
    float x, y, z;
};
#endif

__global__ void norm1(const float3* a, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fabsf(a[i].x) + fabsf(a[i].y) + fabsf(a[i].z);
}
"""


def test_a_guarded_redefinition_of_a_vector_type_is_left_to_the_runtime(tmp_path):
    src = tmp_path / "guarded.cu"
    src.write_text(GUARDED)
    r = port_file(src, write=False)
    (k,) = r.kernels
    assert k.status == "verified", k.reason
    assert "struct float3" not in k.module_text
