"""The `ksearch` command line: the same engine as the language server, without an editor.

    ksearch optimize TARGET [--kernel NAME] [--proposer offline|gemini|openai] [--budget N] [--backend B]
    ksearch port FILE [--kernel NAME]
    ksearch eval TASK CANDIDATE [--backend B]
    ksearch runs
    ksearch show RUN [--tree]
    ksearch optimize TARGET --cluster ray://HOST:PORT    (evaluate on a Ray cluster: docs/cluster.md)
    ksearch cluster status [--cluster ADDRESS]

TARGET is a `*.task.toml`, a built-in family name (`ksearch families` lists them), or a kernel file whose
task is found next to it (`<stem>.task.toml`) or recognized from its kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .defaults import EVALUATIONS
from .events import SearchRequest
from .store import Store, default_path
from .task import KernelTask, TaskError

# Piped output (CI logs, `| less`) would otherwise wrap tables at 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, highlight=False, soft_wrap=True)   # messages name paths: never break them mid-name


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


# -- task resolution -------------------------------------------------------------------------------
# The resolver lives in the engine (ksearch_engine/resolve.py), shared with the language server and the search;
# these wrappers turn its errors into UserErrors for the CLI.
def resolve_task(target: str, kernel: str | None = None) -> tuple[KernelTask, str | None]:
    """A task from a task file, a family name, or a kernel file. Returns (task, source_file)."""
    r = _resolve(target, kernel)
    return r.task, r.source_file


def _resolve(target: str, kernel: str | None = None, progress=None, **capture):
    from .resolve import ResolveError, resolve

    try:
        return resolve(target, kernel, progress=progress, **capture)
    except ResolveError as e:
        raise UserError(str(e)) from None


def load_task_file(path: Path) -> KernelTask:
    """A task file: either a full KernelTask, or `family = "..."` (+ options) naming a built-in family."""
    from .resolve import load_task_file as load

    try:
        return load(path)
    except TaskError as e:
        raise UserError(str(e)) from None


def guess_family(path: Path, kernel: str | None) -> str | None:
    """The kernel's recognised family (resolve.recognize_family: specs/families.yaml's ids and aliases)."""
    from .resolve import recognize_family

    return recognize_family(kernel or "", path.stem)


# -- commands --------------------------------------------------------------------------------------
def _store(args) -> Store:
    return Store(args.store or default_path())


def _defines(args) -> dict[str, str]:
    out = {}
    for d in getattr(args, "define", None) or []:
        n, _, v = d.partition("=")
        out[n] = v or "1"
    return out


def cmd_optimize(args) -> int:
    r = _resolve(args.target, args.kernel,
                 progress=None if args.json else (lambda m: console.print(f"  {escape(m)}")),
                 argv=list(args.arg or []), defines=_defines(args),
                 include_dirs=[str(Path(i).resolve()) for i in args.include or []])
    task = r.task
    if not args.json:
        console.print(f"task: {escape(r.how)}")
        for n in r.notes:
            console.print(f"  note: {escape(n)}")
    req = SearchRequest(kind="optimize", store_path=str(args.store or default_path()), task=task.model_dump(mode="json"),
                        source_file=r.source_file, kernel=args.kernel or task.kernel_name, proposer=args.proposer,
                        model=args.model, base_url=args.base_url, backend=args.backend, max_evals=args.budget,
                        max_seconds=args.max_seconds, seed=args.seed, cluster=args.cluster, max_in_flight=args.in_flight)
    return _run(req, args, title=f"optimize {task.name} ({task.family})")


def cmd_port(args) -> int:
    from .portfile import PortReport

    p = Path(args.file)
    if not p.exists():
        raise UserError(f"{p}: no such file")
    if args.all and args.kernel:
        raise UserError("give --kernel NAME or --all, not both")
    defines = _defines(args)
    req = SearchRequest(kind="port", store_path=str(args.store or default_path()), source_file=str(p.resolve()),
                        kernel=args.kernel, all_kernels=args.all, backend=args.backend, proposer="offline",
                        argv=list(args.arg or []), defines=defines,
                        include_dirs=[str(Path(i).resolve()) for i in args.include or []])
    done: list = []
    rc = _run(req, args, title=f"port {p.name}" + (f" :: {args.kernel}" if args.kernel else " (all kernels)"
                                                     if args.all else ""), done_out=done)
    store = Store(req.store_path)
    wrote = 0
    for c in store.candidates(req.run_id):
        if not c.get("target_file"):
            continue
        out = Path(c["target_file"])
        if out.exists() and out.read_text() != c["target_text"] and not args.force:
            err.print(f"{out} exists and differs from the new port: not overwritten (use --force, or "
                      f"`ksearch show {req.run_id} --json` to read the port)")
            rc = 1
            continue
        out.write_text(c["target_text"])
        wrote += 1
        if not args.json:
            console.print(f"wrote {out} ({c['status']}: {escape(c.get('message') or '')})")
    report = done[0].report if done and done[0].report else None
    if report is not None and not args.json:
        console.print(escape(PortReport.model_validate(report).text()))
    return rc


def _run(req: SearchRequest, args, title: str, done_out: list | None = None) -> int:
    from .worker import run_job

    store = Store(req.store_path)
    req.run_id = store.create_run(req.kind, task_name=(req.task or {}).get("name", ""),
                                  family=(req.task or {}).get("family", ""), file=req.source_file, kernel=req.kernel,
                                  backend=req.backend or "", proposer=req.proposer, config=req.model_dump(mode="json"))
    if args.json:
        done = run_job(req, emit=lambda e: print(e.model_dump_json(), flush=True))
        if done_out is not None:
            done_out.append(done)
        return 0 if done.status == "done" else 1
    console.print(f"[bold]ksearch[/] {title} · run {req.run_id} · proposer {req.proposer} · store {req.store_path}")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} evals"),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        bar = prog.add_task("starting", total=req.max_evals if req.kind == "optimize" else None)
        seen = [0]      # candidates printed: numbered as `ksearch show` numbers them

        def emit(e) -> None:
            store.add_event(req.run_id, e.type, json.loads(e.model_dump_json()))     # the run's full log (`ksearch show`)
            if e.type == "stage":
                prog.update(bar, description=f"{e.stage}: {escape(e.message)}"[:70])
            elif e.type == "candidate":
                prog.update(bar, completed=e.evals)
                seen[0] += 1
                prog.console.print(f"  #{seen[0]:<3} {e.status:<14} {escape(e.summary)}")
            elif e.type == "best":
                prog.console.print(f"  [green]new best[/] {escape(e.summary)}")
            elif e.type == "log" and e.level != "info":
                prog.console.print(f"  [yellow]{e.level}[/] {escape(e.message)}")
            elif e.type == "error" and req.kind == "optimize" and seen[0]:
                prog.console.print(f"  [red]error[/] {escape(e.message)}")   # mid-search; a failure at start is said once, below
        done = run_job(req, emit=emit)
    if done_out is not None:
        done_out.append(done)
    if store.candidates(req.run_id):      # a job that failed before its first candidate has no table to show
        show_run(store, req.run_id, tree=False, log=False)
    if done.status != "done":
        err.print(f"[red]{done.status}[/]: {escape(done.message)}")
        return 1
    return 0


def cmd_eval(args) -> int:
    from .evaluate import Evaluator, Limits

    task = load_task_file(Path(args.task)) if args.task.endswith(".toml") else resolve_task(args.task)[0]
    try:
        source = Path(args.candidate).read_text()
    except OSError as e:
        raise UserError(f"{args.candidate}: cannot read the candidate ({e.strerror})") from None
    try:
        with Evaluator(task, args.backend, limits=Limits(wall_s=args.timeout), time_all=True) as ev:
            r = ev.evaluate(source)
    except (OSError, EOFError) as e:   # never the silent exit 0 of main()'s BrokenPipeError (stdout's reader left)
        raise UserError(f"the evaluation did not finish: {type(e).__name__}: {e}") from None
    if args.json:
        print(r.model_dump_json(indent=2))
    else:
        t = Table(title=f"{task.name}: {Path(args.candidate).name}")
        for c in ("status", "verified", "trials", "median ms", "±IQR", "baseline ms", "speedup", "device"):
            t.add_column(c)
        tm = r.timing
        t.add_row(r.status, r.verified_by or "-", str(r.trials), f"{tm.median_ms:.4g}" if tm else "-",
                  f"{tm.iqr_ms:.2g}" if tm else "-", f"{tm.baseline_ms:.4g}" if tm else "-",
                  (f"{tm.speedup:.2f}x" + (" (suspect)" if tm.suspect else "")) if tm else "-", f"{r.device} ({r.backend})")
        console.print(t)
        if r.status != "passed":
            console.print(f"[red]{r.status}[/]: {escape(r.message)}")
        if tm:
            console.print(f"[dim]method: {escape(tm.method)}[/]")
    return 0 if r.status in ("passed", "not_runnable") else 1


def cmd_runs(args) -> int:
    store = _store(args)
    rows = store.runs(limit=args.limit)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2, default=str))
        return 0
    t = Table(title=f"runs in {store.path}")
    for c in ("run", "kind", "task / kernel", "status", "candidates", "best"):
        t.add_column(c)
    for r in rows:
        offers = store.offers(r.id)
        best = offers[0] if offers else None
        shown = escape(_result_text(best, store.original(r.id))) if best else (
            "no candidate beat your kernel" if r.kind == "optimize" and r.status == "done" else "-")
        t.add_row(r.id, r.kind, r.task_name or r.kernel or "-", r.status, str(len(store.candidates(r.id))), shown)
    console.print(t)
    return 0


def _result_text(c, original=None) -> str:
    """One candidate in words: the speedup over the original first, the baseline second, the workload named."""
    from .store import vs_original
    res = c.get("result") or {}
    t = c.timing if hasattr(c, "timing") else res.get("timing")
    if c["status"] == "passed" and t:
        vo = vs_original(c, original) if hasattr(c, "timing") else None
        head = f"{vo:.2f}x vs original · " if vo else ""
        return (f"{head}{t['median_ms']:.4g} ms @ {t.get('workload') or '?'} · {t['speedup']:.2f}x vs baseline · "
                f"{res.get('device')} ({res.get('backend')})")
    if c["status"] == "passed":
        return f"verified ({res.get('verified_by')}), not timed"
    return c["status"]


def show_run(store: Store, run_id: str, tree: bool, log: bool = True) -> None:
    """A run's candidates (the headline is the speedup over the user's original, the baseline op second), what
    it offers to accept (Store.offers: the editor offers the same), and its full log."""
    from .runlog import run_log_lines
    from .store import vs_original

    r = store.find_run(run_id)
    if r is None:
        raise UserError(f"no run '{run_id}' in {store.path} (see `ksearch runs`)")
    cands = store.candidates(r.id)
    original = store.original(r.id)
    offers = store.offers(r.id)
    offered = {c.id for c in offers}
    baseline = _baseline_name(r)
    t = Table(title=f"run {r.id} · {r.kind} · {r.task_name or r.kernel or ''} · {r.status} · {len(cands)} evals")
    cols = ("#", "status", "what", "time @ workload", "vs original", f"vs {baseline}", "trials", "device")
    for c in cols:
        # the baseline's name can be long (a kernel's name, "as written ..."): its header wraps, and "what" keeps
        # room for the candidate's description
        wraps = c in ("what", cols[5])
        t.add_column(c, no_wrap=not wraps, overflow="fold", max_width=44 if c == "what" else 22 if wraps else None,
                     min_width=20 if c == "what" else None)
    for c in cands:
        res = c.result or {}
        tm = c.timing
        status = c.status + (" (offered)" if c.id in offered else "")
        if c.status == "passed" and not tm:
            status += f" ({res.get('verified_by') or res.get('backend')}, not timed)"
        vo = vs_original(c, original)
        t.add_row(str(c.seq), status, escape(c.label(90)),
                  f"{tm['median_ms']:.4g} ms @ {tm.get('workload') or '?'}" if tm else "-",
                  ("1.00x (yours)" if c.is_original else f"{vo:.2f}x") if tm and (vo or c.is_original) else "-",
                  (f"{tm['speedup']:.2f}x" + ("!" if tm.get("suspect") else "")) if tm else "-",
                  str(res.get("trials", "-")), f"{(res.get('device') or '').split(' ')[0]} ({res.get('backend', '')})" if res else "-")
    console.print(t)
    if offers:
        best = offers[0]
        console.print(f"offered: {len(offers)} candidate(s); first #{best.seq} ({best.id}): {escape(_result_text(best, original))}")
        if best.timing:
            console.print(f"[dim]method: {escape(best.timing.get('method', ''))}[/]")
    elif r.status == "done" and r.kind == "optimize":
        ot = original.timing if original is not None else None
        at = f" ({ot['median_ms']:.4g} ms @ {ot.get('workload') or '?'})" if ot else ""
        console.print(f"no candidate beat your kernel{at}: nothing to accept")
    if r.message:
        console.print(f"[dim]{escape(r.message)}[/]")
    if log:
        console.print("[bold]log[/]")
        for line in run_log_lines(store, r):
            console.print(escape(line), soft_wrap=True)
    if tree:
        tj = store.latest_tree(r.id)
        if not tj:
            console.print("(no world-model tree stored for this run)")
        else:
            from .worldmodel import render_tree_json
            console.print(render_tree_json(tj))


def _baseline_name(run) -> str:
    task = (run.config or {}).get("task") if isinstance(run.config, dict) else None
    return str(task.get("baseline_name")) if isinstance(task, dict) and task.get("baseline_name") else "baseline"


def cmd_show(args) -> int:
    store = _store(args)
    if args.json:
        from .runlog import run_log_lines
        r = store.find_run(args.run)
        if r is None:
            raise UserError(f"no run '{args.run}'")
        print(json.dumps({"run": r.model_dump(mode="json"), "candidates": [c.model_dump(mode="json") for c in
                                                                           store.candidates(r.id)],
                          "offers": [c.id for c in store.offers(r.id)], "log": run_log_lines(store, r),
                          "events": [e.model_dump(mode="json") for e in store.events(r.id)],
                          "tree": store.latest_tree(r.id)}, indent=2, default=str))
        return 0
    show_run(store, args.run, tree=args.tree)
    return 0


def cmd_cluster_status(args) -> int:
    from .pool import PoolError
    from .pool.status import cluster_status

    try:
        st = cluster_status(args.cluster)
    except PoolError as e:
        raise UserError(str(e)) from None
    if args.json:
        print(json.dumps(st, indent=2, default=str))
        return 0
    t = Table(title=f"Ray cluster {st['address']}")
    for c in ("node", "ip", "state", "backends", "devices", "CPU / GPU", "running"):
        t.add_column(c)
    for n in st["nodes"]:
        backs = ", ".join(f"{b}×{v:g}" for b, v in n["backends"].items()) or "-"
        devs = ", ".join(f"{d}×{v:g}" for d, v in n["devices"].items()) or "-"
        running = "; ".join(
            f"{w['backend']}: " + (f"{w['running']['task']} ({w['running']['label'] or 'candidate'})" if w["running"]
                                   else "idle") + f", {w['done']} done" for w in n["workers"]) or "-"
        state = ("alive" if n["alive"] else "dead") + (" (head)" if n["head"] else "")
        t.add_row(n["name"] or n["node_id"][:12], n["ip"], state, backs, devs, f"{n['cpus']:g} / {n['gpus']:g}", running)
    console.print(t)
    return 0


def cmd_families(args) -> int:
    from . import families

    for n in families.names():
        f = families.get(n)
        console.print(f"{n:14} {f.description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksearch", description="Port and optimize GPU kernels for MLX with a K-Search-style search.")
    p.add_argument("--store", help="results database (default: ./.ksearch/ksearch.db or $KSEARCH_STORE)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="cmd", required=True)
    # --store and --json are accepted after the command too (`ksearch runs --json`); SUPPRESS keeps a value
    # given before the command when the command's own parser does not see one
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    o = sub.add_parser("optimize", parents=[common], help="search for a faster kernel")
    o.add_argument("target", help="a *.task.toml, a family name, or a kernel file")
    o.add_argument("--kernel", help="which kernel in the file")
    o.add_argument("--arg", action="append", metavar="ARG",
                   help="a command-line argument for the program whose launches become the task (repeat)")
    o.add_argument("-D", "--define", action="append", metavar="NAME=VALUE", help="a #define for that program")
    o.add_argument("-I", "--include", action="append", metavar="DIR", help="an include folder, as for nvcc")
    o.add_argument("--proposer", default="offline", choices=["offline", "gemini", "openai"])
    o.add_argument("--model", help="LLM model name (gemini / openai proposers)")
    o.add_argument("--base-url", help="OpenAI-compatible endpoint (mlx_lm.server, Ollama, vLLM)")
    o.add_argument("--backend", choices=["mlx-metal", "mlx-cuda", "mlx-cpu", "sim"], help="default: best present")
    o.add_argument("--budget", type=int, default=EVALUATIONS, help=f"candidate evaluations (default {EVALUATIONS})")
    o.add_argument("--max-seconds", type=float, default=900.0)
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="evaluate on a Ray cluster: ray://HOST:PORT (Ray Client), HOST:PORT (inside the cluster "
                        "network), or 'local' (a one-node Ray here); default: this machine only. Run Ray only on a "
                        "trusted network (docs/cluster.md)")
    o.add_argument("--in-flight", type=int, default=None, metavar="N",
                   help="at most N candidates evaluated at once (default: one per free device of the pool)")
    o.set_defaults(fn=cmd_optimize)

    pt = sub.add_parser("port", parents=[common], help="translate a CUDA kernel to an MLX module and check it")
    pt.add_argument("file")
    pt.add_argument("--kernel", help="port this kernel (default: the file's first)")
    pt.add_argument("--all", action="store_true", help="port every kernel of the file and print a coverage report")
    pt.add_argument("--arg", action="append", metavar="ARG",
                    help="a command-line argument for the program whose launches are captured (repeat: --arg 64)")
    pt.add_argument("-D", "--define", action="append", metavar="NAME=VALUE",
                    help="a #define for the capture (a scaled-down run of a program sized by #defines)")
    pt.add_argument("-I", "--include", action="append", metavar="DIR", help="an include folder, as for nvcc")
    pt.add_argument("--backend", choices=["mlx-metal", "mlx-cuda", "mlx-cpu", "sim"])
    pt.add_argument("--force", action="store_true", help="overwrite an existing, different port module")
    pt.set_defaults(fn=cmd_port)

    e = sub.add_parser("eval", parents=[common], help="verify and time one candidate module")
    e.add_argument("task", help="a *.task.toml or a family name")
    e.add_argument("candidate", help="a Python module defining the task's entry function")
    e.add_argument("--backend", choices=["mlx-metal", "mlx-cuda", "mlx-cpu", "sim"])
    e.add_argument("--timeout", type=float, default=60.0, help="seconds before the candidate is killed")
    e.set_defaults(fn=cmd_eval)

    r = sub.add_parser("runs", parents=[common], help="list runs in the store")
    r.add_argument("--limit", type=int, default=30)
    r.set_defaults(fn=cmd_runs)

    s = sub.add_parser("show", parents=[common], help="show one run's candidates")
    s.add_argument("run", help="run id (a prefix is enough)")
    s.add_argument("--tree", action="store_true", help="print the world-model tree")
    s.set_defaults(fn=cmd_show)

    cl = sub.add_parser("cluster", parents=[common], help="the Ray cluster candidates can be evaluated on")
    cls = cl.add_subparsers(dest="cluster_cmd", required=True)
    cst = cls.add_parser("status", parents=[common], help="nodes, their backends and devices, and what each is evaluating")
    cst.add_argument("--cluster", default=os.environ.get("KSEARCH_CLUSTER", "auto"), metavar="ADDRESS",
                     help="ray://HOST:PORT or HOST:PORT (default: $KSEARCH_CLUSTER, else the cluster started on "
                          "this machine)")
    cst.set_defaults(fn=cmd_cluster_status)

    f = sub.add_parser("families", parents=[common], help="list the built-in kernel families")
    f.set_defaults(fn=cmd_families)
    return p


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has left (the only BrokenPipeError that is not an error)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, 0)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (UserError, TaskError) as e:
        err.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except BrokenPipeError as e:   # `ksearch runs --json | head`: the reader left; not an error of ours
        if not _stdout_gone():     # another pipe broke (a worker's): an error, never a silent exit 0
            err.print(f"[red]error:[/] {escape(f'{type(e).__name__}: {e}')}")
            return 1
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
