"""mlx-lm's Mamba-1 at mamba-370m's configuration (random weights, no downloads): prefill tokens/s at L512 and
L4096 and decode tokens/s, stock vs with our kernels patched into `MambaBlock._process_sequence`.

    python bench/mamba_prefill.py [--lengths 512,4096] [--scan chunked_fused|registers] [--out bench/results/mamba_prefill.json]

Stock runs mlx-lm's per-token Python loop (x_proj, dt_proj and the state update once per token). Patched: the
projections run once over the whole sequence, the depthwise causal conv + SiLU is one CUDA kernel, and the
selective scan is the `scan.chunked_fused` CUDA kernel (one kernel, sequence chunks inside each threadgroup;
`--scan registers`: the earlier `scan.registers` kernel), with the initial state from the cache and the final
state written back. One-token decode steps keep mlx-lm's own path (a kernel launch does not pay for T = 1).
Time: wall time of one forward per `mx.eval` + `mx.synchronize()` (prefill takes milliseconds to seconds).
mlx-lm 0.32.2 must be importable; its package __init__ (which imports transformers) is bypassed.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402

from ksearch_engine.families import scan as scan_family  # noqa: E402

# --scan: template -> knobs. chunked_fused: the sweep's expected best (bench/families.py, not yet timed on a GPU);
# registers: the best on the H200 (run 1)
SCANS = {"chunked_fused": ("scan.chunked_fused", {"channels_per_group": 16, "seq_chunks": 32, "stage_steps": 4,
                                                  "warm_l2": True, "fast_exp": True}),
         "registers": ("scan.registers", {"states_per_thread": 2, "chunk": 32, "threads_per_group": 64, "fast_exp": True})}
CONFIG_370M = dict(model_type="mamba", vocab_size=50280, hidden_size=1024, intermediate_size=2048, state_size=16,
                   num_hidden_layers=48, conv_kernel=4, use_bias=False, use_conv_bias=True, time_step_rank=64,
                   tie_word_embeddings=True)

CONV_SOURCE = r"""
const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
if (i >= BATCH * SEQ * DIM) return;
const int d = i % DIM;
const int t = (i / DIM) % SEQ;
const int b = i / (DIM * SEQ);
float acc = HAS_BIAS ? static_cast<float>(bias[d]) : 0.0f;
for (int k = 0; k < KW; ++k)
  acc += static_cast<float>(w[d * KW + k]) * static_cast<float>(xf[((size_t)b * (SEQ + KW - 1) + t + k) * DIM + d]);
