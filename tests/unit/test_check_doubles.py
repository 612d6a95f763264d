"""How a port's buffers of doubles are compared with the original's (translate/check.py): both ports compute doubles
as float (Metal has no double, MLX GPU arrays no float64), so a double buffer is held to float's tolerance, and a
value beyond float's range is named as such."""

from __future__ import annotations

import numpy as np

from ksearch_engine.translate.check import _first_problem

DOUBLE_PTR = [{"name": "w", "dtype": "float64", "pointer": True}]


def test_a_buffer_of_doubles_is_held_to_floats_tolerance():
    want = np.array([2.2080890422565627e+20, 1.5e+20, 3.0e+20])
    got = want.astype(np.float32).astype(np.float64) * np.array([1 + 1.3e-5, 1.0, 1.0])   # float's rounding of exp()
    assert _first_problem(DOUBLE_PTR, {"w": got}, {"w": want}, {}, ["w"], {}) is None
    got[1] = 1.5e+20 * 1.01   # a real difference is still one
    assert "buffer 'w' [1]" in _first_problem(DOUBLE_PTR, {"w": got}, {"w": want}, {}, ["w"], {})


def test_a_double_beyond_floats_range_is_named():
    want = np.array([1.0449489583072083e+55, 2.0])
    got = np.array([np.inf, 2.0])
    problem = _first_problem(DOUBLE_PTR, {"w": got}, {"w": want}, {}, ["w"], {})
    assert problem.startswith("buffer 'w' [0]: got inf") and "exceeds float's range" in problem


def test_the_first_double_promotion_of_float_math_is_named():
    # a Metal-only mismatch is explained by the first place float values meet a double constant; constants folded
    # by the compiler (`1.0 / 7.0`) and #defines are not such places
    from ksearch_engine.translate.check import _double_promotion
    src = ("#define K 0.5 * 2\n__global__ void k(float* y, const float* x) {\n"
           "  float e = 1.0 / 7.0;\n  y[0] = 0.8 * powf(x[0], e);\n}\n")
    assert _double_promotion(src) == "line 4: `y[0] = 0.8 * powf(x[0], e);`"
    assert _double_promotion("__global__ void k(float* y) { y[0] = 2.0f * y[1]; }\n") == ""
