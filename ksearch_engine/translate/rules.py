"""The CUDA → Metal rule table: loads `specs/translation.yaml` into typed rules.

The table is data: changing a rule there changes the translator (and its parametrized test).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel


def spec_path() -> Path:
    """specs/translation.yaml wherever the specs live (the repository, or the wheel's ksearch_engine/data/specs)."""
    from ..specs import default_root
    return default_root() / "translation.yaml"


Kind = Literal["identifier", "function", "call", "type", "qualifier", "special", "unsupported"]


class Example(BaseModel):
    cuda: str
    metal: str


class Check(BaseModel):
    arg: str
    allowed: list[str]
    message: str


class Rule(BaseModel):
    id: str
    kind: Kind
    cuda: str
    metal: str | None = None
    notes: str | None = None
    reason: str | None = None
    check: Check | None = None
    requires: str | None = None
    severity: Literal["error", "warning", "info"] | None = None
    example: Example | None = None

    # -- call patterns ----------------------------------------------------------------------------
    @property
    def callee(self) -> str:
        """Function name a `call`/`function`/`unsupported` rule matches."""
        return re.split(r"[(\s]", self.cuda.strip(), maxsplit=1)[0]

    def arg_names(self) -> list[tuple[str, bool]]:
        """[(name, optional)] of a call pattern's `$name` / `$name?` arguments, in order."""
        inside = self.cuda[self.cuda.index("(") + 1:self.cuda.rindex(")")]
        out = []
        for part in (p.strip() for p in inside.split(",") if p.strip()):
            m = re.fullmatch(r"\$(\w+)(\?)?", part)
            if not m:
                raise ValueError(f"rule {self.id}: argument pattern '{part}' must be $name or $name?")
            out.append((m.group(1), bool(m.group(2))))
        return out


class RuleTable(BaseModel):
    version: int = 1
    rules: list[Rule]

    def by_kind(self, kind: str) -> dict[str, Rule]:
        out: dict[str, Rule] = {}
        for r in self.rules:
            if r.kind != kind:
                continue
            key = r.callee if kind in ("call", "function", "unsupported") else r.cuda
            out[key] = r
        return out

    def get(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def without(self, *rule_ids: str) -> "RuleTable":
        return RuleTable(version=self.version, rules=[r for r in self.rules if r.id not in rule_ids])

    def replacing(self, rule: Rule) -> "RuleTable":
        return RuleTable(version=self.version, rules=[rule if r.id == rule.id else r for r in self.rules])


def load_rules(path: str | Path | None = None) -> RuleTable:
    """The rule table at `path` (default: the project's specs/translation.yaml)."""
    return _load(str(path or spec_path()))


@lru_cache(maxsize=8)
def _load(path: str) -> RuleTable:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"translation table not found: {path} (it ships in the project's specs/ folder)") from None
    table = RuleTable.model_validate(data)
    for r in table.rules:
        if r.kind == "call":
            r.arg_names()  # validate the pattern early, naming the rule
    return table
