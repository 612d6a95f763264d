"""bench/ports_vs_nvcc.py's package for the GPU machine carries what nvcc needs to build the original as its program
does: every local #include reachable from the file (or from its program's prefix), whatever its suffix or folder."""
from __future__ import annotations

from pathlib import Path

from bench.ports_vs_nvcc import _copy_tree_for, _depth_up, _local_includes


def _tree(root: Path) -> Path:
    (root / "kernel").mkdir(parents=True)
    (root / "main.h").write_text('#define N 4\n#include "common/sizes.h"\n')
    (root / "common").mkdir()
    (root / "common" / "sizes.h").write_text("#define M 8\n")
    (root / "kernel" / "define.c").write_text("typedef float fp;\n")
    k = root / "kernel" / "k.cu"
    k.write_text('#include "define.c"\n__global__ void k(fp* x) { x[0] = N + M; }\n')
    return k


def test_includes_of_any_suffix_and_folder_are_found_through_the_programs_prefix(tmp_path):
    k = _tree(tmp_path / "app")
    assert [rel for _, rel in _local_includes(k)] == ["define.c"]
    prefixed = '#include "./../main.h"\n' + k.read_text()    # what the program's #include of k.cu puts first
    rels = sorted(rel for _, rel in _local_includes(k, prefixed))
    assert rels == ["../common/sizes.h", "../main.h", "define.c"]
    assert _depth_up(k) == 0 and _depth_up(k, prefixed) == 1


def test_the_copy_keeps_each_include_where_the_file_finds_it(tmp_path):
    k = _tree(tmp_path / "app")
    prefixed = '#include "./../main.h"\n' + k.read_text()
    dest = tmp_path / "pkg" / "slug" / "src" / "up"      # as deep as the includes reach up
    _copy_tree_for(k, dest, [str(k.parent)], tmp_path / "pkg" / "includes", prefixed)
    assert (dest / "k.cu").is_file() and (dest / "define.c").is_file()
    assert (dest / ".." / "main.h").resolve().is_file()
    assert (dest / ".." / "common" / "sizes.h").resolve().is_file()
