"""`ksearch-lsp` / `python -m ksearch_server`: the language server over stdio (default) or TCP."""
from __future__ import annotations

import argparse
import logging
import os
import sys


def _safe_path() -> None:
    """Keep the working directory (a cloned repository, when an editor starts us in it) off the import path:
    a `ksearch_engine/` folder there must never be imported instead of ours, here or in any Python we start.
    (The editor runs `python -P -m ksearch_server` from a folder of its own, so our own package is never
    looked up in the workspace either; this covers a server started by hand without -P.)"""
    os.environ["PYTHONSAFEPATH"] = "1"
    cwd = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != cwd]


_safe_path()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ksearch-lsp", description="ksearch language server")
    ap.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    ap.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdio")
    ap.add_argument("--log-file", help="write the server log here (secrets are redacted)")
    ap.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = ap.parse_args(argv)

    from .app import create_server

    ls = create_server()
    handler: logging.Handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.addFilter(ls.redactor)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, args.log_level), handlers=[handler], force=True)

    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        try:
            ls.start_tcp(host or "127.0.0.1", int(port))
        except ValueError:
            ap.error(f"--tcp wants HOST:PORT, got {args.tcp!r}")
    else:
        ls.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
