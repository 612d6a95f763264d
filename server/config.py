"""Settings: read through `workspace/configuration` (section `ksearch`) and on `didChangeConfiguration`.

Unknown or invalid values fall back to the defaults and are reported once, naming the setting.
"""
from __future__ import annotations

from typing import Any, Literal

import re

from pydantic import BaseModel, Field, ValidationError, field_validator

from ksearch_engine.defaults import EVALUATIONS

# ray://HOST:PORT (Ray Client), HOST:PORT (a driver inside the cluster network), auto, local
_CLUSTER = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$|^(auto|local)$")


class Settings(BaseModel):
    proposer: Literal["offline", "gemini", "openai"] = "offline"
    model: str | None = None
    evaluations: int = Field(EVALUATIONS, ge=1, le=10000)          # ksearch.budget.evaluations
    backend: Literal["auto", "mlx-metal", "mlx-cuda", "mlx-cpu", "sim"] | None = None
    store_path: str | None = None                          # ksearch.storePath
    concurrency: int = Field(1, ge=1, le=16)
    openai_base_url: str | None = None                     # ksearch.openaiBaseUrl
    cluster: str | None = None                             # ksearch.cluster: evaluate on a Ray cluster

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str | None) -> str | None:
        if v is not None and not _CLUSTER.match(v.strip()):
            raise ValueError("expected ray://HOST:PORT, HOST:PORT, local or auto")
        return v.strip() if v else None

    @property
    def backend_request(self) -> str | None:
        return None if self.backend in (None, "auto") else self.backend


_KEYS = {
    "proposer": "proposer", "model": "model", "budget.evaluations": "evaluations", "backend": "backend",
    "storePath": "store_path", "concurrency": "concurrency", "openaiBaseUrl": "openai_base_url",
    "cluster": "cluster",
}


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out


def parse_settings(section: Any) -> tuple[Settings, list[str]]:
    """Settings from the client's `ksearch` section (nested or dotted keys) and the problems found in it."""
    flat = _flatten(section if isinstance(section, dict) else {})
    values = {}
    for key, field in _KEYS.items():
        v = flat.get(key)
        if v not in (None, ""):
            values[field] = v
    problems: list[str] = []
    good: dict[str, Any] = {}
    for field, v in values.items():
        try:
            Settings.model_validate({field: v})
            good[field] = v
        except ValidationError as e:
            name = next(k for k, f in _KEYS.items() if f == field)
            problems.append(f"ksearch.{name} = {v!r} is not valid ({e.errors()[0]['msg']}); using the default")
    return Settings.model_validate(good), problems


# -- the settings feature ----------------------------------------------------------------------------
def _apply(ls, section: Any) -> None:
    settings, problems = parse_settings(section)
    old = ls.settings
    ls.settings = settings
    for p in problems:
        ls.tell(p, _warning())
    if settings.concurrency > old.concurrency:
        ls.jobs._pump()
    if settings.store_path != old.store_path:
        ls.results_changed(immediate=True)


def _warning():
    from lsprotocol import types
    return types.MessageType.Warning


async def load_settings(ls) -> None:
    """Pull the `ksearch` section from the client (when it offers workspace/configuration)."""
    from lsprotocol import types
    if not ls.client_supports("workspace.configuration"):
        return
    try:
        result = await ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(section="ksearch")]))
    except Exception:  # noqa: BLE001 - a client without settings: keep the defaults
        return
    if result:
        _apply(ls, result[0] or {})


def register(ls) -> None:
    from lsprotocol import types

    from .errors import guarded

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @guarded(ls, "reading the ksearch settings")
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        pushed = params.settings
        if isinstance(pushed, dict) and isinstance(pushed.get("ksearch"), dict):
            _apply(ls, pushed["ksearch"])
        else:
            await load_settings(ls)