out[i] = static_cast<T>(acc / (1.0f + expf(-acc)));   // SiLU
"""


def import_mamba():
    """mlx_lm.models.mamba without running mlx_lm/__init__.py (it imports transformers, absent on the GPU box)."""
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None:
        raise SystemExit("mlx-lm is not installed: pip install mlx-lm==0.32.2 (or carry its wheel to the GPU machine)")
    if "mlx_lm" not in sys.modules:
        stub = types.ModuleType("mlx_lm")
        stub.__path__ = list(spec.submodule_search_locations)
        sys.modules["mlx_lm"] = stub
    from mlx_lm.models import mamba  # noqa: PLC0415
    return mamba


def make_patch(mamba, scan: str = "chunked_fused"):
    template, knobs = SCANS[scan]
    ns: dict = {}
    exec(compile(scan_family.render_stateful(knobs, "cuda", template), "<scan_with_state>", "exec"), ns)
    scan_with_state = ns["scan_with_state"]
    conv_k = mx.fast.cuda_kernel(name="ks_dwconv_silu", input_names=["xf", "w", "bias"], output_names=["out"],
                                 source=CONV_SOURCE)
    stock = mamba.MambaBlock._process_sequence
    swiglu = mamba.swiglu

    def conv_silu(x_full, weight, bias, T):
        Bt, _, D = x_full.shape
        K = weight.shape[1]
        b = bias if bias is not None else mx.zeros((D,), dtype=x_full.dtype)
        n = Bt * T * D
        return conv_k(inputs=[x_full, weight.reshape(D, K), b],
                      template=[("T", x_full.dtype), ("BATCH", Bt), ("SEQ", T), ("DIM", D), ("KW", K),
                                ("HAS_BIAS", bias is not None)],
                      grid=(((n + 255) // 256) * 256, 1, 1), threadgroup=(256, 1, 1),
                      output_shapes=[(Bt, T, D)], output_dtypes=[x_full.dtype])[0]

    def process_sequence(self, x, conv_cache, state_cache):
        Bt, T, _ = x.shape
        if T == 1:
            return stock(self, x, conv_cache, state_cache)
        xz = self.in_proj(x)
        x, z = xz.split(indices_or_sections=2, axis=-1)
        K = self.conv_kernel_size
        x_full = mx.concatenate([conv_cache, x], axis=1) if conv_cache is not None else mx.pad(x, [(0, 0), (K - 1, 0), (0, 0)])
        new_conv_cache = x_full[:, -(K - 1):, :]
        x = conv_silu(x_full, self.conv1d.weight, self.conv1d.get("bias") if self.use_conv_bias else None, T)
        A = -mx.exp(self.A_log)
        delta, B, C = mx.split(self.x_proj(x), [self.time_step_rank, self.time_step_rank + self.ssm_state_size], axis=-1)
        if self.use_bcdt_rms:
            eps = self.args.mixer_rms_eps
            delta, B, C = (mx.fast.rms_norm(a, weight=None, eps=eps) for a in (delta, B, C))
        delta = nn.softplus(self.dt_proj(delta))
        h0 = state_cache if state_cache is not None else mx.zeros((Bt, self.intermediate_size, self.ssm_state_size), dtype=mx.float32)
        y, h = scan_with_state(x.astype(mx.float32), delta.astype(mx.float32), A.astype(mx.float32),
                               B.astype(mx.float32), C.astype(mx.float32), self.D.astype(mx.float32), h0)
        z = self.out_proj(swiglu(z, y.astype(z.dtype)))
        return z, (new_conv_cache, h)

    return stock, process_sequence


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    mx.synchronize()
    return time.perf_counter() - t0


def run(model, mamba, L: int, repeats: int, decode_steps: int, warmup: bool = True) -> dict:
    tokens = mx.random.randint(0, 50280, (1, L), key=mx.random.key(L))  # the same tokens for stock and patched
    mx.eval(tokens)

    def prefill():
        cache = model.make_cache()
        logits = model(tokens, cache)
        mx.eval(logits, [c.state for c in cache])
        return logits, cache

    if warmup:  # kernel compilation, allocator; a longer L reuses the kernels a shorter one compiled
        prefill()
    times = [timed(prefill) for _ in range(repeats)]
    logits, cache = prefill()
    tok = mx.argmax(logits[:, -1:], axis=-1)
    steps = []
    for _ in range(decode_steps):
        t0 = time.perf_counter()
        out = model(tok, cache)
        tok = mx.argmax(out[:, -1:], axis=-1)
        mx.eval(tok, [c.state for c in cache])
        mx.synchronize()
        steps.append(time.perf_counter() - t0)
    pre = statistics.median(times)
    dec = statistics.median(steps[2:]) if len(steps) > 2 else float("nan")
    return {"L": L, "prefill_s": pre, "prefill_tok_s": L / pre, "prefill_runs": times, "decode_s_per_token": dec,
            "decode_tok_s": 1.0 / dec, "last_logits": logits[0, -1, :8].tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--layers", type=int, default=CONFIG_370M["num_hidden_layers"])
    ap.add_argument("--hidden", type=int, default=CONFIG_370M["hidden_size"])
    ap.add_argument("--stock-repeats", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-steps", type=int, default=20)
    ap.add_argument("--scan", choices=sorted(SCANS), default="chunked_fused",
                    help="the scan kernel patched in (registers: the earlier one, a fallback)")
    ap.add_argument("--out", default="bench/results/mamba_prefill.json")
    args = ap.parse_args()
    mamba = import_mamba()
    cfg = dict(CONFIG_370M, num_hidden_layers=args.layers, hidden_size=args.hidden, intermediate_size=2 * args.hidden)
    mx.random.seed(0)
    model = mamba.Model(mamba.ModelArgs(**cfg))
    mx.eval(model.parameters())
    stock, patched = make_patch(mamba, args.scan)
    info = {"device": str(mx.device_info().get("device_name", "")), "mlx": mx.__version__, "config": cfg,
            "dtype": "float32 weights and activations", "scan": SCANS[args.scan][0],
            "scan_knobs": SCANS[args.scan][1],
            "timing": "wall time per forward, one mx.eval + mx.synchronize each; decode: median per token after 2"}
    print(json.dumps(info), flush=True)
    results = []
    for i, L in enumerate(int(x) for x in args.lengths.split(",")):
        row = {"L": L}
        mamba.MambaBlock._process_sequence = stock
        row["stock"] = run(model, mamba, L, args.stock_repeats, args.decode_steps, warmup=i == 0)
        mamba.MambaBlock._process_sequence = patched
        row["patched"] = run(model, mamba, L, args.repeats, args.decode_steps)
        a, b = row["stock"]["last_logits"], row["patched"]["last_logits"]
        row["max_abs_diff_last_logits"] = max(abs(x - y) for x, y in zip(a, b))
        row["prefill_speedup"] = row["stock"]["prefill_s"] / row["patched"]["prefill_s"]
        print(json.dumps(row), flush=True)
        results.append(row)
    print(f"\n{'L':>6} {'stock tok/s':>12} {'patched tok/s':>14} {'speedup':>8} {'decode stock':>13} {'decode patched':>15} {'logit diff':>11}")
    for r in results:
        print(f"{r['L']:>6} {r['stock']['prefill_tok_s']:>12.1f} {r['patched']['prefill_tok_s']:>14.1f} {r['prefill_speedup']:>7.1f}x "
              f"{r['stock']['decode_tok_s']:>13.1f} {r['patched']['decode_tok_s']:>15.1f} {r['max_abs_diff_last_logits']:>11.2e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
