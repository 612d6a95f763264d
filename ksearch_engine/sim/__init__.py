"""The CPU simulator: runs CUDA and Metal kernel sources on the CPU, for correctness checks.

* ``run_mlx_kernel`` runs a kernel body written for ``mx.fast.metal_kernel`` / ``mx.fast.cuda_kernel``
  with the signature MLX would generate;
* ``run_cuda_source`` runs a ``__global__`` kernel of a whole ``.cu`` file (grid in blocks);
* ``install_mlx_shim`` makes ``mx.fast.metal_kernel`` / ``cuda_kernel`` run through the simulator.

Each GPU thread is a fiber; barriers and warp/simdgroup collectives have real semantics (see ksim.h).
It checks correctness only: it never measures speed.
"""

from .cuda_source import run_cuda_source
from .errors import SimError
from .mlx_kernels import run_mlx_kernel
from .shim import install_mlx_shim, uninstall_mlx_shim

__all__ = ["SimError", "run_mlx_kernel", "run_cuda_source", "install_mlx_shim", "uninstall_mlx_shim"]
