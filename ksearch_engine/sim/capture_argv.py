"""Command lines made up for a program that needs sizes on its command line and documents none that can run.

Many benchmark programs take their problem sizes as arguments and generate their input from them
(`pathfinder row_len col_len pyramid_height`, `lud -s matrix_size`, `particlefilter -x <dimX> -y <dimY> ...`).
When the bare run stops for want of arguments and no documented command line runs (capture.py), the capture
reads what the program itself says it takes:

* its code: each `argv[k]` (a constant k) that it converts to a number (atoi/atol/strtol/atof/strtod, or sscanf
  with a numeric format) or compares with a literal (`strcmp(argv[1], "-x")`). Where every slot from 1 to the
  highest one used is a number or a literal, the command line is those literals with small sizes between them;
* its usage message: `-s matrix_size`, `-x <dimX>` pairs whose placeholder is no file name, where the message
  names no positional argument.

Only sizes are made up, never input data. A slot the program takes as a file name (`fopen(argv[k], ...)`,
`strcpy(name, argv[k])`, `std::string s = argv[k]`) gets a path in the capture's scratch folder that does not exist:
a program that writes its result there, or reads the file only when a size says so (`if n > 0, points are
generated`), runs; one that reads it stops as without arguments. Any other use of a slot stops the synthesis. The
capture says so in a note naming the values, so the user can pass their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SIZE_VALUE = 32       # a made-up integer argument: small for the CPU, past most programs' lower bounds
SMALLER_VALUE = 16    # the second try, where the first did not launch a kernel
FLOAT_VALUE = "0.5"   # a made-up real argument (a rate, a lambda)
MAX_SLOTS = 12

_SLOT = r"argv\s*\[\s*(\d+)\s*\]"
_INT_CONVERT = re.compile(r"\b(?:atoi|atol|atoll|strtol|strtoul|strtoll|strtoull|stoi|stol|stoul)\s*\(\s*" + _SLOT)
_REAL_CONVERT = re.compile(r"\b(?:atof|strtod|strtof|strtold|stof|stod)\s*\(\s*" + _SLOT)
_SCANF = re.compile(r'\bsscanf\s*\(\s*' + _SLOT + r'\s*,\s*"\s*%\s*(?:\d*)(h{0,2}|l{0,2}|z|j)([diuxfeg])')
_LITERAL = re.compile(r'\bstrn?cmp\s*\(\s*' + _SLOT + r'\s*,\s*"([^"\\]{1,24})"')
_ANY = re.compile(r"\b" + _SLOT)
_PATH_USE = re.compile(r"\b(?:(?:strn?cpy|strn?cat)\s*\(\s*[\w.\->\[\]]+\s*,\s*|fopen\s*\(\s*|open\s*\(\s*|"
                       r"[io]?fstream\s+\w+\s*\(\s*|std::string\s+\w+\s*(?:=|\(|\{)\s*|"
                       r"(?:const\s+)?char\s*\*\s*(?:const\s+)?\w+\s*=\s*)" + _SLOT + r"\s*[,;)}]")
_READS_NUMBER = re.compile(r"\b(?:ato[ifl]l?|strto\w+|sto[ifdlu]l?|sscanf)\s*\(\s*(?:argv|optarg)\b")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_FILE_WORD = re.compile(r"(?i)file|path|dir|name|input|output|image|img|data|\.(?:txt|dat|bin|pgm|ppm|bmp|csv)\b")
_OPTION = re.compile(r"^-{1,2}[A-Za-z][\w-]*$")


@dataclass
class MadeUpRun:
    """A command line chosen by the capture (not documented by the program)."""
    argv: list[str]
    why: str                                          # what it was read from, for the note
    sizes: list[str] = field(default_factory=list)   # the made-up values, in order


def _code(texts: dict[Path, str]) -> str:
    return "\n".join(_COMMENT.sub(" ", t) for t in texts.values())


def slots_from_code(texts: dict[Path, str]) -> dict[int, str] | None:
    """{k: "int" | "real" | "path" | "=literal"} for argv[1..m] as the program reads them, or None where a slot is
    used otherwise (a string it compares or prints) or a slot between is never read."""
    code = _code(texts)
    used = {int(m.group(1)) for m in _ANY.finditer(code)} - {0}
    if not used or max(used) > MAX_SLOTS:
        return None
    kinds: dict[int, str] = {}
    for m in _LITERAL.finditer(code):
        kinds.setdefault(int(m.group(1)), "=" + m.group(2))
    for m in _INT_CONVERT.finditer(code):
        kinds.setdefault(int(m.group(1)), "int")
    for m in _REAL_CONVERT.finditer(code):
        kinds.setdefault(int(m.group(1)), "real")
    for m in _SCANF.finditer(code):
        kinds.setdefault(int(m.group(1)), "real" if m.group(3) in "feg" else "int")
    for m in _PATH_USE.finditer(code):
        kinds.setdefault(int(m.group(1)), "path")
    top = max(used)
    if any(k not in kinds for k in range(1, top + 1)):
        return None
    if all(v.startswith("=") or v == "path" for v in kinds.values()):
        return None   # flags and names only: nothing to size
    return {k: kinds[k] for k in range(1, top + 1)}


def _usage_lines(output: str) -> list[str]:
    out = []
    for ln in output.splitlines():
        s = ln.strip()
        m = re.search(r"(?i)\busage\s*:?\s*(.*)", s)
        if m:
            out.append(m.group(1))
        elif re.match(r"^\S+\s+-{1,2}[A-Za-z]\w*\s+<[^>]+>", s):   # "prog -x <dimX> -y <dimY>": printed bare
            out.append(s)
    return out


def options_from_usage(output: str) -> list[tuple[str, str]]:
    """[(option, placeholder)] of the first usage line that takes sized options and no positional argument:
    `[-v] [-s matrix_size|-i input_file]` gives [("-s", "matrix_size")] (flags and file options left out)."""
    for line in _usage_lines(output):
        toks = re.findall(r"<[^>]*>|[^\s\[\]|/(){}]+", line)
        if not toks:
            continue
        toks = toks[1:] if not _OPTION.match(toks[0]) else toks   # the program's name
        pairs, positional, i = [], False, 0
        while i < len(toks):
            t = toks[i]
            if _OPTION.match(t):
                nxt = toks[i + 1] if i + 1 < len(toks) else None
                if nxt is not None and not _OPTION.match(nxt):
                    if not _FILE_WORD.search(nxt):
                        pairs.append((t, nxt.strip("<>")))
                    i += 2
                    continue
                i += 1
                continue
            if t not in ("or", "OR", "..."):
                positional = True
            i += 1
        if pairs and not positional:
            return pairs
    return []


def made_up_runs(texts: dict[Path, str], output: str, scratch: Path) -> list[MadeUpRun]:
    """The command lines to try, first the one read from the code, then one from the usage message; each at
    SIZE_VALUE and then SMALLER_VALUE. A file-name slot gets a path under scratch that does not exist."""
    runs: list[MadeUpRun] = []
    slots = slots_from_code(texts)
    pairs = options_from_usage(output) if slots is None else []
    numeric = bool(_READS_NUMBER.search(_code(texts)))
    for size in (SIZE_VALUE, SMALLER_VALUE):
        if slots:
            argv = [v[1:] if v.startswith("=") else str(scratch / f"argv{k}") if v == "path" else
                    (str(size) if v == "int" else FLOAT_VALUE) for k, v in sorted(slots.items())]
            paths = [str(k) for k, v in sorted(slots.items()) if v == "path"]
            runs.append(MadeUpRun(argv, "the arguments its code converts to numbers" + (
                f" (argument{'s' if len(paths) > 1 else ''} {', '.join(paths)}, a file name, given a new path in the "
                "capture's scratch folder: no input data is made up)" if paths else ""),
                                  [a for a, (_, v) in zip(argv, sorted(slots.items())) if v in ("int", "real")]))
        elif pairs and numeric:
            argv = [x for opt, _ in pairs for x in (opt, str(size))]
            runs.append(MadeUpRun(argv, "the options its usage message names (" +
                                  ", ".join(f"{o} {p}" for o, p in pairs) + ")", [str(size)] * len(pairs)))
    return runs
