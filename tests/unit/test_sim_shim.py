"""install_mlx_shim lets a candidate module call mx.fast.metal_kernel / cuda_kernel on the CPU."""

from __future__ import annotations

import mlx.core as mx
import pytest

from ksearch_engine.sim import SimError, install_mlx_shim, uninstall_mlx_shim


@pytest.fixture
def shim():
    install_mlx_shim()
    yield
    uninstall_mlx_shim()


def test_mlx_docs_metal_example_matches_mx_exp(shim):
    def exp_elementwise(a: mx.array):
        source = """
            uint elem = thread_position_in_grid.x;
            T tmp = inp[elem];
            out[elem] = metal::exp(tmp);
        """
        kernel = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
        outputs = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1),
                         threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype],
                         verbose=True)
        return outputs[0]

    a = mx.random.normal(shape=(4, 16)).astype(mx.float16)
    b = exp_elementwise(a)
    assert b.dtype == mx.float16 and b.shape == (4, 16)
    assert mx.allclose(b, mx.exp(a)).item()


def test_mlx_docs_cuda_example_with_strided_indexing(shim):
    source = """
        auto elem = cooperative_groups::this_grid().thread_rank();
        if (elem < out_size) {
            auto loc = elem_to_loc(int64_t(elem), inp_shape.data(), inp_strides.data(), inp_ndim);
            out[elem] = static_cast<T>(exp(static_cast<float>(inp[loc])));
        }
    """
    kernel = mx.fast.cuda_kernel(name="myexp_strided", input_names=["inp"], output_names=["out"],
                                 source=source)
    a = mx.random.normal(shape=(5, 7)).astype(mx.bfloat16)
    out = kernel(inputs=[a], template=[("T", mx.bfloat16), ("out_size", 35)], grid=(64, 1, 1),
                 threadgroup=(32, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])[0]
    assert out.dtype == mx.bfloat16
    assert mx.allclose(out.astype(mx.float32), mx.exp(a.astype(mx.float32)), rtol=1e-2, atol=1e-2).item()


def test_shim_reports_kernel_errors_and_uninstalls():
    install_mlx_shim()
    try:
        k = mx.fast.metal_kernel(name="broken", input_names=["x"], output_names=["y"],
                                 source="y[0] = x[0] +;")
        with pytest.raises(SimError) as e:
            k(inputs=[mx.zeros((4,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
              output_dtypes=[mx.float32])
        assert e.value.line == 1
    finally:
        uninstall_mlx_shim()
    k = mx.fast.metal_kernel(name="real", input_names=["x"], output_names=["y"], source="y[0] = x[0];")
    with pytest.raises(RuntimeError, match="No Metal back-end"):
        k(inputs=[mx.zeros((4,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
          output_dtypes=[mx.float32])


def test_mlx_docs_cuda_example_matches_mx_exp(shim):
    def exp_elementwise(a: mx.array):
        source = """
            auto elem = cooperative_groups::this_grid().thread_rank();
            T tmp = inp[elem];
            out[elem] = exp(tmp);
        """
        kernel = mx.fast.cuda_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
        outputs = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1),
                         threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype],
                         verbose=True)
        return outputs[0]

    a = mx.random.normal(shape=(16, 16)).astype(mx.float16)
    b = exp_elementwise(a)
    assert b.dtype == mx.float16
    assert mx.allclose(b, mx.exp(a)).item()


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_header_without_final_newline_breaks_as_it_does_on_the_gpu(shim, dialect):
    """MLX appends its generated signature straight after `header`: a header ending in `#define N 4` with no
    newline becomes `#define N 4namespace ...` (CUDA) or `4[[kernel]] void ...` (Metal) and fails to compile on the
    GPU. The simulator must fail the same way, and pass once the newline is there (the H200 found this bug)."""
    idx = "thread_position_in_grid.x" if dialect == "metal" else "threadIdx.x"
    src = f"y[{idx}] = x[{idx}] * N;"
    make = mx.fast.metal_kernel if dialect == "metal" else mx.fast.cuda_kernel
    x = mx.arange(4).astype(mx.float32)

    def run(header):
        k = make(name=f"hdr_{dialect}_{len(header)}", input_names=["x"], output_names=["y"], source=src,
                 header=header)
        return k(inputs=[x], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
                 output_dtypes=[mx.float32])[0]

    with pytest.raises(SimError):
        run("#define N 4")
    assert run("#define N 4\n").tolist() == [0.0, 4.0, 8.0, 12.0]
