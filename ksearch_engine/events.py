"""Typed events a search or port job emits, and the request that starts one.

A worker process prints one event per line as JSON; the CLI renders them as progress, the server turns them
into `$/progress`, inlay-hint refreshes and diffs. Events are also appended to the store's event log.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from .defaults import EVALUATIONS
from pydantic import BaseModel, Field, TypeAdapter


class SearchRequest(BaseModel):
    """Everything a worker needs to run one job, as data."""
    kind: Literal["optimize", "port"] = "optimize"
    run_id: str | None = None          # set by whoever created the run in the store
    store_path: str
    task_file: str | None = None       # a *.task.toml
    task: dict | None = None           # or the task itself (KernelTask as JSON)
    family: str | None = None          # or a built-in family's task (ksearch_engine.families)
    source_file: str | None = None     # the kernel's file (for ports and for edits)
    kernel: str | None = None
    all_kernels: bool = False          # port: every kernel of the file, with a coverage report
    argv: list[str] = []               # port: the program's command line for the launch capture
    defines: dict[str, str] = {}       # port: -D NAME=VALUE for the capture (a scaled-down run)
    include_dirs: list[str] = []       # port: -I folders for the capture and the simulator
    doc_version: int | None = None     # the editor's document version the job started from
    proposer: Literal["offline", "gemini", "openai"] = "offline"
    model: str | None = None
    base_url: str | None = None        # OpenAI-compatible endpoint
    backend: str | None = None         # None: best present
    max_evals: int = EVALUATIONS
    max_rounds: int = 6
    max_seconds: float = 600.0
    max_tokens: int | None = None
    stagnation: int = 6
    seed: int = 0
    resume: bool = False
    cluster: str | None = None         # a Ray cluster to evaluate on (ray://HOST:PORT, HOST:PORT, auto, local); None: here
    max_in_flight: int | None = None   # cap on candidates evaluated at once (None: one per free device of the pool)


class _E(BaseModel):
    run_id: str = ""


class StageEvent(_E):
    type: Literal["stage"] = "stage"
    stage: str                         # analyze | propose | evaluate | translate | verify | done
    message: str = ""


class NodeEvent(_E):
    type: Literal["node"] = "node"
    node_id: str
    plan: str                          # the root->node path, as text
    round: int = 0


class CandidateEvent(_E):
    type: Literal["candidate"] = "candidate"
    candidate_id: str
    status: str
    summary: str
    evals: int                         # evaluations so far
    median_ms: float | None = None
    speedup: float | None = None
    node: str | None = None            # the cluster node it ran on (None: this machine)


class BestEvent(_E):
    type: Literal["best"] = "best"
    candidate_id: str
    summary: str
    median_ms: float | None = None
    speedup: float | None = None


class LogEvent(_E):
    type: Literal["log"] = "log"
    level: Literal["info", "warning", "error"] = "info"
    message: str


class DoneEvent(_E):
    type: Literal["done"] = "done"
    status: Literal["done", "failed", "cancelled"] = "done"
    best_candidate: str | None = None
    evals: int = 0
    message: str = ""
    report: dict | None = None         # port: the per-kernel coverage report (portfile.PortReport as JSON)


class ErrorEvent(_E):
    type: Literal["error"] = "error"
    message: str


Event = Annotated[Union[StageEvent, NodeEvent, CandidateEvent, BestEvent, LogEvent, DoneEvent, ErrorEvent],
                  Field(discriminator="type")]
EventAdapter: TypeAdapter = TypeAdapter(Event)


def parse_event(line: str):
    """One JSON line from a worker into its typed event."""
    return EventAdapter.validate_json(line)
