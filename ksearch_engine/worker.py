"""A job's own process: `python -m ksearch_engine.worker REQUEST.json`.

Runs one search or port described by a SearchRequest, prints each event as a JSON line on stdout, records
everything in the store, and exits. SIGTERM (the editor's cancel) ends it as 'cancelled' with the store
consistent: every write is its own transaction, and the run's final status is written before exit.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from .events import DoneEvent, ErrorEvent, SearchRequest
from .store import Store


class Cancelled(BaseException):
    """Raised inside the job when the worker is asked to stop. A BaseException (like KeyboardInterrupt): the
    broad `except Exception` guards of porting and capture (one kernel's failure never stops the others) must not
    swallow a cancel that arrives while they run (the run then went on to 'done')."""


def _emitter(store: Store, run_id: str):
    def emit(event) -> None:
        event.run_id = run_id
        line = event.model_dump_json()
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if event.type != "log" or event.level != "info":
            try:
                store.add_event(run_id, event.type, json.loads(line))
            except Exception:  # noqa: BLE001 - the event stream must not die on a busy database
                pass
    return emit


def _is_user_error(e: BaseException) -> bool:
    """Our own errors already say what went wrong and what to do: shown as they are. Anything else is a bug of
    ours or a library's, shown with its type (and its traceback kept in the store's log_tail)."""
    from .pool import PoolError
    from .port import PortError
    from .search import SearchError
    return isinstance(e, (SearchError, PortError, PoolError))


def run_job(req: SearchRequest, emit=None) -> DoneEvent:
    """Run one job in this process (the CLI uses this directly; the server through a worker process)."""
    store = Store(req.store_path)
    if not req.run_id:
        req.run_id = store.create_run(req.kind, file=req.source_file, kernel=req.kernel, proposer=req.proposer,
                                      backend=req.backend or "", doc_version=req.doc_version,
                                      config=req.model_dump(mode="json"))
    emit = emit or _emitter(store, req.run_id)
    store.update_run(req.run_id, status="running", worker_pid=os.getpid())

    def on_term(signum, frame):  # noqa: ARG001
        raise Cancelled()
    prev = signal.signal(signal.SIGTERM, on_term)
    try:
        if req.kind == "port":
            from .port import run_port
            done = run_port(req, store, emit)
        else:
            from .search import run_search
            done = run_search(req, store, emit)
    except Cancelled:
        done = DoneEvent(status="cancelled", message="cancelled by the user")
    except Exception as e:  # noqa: BLE001 - reported to the user, with the log kept in the store
        tail = traceback.format_exc()[-4000:]
        store.update_run(req.run_id, log_tail=tail)
        # a user's mistake reads as itself; a fault of ksearch's own says so, and where its trace is kept
        msg = str(e) if _is_user_error(e) else (
            f"ksearch hit an internal error ({type(e).__name__}: {e}); nothing of yours was changed — the trace "
            f"is kept with the run (ksearch show {req.run_id} --json), please report it")
        emit(ErrorEvent(message=msg))
        done = DoneEvent(status="failed", message=msg)
    finally:
        signal.signal(signal.SIGTERM, prev)
    best = done.best_candidate or (store.run(req.run_id) or {}).get("best_candidate")
    done.best_candidate = best
    store.update_run(req.run_id, status=done.status, message=done.message, best_candidate=best)
    emit(done)
    return done


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 1:
        print("usage: python -m ksearch_engine.worker REQUEST.json", file=sys.stderr)
        return 2
    req = SearchRequest.model_validate_json(Path(argv[0]).read_text())
    done = run_job(req)
    return 0 if done.status == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
