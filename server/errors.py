"""Keeps tracebacks out of the editor: every handler reports failures as a message the user can act on."""
from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .state import KsearchServer

log = logging.getLogger(__name__)


class UserError(Exception):
    """A problem the user can fix; its message names the file or kernel and what to do."""


def _file_of(args: tuple) -> str | None:
    for a in args:
        td = getattr(a, "text_document", None)
        uri = getattr(td, "uri", None) if td is not None else None
        if isinstance(a, str) and a.startswith("file:"):
            uri = a
        if uri:
            return Path(uri.split("file://", 1)[-1]).name
    return None


def _report(ls: "KsearchServer", what: str, args: tuple, e: BaseException) -> None:
    if isinstance(e, UserError):
        ls.error(str(e))
        return
    log.exception("%s failed", what)
    where = _file_of(args)
    ls.error(f"{what}{' for ' + where if where else ''} failed: {type(e).__name__}: {e}. "
             f"The server keeps running; if it happens again, report it with the server log.")


def guarded(ls: "KsearchServer", what: str, default: Any = None) -> Callable:
    """Wrap a handler: exceptions become a `window/showMessage`, the handler returns `default`."""
    def deco(f: Callable) -> Callable:
        if asyncio.iscoroutinefunction(f):
            @functools.wraps(f)
            async def wrapper(*args, **kwargs):
                try:
                    return await f(*args, **kwargs)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001
                    _report(ls, what, args, e)
                    return default
        else:
            @functools.wraps(f)
            def wrapper(*args, **kwargs):
                try:
                    return f(*args, **kwargs)
                except Exception as e:  # noqa: BLE001
                    _report(ls, what, args, e)
                    return default
        return wrapper
    return deco
