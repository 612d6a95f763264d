"""Loads the spec documents under `specs/` (YAML + Markdown) and validates each against its schema.

The specs are what the proposers read: hardware rules per backend and chip, optimization patterns per kernel
family with their tunable knobs, math constraints and tolerances, and the MLX APIs that exist (and plausible
ones that do not). Every YAML file has a schema here; `load_specs()` refuses a file that does not fit it and
says which file, which field and what is wrong. `specs/translation.yaml` belongs to the translation table's
owner: here it is only checked to be YAML with a top-level `rules:` list.

Where the specs live (first that applies): the `root` argument, the `KSEARCH_SPECS` environment variable,
`specs/` next to the package (a source checkout or an editable install), `ksearch_engine/data/specs`
(package data of a regular install).
"""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SPECS_ENV = "KSEARCH_SPECS"

Level = Literal["low", "medium", "high"]
Backend = Literal["mlx-metal", "mlx-cuda", "mlx-cpu", "sim"]
CandidateKind = Literal["ops", "metal", "cuda"]
# A public figure we only know roughly: one number, or a [low, high] range where public sources disagree.
Approx = Union[float, tuple[float, float]]
Id = Annotated[str, Field(pattern=r"^[a-z0-9_]+$")]
PatternId = Annotated[str, Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")]
Text = Annotated[str, Field(min_length=1)]
KnobValue = Union[bool, int, float, str]
ANY_FAMILY = "any"


class SpecError(ValueError):
    """A spec file that is missing, is not YAML, or does not fit its schema; the message names file and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_range(v: Approx | None) -> Approx | None:
    if isinstance(v, tuple) and not (0 <= v[0] <= v[1]):
        raise ValueError(f"a range must be [low, high] with 0 <= low <= high, got {list(v)}")
    if isinstance(v, (int, float)) and v < 0:
        raise ValueError(f"must be >= 0, got {v}")
    return v


# ---------------------------------------------------------------- families
class Family(_Model):
    id: Id
    name: Text
    description: Text
    aliases: list[str] = []


class FamiliesFile(_Model):
    schema_: Literal["ksearch/families/1"] = Field(alias="schema")
    families: list[Family] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "FamiliesFile":
        seen: dict[str, str] = {}
        for f in self.families:
            for key in [f.id, *f.aliases]:
                k = _norm(key)
                if k in seen and seen[k] != f.id:
                    raise ValueError(f"name '{key}' is used by families '{seen[k]}' and '{f.id}'")
                seen[k] = f.id
        if ANY_FAMILY in seen:
            raise ValueError(f"'{ANY_FAMILY}' is reserved (a pattern for every family)")
        return self


# ---------------------------------------------------------------- hardware
class Limit(_Model):
    name: Text
    value: Union[int, float, str]
    unit: str = ""
    note: str = ""


class Chip(_Model):
    """One chip. Compute figures are for its largest configuration unless `notes` says otherwise."""
    id: Id
    name: Text
    aliases: list[str] = []
    gpu_family: str = ""
    compute_units: list[int] = Field(min_length=1, description="configurations sold (GPU cores, SMs)")
    memory: str = ""
    memory_bandwidth_gbs: Approx
    fp32_tflops: Approx | None = None
    fp16_tflops: Approx | None = None
    fp16_path: str = ""
    other_tflops: dict[str, Approx] = {}
    last_level_cache_mb: Approx | None = None
    source: Text
    notes: str = ""

    @field_validator("memory_bandwidth_gbs", "fp32_tflops", "fp16_tflops", "last_level_cache_mb")
    @classmethod
    def _ranges(cls, v: Approx | None) -> Approx | None:
        return _check_range(v)

    @field_validator("other_tflops")
    @classmethod
    def _other_ranges(cls, v: dict[str, Approx]) -> dict[str, Approx]:
        for x in v.values():
            _check_range(x)
        return v


class Observation(_Model):
    what: Text
    result: Text
    source: Text


class HardwareFile(_Model):
    schema_: Literal["ksearch/hardware/1"] = Field(alias="schema")
    id: Id
    name: Text
    backends: list[Backend] = Field(min_length=1)
    compute_unit: Text
    simd_width: int | None = Field(None, gt=0)
    max_threads_per_threadgroup: int | None = Field(None, gt=0)
    threadgroup_memory_bytes: int | None = Field(None, gt=0, description="per threadgroup, without opt-in")
    threadgroup_memory_max_bytes: int | None = Field(None, gt=0, description="per threadgroup, with opt-in")
    unified_memory: bool
    custom_kernels: bool = Field(description="can candidates with hand-written kernels run here")
    rules: list[Text] = Field(min_length=1)
    limits: list[Limit] = []
    chips: list[Chip] = []
    measured: list[Observation] = []

    @model_validator(mode="after")
    def _consistent(self) -> "HardwareFile":
        a, b = self.threadgroup_memory_bytes, self.threadgroup_memory_max_bytes
        if a is not None and b is not None and b < a:
            raise ValueError("threadgroup_memory_max_bytes is smaller than threadgroup_memory_bytes")
        ids = [c.id for c in self.chips]
        if len(ids) != len(set(ids)):
            raise ValueError(f"chip ids repeat: {sorted(i for i in ids if ids.count(i) > 1)}")
        return self


# ---------------------------------------------------------------- patterns
class Knob(_Model):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", description="snake_case, as the family templates")]
    values: list[KnobValue] = Field(min_length=1)
    default: KnobValue | None = None
    description: Text

    @model_validator(mode="after")
    def _default_in_values(self) -> "Knob":
        if self.default is not None and self.default not in self.values:
            raise ValueError(f"knob '{self.name}': default {self.default!r} is not one of its values {self.values}")
        return self


class Impact(_Model):
    memory_traffic: Level
    occupancy: Level
    compute_fit: Level


class Pattern(_Model):
    id: PatternId
    name: Text
    families: list[str] = Field(min_length=1)
    kinds: list[CandidateKind] = Field(min_length=1, description="candidate kinds that can express it")
    description: Text
    when_it_pays: Text
    risks: Text
    knobs: list[Knob] = []
    impact: Impact
    difficulty: int = Field(ge=1, le=5)
    requires: list[PatternId] = []
    apis: list[str] = Field([], description="MLX APIs it uses; each must be in mlx_api.yaml's exists list")
    references: list[str] = []

    @model_validator(mode="after")
    def _unique_knobs(self) -> "Pattern":
        names = [k.name for k in self.knobs]
        if len(names) != len(set(names)):
            raise ValueError(f"pattern '{self.id}': knob names repeat")
        return self


class PatternsFile(_Model):
    schema_: Literal["ksearch/patterns/1"] = Field(alias="schema")
    title: Text
    patterns: list[Pattern] = Field(min_length=1)


# ---------------------------------------------------------------- math
class Tolerance(_Model):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class Constraint(_Model):
    id: Id
    name: Text
    families: list[str] = Field(min_length=1)
    statement: Text
    formula: str = ""
    why: Text
    check: Text


class MathFile(_Model):
    schema_: Literal["ksearch/math/1"] = Field(alias="schema")
    tolerances: dict[str, Tolerance] = Field(min_length=1)
    tolerance_rule: Text
    tolerance_source: Text
    constraints: list[Constraint] = Field(min_length=1)


# ---------------------------------------------------------------- MLX API
ApiName = Annotated[str, Field(pattern=r"^(mx|nn)(\.[A-Za-z_][A-Za-z0-9_]*)+$")]


class ApiEntry(_Model):
    name: ApiName
    use_for: Text
    runs_on: list[Backend] = Field(min_length=1)
    params: list[str] = Field([], description="parameters worth knowing; checked against the signature")
    call_params: list[str] = Field([], description="for kernel builders: parameters of the returned callable")
    notes: str = ""


class MissingApi(_Model):
    name: ApiName
    instead: Text


class MlxApiFile(_Model):
    schema_: Literal["ksearch/mlx_api/1"] = Field(alias="schema")
    mlx_version: Text
    prefixes: dict[str, str] = Field(description="name prefix -> Python module, e.g. mx -> mlx.core")
    exists: list[ApiEntry] = Field(min_length=1)
    missing: list[MissingApi] = []

    @model_validator(mode="after")
    def _disjoint(self) -> "MlxApiFile":
        have = [e.name for e in self.exists]
        gone = [m.name for m in self.missing]
        dup = {n for n in have if have.count(n) > 1} | {n for n in gone if gone.count(n) > 1}
        if dup:
            raise ValueError(f"names listed twice: {sorted(dup)}")
        both = set(have) & set(gone)
        if both:
            raise ValueError(f"names both in exists and missing: {sorted(both)}")
        for n in have + gone:
            if n.split(".")[0] not in self.prefixes:
                raise ValueError(f"'{n}': prefix not in prefixes {sorted(self.prefixes)}")
        return self

    def entry(self, name: str) -> ApiEntry | None:
        return next((e for e in self.exists if e.name == name), None)


# ---------------------------------------------------------------- translation (owned elsewhere)
class TranslationFile(BaseModel):
    """Only the outer shape: the translation table's owner defines the rules' fields."""
    model_config = ConfigDict(extra="allow")
    rules: list[Any]


# ---------------------------------------------------------------- the loaded whole
class HardwareView(_Model):
    """What `Specs.hardware()` returns: the backend's rules and, when a chip was named, that chip."""
    spec: HardwareFile
    chip: Chip | None = None


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DEFAULT_SPECS_FILES = ("families.yaml", "math.yaml", "mlx_api.yaml")


class Specs:
    """All spec documents of one `specs/` folder, validated together (cross-file references included)."""

    def __init__(self, root: Path, families: FamiliesFile, hardware: dict[str, HardwareFile],
                 pattern_files: dict[str, PatternsFile], math: MathFile, api: MlxApiFile,
                 translation: dict | None, docs: dict[str, str]):
        self.root = root
        self.families = families
        self.hardware_files = hardware
        self.pattern_files = pattern_files
        self.math = math
        self.api = api
        self.translation = translation
        self.docs = docs
        self._family_by_name = {_norm(k): f.id for f in families.families for k in [f.id, *f.aliases]}

    # -- families and patterns
    @property
    def patterns(self) -> list[Pattern]:
        return [p for f in self.pattern_files.values() for p in f.patterns]

    def family(self, name: str) -> str | None:
        """The canonical family id for a family name or alias ('rmsnorm' -> 'norm'); None if unknown."""
        return self._family_by_name.get(_norm(name))

    def patterns_for(self, family: str, kind: CandidateKind | None = None) -> list[Pattern]:
        """Patterns for a family (aliases accepted): its own first, then those for any family, each in file order.
 An unknown family (a task's
        `custom`) gets only the patterns that apply to any family.
        `kind` keeps the patterns a candidate of that kind can express (`ops` on the CPU backend).
        """
        fid = self.family(family)
        own = [p for p in self.patterns if fid is not None and fid in p.families]
        out = own + [p for p in self.patterns if ANY_FAMILY in p.families and p not in own]
        return [p for p in out if kind is None or kind in p.kinds]

    def pattern(self, pattern_id: str) -> Pattern:
        for p in self.patterns:
            if p.id == pattern_id:
                return p
        raise KeyError(f"no pattern '{pattern_id}' in {self.root / 'patterns'}")

    def pattern_text(self, pattern_id: str) -> str:
        """The prose section of one pattern (its name is a heading in patterns/<file>.md)."""
        p = self.pattern(pattern_id)
        stem = next(k for k, f in self.pattern_files.items() if p in f.patterns)
        return self.section_text(f"patterns/{stem}#{p.name}")

    # -- hardware
    def hardware(self, backend_or_chip: str) -> HardwareView:
        """Rules for a backend ('mlx-metal', 'mlx-cuda', 'mlx-cpu'), a hardware file id ('apple'), or a chip.

        Chips match by id, name or alias, and by device names as MLX reports them ('Apple M3 Max',
        'NVIDIA H200'): the longest chip name contained in the given name wins.
        """
        key = _norm(backend_or_chip)
        for hw in self.hardware_files.values():
            if key == _norm(hw.id) or key in {_norm(b) for b in hw.backends}:
                return HardwareView(spec=hw)
        best: tuple[int, HardwareFile, Chip] | None = None
        for hw in self.hardware_files.values():
            for chip in hw.chips:
                for name in [chip.id, chip.name, *chip.aliases]:
                    n = _norm(name)
                    if n and n in key and (best is None or len(n) > best[0]):
                        best = (len(n), hw, chip)
        if best is None:
            known = sorted({b for hw in self.hardware_files.values() for b in hw.backends}
                           | {c.name for hw in self.hardware_files.values() for c in hw.chips})
            raise KeyError(f"no hardware spec matches '{backend_or_chip}' (known: {', '.join(known)}); "
                           f"add the chip to a file under {self.root / 'hardware'}")
        return HardwareView(spec=best[1], chip=best[2])

    def mlx_api(self) -> MlxApiFile:
        return self.api

    # -- prose for prompts
    def section_text(self, names: str | Iterable[str]) -> str:
        """Markdown for an LLM prompt. Each name is a doc ('hardware/apple', 'patterns/softmax', 'math'),
        optionally with '#Heading' to take one section (the heading and what follows up to the next heading
        of the same or higher level). Unknown names raise KeyError listing the docs there are."""
        if isinstance(names, str):
            names = [names]
        parts = []
        for name in names:
            doc, _, heading = name.partition("#")
            doc = doc.removesuffix(".md")
            if doc not in self.docs:
                raise KeyError(f"no spec doc '{doc}' (there are: {', '.join(sorted(self.docs))})")
            text = self.docs[doc]
            if heading:
                text = _section(text, heading)
                if text is None:
                    raise KeyError(f"spec doc '{doc}' has no heading '{heading}' "
                                   f"(headings: {', '.join(_headings(self.docs[doc]))})")
            parts.append(f"<!-- specs/{doc}.md{'#' + heading if heading else ''} -->\n{text.strip()}\n")
        return "\n".join(parts)

    def docs_for(self, family: str, backend: str, *, port: bool = False) -> list[str]:
        """The doc names worth putting in a prompt for this family on this backend (for a port from CUDA, also
        the translation table's prose when there is one): pass the result to section_text()."""
        names = []
        try:
            names.append(f"hardware/{self.hardware(backend).spec.id}")
        except KeyError:
            pass
        wanted = {p.id for p in self.patterns_for(family)}
        for stem, pf in self.pattern_files.items():
            if any(p.id in wanted for p in pf.patterns) and f"patterns/{stem}" in self.docs:
                names.append(f"patterns/{stem}")
        if "math" in self.docs:
            names.append("math")
        if port and "translation" in self.docs:
            names.append("translation")
        return names


def _heading_lines(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each Markdown heading, skipping fenced code blocks."""
    out, fenced = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^(#+)\s+(.*)$", line)
        if m:
            out.append((i, len(m.group(1)), m.group(2).strip()))
    return out


def _headings(text: str) -> list[str]:
    return [title for _, _, title in _heading_lines(text.splitlines())]


def _section(text: str, heading: str) -> str | None:
    """The heading named (case-insensitive) and its body, up to the next heading of the same or higher level."""
    lines = text.splitlines()
    heads = _heading_lines(lines)
    for k, (i, level, title) in enumerate(heads):
        if title.lower() == heading.strip().lower():
            end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
            return "\n".join(lines[i:end])
    return None


# ---------------------------------------------------------------- loading
def default_root(package_dir: Path | None = None) -> Path:
    """Where specs are read from when no root is given (see the module docstring)."""
    env = os.environ.get(SPECS_ENV)
    if env:
        return Path(env)
    here = package_dir or Path(__file__).resolve().parent
    for cand in (here.parent / "specs", here / "data" / "specs"):
        if (cand / "families.yaml").is_file():
            return cand
    raise SpecError(f"no specs folder found: looked at {here.parent / 'specs'} and {here / 'data' / 'specs'}; "
                    f"pass load_specs(root=...) or set {SPECS_ENV} to the folder holding families.yaml")


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except FileNotFoundError:
        raise SpecError(f"{path}: missing (every specs folder needs {', '.join(_DEFAULT_SPECS_FILES)})") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None


def _validate(model: type[BaseModel], path: Path, data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        lines = [f"{path}: does not fit the {model.__name__} schema (ksearch_engine/specs.py):"]
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            lines.append(f"  {loc}: {err['msg']}")
        raise SpecError("\n".join(lines)) from None


def schema_for(rel: str) -> type[BaseModel] | None:
    """The schema of a YAML file given its path relative to the specs root; None if no file may live there."""
    fixed = {"families.yaml": FamiliesFile, "math.yaml": MathFile, "mlx_api.yaml": MlxApiFile,
             "translation.yaml": TranslationFile}
    if rel in fixed:
        return fixed[rel]
    if re.fullmatch(r"hardware/[^/]+\.yaml", rel):
        return HardwareFile
    if re.fullmatch(r"patterns/[^/]+\.yaml", rel):
        return PatternsFile
    return None


def validate_file(path: str | os.PathLike, root: str | os.PathLike) -> BaseModel:
    """Validate one spec file on its own (no cross-file checks); SpecError names the file and fields."""
    path, root = Path(path), Path(root)
    rel = path.relative_to(root).as_posix()
    model = schema_for(rel)
    if model is None:
        raise SpecError(f"{path}: no schema for this file; spec YAML lives in families.yaml, math.yaml, "
                        f"mlx_api.yaml, translation.yaml, hardware/*.yaml or patterns/*.yaml")
    return _validate(model, path, _read_yaml(path))


def load_specs(root: str | os.PathLike | None = None) -> Specs:
    """Read and validate every spec file under `root`; raise SpecError naming each broken file and field."""
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        raise SpecError(f"specs folder {root} does not exist; pass load_specs(root=...) or set {SPECS_ENV}")
    errors: list[str] = []

    def load(model, path):
        try:
            return _validate(model, path, _read_yaml(path))
        except SpecError as e:
            errors.append(str(e))
            return None

    families = load(FamiliesFile, root / "families.yaml")
    math = load(MathFile, root / "math.yaml")
    api = load(MlxApiFile, root / "mlx_api.yaml")
    hardware = {p.stem: load(HardwareFile, p) for p in sorted((root / "hardware").glob("*.yaml"))}
    patterns = {p.stem: load(PatternsFile, p) for p in sorted((root / "patterns").glob("*.yaml"))}
    for kind, found in (("hardware", hardware), ("patterns", patterns)):
        if not found:
            errors.append(f"{root / kind}: no {kind}/*.yaml files (is {root} a ksearch specs folder?)")
    translation = None
    tpath = root / "translation.yaml"
    if tpath.exists():
        t = load(TranslationFile, tpath)
        translation = t.model_dump() if t is not None else None

    for p in sorted(root.rglob("*.y*ml")):
        if schema_for(p.relative_to(root).as_posix()) is None:
            errors.append(f"{p}: no schema for this file; spec YAML lives in families.yaml, math.yaml, "
                          f"mlx_api.yaml, translation.yaml, hardware/*.yaml or patterns/*.yaml")
    if errors:
        raise SpecError("\n".join(errors))

    docs = {p.relative_to(root).with_suffix("").as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*.md"))}
    specs = Specs(root, families, hardware, patterns, math, api, translation, docs)
    _cross_check(specs)
    return specs


def cached_specs(root: str | os.PathLike | None = None) -> Specs:
    """load_specs(), loaded once per resolved folder: for callers that look specs up often (per plan node).
    Edits to the files are not seen until the process restarts; use load_specs() where that matters."""
    return _cached(str(Path(root) if root is not None else default_root()))


@lru_cache(maxsize=8)
def _cached(root: str) -> Specs:
    return load_specs(root)


def _cross_check(s: Specs) -> None:
    """References between files: pattern families, requires and APIs; hardware ids and chip names."""
    errors = []
    fam_ids = {f.id for f in s.families.families}
    api_names = {e.name for e in s.api.exists}
    seen: dict[str, str] = {}
    for stem, pf in s.pattern_files.items():
        path = s.root / "patterns" / f"{stem}.yaml"
        for p in pf.patterns:
            if p.id in seen:
                errors.append(f"{path}: pattern id '{p.id}' also in patterns/{seen[p.id]}.yaml")
            seen[p.id] = stem
            for f in p.families:
                if f != ANY_FAMILY and f not in fam_ids:
                    errors.append(f"{path}: pattern '{p.id}': family '{f}' is not in families.yaml "
                                  f"(families: {', '.join(sorted(fam_ids))}, or '{ANY_FAMILY}')")
            for a in p.apis:
                if a not in api_names:
                    errors.append(f"{path}: pattern '{p.id}': API '{a}' is not in mlx_api.yaml's exists list")
    for stem, pf in s.pattern_files.items():
        for p in pf.patterns:
            for r in p.requires:
                if r not in seen:
                    errors.append(f"{s.root / 'patterns' / (stem + '.yaml')}: pattern '{p.id}' requires "
                                  f"unknown pattern '{r}'")
    for c in s.math.constraints:
        for f in c.families:
            if f != ANY_FAMILY and f not in fam_ids:
                errors.append(f"{s.root / 'math.yaml'}: constraint '{c.id}': family '{f}' is not in families.yaml")
    names: dict[str, str] = {}
    backends: dict[str, str] = {}
    for stem, hw in s.hardware_files.items():
        path = s.root / "hardware" / f"{stem}.yaml"
        if hw.id != stem:
            errors.append(f"{path}: id '{hw.id}' must equal the file name '{stem}'")
        for b in hw.backends:
            if b in backends:
                errors.append(f"{path}: backend '{b}' is also claimed by hardware/{backends[b]}.yaml")
            backends[b] = stem
        for chip in hw.chips:
            for n in {_norm(x) for x in [chip.id, chip.name, *chip.aliases]}:
                if n in names and names[n] != chip.id:
                    errors.append(f"{path}: chip name '{n}' is used by chips '{names[n]}' and '{chip.id}'")
                names[n] = chip.id
    for kind in ("hardware", "patterns"):
        for stem in (s.hardware_files if kind == "hardware" else s.pattern_files):
            if f"{kind}/{stem}" not in s.docs:
                errors.append(f"{s.root / kind / (stem + '.yaml')}: needs its prose in {kind}/{stem}.md")
    if errors:
        raise SpecError("\n".join(errors))


# ---------------------------------------------------------------- checking the API list against MLX
def resolve_api(name: str, prefixes: dict[str, str]) -> Any:
    """The object an API name ('mx.fast.metal_kernel') stands for; AttributeError/ImportError if it is not there."""
    import importlib
    head, *rest = name.split(".")
    obj = importlib.import_module(prefixes[head])
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _signature_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _call_signature(obj: Any) -> str | None:
    """The callable's signature text, from the TypeError a bogus keyword provokes; None where it cannot be built."""
    try:
        kernel = obj(name="ksearch_probe", input_names=["a"], output_names=["o"], source="")
    except Exception:  # noqa: BLE001 - e.g. cuda_kernel without a CUDA device: cannot check here
        return None
    try:
        kernel(ksearch_probe_bogus=1)
    except TypeError as e:
        return str(e)
    except Exception:  # noqa: BLE001
        return None
    return None


def check_mlx_api(api: MlxApiFile) -> list[str]:
    """Problems between mlx_api.yaml and the installed mlx: names listed as existing that do not resolve,
    documented parameters absent from the signature, 'missing' names that do exist, names suggested in
    `instead` that do not exist, and a version other than the installed one. Empty when all is true."""
    import mlx.core as mx
    problems = []
    if api.mlx_version != mx.__version__:
        problems.append(f"mlx_api.yaml describes mlx {api.mlx_version}, installed is {mx.__version__}: "
                        f"re-verify the list and update mlx_version")

    def exists(name: str) -> Any:
        try:
            return resolve_api(name, api.prefixes)
        except (AttributeError, ImportError):
            return None

    for e in api.exists:
        obj = exists(e.name)
        if obj is None:
            problems.append(f"{e.name}: listed under exists but not in mlx {mx.__version__}")
            continue
        sig = _signature_line(obj)
        for prm in e.params:
            if not re.search(rf"\b{re.escape(prm)}\s*[:=,)]", sig):
                problems.append(f"{e.name}: parameter '{prm}' not in its signature: {sig}")
        if e.call_params:
            call_sig = _call_signature(obj)
            for prm in e.call_params if call_sig else []:
                if not re.search(rf"\b{re.escape(prm)}\s*:", call_sig):
                    problems.append(f"{e.name}: call parameter '{prm}' not accepted by the built kernel: {call_sig}")
    for m in api.missing:
        if exists(m.name) is not None:
            problems.append(f"{m.name}: listed under missing but it exists in mlx {mx.__version__}")
        for suggested in re.findall(r"\b(?:mx|nn)(?:\.[A-Za-z_][A-Za-z0-9_]*)+", m.instead):
            if exists(suggested) is None:
                problems.append(f"{m.name}: suggests '{suggested}', which does not exist either")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m ksearch_engine.specs [ROOT]`: validate a specs folder and check the API list against mlx."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    try:
        s = load_specs(args[0] if args else None)
    except SpecError as e:
        print(e, file=sys.stderr)
        return 1
    problems = check_mlx_api(s.api)
    for p in problems:
        print(f"{s.root / 'mlx_api.yaml'}: {p}", file=sys.stderr)
    print(f"{s.root}: {len(s.families.families)} families, {len(s.patterns)} patterns in "
          f"{len(s.pattern_files)} files, hardware {', '.join(s.hardware_files)}, "
          f"{len(s.api.exists)} APIs present and {len(s.api.missing)} absent"
          + ("" if not problems else f"; {len(problems)} API problems"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
