"""Kernel families: every task builds, every template's knobs change its code, every `ops` template passes
the evaluator on mlx-cpu and every `metal`/`cuda` template passes it on the CPU simulator (`sim`)."""
from __future__ import annotations

import math

import pytest

from ksearch_engine import families
from ksearch_engine.evaluate import Evaluator
from ksearch_engine.task import KernelTask

NAMES = families.names()


def _fast(task: KernelTask) -> KernelTask:
    return task.model_copy(update={"seeds": task.seeds[:1]})


def test_registry_lists_the_families_and_names_a_missing_one():
    for required in ("softmax", "rmsnorm", "layernorm", "attention", "decode", "paged_decode", "scan", "moe_gating"):
        assert required in NAMES
    for n in NAMES:
        assert families.get(n).name == n
    with pytest.raises(KeyError, match="unknown kernel family 'nope'"):
        families.get("nope")


@pytest.mark.parametrize("name", NAMES)
def test_task_builds_with_small_checks_and_real_bench_shapes(name):
    task = families.get(name).make_task()
    assert task.workloads and task.bench_workloads
    def elements(w):
        return sum(math.prod(i.resolve_shape(w.dims)) for i in task.inputs)

    assert all(len(task.make_inputs(w, 0)) == len(task.inputs) for w in task.workloads)
    small = max(elements(w) for w in task.workloads)
    big = min(elements(w) for w in task.bench_workloads)
    assert small < 200_000, "correctness workloads must stay small (they run in CI and in the simulator)"
    assert big > 10 * small


@pytest.mark.parametrize("name", NAMES)
def test_every_knob_changes_the_generated_code(name):
    fam = families.get(name)
    kinds_seen = set()
    for t in fam.templates:
        d = t.defaults()
        assert t.valid(d), f"{t.id}: its defaults are rejected by its own valid()"
        for kind in t.kinds:
            kinds_seen.add(kind)
            base = t.render(d, kind)
            for knob, values in t.knobs.items():
                for v in values[1:]:
                    k = dict(d, **{knob: v})
                    if t.valid(k):
                        assert t.render(k, kind) != base, f"{t.id}: knob {knob}={v} does not change the {kind} code"
                        break
    assert {"metal", "cuda"} <= kinds_seen, f"{name} needs Metal and CUDA templates"


def test_valid_rejects_impossible_combinations():
    t = families.get("softmax").template("softmax.simd_row")
    assert not t.valid(dict(t.defaults(), threads_per_row=8, rows_per_group=1))  # 8 threads: a partial warp
    g = families.get("rmsnorm").template("rmsnorm.group_row")
    assert not g.valid(dict(g.defaults(), strategy="online"))                    # no single-pass RMS variant


@pytest.mark.parametrize("name", NAMES)
def test_ops_templates_pass_on_mlx_cpu(name):
    """Each `ops` template at its defaults and with one knob mutated (one evaluator per family: CI time)."""
    fam = families.get(name)
    with Evaluator(_fast(fam.make_task()), backend="mlx-cpu") as ev:
        for t in fam.templates:
            if "ops" not in t.kinds:
                continue
            d = t.defaults()
            mutation = next((dict(d, **{k: v[1]}) for k, v in t.knobs.items() if len(v) > 1 and t.valid(dict(d, **{k: v[1]}))), None)
            for k in filter(None, [d, mutation]):
                r = ev.evaluate(t.render(k, "ops"), timing=False)
                assert r.status == "passed", f"{t.id} {k}: {r.summary()}\n{r.log_tail}"


@pytest.mark.parametrize("name", NAMES)
def test_kernel_templates_pass_on_the_simulator(name):
    """Each Metal and CUDA template at its defaults, run by the CPU simulator (never timed)."""
    fam = families.get(name)
    with Evaluator(_fast(fam.make_task()), backend="sim") as ev:
        for t in fam.templates:
            for kind in t.kinds:
                if kind not in ("metal", "cuda"):
                    continue
                r = ev.evaluate(t.render(t.defaults(), kind), timing=False)
                assert r.status == "passed", f"{t.id} ({kind}): {r.summary()}\n{r.log_tail}"
                assert r.verified_by == "sim" and r.timing is None


@pytest.mark.parametrize("name", ["scan", "softmax"])
def test_naive_starting_candidates_pass_on_the_simulator(name):
    fam = families.get(name)
    with Evaluator(_fast(fam.make_task()), backend="sim") as ev:
        r = ev.evaluate(fam.naive("cuda"), timing=False)
    assert r.status == "passed", r.summary()


def test_a_wrong_scan_kernel_is_caught():
    """The task's checks are sharp enough to reject a kernel that drops the skip term D * x."""
    fam = families.get("scan")
    src = fam.template("scan.registers").render(fam.template("scan.registers").defaults(), "cuda")
    broken = src.replace("yp + dd * xv[i]", "yp")
    assert broken != src
    with Evaluator(_fast(fam.make_task()), backend="sim") as ev:
        r = ev.evaluate(broken, timing=False)
    assert r.status == "failed" and r.worst is not None


@pytest.mark.parametrize("name", NAMES)
def test_naive_candidate_exists_for_every_kind(name):
    from ksearch_engine.backend import candidate_kind

    fam = families.get(name)
    for kind in ("ops", "metal", "cuda"):
        assert candidate_kind(fam.naive(kind)) == kind


def test_causal_attention_kernel_honours_the_flag_and_ignoring_it_is_caught():
    fam = families.get("attention")
    t = fam.template("attention.flash")
    src = t.render(t.defaults(), "cuda")
    ignoring = src.replace("causal[0] > 0.5f", "false")
    assert ignoring != src
    with Evaluator(_fast(fam.make_task(causal=True)), backend="sim") as ev:
        assert ev.evaluate(src, timing=False).status == "passed"
        assert ev.evaluate(ignoring, timing=False).status == "failed"


@pytest.mark.parametrize("kind", ["cuda", "metal"])
def test_the_chunked_scan_needs_its_carried_state(kind):
    """scan.chunked_registers scans sequence chunks side by side; starting each chunk from zero instead of the
    state carried into it is wrong from the second chunk on, and the simulator's check says so."""
    fam = families.get("scan")
    t = fam.template("scan.chunked_registers")
    src = t.render(dict(t.defaults(), seq_chunks=8), kind)
    broken = src.replace("h[j] = hin[at * NST + sub * SPT + j];", "h[j] = 0.0f;")
    assert broken != src
    with Evaluator(_fast(fam.make_task()), backend="sim") as ev:
        assert ev.evaluate(src, timing=False).status == "passed"
        r = ev.evaluate(broken, timing=False)
    assert r.status == "failed" and r.worst is not None
