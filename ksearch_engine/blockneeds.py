"""The block shape a kernel's own checks demand, read from its body where no launch gives one.

A kernel often states the block it was written for: `assert(blockDim.x == BDX);`,
`assert(blockDim.x * blockDim.y == 256);`, `if (blockDim.x != 128) return;`, or `if (blockDim.x % 32) __trap();`
(also `asm("trap;")` or `assert(false)` after the check), in its body or in a `__device__` helper it calls (there a
`return` leaves the helper only, so just the trapping forms count). A made-up block that breaks such a check fails
it in the simulator on every thread, so `portinfer` takes the block nearest the one it would have made up that
meets every check it understands.

A check is understood where, after splitting an assert at its top-level `&&` (a rejecting `if` at its `||`), a part
names `blockDim` and everything else in it has a value: a `#define`, a file-scope or local `const`/`constexpr` int
or enum (launchsites.Scope), the kernel's template arguments and those it instantiates a helper with, `warpSize`.
A part naming anything else (`threadIdx`, a parameter) is left out, so inference behaves as without it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_THREADS = 1024
MAX_DIM = (1024, 1024, 64)         # CUDA's largest block extent per axis
_AXES = "xyz"
_TRAP = re.compile(r"\b__trap\s*\(\s*\)|\basm\s*(?:volatile\s*)?\(\s*\"\s*trap\s*;?\s*\"\s*\)|"
                   r"\bassert\s*\(\s*(?:0|false|!\s*\"[^\"]*\")\s*\)")
_HARMLESS = re.compile(r"\s*(?:\b(?:printf|__trap|assert)\s*\((?:[^()]|\([^()]*\))*\)\s*;|"
                       r"\basm\s*(?:volatile\s*)?\(\s*\"[^\"]*\"\s*\)\s*;|\breturn\s*;|;)")


@dataclass
class Need:
    """One condition the block must meet: the check as written (`assert(blockDim.x == 64)`, `if (blockDim.x % 32)
    return`), where it is, and the Python test of it."""
    text: str
    file: str
    line: int
    axes: str                    # the blockDim axes it names ("x", "xy")
    code: object                 # compiled Python expression over blockDim__x/y/z and the known names
    local: dict
    scope: object                # launchsites.Scope the names are read in

    def holds(self, block) -> bool:
        from .launchsites import _Names
        local = dict(self.local, blockDim__x=block[0], blockDim__y=block[1], blockDim__z=block[2])
        try:
            return bool(eval(self.code, {"__builtins__": {}}, _Names(self.scope, local, None, 0)))
        except Exception:
            return True          # a value it cannot take here (a division by zero): not held against the block

    def where(self) -> str:
        return f"`{self.text}` ({self.file} line {self.line})"


def _split(cond: str, op: str) -> list[str]:
    """`cond` split at top-level `op` (`&&` or `||`), outside any brackets."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(cond):
        ch = cond[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and cond.startswith(op, i):
            out.append(cond[start:i])
            start = i = i + len(op)
            continue
        i += 1
    out.append(cond[start:])
    return [p.strip() for p in out if p.strip()]


def _statement(text: str, at: int) -> tuple[int, int]:
    """(start, end) of the statement starting at `at` in comment-free `text`: a braced block's inside, or up to its
    `;` (past a parenthesised part: `asm("trap;");`); (at, at) where none."""
    from .launchsites import balanced
    at = re.compile(r"\s*").match(text, at).end()
    if text[at:at + 1] == "{":
        end = balanced(text, at, "{", "}")
        return (at + 1, end - 1) if end > 0 else (at, at)
    end = text.find(";", at)
    op = text.find("(", at, end) if end >= 0 else -1
    if op >= 0 and balanced(text, op) > 0:
        end = text.find(";", balanced(text, op))
    return (at, end + 1) if end >= 0 else (at, at)


def _conditions(body: str, in_kernel: bool) -> list[tuple[str, bool, int, str]]:
    """[(C condition, whether it must hold (an assert) rather than fail (a rejecting `if`), offset in body, what
    a rejecting `if` does: "return;" or "__trap();")]."""
    from .launchsites import balanced, strip_comments
    clean = strip_comments(body)
    out = []
    for m in re.finditer(r"\bassert\s*\(", clean):
        end = balanced(clean, m.end() - 1)
        if end > 0:
            out.append((clean[m.end():end - 1], True, m.start(), ""))
    for m in re.finditer(r"\bif\s*\(", clean):
        end = balanced(clean, m.end() - 1)
        if end < 0:
            continue
        a, b = _statement(clean, end)
        stmt = body[a:b]        # (string contents kept: `asm("trap;")`)
        stops = _TRAP.search(stmt) or (in_kernel and re.search(r"\breturn\s*;", clean[a:b]))
        if stmt.strip() and stops and not _HARMLESS.sub("", strip_comments(stmt)).strip():
            out.append((clean[m.end():end - 1], False, m.start(), "__trap();" if _TRAP.search(stmt) else "return;"))
    return sorted(out, key=lambda c: c[2])


def _line_of(source: str, offset: int, filename: str) -> tuple[str, int]:
    """(file, 1-based line) of `offset` in `source`, following `#line N "file"` directives before it."""
    before = source[:offset]
    file, line = filename, before.count("\n") + 1
    for m in re.finditer(r'^[ \t]*#[ \t]*line[ \t]+(\d+)(?:[ \t]+"([^"]*)")?', before, re.M):
        file = m.group(2) or file
        line = int(m.group(1)) + before[m.end():].count("\n") - 1
    return file, line


def block_needs(k, source: str, defines: dict | None = None, template_args=None, *, filename: str = "",
                texts: list[str] | None = None) -> list[Need]:
    """The checks on the block shape that kernel `k` (and the `__device__` helpers it calls) makes, at the
    template arguments `template_args`, that this module understands (see the module's docstring)."""
    from .launchsites import EvalError, Unknown, _Names, _pyexpr, build_scope, evaluate
    from .portinfer import _kernel_tree

    if "blockDim" not in k.body and (not source or "blockDim" not in source):
        return []
    scope = build_scope(texts or [source], {n: v for n, v in (defines or {}).items() if isinstance(v, int)})
    env: dict = {"warpSize": 32}
    for tp, a in zip(k.template_params, template_args or []):
        try:
            v, unk = evaluate(str(a), scope, env)
        except (EvalError, Unknown):
            continue
        if isinstance(v, int) and not unk:
            env[tp.name] = v
    tree, helpers = _kernel_tree(k, source)
    units = [(k, tree[0][1], True)] + [(h, b, False) for h, (_, b) in zip(helpers, tree[1:])]
    out: list[Need] = []
    seen = set()
    for fn, bind, in_kernel in units:
        local = dict(env)
        for name, a in bind.items():
            try:
                v, unk = evaluate(str(a), scope, env)
            except (EvalError, Unknown):
                continue
            if isinstance(v, int) and not unk:
                local[name] = v
        start = (fn.body_byte_range or (None, None))[0]
        body_at = len(source.encode()[:start].decode(errors="replace")) if start is not None and source else None
        for cond, must, off, stops in _conditions(fn.body, in_kernel):
            for part in _split(cond, "&&" if must else "||"):
                if not re.search(r"\bblockDim\s*\.\s*[xyz]\b", part):
                    continue
                axes = "".join(a for a in _AXES if re.search(rf"\bblockDim\s*\.\s*{a}\b", part))
                try:
                    e = _pyexpr(part, scope).replace(" _DIV_ ", " // ")
                    if re.search(r"[{}\[\];\"']|\b(?:new|this|delete)\b|_nosizeof_", e):
                        continue
                    code = compile(e if must else f"not ({e})", "<check>", "eval")
                    probe = dict(local, blockDim__x=1, blockDim__y=1, blockDim__z=1)
                    eval(code, {"__builtins__": {}}, _Names(scope, probe, None, 0))
                except (Unknown, SyntaxError, ValueError, TypeError):
                    continue       # a name with no value here (threadIdx, a parameter): not understood
                except Exception:
                    pass           # a value the probe block cannot take (1 / (blockDim.x - 1)): still a check
                text = " ".join(part.split())
                text = f"assert({text})" if must else f"if ({text}) {stops}"
                if body_at is not None:
                    file, line = _line_of(source, body_at + off, filename)
                else:
                    file, line = filename, 0
                if (text, file, line) in seen:
                    continue
                seen.add((text, file, line))
                out.append(Need(text=text, file=file, line=line, axes=axes, code=code, local=local, scope=scope))
    return out


def fit_block(block, needs: list[Need]) -> tuple[int, int, int] | None:
    """`block` where it meets every need, else the block nearest it that does (fewest axes moved, then the
    smallest change in log2 of each axis and of the thread count, powers of two first); None where no block of at
    most 1024 threads meets them all."""
    block = tuple(list(block) + [1, 1])[:3]
    needs = sorted(needs, key=lambda n: n.holds(block))     # the ones the block breaks first: they fail soonest
    if all(n.holds(block) for n in needs):
        return block
    free = {_AXES.index(a) for n in needs for a in n.axes}
    ranges = [range(1, MAX_DIM[i] + 1) if i in free else (block[i],) for i in range(3)]
    base = math.log2(max(1, block[0] * block[1] * block[2]))
    cands = []
    for b in ((x, y, z) for x in ranges[0] for y in ranges[1] if x * y <= MAX_THREADS
              for z in ranges[2] if x * y * z <= MAX_THREADS):
        t = b[0] * b[1] * b[2]
        moved = sum(1 for i in range(3) if b[i] != block[i])
        dist = sum(abs(math.log2(b[i]) - math.log2(block[i])) for i in range(3))
        pow2 = sum(1 for x in b if x & (x - 1))
        cands.append(((moved, round(dist, 6), round(abs(math.log2(t) - base), 6), pow2, b), b))
    cands.sort()
    for _, b in cands:
        if all(n.holds(b) for n in needs):
            return b
    return None


def static_checks(k) -> list[str]:
    """The conditions of the `static_assert`s in kernel `k`'s body (their messages left out): what its template
    arguments must meet (`static_assert(BLOCK_THREADS % 64 == 0, "...")`)."""
    from .launchsites import balanced, split_top, strip_comments
    clean = strip_comments(k.body)
    out = []
    for m in re.finditer(r"\bstatic_assert\s*\(", clean):
        end = balanced(clean, m.end() - 1)
        if end > 0:
            parts = split_top(clean[m.end():end - 1])
            if parts and parts[0]:
                out.append(parts[0])
    return out
