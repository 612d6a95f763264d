"""Writing CUDA test sources to disk and finding their lines: shared by the capture and port tests."""
from __future__ import annotations

import textwrap
from pathlib import Path


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` holding `needle` (as written to disk by write())."""
    return next(i for i, ln in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in ln)


def write(tmp_path: Path, name: str, text: str) -> Path:
    """`text`, dedented, as tmp_path/name (folders made)."""
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def port_checked(src: str, kernel: str, args: dict, grid=(2, 1, 1), block=(64, 1, 1), shared_mem: int = 0,
                 path: str = "t.cu"):
    """(translation, check) of `kernel` of the CUDA text `src`: both ports' launch() against the original in the CPU
    simulator on one launch with `args`."""
    from ksearch_engine.source import find_kernels
    from ksearch_engine.translate import translate_kernel
    from ksearch_engine.translate.check import check_port

    parsed = find_kernels(src, str(path))
    tr = translate_kernel(parsed, kernel, str(path))
    res = check_port(tr.module_text, src, kernel, {"args": args, "grid": grid, "block": block,
                                                    "shared_mem": shared_mem, "template_args": []},
                     filename=str(path))
    return tr, res


def assert_ported(res) -> None:
    """Both ports reproduce the original (which itself ran)."""
    assert res.original_error is None, res.original_error
    assert res.dialects == {"metal": "passed", "cuda": "passed"}, res.message


def port_and_capture(folder: Path, name: str, text: str):
    """(port report, capture) of the program `text` written as folder/name: every kernel ported (nothing written
    next to it) and the program captured again into folder/cap, with a capture cache of its own."""
    import pytest

    from ksearch_engine.portfile import port_file
    from ksearch_engine.sim.capture import capture_program

    src = folder / name
    src.write_text(text)
    mp = pytest.MonkeyPatch()
    mp.setenv("KSEARCH_CAPTURE_CACHE", str(folder / "cache"))
    try:
        return port_file(src, write=False), capture_program(src, workdir=str(folder / "cap"))
    finally:
        mp.undo()
