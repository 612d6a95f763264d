"""The spec documents under specs/: every file fits its schema, broken files are refused with the file and field
named, the MLX API list matches the installed mlx, and the accessors the proposers use find what they ask for."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import mlx.core as mx
import pytest
import yaml

from ksearch_engine import specs as S
from ksearch_engine.specs import SpecError, check_mlx_api, load_specs, validate_file

ROOT = Path(__file__).resolve().parents[2] / "specs"
YAML_FILES = sorted(p for p in ROOT.rglob("*.yaml"))


@pytest.fixture(scope="module")
def specs() -> S.Specs:
    return load_specs(ROOT)


@pytest.fixture
def copy(tmp_path) -> Path:
    """A private copy of specs/ to break."""
    dst = tmp_path / "specs"
    shutil.copytree(ROOT, dst)
    return dst


def edit_yaml(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


# ---------------------------------------------------------------- every file fits its schema
@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_spec_file_fits_its_schema(path):
    validate_file(path, ROOT)


def test_the_whole_folder_loads_with_cross_file_checks(specs):
    assert set(specs.hardware_files) == {"apple", "nvidia", "cpu"}
    assert {"elementwise", "reduction", "softmax", "attention", "decode_attention", "scan", "matmul",
            "moe"} <= set(specs.pattern_files)
    for fam in specs.families.families:
        own = [p for p in specs.patterns_for(fam.id) if fam.id in p.families]
        assert own, f"family {fam.id} has no pattern of its own"


def test_every_pattern_has_a_prose_section(specs):
    for p in specs.patterns:
        text = specs.pattern_text(p.id)
        assert text.splitlines()[1].startswith("#") and p.name in text


# ---------------------------------------------------------------- broken files are refused
@pytest.mark.parametrize("file,change,expect", [
    ("patterns/softmax.yaml", lambda d: d["patterns"][2]["knobs"][0].update(values=[]), r"patterns\.2\.knobs\.0\.values"),
    ("patterns/softmax.yaml", lambda d: d["patterns"][0].update(difficulty=7), r"patterns\.0\.difficulty"),
    ("patterns/scan.yaml", lambda d: d["patterns"][0]["impact"].update(occupancy="huge"), r"impact\.occupancy"),
    ("patterns/moe.yaml", lambda d: d["patterns"][0].pop("when_it_pays"), r"when_it_pays: Field required"),
    ("patterns/matmul.yaml", lambda d: d["patterns"][1]["knobs"][0].update(default=3), r"default 3 is not one of"),
    ("patterns/matmul.yaml", lambda d: d["patterns"][0].update(kinds=["triton"]), r"kinds\.0"),
    ("patterns/attention.yaml", lambda d: d["patterns"][0].update(colour="blue"), r"colour: Extra inputs"),
    ("hardware/apple.yaml", lambda d: d["chips"][0].update(memory_bandwidth_gbs=[400, 300]), r"\[low, high\]"),
    ("hardware/apple.yaml", lambda d: d["chips"][0].pop("source"), r"chips\.0\.source"),
    ("hardware/nvidia.yaml", lambda d: d.update(threadgroup_memory_max_bytes=1024), r"smaller than"),
    ("math.yaml", lambda d: d["tolerances"]["float16"].update(atol=-1), r"tolerances\.float16\.atol"),
    ("mlx_api.yaml", lambda d: d["missing"].append({"name": "mx.softmax", "instead": "x"}), r"both in exists and missing"),
    ("mlx_api.yaml", lambda d: d["exists"].append({"name": "torch.softmax", "use_for": "x", "runs_on": ["mlx-cpu"]}),
     r"exists\.\d+\.name"),
    ("families.yaml", lambda d: d["families"][0]["aliases"].append("rmsnorm"), r"used by families"),
])
def test_a_broken_file_is_refused_naming_file_and_field(copy, file, change, expect):
    edit_yaml(copy / file, change)
    with pytest.raises(SpecError) as e:
        load_specs(copy)
    assert file in str(e.value) and re.search(expect, str(e.value)), str(e.value)


@pytest.mark.parametrize("file,change,expect", [
    ("patterns/softmax.yaml", lambda d: d["patterns"][0].update(families=["convolution"]),
     r"family 'convolution' is not in families.yaml"),
    ("patterns/moe.yaml", lambda d: d["patterns"][1].update(apis=["mx.top_k"]), r"'mx.top_k' is not in mlx_api"),
    ("patterns/scan.yaml", lambda d: d["patterns"][0].update(requires=["scan.nothing"]), r"unknown pattern 'scan.nothing'"),
    ("patterns/moe.yaml", lambda d: d["patterns"][0].update(id="softmax.online"), r"'softmax.online' also in"),
    ("hardware/cpu.yaml", lambda d: d.update(backends=["mlx-metal"]), r"also claimed"),
    ("math.yaml", lambda d: d["constraints"][0].update(families=["fft"]), r"family 'fft'"),
])
def test_broken_references_between_files_are_refused(copy, file, change, expect):
    edit_yaml(copy / file, change)
    with pytest.raises(SpecError, match=expect):
        load_specs(copy)


def test_invalid_yaml_unknown_files_and_missing_prose_are_refused(copy):
    (copy / "patterns" / "scan.yaml").write_text("patterns: [unclosed\n")
    (copy / "hardware" / "extra").mkdir()
    (copy / "hardware" / "extra" / "amd.yaml").write_text("schema: x\n")
    (copy / "patterns" / "moe.md").unlink()
    with pytest.raises(SpecError) as e:
        load_specs(copy)
    msg = str(e.value)
    assert "scan.yaml: not valid YAML" in msg
    assert "amd.yaml: no schema for this file" in msg
    # moe.md is reported once the other errors are fixed
    (copy / "patterns" / "scan.yaml").write_text((ROOT / "patterns" / "scan.yaml").read_text())
    shutil.rmtree(copy / "hardware" / "extra")
    with pytest.raises(SpecError, match=r"needs its prose in patterns/moe.md"):
        load_specs(copy)


def test_translation_yaml_only_needs_a_rules_list(copy):
    (copy / "translation.yaml").write_text("rules:\n  - {cuda: __syncthreads(), whatever: 1}\n")
    assert load_specs(copy).translation["rules"][0]["whatever"] == 1
    (copy / "translation.yaml").write_text("table: []\n")
    with pytest.raises(SpecError, match=r"translation.yaml.*\n.*rules: Field required"):
        load_specs(copy)


# ---------------------------------------------------------------- the MLX API list is true
def test_the_api_list_matches_the_installed_mlx(specs):
    assert check_mlx_api(specs.mlx_api()) == []
    api = specs.mlx_api()
    assert api.mlx_version == mx.__version__
    for e in api.exists:
        assert S.resolve_api(e.name, api.prefixes) is not None
    for m in api.missing:
        with pytest.raises(AttributeError):
            S.resolve_api(m.name, api.prefixes)


@pytest.mark.parametrize("bad,expect", [
    ({"name": "mx.fast.fused_mlp", "use_for": "x", "runs_on": ["mlx-cpu"]}, "mx.fast.fused_mlp: listed under exists but not"),
    ({"name": "mx.softmax", "use_for": "x", "runs_on": ["mlx-cpu"], "params": ["temperature"]},
     "parameter 'temperature' not in its signature"),
])
def test_an_api_that_is_not_there_fails_the_check(specs, bad, expect):
    api = specs.mlx_api()
    data = api.model_dump(by_alias=True)
    data["exists"] = [e for e in data["exists"] if e["name"] != bad["name"]] + [bad]
    problems = check_mlx_api(S.MlxApiFile.model_validate(data))
    assert any(expect in p for p in problems), problems


def test_missing_entries_that_exist_and_false_suggestions_fail_the_check(specs):
    data = specs.mlx_api().model_dump(by_alias=True)
    data["exists"] = [e for e in data["exists"] if e["name"] != "mx.topk"]
    data["missing"] += [{"name": "mx.topk", "instead": "x"}, {"name": "mx.fast.foo", "instead": "mx.fast.bar"}]
    problems = check_mlx_api(S.MlxApiFile.model_validate(data))
    assert any("mx.topk: listed under missing but it exists" in p for p in problems), problems
    assert any("suggests 'mx.fast.bar'" in p for p in problems), problems


def test_metal_kernel_call_parameters_are_checked_against_the_built_kernel(specs):
    data = specs.mlx_api().model_dump(by_alias=True)
    mk = next(e for e in data["exists"] if e["name"] == "mx.fast.metal_kernel")
    mk["call_params"] = mk["call_params"] + ["threads_per_group"]
    problems = check_mlx_api(S.MlxApiFile.model_validate(data))
    assert problems == [next(p for p in problems if "call parameter 'threads_per_group'" in p)]


def test_mx_empty_is_documented_as_zeros_not_uninitialized(specs):
    # the brief assumed mx.empty does not exist; in 0.32.4 it does, as an alias of mx.zeros
    assert mx.empty is mx.zeros
    assert "NOT uninitialized" in specs.mlx_api().entry("mx.empty").use_for


# ---------------------------------------------------------------- the accessors
def test_patterns_for_resolves_aliases_and_filters_by_kind(specs):
    ids = [p.id for p in specs.patterns_for("RMSNorm")]
    assert "reduction.row_in_registers" in ids and "general.threadgroup_size" in ids
    assert ids.index("reduction.row_in_registers") < ids.index("general.threadgroup_size")
    ops = specs.patterns_for("scan", kind="ops")
    assert ops and all("ops" in p.kinds for p in ops)
    assert "scan.ops_chunked_ssd" in [p.id for p in ops]
    assert {p.id for p in specs.patterns_for("custom")} == {p.id for p in specs.patterns if "any" in p.families}


def test_every_builtin_family_and_template_pattern_is_in_the_specs(specs):
    from ksearch_engine import families
    checked = 0
    for name in families.names():
        assert specs.family(name) is not None, f"families/{name}: add it as an alias in specs/families.yaml"
        try:
            fam = families.get(name)
        except Exception:  # noqa: BLE001 - a family module that does not import is its own tests' business
            continue
        for t in fam.templates:
            p = specs.pattern(t.pattern)   # KeyError names the missing pattern id
            assert set(t.kinds) <= set(p.kinds), f"template {t.id}: kinds {t.kinds} not all in pattern {p.id}"
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("key,hw,chip", [
    ("mlx-metal", "apple", None), ("mlx-cuda", "nvidia", None), ("mlx-cpu", "cpu", None), ("sim", "cpu", None),
    ("Apple M3 Max", "apple", "m3_max"), ("Apple M3", "apple", "m3"), ("m1_ultra", "apple", "m1_ultra"),
    ("NVIDIA H200", "nvidia", "h200"), ("NVIDIA H100 80GB HBM3", "nvidia", "h100_sxm"),
])
def test_hardware_lookup_by_backend_or_device_name(specs, key, hw, chip):
    view = specs.hardware(key)
    assert view.spec.id == hw and (view.chip.id if view.chip else None) == chip


def test_unknown_hardware_names_what_is_known(specs):
    with pytest.raises(KeyError, match=r"Intel Arc.*M4 Max"):
        specs.hardware("Intel Arc A770")


def test_hardware_facts_the_proposers_rely_on(specs):
    apple, nvidia = specs.hardware("mlx-metal").spec, specs.hardware("mlx-cuda").spec
    assert (apple.simd_width, apple.max_threads_per_threadgroup, apple.threadgroup_memory_bytes) == (32, 1024, 32768)
    assert apple.unified_memory and not nvidia.unified_memory
    assert (nvidia.threadgroup_memory_bytes, nvidia.threadgroup_memory_max_bytes) == (48 * 1024, 227 * 1024)
    h200 = specs.hardware("H200").chip
    assert h200.compute_units == [132] and h200.memory_bandwidth_gbs == 4800 and h200.last_level_cache_mb == 50
    assert all(c.source == "public spec sheet (approx)" for hw in (apple, nvidia) for c in hw.chips)
    assert not specs.hardware("mlx-cpu").spec.custom_kernels


def test_tolerances_are_kernelbench_s(specs):
    t = specs.math.tolerances
    assert (t["float32"].atol, t["float16"].rtol, t["bfloat16"].atol) == (1e-4, 1e-2, 1e-2)


def test_section_text_takes_whole_docs_or_one_section(specs):
    one = specs.section_text("math#Tolerances")
    assert one.startswith("<!-- specs/math.md#Tolerances -->\n## Tolerances") and "## Stable softmax" not in one
    both = specs.section_text(["hardware/apple", "patterns/scan"])
    assert "# Apple GPUs" in both and "(a2, b2) o (a1, b1)" in both
    with pytest.raises(KeyError, match="there are: .*hardware/apple"):
        specs.section_text("hardware/amd")
    with pytest.raises(KeyError, match="headings: .*Tolerances"):
        specs.section_text("math#Nope")


def test_headings_inside_code_blocks_are_not_sections(copy):
    (copy / "patterns" / "scan.md").write_text("# Scan\n## Real\nbody\n```\n## not a heading\n```\nmore\n## Next\nx\n")
    text = load_specs(copy).section_text("patterns/scan#Real")
    assert "## not a heading" in text and "more" in text and "## Next" not in text
    with pytest.raises(KeyError):
        load_specs(copy).section_text("patterns/scan#not a heading")


def test_cached_specs_loads_once_per_folder(copy):
    assert S.cached_specs(copy) is S.cached_specs(str(copy))
    assert S.cached_specs(copy) is not S.cached_specs(ROOT)


def test_docs_for_picks_hardware_patterns_and_math(specs):
    names = specs.docs_for("paged_attention", "mlx-cuda")
    assert names[0] == "hardware/nvidia" and "patterns/decode_attention" in names and names[-1] == "math"
    assert "patterns/matmul" not in names and "translation" not in names


def test_docs_for_a_port_adds_the_translation_prose(copy):
    (copy / "translation.md").write_text("# CUDA to Metal\n")
    s = load_specs(copy)
    assert s.docs_for("softmax", "mlx-metal", port=True)[-1] == "translation"
    assert "translation" not in s.docs_for("softmax", "mlx-metal")


# ---------------------------------------------------------------- where specs are found
def test_root_from_env_var_and_package_data(tmp_path, monkeypatch, copy):
    edit_yaml(copy / "math.yaml", lambda d: d.update(tolerance_source="from the copy"))
    monkeypatch.setenv(S.SPECS_ENV, str(copy))
    assert load_specs().math.tolerance_source == "from the copy"
    monkeypatch.delenv(S.SPECS_ENV)
    pkg = tmp_path / "site" / "ksearch_engine"            # an installed package: no specs/ beside it
    shutil.copytree(copy, pkg / "data" / "specs")
    assert S.default_root(pkg) == pkg / "data" / "specs"
    with pytest.raises(SpecError, match=S.SPECS_ENV):
        S.default_root(tmp_path / "nowhere" / "ksearch_engine")
    with pytest.raises(SpecError, match="does not exist"):
        load_specs(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match=r"families.yaml: missing[\s\S]*no hardware/\*.yaml files"):
        load_specs(tmp_path / "empty")


def test_command_line_check_reports_ok_and_broken_folders(copy, capsys):
    assert S.main([str(copy)]) == 0
    assert re.search(r"\d+ patterns in \d+ files", capsys.readouterr().out)
    edit_yaml(copy / "patterns" / "scan.yaml", lambda d: d["patterns"][0].update(difficulty=0))
    assert S.main([str(copy)]) == 1
    err = capsys.readouterr().err
    assert "scan.yaml" in err and "patterns.0.difficulty" in err
